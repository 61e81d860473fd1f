/* The step calls: validate, hand to the plugin, then update the protocol
 * bookkeeping only once the plugin succeeded, so a failed call changes
 * nothing. */
#include "core/context.h"

static ssm_step_v1 make_step(int32_t layer, int32_t rows, int32_t tokens, const int32_t *slots,
                             const ssm_layer_weights *weights, const ssm_step_io *io,
                             void *stream)
{
    ssm_step_v1 step = {0};
    step.struct_size = sizeof step;
    step.layer = layer;
    step.rows = rows;
    step.tokens = tokens;
    step.slots = slots;
    step.max_row_tokens = tokens;
    step.weights = weights;
    step.io = *io;
    step.stream = stream;
    return step;
}

static ssm_status check_offsets(const ssm_prefill_batch *batch, const int32_t *offsets)
{
    if (batch->max_row_tokens < 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "max_row_tokens is %d",
                             batch->max_row_tokens);
    if (batch->rows == 0)
        return SSM_OK;
    if (!batch->token_offsets || !offsets)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "prefill batch has no token_offsets (a CUDA context also needs "
                             "token_offsets_host)");
    if (offsets[0] != 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "token_offsets[0] is %d, not 0",
                             offsets[0]);
    for (int32_t r = 0; r < batch->rows; r++) {
        if (offsets[r + 1] < offsets[r])
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                 "token_offsets decrease at row %d (%d then %d)", r,
                                 offsets[r], offsets[r + 1]);
        /* offsets[0] is 0 and none decreased so far: no overflow */
        int32_t length = offsets[r + 1] - offsets[r];
        if (length > batch->max_row_tokens)
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                 "row %d has %d tokens, more than max_row_tokens %d", r, length,
                                 batch->max_row_tokens);
    }
    return SSM_OK;
}

ssm_status ssm_prefill(ssm_ctx *ctx, int32_t layer, const ssm_prefill_batch *batch,
                       const ssm_layer_weights *weights, const ssm_step_io *io, void *stream)
{
    if (!ctx || !batch)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_prefill: NULL argument");
    int cuda = ctx->config->device.type == SSM_DEVICE_CUDA;
    const int32_t *slots = ssm_host_slots(ctx, batch->slots, batch->slots_host, batch->rows);
    const int32_t *offsets = cuda ? batch->token_offsets_host : batch->token_offsets;
    ssm_status status = ssm_validate_layer(ctx, layer);
    if (status == SSM_OK && !slots && batch->rows > 0)
        status = SSM_ERR_INVALID_ARGUMENT;
    if (status == SSM_OK)
        status = ssm_validate_rows(ctx, batch->rows, slots, 0);
    if (status == SSM_OK)
        status = check_offsets(batch, offsets);
    if (status != SSM_OK)
        return status;
    if (batch->rows == 0 || offsets[batch->rows] == 0)
        return SSM_OK;
    status = ssm_validate_step_data(ctx, weights, io);
    if (status != SSM_OK)
        return status;
    ssm_step_v1 step = make_step(layer, batch->rows, 0, batch->slots, weights, io, stream);
    step.token_offsets = batch->token_offsets;
    step.max_row_tokens = batch->max_row_tokens;
    return ctx->mode->prefill(ctx->instance, &step);
}

ssm_status ssm_decode(ssm_ctx *ctx, int32_t layer, const ssm_batch *batch,
                      const ssm_layer_weights *weights, const ssm_step_io *io, void *stream)
{
    if (!ctx || !batch)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_decode: NULL argument");
    if (batch->tokens != 1)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "decode takes 1 token per row, not %d",
                             batch->tokens);
    const int32_t *slots = ssm_host_slots(ctx, batch->slots, batch->slots_host, batch->rows);
    ssm_status status = ssm_validate_layer(ctx, layer);
    if (status == SSM_OK && !slots && batch->rows > 0)
        status = SSM_ERR_INVALID_ARGUMENT;
    if (status == SSM_OK)
        status = ssm_validate_rows(ctx, batch->rows, slots, 0);
    if (status != SSM_OK || batch->rows == 0)
        return status;
    status = ssm_validate_step_data(ctx, weights, io);
    if (status != SSM_OK)
        return status;
    ssm_step_v1 step = make_step(layer, batch->rows, 1, batch->slots, weights, io, stream);
    step.layout = ssm_tuning_layout(ctx, batch->rows); /* its implicit commit's too */
    status = ctx->mode->decode(ctx->instance, &step);
    /* A decode is a verify of one token with its commit: a ticket
     * of an earlier forward over these slots is stale from now on. */
    for (int32_t r = 0; status == SSM_OK && r < batch->rows; r++)
        if (slots[r] >= 0)
            ssm_tickets_forget_slot(&ctx->tickets, slots[r], OVERTAKEN_BY_DECODE);
    return status;
}

