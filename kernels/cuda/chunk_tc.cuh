/* The chunked recurrence of kernels/chunk.h on tensor cores, in
 * two kernels over a work buffer of one record per (row, chunk, value head):
 *
 * 1. chunk_prepare_kernel, one block per (chunk, value head, row), every
 *    chunk of every row at once (they do not depend on each other): the
 *    chunk's G (log-decays summed from its start), A and QK with the decay
 *    of each pair, T = (I + A)^-1, and from them the record: W = T (beta
 *    e^G K), Uv = T (beta V), QK, e^G q, e^{G_last - G} k and e^{G_last}.
 * 2. chunk_scan_kernel, one block per (value tile, value head, row), the
 *    row's chunks in order, its state tile in shared memory: U = Uv - W S^T,
 *    o = (e^G q) S^T + QK U, S = e^{G_last} S + U^T (e^{G_last - G} k),
 *    rounded to the state dtype at each chunk's end as chunk.c does. The
 *    next chunk's record streams in (cp.async) while this one computes.
 *
 * The dense products run on tensor cores (mma_tf32.cuh: TF32 mma.m16n8k8,
 * fp32 accumulation), each as three (3xTF32: the operands split into a
 * TF32 part and the rest), close to fp32, so CPU and CUDA stay within
 * the contract's 1e-5 for an fp32 state (docs/prefill.md has the measured
 * distances). One TF32 product was tried and dropped: with a bf16 state a
 * long KDA prefill (lower-bound gate) came within 1.0e-2 of the CPU's, past
 * the 7e-3 that the contract's chunked and recurrent bounds leave between
 * them.
 *
 * Decays are formed from differences. With a per-channel gate
 * (KDA) the decay of a pair does not factor out of the sum over channels:
 * the operands of a row block of 16 tokens are scaled around the token r
 * before it, k_t e^{G_t - G_r} and k_i e^{G_r - G_i}; below the diagonal
 * both factors are at most 1 (no overflow at any gate), and the diagonal
 * block's factors above 1 are kept when bounded (SSM_TC_SPAN), else that
 * block takes e^{G_t - G_i} per pair on CUDA cores. With one gate per head
 * (GDN) the products are of the raw vectors and the pair's decay
 * multiplies each sum.
 *
 * With chunk_args.bf16_products the products within a chunk (A, QK, T X,
 * QK U, U^T Kd) are one bf16 mma.m16n8k16 each (mma_tf32.cuh's mma_bf16:
 * operands rounded to bf16, fp32 accumulation), as fla's kernels take
 * theirs: within the contract's 5e-3 of fp64 for this form, not the 1e-5 of
 * the CPU's that 3xTF32 keeps. The inverse (I + A)^-1 stays 3xTF32. Such a
 * chunk's record holds W, e^G q, e^{G_last - G} k and QK in bf16
 * (tc_record16), half the bytes, and its scan is chunk_scan_bf16.cuh's
 * kernel: operands staged as bf16, the state's products on its bf16 pair.
 * Every product of a chunk of fewer than SSM_TC_BF16_MIN_TOKENS tokens
 * stays 3xTF32 (fp32 record; against the state's pair, its W and e^G q are
 * split in two bf16): a prompt's last few
 * tokens have outputs made of a handful of dot products each, and with
 * bf16 operands one that cancels left a one-token KDA prompt 5.3e-3 from
 * fp64 (a whole prefill's chunks average such errors away; a short one's
 * cannot).
 *
 * Shapes: K of 32, 64 or 128, V a multiple of 16 up to 128
 * (chunk_tc_supported); the other shapes keep chunk.cuh's kernel. */
#ifndef SSM_KERNELS_CUDA_CHUNK_TC_CUH
#define SSM_KERNELS_CUDA_CHUNK_TC_CUH

#include <type_traits>

#include "kernels/cuda/chunk.cuh"
#include "kernels/cuda/chunk_prologue.cuh"
#include "kernels/cuda/mma_tf32.cuh"

