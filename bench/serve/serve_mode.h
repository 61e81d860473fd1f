/* One mode of `ssmstate serve` under one (config, state dtype): what a slot
 * costs and how many the budget holds (ssm_config_plan), the concurrency
 * sweep on one context of that many slots, and the cross-check at the
 * largest level. */
#ifndef SSM_TOOLS_SERVE_MODE_H
#define SSM_TOOLS_SERVE_MODE_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "serve.h"
#include "serve_data.h"
#include "tools/device.h"

/* The config a mode runs under: base with `mode`, the state dtype, the
 * device, `slots` slots and T = 1 + SERVE_DRAFTS (shallow copy: strings stay
 * base's). */
ssm_config serve_mode_config(const ssm_config *base, const char *mode, ssm_dtype state,
                             ssm_device device, int32_t slots);

/* Fills m->mode, m->plan (one slot) and m->max_concurrent = floor((budget -
 * shared bytes) / bytes per slot); on failure (the plugin, or a budget that
 * holds no request) m->error says why and max_concurrent is 0. */
void serve_mode_plan(const ssm_config *base, const char *mode, ssm_dtype state, ssm_device device,
                     uint64_t budget, serve_mode_result *m);

/* The concurrency levels of a mode, ascending and distinct, into levels
 * (room for SERVE_MAX_POINTS): the --concurrency entries (powers of two when
 * none) below `max`, native's largest level when below `max` (`native_max`,
 * 0: none), and `max`. Returns the count. */
int32_t serve_mode_levels(const serve_options *o, int32_t max, int32_t native_max,
                          int32_t *levels);

/* Runs a planned mode (m->max_concurrent > 0): one context, every level, the
 * check at the largest, the context's status flags. Failures land in
 * m->error (the levels measured so far stay); so does an interruption
 * (serve_interrupted: the levels so far and the part of the level it
 * stopped stay, no check runs; a mode it finds set does not run). */
void serve_mode_run(const ssm_config *base, const serve_options *o, const cli_device *dev,
                    const serve_data *data, ssm_dtype state, int32_t native_max,
                    serve_mode_result *m);

#endif
