/* Times the GPU's chunked recurrence alone on the prefill benchmark's shapes:
 * Qwen3-Next (GDN, H 16, HV 32, K = V = 128) and Kimi-Linear (KDA, H = HV =
 * 32), 1 x 4096, 8 x 1024 and 4 x 512 (the serving benchmark's prefill
 * chunk) tokens and a variable-length batch of 8 rows (8192 tokens, 256 to
 * 2048 a row), one layer. Forms: chunk_tc.cuh's pair
 * on tensor cores with an fp32 state, each of its two kernels alone, the
 * pair with a bf16 state, the pair (and each kernel) with bf16 products
 * (chunk_args.bf16_products), and chunk.cuh's kernel on CUDA cores. Inputs are
 * prepared tokens (normalized-scale k and q, v, log-decays, beta) filled on
 * the device; the conv and gates of the prologue are not in the time.
 * Prints the median over the repetitions (CUDA events) and tokens/s per
 * layer; bench/fla_prefill.py times fla-core
 * on the same shapes (docs/prefill.md). SSM_BENCH_TILE_ROWS=32 or 64 forces
 * the scan's block shape; SSM_BENCH_SCAN=single gives the bf16 scan one
 * record's room instead of two.
 *
 *   nvcc -std=c++17 -O3 --fmad=false -gencode=arch=compute_90,code=sm_90 \
 *        -I. -Iinclude bench/bench_chunk.cu -o bench_chunk && ./bench_chunk */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/cuda/chunk.cuh"
#include "kernels/cuda/chunk_tc.cuh"

namespace {

/* Uniform in [lo, hi) from the element index (a hash): reproducible inputs. */
__global__ void fill(float *x, int64_t n, uint32_t seed, float lo, float hi)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 2246822519u;
        h ^= h >> 13;
        x[i] = lo + (hi - lo) * (float)(h >> 8) * (1.0f / 16777216.0f);
    }
}

/* What is timed: both tensor-core kernels, one of them, or chunk.cuh's. */
enum {
    FORM_BOTH,
    FORM_PREPARE,
    FORM_SCAN,
    FORM_BF16_STATE,
    FORM_BF16_PRODUCTS,
    FORM_BF16_PREPARE,
    FORM_BF16_SCAN,
    FORM_CUDA_CORES,
    FORMS
};
const char *const form_names[] = {"tensor-core",    "  prepare",   "  scan",
                                  "tc bf16 state",  "tc bf16 mma", "  prepare",
                                  "  scan",         "cuda-core"};

struct Shape {
    const char *model;
    bool kda;
    int32_t H, HV, rows, tokens; /* tokens: every row's, or the longest row's */
    const int32_t *lengths;      /* rows' own lengths (a variable-length batch), or null */
};

/* A variable-length batch of 8 rows, 8192 tokens in all (8 x 1024 on
 * average), as fla_prefill.py's cu_seqlens: each row in its own region of
 * the inputs, as the modes lay out a step's rows. */
const int32_t varlen_rows[8] = {2048, 512, 1536, 256, 1024, 768, 1280, 768};

/* Tokens of a shape, all rows. */
int64_t shape_tokens(const Shape &s)
{
    int64_t n = 0;
    for (int32_t r = 0; r < s.rows; r++)
        n += s.lengths ? s.lengths[r] : s.tokens;
    return n;
}

bool ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess)
        std::fprintf(stderr, "bench_chunk: %s: %s\n", what, cudaGetErrorString(e));
    return e == cudaSuccess;
}

float *device_floats(int64_t n, uint32_t seed, float lo, float hi)
{
    float *p = nullptr;
    if (!ok(cudaMalloc(&p, sizeof(float) * n), "cudaMalloc"))
        return nullptr;
    fill<<<1024, 256>>>(p, n, seed, lo, hi);
    return p;
}

