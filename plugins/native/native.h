/* The native mode (docs/modes.md): per slot, one full state per verify position
 * (1 + max draft) and the index of the current one. Verify writes the state
 * after token t into snapshot t; commit of a makes snapshot a-1 current without
 * copying; decode updates the current snapshot in place.
 *
 * The conv window of each (slot, layer) is kept with a tail: W-1 window rows
 * followed by T_max rows where a verify puts its inputs, so a commit of any
 * accepted length is a shift of the buffer and never loses a bit. */
#ifndef SSM_NATIVE_H
#define SSM_NATIVE_H

#include "plugins/common/mode.h"
#include "plugins/common/tune_entries.h"
#include "ssmstate/plugin.h"

typedef struct native_mode {
    ssm_mode_base base;            /* params, services, this device's methods */
    int32_t snapshots;             /* 1 + max draft */
    size_t state_bytes;            /* one layer's [HV][V][K] in the state dtype */
    size_t conv_row_bytes;         /* one conv input row [D] in the activation dtype */
    int32_t conv_rows;             /* W - 1 + T_max */
    uint8_t *states;               /* [capacity][layers][snapshots][state] */
    uint8_t *conv;                 /* [capacity][layers][conv_rows][D] */
    int32_t *current;              /* [capacity] current snapshot (device memory on CUDA) */
    float *scratch;                /* host scratch for the reference kernels */
    struct native_gpu *gpu;        /* CUDA contexts: scratch of the GPU path (native_cuda.cu) */
} native_mode;

static inline uint8_t *native_state(const native_mode *n, int32_t slot, int32_t layer,
                                    int32_t snapshot)
{
    size_t index = ((size_t)slot * n->base.params.model.layers + layer) * n->snapshots + snapshot;
    return n->states + index * n->state_bytes;
}

static inline uint8_t *native_conv(const native_mode *n, int32_t slot, int32_t layer)
{
    size_t index = (size_t)slot * n->base.params.model.layers + layer;
    return n->conv + index * n->conv_rows * n->conv_row_bytes;
}

/* The methods on the CPU (native_step.c) and, in a CUDA build, on the GPU
 * (native_cuda.cu; plugins/common/device_check.h says which configs it
 * takes). */
extern const ssm_mode_ops native_cpu_ops;
extern const ssm_mode_ops native_cuda_ops;

/* The GPU path's life cycle and the functions native_cuda_ops holds, with
 * the contracts of the plugin methods of the same names. */
size_t native_cuda_scratch_bytes(const ssm_mode_params_v2 *p);
size_t native_cuda_shared_bytes(const ssm_mode_params_v2 *p);
ssm_status native_cuda_create(native_mode *n);
void native_cuda_destroy(native_mode *n);

/* Tuning on the GPU (plugins/common/cuda/tune.cuh; the tune_* entries of
 * plugin_v1.h, through plugins/common/tune_entries.h). */
SSM_TUNE_CUDA_DECLS(native, native_mode);

static inline int native_on_gpu(const native_mode *n)
{
    return ssm_mode_on_gpu(&n->base);
}

#endif
