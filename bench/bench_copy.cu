/* The copy ceiling of `ssmstate bench`: a device-to-device copy as a plain
 * kernel (16-byte loads and stores, four per thread in flight, one pass
 * over the buffer), timed in the same run as the modes. cudaMemcpyAsync is
 * timed too ("memcpy"); as a graph node it ran slower than this kernel on
 * the H200 at 512 MiB (bench/results/2026-11-29-gpu-h200.md), so the kernel
 * is the ceiling the table's "% copy" divides by. */
#include <cuda_runtime.h>
#include <stdint.h>

#define COPY_THREADS 256
#define COPY_UNROLL 4

__global__ void __launch_bounds__(COPY_THREADS) copy_kernel(float4 *dst, const float4 *src,
                                                            int64_t n)
{
    int64_t first = (int64_t)blockIdx.x * COPY_THREADS * COPY_UNROLL + threadIdx.x;
    float4 v[COPY_UNROLL];
#pragma unroll
    for (int i = 0; i < COPY_UNROLL; i++) {
        int64_t at = first + (int64_t)i * COPY_THREADS;
        if (at < n)
            v[i] = src[at];
    }
#pragma unroll
    for (int i = 0; i < COPY_UNROLL; i++) {
        int64_t at = first + (int64_t)i * COPY_THREADS;
        if (at < n)
            dst[at] = v[i];
    }
}

__global__ void copy_tail_kernel(uint8_t *dst, const uint8_t *src, int64_t bytes)
{
    int64_t at = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (at < bytes)
        dst[at] = src[at];
}

/* Enqueues the copy of `bytes` from src to dst (16-byte aligned, as
 * cudaMalloc gives) on stream. Returns the launch status. */
extern "C" cudaError_t bench_copy_kernel(void *dst, const void *src, size_t bytes,
                                         cudaStream_t stream)
{
    int64_t n = (int64_t)(bytes / 16), tail = (int64_t)(bytes % 16);
    int64_t per_block = (int64_t)COPY_THREADS * COPY_UNROLL;
    if (n > 0) {
        int64_t blocks = (n + per_block - 1) / per_block;
        if (blocks > 0x7fffffff)
            return cudaErrorInvalidValue;
        copy_kernel<<<(unsigned)blocks, COPY_THREADS, 0, stream>>>((float4 *)dst,
                                                                  (const float4 *)src, n);
    }
    if (tail > 0)
        copy_tail_kernel<<<1, 32, 0, stream>>>((uint8_t *)dst + n * 16,
                                               (const uint8_t *)src + n * 16, tail);
    return cudaGetLastError();
}
