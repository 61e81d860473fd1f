#include <string.h>

#include "kernels/chunk.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/layout.h"

int64_t ssm_cpu_scratch_floats(const ssm_model_dims *m)
{
    /* ssm_ref_sequence needs conv + token + head, the same split as below;
     * a prefill runs ssm_chunk_sequence. */
    int64_t sequential = ssm_ref_sequence_scratch_floats(m);
    int64_t chunked = ssm_chunk_sequence_scratch_floats(m);
    return sequential > chunked ? sequential : chunked;
}

void ssm_cpu_flag_nonfinite(const ssm_mode_params_v2 *p, const ssm_services_v1 *services,
                            int32_t slot, const ssm_step_io *io, int64_t tokens)
{
    if (!ssm_ref_inputs_finite(&p->model, p->activation_dtype, io, 0, tokens))
        services->flag_slot(services->core, slot, SSM_FLAG_NONFINITE_INPUT);
}

void ssm_cpu_run_sequences(const ssm_mode_params_v2 *p, const ssm_services_v1 *services,
                           const ssm_step_v1 *step, const ssm_cpu_target *target, float *scratch)
{
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        int64_t first = step->token_offsets ? step->token_offsets[r] : r;
        int64_t count = step->token_offsets ? step->token_offsets[r + 1] - first : 1;
        if (slot < 0 || count == 0)
            continue;
        ssm_step_io io = ssm_io_at(&p->model, p->activation_dtype, &step->io, first);
        ssm_cpu_flag_nonfinite(p, services, slot, &io, count);
        /* A prefill runs the chunked form, as the GPU does (docs/prefill.md);
         * a decode the token-by-token update every mode's steps share. */
        void (*run)(const ssm_model_dims *, ssm_dtype, ssm_dtype, const ssm_layer_weights *, void *,
                    void *, const ssm_step_io *, int64_t, float *) =
            step->token_offsets ? ssm_chunk_sequence : ssm_ref_sequence;
        run(&p->model, p->state_dtype, p->activation_dtype, step->weights,
            target->conv_buffer(target->mode, slot, step->layer),
            target->state(target->mode, slot, step->layer), &io, count, scratch);
    }
}

static size_t window_bytes(const ssm_mode_params_v2 *p)
{
    return (size_t)ssm_ref_window_elems(&p->model) * ssm_dtype_size(p->activation_dtype);
}

static size_t state_bytes(const ssm_mode_params_v2 *p)
{
    return (size_t)ssm_ref_state_elems(&p->model) * ssm_dtype_size(p->state_dtype);
}

void ssm_cpu_export_canonical(const ssm_mode_params_v2 *p, const ssm_cpu_target *target,
                              int32_t slot, const ssm_canonical_v1 *dst)
{
    for (int32_t l = 0; l < p->model.layers; l++) {
        memcpy(dst->conv[l], target->conv_buffer(target->mode, slot, l), window_bytes(p));
        memcpy(dst->state[l], target->state(target->mode, slot, l), state_bytes(p));
    }
}

void ssm_cpu_import_canonical(const ssm_mode_params_v2 *p, const ssm_cpu_target *target,
                              int32_t slot, const ssm_canonical_v1 *src)
{
    for (int32_t l = 0; l < p->model.layers; l++) {
        memcpy(target->conv_buffer(target->mode, slot, l), src->conv[l], window_bytes(p));
        memcpy(target->state(target->mode, slot, l), src->state[l], state_bytes(p));
    }
}

void ssm_cpu_copy_canonical(const ssm_mode_params_v2 *p, const ssm_cpu_target *target,
                            int32_t src_slot, int32_t dst_slot)
{
    for (int32_t l = 0; l < p->model.layers; l++) {
        memcpy(target->conv_buffer(target->mode, dst_slot, l),
               target->conv_buffer(target->mode, src_slot, l), window_bytes(p));
        memcpy(target->state(target->mode, dst_slot, l), target->state(target->mode, src_slot, l),
               state_bytes(p));
    }
}

ssm_cpu_token_scratch ssm_cpu_token_scratch_split(const ssm_model_dims *m, float *scratch)
{
    ssm_cpu_token_scratch s;
    s.conv = scratch;
    ssm_ref_token_bind(m, s.conv + ssm_conv_channels(m), &s.token);
    s.head = s.conv + ssm_conv_channels(m) + ssm_ref_token_floats(m);
    return s;
}