namespace ssm {

#define SSM_TC_THREADS 256 /* eight warps: GDN's prepare; KDA's takes twice as many */
#define SSM_TC_SUB 16      /* a product tile's side; sub-chunks of the decay scaling */
#define SSM_TC_MAX_V 128   /* the largest V of the tensor-core path */
#define SSM_TC_SPAN 60.0f  /* the largest e^x a scaled operand may carry (fp32 holds e^88) */
#define SSM_TC_BF16_MIN_TOKENS 16 /* the fewest tokens of a chunk whose products go bf16 */

/* A record's parts, in floats from its start; every part row-major and
 * 16-float aligned. */
struct tc_record {
    int64_t W, Qg, Kd, Uv, QK, decay, floats;
};

__host__ __device__ inline tc_record tc_record_layout(int32_t K, int32_t V)
{
    const int64_t C = SSM_CHUNK_TOKENS;
    tc_record r;
    r.W = 0;                      /* [C][K] W = T (beta e^G K) */
    r.Qg = r.W + C * K;           /* [C][K] e^{G_t} q_t */
    r.Kd = r.Qg + C * K;          /* [C][K] e^{G_last - G_i} k_i */
    r.Uv = r.Kd + C * K;          /* [C][V] T (beta V) */
    r.QK = r.Uv + C * V;          /* [C][C] the output weights, zero above the diagonal */
    r.decay = r.QK + C * C;       /* [K] e^{G_last} (GDN: element 0) */
    r.floats = align16(r.decay + K);
    return r;
}

/* The record of a chunk whose products are bf16 (at least
 * SSM_TC_BF16_MIN_TOKENS tokens, chunk_args.bf16_products): W, Qg, Kd and
 * QK as bf16, in 16-bit elements from the record's start (they end before
 * tc_record's Uv, which stays fp32 where it is, as does the decay). Each is
 * rounded to bf16 where an fp32 record's value would be at its use. */
struct tc_record16 {
    int64_t W, Qg, Kd, QK;
};

__host__ __device__ inline tc_record16 tc_record16_layout(int32_t K)
{
    const int64_t C = SSM_CHUNK_TOKENS;
    return tc_record16{0, C * K, 2 * C * K, 3 * C * K};
}

/* Floats of the work buffer for `rows` rows of up to `chunks` chunks. */
inline int64_t chunk_tc_work_floats(int32_t K, int32_t V, int32_t HV, int32_t rows, int32_t chunks)
{
    return tc_record_layout(K, V).floats * HV * (int64_t)rows * chunks;
}

/* Shared-memory strides (mma_tf32.cuh): rows read by ldmatrix (A by rows,
 * B by columns) padded by four floats, rows read element by element (B by
 * rows, A by columns) by eight, so that neither kind of load meets a bank
 * conflict. Both keep rows 16-byte aligned. */
__host__ __device__ inline int32_t tc_pad(int32_t n) { return n + 4; }
__host__ __device__ inline int32_t tc_pad_rows(int32_t n) { return n + 8; }

/* The prepare's scratch: GDN's q, then beta V and beta e^G K; KDA's scaled
 * operands of a row block (2 x 16 left and up to 64 right rows) first. */
__host__ __device__ inline size_t chunk_prepare_scratch_floats(int32_t K, int32_t V, int32_t gk)
{
    size_t C = SSM_CHUNK_TOKENS, LK = tc_pad(K), LC = tc_pad(SSM_CHUNK_TOKENS);
    size_t scratch = (gk == 1 ? C : C + 32) * LK, keys = C * tc_pad_rows(K),
           values = C * tc_pad_rows(V), sums = C * LC;
    scratch = scratch > keys ? scratch : keys;
    scratch = scratch > values ? scratch : values;
    return scratch > sums ? scratch : sums;
}

/* Warps of the prepare that solve the inverse's blocks (one a diagonal
 * block); the others compute the chunk's values meanwhile. */
#define SSM_TC_INVERSE_WARPS (SSM_CHUNK_TOKENS / SSM_TC_SUB)

/* k, q (KDA; GDN's q sits in the scratch), G, beta, GDN's per-token
 * factors e^G and e^{G_last - G}, A, T (QK before it), the scratch, and
 * the inverse's block sums (P, one 16 x 16 block for each warp below the
 * diagonal's first). GDN's fits two blocks on an SM at K = 128. */
__host__ __device__ inline size_t chunk_prepare_shared_floats(int32_t K, int32_t V, int32_t gk)
{
    size_t C = SSM_CHUNK_TOKENS, LK = tc_pad(K), LC = tc_pad(SSM_CHUNK_TOKENS);
    size_t sums = (size_t)(SSM_TC_INVERSE_WARPS - 1) * SSM_TC_SUB * tc_pad_rows(SSM_TC_SUB);
    return (gk == 1 ? 1 : 2) * C * LK + C * gk + C + (gk == 1 ? 2 * C : 0) + 2 * C * LC +
           chunk_prepare_scratch_floats(K, V, gk) + sums;
}

/* The state tile of R value rows (fp32, or with bf16 products its bf16
 * pair: two arrays of R rows of K + 8 elements), W, Qg, Kd, Uv, U, o, QK
 * and the decay. */
__host__ __device__ inline size_t chunk_scan_shared_floats(int32_t K, int32_t R)
{
    size_t C = SSM_CHUNK_TOKENS, LK = tc_pad(K), LC = tc_pad(SSM_CHUNK_TOKENS),
           LR = tc_pad_rows(R);
    return R * tc_pad_rows(K) + 2 * C * LK + C * tc_pad_rows(K) + 3 * C * LR + C * LC + K;
}

/* e^x for the decay factors of the tensor-core prepare: the special-function
 * unit's 2^x (ex2.approx, about two ulps) of x log2(e), two instructions
 * where kernels/math.h's ssm_expf takes about thirty and CUDA's exp2f adds
 * a rescaling for results below 2^-126; KDA forms one per key channel and
 * token several times over. A result below 2^-126 is flushed to zero (ftz):
 * such a factor multiplies values of order one, so what it drops is far
 * below fp32's rounding of the sums it enters. The extra error, under
 * 2^-24 |x| relative, is far inside what separates this path from chunk.c's
 * sums anyway (tests/gpu/check_chunk_cuda: within 1e-4 of the CPU's chunked
 * form with an fp32 state, measured about 2e-6). NaN stays NaN, e^-inf is 0. */
__device__ __forceinline__ float chunk_exp(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x * 1.4426950408889634f));
    return y;
}

/* The tensor-core path runs these shapes (K a template argument of the
 * kernels, so their index arithmetic folds). */
inline bool chunk_tc_supported(int32_t K, int32_t V)
{
    return (K == 32 || K == 64 || K == 128) && V % 16 == 0 && V <= SSM_TC_MAX_V;
}

