/* The chunked recurrence of kernels/chunk.h on the GPU: the same
 * algebra, step for step, so that the CPU form in kernels/chunk.c is its
 * tested statement. One block per (row, value head, tile of
 * SSM_CHUNK_ROWS value rows) runs the row's tokens chunk after chunk of up
 * to SSM_CHUNK_TOKENS, its state tile in shared memory:
 *
 *   a. the chunk's k, q, G (the log-decay summed from the chunk's start, per
 *      key channel for KDA) and beta v of the tile's rows are staged;
 *   b. A[t][i] = beta_t sum_c D_ti[c] k_i[c] k_t[c] and the output weights
 *      QK[t][i] = sum_c D_ti[c] k_i[c] q_t[c], one (t, i) pair per warp,
 *      D_ti = e^{G_t - G_i} from the difference;
 *   c. q_t becomes e^{G_t} q_t, k_i becomes beta_i e^{G_i} k_i, and
 *      X_i = e^{G_last - G_i} k_i;
 *   d. T = (I + A)^-1 by forward substitution, row after row;
 *   e. W = T (beta e^G K), then U = T (beta V) - W S0^T (the tile's rows);
 *   f. o_t = S0 (e^{G_t} q_t) + sum_{i<=t} QK[t][i] u_i;
 *   g. S = e^{G_last} S0 + sum_i u_i X_i^T, rounded to the state dtype.
 *
 * Every sum runs in fp32 in the order of chunk.c where one thread owns it
 * (b's over key channels are spread over a warp), so GPU and CPU differ by
 * rounding only, and both from the fp64 token-by-token recurrence by the
 * numerics contract's chunked bound (docs/numerics.md). The parts that do
 * not depend on the value rows (b to e's W) are computed by every tile of a
 * head; this first form runs them on CUDA cores, not tensor cores
 * (docs/prefill.md). */
#ifndef SSM_KERNELS_CUDA_CHUNK_CUH
#define SSM_KERNELS_CUDA_CHUNK_CUH

#include "kernels/chunk.h"
#include "kernels/cuda/device.cuh"

