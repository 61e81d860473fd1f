/* How fast can a one-token GDN update move its state, by unit of work?
 * A stand-alone timing program (no library): the update of one layer's
 * fp32 state, B rows x 32 value heads x 128 x 128, from inputs already
 * prepared (k and q normalized, v, decay, beta), in three lane layouts, beside
 * a copy of the same bytes. It isolates the recurrence's layout from
 * everything else a step does (conv, gates, staging, launch choices):
 *
 *   rows8   ssmstate's layout: 8 lanes a value row, 16 key channels a lane
 *           (chunks of 4, 32 apart), 2 rows a lane, a warp 8 rows; row
 *           sums over 8 lanes (3 shuffles).
 *   lanes32 fla's layout: a lane holds 4 consecutive key channels of each of
 *           the warp's R value rows (R = 8 or 16); row sums over 32 lanes
 *           (5 shuffles), k and q cost 4 registers each.
 *
 * Each warp loads its rows straight into registers, no shared memory; a
 * block is 4 independent warps. The results are not compared with anything:
 * the update is the recurrence's, but the sums' order differs by layout.
 *
 * And replay's decode without its history: o = e^g S0 q per value row, the
 * checkpoint read and nothing written ("read32 R8", "read32 R16": fla's
 * layout, the rows' loads written before any sum, no shared memory, no
 * barrier; ptxas keeps 36 registers a thread, so it interleaves them), its
 * GB/s and share of the copy's rate counted on the bytes read: how near
 * the copy's rate a read-only product over the checkpoint runs when nothing
 * waits on a chain of small loads first.
 *
 * Beside them: rows8 writing its state to another buffer ("rows8 out"), a
 * copy kernel in place and to another buffer with the same code ("copy4 in",
 * "copy4 out"), cudaMemcpyAsync, and the prologue's memory and math alone
 * (conv of three window rows and the token, SiLU, the q/k norms, the window
 * written back; "prologue"): what a separate prologue kernel cannot go below.
 *
 * Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90,code=sm_90
 *        bench/bench_decode_unit.cu -o bench_decode_unit
 *        (bench/device_stage.sh does, and device_quick.sh's `unit` step runs it)
 * Run:   ./bench_decode_unit [B ...]     (default 64 256) */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int HV = 32, H = 16, K = 128, V = 128;

struct inputs {
    const float *k, *q, *v, *decay, *beta; /* k, q [B][H][K]; v [B][HV][V]; decay, beta [B][HV] */
    float *out;                            /* [B][HV][V] */
};

__device__ __forceinline__ float sum_lanes(float x, int lanes)
{
    for (int o = lanes / 2; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* ssmstate's layout: lane sub = lane % 8 of row lane / 8 (+4 for the second row). */
__global__ void __launch_bounds__(128) rows8_kernel(const float *state, float *dst, inputs in, int B)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    const int slabs = V / 8, b = warp / (HV * slabs), h = (warp / slabs) % HV;
    if (b >= B)
        return;
    const int row0 = (warp % slabs) * 8 + lane / 8, sub = lane % 8;
    const float *s_head = state + ((size_t)b * HV + h) * V * K;
    float *d_head = dst + ((size_t)b * HV + h) * V * K;
    float s[2][16];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float4 x = *(const float4 *)(s_head + (size_t)(row0 + 4 * i) * K + c * 32 + sub * 4);
            s[i][4 * c] = x.x, s[i][4 * c + 1] = x.y, s[i][4 * c + 2] = x.z, s[i][4 * c + 3] = x.w;
        }
    const float *k = in.k + ((size_t)b * H + h / 2) * K, *q = in.q + ((size_t)b * H + h / 2) * K;
    const float decay = in.decay[b * HV + h], beta = in.beta[b * HV + h];
    float kk[16];
#pragma unroll
    for (int c = 0; c < 4; c++) {
        float4 x = *(const float4 *)(k + c * 32 + sub * 4);
        kk[4 * c] = x.x, kk[4 * c + 1] = x.y, kk[4 * c + 2] = x.z, kk[4 * c + 3] = x.w;
    }
    float o[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            s[i][j] *= decay;
            acc = fmaf(s[i][j], kk[j], acc);
        }
        float u = beta * (in.v[((size_t)b * HV + h) * V + row0 + 4 * i] - sum_lanes(acc, 8));
#pragma unroll
        for (int j = 0; j < 16; j++)
            s[i][j] = fmaf(u, kk[j], s[i][j]);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; c++) {
            float4 x = *(const float4 *)(q + c * 32 + sub * 4);
            acc = fmaf(s[i][4 * c], x.x, acc);
            acc = fmaf(s[i][4 * c + 1], x.y, acc);
            acc = fmaf(s[i][4 * c + 2], x.z, acc);
            acc = fmaf(s[i][4 * c + 3], x.w, acc);
        }
        o[i] = sum_lanes(acc, 8);
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
        for (int c = 0; c < 4; c++)
            *(float4 *)(d_head + (size_t)(row0 + 4 * i) * K + c * 32 + sub * 4) =
                make_float4(s[i][4 * c], s[i][4 * c + 1], s[i][4 * c + 2], s[i][4 * c + 3]);
        if (sub == 0)
            in.out[((size_t)b * HV + h) * V + row0 + 4 * i] = o[i];
    }
}

