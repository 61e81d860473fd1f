/* Timing on the GPU: one unit of work captured into a CUDA graph and
 * launched again and again between CUDA events (plain calls when capture
 * fails). All samples are queued back to back and read after one host
 * synchronization, so the GPU never waits for the host between samples. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda.h"

int bench_cuda_check(cudaError_t status, const char *what, char *error, size_t len)
{
    if (status == cudaSuccess)
        return 0;
    snprintf(error, len, "%s: %s", what, cudaGetErrorString(status));
    return -1;
}

int bench_gpu_count(int32_t device, int32_t *count, char *name, size_t name_len, char *why,
                    size_t len)
{
    int visible = 0;
    cudaError_t status = cudaGetDeviceCount(&visible);
    if (status != cudaSuccess) {
        snprintf(why, len, "no GPU visible (cudaGetDeviceCount: %s)",
                 cudaGetErrorString(status));
        return -1;
    }
    *count = visible;
    if (visible == 0) {
        snprintf(why, len, "no GPU visible (cudaGetDeviceCount found none)");
        return -1;
    }
    struct cudaDeviceProp properties;
    if (device >= 0 && device < visible &&
        cudaGetDeviceProperties(&properties, device) == cudaSuccess)
        snprintf(name, name_len, "%s", properties.name);
    else
        snprintf(name, name_len, "cuda:%d", device);
    return 0;
}

int bench_device_broken(void)
{
    (void)cudaGetLastError();
    return cudaDeviceSynchronize() != cudaSuccess;
}

/* Captures one unit of `work` and instantiates it. Returns 0, or -1 with
 * the reason in why; the stream has then left capture mode, the host side
 * of the unit has been recovered and nothing is left behind. */
static int capture_unit(const bench_work *work, cudaStream_t stream, cudaGraphExec_t *exec,
                        char *why, size_t len)
{
    if (bench_cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                   "cudaStreamBeginCapture", why, len) != 0) {
        (void)cudaGetLastError();
        return -1;
    }
    char api_error[256] = "";
    int enqueued = work->enqueue(work->user, stream, api_error, sizeof api_error);
    cudaGraph_t graph = NULL;
    cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (enqueued != 0 || ended != cudaSuccess || !graph) {
        if (enqueued != 0)
            snprintf(why, len, "%s", api_error);
        else
            snprintf(why, len, "cudaStreamEndCapture: %s", cudaGetErrorString(ended));
        if (graph)
            cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        if (enqueued != 0 && work->recover)
            work->recover(work->user, stream);
        return -1;
    }
    cudaError_t made = cudaGraphInstantiateWithFlags(exec, graph, 0);
    cudaGraphDestroy(graph);
    if (made != cudaSuccess) {
        snprintf(why, len, "cudaGraphInstantiate: %s", cudaGetErrorString(made));
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

/* One unit: a graph launch, or the plain calls when exec is NULL. */
static int run_unit(const bench_work *work, cudaGraphExec_t exec, cudaStream_t stream,
                    char *error, size_t len)
{
    if (exec)
        return bench_cuda_check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch", error, len);
    if (work->enqueue(work->user, stream, error, len) == 0)
        return 0;
    if (work->recover)
        work->recover(work->user, stream);
    return -1;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of sorted[0..n) with linear interpolation. */
static double quantile(const double *sorted, int32_t n, double q)
{
    double at = q * (n - 1);
    int32_t below = (int32_t)floor(at);
    int32_t above = below + 1 < n ? below + 1 : below;
    return sorted[below] + (at - below) * (sorted[above] - sorted[below]);
}

/* Enqueues `units` units between events start and stop. */
static int run_sample(const bench_work *work, cudaGraphExec_t exec, cudaStream_t stream,
                      int32_t units, cudaEvent_t start, cudaEvent_t stop, char *error,
                      size_t len)
{
    if (start && bench_cuda_check(cudaEventRecord(start, stream), "cudaEventRecord", error, len))
        return -1;
    for (int32_t u = 0; u < units; u++)
        if (run_unit(work, exec, stream, error, len) != 0)
            return -1;
    return bench_cuda_check(cudaEventRecord(stop, stream), "cudaEventRecord", error, len);
}

/* Warm-up launches, timed, to choose the units per sample; then the
 * samples, one per pair of consecutive events. */
static int time_units(const bench_work *work, cudaGraphExec_t exec, cudaStream_t stream,
                      const bench_options *o, cudaEvent_t *events, double *times,
                      bench_timing *out, char *error, size_t len)
{
    int32_t warmup = o->warmup > 0 ? o->warmup : 1;
    float elapsed_ms = 0;
    if (run_sample(work, exec, stream, warmup, events[0], events[1], error, len) != 0 ||
        bench_cuda_check(cudaEventSynchronize(events[1]), "warm-up", error, len) != 0 ||
        bench_cuda_check(cudaEventElapsedTime(&elapsed_ms, events[0], events[1]),
                   "cudaEventElapsedTime", error, len) != 0)
        return -1;
    int32_t units = work->fixed_units;
    if (units <= 0) {
        double unit_us = 1e3 * elapsed_ms / warmup;
        double wanted = unit_us > 0 ? ceil(o->min_sample_us / unit_us) : work->max_units;
        units = wanted < 1 ? 1 : wanted > work->max_units ? work->max_units : (int32_t)wanted;
    }
    if (bench_cuda_check(cudaEventRecord(events[0], stream), "cudaEventRecord", error, len) != 0)
        return -1;
    for (int32_t s = 0; s < o->samples; s++)
        if (run_sample(work, exec, stream, units, NULL, events[s + 1], error, len) != 0)
            return -1;
    if (bench_cuda_check(cudaStreamSynchronize(stream), "the timed work", error, len) != 0)
        return -1;
    for (int32_t s = 0; s < o->samples; s++) {
        if (bench_cuda_check(cudaEventElapsedTime(&elapsed_ms, events[s], events[s + 1]),
                       "cudaEventElapsedTime", error, len) != 0)
            return -1;
        times[s] = 1e3 * elapsed_ms / ((double)units * work->steps_per_unit);
    }
    qsort(times, (size_t)o->samples, sizeof *times, compare_doubles);
    out->median_us = quantile(times, o->samples, 0.5);
    out->p10_us = quantile(times, o->samples, 0.1);
    out->p90_us = quantile(times, o->samples, 0.9);
    out->units_per_sample = units;
    out->samples = o->samples;
    return 0;
}

int bench_time(cudaStream_t stream, const bench_work *work, const bench_options *o,
               bench_timing *out, char *error, size_t len)
{
    memset(out, 0, sizeof *out);
    cudaGraphExec_t exec = NULL;
    out->graph = capture_unit(work, stream, &exec, out->capture_error,
                              sizeof out->capture_error) == 0;
    int32_t event_count = o->samples + 1;
    cudaEvent_t *events = calloc((size_t)event_count, sizeof *events);
    double *times = calloc((size_t)o->samples, sizeof *times);
    int32_t created = 0;
    int status = events && times ? 0 : -1;
    if (status != 0)
        snprintf(error, len, "out of memory");
    while (status == 0 && created < event_count) {
        status = bench_cuda_check(cudaEventCreate(&events[created]), "cudaEventCreate", error, len);
        created += status == 0;
    }
    if (status == 0)
        status = time_units(work, exec, stream, o, events, times, out, error, len);
    for (int32_t i = 0; i < created; i++)
        cudaEventDestroy(events[i]);
    if (exec)
        cudaGraphExecDestroy(exec);
    free(events);
    free(times);
    return status;
}
