/* Device-side helpers for the GPU suites, in plain C over the CUDA runtime
 * API: device copies of the tests' weights and inputs (tests/testutil.h),
 * device metadata arrays, and canonical snapshots of a CUDA context's slots.
 *
 * Functions that can fail return 1 on success and 0 after printing one
 * "# ..." line naming the CUDA call and its error (the GPU suites run under
 * Automake's plain driver, which keeps stdout and stderr in the test's log).
 * Everything allocated here is released by the matching _free, which accepts
 * a zeroed or partly filled object. */
#ifndef SSM_TESTS_GPU_UTIL_H
#define SSM_TESTS_GPU_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "tests/testutil.h"

/* 1 if e is cudaSuccess; otherwise prints "# what: name: message" and
 * returns 0. */
int gpu_ok(cudaError_t e, const char *what);

/* Visible CUDA devices; 0 when the runtime fails (no driver, no device).
 * The first CUDA call a GPU suite makes: it decides SKIP (exit 77). */
int gpu_device_count(void);

/* cudaMalloc of `bytes` (at least 1) into *dst, then a synchronous copy of
 * `src` when not NULL, else a fill with `fill` bytes. */
int gpu_alloc(void **dst, size_t bytes, const void *src, int fill);

/* cudaFree, NULL allowed; errors are ignored (teardown). */
void gpu_free(void *p);

/* Bytes of the per-token tensors of test_io_make for `tokens` tokens (at
 * least one token, as test_io_make allocates). */
size_t gpu_x_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens);
size_t gpu_gate_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens);
size_t gpu_beta_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens);
size_t gpu_out_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens);

/* A device copy of a test_weights (fp32, conv_bias NULL when the host has
 * none); `w` points at the device arrays, ready for a CUDA context's step. */
typedef struct gpu_weights {
    ssm_layer_weights w;
    float *conv_weight, *conv_bias, *a_log, *dt_bias;
} gpu_weights;
int gpu_weights_upload(const ssm_model_dims *m, const test_weights *host, gpu_weights *out);
void gpu_weights_free(gpu_weights *dw);

/* Device buffers for the inputs of a test_io (x, gate, beta; not out), sized
 * for `tokens` tokens of dtype act. */
typedef struct gpu_inputs {
    void *x, *gate, *beta;
    size_t x_bytes, gate_bytes, beta_bytes;
} gpu_inputs;
int gpu_inputs_alloc(const ssm_model_dims *m, ssm_dtype act, int64_t tokens, gpu_inputs *out);
/* Stream-ordered copy of src's x, gate and beta (same size as dst) into dst.
 * src may change once this returns (pageable copies are staged first). */
int gpu_inputs_copy(gpu_inputs *dst, const test_io *src, cudaStream_t stream);
void gpu_inputs_free(gpu_inputs *in);
/* The step io of device inputs with `out` (device) as the output. */
ssm_step_io gpu_inputs_io(const gpu_inputs *in, void *out);

/* Exports `slot` of a CUDA context into device buffers on `stream`, waits for
 * the stream and copies the result into *out, a host snapshot like
 * test_snapshot_take's (release with test_snapshot_free; *out is always
 * initialized). Returns the export's status, or SSM_ERR_DEVICE after a CUDA
 * call failed. */
ssm_status gpu_snapshot_take(ssm_ctx *ctx, int32_t slot, cudaStream_t stream, test_snapshot *out);

#endif