/* fla's layout: lane holds channels [4 lane, 4 lane + 4) of R rows. */
template <int R>
__global__ void __launch_bounds__(128) lanes32_kernel(float *state, inputs in, int B)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    const int slabs = V / R, b = warp / (HV * slabs), h = (warp / slabs) % HV;
    if (b >= B)
        return;
    const int row0 = (warp % slabs) * R;
    float *s_head = state + ((size_t)b * HV + h) * V * K + (size_t)row0 * K + lane * 4;
    float4 s[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        s[i] = *(const float4 *)(s_head + (size_t)i * K);
    const float4 k = *(const float4 *)(in.k + ((size_t)b * H + h / 2) * K + lane * 4);
    const float4 q = *(const float4 *)(in.q + ((size_t)b * H + h / 2) * K + lane * 4);
    const float decay = in.decay[b * HV + h], beta = in.beta[b * HV + h];
    const float v = lane < R ? in.v[((size_t)b * HV + h) * V + row0 + lane] : 0.0f;
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < R; i++) {
        s[i].x *= decay, s[i].y *= decay, s[i].z *= decay, s[i].w *= decay;
        float acc = fmaf(s[i].x, k.x, fmaf(s[i].y, k.y, fmaf(s[i].z, k.z, s[i].w * k.w)));
        float u = beta * (__shfl_sync(0xffffffffu, v, i) - sum_lanes(acc, 32));
        s[i].x = fmaf(u, k.x, s[i].x), s[i].y = fmaf(u, k.y, s[i].y);
        s[i].z = fmaf(u, k.z, s[i].z), s[i].w = fmaf(u, k.w, s[i].w);
        float out = sum_lanes(fmaf(s[i].x, q.x, fmaf(s[i].y, q.y, fmaf(s[i].z, q.z, s[i].w * q.w))), 32);
        if (lane == i)
            o = out;
    }
#pragma unroll
    for (int i = 0; i < R; i++)
        *(float4 *)(s_head + (size_t)i * K) = s[i];
    if (lane < R)
        in.out[((size_t)b * HV + h) * V + row0 + lane] = o;
}

/* The checkpoint's product alone, in lanes32's layout: R rows a warp. */
template <int R>
__global__ void __launch_bounds__(128) read32_kernel(const float *state, inputs in, int B)
{
    const int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    const int slabs = V / R, b = warp / (HV * slabs), h = (warp / slabs) % HV;
    if (b >= B)
        return;
    const int row0 = (warp % slabs) * R;
    const float *s_head = state + ((size_t)b * HV + h) * V * K + (size_t)row0 * K + lane * 4;
    float4 s[R];
#pragma unroll
    for (int i = 0; i < R; i++)
        s[i] = *(const float4 *)(s_head + (size_t)i * K);
    const float4 q = *(const float4 *)(in.q + ((size_t)b * H + h / 2) * K + lane * 4);
    const float decay = in.decay[b * HV + h];
    float o = 0.0f;
#pragma unroll
    for (int i = 0; i < R; i++) {
        float out = sum_lanes(fmaf(s[i].x, q.x, fmaf(s[i].y, q.y, fmaf(s[i].z, q.z, s[i].w * q.w))), 32);
        if (lane == i)
            o = decay * out;
    }
    if (lane < R)
        in.out[((size_t)b * HV + h) * V + row0 + lane] = o;
}

/* The same bytes read and written back in place, float4 a thread. */
__global__ void copy_kernel(float4 *state, size_t n4)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 x = state[i];
        x.x += 1.0f;
        state[i] = x;
    }
}

/* Four float4 a thread, all four loads before any store, from src to dst:
 * dst == src is the in-place form. Same code either way, so the two differ
 * only in where the stores land. */
__global__ void __launch_bounds__(256) copy4_kernel(const float4 *src, float4 *dst, size_t n4)
{
    size_t i = (blockIdx.x * (size_t)blockDim.x) * 4 + threadIdx.x;
    float4 x[4];
#pragma unroll
    for (int u = 0; u < 4; u++)
        if (i + u * blockDim.x < n4)
            x[u] = src[i + u * blockDim.x];
#pragma unroll
    for (int u = 0; u < 4; u++)
        if (i + u * blockDim.x < n4) {
            x[u].x += 1.0f;
            dst[i + u * blockDim.x] = x[u];
        }
}