namespace tc {

/* out [C][cols] (row-major, global) = T X for the lower-triangular T
 * [C][C] (by rows, stride ldt) and X [C][cols] (by rows, stride ldx = 8 mod
 * 32), cols a multiple of 16; tile (I, n) by warp p % warps, T's zero blocks
 * above the diagonal skipped. With out16, the result goes there as bf16
 * instead. */
__device__ __forceinline__ void times_T(bool bf16, const float *T, int32_t ldt, const float *X,
                                        int32_t ldx, int32_t cols, float *out, int32_t warp,
                                        int32_t warps, uint16_t *out16 = nullptr)
{
    const int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB;
    for (int32_t p = warp; p < (C / B) * (cols / B); p += warps) {
        int32_t I = p / (cols / B), n = p % (cols / B);
        tile f;
        zero(f);
        product_as<A_ROWS, B_ROWS>(bf16, f, T + I * B * ldt, ldt, X + n * B, ldx, (I + 1) * B);
        if (out16)
            store_bf16(out16 + I * B * cols + n * B, cols, f);
        else
            store(out + I * B * cols + n * B, cols, f);
    }
}

/* Launch row r's tokens: counts[r], or with token_offsets those from
 * `piece` on (the caller's `chunks` bound how many are run). */
__device__ __forceinline__ int32_t row_tokens(const chunk_args &a, int32_t r)
{
    if (a.token_offsets) {
        int32_t left = a.token_offsets[r + 1] - a.token_offsets[r] - a.piece;
        return left < 0 ? 0 : left;
    }
    return a.counts[r];
}

/* The start both scan kernels share: row blockIdx.z's slot (padding and
 * bad slots skipped, a bad one flagged by one thread of the grid), its
 * tokens from this call's piece on and its chunks in this call (with
 * token_offsets a row may go on past them); false when the block has
 * nothing to do. With the prologue in the prepare kernel, each (row, value
 * head)'s first value tile then moves the conv window on to where this
 * call's chunks leave it (chunk_window_advance). */
template <class Act>
__device__ __forceinline__ bool scan_row_start(const chunk_args &a, int32_t chunks,
                                               int32_t &slot, int32_t &n, int32_t &row_chunks)
{
    const int32_t C = SSM_CHUNK_TOKENS, r = blockIdx.z, h = blockIdx.y;
    slot = a.slots ? a.slots[r] : r;
    if (a.slots && !slot_is_live(slot, a.capacity, a.flags,
                                 blockIdx.x == 0 && h == 0 && threadIdx.x == 0))
        return false;
    n = row_tokens(a, r);
    if (n <= 0)
        return false;
    row_chunks = (n + C - 1) / C < chunks ? (n + C - 1) / C : chunks;
    if (a.pro.on && blockIdx.x == 0)
        chunk_window_advance<Act>(a, slot, r, n < chunks * C ? n : chunks * C, h);
    return true;
}

/* Tile (I, J) of a chunk's outputs, from O (C x R, stride LR) to the
 * row's tokens: token t0 + t of row r, value row e0 + v of head h, rows
 * past the chunk's c tokens or the head's live rows skipped; a warp's
 * lanes, four values a store. */
template <class Act>
__device__ __forceinline__ void store_output_tile(const chunk_args &a, const float *O, int32_t LR,
                                                  int32_t I, int32_t J, int32_t r, int32_t h,
                                                  int32_t e0, int32_t t0, int32_t c,
                                                  int32_t live_rows)
{
    const int32_t B = SSM_TC_SUB, lane = threadIdx.x & 31;
    Act *out = (Act *)a.out;
    if (!out)
        return;
    for (int32_t e = lane; e < B * B / 4; e += 32) {
        int32_t t = I * B + e / (B / 4), v = J * B + 4 * (e % (B / 4));
        if (t >= c || v >= live_rows)
            continue;
        int64_t token = a.token_offsets ? (int64_t)a.token_offsets[r] + a.piece + t0 + t
                                        : r * (a.out_row / a.out_token) + t0 + t;
        store4(out + token * a.out_token + (int64_t)h * a.V + e0 + v, O + t * LR + v);
    }
}

/* Stages part 0 (W and Qg) or 1 (Kd and QK) of an fp32 record into the
 * scan's regions (rows of stride LK; Kd's LKr, QK's LC), 16 bytes a copy,
 * by the block's THREADS threads. */
template <int K, int THREADS>
__device__ __forceinline__ void stage_record_f32(const float *rec, const tc_record &L, int32_t part,
                                                 float *W, float *Qg, float *Kd, float *QK)
{
    const int32_t C = SSM_CHUNK_TOKENS, LK = tc_pad(K), LKr = tc_pad_rows(K), LC = tc_pad(C);
    const int32_t tid = threadIdx.x;
    float *first = part == 0 ? W : Kd;
#pragma unroll
    for (int32_t e = tid; e < C * K / 4; e += THREADS) {
        int32_t t = e / (K / 4), x = 4 * (e % (K / 4));
        copy_chunk_async(first + t * (part == 0 ? LK : LKr) + x,
                         rec + (part == 0 ? L.W : L.Kd) + t * K + x, true);
        if (part == 0)
            copy_chunk_async(Qg + t * LK + x, rec + L.Qg + t * K + x, true);
    }
    if (part == 1)
        for (int32_t e = tid; e < C * C / 4; e += THREADS) {
            int32_t t = e / (C / 4), x = 4 * (e % (C / 4));
            copy_chunk_async(QK + t * LC + x, rec + L.QK + t * C + x, true);
        }
}

/* Stages part 0's Uv (the block's R value rows; zeros past live_rows) or
 * part 1's decay of an fp32 or bf16 record. */
template <int K, int R, int THREADS>
__device__ __forceinline__ void stage_values_decay(const float *rec, const tc_record &L,
                                                   int32_t part, float *Uv, float *decay,
                                                   int32_t V, int32_t e0, int32_t live_rows)
{
    const int32_t C = SSM_CHUNK_TOKENS, LR = tc_pad_rows(R), tid = threadIdx.x;
    if (part == 0) {
        for (int32_t e = tid; e < C * R / 4; e += THREADS) {
            int32_t t = e / (R / 4), x = 4 * (e % (R / 4));
            bool live = x < live_rows;
            copy_chunk_async(Uv + t * LR + x, rec + L.Uv + t * V + (live ? e0 + x : 0), live);
        }
    } else {
        for (int32_t e = tid; e < K / 4; e += THREADS)
            copy_chunk_async(decay + 4 * e, rec + L.decay + 4 * e, true);
    }
}

/* The state update's sum for one unit in 3xTF32: s0 and s1 (value rows
 * v0 .. v0 + 15 and v0 + 16 .. v0 + 31 of U's columns, channels n16 * 16
 * .. + 15 of Kd) += U^T Kd over the chunk's C tokens (U [C][.] stride LR,
 * Kd [C][.] stride LKr, both fp32). */
__device__ __forceinline__ void update_unit_tf32(tile &s0, tile &s1, const float *U, int32_t LR,
                                                 const float *Kd, int32_t LKr, int32_t v0,
                                                 int32_t n16)
{
    const int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB;
#pragma unroll 4
    for (int32_t d = 0; d < C; d += 8) {
        frag k, u0, u1, k_hi, k_lo, u0_hi, u0_lo, u1_hi, u1_lo;
        load_b_rows(k, Kd + d * LKr + n16 * B, LKr);
        load_a_cols(u0, U + d * LR + v0, LR);
        load_a_cols(u1, U + d * LR + v0 + B, LR);
        split(k_hi, k_lo, k);
        split(u0_hi, u0_lo, u0);
        split(u1_hi, u1_lo, u1);
        mma3(s0, u0_hi, u0_lo, k_hi, k_lo);
        mma3(s1, u1_hi, u1_lo, k_hi, k_lo);
    }
}

/* Both tiles of a unit rounded to the state's dtype (a chunk's end). */
template <class State> __device__ __forceinline__ void round_unit(tile &s0, tile &s1)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s0.x[h][i] = round_to((const State *)0, s0.x[h][i]);
            s1.x[h][i] = round_to((const State *)0, s1.x[h][i]);
        }
}

} /* namespace tc */

