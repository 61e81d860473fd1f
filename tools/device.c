/* The command's device: the CPU or one CUDA device (see device.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h" /* the build's: HAVE_CUDA */

#include "cli.h"
#include "device.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

/* 0 for cudaSuccess, else -1 with "what: reason" in error. */
static int cuda_ok(cudaError_t status, const char *what, char *error, size_t len)
{
    if (status == cudaSuccess)
        return 0;
    snprintf(error, len, "%s: %s", what, cudaGetErrorString(status));
    return -1;
}

#endif

/* "cuda" or "cuda:N" into *index (0 for "cuda"); -1 for anything else. */
static int parse_cuda(const char *text, int32_t *index)
{
    if (!strcmp(text, "cuda")) {
        *index = 0;
        return 0;
    }
    if (strncmp(text, "cuda:", 5) != 0 || !text[5])
        return -1;
    char *end;
    long value = strtol(text + 5, &end, 10);
    if (*end || value < 0 || value > 1023)
        return -1;
    *index = (int32_t)value;
    return 0;
}

int device_pick(const char *forced, const ssm_config *config, cli_device *d)
{
    memset(d, 0, sizeof *d);
    d->where = (ssm_device){SSM_DEVICE_CPU, 0};
    snprintf(d->name, sizeof d->name, "cpu");
    int32_t index = config->device.type == SSM_DEVICE_CUDA ? config->device.index : 0;
    if (forced && !strcmp(forced, "cpu"))
        return CLI_EXIT_OK;
    if (forced && parse_cuda(forced, &index) != 0)
        return cli_fail("--device: '%s' is not cpu, cuda or cuda:N", forced);
    /* The library's words for a missing GPU (ssm_device_check), as run's. */
    const ssm_device first = {SSM_DEVICE_CUDA, 0}, asked = {SSM_DEVICE_CUDA, index};
    if (ssm_device_check(&asked) != SSM_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", ssm_last_error());
        int none = ssm_device_check(&first) != SSM_OK; /* no GPU at all, or no CUDA build */
        if (none && !forced)
            return CLI_EXIT_OK; /* the CPU */
        if (!none)
            return cli_fail("serve: %s", why); /* a GPU past those visible */
        fprintf(stderr, "ssmstate: serve: %s; nothing measured\n", why);
        return DEVICE_EXIT_NO_GPU;
    }
#ifdef HAVE_CUDA
    struct cudaDeviceProp properties;
    if (cudaGetDeviceProperties(&properties, index) == cudaSuccess)
        snprintf(d->name, sizeof d->name, "%s", properties.name);
    else
        snprintf(d->name, sizeof d->name, "cuda:%d", index);
    d->where = (ssm_device){SSM_DEVICE_CUDA, index};
    return CLI_EXIT_OK;
#else
    return cli_fail("serve: cuda:%d passed the device check of a build without CUDA",
                    (int)index);
#endif
}

int device_open(cli_device *d, char *error, size_t len)
{
    if (d->where.type != SSM_DEVICE_CUDA)
        return 0;
#ifdef HAVE_CUDA
    cudaStream_t stream = NULL;
    cudaEvent_t start = NULL, stop = NULL;
    if (cuda_ok(cudaSetDevice(d->where.index), "cudaSetDevice", error, len) != 0 ||
        cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate",
                error, len) != 0)
        return -1;
    d->stream = stream;
    if (cuda_ok(cudaEventCreate(&start), "cudaEventCreate", error, len) != 0 ||
        cuda_ok(cudaEventCreate(&stop), "cudaEventCreate", error, len) != 0) {
        if (start)
            cudaEventDestroy(start);
        device_close(d);
        return -1;
    }
    d->start = start;
    d->stop = stop;
    return 0;
#else
    snprintf(error, len, "this build has no CUDA");
    return -1;
#endif
}

void device_close(cli_device *d)
{
#ifdef HAVE_CUDA
    if (d->stream)
        cudaStreamSynchronize((cudaStream_t)d->stream);
    if (d->start)
        cudaEventDestroy((cudaEvent_t)d->start);
    if (d->stop)
        cudaEventDestroy((cudaEvent_t)d->stop);
    if (d->stream)
        cudaStreamDestroy((cudaStream_t)d->stream);
#endif
    d->stream = d->start = d->stop = NULL;
}

void *device_alloc(const cli_device *d, size_t bytes)
{
    if (bytes == 0)
        bytes = 1;
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            (void)cudaGetLastError();
            return NULL;
        }
        /* The legacy stream's memset, waited for: the stream is non-blocking. */
        if (cudaMemset(p, 0, bytes) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
            (void)cudaGetLastError();
            cudaFree(p);
            return NULL;
        }
        return p;
    }
#endif
    (void)d;
    return calloc(1, bytes);
}

void device_free(const cli_device *d, void *p)
{
    if (!p)
        return;
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA) {
        cudaFree(p);
        return;
    }
#endif
    (void)d;
    free(p);
}

int device_upload(const cli_device *d, void *dst, const void *src, size_t bytes, char *error,
                 size_t len)
{
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA)
        return cuda_ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                       (cudaStream_t)d->stream),
                       "cudaMemcpyAsync (to the device)", error, len);
#endif
    (void)d, (void)error, (void)len;
    memcpy(dst, src, bytes);
    return 0;
}

int device_download(const cli_device *d, void *dst, const void *src, size_t bytes, char *error,
                   size_t len)
{
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA)
        return device_sync(d, error, len) != 0
                   ? -1
                   : cuda_ok(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
                             "cudaMemcpy (to the host)", error, len);
#endif
    (void)d, (void)error, (void)len;
    memcpy(dst, src, bytes);
    return 0;
}

int device_sync(const cli_device *d, char *error, size_t len)
{
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA)
        return cuda_ok(cudaStreamSynchronize((cudaStream_t)d->stream), "the stream", error, len);
#endif
    (void)d, (void)error, (void)len;
    return 0;
}

int device_step_begin(const cli_device *d, char *error, size_t len)
{
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA)
        return cuda_ok(cudaEventRecord((cudaEvent_t)d->start, (cudaStream_t)d->stream),
                       "cudaEventRecord", error, len);
#endif
    (void)d, (void)error, (void)len;
    return 0;
}

int device_step_end(const cli_device *d, double *device_ms, char *error, size_t len)
{
    *device_ms = NAN;
#ifdef HAVE_CUDA
    if (d->where.type == SSM_DEVICE_CUDA) {
        float ms = 0;
        if (cuda_ok(cudaEventRecord((cudaEvent_t)d->stop, (cudaStream_t)d->stream),
                    "cudaEventRecord", error, len) != 0 ||
            cuda_ok(cudaEventSynchronize((cudaEvent_t)d->stop), "the step's kernels", error,
                    len) != 0 ||
            cuda_ok(cudaEventElapsedTime(&ms, (cudaEvent_t)d->start, (cudaEvent_t)d->stop),
                    "cudaEventElapsedTime", error, len) != 0)
            return -1;
        *device_ms = ms;
        return 0;
    }
#endif
    (void)d, (void)error, (void)len;
    return 0;
}

double device_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