/* The prologue's memory and math alone: per row, D = 2 H K + HV V bf16
 * channels, 8 a thread (one 16-byte load each of three window rows and the
 * token), the width-4 conv, SiLU, the norm of q and k heads (16 lanes a
 * head), the window written back and the values in fp32; the gates and beta
 * by the first HV threads of each row. The floor a prologue kernel can reach. */
__global__ void __launch_bounds__(256) prologue_kernel(uint4 *window, const uint4 *x,
                                                       const float *weight, float *out,
                                                       const float *gate, float *decay, int B)
{
    constexpr int D = 2 * H * K + HV * V, per_row = D / 8;
    const int t = blockIdx.x * blockDim.x + threadIdx.x, b = t / per_row, c8 = t % per_row;
    if (b >= B)
        return;
    uint4 w[4];
#pragma unroll
    for (int i = 0; i < 3; i++)
        w[i] = window[((size_t)b * 3 + i) * per_row + c8];
    w[3] = x[(size_t)b * per_row + c8];
    float4 wt[8];
#pragma unroll
    for (int ch = 0; ch < 8; ch++)
        wt[ch] = *(const float4 *)(weight + (c8 * 8 + ch) * 4);
    float value[8], squares = 0.0f;
#pragma unroll
    for (int ch = 0; ch < 8; ch++) {
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const unsigned short *h = (const unsigned short *)&w[i];
            float f = __uint_as_float((unsigned)h[ch] << 16);
            acc += (&wt[ch].x)[i] * f;
        }
        value[ch] = acc / (1.0f + __expf(-acc));
        squares += value[ch] * value[ch];
    }
    for (int o = 8; o > 0; o >>= 1)
        squares += __shfl_xor_sync(0xffffffffu, squares, o);
    const float inv = c8 * 8 < 2 * H * K ? rsqrtf(squares + 1e-6f) : 1.0f;
#pragma unroll
    for (int i = 0; i < 3; i++)
        window[((size_t)b * 3 + i) * per_row + c8] = w[i + 1];
    float4 *o = (float4 *)(out + (size_t)b * D + c8 * 8);
    o[0] = make_float4(value[0] * inv, value[1] * inv, value[2] * inv, value[3] * inv);
    o[1] = make_float4(value[4] * inv, value[5] * inv, value[6] * inv, value[7] * inv);
    if (c8 < HV) {
        float g = gate[b * HV + c8];
        decay[b * HV + c8] = __expf(-__logf(1.0f + __expf(g)));
    }
}

template <class F> float median_us(F launch)
{
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++)
        launch();
    std::vector<float> t;
    for (int i = 0; i < 20; i++) {
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms * 1000.0f);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[t.size() / 2];
}

} /* namespace */

