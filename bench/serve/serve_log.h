/* What `ssmstate serve` keeps of a checked request: each library call it was
 * in (enough to rebuild the call's inputs from the input pool) and, for each
 * checked layer, every output the run wrote for it, in call order; when it
 * finished while logged, those layers' final canonical state. serve_check.c replays the calls
 * on the CPU and compares. */
#ifndef SSM_TOOLS_SERVE_LOG_H
#define SSM_TOOLS_SERVE_LOG_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"

typedef enum serve_call_kind { SERVE_PREFILL = 0, SERVE_VERIFY = 1 } serve_call_kind;

/* One row of one step. Its inputs in layer l are the pool tokens from
 * serve_pool_offset(step, l, kind, batch_tokens) + row_offset on. */
typedef struct serve_call {
    serve_call_kind kind;
    int64_t step;          /* the step's number within its concurrency level */
    int64_t batch_tokens;  /* tokens of the whole batch (prefill or verify) */
    int64_t row_offset;    /* the row's first token within the batch */
    int32_t tokens;        /* the row's tokens: a prompt piece, or T */
    int32_t keep;          /* tokens it commits: the piece, or the accepted length */
} serve_call;

typedef struct serve_log {
    int64_t request;
    ssm_model_dims model;
    ssm_dtype state_dtype, act;
    serve_call *calls;
    int32_t count, capacity;
    int64_t tokens;        /* outputs per layer so far (sum of the calls' tokens) */
    int64_t room;          /* outputs each out[l] has room for */
    uint8_t *checked;      /* [layers]: 1 for the layers kept */
    void **out;            /* [layers] [room][HV V] activation dtype; NULL: not kept */
    void **window, **state;/* [layers] canonical form at the end (kept layers); NULL until
                            * finished */
    int finished;
    int failed;            /* an allocation failed: the log is incomplete */
} serve_log;

/* An empty log of the layers l with checked[l] set (checked has
 * m->layers entries; copied); NULL when out of memory. */
serve_log *serve_log_create(int64_t request, const ssm_model_dims *m, ssm_dtype state_dtype,
                            ssm_dtype act, const uint8_t *checked);
void serve_log_destroy(serve_log *log); /* NULL is fine */

/* Appends a call and makes room for its outputs. Returns where a kept
 * layer's outputs of the call go (serve_log_outputs), or -1 (log->failed)
 * when out of memory. */
int64_t serve_log_add(serve_log *log, const serve_call *call);

/* A kept layer's outputs from token `at` on. */
void *serve_log_outputs(const serve_log *log, int32_t layer, int64_t at);

/* Allocates the final window [W-1][D] and state [HV][V][K] of every kept
 * layer (the caller fills them) and marks the log finished. Returns 0, or -1
 * (log->failed) when out of memory. */
int serve_log_finish(serve_log *log);

#endif
