/* The services table: what a plugin may ask of the core. Memory comes from
 * here so the core can account for it and inject faults (core/faults.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/context.h"
#include "core/faults.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define SSM_ALIGNMENT 256

ssm_status ssm_device_check(const ssm_device *device)
{
    if (!device)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_device_check: device is NULL");
    if (device->type == SSM_DEVICE_CPU)
        return device->index == 0 ? SSM_OK
                                  : ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                                  "cpu:%d: the CPU has index 0",
                                                  (int)device->index);
    if (device->type != SSM_DEVICE_CUDA || device->index < 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "device type %d index %d is not a device",
                             (int)device->type, (int)device->index);
#ifdef HAVE_CUDA
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: later calls may try again */
        return ssm_error_set(SSM_ERR_DEVICE, "cuda:%d: no GPU visible (CUDA: %s)",
                             (int)device->index, cudaGetErrorString(e));
    }
    if (count == 0)
        return ssm_error_set(SSM_ERR_DEVICE,
                             "cuda:%d: no GPU visible (the CUDA runtime finds none)",
                             (int)device->index);
    if (device->index >= count && count == 1)
        return ssm_error_set(SSM_ERR_DEVICE, "cuda:%d: no such GPU (1 visible: cuda:0)",
                             (int)device->index);
    if (device->index >= count)
        return ssm_error_set(SSM_ERR_DEVICE,
                             "cuda:%d: no such GPU (%d visible: cuda:0 to cuda:%d)",
                             (int)device->index, count, count - 1);
    return SSM_OK;
#else
    return ssm_error_set(SSM_ERR_UNSUPPORTED,
                         "cuda:%d: this build has no CUDA support (configure --with-cuda)",
                         (int)device->index);
#endif
}

/* Zeroed memory in `device`'s space (host: 256-byte aligned), or NULL; a
 * counted allocation that the fault hook can fail. */
void *ssm_device_alloc(const ssm_device *device, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
    if (ssm_fault_take())
        return NULL;
    if (device->type == SSM_DEVICE_CUDA) {
#ifdef HAVE_CUDA
        void *ptr = NULL;
        if (cudaSetDevice(device->index) != cudaSuccess || cudaMalloc(&ptr, bytes) != cudaSuccess)
            return NULL;
        if (cudaMemset(ptr, 0, bytes) != cudaSuccess) {
            cudaFree(ptr);
            return NULL;
        }
        ssm_fault_track(1);
        return ptr;
#else
        return NULL;
#endif
    }
    if (bytes > SIZE_MAX - SSM_ALIGNMENT)
        return NULL; /* the rounding below would wrap */
    size_t rounded = (bytes + SSM_ALIGNMENT - 1) / SSM_ALIGNMENT * SSM_ALIGNMENT;
    void *ptr = aligned_alloc(SSM_ALIGNMENT, rounded);
    if (ptr) {
        memset(ptr, 0, rounded);
        ssm_fault_track(1);
    }
    return ptr;
}

/* Frees what ssm_device_alloc(device, ...) returned; NULL is fine. */
void ssm_device_free(const ssm_device *device, void *ptr)
{
    if (!ptr)
        return;
    ssm_fault_track(-1);
#ifdef HAVE_CUDA
    if (device->type == SSM_DEVICE_CUDA) {
        cudaFree(ptr);
        return;
    }
#endif
    free(ptr);
}

static const ssm_device host = {SSM_DEVICE_CPU, 0};

static void service_log(void *core, int level, const char *fmt, ...)
{
    (void)core;
    va_list ap;
    va_start(ap, fmt);
    ssm_logv(level, fmt, ap);
    va_end(ap);
}

static ssm_status service_error(void *core, ssm_status code, const char *fmt, ...)
{
    ssm_ctx *ctx = core;
    char message[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return ssm_error_set(code, "mode '%s': %s", ctx->mode ? ctx->mode->name : "?", message);
}

static void *service_alloc(void *core, size_t bytes)
{
    ssm_ctx *ctx = core;
    return ssm_device_alloc(&ctx->config->device, bytes);
}

static void service_release(void *core, void *ptr)
{
    ssm_ctx *ctx = core;
    ssm_device_free(&ctx->config->device, ptr);
}

static void *service_alloc_host(void *core, size_t bytes)
{
    (void)core;
    return ssm_device_alloc(&host, bytes);
}

static void service_release_host(void *core, void *ptr)
{
    (void)core;
    ssm_device_free(&host, ptr);
}

static void service_flag_slot(void *core, int32_t slot, uint32_t flags)
{
    ssm_ctx *ctx = core;
    if (slot >= 0 && slot < ctx->capacity)
        ctx->slot_flags[slot] |= flags;
}

void ssm_services_init(ssm_ctx *ctx, ssm_services_v1 *s)
{
    memset(s, 0, sizeof *s);
    s->struct_size = sizeof *s;
    s->core = ctx;
    s->log = service_log;
    s->error = service_error;
    s->alloc = service_alloc;
    s->release = service_release;
    s->alloc_host = service_alloc_host;
    s->release_host = service_release_host;
    s->flag_slot = service_flag_slot;
    s->device_flags = ctx->device_flags;
}
