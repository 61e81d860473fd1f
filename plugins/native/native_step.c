/* The native mode on the CPU: its steps through the shared reference
 * kernels, its reset, and the table of its CPU methods. */
#include <string.h>

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

/* Prefill and decode update the current snapshot in place. */
static ssm_status cpu_run_in_place(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = instance;
    ssm_cpu_target target = {n, conv_of, current_state_of};
    ssm_cpu_run_sequences(&n->base.params, n->base.services, step, &target, n->scratch);
    return SSM_OK;
}

static ssm_status cpu_verify(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = instance;
    const ssm_model_dims *m = &n->base.params.model;
    ssm_dtype act = n->base.params.activation_dtype;
    size_t out_row = ssm_out_row_bytes(m, act);
    int32_t T = step->tokens;
    ssm_cpu_token_scratch s = ssm_cpu_token_scratch_split(m, n->scratch);
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        if (slot < 0)
            continue;
        ssm_step_io io = ssm_io_at(m, act, &step->io, (int64_t)r * T);
        ssm_cpu_flag_nonfinite(&n->base.params, n->base.services, slot, &io, T);
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
            ssm_ref_token_update(m, n->base.params.state_dtype, act, &s.token,
                                 native_state(n, slot, step->layer, from),
                                 native_state(n, slot, step->layer, t),
                                 (uint8_t *)io.out + t * out_row, s.head);
        }
    }
    return SSM_OK;
}

static ssm_status cpu_commit(void *instance, const ssm_commit_v1 *commit)
{
    native_mode *n = instance;
    for (int32_t r = 0; r < commit->rows; r++) {
        int32_t slot = commit->slots[r];
        if (slot < 0)
            continue;
        int32_t accepted = commit->accepted[r];
        n->current[slot] = accepted - 1;
        for (int32_t l = 0; l < n->base.params.model.layers; l++)
            ssm_conv_buffer_commit(&n->base.params.model, n->base.params.activation_dtype,
                                   native_conv(n, slot, l), accepted);
    }
    return SSM_OK;
}

static ssm_status cpu_reset_slot(void *instance, int32_t slot, void *stream)
{
    native_mode *n = instance;
    int32_t layers = n->base.params.model.layers;
    (void)stream;
    memset(native_state(n, slot, 0, 0), 0, (size_t)layers * n->snapshots * n->state_bytes);
    memset(native_conv(n, slot, 0), 0, (size_t)layers * n->conv_rows * n->conv_row_bytes);
    n->current[slot] = 0;
    return SSM_OK;
}

/* An import or a copy resets the slot first: the state lands in snapshot
 * 0, the current one. */
const ssm_mode_ops native_cpu_ops = {
    .prefill = cpu_run_in_place,
    .decode = cpu_run_in_place,
    .verify = cpu_verify,
    .commit = cpu_commit,
    .reset_slot = cpu_reset_slot,
    .export_slot = ssm_cpu_mode_export_slot,
    .import_slot = ssm_cpu_mode_import_slot,
    .copy_slot = ssm_cpu_mode_copy_slot,
    .conv_of = conv_of,
    .state_of = current_state_of,
};
