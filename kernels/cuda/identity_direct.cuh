/* Replay outputs through the replay identity (identity.cuh's math) with the
 * checkpoint's product asked for straight into registers, the peers' layout
 * for a matrix-vector product over a state that is only read.
 *
 * A block of SSM_DIRECT_THREADS threads holds SSM_DIRECT_ROWS value rows of
 * one (row, value head); warp w owns SSM_DIRECT_WARP_ROWS of them, and lane
 * l holds key channels 4l .. 4l + 3 of each (K = SSM_DIRECT_K). At entry,
 * with only the slot's and the ring cursors' loads before the addresses,
 * every lane asks for its sixteen 16-byte pieces of the checkpoint (the
 * block's 32 KiB in flight at once, no shared memory and no barrier on
 * their path) and the block asks, through cp.async, for the history's u of
 * its rows. Only then does it wait for the prologue, stage the new tokens
 * and form the weights (identity.cuh), while the pieces arrive.
 *
 * Each lane's products with the tokens' k and q, 2 TP a row over its four
 * channels, leave the warp through warp_sum_scatter (a butterfly that
 * halves the values it carries at each step: 31 shuffles for 32 sums), so
 * a lane ends with one row's sum of one vector. Thread i < SSM_DIRECT_ROWS
 * then runs row i through the history (records in order, their u from
 * shared memory) and the new tokens, as identity.cuh's kernel does.
 *
 * Every sum has one fixed order, so the outputs do not depend on the
 * launch; they are not identity.cuh's bits (the checkpoint's products sum
 * in another order), a form of the same identity within the same bound.
 * The u a step writes into its records feed later steps' outputs only: the
 * fold, and so the committed state, reads k, v, the decays and beta. A row
 * whose ring would overflow folds first, in a fold job before the kernel
 * or in the block (identity_fold, whose tile block this block is). */
#ifndef SSM_KERNELS_CUDA_IDENTITY_DIRECT_CUH
#define SSM_KERNELS_CUDA_IDENTITY_DIRECT_CUH

#include "kernels/cuda/identity.cuh"

