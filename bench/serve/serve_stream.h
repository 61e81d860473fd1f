/* The stream of `ssmstate serve`: requests flowing through one context at a
 * capped concurrency, step by step, as an engine serves them (docs/serve.md,
 * "What it simulates"). Only the public API touches the state. */
#ifndef SSM_TOOLS_SERVE_STREAM_H
#define SSM_TOOLS_SERVE_STREAM_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "serve.h"
#include "serve_data.h"
#include "tools/device.h"
#include "serve_log.h"

/* A context and the buffers its steps use, kept across concurrency levels. */
typedef struct serve_engine {
    ssm_ctx *ctx;
    const cli_device *dev;
    const serve_data *data;
    const serve_options *o;
    int32_t capacity;         /* slots of the context: the most concurrency */
    int32_t tokens;           /* T of a round */
    int32_t history;          /* replay's L, to count folds; 0: not replay */
    void *out_prefill;        /* device [chunk][HV V]: every layer's prefill outputs */
    void *out_verify;         /* device [capacity T][HV V]: every layer's verify outputs */
    int32_t *meta;            /* device: a step's slots, token offsets, accepted lengths */
    int32_t *meta_host;       /* their host copy (the host's bookkeeping reads it) */
    void **export_window, **export_state; /* device [layers]: a checked request's final state */
    const uint8_t *check_layers; /* [layers]: the layers a checked request's log keeps (set
                                  * by the caller before a level that checks) */
} serve_engine;

/* Sets up an engine on ctx (created with `capacity` slots, T = 1 +
 * SERVE_DRAFTS). `history` is replay's L for fold counting (0 for other
 * modes). Returns 0, or -1 with a message and nothing allocated. */
int serve_engine_create(serve_engine *e, ssm_ctx *ctx, int32_t capacity, int32_t history,
                        const cli_device *dev, const serve_data *data, const serve_options *o,
                        char *error, size_t len);
void serve_engine_destroy(serve_engine *e);

/* Runs one concurrency level from an empty pool: arrivals at out->rate (set
 * by the caller) per step, at most `concurrency` requests holding slots;
 * warm-up steps until max(concurrency, check) requests have finished (at
 * most o->warmup_steps), then o->steps measured steps, whose numbers go into
 * *out; at the end every slot is released. When check > 0, requests
 * 0 .. check-1 are logged during the warm-up into logs[0 .. check) (created
 * here; the caller destroys them). A progress line goes to stderr every
 * SERVE_PROGRESS_SECONDS (unless quiet). Returns 0; 1 when serve_interrupted
 * stopped it (a message says where; *out holds the steps measured so far,
 * maybe none); or -1 with a message. */
int serve_engine_level(serve_engine *e, int32_t concurrency, int32_t check, serve_log **logs,
                       serve_point *out, char *error, size_t len);

#endif
