/* Batch validation: everything the engine passes is checked here before a
 * plugin sees it (docs/abi.md), so plugins can assume well-formed calls. */
#include <stdint.h>
#include <string.h>

#include "core/context.h"

ssm_status ssm_validate_layer(const ssm_ctx *ctx, int32_t layer)
{
    if (layer < 0 || layer >= ctx->config->model.layers)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "layer %d is outside [0, %d)", layer,
                             ctx->config->model.layers);
    return SSM_OK;
}

ssm_status ssm_validate_rows(ssm_ctx *ctx, int32_t rows, const int32_t *slots, int allow_pending)
{
    if (rows < 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "batch has %d rows", rows);
    if (rows > 0 && !slots)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "batch of %d rows has no slot array", rows);
    /* A fresh mark per batch finds repeated slots without clearing a table. */
    if (++ctx->row_mark == 0) {
        memset(ctx->row_marks, 0, sizeof *ctx->row_marks * (size_t)ctx->capacity);
        ctx->row_mark = 1;
    }
    for (int32_t r = 0; r < rows; r++) {
        int32_t slot = slots[r];
        if (slot == -1)
            continue;
        if (slot < 0 || slot >= ctx->capacity)
            return ssm_error_set(SSM_ERR_SLOT_RANGE,
                                 "row %d: slot %d is outside the pool [0, %d) and is not the "
                                 "padding slot -1",
                                 r, slot, ctx->capacity);
        if (!ctx->slot_acquired[slot])
            return ssm_error_set(SSM_ERR_SLOT_NOT_ACQUIRED, "row %d: slot %d is not acquired", r,
                                 slot);
        if (ctx->row_marks[slot] == ctx->row_mark)
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                 "row %d: slot %d appears twice in one batch", r, slot);
        ctx->row_marks[slot] = ctx->row_mark;
        if (!allow_pending && ssm_tickets_pending(&ctx->tickets, slot))
            return ssm_error_set(SSM_ERR_VERIFY_PENDING,
                                 "row %d: slot %d has a verify (forward %llu) that is not "
                                 "committed yet",
                                 r, slot, (unsigned long long)ssm_tickets_pending(&ctx->tickets, slot));
    }
    return SSM_OK;
}

const int32_t *ssm_host_slots(const ssm_ctx *ctx, const int32_t *slots,
                              const int32_t *slots_host, int32_t rows)
{
    if (ctx->config->device.type != SSM_DEVICE_CUDA) {
        if (rows > 0 && !slots)
            ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "batch of %d rows has no slot array",
                          (int)rows);
        return slots;
    }
    if (rows > 0 && !slots_host)
        ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                      "a CUDA context needs the batch's slots_host: a host copy of the slots "
                      "for the protocol checks");
    return slots_host;
}

ssm_status ssm_validate_step_data(const ssm_ctx *ctx, const ssm_layer_weights *weights,
                                  const ssm_step_io *io)
{
    if (!weights || !weights->conv_weight || !weights->a_log || !weights->dt_bias)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "layer weights missing (conv_weight, a_log and dt_bias are required)");
    if (!io || !io->x || !io->gate || !io->beta || !io->out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "step tensors missing (x, gate, beta and out are required)");
    /* The CUDA prologue reads x four channels at a time, and the tensor-core
     * prefill writes outputs four at a time. */
    size_t align = 4 * ssm_dtype_size(ctx->config->activation_dtype);
    if (ctx->config->device.type == SSM_DEVICE_CUDA && (uintptr_t)io->x % align != 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "io->x must be aligned to %zu bytes on a CUDA context", align);
    if (ctx->config->device.type == SSM_DEVICE_CUDA && (uintptr_t)io->out % align != 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "io->out must be aligned to %zu bytes on a CUDA context", align);
    return SSM_OK;
}
