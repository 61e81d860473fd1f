/* The device side of tuning (core/tuning/tuning.h): what names the device in a
 * cache key, the capture check of ssm_tune, the current device. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "core/tuning/tuning.h"
#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

void ssm_tuning_device_key(const ssm_device *device, tuning_key *key)
{
    snprintf(key->device, sizeof key->device, "cpu");
    key->cc_major = key->cc_minor = key->driver = 0;
#ifdef HAVE_CUDA
    if (device->type != SSM_DEVICE_CUDA)
        return;
    struct cudaDeviceProp prop;
    int driver = 0;
    if (cudaGetDeviceProperties(&prop, device->index) == cudaSuccess) {
        snprintf(key->device, sizeof key->device, "%.95s", prop.name);
        key->cc_major = prop.major;
        key->cc_minor = prop.minor;
    } else {
        snprintf(key->device, sizeof key->device, "cuda-unknown");
        (void)cudaGetLastError();
    }
    if (cudaDriverGetVersion(&driver) == cudaSuccess)
        key->driver = driver;
    else
        (void)cudaGetLastError();
#else
    (void)device;
#endif
}

int ssm_tuning_stream_capturing(void *stream)
{
#ifdef HAVE_CUDA
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &status) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return status != cudaStreamCaptureStatusNone;
#else
    (void)stream;
    return 0;
#endif
}

int ssm_tuning_enter_device(const ssm_device *device)
{
    int previous = -1;
#ifdef HAVE_CUDA
    if (device->type == SSM_DEVICE_CUDA && cudaGetDevice(&previous) == cudaSuccess)
        cudaSetDevice(device->index);
    else
        (void)cudaGetLastError();
#else
    (void)device;
#endif
    return previous;
}

void ssm_tuning_leave_device(int previous)
{
#ifdef HAVE_CUDA
    if (previous >= 0)
        cudaSetDevice(previous);
#else
    (void)previous;
#endif
}
