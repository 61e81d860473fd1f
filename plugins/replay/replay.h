/* The replay mode (docs/modes.md): per slot and layer a checkpoint state, a
 * history of up to L token records and a cursor n (records committed since the
 * checkpoint). Decode and verify are output-only (kernels/replay.h): they read
 * the checkpoint and the records, append one record per token after the cursor,
 * and never write the checkpoint; commit of a moves the cursor by a, so
 * rejected records are overwritten by the next step. A step that could overflow
 * the history (n + 2T > L) first folds: the n committed raw records go through
 * ssm_record_apply, native's update, into the checkpoint, which is then
 * native's state at that token bit for bit, and n returns to 0. A fold changes
 * no logical state, so it may happen whenever it is convenient.
 *
 * The cursor is per (slot, layer) because each layer is stepped by its own
 * call: a layer folds when its own history is full. The conv window is the
 * shared buffer of plugins/common/conv_buffer.h, exactly as in the other modes. */
#ifndef SSM_REPLAY_H
#define SSM_REPLAY_H

#include "plugins/common/cpu_steps.h"
#include "plugins/common/mode.h"
#include "kernels/replay.h"
#include "plugins/common/tune_entries.h"
#include "ssmstate/plugin.h"

/* How decode and verify compute outputs ([replay] outputs). Without the
 * key, each device takes its default (replay_default_outputs in replay.c):
 * identity on a CUDA context over an fp32 state, exact elsewhere. */
typedef enum replay_outputs {
    /* The committed records run through native's update on a scratch copy
     * of the checkpoint, then the new tokens: outputs are native's bit for
     * bit (same device), at the price of re-running the history per step.
     * Nothing is written but records and outputs. */
    REPLAY_OUTPUTS_EXACT = 0,
    /* The replay identity token by token (any gate): no state update, and
     * within the numerics contract's bound of native's outputs
     * (docs/numerics.md). Refused over a bf16 state (docs/modes.md). */
    REPLAY_OUTPUTS_IDENTITY,
    /* The identity in matrix form: GDN only. */
    REPLAY_OUTPUTS_MATRIX
} replay_outputs;

/* The [replay] options. */
typedef struct replay_options {
    int32_t history;        /* L: records per (slot, layer), a power of two >= 2 T_max */
    replay_outputs outputs; /* how outputs are computed */
    /* [replay] outputs was given. Without it the form is the device's
     * default, which falls back to exact where the GPU cannot run the
     * identity for this history (replay_cuda.cu); a form that was asked for
     * is refused there instead. */
    int outputs_set;
    /* A decode of at most this many rows folds its own token into the
     * checkpoint (the ring stays empty): at small batch sizes a step's cost
     * is latency, and a fold-every-step decode is native's in-place update. */
    int32_t fold_rows;
} replay_options;

typedef struct replay_mode {
    ssm_mode_base base;          /* params, services, this device's methods */
    replay_options options;
    size_t state_bytes;          /* one layer's [HV][V][K] in the state dtype */
    size_t conv_bytes;           /* one layer's conv buffer (window + tail) */
    size_t record_bytes;         /* one replay record */
    uint8_t *checkpoints;        /* [capacity][layers][state] */
    uint8_t *conv;               /* [capacity][layers][conv buffer] */
    uint8_t *records;            /* [capacity][layers][L][record] */
    int32_t *cursors;            /* [capacity][layers]: n, committed records */
    /* Host working memory of one row at a time. */
    float *scratch;              /* the reference kernels' scratch, and the fold's */
    float *conv_out;             /* [D]: one token's conv output */
    float *keys;                 /* [L][H][K]: normalized keys of the history */
    float *outputs_scratch;      /* ssm_replay_outputs' scratch */
    uint8_t *work;               /* [HV][V][K] state dtype: the exact form's running state */
    ssm_ref_token *tokens;       /* [T_max] tokens of a row, bound into scratch */
    struct replay_gpu *gpu;      /* CUDA contexts: ring starts and scratch (replay_cuda.cu) */
} replay_mode;

static inline size_t replay_index(const replay_mode *r, int32_t slot, int32_t layer)
{
    return (size_t)slot * r->base.params.model.layers + layer;
}

static inline uint8_t *replay_checkpoint(const replay_mode *r, int32_t slot, int32_t layer)
{
    return r->checkpoints + replay_index(r, slot, layer) * r->state_bytes;
}

static inline uint8_t *replay_conv(const replay_mode *r, int32_t slot, int32_t layer)
{
    return r->conv + replay_index(r, slot, layer) * r->conv_bytes;
}

static inline uint8_t *replay_records(const replay_mode *r, int32_t slot, int32_t layer)
{
    return r->records + replay_index(r, slot, layer) * r->options.history * r->record_bytes;
}

static inline int32_t *replay_cursor(const replay_mode *r, int32_t slot, int32_t layer)
{
    return r->cursors + replay_index(r, slot, layer);
}

/* Applies the committed records of (slot, layer) in order to `state`
 * ([HV][V][K], state dtype): the checkpoint's own memory (a fold) or a copy
 * of it (export). Leaves the cursor alone. */
void replay_apply_committed(replay_mode *r, int32_t slot, int32_t layer, void *state);

/* Folds (slot, layer): checkpoint := native's state after its committed
 * records, n := 0. Changes no logical state, provided no verify of the slot
 * is waiting for its commit (its records sit after the cursor): the core
 * refuses transfers then, and a step folds before it appends. */
void replay_fold(replay_mode *r, int32_t slot, int32_t layer);

/* Where the shared CPU drivers find a slot's conv buffer and checkpoint. */
void *replay_cpu_conv_of(void *instance, int32_t slot, int32_t layer);
void *replay_cpu_checkpoint_of(void *instance, int32_t slot, int32_t layer);
ssm_cpu_target replay_cpu_target(replay_mode *r);

/* The methods on the CPU (replay_cpu_ops, in replay.c, with the steps of
 * replay_step.c) and, in a CUDA build, on the GPU (replay_cuda.cu;
 * plugins/common/device_check.h says which configs it takes). */
extern const ssm_mode_ops replay_cpu_ops;
extern const ssm_mode_ops replay_cuda_ops;
ssm_status replay_cpu_prefill(void *instance, const ssm_step_v1 *step);
ssm_status replay_cpu_decode(void *instance, const ssm_step_v1 *step);
ssm_status replay_cpu_verify(void *instance, const ssm_step_v1 *step);
ssm_status replay_cpu_commit(void *instance, const ssm_commit_v1 *commit);

/* The GPU path's life cycle and the functions replay_cuda_ops holds, with
 * the contracts of the plugin methods of the same names. */
size_t replay_cuda_scratch_bytes(const ssm_mode_params_v2 *p);
size_t replay_cuda_shared_bytes(const ssm_mode_params_v2 *p);
size_t replay_cuda_record_bytes(const ssm_mode_params_v2 *p);
ssm_status replay_cuda_create(replay_mode *r);
void replay_cuda_destroy(replay_mode *r);

/* Tuning on the GPU (plugins/common/cuda/tune.cuh; the tune_* entries of
 * plugin_v1.h, through plugins/common/tune_entries.h). */
SSM_TUNE_CUDA_DECLS(replay, replay_mode);

static inline int replay_on_gpu(const replay_mode *r)
{
    return ssm_mode_on_gpu(&r->base);
}

#endif
