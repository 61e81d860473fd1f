/* The cross-check of `ssmstate serve`: the logged requests' calls replayed,
 * with the very same inputs, weights and accepted lengths, through CPU
 * contexts, and every output of the checked layers (and each finished
 * request's final state there) compared with what the run wrote, by
 * tools/compare.h. Each (request, layer) is replayed on its own through a
 * one-layer CPU context (layers are independent), on a pool of threads; a
 * layer's outputs of the whole request are compared as one tensor, as the
 * numerics contract reads relative RMS ("over the whole tensor",
 * docs/numerics.md). The result does not depend on the number of threads. */
#ifndef SSM_TOOLS_SERVE_CHECK_H
#define SSM_TOOLS_SERVE_CHECK_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "serve.h"
#include "serve_data.h"
#include "serve_log.h"

/* The layers the check compares: `spec` NULL or "ends" (the first, the
 * middle one, layers / 2, and the last), "all", or indices "0,17,35".
 * Sets mask[l] (mask has `layers` entries) for each. Returns how many, or -1
 * for bad syntax or an index outside [0, layers). */
int32_t serve_check_layers(const char *spec, int32_t layers, uint8_t *mask);

/* Replays logs[0 .. count) (NULL entries skipped) through CPU contexts made
 * from `base` with mode `mode`, state dtype `state_dtype`, one layer, one
 * slot and T = 1 + SERVE_DRAFTS, reading the inputs and weights from data's
 * host copies. `result` comes with against, outputs_bitwise and
 * states_bitwise set; this fills the rest: ran = 1, the counts, the
 * difference, pass, and error when the check could not run (pass 0 then).
 * With no logged call at all the check fails and says so. The (request,
 * layer) replays run on `threads` threads, the calling one among them (0:
 * one per CPU of the affinity mask), never more than there are replays; whatever the
 * count, the result is what running them one by one in (request, layer)
 * order gives: every difference up to the first replay that failed, and
 * that replay's error. */
void serve_check_run(const ssm_config *base, const char *mode, ssm_dtype state_dtype,
                     const serve_data *data, serve_log *const *logs, int32_t count,
                     int32_t threads, serve_check_result *result);

#endif