/* The rows presented with an open forward must be the ones it was opened
 * with: same buffer, same shape, and every row naming the slot it named then
 * (the book remembers each pending slot's row, so a permutation is caught). */
static ssm_status check_same_rows(const ssm_ctx *ctx, const ssm_forward *f, int32_t rows,
                                  int32_t tokens, const int32_t *device_slots,
                                  const int32_t *slots)
{
    if (rows != f->rows || tokens != f->tokens || device_slots != f->slots ||
        slots != f->slots_host)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "forward %llu was opened over %d rows x %d tokens with another "
                             "slot buffer; every layer and the commit must present the same",
                             (unsigned long long)f->id, f->rows, f->tokens);
    int32_t live = 0;
    for (int32_t r = 0; r < rows; r++) {
        if (slots[r] == -1)
            continue;
        if (slots[r] < 0 || slots[r] >= ctx->capacity ||
            !ssm_tickets_row_matches(&ctx->tickets, f->id, r, slots[r]))
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                 "row %d: the slot buffer changed since forward %llu was opened",
                                 r, (unsigned long long)f->id);
        live++;
    }
    if (live != f->live_rows)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "the slot buffer changed since forward %llu was opened",
                             (unsigned long long)f->id);
    return SSM_OK;
}

ssm_status ssm_verify(ssm_ctx *ctx, int32_t layer, const ssm_batch *batch,
                      const ssm_layer_weights *weights, const ssm_step_io *io,
                      ssm_ticket *ticket, void *stream)
{
    if (!ctx || !batch || !ticket)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_verify: NULL argument");
    int32_t max_tokens = ctx->params.max_tokens;
    if (batch->tokens < 1 || batch->tokens > max_tokens)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "verify of %d tokens per row; this context takes 1 to %d "
                             "(1 + max_draft_tokens)",
                             batch->tokens, max_tokens);
    ssm_status status = ssm_validate_layer(ctx, layer);
    if (status != SSM_OK)
        return status;

    const int32_t *slots = ssm_host_slots(ctx, batch->slots, batch->slots_host, batch->rows);
    if (!slots && batch->rows > 0)
        return SSM_ERR_INVALID_ARGUMENT;
    ssm_forward *forward = NULL;
    int opening = ticket->context_id == 0 && ticket->forward == 0;
    if (opening) {
        status = ssm_validate_rows(ctx, batch->rows, slots, 0);
        if (status == SSM_OK)
            status = ssm_tickets_can_open(&ctx->tickets);
    } else {
        status = ssm_tickets_lookup(&ctx->tickets, ticket, &forward);
        if (status == SSM_OK)
            status = check_same_rows(ctx, forward, batch->rows, batch->tokens, batch->slots,
                                     slots);
        if (status == SSM_OK && forward->layer_done[layer])
            status = ssm_error_set(SSM_ERR_VERIFY_PENDING,
                                   "layer %d was already verified in forward %llu; commit first",
                                   layer, (unsigned long long)forward->id);
    }
    if (status == SSM_OK && batch->rows > 0)
        status = ssm_validate_step_data(ctx, weights, io);
    if (status != SSM_OK)
        return status;

    /* The forward's update layout: chosen for its bucket when it opens,
     * then the same for every layer and the commit (ssm_ticket.layout). */
    uint32_t layout = opening ? ssm_tuning_layout(ctx, batch->rows) : forward->layout;
    if (batch->rows > 0) {
        ssm_step_v1 step =
            make_step(layer, batch->rows, batch->tokens, batch->slots, weights, io, stream);
        step.layout = layout;
        status = ctx->mode->verify(ctx->instance, &step);
        if (status != SSM_OK)
            return status;
    }
    if (opening)
        forward = ssm_tickets_open(&ctx->tickets, batch, slots, layout, ticket);
    ssm_tickets_mark_layer(&ctx->tickets, forward, layer);
    return SSM_OK;
}