namespace ssm {

#define SSM_DIRECT_THREADS 128 /* threads of a block: a tile block, for identity_fold */
#define SSM_DIRECT_WARP_ROWS 16 /* value rows a warp holds */
#define SSM_DIRECT_ROWS (SSM_DIRECT_THREADS / 32 * SSM_DIRECT_WARP_ROWS) /* a block's rows */
#define SSM_DIRECT_K 128 /* key channels: four a lane */

static_assert(SSM_DIRECT_THREADS == SSM_IDENTITY_THREADS,
              "the block stages tokens and folds as identity.cuh's does");

/* Token places a kernel holds for T tokens: 1, 2 or 4 (sums a row: 2 TP). */
__host__ __device__ inline int32_t identity_direct_places(int32_t tokens)
{
    return tokens == 1 ? 1 : tokens == 2 ? 2 : 4;
}

/* Shared memory of one block for a ring of `history` records and T
 * tokens: the history's u of the block's rows, k and G (direct_history),
 * the staged tokens, the weights, and the rows' sums. */
__host__ __device__ inline size_t identity_direct_shared_bytes(int32_t history, int32_t tokens,
                                                               const dims &d)
{
    size_t T = (size_t)tokens, L = (size_t)history, R = SSM_DIRECT_ROWS, K = (size_t)d.K;
    size_t TP = (size_t)identity_direct_places(tokens);
    size_t keys = d.kda ? 4 : 2, gates = d.kda ? 2 * T * K : 2 * T;
    return sizeof(float) * (L * (R + K + (d.kda ? 2 * K : 2)) /* direct_history */
                            + keys * T * K + gates + T + T * R  /* identity_tokens */
                            + 2 * (L + T) * T                   /* w^k, w^q */
                            + 2 * TP * R);                      /* the rows' sums */
}

/* Whether the direct kernel takes a step of `tokens` tokens of shape d
 * over a ring of `history` records (a thread a record's GDN gates; an even
 * count keeps the staged tokens after GDN's gates 16-byte aligned), in
 * blocks of `shared_optin` bytes of shared memory at most. */
__host__ __device__ inline bool identity_direct_fits(const dims &d, int32_t tokens,
                                                     int32_t history, int32_t shared_optin)
{
    return d.K == SSM_DIRECT_K && d.V % SSM_DIRECT_ROWS == 0 && tokens >= 1 && tokens <= 4 &&
           history <= SSM_DIRECT_THREADS && history % 2 == 0 &&
           identity_direct_shared_bytes(history, tokens, d) <= (size_t)shared_optin;
}

/* The history's records as a block holds them: u of its rows, k of its key
 * head, G of its value head (GDN one, KDA K as sum and error), asked for
 * before the prologue's wait (no prologue writes them). */
struct direct_history {
    float *u;      /* [L][SSM_DIRECT_ROWS] */
    float *k;      /* [L][K] */
    float *gs, *ge; /* [L] (GDN) or [L][K] (KDA) */
    float *end;
};

template <bool KDA>
__device__ __forceinline__ direct_history direct_history_at(float *at, const dims &d,
                                                            int32_t L)
{
    direct_history hi;
    hi.u = at;
    hi.k = hi.u + L * SSM_DIRECT_ROWS;
    hi.gs = hi.k + L * d.K;
    hi.ge = hi.gs + (KDA ? L * d.K : L);
    hi.end = hi.ge + (KDA ? L * d.K : L);
    return hi;
}

/* Sums N values (a power of two, at most 32) over the 32 lanes of a warp:
 * lane l ends with the sum of value l / (32 / N). Each step sends half of
 * the values a lane carries to the lane `offset` away and adds the other
 * half to what comes back, so the lane carries half as many; when one is
 * left, plain butterflies finish it. One fixed order. */
template <int N>
__device__ __forceinline__ float warp_sum_scatter(float (&v)[N])
{
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to 32");
    const int32_t lane = threadIdx.x & 31;
    constexpr int STEPS = N == 32 ? 5 : N == 16 ? 4 : N == 8 ? 3 : N == 4 ? 2 : N == 2 ? 1 : 0;
#pragma unroll
    for (int step = 0; step < STEPS; step++) {
        const int n = N >> step, offset = 16 >> step;
        const bool upper = (lane & offset) != 0;
#pragma unroll
        for (int i = 0; i < N / 2; i++) { /* a constant bound, so that v stays in registers */
            if (i >= n / 2)
                break;
            float send = upper ? v[i] : v[i + n / 2];
            float keep = upper ? v[i + n / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
        }
    }
    float sum = v[0];
#pragma unroll
    for (int offset = 16 >> STEPS; offset > 0; offset >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return sum;
}

/* Asks for this lane's pieces of its warp's rows of the checkpoint. */
__device__ __forceinline__ void direct_ask_rows(float4 (&s)[SSM_DIRECT_WARP_ROWS],
                                                const float *lane_first)
{
#pragma unroll
    for (int i = 0; i < SSM_DIRECT_WARP_ROWS; i++)
        s[i] = *(const float4 *)(lane_first + i * SSM_DIRECT_K);
}

/* Asks (cp.async, one group) for the `kept` history records' u of the
 * block's rows, k and, for KDA, G into hi; GDN's G (two floats a record)
 * comes back in *s0, *e0 of thread i < kept for record i, to be stored
 * after the wait (direct_store_gates). */
template <bool KDA>
__device__ __forceinline__ void direct_ask_history(const tile_args &a, const identity_ring &g,
                                                   int32_t h, int32_t row0,
                                                   const direct_history &hi, float *s0,
                                                   float *e0)
{
    const dims &d = a.d;
    const record_layout &lay = a.ring_layout;
    constexpr int32_t row_pieces = SSM_DIRECT_ROWS / 4;
    const int32_t key_pieces = d.K / 4, per = row_pieces + (KDA ? 3 : 1) * key_pieces;
    for (int32_t i = threadIdx.x; i < g.kept * per; i += SSM_DIRECT_THREADS) {
        const int32_t m = i / per, c = i % per;
        const uint8_t *record = identity_record(a, g, m);
        if (c < row_pieces) {
            const float *u = (const float *)(record + lay.u) + (int64_t)h * d.V + row0;
            copy_chunk_async(hi.u + m * SSM_DIRECT_ROWS + 4 * c, u + 4 * c, true);
            continue;
        }
        const int32_t part = (c - row_pieces) / key_pieces, x = 4 * ((c - row_pieces) % key_pieces);
        const float *from = part == 0 ? (const float *)(record + lay.k) + (int64_t)(h / d.group) * d.K
                            : part == 1 ? (const float *)(record + lay.gate_sum) + (int64_t)h * d.K
                                        : (const float *)(record + lay.gate_error) + (int64_t)h * d.K;
        float *to = (part == 0 ? hi.k : part == 1 ? hi.gs : hi.ge) + m * d.K;
        copy_chunk_async(to + x, from + x, true);
    }
    copy_async_commit();
    if (!KDA && (int32_t)threadIdx.x < g.kept)
        gate_of(identity_record(a, g, threadIdx.x), lay, d, h, 0, *s0, *e0);
}

/* The weights of every record the tokens see (M = kept + T), as
 * identity_all_weights forms them, from the history as the block holds it
 * and the staged tokens. */
template <bool KDA>
__device__ __forceinline__ void direct_weights(const dims &d, const direct_history &hi,
                                               const identity_tokens &t, int32_t kept,
                                               int32_t T, float *wk, float *wq)
{
    const int32_t M = kept + T, groups = SSM_DIRECT_THREADS / SSM_ROW_LANES;
    const int32_t group = threadIdx.x / SSM_ROW_LANES, sub = threadIdx.x % SSM_ROW_LANES;
    for (int32_t base = 0; base < M; base += groups) {
        const int32_t i = base + group;
        const bool keep = i < M, past = keep && i >= kept;
        const int32_t m = keep && !past ? i : 0, p = past ? i - kept : 0;
        const int32_t gates = KDA ? d.K : 1; /* G's elements a record */
        const float *ki = past ? t.kp + p * d.K : hi.k + m * d.K;
        const float *si = past ? t.gs + p * gates : hi.gs + m * gates;
        const float *ei = past ? t.ge + p * gates : hi.ge + m * gates;
        identity_weights_of<KDA>(d, ki, si, ei, sub, T, t.kp, t.qp, t.gs, t.ge, i, i - kept,
                                 keep, wk, wq);
    }
}

/* This warp's rows' products with the staged tokens into sums[row][2 TP]
 * (k then q of each token; tokens past T give zeros): groups of 16 / TP
 * rows, 32 sums a group, through warp_sum_scatter. */
template <int TP>
__device__ __forceinline__ void direct_products(const float4 (&s)[SSM_DIRECT_WARP_ROWS],
                                                const float *kd, const float *qd, int32_t T,
                                                float *sums)
{
    constexpr int G = SSM_DIRECT_WARP_ROWS / TP; /* rows a group */
    const int32_t lane = threadIdx.x & 31;
#pragma unroll
    for (int g0 = 0; g0 < SSM_DIRECT_WARP_ROWS; g0 += G) {
        float part[32];
#pragma unroll
        for (int p = 0; p < TP; p++) {
            float k[4] = {0.0f, 0.0f, 0.0f, 0.0f}, q[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (p < T) {
                load4(kd + p * SSM_DIRECT_K + 4 * lane, k);
                load4(qd + p * SSM_DIRECT_K + 4 * lane, q);
            }
#pragma unroll
            for (int j = 0; j < G; j++) {
                const float4 x = s[g0 + j];
                float ak = x.x * k[0], aq = x.x * q[0];
                ak = fmaf(x.y, k[1], ak), aq = fmaf(x.y, q[1], aq);
                ak = fmaf(x.z, k[2], ak), aq = fmaf(x.z, q[2], aq);
                ak = fmaf(x.w, k[3], ak), aq = fmaf(x.w, q[3], aq);
                part[j * 2 * TP + 2 * p] = ak;
                part[j * 2 * TP + 2 * p + 1] = aq;
            }
        }
        sums[g0 * 2 * TP + lane] = warp_sum_scatter<32>(part);
    }
}

/* grid (rows * V / SSM_DIRECT_ROWS, HV), SSM_DIRECT_THREADS threads,
 * identity_direct_shared_bytes(history, T, d) dynamic shared memory;
 * identity_direct_fits, TP = identity_direct_places(T). */
template <int TP, bool KDA, class Act>
__global__ void __launch_bounds__(SSM_DIRECT_THREADS, 4) identity_direct_kernel(tile_args a)
{
    extern __shared__ float4 shared_vectors[]; /* 16-byte aligned */
    float *shared = (float *)shared_vectors;
    const dims &d = a.d;
    const int32_t T = a.tokens, h = blockIdx.y;
    const int32_t row_blocks = d.V / SSM_DIRECT_ROWS;
    const int32_t r = blockIdx.x / row_blocks, row0 = (blockIdx.x % row_blocks) * SSM_DIRECT_ROWS;
    const int32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, row0 == 0 && h == 0 && threadIdx.x == 0))
        return;
    /* As in identity.cuh's kernel: what comes before the prologue's wait
     * is what no prologue writes (the cursors, the history, and the
     * checkpoint of a row that does not fold). */
    const identity_ring g = identity_ring_of(a, slot);
    const int32_t kept = g.kept;
    const direct_history hi = direct_history_at<KDA>(shared, d, a.history);
    const identity_tokens tokens = identity_tokens_at<KDA>(hi.end, d, T, SSM_DIRECT_ROWS);
    float *wk = tokens.end, *wq = wk + (kept + T) * T;
    float *sums = wq + (kept + T) * T;
    const float *lane_first = state_head<float>(a, slot, a.layer, 0, h) +
                              (int64_t)(row0 + warp * SSM_DIRECT_WARP_ROWS) * d.K + 4 * lane;
    float4 s[SSM_DIRECT_WARP_ROWS];
    float s0 = 0.0f, e0 = 0.0f;
    /* A row that folds in this block folds before the prologue's wait when
       the launch asks (fold_early): the prologue writes nothing it reads. */
    const bool fold_now = g.folded && a.fold_inside, before_wait = fold_now && a.fold_early;
    if (!g.folded)
        direct_ask_rows(s, lane_first);
    direct_ask_history<KDA>(a, g, h, row0, hi, &s0, &e0);
    if (!before_wait)
        griddep_wait();
    if (g.folded) {
        if (fold_now) {
            /* The fold's records go where the history's would: a folding
               row keeps none. */
            identity_fold<SSM_DIRECT_K / 8, KDA, Act, true>(a, slot, h, row0, SSM_DIRECT_ROWS,
                                                            shared, hi.end - hi.u);
            __syncthreads(); /* the block's stores before its loads */
        }
        direct_ask_rows(s, lane_first);
    }
    if (before_wait)
        griddep_wait();
    identity_stage_tokens<TP, KDA, Act>(a, g, slot, h, row0, SSM_DIRECT_ROWS, T, tokens);
    if (!KDA && (int32_t)threadIdx.x < kept) {
        hi.gs[threadIdx.x] = s0;
        hi.ge[threadIdx.x] = e0;
    }
    copy_async_wait<0>(); /* this thread's pieces of the history */
    __syncthreads();      /* everyone's, and the tokens */
    /* GDN's weights are formed while the checkpoint's last pieces arrive;
     * KDA's hold three times the registers, which the pieces leave only
     * once they are used. */
    if (!KDA)
        direct_weights<KDA>(d, hi, tokens, kept, T, wk, wq);
    direct_products<TP>(s, tokens.kd, tokens.qd, T,
                        sums + warp * SSM_DIRECT_WARP_ROWS * 2 * TP);
    if (KDA)
        direct_weights<KDA>(d, hi, tokens, kept, T, wk, wq);
    __syncthreads(); /* the weights and the sums */
    if (TP == 1) /* decodes alone commit themselves; the checkpoint's registers are free */
        identity_commit_arrive(a, slot, g, row_blocks * d.HV);
    if ((int32_t)threadIdx.x >= SSM_DIRECT_ROWS)
        return;

    const int32_t i = threadIdx.x, v = row0 + i;
    float sk[TP], sq[TP];
#pragma unroll
    for (int p = 0; p < TP; p++) {
        sk[p] = sums[i * 2 * TP + 2 * p];
        sq[p] = sums[i * 2 * TP + 2 * p + 1];
    }
    identity_checkpoint_decay<TP, KDA>(d, T, tokens.gs, tokens.ge, sk, sq);
    for (int32_t m = 0; m < kept; m++)
        identity_add_record<TP>(wk, wq, m, T, hi.u[m * SSM_DIRECT_ROWS + i], sk, sq);
    identity_new_tokens<TP, Act>(a, g, r, h, v, i, T, tokens, wk, wq, sk, sq);
}

} /* namespace ssm */
#endif
