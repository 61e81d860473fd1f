/* Pages in device memory (docs/pages.md, "Device pages"):
 * ssm_slots_export_pages_device and ssm_slots_import_pages_device. What the
 * host can know (the arguments, the slots) is checked here before anything
 * is queued; everything about the pages' contents happens on the stream:
 * - export: the views of the pages (where each payload is), the mode's
 *   batched export_slots straight into the payloads (or, for a plugin of
 *   ABI 0.1, its export_slot per slot), then the seal kernel that
 *   checksums every payload and writes every header;
 * - import: the batch's refusal word zeroed, the check kernel (a status per
 *   page, the refusal word, each accepted page's view), the mode's
 *   import_slots gated by the word, then the finish kernel (statuses of a
 *   refused batch, the slots' flag words).
 * The kernels take SSM_PAGE_LAUNCH_SLOTS pages per launch; nothing is
 * allocated and nothing waits. */
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "core/context.h"
#include "core/pages/device_memory.h"
#include "core/internal.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

ssm_status ssm_device_pages_create(ssm_ctx *ctx)
{
    if (ctx->config->device.type != SSM_DEVICE_CUDA)
        return SSM_OK;
    size_t bytes = ssm_page_scratch_bytes(ctx->capacity);
    ctx->page_scratch = ssm_device_alloc(&ctx->config->device, bytes);
    ctx->page_pointers = ssm_calloc(2 * (size_t)ctx->config->model.layers, sizeof(void *));
    if (ctx->page_scratch && ctx->page_pointers)
        return SSM_OK;
    ssm_device_pages_free(ctx);
    return ssm_error_set(SSM_ERR_OUT_OF_MEMORY,
                         "cannot allocate %zu bytes of page scratch on cuda:%d", bytes,
                         (int)ctx->config->device.index);
}

void ssm_device_pages_free(ssm_ctx *ctx)
{
    if (ctx->page_scratch)
        ssm_device_free(&ctx->config->device, ctx->page_scratch);
    ssm_free(ctx->page_pointers);
    ctx->page_scratch = NULL;
    ctx->page_pointers = NULL;
}

/* The checks both calls make on the host, in order: the batch and its slots
 * (as the host-page calls), the status array of an import (`status_out`;
 * NULL for an export), the alignment, then the device. */
static ssm_status device_checks(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                const void *pages, size_t stride, int import,
                                const int32_t *status_out, const char *what)
{
    ssm_status status = ssm_page_batch_checks(ctx, count, slots, pages, stride, what);
    if (status != SSM_OK)
        return status;
    if (import && !status_out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "%s: NULL status array", what);
    if ((uintptr_t)pages % 8 != 0 || stride % 8 != 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "%s: pages (%p) and stride (%zu) must be multiples of 8 bytes", what,
                             pages, stride);
    if (ctx->config->device.type != SSM_DEVICE_CUDA)
        return ssm_error_set(SSM_ERR_UNSUPPORTED,
                             "%s: pages in device memory need a CUDA context; this one runs on "
                             "the CPU (use ssm_slots_export_pages / ssm_slots_import_pages)",
                             what);
    return SSM_OK;
}

#ifdef HAVE_CUDA

/* Makes the context's device current; *caller gets the caller's. */
static ssm_status enter(const ssm_ctx *ctx, int *caller, const char *what)
{
    cudaError_t e = cudaGetDevice(caller);
    if (e == cudaSuccess)
        e = cudaSetDevice(ctx->config->device.index);
    if (e == cudaSuccess)
        return SSM_OK;
    (void)cudaGetLastError();
    return ssm_error_set(SSM_ERR_DEVICE, "%s: selecting cuda:%d: %s", what,
                         (int)ctx->config->device.index, cudaGetErrorString(e));
}

/* SSM_OK, or the launch error `e` (a cudaError_t) as SSM_ERR_DEVICE. */
static ssm_status launched(const ssm_ctx *ctx, int e, const char *what)
{
    if (e == cudaSuccess)
        return SSM_OK;
    (void)cudaGetLastError(); /* so no later launch reports it */
    return ssm_error_set(SSM_ERR_DEVICE, "%s on cuda:%d: %s", what,
                         (int)ctx->config->device.index, cudaGetErrorString((cudaError_t)e));
}

