/* TF32 tensor-core throughput of one H200 SM, two ways: the mma.sync
 * m16n8k8 that kernels/cuda/mma_tf32.cuh issues (operands in registers, a
 * warp each), and Hopper's wgmma m64n64k8 (operands in shared memory,
 * described by matrix descriptors, a warpgroup of four warps each). It
 * answers one question for docs/prefill.md "Next": how much faster the
 * tensor pipe is through wgmma, the rate a rewrite of the prefill's products
 * could reach. Only the rate is measured; the operands are whatever shared
 * memory and registers hold (the products' values are not used), so no
 * layout has to be right, only legal.
 *
 * Every block runs the same number of products back to back, two blocks an
 * SM on every SM; the time is one kernel's (CUDA events, median of 9).
 * Prints TFLOP/s (2 flops a multiply-add) per variant. Measured:
 * bench/results/2026-11-30-prefill-h200-pass4.md, section 4.
 *
 *   nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a \
 *        bench/tf32_probe.cu -o tf32_probe && ./tf32_probe */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int ITERS = 4096;

/* ------------------------------------------------------------ mma.sync */

/* Each warp keeps CHAINS independent 16 x 8 accumulators so the tensor
 * pipe, not one chain's latency, sets the rate. */
template <int CHAINS> __global__ void mma_sync_loop(float *sink, uint32_t seed)
{
    uint32_t a[4], b[2];
    for (int i = 0; i < 4; i++)
        a[i] = (seed + threadIdx.x * 7 + i) & 0x3f800000u;
    for (int i = 0; i < 2; i++)
        b[i] = (seed + threadIdx.x * 3 + i) & 0x3f800000u;
    float c[CHAINS][4] = {};
    for (int it = 0; it < ITERS; it++) {
#pragma unroll
        for (int k = 0; k < CHAINS; k++)
            asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
                         "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0;
    for (int k = 0; k < CHAINS; k++)
        s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    if (s == 1234.5f) /* never: keeps the products alive */
        sink[threadIdx.x] = s;
}

/* --------------------------------------------------------------- wgmma */

/* A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format"):
 * start address, leading and stride byte offsets, each in 16-byte units;
 * no swizzle. */
__device__ uint64_t descriptor(const void *smem, uint32_t leading, uint32_t stride)
{
    uint32_t address = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((address & 0x3ffff) >> 4) | ((uint64_t)(leading >> 4) << 16) |
           ((uint64_t)(stride >> 4) << 32);
}

/* One warpgroup: d (64 x 64, 32 floats a thread) += A (64 x 8) B (8 x 64). */
__device__ __forceinline__ void wgmma_64x64x8(float (&d)[32], uint64_t da, uint64_t db)
{
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
          "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
          "+f"(d[31])
        : "l"(da), "l"(db), "r"(1));
}

/* Each warpgroup of the block issues DEPTH / 8 products of k 8 (a 64 x 64
 * x DEPTH product; a chunk's are 64 x 64 x 64 or x 128), then commits and
 * waits, ITERS / (DEPTH / 8) times: the products of one group accumulate
 * into one tile, as a product's k-steps do. */
template <int DEPTH> __global__ void wgmma_loop(float *sink)
{
    /* A [64][DEPTH] and B [64][DEPTH], k-major, in 8 x 16-byte core
     * matrices stored one after another: 128 bytes a core matrix, the next
     * along k at +128 (leading), the next along m or n at +128 * DEPTH / 4
     * (stride). */
    __shared__ __align__(128) float a[64 * DEPTH], b[64 * DEPTH];
    for (int i = threadIdx.x; i < 64 * DEPTH; i += blockDim.x) {
        a[i] = 1.0f + (float)(i % 7) * 0.125f;
        b[i] = 0.5f + (float)(i % 5) * 0.25f;
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); /* visible to wgmma */
    __syncthreads();
    const uint32_t leading = 128, stride = 128 * DEPTH / 4;
    float d[32] = {};
    for (int it = 0; it < ITERS / (DEPTH / 8); it++) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int k = 0; k < DEPTH / 8; k++)
            wgmma_64x64x8(d, descriptor(a + k * 64, leading, stride),
                          descriptor(b + k * 64, leading, stride));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    }
    float s = 0;
    for (int i = 0; i < 32; i++)
        s += d[i];
    if (s == 1234.5f)
        sink[threadIdx.x] = s;
}

/* ------------------------------------------------------------- timing */

template <class Launch> float median_ms(Launch launch)
{
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    launch(); /* warm-up */
    std::vector<float> ms;
    for (int r = 0; r < 9; r++) {
        cudaEventRecord(start);
        launch();
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float t = 0;
        cudaEventElapsedTime(&t, start, stop);
        ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void report(const char *name, int blocks, int warps, double flops, float ms)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        printf("%-44s failed: %s\n", name, cudaGetErrorString(e));
        return;
    }
    printf("%-44s %5d blocks x %2d warps  %8.3f ms  %7.1f TFLOP/s\n", name, blocks, warps, ms,
           flops / (ms * 1e-3) / 1e12);
}

} /* namespace */

int main()
{
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("%s, %d SMs; TF32 products, %d per warp or warpgroup\n", prop.name, sms, ITERS);
    float *sink = nullptr;
    cudaMalloc(&sink, 4096 * sizeof(float));

    const double mma_flops = 2.0 * 16 * 8 * 8; /* one m16n8k8 */
    for (int warps : {4, 8, 16}) {
        int blocks = sms * 2;
        float ms = median_ms([&] { mma_sync_loop<4><<<blocks, 32 * warps>>>(sink, 1); });
        char name[64];
        snprintf(name, sizeof name, "mma.sync m16n8k8, 4 chains a warp");
        report(name, blocks, warps, mma_flops * ITERS * 4 * warps * (double)blocks, ms);
    }
    {
        int blocks = sms * 2, warps = 8;
        float ms = median_ms([&] { mma_sync_loop<8><<<blocks, 32 * warps>>>(sink, 1); });
        report("mma.sync m16n8k8, 8 chains a warp", blocks, warps,
               mma_flops * ITERS * 8 * warps * (double)blocks, ms);
    }

    const double wgmma_flops = 2.0 * 64 * 64 * 8; /* one m64n64k8 */
    for (int groups : {1, 2}) {
        int blocks = sms * 2, warps = 4 * groups;
        float ms = median_ms([&] { wgmma_loop<64><<<blocks, 32 * warps>>>(sink); });
        report(groups == 1 ? "wgmma m64n64k8, k 64 a group, 1 warpgroup"
                           : "wgmma m64n64k8, k 64 a group, 2 warpgroups",
               blocks, warps, wgmma_flops * ITERS * groups * (double)blocks, ms);
    }
    {
        int blocks = sms * 2, warps = 4;
        float ms = median_ms([&] { wgmma_loop<32><<<blocks, 32 * warps>>>(sink); });
        report("wgmma m64n64k8, k 32 a group, 1 warpgroup", blocks, warps,
               wgmma_flops * ITERS * (double)blocks, ms);
    }
    cudaFree(sink);
    return 0;
}