/* grid (chunks, HV, rows), THREADS threads (256, two blocks an SM, or 512),
 * chunk_prepare_shared_floats floats of dynamic shared memory. Writes the
 * record of (row, chunk, head) at work + ((row * chunks + chunk) * HV +
 * head) * record floats. With token_offsets a row's tokens are counted from
 * `piece` and not clamped to one chunk. */
template <int K, int THREADS, class Act, bool BF, bool FUSED>
__global__ void __launch_bounds__(THREADS, THREADS > 256 ? 1 : 2)
    chunk_prepare_kernel(chunk_args a, float *work, int32_t chunks)
{
    constexpr int32_t WARPS = THREADS / 32;
    extern __shared__ float shared[];
    const int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB, V = a.V, gk = a.gk;
    const int32_t LK = tc_pad(K), LC = tc_pad(C);
    const int32_t j = blockIdx.x, h = blockIdx.y, r = blockIdx.z;
    const int32_t tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int32_t slot = a.slots ? a.slots[r] : r;
    if (a.slots && !slot_is_live(slot, a.capacity, a.flags, false))
        return;
    const int32_t in_row = a.rows_own_inputs ? r : slot; /* where the row's inputs are */
    const int32_t t0 = j * C, n = tc::row_tokens(a, r);
    if (t0 >= n)
        return;
    const int32_t c = n - t0 < C ? n - t0 : C;
    const bool bf16 = BF && c >= SSM_TC_BF16_MIN_TOKENS; /* this chunk's products */
    const int32_t first = t0; /* the chunk's first token in the row's inputs */
    float *kc = shared, *G = kc + (gk == 1 ? 1 : 2) * C * LK, *beta = G + C * gk;
    float *grow = beta + C, *shrink = grow + C; /* GDN: e^{G_t}, e^{G_last - G_t} */
    float *A = beta + C + (gk == 1 ? 2 * C : 0), *T = A + C * LC, *scratch = T + C * LC;
    float *qc = gk == 1 ? scratch : kc + C * LK; /* GDN's q is spent before the scratch is reused */
    float *QK = T; /* QK goes to the record before T is computed */
    const int32_t key_head = h / a.group;
    const tc_record L = tc_record_layout(K, V);
    const tc_record16 L16 = tc_record16_layout(K);
    float *rec = work + (((int64_t)r * chunks + j) * a.HV + h) * L.floats;
    uint16_t *rec16 = bf16 ? (uint16_t *)rec : nullptr; /* this chunk's record in bf16 */

    /* The passes over [C][K]: thread tid takes key channel x = tid % K of
     * tokens tid / K, + THREADS / K, ... (K divides the block). */
    constexpr int32_t step = THREADS / K;
    const int32_t x = tid % K, t_first = tid / K;

    /* Stage k, q, beta and the raw log-decays; tokens past c are zeros (their
     * rows of A, T, W and Uv come out zero or unit, so the scan can run
     * whole 64-token chunks). FUSED: computed here from the projections. */
    if constexpr (FUSED) {
        chunk_prologue_qk<K, THREADS, Act>(a, slot, r, first, c, key_head, qc, kc, LK);
        chunk_prologue_gates<K, THREADS, Act>(a, slot, r, first, c, h, G, beta);
    } else {
        const int64_t t_in = first + t_first, column = (int64_t)key_head * K + x;
        const float *k_in = a.k + in_row * a.k_row + t_in * a.k_token + column;
        const float *q_in = a.q + in_row * a.q_row + t_in * a.q_token + column;
        const int64_t k_step = step * a.k_token, q_step = step * a.q_token;
#pragma unroll 16
        for (int32_t t = t_first; t < C; t += step) {
            bool live = t < c;
            kc[t * LK + x] = live ? *k_in : 0.0f;
            qc[t * LK + x] = live ? *q_in : 0.0f;
            k_in += k_step;
            q_in += q_step;
        }
        for (int32_t t = tid; t < C; t += THREADS)
            beta[t] = t < c ? a.beta[in_row * a.beta_row + (first + t) * a.beta_token + h] : 0.0f;
        if (gk == 1) {
            for (int32_t t = tid; t < C; t += THREADS)
                G[t] = t < c ? a.g[in_row * a.g_row + (first + t) * a.g_token + h] : 0.0f;
        } else {
            const float *g_in = a.g + in_row * a.g_row +
                                (int64_t)(first + t_first) * a.g_token + (int64_t)h * K + x;
            const int64_t g_step = step * a.g_token;
#pragma unroll 16
            for (int32_t t = t_first; t < C; t += step) {
                G[t * K + x] = t < c ? *g_in : 0.0f;
                g_in += g_step;
            }
        }
    }
    __syncthreads();
    chunk_running_sum(G, C, gk, THREADS);
    __syncthreads();
    if (gk == 1) {
        for (int32_t t = tid; t < C; t += THREADS) {
            grow[t] = chunk_exp(G[t]);
            shrink[t] = chunk_exp(G[C - 1] - G[t]);
        }
        __syncthreads();
    }

    /* The record's parts that are one pass over k and q. */
#pragma unroll 4
    for (int32_t t = t_first; t < C; t += step) {
        const int32_t i = t * K + x;
        float up, down;
        if (gk == 1) {
            up = grow[t];
            down = shrink[t];
        } else {
            up = chunk_exp(G[t * gk + x]);
            down = chunk_exp(G[(C - 1) * gk + x] - G[t * gk + x]);
        }
        if (rec16) {
            rec16[L16.Qg + i] = tc::to_bf16(up * qc[t * LK + x]);
            rec16[L16.Kd + i] = tc::to_bf16(down * kc[t * LK + x]);
        } else {
            rec[L.Qg + i] = up * qc[t * LK + x];
            rec[L.Kd + i] = down * kc[t * LK + x];
        }
    }
    if (tid < K)
        rec[L.decay + tid] = chunk_exp(G[(C - 1) * gk + (gk == 1 ? 0 : tid)]);

    /* A and QK, raw sums first (A without beta, both without the decay for GDN). */
    if (gk == 1) {
        /* The 10 tiles on or below the diagonal of each, 20 over the warps.
           Each sum takes its pair's decay e^{G_t - G_i} (A's also beta_t)
           as it leaves the tensor cores; A goes to shared memory, QK
           straight to the record, with zeros in its 6 tiles above the
           diagonal (the last 6 turns). */
        for (int32_t p = warp; p < 26; p += WARPS) {
            tc::tile f;
            tc::zero(f);
            if (p >= 20) {
                const int32_t above[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
                const int64_t at = above[p - 20][0] * B * C + above[p - 20][1] * B;
                if (rec16)
                    tc::store_bf16(rec16 + L16.QK + at, C, f);
                else
                    tc::store(rec + L.QK + at, C, f);
                continue;
            }
            int32_t m = p % 10, I = 0;
            while (m > I)
                m -= ++I; /* tile (I, m) with m <= I */
            const bool is_A = p < 10;
            tc::product_as<tc::A_ROWS, tc::B_COLS>(bf16, f, (is_A ? kc : qc) + I * B * LK, LK,
                                                   kc + m * B * LK, LK, K);
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int32_t t = I * B + tc::tile_row(e), i = m * B + tc::tile_col(hh, e);
                    const float d = chunk_exp(G[t] - G[i]);
                    f.x[hh][e] = is_A ? (i < t ? beta[t] * d * f.x[hh][e] : 0.0f)
                                      : (i <= t ? d * f.x[hh][e] : 0.0f);
                }
            if (is_A)
                tc::store(A + I * B * LC + m * B, LC, f);
            else if (rec16)
                tc::store_bf16(rec16 + L16.QK + I * B * C + m * B, C, f);
            else
                tc::store(rec + L.QK + I * B * C + m * B, C, f);
        }
    } else {
        /* Row block by row block (16 tokens t), around the token r before it
           (the chunk's start for the first): k_t e^{G_t - G_r} and
           q_t e^{G_t - G_r} against k_i e^{G_r - G_i} for every earlier i,
           all factors at most 1. The block's own i take factors above 1, up
           to e^{G_r - G_end}: kept when no channel decays by more than
           SSM_TC_SPAN within the block, else the diagonal block is summed
           pair by pair with e^{G_t - G_i} (any gate). The right-hand rows
           of the previous block are carried over, each channel times
           e^{G_r - G_r'} (at most 1, r' the previous block's token), so
           only the block's own rows take new exponentials; k_t and q_t
           share theirs. */
        int32_t have = 0;    /* rows of rk scaled around the previous block's token */
        float g_prev = 0.0f; /* that token's G on channel x (0 before the first) */
        for (int32_t I = 0; I < C / B; I++) {
            const int32_t ref = I * B - 1, end = I * B + B - 1;
            float *lk = scratch, *lq = lk + B * LK, *rk = lq + B * LK;
            int wide = 0;
            if (tid < K)
                wide = (ref < 0 ? 0.0f : G[ref * gk + tid]) - G[end * gk + tid] > SSM_TC_SPAN;
            /* also: the previous row block's products are done with scratch */
            wide = __syncthreads_or(wide);
            const int32_t right = (wide ? I : I + 1) * B;
            const float gr = ref < 0 ? 0.0f : G[ref * gk + x];
            const float carry = chunk_exp(gr - g_prev);
            for (int32_t i = t_first; i < have; i += step)
                rk[i * LK + x] *= carry;
            for (int32_t i = have + t_first; i < right; i += step)
                rk[i * LK + x] = chunk_exp(gr - G[i * gk + x]) * kc[i * LK + x];
            for (int32_t row = t_first; row < B; row += step) {
                const int32_t t = I * B + row;
                const float up = chunk_exp(G[t * gk + x] - gr);
                lk[row * LK + x] = up * kc[t * LK + x];
                lq[row * LK + x] = up * qc[t * LK + x];
            }
            have = right;
            g_prev = gr;
            __syncthreads();
            const int32_t tiles = right / B;
            for (int32_t p = warp; p < 2 * tiles; p += WARPS) {
                int32_t m = p % tiles;
                tc::tile f;
                tc::zero(f);
                tc::product_as<tc::A_ROWS, tc::B_COLS>(bf16, f, p < tiles ? lk : lq, LK,
                                                       rk + m * B * LK, LK, K);
                tc::store((p < tiles ? A : QK) + I * B * LC + m * B, LC, f);
            }
            for (int32_t p = warp; wide && p < B * B; p += WARPS) {
                int32_t t = I * B + p / B, i = I * B + p % B;
                if (i > t)
                    continue; /* the whole warp */
                float kk = 0.0f, kq = 0.0f;
                for (int32_t x = lane; x < K; x += 32) {
                    float d = chunk_exp(G[t * gk + x] - G[i * gk + x]);
                    kk += d * kc[i * LK + x] * kc[t * LK + x];
                    kq += d * kc[i * LK + x] * qc[t * LK + x];
                }
                kk = warp_sum(kk);
                kq = warp_sum(kq);
                if (lane == 0) {
                    A[t * LC + i] = kk;
                    QK[t * LC + i] = kq;
                }
            }
        }
    }
    /* The chunk's values, loaded into registers now and used after T: the
     * loads run behind the work in between. Warp w takes tokens w, w + 8,
     * ..., lane l value rows l, l + 32, ... (FUSED: computed after T.) */
    Act staged[FUSED ? 1 : C / WARPS][FUSED ? 1 : SSM_TC_MAX_V / 32];
    if constexpr (!FUSED) {
        const Act *values = (const Act *)a.v + in_row * a.v_row + (int64_t)first * a.v_token +
                            (int64_t)h * V;
#pragma unroll
        for (int32_t i = 0; i < C / WARPS; i++)
#pragma unroll
            for (int32_t m = 0; m < SSM_TC_MAX_V / 32; m++) {
                const int32_t t = warp + WARPS * i, y = lane + 32 * m;
                if (t < c && y < V)
                    staged[i][m] = values[(int64_t)t * a.v_token + y];
            }
    }
    __syncthreads();
    if (gk != 1) {
        /* KDA: beta on A's rows, zeros above the diagonals, QK to the record */
        for (int32_t e = tid; e < C * C; e += THREADS) {
            int32_t t = e / C, i = e % C;
            A[t * LC + i] = i < t ? beta[t] * A[t * LC + i] : 0.0f;
            QK[t * LC + i] = i <= t ? QK[t * LC + i] : 0.0f;
        }
        __syncthreads();
        for (int32_t e = tid; e < C * C; e += THREADS) {
            const float value = QK[(e / C) * LC + e % C];
            if (rec16)
                rec16[L16.QK + e] = tc::to_bf16(value);
            else
                rec[L.QK + e] = value;
        }
        __syncthreads(); /* QK's place is T's */
    }

    /* T = (I + A)^-1, unit lower triangular; only its blocks on and below
     * the diagonal are written (and read), by the first SSM_TC_INVERSE_WARPS
     * warps alone, which meet at a named barrier: FUSED, the other warps
     * compute the chunk's beta V into the scratch meanwhile. The four
     * diagonal 16 x 16 blocks by forward substitution, a warp each, lane l
     * holding column l % 16 of its block in registers (T_tl = [t == l] -
     * sum_{m < t} A_tm T_ml). */
    static_assert(C / B == SSM_TC_INVERSE_WARPS && SSM_TC_INVERSE_WARPS < WARPS,
                  "a warp for each diagonal block, and warps besides");
    constexpr int32_t INVERSE_THREADS = 32 * SSM_TC_INVERSE_WARPS;
    const int32_t LVr = tc_pad_rows(V);
    if (warp >= SSM_TC_INVERSE_WARPS) {
        if constexpr (FUSED)
            chunk_prologue_values<Act>(a, slot, r, first, c, h, beta, scratch, LVr,
                                       tid - INVERSE_THREADS, THREADS - INVERSE_THREADS);
    } else {
        const int32_t o = warp * B, l = lane & (B - 1);
        float column[B];
#pragma unroll
        for (int32_t t = 0; t < B; t++) {
            float sum = 0.0f;
#pragma unroll
            for (int32_t m = 0; m < t; m++)
                sum += A[(o + t) * LC + o + m] * column[m];
            column[t] = t == l ? 1.0f : (t < l ? 0.0f : -sum);
        }
        if (lane < B)
#pragma unroll
            for (int32_t t = 0; t < B; t++)
                T[(o + t) * LC + o + l] = column[t];
        asm volatile("bar.sync 1, %0;" ::"n"(INVERSE_THREADS) : "memory");
        /* The blocks below, one diagonal after another, on tensor cores:
         * T_IJ = -T_II P with P = sum_{J <= M < I} A_IM T_MJ, both 3xTF32
         * products of one warp; P goes through this warp's own place after
         * the scratch. */
        const int32_t LM = tc_pad_rows(B);
        float *P = scratch + chunk_prepare_scratch_floats(K, V, gk) + warp * B * LM;
        for (int32_t dist = 1; dist < C / B; dist++) {
            const int32_t J = warp, I = J + dist; /* block (I, J): one a warp */
            if (I < C / B) {
                tc::tile f;
                tc::zero(f);
                tc::product<tc::A_ROWS, tc::B_ROWS>(f, A + I * B * LC + J * B, LC,
                                                    T + J * B * LC + J * B, LC, dist * B);
                tc::store(P, LM, f);
                __syncwarp();
                tc::zero(f);
                tc::product<tc::A_ROWS, tc::B_ROWS>(f, T + I * B * LC + I * B, LC, P, LM, B);
#pragma unroll
                for (int hh = 0; hh < 2; hh++)
#pragma unroll
                    for (int i = 0; i < 4; i++)
                        f.x[hh][i] = -f.x[hh][i];
                tc::store(T + I * B * LC + J * B, LC, f);
                __syncwarp(); /* P is read before this warp's next block writes it */
            }
            asm volatile("bar.sync 1, %0;" ::"n"(INVERSE_THREADS) : "memory");
        }
    }
    __syncthreads(); /* T and (FUSED) beta V are in shared memory */

    /* Uv = T (beta V), from the values staged above. */
    const int32_t LKr = tc_pad_rows(K);
    if constexpr (!FUSED) {
#pragma unroll
        for (int32_t i = 0; i < C / WARPS; i++)
#pragma unroll
            for (int32_t m = 0; m < SSM_TC_MAX_V / 32; m++) {
                const int32_t t = warp + WARPS * i, y = lane + 32 * m;
                if (y < V)
                    scratch[t * LVr + y] = t < c ? beta[t] * load(&staged[i][m]) : 0.0f;
            }
        __syncthreads();
    }
    tc::times_T(bf16, T, LC, scratch, LVr, V, rec + L.Uv, warp, WARPS);
    __syncthreads();
    /* W = T (beta e^G K), straight to the record. */
    for (int32_t t = t_first; t < C; t += step) {
        float up = gk == 1 ? grow[t] : chunk_exp(G[t * gk + x]);
        scratch[t * LKr + x] = beta[t] * up * kc[t * LK + x];
    }
    __syncthreads();
    tc::times_T(bf16, T, LC, scratch, LKr, K, rec + L.W, warp, WARPS,
                rec16 ? rec16 + L16.W : nullptr);
}

