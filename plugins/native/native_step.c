/* The native mode's steps on the CPU, through the shared reference kernels. */
#include <string.h>

#include "kernels/conv_buffer.h"
#include "kernels/layout.h"
#include "kernels/reference.h"
#include "plugins/native/native.h"

/* Raises the non-finite flag of a slot whose inputs hold NaN or Inf. The row
 * is still computed: the flag, not a silent skip, is the contract. */
static void flag_nonfinite(const native_mode *n, int32_t slot, const ssm_step_io *io,
                           int64_t tokens)
{
    if (!ssm_ref_inputs_finite(&n->params.model, n->params.activation_dtype, io, 0, tokens))
        n->services->flag_slot(n->services->core, slot, SSM_FLAG_NONFINITE_INPUT);
}

/* Scratch split for single-token work: conv output, derived token, one head. */
typedef struct token_scratch {
    float *conv;
    ssm_ref_token token;
    float *head;
} token_scratch;

static token_scratch split_scratch(const native_mode *n)
{
    const ssm_model_dims *m = &n->params.model;
    token_scratch s;
    s.conv = n->scratch;
    ssm_ref_token_bind(m, s.conv + ssm_conv_channels(m), &s.token);
    s.head = s.conv + ssm_conv_channels(m) + ssm_ref_token_floats(m);
    return s;
}

ssm_status native_prefill(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = instance;
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        int64_t first = step->token_offsets[r];
        int64_t count = step->token_offsets[r + 1] - first;
        if (slot < 0 || count == 0)
            continue;
        ssm_step_io io = ssm_io_at(&n->params.model, n->params.activation_dtype, &step->io, first);
        flag_nonfinite(n, slot, &io, count);
        ssm_ref_sequence(&n->params.model, n->params.state_dtype, n->params.activation_dtype,
                         step->weights, native_conv(n, slot, step->layer),
                         native_state(n, slot, step->layer, n->current[slot]), &io, count,
                         n->scratch);
    }
    return SSM_OK;
}

ssm_status native_decode(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = instance;
    const ssm_model_dims *m = &n->params.model;
    token_scratch s = split_scratch(n);
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        if (slot < 0)
            continue;
        ssm_step_io io = ssm_io_at(m, n->params.activation_dtype, &step->io, r);
        uint8_t *window = native_conv(n, slot, step->layer);
        uint8_t *state = native_state(n, slot, step->layer, n->current[slot]);
        flag_nonfinite(n, slot, &io, 1);
        ssm_ref_prepare_token(m, n->params.activation_dtype, step->weights, window, &io, 0,
                              s.conv, &s.token);
        ssm_ref_token_update(m, n->params.state_dtype, n->params.activation_dtype, &s.token,
                             state, state, io.out, s.head);
        ssm_ref_conv_window_advance(m, n->params.activation_dtype, window, io.x, 1);
    }
    return SSM_OK;
}

ssm_status native_verify(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = instance;
    const ssm_model_dims *m = &n->params.model;
    size_t out_row = ssm_out_row_bytes(m, n->params.activation_dtype);
    int32_t T = step->tokens;
    token_scratch s = split_scratch(n);
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        if (slot < 0)
            continue;
        ssm_step_io io = ssm_io_at(m, n->params.activation_dtype, &step->io, (int64_t)r * T);
        flag_nonfinite(n, slot, &io, T);
        /* The row's inputs go into the tail after the window, so the conv
         * reads [window; tail] and a commit only has to shift the buffer. */
        uint8_t *window = native_conv(n, slot, step->layer);
        ssm_step_io tail_io = io;
        tail_io.x = ssm_conv_buffer_stage(m, n->params.activation_dtype, window, io.x, T);
        for (int32_t t = 0; t < T; t++) {
            /* Token 0 starts from the current snapshot; each later token from
             * the previous token's snapshot. Writing snapshot t can land on the
             * current one only after token 0 has read it (heads are read
             * before they are written). */
            int32_t from = t == 0 ? n->current[slot] : t - 1;
            ssm_ref_prepare_token(m, n->params.activation_dtype, step->weights, window, &tail_io,
                                  t, s.conv, &s.token);
            ssm_ref_token_update(m, n->params.state_dtype, n->params.activation_dtype, &s.token,
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
