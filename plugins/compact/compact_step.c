/* The compact mode on the CPU: its steps, its reset, and the table of its
 * CPU methods. */
#include <string.h>

#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/layout.h"
#include "kernels/record.h"
#include "plugins/compact/compact.h"

static void *conv_of(void *mode, int32_t slot, int32_t layer)
{
    return compact_conv(mode, slot, layer);
}

static void *state_of(void *mode, int32_t slot, int32_t layer)
{
    return compact_state(mode, slot, layer);
}

static ssm_status cpu_run_in_place(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = instance;
    ssm_cpu_target target = {c, conv_of, state_of};
    ssm_cpu_run_sequences(&c->base.params, c->base.services, step, &target, c->scratch);
    return SSM_OK;
}

static ssm_status cpu_verify(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = instance;
    const ssm_model_dims *m = &c->base.params.model;
    ssm_dtype act = c->base.params.activation_dtype;
    size_t out_row = ssm_out_row_bytes(m, act);
    int32_t T = step->tokens;
    ssm_cpu_token_scratch s = ssm_cpu_token_scratch_split(m, c->scratch);
    for (int32_t r = 0; r < step->rows; r++) {
        int32_t slot = step->slots[r];
        if (slot < 0)
            continue;
        ssm_step_io io = ssm_io_at(m, act, &step->io, (int64_t)r * T);
        ssm_cpu_flag_nonfinite(&c->base.params, c->base.services, slot, &io, T);
        uint8_t *window = compact_conv(c, slot, step->layer);
        ssm_step_io staged = io;
        staged.x = ssm_conv_buffer_stage(m, act, window, io.x, T);
        for (int32_t t = 0; t < T; t++) {
            /* The same token and update as native's verify; the running state
             * lives in scratch (rounded per token as native's snapshots are),
             * so the slot's state is only read. */
            ssm_ref_prepare_token(m, act, step->weights, window, &staged, t, s.conv, &s.token);
            ssm_record_store(m, act, s.conv, &s.token, compact_record(c, slot, step->layer, t));
            ssm_ref_token_update(m, c->base.params.state_dtype, act, &s.token,
                                 t == 0 ? compact_state(c, slot, step->layer) : c->work, c->work,
                                 (uint8_t *)io.out + t * out_row, s.head);
        }
    }
    return SSM_OK;
}

static ssm_status cpu_commit(void *instance, const ssm_commit_v1 *commit)
{
    compact_mode *c = instance;
    const ssm_model_dims *m = &c->base.params.model;
    for (int32_t r = 0; r < commit->rows; r++) {
        int32_t slot = commit->slots[r];
        if (slot < 0)
            continue;
        for (int32_t l = 0; l < m->layers; l++) {
            for (int32_t t = 0; t < commit->accepted[r]; t++)
                ssm_record_apply(m, c->base.params.state_dtype, c->base.params.activation_dtype,
                                 compact_record(c, slot, l, t), compact_state(c, slot, l),
                                 c->scratch);
            ssm_conv_buffer_commit(m, c->base.params.activation_dtype, compact_conv(c, slot, l),
                                   commit->accepted[r]);
        }
    }
    return SSM_OK;
}

static ssm_status cpu_reset_slot(void *instance, int32_t slot, void *stream)
{
    compact_mode *c = instance;
    int32_t layers = c->base.params.model.layers;
    (void)stream;
    memset(compact_state(c, slot, 0), 0, (size_t)layers * c->state_bytes);
    memset(compact_conv(c, slot, 0), 0, (size_t)layers * c->conv_bytes);
    memset(compact_record(c, slot, 0, 0), 0,
           (size_t)layers * c->base.params.max_tokens * c->record_bytes);
    return SSM_OK;
}

const ssm_mode_ops compact_cpu_ops = {
    .prefill = cpu_run_in_place,
    .decode = cpu_run_in_place,
    .verify = cpu_verify,
    .commit = cpu_commit,
    .reset_slot = cpu_reset_slot,
    .export_slot = ssm_cpu_mode_export_slot,
    .import_slot = ssm_cpu_mode_import_slot,
    .copy_slot = ssm_cpu_mode_copy_slot,
    .conv_of = conv_of,
    .state_of = state_of,
};