namespace ssm {

#define SSM_CHUNK_ROWS 32   /* value rows of one block */
#define SSM_CHUNK_THREADS 256

/* Where a chunk job's inputs and outputs are, in elements. Row r of the
 * launch (blockIdx.z) runs slot = slots[r] (slots NULL: r; -1: padding,
 * skipped; outside [0, capacity): skipped and flagged) and reads the inputs
 * of `in_row` (r with rows_own_inputs, else slot):
 * q of (in_row, token t, key head) at q + in_row * q_row + t * q_token +
 * head * K, likewise k, v ([HV][V] per token, Act), g ([HV] for GDN,
 * [HV][K] for KDA: log-decays) and beta ([HV]). Its state is
 * state + ((slot * layers + layer) * snapshots + (current ? current[slot]
 * : 0)) * HV * V * K ([HV][V][K], State). Its tokens: counts[r], or with
 * token_offsets the prefill piece's, clamp(token_offsets[r + 1] -
 * token_offsets[r] - piece, 0, SSM_CHUNK_TOKENS). Outputs ([HV][V] per
 * token, Act; out NULL: none) of token t at out + index * out_token with
 * index token_offsets[r] + piece + t, or r * out_row / out_token + t. */
/* The step's projections and weights, for a tensor-core prepare that runs
 * the prologue itself (chunk_prologue.cuh) instead of reading the records
 * of prep.cuh's kernel: `on` false, the records (q, k, g, beta, v below). */
struct chunk_prologue {
    bool on;
    dims d;
    const void *x, *gate, *beta; /* [token][D], [token][GW], [token][HV]: Act */
    const float *conv_weight, *conv_bias, *a_log, *dt_bias;
    void *conv; /* [capacity][layers][conv_rows][D] Act: the slot's window first */
    int32_t conv_rows;
};

struct chunk_args {
    int32_t H, HV, K, V, group, gk; /* gk: K (per-channel decay) or 1 */
    const int32_t *counts, *token_offsets;
    int32_t piece;
    const int32_t *slots;
    int32_t capacity;
    uint32_t *flags;
    /* The inputs of row r at in_row r, not its slot (a prefill, whose
     * scratch is by row: it holds a bounded number of chunks, not one a
     * slot). */
    bool rows_own_inputs;
    /* chunk_tc.cuh only: its products on bf16 operands, one pass each,
     * instead of 3xTF32 (the inverse of I + A keeps 3xTF32). */
    bool bf16_products;
    /* chunk_tc.cuh only, with bf16_products: the scan streams a chunk's
     * whole record while the chunk before computes (two records' room,
     * chunk_scan2_shared_bytes); the same bits. */
    bool scan_double_buffer;
    const float *q, *k, *g, *beta;
    const void *v;
    int64_t q_row, q_token, k_row, k_token, v_row, v_token, g_row, g_token, beta_row, beta_token;
    void *state;
    int32_t layers, layer, snapshots;
    const int32_t *current;
    void *out;
    int64_t out_row, out_token;
    chunk_prologue pro;
};

/* Floats of shared memory of one block. */
__host__ __device__ inline size_t chunk_shared_floats(int32_t K)
{
    size_t c = SSM_CHUNK_TOKENS, k = (size_t)K, rows = SSM_CHUNK_ROWS;
    return 4 * c * k      /* k (then beta e^G k), q (then e^G q), G (then W), X */
           + 3 * c * c    /* A, T, QK */
           + 2 * c * rows /* beta v, U */
           + rows * (k + 1) /* the state tile, rows padded by one (no bank conflicts) */
           + 2 * k        /* G_last, e^{G_last} */
           + c;           /* beta */
}

/* G ([tokens][gk] log-decays) summed over tokens in place, from the first
 * token: column j by thread j of the block's `threads`. Sixteen tokens at a
 * time are loaded before they are summed and stored, so the loads of a
 * batch overlap instead of each waiting behind the store before it; the
 * sums run in token order all the same. */
__device__ __forceinline__ void chunk_running_sum(float *G, int32_t tokens, int32_t gk,
                                                  int32_t threads)
{
    constexpr int32_t BATCH = 16;
    for (int32_t j = threadIdx.x; j < gk; j += threads) {
        float sum = 0.0f;
        for (int32_t t0 = 0; t0 < tokens; t0 += BATCH) {
            float g[BATCH];
#pragma unroll
            for (int32_t i = 0; i < BATCH; i++)
                g[i] = t0 + i < tokens ? G[(t0 + i) * gk + j] : 0.0f;
#pragma unroll
            for (int32_t i = 0; i < BATCH; i++) {
                sum += g[i];
                g[i] = sum;
            }
#pragma unroll
            for (int32_t i = 0; i < BATCH; i++)
                if (t0 + i < tokens)
                    G[(t0 + i) * gk + j] = g[i];
        }
    }
}

/* grid (ceil(V / SSM_CHUNK_ROWS), HV, rows), SSM_CHUNK_THREADS threads,
 * chunk_shared_floats(K) floats of dynamic shared memory. */
template <class State, class Act>
__global__ void __launch_bounds__(SSM_CHUNK_THREADS, 1) chunk_kernel(chunk_args a)
{
    extern __shared__ float shared[];
    const int32_t C = SSM_CHUNK_TOKENS, R = SSM_CHUNK_ROWS, K = a.K, gk = a.gk;
    const int32_t KP = K + 1; /* the state tile's row stride: lanes of a warp on different rows
                                 read different banks */
    const int32_t r = blockIdx.z, h = blockIdx.y, e0 = blockIdx.x * R;
    const int32_t tid = threadIdx.x, threads = blockDim.x;
    const int32_t warp = tid >> 5, lane = tid & 31, warps = threads >> 5;
    const int32_t slot = a.slots ? a.slots[r] : r;
    if (a.slots && !slot_is_live(slot, a.capacity, a.flags,
                                 blockIdx.x == 0 && h == 0 && threadIdx.x == 0))
        return;
    const int64_t in_row = a.rows_own_inputs ? r : slot; /* where the row's inputs are */
    int32_t n;
    if (a.token_offsets) {
        int32_t left = a.token_offsets[r + 1] - a.token_offsets[r] - a.piece;
        n = left < 0 ? 0 : (left < C ? left : C);
    } else {
        n = a.counts[r];
    }
    if (n <= 0)
        return;
    float *kc = shared, *qc = kc + C * K, *G = qc + C * K, *X = G + C * K;
    float *A = X + C * K, *T = A + C * C, *QK = T + C * C;
    float *bv = QK + C * C, *U = bv + C * R, *S = U + C * R;
    float *glast = S + R * KP, *elast = glast + K, *beta = elast + K;
    float *W = G; /* W takes G's place once G is spent (step e) */
    const int32_t key_head = h / a.group;
    const int64_t head = (int64_t)a.V * K;
    const int64_t snapshot = ((int64_t)slot * a.layers + a.layer) * a.snapshots +
                             (a.current ? a.current[slot] : 0);
    State *state = (State *)a.state + (snapshot * a.HV + h) * head;
    const Act *values = (const Act *)a.v;
    Act *out = (Act *)a.out;

    for (int32_t i = tid; i < R * K; i += threads) {
        int32_t e = i / K, j = i % K;
        S[e * KP + j] = e0 + e < a.V ? load(state + (int64_t)(e0 + e) * K + j) : 0.0f;
    }
    for (int32_t t0 = 0; t0 < n; t0 += C) {
        const int32_t c = n - t0 < C ? n - t0 : C;
        __syncthreads(); /* the previous chunk is done with every buffer */
        /* a. */
        for (int32_t i = tid; i < c * K; i += threads) {
            int32_t t = i / K, j = i % K;
            int64_t at = (int64_t)key_head * K + j;
            kc[i] = a.k[in_row * a.k_row + (t0 + t) * a.k_token + at];
            qc[i] = a.q[in_row * a.q_row + (t0 + t) * a.q_token + at];
        }
        for (int32_t t = tid; t < c; t += threads)
            beta[t] = a.beta[in_row * a.beta_row + (t0 + t) * a.beta_token + h];
        for (int32_t i = tid; i < c * gk; i += threads) {
            int32_t t = i / gk, j = i % gk;
            G[i] = a.g[in_row * a.g_row + (t0 + t) * a.g_token + (int64_t)h * gk + j];
        }
        __syncthreads();
        chunk_running_sum(G, c, gk, threads);
        __syncthreads();
        for (int32_t i = tid; i < c * R; i += threads) {
            int32_t t = i / R, e = i % R;
            float v = e0 + e < a.V ? load(values + in_row * a.v_row + (t0 + t) * a.v_token +
                                          (int64_t)h * a.V + e0 + e)
                                   : 0.0f;
            bv[i] = beta[t] * v;
        }
        /* b. */
        for (int32_t p = warp; p < c * c; p += warps) {
            int32_t t = p / c, i = p % c;
            if (i > t)
                continue; /* the whole warp */
            float kk = 0.0f, kq = 0.0f;
            for (int32_t j = lane; j < K; j += 32) {
                float d = gk == 1 ? 1.0f : ssm_expf(G[t * gk + j] - G[i * gk + j]);
                kk += d * kc[i * K + j] * kc[t * K + j];
                kq += d * kc[i * K + j] * qc[t * K + j];
            }
            kk = warp_sum(kk);
            kq = warp_sum(kq);
            if (gk == 1) {
                float d = ssm_expf(G[t] - G[i]);
                kk *= d;
                kq *= d;
            }
            if (lane == 0) {
                A[t * c + i] = i < t ? beta[t] * kk : 0.0f;
                QK[t * c + i] = kq;
            }
        }
        __syncthreads();
        /* c. */
        for (int32_t i = tid; i < c * K; i += threads) {
            int32_t t = i / K, j = i % K, at = gk == 1 ? 0 : j;
            float gt = G[t * gk + at], gl = G[(c - 1) * gk + at];
            float k = kc[i];
            X[i] = ssm_expf(gl - gt) * k;
            kc[i] = beta[t] * ssm_expf(gt) * k;
            qc[i] = ssm_expf(gt) * qc[i];
        }
        for (int32_t j = tid; j < gk; j += threads) {
            glast[j] = G[(c - 1) * gk + j];
            elast[j] = ssm_expf(glast[j]);
        }
        /* d. Row t of T needs rows < t: one barrier per row. */
        for (int32_t t = 0; t < c; t++) {
            for (int32_t i = tid; i < c; i += threads) {
                float value = i == t ? 1.0f : 0.0f;
                if (i < t) {
                    float sum = 0.0f;
                    for (int32_t m = i; m < t; m++)
                        sum += A[t * c + m] * T[m * c + i];
                    value = -sum;
                }
                T[t * c + i] = value;
            }
            __syncthreads();
        }
        /* e. W[t] = sum_{i<=t} T[t][i] (beta_i e^{G_i} k_i), into G's place. */
        for (int32_t i = tid; i < c * K; i += threads) {
            int32_t t = i / K, j = i % K;
            float sum = 0.0f;
            for (int32_t m = 0; m <= t; m++)
                sum += T[t * c + m] * kc[m * K + j];
            W[i] = sum;
        }
        __syncthreads();
        for (int32_t i = tid; i < c * R; i += threads) {
            int32_t t = i / R, e = i % R;
            float uv = 0.0f, recalled = 0.0f;
            for (int32_t m = 0; m <= t; m++)
                uv += T[t * c + m] * bv[m * R + e];
            for (int32_t j = 0; j < K; j++)
                recalled += W[t * K + j] * S[e * KP + j];
            U[i] = uv - recalled;
        }
        __syncthreads();
        /* f. */
        if (out) {
            for (int32_t i = tid; i < c * R; i += threads) {
                int32_t t = i / R, e = i % R;
                if (e0 + e >= a.V)
                    continue;
                float acc = 0.0f;
                for (int32_t j = 0; j < K; j++)
                    acc += S[e * KP + j] * qc[t * K + j];
                for (int32_t m = 0; m <= t; m++)
                    acc += QK[t * c + m] * U[m * R + e];
                int64_t token = a.token_offsets
                                    ? (int64_t)a.token_offsets[r] + a.piece + t0 + t
                                    : r * (a.out_row / a.out_token) + t0 + t;
                store(out + token * a.out_token + (int64_t)h * a.V + e0 + e, acc);
            }
            __syncthreads(); /* S is read above and written below */
        }
        /* g. */
        for (int32_t i = tid; i < R * K; i += threads) {
            int32_t e = i / K, j = i % K;
            float s = S[e * KP + j] * elast[gk == 1 ? 0 : j];
            for (int32_t m = 0; m < c; m++)
                s += U[m * R + e] * X[m * K + j];
            S[e * KP + j] = round_to((const State *)0, s);
        }
    }
    __syncthreads();
    for (int32_t i = tid; i < R * K; i += threads) {
        int32_t e = i / K, j = i % K;
        if (e0 + e < a.V)
            store(state + (int64_t)(e0 + e) * K + j, S[e * KP + j]);
    }
}

} /* namespace ssm */
#endif
