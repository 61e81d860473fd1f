/* `ssmstate bench`, the CUDA side (built only with HAVE_CUDA): the GPU
 * check and the timer (bench_timer.c), the device buffers every measurement
 * reads (bench_data.c) and the measurements themselves (bench_run.c). */
#ifndef SSM_TOOLS_BENCH_CUDA_H
#define SSM_TOOLS_BENCH_CUDA_H

#include <cuda_runtime_api.h>

#include "bench.h"

/* How many GPUs the runtime sees, and the name of `device` when it is one of
 * them. Returns 0, or -1 with a one-line reason (no driver, no device). */
int bench_gpu_count(int32_t device, int32_t *count, char *name, size_t name_len, char *why,
                    size_t len);

/* Enqueues a copy kernel of `bytes` from src to dst on stream
 * (bench/bench_copy.cu); returns the launch status. */
cudaError_t bench_copy_kernel(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* Returns 0 for cudaSuccess, else -1 with "what: reason" in error. */
int bench_cuda_check(cudaError_t status, const char *what, char *error, size_t len);

/* ------------------------------------------------------------ the timer */

/* The work one timing repeats: a unit enqueued through the public API. */
typedef struct bench_work {
    /* Enqueues one unit on `stream` (once under capture, or once per unit
     * when no graph could be captured). Returns 0, or -1 with a message. */
    int (*enqueue)(void *user, cudaStream_t stream, char *error, size_t len);
    /* After a failed enqueue, outside any capture: closes what the unit left
     * open on the host (an open forward). NULL when there is nothing. */
    void (*recover)(void *user, cudaStream_t stream);
    void *user;
    int32_t steps_per_unit; /* decode steps in a unit, to divide by; else 1 */
    int32_t fixed_units;    /* units per sample; 0: enough for min_sample_us */
    int32_t max_units;      /* the most units per sample when chosen */
} bench_work;

typedef struct bench_timing {
    double median_us, p10_us, p90_us; /* per step: sample time / (units * steps) */
    int32_t units_per_sample;
    int32_t samples;
    int graph;                        /* 1: graph launches; 0: plain calls */
    char capture_error[160];          /* why capture failed, when graph == 0 */
} bench_timing;

/* Captures one unit into a CUDA graph (thread-local capture on `stream`, a
 * non-default stream) and times graph launches; when capture fails, says why
 * and times plain calls instead. Warm-up, then o->samples samples between
 * CUDA events; one host synchronization at the end. Returns 0, or -1 with a
 * message when the work itself or the device failed. */
int bench_time(cudaStream_t stream, const bench_work *work, const bench_options *o,
               bench_timing *out, char *error, size_t len);

/* 1 when the device is in a sticky error state (nothing more can run in this
 * process); clears a non-sticky error otherwise. */
int bench_device_broken(void);

/* -------------------------------------------------------- device buffers */

/* Inputs, weights and batch metadata on the device, made once per model for
 * the largest batch and layer count measured and read by every context. */
typedef struct bench_data {
    int32_t layers;               /* weights for this many layers */
    int32_t max_batch;
    ssm_layer_weights *weights;   /* host array [layers] of device pointers */
    float *weight_storage;        /* device */
    void *x, *gate, *beta, *out;  /* device, [max_batch * T] tokens, activation dtype */
    int32_t *slots;               /* device [max_batch], set per context */
    int32_t *slots_host;          /* host mirror of slots */
    int32_t *accepted;            /* device [T][max_batch]: row a-1 holds a everywhere */
} bench_data;

/* Generates weights and inputs on the host (tools/synth.h: realistic
 * statistics, fixed seed) and copies them to the device. Returns 0, or -1
 * with a message and nothing allocated. */
int bench_data_create(const bench_shape *s, int32_t layers, int32_t max_batch, bench_data *out,
                      char *error, size_t len);
void bench_data_destroy(bench_data *d);

/* ---------------------------------------------------------- measurements */

/* Measures one model (its config, already loaded) in every state dtype,
 * layer count, batch size and mode of `o`, prints a table per state dtype,
 * and writes JSON lines when json is not NULL. Returns CLI_EXIT_OK, or
 * CLI_EXIT_USAGE when a measurement failed (the tables still print). */
int bench_run_model(const ssm_config *config, const char *path, const bench_options *o,
                    int32_t device, const char *device_name, const bench_fla *fla, FILE *json);

#endif