/* grid (ceil(V / R), HV, rows), 8 R threads (a warp to each 16 x 16 tile
 * of U and o, C x R), chunk_scan_shared_floats(K, R) floats of dynamic
 * shared memory; after chunk_prepare_kernel on the same arguments and work
 * buffer. R is 32 or 64 (launch_chunk_scan); every sum runs in the same
 * order at either, so both give the same bits. */
template <int K, int R, class State, class Act>
__global__ void __launch_bounds__(8 * R, 1)
    chunk_scan_kernel(chunk_args a, const float *work, int32_t chunks)
{
    extern __shared__ float shared[];
    constexpr int32_t THREADS = 8 * R, WARPS = THREADS / 32;
    const int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB, V = a.V;
    const int32_t LK = tc_pad(K), LKr = tc_pad_rows(K), LC = tc_pad(C), LR = tc_pad_rows(R);
    const int32_t r = blockIdx.z, h = blockIdx.y, e0 = blockIdx.x * R;
    const int32_t tid = threadIdx.x, warp = tid >> 5;
    int32_t in_row, n, row_chunks;
    if (!tc::scan_row_start<Act>(a, chunks, in_row, n, row_chunks))
        return;
    float *S = shared, *W = S + R * LKr, *Qg = W + C * LK, *Kd = Qg + C * LK;
    float *Uv = Kd + C * LKr, *U = Uv + C * LR, *O = U + C * LR, *QK = O + C * LR;
    float *decay = QK + C * LC;
    const tc_record L = tc_record_layout(K, V);
    const int64_t snapshot = ((int64_t)in_row * a.layers + a.layer) * a.snapshots +
                             (a.current ? a.current[in_row] : 0);
    State *state = (State *)a.state + (snapshot * a.HV + h) * (int64_t)V * K;
    const int32_t live_rows = V - e0 < R ? V - e0 : R;

    /* The record parts of chunk j in two groups, in the order they are
     * used: W, Uv and Qg (the products with the state), then QK, Kd and
     * the decay. */
    auto stage = [&](int32_t j, int32_t part) {
        if (j < row_chunks) {
            const float *rec = work + (((int64_t)r * chunks + j) * a.HV + h) * L.floats;
            tc::stage_record_f32<K, THREADS>(rec, L, part, W, Qg, Kd, QK);
            tc::stage_values_decay<K, R, THREADS>(rec, L, part, Uv, decay, V, e0, live_rows);
        }
        copy_async_commit(); /* possibly empty: two groups per chunk */
    };
    stage(0, 0);
    stage(0, 1);
    for (int32_t e = tid; e < R * K; e += THREADS) {
        int32_t v = e / K, x = e % K;
        S[v * LK + x] = v < live_rows ? load(state + (int64_t)(e0 + v) * K + x) : 0.0f;
    }
    /* Warp (I, J) owns tile (I, J) of U and o (C x R), and in the state
     * update the pairs of row tiles (32 rows) listed by `unit` below. */
    const int32_t I = warp / (R / B), J = warp % (R / B);
    for (int32_t j = 0; j < row_chunks; j++) {
        const int32_t t0 = j * C, c = n - t0 < C ? n - t0 : C;
        copy_async_wait<1>();
        __syncthreads(); /* W, Uv, Qg of chunk j; the state after chunk j - 1 */
        /* U = Uv - W S^T and o = (e^G q) S^T, one pass over S^T's fragments */
        tc::tile pu, po;
        tc::zero(pu);
        tc::zero(po);
#pragma unroll 4
        for (int32_t d = 0; d < K; d += 8) {
            tc::frag s, w, q, s_hi, s_lo, w_hi, w_lo, q_hi, q_lo;
            tc::load_b_cols(s, S + J * B * LK + d, LK);
            tc::load_a_rows(w, W + I * B * LK + d, LK);
            tc::load_a_rows(q, Qg + I * B * LK + d, LK);
            tc::split(s_hi, s_lo, s);
            tc::split(w_hi, w_lo, w);
            tc::split(q_hi, q_lo, q);
            tc::mma3(pu, w_hi, w_lo, s_hi, s_lo);
            tc::mma3(po, q_hi, q_lo, s_hi, s_lo);
        }
        {
            tc::tile u;
            tc::load(u, Uv + I * B * LR + J * B, LR);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    u.x[h][i] -= pu.x[h][i];
            tc::store(U + I * B * LR + J * B, LR, u);
        }
        copy_async_wait<0>();
        __syncthreads(); /* U is whole; QK, Kd, decay of chunk j; W, Uv, Qg are free */
        stage(j + 1, 0);
        /* o += QK U, this warp's tile out through its own place in O */
        tc::product<tc::A_ROWS, tc::B_ROWS>(po, QK + I * B * LC, LC, U + J * B, LR, (I + 1) * B);
        tc::store(O + I * B * LR + J * B, LR, po);
        __syncwarp();
        tc::store_output_tile<Act>(a, O, LR, I, J, r, h, e0, t0, c, live_rows);
        /* S = e^{G_last} S + U^T (e^{G_last - G} k) on this warp's tiles
           (nothing else reads them until the next barrier) */
        for (int32_t unit = warp; unit < (K / B) * (R / 32); unit += WARPS) {
            const int32_t n16 = unit % (K / B), pair = unit / (K / B);
            float *col = S + pair * 2 * B * LK + n16 * B;
            tc::tile s0, s1;
            tc::load(s0, col, LK);
            tc::load(s1, col + B * LK, LK);
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float d = decay[a.gk == 1 ? 0 : n16 * B + tc::tile_col(h, i)];
                    s0.x[h][i] *= d;
                    s1.x[h][i] *= d;
                }
            tc::update_unit_tf32(s0, s1, U, LR, Kd, LKr, pair * 2 * B, n16);
            tc::round_unit<State>(s0, s1);
            tc::store(col, LK, s0);
            tc::store(col + B * LK, LK, s1);
        }
        __syncthreads(); /* QK, Kd and U are free */
        stage(j + 1, 1);
    }
    copy_async_wait<0>();
    for (int32_t e = tid; e < live_rows * K; e += THREADS) {
        int32_t v = e / K, x = e % K;
        store(state + (int64_t)(e0 + v) * K + x, S[v * LK + x]);
    }
}

} /* namespace ssm */