/* Blocks that checksum one page of `bytes` payload bytes at most: one per
 * 64 KiB, 1 to SSM_PAGE_CRC_BLOCKS. */
static int32_t crc_blocks(uint64_t bytes)
{
    uint64_t blocks = (bytes + 65535) / 65536;
    return blocks < 1 ? 1 : blocks > SSM_PAGE_CRC_BLOCKS ? SSM_PAGE_CRC_BLOCKS : (int32_t)blocks;
}

/* The launch of pages [first, first + SSM_PAGE_LAUNCH_SLOTS) of a batch. */
static void launch_at(ssm_page_launch *l, int32_t first, int32_t count, const int32_t *slots,
                      unsigned char *pages, int32_t *status)
{
    l->count = count - first < SSM_PAGE_LAUNCH_SLOTS ? count - first : SSM_PAGE_LAUNCH_SLOTS;
    for (int32_t k = 0; k < l->count; k++)
        l->slots[k] = slots[first + k];
    l->pages = pages + (size_t)first * l->stride;
    l->status = status ? status + first : NULL;
}

/* The mode's export_slot per slot, for a plugin without export_slots: the
 * canonical form's layers point into each page's payload. */
static ssm_status export_each(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                              unsigned char *pages, size_t stride, const ssm_page_info *info,
                              void *stream)
{
    int32_t layers = info->model.layers;
    void **conv = ctx->page_pointers, **state = ctx->page_pointers + layers;
    uint64_t layer = ssm_page_conv_bytes(info) + ssm_page_state_bytes(info);
    ssm_status status = SSM_OK;
    for (int32_t k = 0; k < count && status == SSM_OK; k++) {
        unsigned char *payload = pages + (size_t)k * stride + SSM_PAGE_HEADER_BYTES;
        for (int32_t l = 0; l < layers; l++) {
            conv[l] = payload + (uint64_t)l * layer;
            state[l] = payload + (uint64_t)l * layer + ssm_page_conv_bytes(info);
        }
        ssm_canonical_v1 dst = {sizeof dst, conv, state};
        status = ctx->mode->export_slot(ctx->instance, slots[k], &dst, stream);
    }
    return status;
}

static ssm_status export_queued(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                unsigned char *pages, size_t stride, void *stream)
{
    ssm_page_launch l;
    memset(&l, 0, sizeof l);
    ssm_page_info info;
    ssm_page_context_header(ctx, &info, l.header);
    ssm_page_cut own; /* a page of the context's own heads */
    ssm_page_cut_of(&info, &info, &own);
    l.view.layer_bytes = own.big_layer;
    l.view.state_at = own.big_state_at;
    l.view.row_channels = own.big_row;
    for (int p = 0; p < 3; p++)
        l.view.part_at[p] = own.part_big[p];
    l.stride = stride;
    l.flags = ctx->device_flags;
    l.scratch = ssm_page_scratch_point(ctx->page_scratch, ctx->capacity);
    l.blocks = crc_blocks(info.payload_bytes);
    ssm_status status = SSM_OK;
    if (ctx->mode->export_slots) {
        for (int32_t k = 0; k < count && status == SSM_OK; k += SSM_PAGE_LAUNCH_SLOTS) {
            launch_at(&l, k, count, slots, pages, NULL);
            status = launched(ctx, ssm_page_views_launch(&l, stream), "page views kernel");
        }
        if (status == SSM_OK)
            status = ctx->mode->export_slots(ctx->instance, count, slots, l.scratch.views, stream);
    } else {
        status = export_each(ctx, count, slots, pages, stride, &info, stream);
    }
    for (int32_t k = 0; k < count && status == SSM_OK; k += SSM_PAGE_LAUNCH_SLOTS) {
        launch_at(&l, k, count, slots, pages, NULL);
        status = launched(ctx, ssm_page_seal_launch(&l, stream), "page seal kernel");
    }
    return status;
}

