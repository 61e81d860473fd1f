/* The slot pool: acquire, release, reset, accounting and per-slot flags. */
#include <stdlib.h>

#include "core/context.h"

ssm_status ssm_validate_slot(const ssm_ctx *ctx, int32_t slot)
{
    if (slot < 0 || slot >= ctx->capacity)
        return ssm_error_set(SSM_ERR_SLOT_RANGE, "slot %d is outside the pool [0, %d)", slot,
                             ctx->capacity);
    if (!ctx->slot_acquired[slot])
        return ssm_error_set(SSM_ERR_SLOT_NOT_ACQUIRED, "slot %d is not acquired", slot);
    return SSM_OK;
}

ssm_status ssm_slot_acquire(ssm_ctx *ctx, int32_t *slot)
{
    if (!ctx || !slot)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_acquire: NULL argument");
    if (ctx->free_count == 0)
        return ssm_error_set(SSM_ERR_POOL_EXHAUSTED, "all %d slots are in use", ctx->capacity);
    /* Free slots are always fresh: release resets them. */
    int32_t s = ctx->free_slots[--ctx->free_count];
    ctx->slot_acquired[s] = 1;
    *slot = s;
    return SSM_OK;
}

/* Makes a slot fresh in the plugin and forgets its flags. A slot inside an
 * open forward is refused: its forward must be committed or aborted first,
 * since dropping one row would leave the other rows' verified-over state. */
static ssm_status make_fresh(ssm_ctx *ctx, int32_t slot, void *stream)
{
    uint64_t pending = ssm_tickets_pending(&ctx->tickets, slot);
    if (pending)
        return ssm_error_set(SSM_ERR_VERIFY_PENDING,
                             "slot %d is in forward %llu, which is not committed; commit or "
                             "abort it (ssm_forward_abort) first",
                             slot, (unsigned long long)pending);
    ssm_status status = ctx->mode->reset_slot(ctx->instance, slot, stream);
    if (status != SSM_OK)
        return status;
    ssm_tickets_forget_slot(&ctx->tickets, slot, OVERTAKEN_BY_RESET);
    ctx->slot_flags[slot] = 0;
    ssm_device_flags_clear(ctx, slot, stream);
    return SSM_OK;
}

ssm_status ssm_slot_reset(ssm_ctx *ctx, int32_t slot, void *stream)
{
    if (!ctx)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_reset: NULL context");
    ssm_status status = ssm_validate_slot(ctx, slot);
    return status != SSM_OK ? status : make_fresh(ctx, slot, stream);
}

ssm_status ssm_slot_copy(ssm_ctx *ctx, int32_t src, int32_t dst, void *stream)
{
    if (!ctx)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_copy: NULL context");
    ssm_status status = ssm_validate_slot(ctx, src);
    if (status == SSM_OK)
        status = ssm_validate_slot(ctx, dst);
    if (status != SSM_OK)
        return status;
    int32_t busy = ssm_tickets_pending(&ctx->tickets, src) ? src
                   : ssm_tickets_pending(&ctx->tickets, dst) ? dst
                                                              : -1;
    if (busy >= 0)
        return ssm_error_set(SSM_ERR_VERIFY_PENDING,
                             "slot %d has an uncommitted verify; commit before copying", busy);
    if (!ctx->mode->copy_slot)
        return ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' cannot copy slots", ctx->mode->name);
    if (src == dst)
        return SSM_OK; /* a slot already holds itself */
    status = ctx->mode->copy_slot(ctx->instance, src, dst, stream);
    if (status != SSM_OK)
        return status;
    /* dst now holds src's state, so it carries src's flags: a copy of a
     * slot fed non-finite inputs is just as poisoned (docs/reliability.md). */
    ctx->slot_flags[dst] = ctx->slot_flags[src];
    ssm_device_flags_copy(ctx, src, dst, stream);
    return SSM_OK;
}

ssm_status ssm_slot_release(ssm_ctx *ctx, int32_t slot)
{
    if (!ctx)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_release: NULL context");
    ssm_status status = ssm_validate_slot(ctx, slot);
    /* No stream here: on a CUDA context the reset waits for the work queued
     * on every stream and completes before release returns, so neither that
     * work nor the slot's next owner can overlap it. */
    if (status == SSM_OK)
        status = ssm_device_sync(ctx);
    if (status == SSM_OK)
        status = make_fresh(ctx, slot, NULL);
    if (status == SSM_OK)
        status = ssm_device_sync(ctx);
    if (status != SSM_OK)
        return status;
    ctx->slot_acquired[slot] = 0;
    ctx->free_slots[ctx->free_count++] = slot;
    return SSM_OK;
}

ssm_status ssm_pool_query(const ssm_ctx *ctx, ssm_pool_stats *out)
{
    if (!ctx || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_pool_query: %s is NULL",
                             ctx ? "out" : "ctx");
    out->capacity = ctx->capacity;
    out->free = ctx->free_count;
    out->used = ctx->capacity - ctx->free_count;
    return SSM_OK;
}

ssm_status ssm_ctx_status(const ssm_ctx *ctx, ssm_ctx_report *out)
{
    if (!ctx || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_ctx_status: NULL argument");
    uint32_t *device = ssm_calloc((size_t)ctx->capacity + 1, sizeof *device);
    if (!device)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "ssm_ctx_status: out of memory");
    ssm_status status = ssm_device_flags_read(ctx, device, 0, ctx->capacity + 1);
    ssm_ctx_report report = {device[ctx->capacity], 0, -1};
    for (int32_t s = 0; s < ctx->capacity && status == SSM_OK; s++) {
        uint32_t flags = ctx->slot_flags[s] | device[s];
        if (!flags)
            continue;
        report.flags |= flags;
        report.flagged_slots++;
        if (report.first_flagged < 0)
            report.first_flagged = s;
    }
    ssm_free(device);
    if (status == SSM_OK)
        *out = report;
    return status;
}

ssm_status ssm_slot_flags(const ssm_ctx *ctx, int32_t slot, uint32_t *flags)
{
    if (!ctx || !flags)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_flags: NULL argument");
    if (slot < 0 || slot >= ctx->capacity)
        return ssm_error_set(SSM_ERR_SLOT_RANGE, "slot %d is outside the pool [0, %d)", slot,
                             ctx->capacity);
    uint32_t device = 0;
    ssm_status status = ssm_device_flags_read(ctx, &device, slot, 1);
    if (status == SSM_OK)
        *flags = ctx->slot_flags[slot] | device;
    return status;
}
