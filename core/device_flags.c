/* The kernels' flag words on a CUDA context (docs/architecture.md, "The CUDA
 * path"): capacity + 1 words in device memory, word s for slot s and a last
 * word for rows whose slot lies outside the pool. Kernels atomicOr into them;
 * the host reads them only when asked for the status, never in a step. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/context.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static size_t flag_bytes(const ssm_ctx *ctx)
{
    return sizeof(uint32_t) * ((size_t)ctx->capacity + 1);
}

ssm_status ssm_device_flags_create(ssm_ctx *ctx)
{
    if (ctx->config->device.type != SSM_DEVICE_CUDA)
        return SSM_OK;
    ctx->device_flags = ssm_device_alloc(&ctx->config->device, flag_bytes(ctx));
    if (!ctx->device_flags)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY,
                             "cannot allocate %zu bytes of flag words on cuda:%d",
                             flag_bytes(ctx), (int)ctx->config->device.index);
    return SSM_OK;
}

void ssm_device_flags_free(ssm_ctx *ctx)
{
    if (ctx->device_flags) /* a context whose config copy failed has none */
        ssm_device_free(&ctx->config->device, ctx->device_flags);
    ctx->device_flags = NULL;
}

void ssm_device_flags_clear(ssm_ctx *ctx, int32_t slot, void *stream)
{
#ifdef HAVE_CUDA
    if (ctx->device_flags)
        cudaMemsetAsync(ctx->device_flags + slot, 0, sizeof(uint32_t), (cudaStream_t)stream);
#else
    (void)ctx, (void)slot, (void)stream;
#endif
}

void ssm_device_flags_copy(ssm_ctx *ctx, int32_t src, int32_t dst, void *stream)
{
#ifdef HAVE_CUDA
    if (ctx->device_flags)
        cudaMemcpyAsync(ctx->device_flags + dst, ctx->device_flags + src, sizeof(uint32_t),
                        cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
#else
    (void)ctx, (void)src, (void)dst, (void)stream;
#endif
}

/* Runs `what` on the context's device and makes the caller's device
 * current again. */
#ifdef HAVE_CUDA
static cudaError_t on_device(const ssm_ctx *ctx, cudaError_t (*what)(const ssm_ctx *, void *),
                             void *arg)
{
    int caller = 0;
    cudaError_t e = cudaGetDevice(&caller);
    if (e == cudaSuccess)
        e = cudaSetDevice(ctx->config->device.index);
    if (e == cudaSuccess)
        e = what(ctx, arg);
    cudaSetDevice(caller);
    return e;
}

static cudaError_t synchronize(const ssm_ctx *ctx, void *arg)
{
    (void)ctx, (void)arg;
    return cudaDeviceSynchronize();
}

typedef struct flag_copy {
    uint32_t *words;
    int32_t first, count;
} flag_copy;

static cudaError_t copy_words(const ssm_ctx *ctx, void *arg)
{
    flag_copy *c = arg;
    cudaError_t e = cudaDeviceSynchronize();
    if (e == cudaSuccess)
        e = cudaMemcpy(c->words, ctx->device_flags + c->first, sizeof(uint32_t) * (size_t)c->count,
                       cudaMemcpyDeviceToHost);
    return e;
}
#endif

ssm_status ssm_device_sync(const ssm_ctx *ctx)
{
#ifdef HAVE_CUDA
    if (ctx->config->device.type != SSM_DEVICE_CUDA)
        return SSM_OK;
    cudaError_t e = on_device(ctx, synchronize, NULL);
    if (e != cudaSuccess)
        return ssm_error_set(SSM_ERR_DEVICE, "waiting for cuda:%d: %s",
                             (int)ctx->config->device.index, cudaGetErrorString(e));
#else
    (void)ctx;
#endif
    return SSM_OK;
}

ssm_status ssm_device_flags_read(const ssm_ctx *ctx, uint32_t *words, int32_t first, int32_t count)
{
    memset(words, 0, sizeof(uint32_t) * (size_t)count);
#ifdef HAVE_CUDA
    if (!ctx->device_flags)
        return SSM_OK;
    flag_copy c = {words, first, count};
    cudaError_t e = on_device(ctx, copy_words, &c);
    if (e != cudaSuccess)
        return ssm_error_set(SSM_ERR_DEVICE, "reading the flag words of cuda:%d: %s",
                             (int)ctx->config->device.index, cudaGetErrorString(e));
#else
    (void)ctx, (void)first;
#endif
    return SSM_OK;
}
