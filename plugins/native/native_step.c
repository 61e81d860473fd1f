/* The native mode's steps on the CPU, through the shared reference kernels. */
#include "config.h"
#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/layout.h"
#include "plugins/native/native.h"

static void *conv_of(void *mode, int32_t slot, int32_t layer)
{
    return native_conv(mode, slot, layer);
}

static void *current_state_of(void *mode, int32_t slot, int32_t layer)
{
    native_mode *n = mode;
    return native_state(n, slot, layer, n->current[slot]);
}

ssm_cpu_target native_cpu_target(native_mode *n)
{
    return (ssm_cpu_target){n, conv_of, current_state_of};
}

/* Prefill and decode update the current snapshot in place. */
static ssm_status run_in_place(native_mode *n, const ssm_step_v1 *step)
{
    ssm_cpu_target target = native_cpu_target(n);
    ssm_cpu_run_sequences(&n->params, n->services, step, &target, n->scratch);
    return SSM_OK;
}

ssm_status native_prefill(void *instance, const ssm_step_v1 *step)
{
#ifdef HAVE_CUDA
    if (native_on_gpu(instance))
        return native_cuda_prefill(instance, step);
#endif
    return run_in_place(instance, step);
}

ssm_status native_decode(void *instance, const ssm_step_v1 *step)
{
#ifdef HAVE_CUDA
    if (native_on_gpu(instance))
        return native_cuda_decode(instance, step);
#endif
    return run_in_place(instance, step);
}

ssm_status native_verify(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_verify(n, step);
#endif
    const ssm_model_dims *m = &n->params.model;
    ssm_dtype act = n->params.activation_dtype;
    size_t out_row = ssm_out_row_bytes(m, act);
    int32_t T = step->tokens;
    ssm_cpu_token_scratch s = ssm_cpu_token_scratch_split(m, n->scratch);
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        if (slot < 0)
            continue;
        ssm_step_io io = ssm_io_at(m, act, &step->io, (int64_t)r * T);
        ssm_cpu_flag_nonfinite(&n->params, n->services, slot, &io, T);
        uint8_t *window = native_conv(n, slot, step->layer);
        ssm_step_io staged = io;
        staged.x = ssm_conv_buffer_stage(m, act, window, io.x, T);
        for (int32_t t = 0; t < T; t++) {
            /* Token 0 starts from the current snapshot; each later token from
             * the previous token's snapshot. Writing snapshot t can land on the
             * current one only after token 0 has read it (heads are read
             * before they are written). */
            int32_t from = t == 0 ? n->current[slot] : t - 1;
            ssm_ref_prepare_token(m, act, step->weights, window, &staged, t, s.conv, &s.token);
            ssm_ref_token_update(m, n->params.state_dtype, act, &s.token,
                                 native_state(n, slot, step->layer, from),
                                 native_state(n, slot, step->layer, t),
                                 (uint8_t *)io.out + t * out_row, s.head);
        }
    }
    return SSM_OK;
}

ssm_status native_commit(void *instance, const ssm_commit_v1 *commit)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_commit(n, commit);
#endif
    for (int32_t r = 0; r < commit->rows; r++) {
        int32_t slot = commit->slots[r];
        if (slot < 0)
            continue;
        int32_t accepted = commit->accepted[r];
        n->current[slot] = accepted - 1;
        for (int32_t l = 0; l < n->params.model.layers; l++)
            ssm_conv_buffer_commit(&n->params.model, n->params.activation_dtype,
                                   native_conv(n, slot, l), accepted);
    }
    return SSM_OK;
}
