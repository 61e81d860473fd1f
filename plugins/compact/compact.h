/* The compact mode (docs/modes.md): per slot one state and, per layer, the
 * records of this round's verified tokens. Verify reads the state, computes
 * outputs with native's per-token rounding and writes records and outputs;
 * commit applies the accepted records through the update native runs and
 * writes the state once (on the GPU the next step does, on its way: see
 * compact_cuda.cu). Memory is one state instead of 1 + max draft. */
#ifndef SSM_COMPACT_H
#define SSM_COMPACT_H

#include "plugins/common/mode.h"
#include "plugins/common/tune_entries.h"
#include "ssmstate/plugin.h"

typedef struct compact_mode {
    ssm_mode_base base;         /* params, services, this device's methods */
    size_t state_bytes;         /* one layer's [HV][V][K] in the state dtype */
    size_t conv_bytes;          /* one layer's conv buffer (window + tail) */
    /* One token record; on the GPU it holds two sets, as the commit is
     * applied by the next step (pending_args in kernels/cuda/tile.cuh),
     * which writes its records to one set while it applies the commit's
     * from the other (record_layout in kernels/cuda/device.cuh). */
    size_t record_bytes;
    uint8_t *states;            /* [capacity][layers][state] */
    uint8_t *conv;              /* [capacity][layers][conv buffer] */
    uint8_t *records;           /* [capacity][layers][T_max][record] */
    uint8_t *work;              /* host: the running state of one verify row */
    float *scratch;             /* host scratch for the reference kernels */
    struct compact_gpu *gpu;    /* CUDA contexts: scratch of the GPU path (compact_cuda.cu) */
} compact_mode;

static inline size_t compact_index(const compact_mode *c, int32_t slot, int32_t layer)
{
    return (size_t)slot * c->base.params.model.layers + layer;
}

static inline uint8_t *compact_state(const compact_mode *c, int32_t slot, int32_t layer)
{
    return c->states + compact_index(c, slot, layer) * c->state_bytes;
}

static inline uint8_t *compact_conv(const compact_mode *c, int32_t slot, int32_t layer)
{
    return c->conv + compact_index(c, slot, layer) * c->conv_bytes;
}

static inline uint8_t *compact_record(const compact_mode *c, int32_t slot, int32_t layer,
                                      int32_t token)
{
    size_t per_layer = (size_t)c->base.params.max_tokens * c->record_bytes;
    return c->records + compact_index(c, slot, layer) * per_layer + (size_t)token * c->record_bytes;
}

/* The methods on the CPU (compact_step.c) and, in a CUDA build, on the GPU
 * (compact_cuda.cu; plugins/common/device_check.h says which configs it
 * takes). */
extern const ssm_mode_ops compact_cpu_ops;
extern const ssm_mode_ops compact_cuda_ops;

/* The GPU path's life cycle and the functions compact_cuda_ops holds, with
 * the contracts of the plugin methods of the same names. */
size_t compact_cuda_scratch_bytes(const ssm_mode_params_v2 *p);
size_t compact_cuda_shared_bytes(const ssm_mode_params_v2 *p);
size_t compact_cuda_record_bytes(const ssm_mode_params_v2 *p);
ssm_status compact_cuda_create(compact_mode *c);
void compact_cuda_destroy(compact_mode *c);

/* Tuning on the GPU (plugins/common/cuda/tune.cuh; the tune_* entries of
 * plugin_v1.h, through plugins/common/tune_entries.h). */
SSM_TUNE_CUDA_DECLS(compact, compact_mode);

static inline int compact_on_gpu(const compact_mode *c)
{
    return ssm_mode_on_gpu(&c->base);
}

#endif