/* Median time in ms of one launch over `reps`, or a negative value. */
double time_shape(const Shape &s, int form, int reps)
{
    const int32_t K = 128, V = 128, gk = s.kda ? K : 1;
    int64_t tokens = (int64_t)s.rows * s.tokens;
    float *q = device_floats(tokens * s.H * K, 1, -0.09f, 0.09f);
    float *k = device_floats(tokens * s.H * K, 2, -0.09f, 0.09f);
    float *v = device_floats(tokens * s.HV * V, 3, -1.0f, 1.0f);
    float *g = device_floats(tokens * s.HV * gk, 4, -0.1f, 0.0f);
    float *beta = device_floats(tokens * s.HV, 5, 0.0f, 1.0f);
    float *state = device_floats((int64_t)s.rows * s.HV * V * K, 6, -0.1f, 0.1f);
    float *out = device_floats(tokens * s.HV * V, 7, 0.0f, 0.0f);
    int32_t *counts = nullptr;
    std::vector<int32_t> host(s.rows, s.tokens);
    for (int32_t r = 0; r < s.rows && s.lengths; r++)
        host[r] = s.lengths[r];
    double median = -1;
    if (q && k && v && g && beta && state && out &&
        ok(cudaMalloc(&counts, sizeof(int32_t) * s.rows), "cudaMalloc") &&
        ok(cudaMemcpy(counts, host.data(), sizeof(int32_t) * s.rows, cudaMemcpyHostToDevice),
           "counts")) {
        ssm::chunk_args a = {};
        a.H = s.H;
        a.HV = s.HV;
        a.K = K;
        a.V = V;
        a.group = s.HV / s.H;
        a.gk = gk;
        a.counts = counts;
        a.q = q;
        a.k = k;
        a.v = v;
        a.g = g;
        a.beta = beta;
        a.q_token = a.k_token = (int64_t)s.H * K;
        a.q_row = a.k_row = s.tokens * a.q_token;
        a.v_token = (int64_t)s.HV * V;
        a.v_row = s.tokens * a.v_token;
        a.g_token = (int64_t)s.HV * gk;
        a.g_row = s.tokens * a.g_token;
        a.beta_token = s.HV;
        a.beta_row = (int64_t)s.tokens * s.HV;
        a.state = state;
        a.layers = 1;
        a.snapshots = 1;
        a.out = out;
        a.out_token = a.v_token;
        a.out_row = a.v_row;
        a.bf16_products =
            form == FORM_BF16_PRODUCTS || form == FORM_BF16_PREPARE || form == FORM_BF16_SCAN;
        const int base = form == FORM_BF16_PRODUCTS  ? FORM_BOTH
                         : form == FORM_BF16_PREPARE ? FORM_PREPARE
                         : form == FORM_BF16_SCAN    ? FORM_SCAN
                                                     : form;
        dim3 grid((V + SSM_CHUNK_ROWS - 1) / SSM_CHUNK_ROWS, s.HV, s.rows);
        size_t shared = ssm::chunk_shared_floats(K) * sizeof(float);
        cudaFuncSetAttribute(ssm::chunk_kernel<float, float>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
        int32_t chunks = (s.tokens + SSM_CHUNK_TOKENS - 1) / SSM_CHUNK_TOKENS;
        float *work = nullptr;
        bool tensor_cores = form != FORM_CUDA_CORES;
        if (tensor_cores &&
            !ok(cudaMalloc(&work, sizeof(float) * ssm::chunk_tc_work_floats(K, V, s.HV, s.rows,
                                                                            chunks)),
                "cudaMalloc"))
            return -1;
        if (form == FORM_BF16_STATE) /* a zero bf16 state; timing does not depend on it */
            cudaMemset(state, 0, sizeof(float) * (size_t)s.rows * s.HV * V * K);
        int device = 0, sms = 0, optin = 0;
        cudaGetDevice(&device);
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        /* SSM_BENCH_TILE_ROWS=32 or 64 forces the scan's block shape */
        const char *forced = std::getenv("SSM_BENCH_TILE_ROWS");
        const int32_t tile = forced ? std::atoi(forced)
                                    : ssm::chunk_scan_tile_rows(K, V, s.HV, s.rows, sms, optin);
        /* the bf16 scan with two records' room where it fits, as the
           library runs it; SSM_BENCH_SCAN=single: one */
        const char *scan = std::getenv("SSM_BENCH_SCAN");
        a.scan_double_buffer = !(scan && std::strcmp(scan, "single") == 0) &&
                               ssm::chunk_scan2_shared_bytes(K, tile) <= (size_t)optin;
        cudaEvent_t start, stop;
        cudaEventCreate(&start);
        cudaEventCreate(&stop);
        std::vector<double> times;
        for (int i = 0; i < reps + 2; i++) {
            cudaEventRecord(start);
            if (base == FORM_PREPARE || (base == FORM_SCAN && i == 0))
                ssm::launch_chunk_prepare<float, float>(a, s.rows, chunks, work, 0);
            if (base == FORM_SCAN && i == 0)
                cudaEventRecord(start); /* the scan alone, over the records of the first call */
            if (base == FORM_SCAN)
                ssm::launch_chunk_scan<float, float>(a, s.rows, chunks, work, tile, 0);
            else if (base == FORM_BOTH)
                ssm::launch_chunk_tc<float, float>(a, s.rows, chunks, work, tile, 0);
            else if (form == FORM_BF16_STATE) /* the state buffer read as bf16 */
                ssm::launch_chunk_tc<ssm::bf16, float>(a, s.rows, chunks, work, tile, 0);
            else if (form == FORM_CUDA_CORES)
                ssm::chunk_kernel<float, float><<<grid, SSM_CHUNK_THREADS, shared>>>(a);
            cudaEventRecord(stop);
            if (!ok(cudaEventSynchronize(stop), "chunk_kernel"))
                break;
            float ms = 0;
            cudaEventElapsedTime(&ms, start, stop);
            if (i >= 2) /* two warm-up launches */
                times.push_back(ms);
        }
        if (ok(cudaGetLastError(), "chunk_kernel") && !times.empty()) {
            std::sort(times.begin(), times.end());
            median = times[times.size() / 2];
        }
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        cudaFree(work);
    }
    for (void *p : {(void *)q, (void *)k, (void *)v, (void *)g, (void *)beta, (void *)state,
                    (void *)out, (void *)counts})
        cudaFree(p);
    return median;
}

} /* namespace */