#include "kernels/cuda/chunk_scan_bf16.cuh"

namespace ssm {

/* Calls f with K as a template argument (chunk_tc_supported's K). */
template <class F> inline void with_key_dim(int32_t K, F f)
{
    if (K == 32)
        f(std::integral_constant<int, 32>());
    else if (K == 64)
        f(std::integral_constant<int, 64>());
    else
        f(std::integral_constant<int, 128>());
}

/* Calls f with a.bf16_products as a template argument. */
template <class F> inline void with_products(const chunk_args &a, F f)
{
    if (a.bf16_products)
        f(std::true_type());
    else
        f(std::false_type());
}

/* Calls f with a.pro.on as a template argument. */
template <class F> inline void with_prologue(const chunk_args &a, F f)
{
    if (a.pro.on)
        f(std::true_type());
    else
        f(std::false_type());
}

/* The prepare kernel for `rows` rows of up to `chunks` chunks into `work`
 * (chunk_tc_work_floats): GDN's in blocks of 8 warps, two an SM; KDA's,
 * whose shared memory allows one block an SM, in blocks of 16 warps. With
 * a.pro.on it runs the prologue itself (chunk_prologue.cuh). */
template <class State, class Act>
inline void launch_chunk_prepare(const chunk_args &a, int32_t rows, int32_t chunks, float *work,
                                 cudaStream_t st)
{
    size_t shared = chunk_prepare_shared_floats(a.K, a.V, a.gk) * sizeof(float);
    dim3 grid((unsigned)chunks, (unsigned)a.HV, (unsigned)rows);
    with_key_dim(a.K, [&](auto k) {
        constexpr int K = decltype(k)::value;
        with_products(a, [&](auto bf) {
            constexpr bool BF = decltype(bf)::value;
            with_prologue(a, [&](auto fused) {
                constexpr bool FUSED = decltype(fused)::value;
                if (a.gk == 1) {
                    auto kernel = chunk_prepare_kernel<K, SSM_TC_THREADS, Act, BF, FUSED>;
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)shared);
                    kernel<<<grid, SSM_TC_THREADS, shared, st>>>(a, work, chunks);
                } else {
                    auto kernel = chunk_prepare_kernel<K, 2 * SSM_TC_THREADS, Act, BF, FUSED>;
                    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)shared);
                    kernel<<<grid, 2 * SSM_TC_THREADS, shared, st>>>(a, work, chunks);
                }
            });
        });
    });
}

