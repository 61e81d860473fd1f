/* Staging buffers for host pages of a CUDA context (see page_device.h),
 * over the CUDA runtime's C API. */
#include <string.h>

#include "config.h"
#include "core/internal.h"
#include "core/pages/staging.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#ifdef HAVE_CUDA

/* An error of the runtime as SSM_ERR_DEVICE, the runtime's last error
 * cleared so that no later launch reports it. */
static ssm_status device_error(const ssm_page_staging *s, const char *what, cudaError_t e)
{
    (void)cudaGetLastError();
    return ssm_error_set(SSM_ERR_DEVICE, "host page of cuda:%d: %s: %s",
                         (int)s->ctx->config->device.index, what, cudaGetErrorString(e));
}

ssm_status ssm_page_staging_open(const ssm_ctx *ctx, size_t bytes, ssm_page_staging *s)
{
    memset(s, 0, sizeof *s);
    s->ctx = ctx;
    cudaError_t e = cudaGetDevice(&s->caller);
    if (e != cudaSuccess) {
        ssm_status status = device_error(s, "cudaGetDevice", e);
        memset(s, 0, sizeof *s);
        return status;
    }
    e = cudaSetDevice(ctx->config->device.index);
    if (e == cudaSuccess)
        e = cudaDeviceSynchronize(); /* the slot's last step, on whatever stream */
    if (e != cudaSuccess) {
        ssm_status status = device_error(s, "waiting for the device", e);
        (void)cudaSetDevice(s->caller);
        memset(s, 0, sizeof *s);
        return status;
    }
    s->device = ssm_device_alloc(&ctx->config->device, bytes);
    if (!s->device) {
        (void)cudaGetLastError();
        (void)cudaSetDevice(s->caller);
        memset(s, 0, sizeof *s);
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY,
                             "cannot allocate %zu bytes of page staging on cuda:%d", bytes,
                             (int)ctx->config->device.index);
    }
    s->bytes = bytes;
    return SSM_OK;
}

ssm_status ssm_page_staging_read(const ssm_page_staging *s, size_t offset, void *host,
                                 size_t bytes)
{
    /* A synchronous copy on the legacy default stream: after the mode's
     * export there, and done when it returns. */
    cudaError_t e = cudaMemcpy(host, s->device + offset, bytes, cudaMemcpyDeviceToHost);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(NULL);
    return e == cudaSuccess ? SSM_OK : device_error(s, "copying the page to the host", e);
}

ssm_status ssm_page_staging_write(const ssm_page_staging *s, size_t offset, const void *host,
                                  size_t bytes)
{
    cudaError_t e = cudaMemcpy(s->device + offset, host, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(NULL);
    return e == cudaSuccess ? SSM_OK : device_error(s, "copying the page to the device", e);
}

ssm_status ssm_page_staging_wait(const ssm_page_staging *s)
{
    cudaError_t e = cudaStreamSynchronize(NULL);
    return e == cudaSuccess ? SSM_OK : device_error(s, "waiting for the import", e);
}

void ssm_page_staging_close(ssm_page_staging *s)
{
    if (s->ctx) {
        ssm_device_free(&s->ctx->config->device, s->device);
        (void)cudaSetDevice(s->caller);
    }
    memset(s, 0, sizeof *s);
}

#else /* a build without CUDA has no CUDA context: nothing here is reached */

static ssm_status no_cuda(void)
{
    return ssm_error_set(SSM_ERR_UNSUPPORTED, "host pages of a device: a build without CUDA");
}

ssm_status ssm_page_staging_open(const ssm_ctx *ctx, size_t bytes, ssm_page_staging *s)
{
    (void)ctx, (void)bytes;
    memset(s, 0, sizeof *s);
    return no_cuda();
}

ssm_status ssm_page_staging_read(const ssm_page_staging *s, size_t offset, void *host,
                                 size_t bytes)
{
    (void)s, (void)offset, (void)host, (void)bytes;
    return no_cuda();
}

ssm_status ssm_page_staging_write(const ssm_page_staging *s, size_t offset, const void *host,
                                  size_t bytes)
{
    (void)s, (void)offset, (void)host, (void)bytes;
    return no_cuda();
}

ssm_status ssm_page_staging_wait(const ssm_page_staging *s)
{
    (void)s;
    return no_cuda();
}

void ssm_page_staging_close(ssm_page_staging *s)
{
    memset(s, 0, sizeof *s);
}

#endif