int main(int argc, char **argv)
{
    std::vector<int> batches;
    for (int i = 1; i < argc; i++)
        batches.push_back(atoi(argv[i]));
    if (batches.empty())
        batches = {64, 256};
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("bench_decode_unit on %s: one layer, fp32 state, HV %d, K %d, V %d, median of 20\n",
           prop.name, HV, K, V);
    printf("%6s  %-12s %10s %10s %8s\n", "B", "kernel", "median us", "GB/s", "% copy");
    for (int B : batches) {
        size_t state_n = (size_t)B * HV * V * K;
        float *state, *other, *k, *q, *v, *decay, *beta, *out;
        cudaMalloc(&state, state_n * sizeof(float));
        cudaMalloc(&other, state_n * sizeof(float));
        cudaMemset(other, 0, state_n * sizeof(float));
        cudaMalloc(&k, (size_t)B * H * K * sizeof(float));
        cudaMalloc(&q, (size_t)B * H * K * sizeof(float));
        cudaMalloc(&v, (size_t)B * HV * V * sizeof(float));
        cudaMalloc(&decay, (size_t)B * HV * sizeof(float));
        cudaMalloc(&beta, (size_t)B * HV * sizeof(float));
        cudaMalloc(&out, (size_t)B * HV * V * sizeof(float));
        cudaMemset(state, 0, state_n * sizeof(float));
        cudaMemset(k, 0, (size_t)B * H * K * sizeof(float));
        cudaMemset(q, 0, (size_t)B * H * K * sizeof(float));
        cudaMemset(v, 0, (size_t)B * HV * V * sizeof(float));
        cudaMemset(decay, 0, (size_t)B * HV * sizeof(float));
        cudaMemset(beta, 0, (size_t)B * HV * sizeof(float));
        inputs in = {k, q, v, decay, beta, out};
        double bytes = 2.0 * state_n * sizeof(float);
        int copy_blocks = prop.multiProcessorCount * 8;
        float copy = median_us([&] {
            copy_kernel<<<copy_blocks, 256>>>((float4 *)state, state_n / 4);
        });
        int warps8 = B * HV * (V / 8), warps16 = B * HV * (V / 16);
        float rows8 = median_us([&] { rows8_kernel<<<(warps8 + 3) / 4, 128>>>(state, state, in, B); });
        float rows8_out = median_us([&] { rows8_kernel<<<(warps8 + 3) / 4, 128>>>(state, other, in, B); });
        size_t n4 = state_n / 4, copy4_blocks = (n4 + 1023) / 1024;
        float copy4_in = median_us([&] {
            copy4_kernel<<<copy4_blocks, 256>>>((const float4 *)state, (float4 *)state, n4);
        });
        float copy4_out = median_us([&] {
            copy4_kernel<<<copy4_blocks, 256>>>((const float4 *)state, (float4 *)other, n4);
        });
        float memcpy_us = median_us([&] {
            cudaMemcpyAsync(other, state, state_n * sizeof(float), cudaMemcpyDeviceToDevice, 0);
        });
        constexpr int D = 2 * H * K + HV * V;
        uint4 *pw, *px;
        float *pweight, *pout, *pgate, *pdecay;
        cudaMalloc(&pw, (size_t)B * 3 * D * 2);
        cudaMalloc(&px, (size_t)B * D * 2);
        cudaMalloc(&pweight, (size_t)D * 4 * sizeof(float));
        cudaMalloc(&pout, (size_t)B * D * sizeof(float));
        cudaMalloc(&pgate, (size_t)B * HV * sizeof(float));
        cudaMalloc(&pdecay, (size_t)B * HV * sizeof(float));
        cudaMemset(pw, 0, (size_t)B * 3 * D * 2);
        cudaMemset(px, 0, (size_t)B * D * 2);
        cudaMemset(pweight, 0, (size_t)D * 4 * sizeof(float));
        cudaMemset(pgate, 0, (size_t)B * HV * sizeof(float));
        int pthreads = B * (D / 8);
        float prologue = median_us([&] {
            prologue_kernel<<<(pthreads + 255) / 256, 256>>>(pw, px, pweight, pout, pgate, pdecay, B);
        });
        double pbytes = (double)B * D * 2 * (3 + 1 + 3) + (double)B * D * 4;
        printf("%6d  %-12s %10.2f %10.1f %8s   (bytes %.1f MB)\n", B, "prologue", prologue,
               pbytes / prologue / 1e3, "-", pbytes / 1e6);
        cudaFree(pw), cudaFree(px), cudaFree(pweight), cudaFree(pout), cudaFree(pgate), cudaFree(pdecay);
        float lanes8 = median_us([&] { lanes32_kernel<8><<<(warps8 + 3) / 4, 128>>>(state, in, B); });
        float lanes16 =
            median_us([&] { lanes32_kernel<16><<<(warps16 + 3) / 4, 128>>>(state, in, B); });
        struct row { const char *name; float us; } rows[] = {
            {"copy", copy}, {"copy4 in", copy4_in}, {"copy4 out", copy4_out},
            {"memcpy", memcpy_us}, {"rows8", rows8}, {"rows8 out", rows8_out},
            {"lanes32 R8", lanes8}, {"lanes32 R16", lanes16}};
        for (const row &r : rows)
            printf("%6d  %-12s %10.2f %10.1f %8.1f\n", B, r.name, r.us, bytes / r.us / 1e3,
                   100.0 * copy / r.us);
        /* read only: half the copy's bytes, the share taken of the copy's GB/s */
        float read8 = median_us([&] { read32_kernel<8><<<(warps8 + 3) / 4, 128>>>(state, in, B); });
        float read16 =
            median_us([&] { read32_kernel<16><<<(warps16 + 3) / 4, 128>>>(state, in, B); });
        const row reads[] = {{"read32 R8", read8}, {"read32 R16", read16}};
        for (const row &r : reads)
            printf("%6d  %-12s %10.2f %10.1f %8.1f   (bytes read only)\n", B, r.name, r.us,
                   bytes / 2 / r.us / 1e3, 100.0 * (bytes / 2 / r.us) / (bytes / copy));
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            printf("CUDA error: %s\n", cudaGetErrorString(e));
            return 1;
        }
        cudaFree(other);
        cudaFree(state), cudaFree(k), cudaFree(q), cudaFree(v), cudaFree(decay), cudaFree(beta),
            cudaFree(out);
    }
    return 0;
}
