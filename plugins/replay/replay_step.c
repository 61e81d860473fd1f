/* The replay mode's steps and folds on the CPU. */
#include "config.h"
#include <string.h>

#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/layout.h"
#include "kernels/record.h"
#include "plugins/replay/replay.h"

void replay_apply_committed(replay_mode *r, int32_t slot, int32_t layer, void *state)
{
    const uint8_t *records = replay_records(r, slot, layer);
    for (int32_t i = 0; i < *replay_cursor(r, slot, layer); i++)
        ssm_record_apply(&r->base.params.model, r->base.params.state_dtype, r->base.params.activation_dtype,
                         records + (size_t)i * r->record_bytes, state, r->scratch);
}

void replay_fold(replay_mode *r, int32_t slot, int32_t layer)
{
    replay_apply_committed(r, slot, layer, replay_checkpoint(r, slot, layer));
    *replay_cursor(r, slot, layer) = 0;
}

void *replay_cpu_conv_of(void *instance, int32_t slot, int32_t layer)
{
    return replay_conv(instance, slot, layer);
}

void *replay_cpu_checkpoint_of(void *instance, int32_t slot, int32_t layer)
{
    return replay_checkpoint(instance, slot, layer);
}

ssm_cpu_target replay_cpu_target(replay_mode *r)
{
    return (ssm_cpu_target){r, replay_cpu_conv_of, replay_cpu_checkpoint_of};
}

/* Prefill runs the prefill every mode runs, on a folded checkpoint: the
 * slot is left with an empty history, which is replay's canonical form. */
ssm_status replay_cpu_prefill(void *instance, const ssm_step_v1 *step)
{
    replay_mode *r = instance;
    for (int32_t row = 0; row < step->rows; row++)
        if (step->slots[row] >= 0)
            replay_fold(r, step->slots[row], step->layer);
    ssm_cpu_target target = replay_cpu_target(r);
    ssm_cpu_run_sequences(&r->base.params, r->base.services, step, &target, r->scratch);
    return SSM_OK;
}

/* Outputs of the exact form: the checkpoint and the n committed records go
 * through native's update into the scratch state, then each new token, whose
 * record is appended as it goes. The same updates in the same order as
 * native's own snapshots, so the outputs are native's bit for bit; only the
 * scratch state is written. */
static void exact_outputs(replay_mode *r, const ssm_step_v1 *step, int32_t slot, int32_t n,
                          int32_t tokens, const uint8_t *window, const ssm_step_io *staged,
                          const ssm_replay_history *history, void *out)
{
    const ssm_model_dims *m = &r->base.params.model;
    ssm_dtype act = r->base.params.activation_dtype;
    memcpy(r->work, history->checkpoint, r->state_bytes);
    replay_apply_committed(r, slot, step->layer, r->work);
    ssm_cpu_token_scratch s = ssm_cpu_token_scratch_split(m, r->scratch);
    for (int32_t t = 0; t < tokens; t++) {
        ssm_ref_prepare_token(m, act, step->weights, window, staged, t, r->conv_out,
                              &r->tokens[t]);
        ssm_replay_append(m, act, history, n + t, r->conv_out, &r->tokens[t]);
        ssm_ref_token_update(m, r->base.params.state_dtype, act, &r->tokens[t], r->work, r->work,
                             (uint8_t *)out + t * ssm_out_row_bytes(m, act), s.head);
    }
}

/* The `tokens` tokens of one row (inputs at row * tokens in step->io): folds
 * first if n + 2T could pass L, stages the conv inputs, appends one record
 * per token after the cursor and writes the outputs. The cursor and the
 * checkpoint stay as they are (bar the fold, which changes nothing logical). */
static void step_row(replay_mode *r, const ssm_step_v1 *step, int32_t row, int32_t tokens)
{
    const ssm_model_dims *m = &r->base.params.model;
    ssm_dtype act = r->base.params.activation_dtype;
    int32_t slot = step->slots[row], layer = step->layer;
    if (ssm_replay_folds(*replay_cursor(r, slot, layer), tokens, r->options.history))
        replay_fold(r, slot, layer);
    int32_t n = *replay_cursor(r, slot, layer);

    ssm_step_io io = ssm_io_at(m, act, &step->io, (int64_t)row * tokens);
    ssm_cpu_flag_nonfinite(&r->base.params, r->base.services, slot, &io, tokens);
    uint8_t *window = replay_conv(r, slot, layer);
    ssm_step_io staged = io;
    staged.x = ssm_conv_buffer_stage(m, act, window, io.x, tokens);

    ssm_replay_history history = {replay_checkpoint(r, slot, layer),
                                  replay_records(r, slot, layer), r->keys};
    if (r->options.outputs == REPLAY_OUTPUTS_EXACT) {
        exact_outputs(r, step, slot, n, tokens, window, &staged, &history, io.out);
        return;
    }
    ssm_replay_load_keys(m, act, &history, 0, n, r->scratch);
    for (int32_t t = 0; t < tokens; t++) {
        ssm_ref_prepare_token(m, act, step->weights, window, &staged, t, r->conv_out,
                              &r->tokens[t]);
        ssm_replay_append(m, act, &history, n + t, r->conv_out, &r->tokens[t]);
    }
    ssm_replay_form form =
        r->options.outputs == REPLAY_OUTPUTS_MATRIX ? SSM_REPLAY_MATRIX : SSM_REPLAY_RECURRENT;
    ssm_replay_outputs(m, r->base.params.state_dtype, act, form, &history, n, tokens, r->tokens,
                       io.out, r->outputs_scratch);
}

/* Keeps the first `accepted` records and conv inputs of (slot, layer)'s last step. */
static void commit_layer(replay_mode *r, int32_t slot, int32_t layer, int32_t accepted)
{
    *replay_cursor(r, slot, layer) += accepted;
    ssm_conv_buffer_commit(&r->base.params.model, r->base.params.activation_dtype,
                           replay_conv(r, slot, layer), accepted);
}

/* A verify of one token with its implicit commit. */
ssm_status replay_cpu_decode(void *instance, const ssm_step_v1 *step)
{
    replay_mode *r = instance;
    int fold = step->rows <= r->options.fold_rows;
    for (int32_t row = 0; row < step->rows; row++) {
        if (step->slots[row] < 0)
            continue;
        step_row(r, step, row, 1);
        commit_layer(r, step->slots[row], step->layer, 1);
        if (fold)
            replay_fold(r, step->slots[row], step->layer);
    }
    return SSM_OK;
}

ssm_status replay_cpu_verify(void *instance, const ssm_step_v1 *step)
{
    replay_mode *r = instance;
    for (int32_t row = 0; row < step->rows; row++)
        if (step->slots[row] >= 0)
            step_row(r, step, row, step->tokens);
    return SSM_OK;
}

ssm_status replay_cpu_commit(void *instance, const ssm_commit_v1 *commit)
{
    replay_mode *r = instance;
    for (int32_t row = 0; row < commit->rows; row++) {
        if (commit->slots[row] < 0)
            continue;
        for (int32_t l = 0; l < r->base.params.model.layers; l++)
            commit_layer(r, commit->slots[row], l, commit->accepted[row]);
    }
    return SSM_OK;
}