static ssm_status import_queued(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                const unsigned char *pages, size_t stride, int32_t *status_out,
                                void *stream)
{
    ssm_page_launch l;
    memset(&l, 0, sizeof l);
    ssm_page_info info;
    ssm_page_context_header(ctx, &info, l.header);
    l.stride = stride;
    l.flags = ctx->device_flags;
    l.scratch = ssm_page_scratch_point(ctx->page_scratch, ctx->capacity);
    l.refusal = l.scratch.refusal + slots[0];
    l.blocks = crc_blocks(stride - SSM_PAGE_HEADER_BYTES);
    ssm_status status = launched(ctx,
                                 cudaMemsetAsync(l.refusal, 0, sizeof *l.refusal,
                                                 (cudaStream_t)stream),
                                 "zeroing the refusal word");
    unsigned char *from = (unsigned char *)pages; /* only read */
    for (int32_t k = 0; k < count && status == SSM_OK; k += SSM_PAGE_LAUNCH_SLOTS) {
        launch_at(&l, k, count, slots, from, status_out);
        status = launched(ctx, ssm_page_check_launch(&l, stream), "page check kernel");
    }
    if (status == SSM_OK)
        status = ctx->mode->import_slots(ctx->instance, count, slots, l.scratch.views, l.refusal,
                                         stream);
    for (int32_t k = 0; k < count && status == SSM_OK; k += SSM_PAGE_LAUNCH_SLOTS) {
        launch_at(&l, k, count, slots, from, status_out);
        status = launched(ctx, ssm_page_finish_launch(&l, stream), "page finish kernel");
    }
    return status;
}

ssm_status ssm_device_pages_export_checked(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                           void *pages, size_t stride, void *stream)
{
    return export_queued(ctx, count, slots, pages, stride, stream);
}

ssm_status ssm_device_pages_import_checked(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                           const void *pages, size_t stride, int32_t *status_out,
                                           void *stream)
{
    return import_queued(ctx, count, slots, pages, stride, status_out, stream);
}

#else /* a build without CUDA has no CUDA context: nothing below is reached */

ssm_status ssm_device_pages_export_checked(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                           void *pages, size_t stride, void *stream)
{
    (void)ctx, (void)count, (void)slots, (void)pages, (void)stride, (void)stream;
    return ssm_error_set(SSM_ERR_UNSUPPORTED, "device pages: a build without CUDA");
}

ssm_status ssm_device_pages_import_checked(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                           const void *pages, size_t stride, int32_t *status_out,
                                           void *stream)
{
    (void)ctx, (void)count, (void)slots, (void)pages, (void)stride, (void)status_out,
        (void)stream;
    return ssm_error_set(SSM_ERR_UNSUPPORTED, "device pages: a build without CUDA");
}

#endif /* HAVE_CUDA */

ssm_status ssm_slots_export_pages_device(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                         void *pages, size_t stride, void *stream)
{
    const char *what = "ssm_slots_export_pages_device";
    ssm_status status = device_checks(ctx, count, slots, pages, stride, 0, NULL, what);
    if (status != SSM_OK)
        return status;
#ifdef HAVE_CUDA
    int caller = 0;
    status = enter(ctx, &caller, what);
    if (status != SSM_OK)
        return status;
    status = export_queued(ctx, count, slots, pages, stride, stream);
    (void)cudaSetDevice(caller);
    return status;
#else
    (void)stream;
    return ssm_error_set(SSM_ERR_INTERNAL, "%s: a CUDA context in a build without CUDA", what);
#endif
}

ssm_status ssm_slots_import_pages_device(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                         const void *pages, size_t stride, int32_t *status_out,
                                         void *stream)
{
    const char *what = "ssm_slots_import_pages_device";
    ssm_status status = device_checks(ctx, count, slots, pages, stride, 1, status_out, what);
    if (status == SSM_OK && !ctx->mode->import_slots)
        status = ssm_error_set(SSM_ERR_UNSUPPORTED,
                               "%s: mode '%s' (%s) has no batched import_slots (a plugin of ABI "
                               "0.1): its pages cannot be checked on the device before they "
                               "load; use ssm_slots_import_pages",
                               what, ctx->mode->name, ctx->plugin.path);
    if (status != SSM_OK)
        return status;
#ifdef HAVE_CUDA
    int caller = 0;
    status = enter(ctx, &caller, what);
    if (status != SSM_OK)
        return status;
    status = import_queued(ctx, count, slots, pages, stride, status_out, stream);
    (void)cudaSetDevice(caller);
    return status;
#else
    (void)stream;
    return ssm_error_set(SSM_ERR_INTERNAL, "%s: a CUDA context in a build without CUDA", what);
#endif
}