ssm_status ssm_commit(ssm_ctx *ctx, const ssm_ticket *ticket, const int32_t *accepted,
                      void *stream)
{
    if (!ctx || !ticket)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_commit: NULL argument");
    ssm_forward *forward = NULL;
    ssm_status status = ssm_tickets_lookup(&ctx->tickets, ticket, &forward);
    if (status != SSM_OK)
        return status;
    if (forward->layers_done != ctx->config->model.layers)
        return ssm_error_set(SSM_ERR_TICKET_INCOMPLETE,
                             "forward %llu has %d of %d layers verified; verify every layer "
                             "before the commit",
                             (unsigned long long)forward->id, forward->layers_done,
                             ctx->config->model.layers);
    status = check_same_rows(ctx, forward, forward->rows, forward->tokens, forward->slots,
                             forward->slots_host);
    if (status != SSM_OK)
        return status;
    /* Padding rows need no length; on CUDA the device slots may hold rows
     * where the host copy had padding (a replayed graph), so rows need one. */
    int cuda = ctx->config->device.type == SSM_DEVICE_CUDA;
    if (!accepted && (forward->live_rows > 0 || (cuda && forward->rows > 0)))
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_commit: no accepted lengths");
    /* Host lengths are checked here; device lengths by the commit kernel. */
    int host_lengths = !cuda;
    for (int32_t r = 0; host_lengths && r < forward->rows; r++)
        if (forward->slots_host[r] != -1 && (accepted[r] < 1 || accepted[r] > forward->tokens))
            return ssm_error_set(SSM_ERR_ACCEPTED_RANGE,
                                 "row %d (slot %d): accepted length %d is outside [1, %d]", r,
                                 forward->slots_host[r], accepted[r], forward->tokens);
    /* On CUDA the kernels see the device slots, which a replayed graph may
     * fill where the host copy had padding: launch whenever there are rows. */
    if (forward->live_rows > 0 || (!host_lengths && forward->rows > 0)) {
        /* The ticket's layout (equal to the forward's: ssm_tickets_lookup
         * refused an altered one), never a fresh choice for this bucket. */
        ssm_commit_v1 args = {sizeof args, forward->rows, forward->tokens, forward->slots,
                              accepted, stream, ticket->layout};
        status = ctx->mode->commit(ctx->instance, &args);
        if (status != SSM_OK)
            return status;
    }
    ssm_tickets_close(&ctx->tickets, forward);
    return SSM_OK;
}

ssm_status ssm_slot_export_canonical(ssm_ctx *ctx, int32_t slot, void *const *conv,
                                     void *const *state, void *stream)
{
    if (!ctx || !conv || !state)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_export_canonical: NULL argument");
    ssm_status status = ssm_validate_slot(ctx, slot);
    if (status != SSM_OK)
        return status;
    if (ssm_tickets_pending(&ctx->tickets, slot))
        return ssm_error_set(SSM_ERR_VERIFY_PENDING,
                             "slot %d has an uncommitted verify; commit before exporting", slot);
    for (int32_t l = 0; l < ctx->config->model.layers; l++)
        if (!conv[l] || !state[l])
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "no destination for layer %d", l);
    if (!ctx->mode->export_slot)
        return ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' cannot export slots",
                             ctx->mode->name);
    ssm_canonical_v1 dst = {sizeof dst, conv, state};
    return ctx->mode->export_slot(ctx->instance, slot, &dst, stream);
}

ssm_status ssm_forward_abort(ssm_ctx *ctx, const ssm_ticket *ticket, void *stream)
{
    if (!ctx || !ticket)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_forward_abort: NULL argument");
    ssm_forward *forward = NULL;
    ssm_status status = ssm_tickets_lookup(&ctx->tickets, ticket, &forward);
    if (status != SSM_OK)
        return status;
    /* A verify may already have overwritten a slot's current state (native
     * keeps one snapshot per verify position, the current one among them), so
     * the only state an aborted forward can leave behind is a fresh one. */
    for (int32_t s = 0; s < ctx->capacity; s++) {
        if (ssm_tickets_pending(&ctx->tickets, s) != forward->id)
            continue;
        status = ctx->mode->reset_slot(ctx->instance, s, stream);
        if (status != SSM_OK)
            return status;
        ctx->slot_flags[s] = 0;
        ssm_device_flags_clear(ctx, s, stream);
    }
    ssm_tickets_abort(&ctx->tickets, forward);
    return SSM_OK;
}