/* The scan's value rows a block: 32 while one block of 8 warps an SM
 * covers the grid (few rows: more blocks, each with less to do), else 64,
 * 16 warps a block and half the blocks, each reading a chunk's record once
 * for twice the rows (many rows). `sms` and `shared_optin` are the
 * device's (0: unknown, 32). */
inline int32_t chunk_scan_tile_rows(int32_t K, int32_t V, int32_t HV, int32_t rows, int32_t sms,
                                    int32_t shared_optin)
{
    int64_t blocks = (int64_t)((V + 31) / 32) * HV * rows;
    bool fits = chunk_scan_shared_floats(K, 64) * sizeof(float) <= (size_t)shared_optin;
    return sms > 0 && blocks > sms && fits ? 64 : 32;
}

/* The scan over the records launch_chunk_prepare wrote, `tile_rows` (32
 * or 64, chunk_scan_tile_rows) value rows a block, with two records' room
 * when a.scan_double_buffer asks (the caller checks that it fits); the same
 * bits either way. */
template <class State, class Act>
inline void launch_chunk_scan(const chunk_args &a, int32_t rows, int32_t chunks,
                              const float *work, int32_t tile_rows, cudaStream_t st)
{
    with_key_dim(a.K, [&](auto k) {
        auto go = [&](auto r) {
            constexpr int R = decltype(r)::value;
            constexpr int K = decltype(k)::value;
            bool two = a.bf16_products && a.scan_double_buffer;
            size_t shared = two ? chunk_scan2_shared_bytes(K, R)
                                : chunk_scan_shared_floats(K, R) * sizeof(float);
            auto kernel = two                ? chunk_scan_bf16_kernel<K, R, 2, State, Act>
                          : a.bf16_products ? chunk_scan_bf16_kernel<K, R, 1, State, Act>
                                            : chunk_scan_kernel<K, R, State, Act>;
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
            kernel<<<dim3((unsigned)((a.V + R - 1) / R), (unsigned)a.HV, (unsigned)rows), 8 * R,
                     shared, st>>>(a, work, chunks);
        };
        if (tile_rows == 64)
            go(std::integral_constant<int, 64>());
        else
            go(std::integral_constant<int, 32>());
    });
}

/* Both kernels. */
template <class State, class Act>
inline void launch_chunk_tc(const chunk_args &a, int32_t rows, int32_t chunks, float *work,
                            int32_t tile_rows, cudaStream_t st)
{
    launch_chunk_prepare<State, Act>(a, rows, chunks, work, st);
    launch_chunk_scan<State, Act>(a, rows, chunks, work, tile_rows, st);
}

} /* namespace ssm */
#endif