/* bench_chunk [SHAPE [REPS]]: every shape and form, or shape SHAPE (0-7)
 * in one form only, for a profiler: the tensor-core pair, or the form
 * numbered SSM_BENCH_FORM (its row in the table, from 0). */
int main(int argc, char **argv)
{
    const Shape shapes[] = {
        {"qwen3-next (GDN)", false, 16, 32, 1, 4096, nullptr},
        {"qwen3-next (GDN)", false, 16, 32, 8, 1024, nullptr},
        {"qwen3-next (GDN)", false, 16, 32, 8, 2048, varlen_rows},
        {"qwen3-next (GDN)", false, 16, 32, 4, 512, nullptr},
        {"kimi-linear (KDA)", true, 32, 32, 1, 4096, nullptr},
        {"kimi-linear (KDA)", true, 32, 32, 8, 1024, nullptr},
        {"kimi-linear (KDA)", true, 32, 32, 8, 2048, varlen_rows},
        {"kimi-linear (KDA)", true, 32, 32, 4, 512, nullptr},
    };
    const int shape_count = (int)(sizeof shapes / sizeof shapes[0]);
    int only = argc > 1 ? std::atoi(argv[1]) : -1, reps = argc > 2 ? std::atoi(argv[2]) : 20;
    const char *picked = std::getenv("SSM_BENCH_FORM");
    const int only_form = picked ? std::atoi(picked) : FORM_BOTH;
    std::printf("%-20s %-12s %12s %12s %16s\n", "model", "kernel", "B x T", "median ms",
                "tokens/s/layer");
    int failed = 0;
    for (int i = 0; i < shape_count; i++)
        for (int form = 0; form < FORMS; form++) {
            if (only >= 0 && (i != only || form != only_form))
                continue;
            const Shape &s = shapes[i];
            double ms = time_shape(s, form, form == FORM_CUDA_CORES ? 5 : reps);
            if (ms < 0) {
                failed = 1;
                continue;
            }
            double rate = (double)shape_tokens(s) / (ms * 1e-3);
            char size[32];
            if (s.lengths)
                std::snprintf(size, sizeof size, "%d varlen", s.rows);
            else
                std::snprintf(size, sizeof size, "%d x %d", s.rows, s.tokens);
            std::printf("%-20s %-12s %12s %12.3f %15.2fM\n", s.model, form_names[form], size,
                        ms, rate / 1e6);
        }
    return failed;
}
