/* Replay outputs through the replay identity on the GPU (fp32 checkpoint):
 * the checkpoint S0 is read once, never written here, and each new token p
 * of a row gets
 *   r_p = e^{G_p} S0 k_p + sum_{i<p}  w^k_{ip} u_i,  u_p = beta_p (v_p - r_p),
 *   o_p = e^{G_p} S0 q_p + sum_{i<=p} w^q_{ip} u_i,
 * with w^k_{ip} = sum_c e^{G_p[c]-G_i[c]} k_i[c] k_p[c] (one decay for GDN,
 * one per key channel for KDA) and w^q likewise with q_p.
 *
 * One block per (row, value head, ROWS value rows: all
 * SSM_IDENTITY_THREADS of them, or SSM_IDENTITY_SMALL_ROWS at batches too
 * small to fill the device, identity_rows_for), one thread per value row
 * (the other threads stage, weigh and fold with it). S0 streams
 * through shared memory in chunks of SSM_IDENTITY_CHUNK key channels
 * (cp.async, two buffers, rows padded so that a warp's reads of 32 rows
 * spread over the banks); each thread accumulates its row's 2T products
 * S0 k_p and S0 q_p in registers (KDA: k_p and q_p times e^{G_p} per
 * channel), with no shuffles: what the recurrence's row layout spends on
 * sums across lanes is what made this step slow before
 * (bench/results/2026-11-30-identity-h200.md). While the last two chunks
 * are on their way the block forms the weights w^k, w^q, one record per 8
 * lanes with every token, and asks for the first records' u. Then each
 * thread runs its row through the tokens: the scalar terms above, u_p into
 * record p (later steps read it) and the outputs. Each phase asks for its
 * global loads together, in batches with no branch between them, before
 * it stores any. ncu finds the kernel bound by instruction issue and short
 * latency chains rather than by DRAM, so what it saves is instructions: a
 * kernel for exactly T = 4, the 2T sums interleaved
 * (bench/results/2026-12-01-identity-h200.md).
 *
 * Every sum has one fixed order (a row's products over the channels in
 * order, a weight's over its lanes' channels and then the lanes, the
 * history terms in record order), so
 * the results do not depend on the launch. A row whose ring would overflow
 * folds first: in a HISTORY_FOLD job of tile_kernel just before, or, when
 * the launch asks (fold_inside), in its own blocks
 * (identity_fold, one tile after another). Both are native's update in the
 * recurrence's layout, so native's bits. The new records' gate sums start
 * from zero after a fold (prep.cuh knows the same rule). */
#ifndef SSM_KERNELS_CUDA_IDENTITY_CUH
#define SSM_KERNELS_CUDA_IDENTITY_CUH

#include "kernels/cuda/tile.cuh"
#include "kernels/cuda/mma_tf32.cuh"

namespace ssm {

#define SSM_IDENTITY_THREADS 128 /* threads of a block, and its most value rows */
#define SSM_IDENTITY_SMALL_ROWS 32 /* value rows of a block at small batches: one tile */
#define SSM_IDENTITY_CHUNK 32    /* key channels of S0 a staged chunk holds */
#define SSM_IDENTITY_STRIDE (SSM_IDENTITY_CHUNK + 4) /* floats of a staged row */

/* Value rows a block holds at `rows` rows of HV heads on `sms` SMs: all a
 * block's threads can, unless that leaves SMs without a block, where a
 * block holds one tile's rows instead, so that more blocks share the
 * batch's latency chains (the checkpoint's chunks, a fold's records). */
__host__ __device__ inline int32_t identity_rows_for(int32_t rows, int32_t HV, int32_t V,
                                                     int32_t sms)
{
    int64_t blocks = (int64_t)rows * HV * ((V + SSM_IDENTITY_THREADS - 1) / SSM_IDENTITY_THREADS);
    return blocks < sms ? SSM_IDENTITY_SMALL_ROWS : SSM_IDENTITY_THREADS;
}

/* Blocks per value head: per_block value rows each. */
__host__ __device__ inline int32_t identity_row_blocks(int32_t V, int32_t per_block)
{
    return (V + per_block - 1) / per_block;
}

/* Value rows a block holds (the last block of a head may hold fewer). */
__host__ __device__ inline int32_t identity_block_rows(int32_t V, int32_t per_block)
{
    return V < per_block ? V : per_block;
}

/* Shared memory of one block of per_block value rows for `records` records
 * seen (history and tokens) and T tokens. */
__host__ __device__ inline size_t identity_shared_bytes(int32_t records, int32_t tokens,
                                                        const dims &d, int32_t per_block)
{
    size_t K = (size_t)d.K, T = (size_t)tokens,
           rows = (size_t)identity_block_rows(d.V, per_block);
    size_t keys = d.kda ? 4 : 2;           /* k_p, q_p, and for KDA both times e^{G_p} */
    size_t gates = d.kda ? 2 * T * K : 2 * T; /* G_p as sum and error */
    return sizeof(float) * ((size_t)2 * rows * SSM_IDENTITY_STRIDE /* S0 chunks */
                            + keys * T * K                        /* token vectors */
                            + gates + T                           /* G_p, beta_p */
                            + T * rows                            /* v_p of the rows */
                            + (size_t)2 * records * T);           /* w^k, w^q */
}

/* G of record `record` for value head h, channel c (0 for GDN), as sum and error. */
__device__ __forceinline__ void gate_of(const uint8_t *record, const record_layout &lay,
                                        const dims &d, int32_t h, int32_t c, float &sum,
                                        float &error)
{
    int64_t e = d.kda ? (int64_t)h * d.K + c : h;
    sum = ((const float *)(record + lay.gate_sum))[e];
    error = ((const float *)(record + lay.gate_error))[e];
}

/* The records a verify's outputs see in the ring of (slot, layer): `kept`
 * from `first`, after the fold (if any) that ran before the step. */
struct identity_ring {
    const uint8_t *ring;
    int32_t kept, first;
    bool folded; /* the row folds before this step (ring_folds) */
};

__device__ __forceinline__ identity_ring identity_ring_of(const tile_args &a, int32_t slot)
{
    identity_ring g;
    int64_t cell = (int64_t)slot * a.layers + a.layer;
    int32_t used = a.ring_n[cell], start = a.ring_start[cell];
    bool folded = ring_folds(used, a.tokens, a.max_tokens, a.history);
    g.ring = a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)a.layer * a.ring_layer_stride;
    g.kept = folded ? 0 : used;
    g.first = folded ? start + used : start;
    g.folded = folded;
    return g;
}

__device__ __forceinline__ const uint8_t *identity_record(const tile_args &a,
                                                          const identity_ring &g, int32_t i)
{
    return g.ring + (int64_t)((g.first + i) & a.ring_mask) * a.ring_layout.bytes;
}

/* A decode that commits itself (a.cell_arrivals): each of the `blocks`
 * blocks of the (slot, layer) counts itself once every thread of it has
 * read the ring's cursors (identity_ring_of, and identity_fold's reads: the
 * caller's barrier comes after both), and the one that brings the count to
 * `blocks` moves the cursor past the step's tokens as commit_kernel does
 * for an accepted length of T: after a fold the ring restarts after the
 * folded records and holds the new ones; else it grows by them. The add
 * releases the block's reads and acquires the earlier blocks', so the last
 * block writes after every reader. It then sets the count back to zero,
 * so a step captured in a graph replays with it. Thread 0 alone. */
__device__ __forceinline__ void identity_commit_arrive(const tile_args &a, int32_t slot,
                                                       const identity_ring &g, int32_t blocks)
{
    if (!a.cell_arrivals || threadIdx.x != 0)
        return;
    const int64_t cell = (int64_t)slot * a.layers + a.layer;
    if (arrive(a.cell_arrivals + cell) != blocks)
        return;
    int32_t *n = (int32_t *)a.ring_n, *start = (int32_t *)a.ring_start;
    if (g.folded)
        start[cell] = g.first & a.ring_mask;
    n[cell] = g.kept + a.tokens;
    a.cell_arrivals[cell] = 0;
}

/* Asks for chunk q (channels q * SSM_IDENTITY_CHUNK on) of `rows` rows of
 * S0 from `first` into buffer, SSM_IDENTITY_STRIDE floats a row. */
__device__ __forceinline__ void identity_stage(float *buffer, const float *first, int32_t rows,
                                               const dims &d, int32_t q)
{
    constexpr int32_t pieces = SSM_IDENTITY_CHUNK / 4, step = SSM_IDENTITY_THREADS / pieces;
    const int32_t c = (threadIdx.x % pieces) * 4; /* a thread's piece of every row it copies */
    float *to = buffer + c;
    const float *from = first + q * SSM_IDENTITY_CHUNK + c;
    for (int32_t row = threadIdx.x / pieces; row < rows; row += step)
        copy_chunk_async(to + row * SSM_IDENTITY_STRIDE, from + (int64_t)row * d.K, true);
}

/* Key channels a lane holds in the weights: 4 at a time, 32 apart (K <= 128). */
#define SSM_IDENTITY_LANE_CHUNKS 4

/* Asks for the first two chunks of S0 (one cp.async group each, empty
 * past the last chunk). */
__device__ __forceinline__ void identity_stage_first(float *staged, const float *first_row,
                                                     int32_t rows, const dims &d, int32_t chunks,
                                                     int32_t buffer)
{
    for (int32_t q = 0; q < 2; q++) {
        if (q < chunks)
            identity_stage(staged + q * buffer, first_row, rows, d, q);
        copy_async_commit();
    }
}

/* Floats fold_stage_at's layout takes for `records` records of `rows` value rows. */
__host__ __device__ inline int64_t fold_stage_floats(int32_t records, int32_t rows,
                                                     const dims &d)
{
    return (int64_t)records * (d.K + rows + (d.kda ? d.K : 1) + 1);
}

/* Where fold_stage_records puts record i's parts. */
struct fold_stage {
    float *k, *v, *decay, *beta; /* [records][K], [records][rows], [records][1 or K], [records] */
    int32_t rows;
};

__device__ __forceinline__ fold_stage fold_stage_at(float *at, int32_t records, int32_t rows,
                                                    const dims &d)
{
    fold_stage f;
    f.k = at;
    f.v = f.k + (int64_t)records * d.K;
    f.decay = f.v + (int64_t)records * rows;
    f.beta = f.decay + (int64_t)records * (d.kda ? d.K : 1);
    f.rows = rows;
    return f;
}

/* Copies what `used` records from `start` give value head h's rows
 * [row0, row0 + rows) into shared memory, each value as token_load makes
 * it (k normalized by the record's scale, v converted, rows past V zero),
 * so updates from the copy have token_load's bits. Every thread of the
 * block calls it; a barrier must follow before the copy is read. */
template <bool KDA, class Act>
__device__ __forceinline__ void fold_stage_records(const fold_stage &f, const dims &d,
                                                   const record_layout &lay,
                                                   const uint8_t *ring, int32_t start,
                                                   int32_t used, int32_t mask, int32_t h,
                                                   int32_t row0)
{
    const int32_t key_head = h / d.group, K = d.K, G = KDA ? d.K : 1;
    auto record = [&](int32_t i) { return ring + (int64_t)((start + i) & mask) * lay.bytes; };
    if (lay.k_scale > 0)
        stage_elements<4>(f.k, used, K, [&](int32_t i, int32_t c) {
            const uint8_t *r = record(i);
            return normalized_k(load((const Act *)(r + lay.k) + (int64_t)key_head * K + c),
                                ((const float *)(r + lay.k_scale))[key_head]);
        });
    else
        stage_elements<4>(f.k, used, K, [&](int32_t i, int32_t c) {
            return ((const float *)(record(i) + lay.k))[(int64_t)key_head * K + c];
        });
    stage_elements<4>(f.v, used, f.rows, [&](int32_t i, int32_t c) {
        const int32_t row = row0 + c;
        return row < d.V ? load((const Act *)(record(i) + lay.v) + (int64_t)h * d.V + row)
                         : 0.0f;
    });
    stage_elements<4>(f.decay, used, G, [&](int32_t i, int32_t c) {
        return ((const float *)(record(i) + lay.decay))[(int64_t)h * G + c];
    });
    stage_elements<1>(f.beta, used, 1, [&](int32_t i, int32_t) {
        return ((const float *)(record(i) + lay.beta))[h];
    });
}

/* Record i of a fold_stage as token_load would give it to tile t, whose
 * rows start at the staged block's row0. */
template <int E, int RPL, bool KDA>
__device__ __forceinline__ void fold_stage_token(token_regs<E, RPL, KDA> &tk,
                                                 const fold_stage &f, const dims &d, int32_t i,
                                                 const head_tile<E, RPL, float> &t, int32_t row0)
{
    load_lane<E>(f.k + (int64_t)i * d.K, t.sub, tk.k);
    if constexpr (KDA)
        load_lane<E>(f.decay + (int64_t)i * d.K, t.sub, tk.decay);
    else
        tk.decay[0] = f.decay[i];
    tk.beta = f.beta[i];
#pragma unroll
    for (int r = 0; r < RPL; r++)
        tk.v[r] = f.v[i * f.rows + tile_row(t, r) - row0];
}

/* The fold of a row whose ring would overflow, done by the block that
 * needs it: its value rows' tiles of the checkpoint through the ring's n
 * committed records with native's update in the recurrence's layout
 * (tile.cuh: the threads of this block are a tile block's), stored back.
 * The same functions as every other fold, so native's bits. With STAGED,
 * `staged` (`room` floats of shared memory that the block holds nothing in
 * during the fold) and a.fold_staged, the records are first copied there
 * all at once when they fit (fold_stage_records), so the chain of updates
 * reads shared memory instead of waiting on each record's loads from L2;
 * the same values, so the same bits. Without STAGED the kernel carries no
 * code for that (the registers it would take cost kernels that need none
 * of it). Every thread of the block calls it. */
template <int E, bool KDA, class Act, bool STAGED>
__device__ __forceinline__ void identity_fold(const tile_args &a, int32_t slot, int32_t h,
                                              int32_t row0, int32_t rows,
                                              float *staged = nullptr, int64_t room = 0)
{
    constexpr int RPL = SSM_TILE_RPL;
    static_assert(SSM_IDENTITY_THREADS == 32 * SSM_TILE_WARPS,
                  "a block folds as a tile block does");
    static_assert(SSM_IDENTITY_THREADS % tile_rows(RPL) == 0 &&
                      SSM_IDENTITY_SMALL_ROWS % tile_rows(RPL) == 0,
                  "a block's rows are whole tiles");
    const dims &d = a.d;
    const int64_t cell = (int64_t)slot * a.layers + a.layer;
    const int32_t used = a.ring_n[cell], start = a.ring_start[cell];
    const uint8_t *ring =
        a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)a.layer * a.ring_layer_stride;
    float *head = state_head<float>(a, slot, a.layer, 0, h);
    const bool from_stage =
        STAGED && staged && a.fold_staged && fold_stage_floats(used, rows, d) <= room;
    fold_stage f;
    if (from_stage) {
        f = fold_stage_at(staged, used, rows, d);
        fold_stage_records<KDA, Act>(f, d, a.ring_layout, ring, start, used, a.ring_mask, h,
                                     row0);
        __syncthreads();
    }
    for (int32_t tile = row0 / tile_rows(RPL); tile * tile_rows(RPL) < row0 + rows; tile++) {
        head_tile<E, RPL, float> t;
        tile_place(t, tile);
        tile_load(t, d, head);
        if (from_stage) {
            token_regs<E, RPL, KDA> tk;
            float unused[RPL];
#pragma unroll 2 /* the tile's registers alternate, with no moves between records */
            for (int32_t i = 0; i < used; i++) {
                fold_stage_token<E, RPL, KDA>(tk, f, d, i, t, row0);
                tile_token<E, RPL, KDA, float>(t, tk, (const float *)0, unused, a.layout);
            }
        } else {
            apply_records<E, RPL, KDA, float, Act, false>(t, d, ring, a.ring_layout, start,
                                                          used, a.ring_mask, h, a.layout);
        }
        tile_store(t, d, head);
    }
}

/* w^k_{ip} and w^q_{ip} of record i with every token p that sees it
 * (p >= seen), into wk[i * T + p] and wq[i * T + p] when `keep`, from the
 * record's k (ki: its key head's K channels) and G as sum and error (si,
 * ei: GDN one, KDA one per channel), in global or shared memory. The
 * SSM_ROW_LANES lanes of a group share the record: lane `sub` asks for its
 * channels of k_i (sub * 4 .. + 3, then 32 on: tile.cuh's lane_channel) and
 * the record's gates all at once, sums each token's products over them in
 * channel order, and group_sum adds the lanes' sums, so every weight has one
 * fixed order. kp, qp: the tokens' k and q; gs, ge: their G as sum and error
 * (T of each for GDN, T * K for KDA). Every lane of the warp must call it
 * (it shuffles). */
template <bool KDA>
__device__ __forceinline__ void identity_weights_of(const dims &d, const float *ki,
                                                    const float *si, const float *ei,
                                                    int32_t sub, int32_t T,
                                                    const float *kp, const float *qp,
                                                    const float *gs, const float *ge, int32_t i,
                                                    int32_t seen, bool keep, float *wk, float *wq)
{
    constexpr int C = SSM_IDENTITY_LANE_CHUNKS;
    constexpr int G = KDA ? C : 1;
    float k[C][4], s[G][4], e[G][4], s0 = 0.0f, e0 = 0.0f; /* s, e: KDA's gates of k's channels */
#pragma unroll
    for (int j = 0; j < C; j++) {
        int32_t c = 32 * j < d.K ? sub * 4 + 32 * j : sub * 4; /* past K: any real channel */
        load4(ki + c, k[j]);
        if (KDA) {
            load4(si + c, s[KDA ? j : 0]);
            load4(ei + c, e[KDA ? j : 0]);
        }
    }
    if (!KDA)
        s0 = *si, e0 = *ei;
#pragma unroll 1 /* one token at a time: the k of the record stays in registers, nothing else */
    for (int32_t p = 0; p < T; p++) {
        float ak = 0.0f, aq = 0.0f;
#pragma unroll
        for (int j = 0; j < C; j++) {
            if (32 * j >= d.K)
                break;
            int32_t c = sub * 4 + 32 * j;
            float kp4[4], qp4[4];
            load4(kp + p * d.K + c, kp4);
            load4(qp + p * d.K + c, qp4);
#pragma unroll
            for (int x = 0; x < 4; x++) {
                float w = k[j][x];
                if (KDA)
                    w *= dev_expf(d, (gs[p * d.K + c + x] - s[KDA ? j : 0][x]) +
                                  (ge[p * d.K + c + x] - e[KDA ? j : 0][x]));
                ak = fmaf(w, kp4[x], ak);
                aq = fmaf(w, qp4[x], aq);
            }
        }
        float wkp = group_sum(ak), wqp = group_sum(aq);
        if (!KDA) {
            float decay = dev_expf(d, (gs[p] - s0) + (ge[p] - e0));
            wkp *= decay;
            wqp *= decay;
        }
        if (keep && sub == 0 && p >= seen) {
            wk[i * T + p] = wkp;
            wq[i * T + p] = wqp;
        }
    }
}

/* identity_weights_of for ring record `record` of value head h. */
template <bool KDA>
__device__ __forceinline__ void identity_weights(const dims &d, const record_layout &lay,
                                                 const uint8_t *record, int32_t h,
                                                 int32_t key_head, int32_t sub, int32_t T,
                                                 const float *kp, const float *qp,
                                                 const float *gs, const float *ge, int32_t i,
                                                 int32_t seen, bool keep, float *wk, float *wq)
{
    const float *ki = (const float *)(record + lay.k) + (int64_t)key_head * d.K;
    const int64_t gate = KDA ? (int64_t)h * d.K : h; /* gate_of's element */
    const float *si = (const float *)(record + lay.gate_sum) + gate;
    const float *ei = (const float *)(record + lay.gate_error) + gate;
    identity_weights_of<KDA>(d, ki, si, ei, sub, T, kp, qp, gs, ge, i, seen, keep, wk, wq);
}

/* The weights of every record the tokens see (M of them), one record per
 * SSM_ROW_LANES lanes; the loop bound is the same for the whole block, so
 * every lane shuffles. */
template <bool KDA>
__device__ __forceinline__ void identity_all_weights(const tile_args &a, const identity_ring &g,
                                                     int32_t h, int32_t key_head, int32_t T,
                                                     const float *kp, const float *qp,
                                                     const float *gs, const float *ge,
                                                     float *wk, float *wq)
{
    const int32_t M = g.kept + T, groups = blockDim.x / SSM_ROW_LANES;
    const int32_t group = threadIdx.x / SSM_ROW_LANES, sub = threadIdx.x % SSM_ROW_LANES;
    for (int32_t base = 0; base < M; base += groups) {
        int32_t i = base + group;
        bool keep = i < M;
        identity_weights<KDA>(a.d, a.ring_layout, identity_record(a, g, keep ? i : 0), h,
                              key_head, sub, T, kp, qp, gs, ge, i, i - g.kept, keep, wk, wq);
    }
}

/* This row's products with the S0 chunk q staged at `row`: sk[p] += S0 kd_p,
 * sq[p] += S0 qd_p over the chunk's channels, in channel order. For MTP
 * rounds (MAXT = 4) each step asks for four channels of the row and of
 * every vector first, then moves all 2T sums one channel at a time, so that
 * 2T independent chains interleave; longer rounds would not fit those
 * vectors in registers and take one token's two sums at a time. */
template <int MAXT>
__device__ __forceinline__ void identity_chunk(const float *row, const float *kd, const float *qd,
                                               const dims &d, int32_t T, int32_t q,
                                               float (&sk)[MAXT], float (&sq)[MAXT])
{
    constexpr int AT_ONCE = MAXT <= 4 ? MAXT : 1; /* tokens whose vectors a step holds */
#pragma unroll 1
    for (int32_t c = 0; c < SSM_IDENTITY_CHUNK; c += 4) {
        const int32_t channel = q * SSM_IDENTITY_CHUNK + c;
        float s4[4];
        load4(row + c, s4);
#pragma unroll
        for (int p0 = 0; p0 < MAXT; p0 += AT_ONCE) {
            if (p0 >= T)
                break;
            float k4[AT_ONCE][4], q4[AT_ONCE][4];
#pragma unroll
            for (int t = 0; t < AT_ONCE; t++) {
                if (p0 + t >= T)
                    break;
                load4(kd + (p0 + t) * d.K + channel, k4[t]);
                load4(qd + (p0 + t) * d.K + channel, q4[t]);
            }
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int t = 0; t < AT_ONCE; t++) {
                    if (p0 + t >= T)
                        break;
                    sk[p0 + t] = fmaf(s4[j], k4[t][j], sk[p0 + t]);
                    sq[p0 + t] = fmaf(s4[j], q4[t][j], sq[p0 + t]);
                }
        }
    }
}

/* Rows a block's products run on tensor cores at once: 32 a warp. */
#define SSM_IDENTITY_TC_ROWS (SSM_IDENTITY_THREADS / 32 * 32)

/* identity_chunk's products for the whole block on tensor cores, in
 * 3xTF32 (about fp32's precision; the sums in the tensor cores' order):
 * warp w takes staged rows 32 w .. 32 w + 31 as two 16-row tiles of A =
 * S0's chunk q, against B = the 8 columns kd_0 .. kd_3, qd_0 .. qd_3 of
 * the chunk's channels (zeros past T). acc[i] holds tile i's 16 x 8 sums
 * in mma's C layout (identity_tc_sums hands them to the rows' threads).
 * Every thread of the block calls it, with SSM_IDENTITY_TC_ROWS rows
 * staged. */
template <int MAXT>
__device__ __forceinline__ void identity_chunk_tc(const float *buffer, const float *kd,
                                                  const float *qd, const dims &d, int32_t T,
                                                  int32_t q, float (&acc)[2][4])
{
    static_assert(MAXT <= 4, "kd and qd of four tokens fill B's 8 columns");
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t g = lane >> 2, t = lane & 3; /* mma's fragment coordinates */
    const float *column = (g < 4 ? kd + g * d.K : qd + (g - 4) * d.K) + q * SSM_IDENTITY_CHUNK;
    const bool live = (g & 3) < T;
#pragma unroll
    for (int s = 0; s < SSM_IDENTITY_CHUNK / 8; s++) {
        tc::frag b, b_hi, b_lo;
        b.x[0] = live ? __float_as_uint(column[8 * s + t]) : 0u;
        b.x[1] = live ? __float_as_uint(column[8 * s + t + 4]) : 0u;
        b.x[2] = b.x[3] = 0u;
        tc::split(b_hi, b_lo, b);
#pragma unroll
        for (int m = 0; m < 2; m++) {
            tc::frag a, a_hi, a_lo;
            tc::load_a_rows(a, buffer + (warp * 32 + m * 16) * SSM_IDENTITY_STRIDE + 8 * s,
                            SSM_IDENTITY_STRIDE);
            tc::split(a_hi, a_lo, a);
            tc::mma(acc[m], a_lo, b_hi, 0);
            tc::mma(acc[m], a_hi, b_lo, 0);
            tc::mma(acc[m], a_hi, b_hi, 0);
        }
    }
}

/* identity_chunk_tc's sums to the rows' threads: through `sums` (8 floats
 * a row of shared memory nobody reads or writes until a barrier after
 * this), thread i < rows gets row i's sk[p] = S0 kd_p, sq[p] = S0 qd_p.
 * Every thread of the block calls it. */
template <int MAXT>
__device__ __forceinline__ void identity_tc_sums(const float (&acc)[2][4], float *sums,
                                                 int32_t rows, int32_t T, float (&sk)[MAXT],
                                                 float (&sq)[MAXT])
{
    const int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int m = 0; m < 2; m++) {
        float *row = sums + (warp * 32 + m * 16 + g) * 8 + 2 * t;
        row[0] = acc[m][0];
        row[1] = acc[m][1];
        row[64] = acc[m][2]; /* row g + 8 */
        row[65] = acc[m][3];
    }
    __syncthreads();
    if ((int32_t)threadIdx.x < rows)
#pragma unroll
        for (int p = 0; p < MAXT; p++) {
            if (p >= T)
                break;
            sk[p] = sums[threadIdx.x * 8 + p];
            sq[p] = sums[threadIdx.x * 8 + 4 + p];
        }
}

/* History record m's term of every token's two sums: sk[p] += w^k_{mp} u,
 * sq[p] += w^q_{mp} u (u: record m's u of this row). */
template <int MAXT>
__device__ __forceinline__ void identity_add_record(const float *wk, const float *wq, int32_t m,
                                                    int32_t T, float u, float (&sk)[MAXT],
                                                    float (&sq)[MAXT])
{
#pragma unroll
    for (int p = 0; p < MAXT; p++) {
        if (p >= T)
            break;
        sk[p] = fmaf(wk[m * T + p], u, sk[p]);
        sq[p] = fmaf(wq[m * T + p], u, sq[p]);
    }
}

/* Records of the history whose u a thread asks for before the last S0
 * chunks, so that the last phase does not wait for them (the default
 * history of 16 keeps at most 8 before a round of 4). */
#define SSM_IDENTITY_EARLY 8

/* u of the first SSM_IDENTITY_EARLY records of value row `row` (those past
 * the history: any real element, dropped later), asked for together. */
__device__ __forceinline__ void identity_early_u(const tile_args &a, const identity_ring &g,
                                                 int32_t h, int32_t row,
                                                 float (&early)[SSM_IDENTITY_EARLY])
{
#pragma unroll
    for (int m = 0; m < SSM_IDENTITY_EARLY; m++) {
        const uint8_t *record = identity_record(a, g, m < g.kept ? m : 0);
        early[m] = ((const float *)(record + a.ring_layout.u))[(int64_t)h * a.d.V + row];
    }
}

/* The new tokens in shared memory, as identity_stage_tokens leaves them
 * (identity_shared_bytes counts them). */
struct identity_tokens {
    float *kp, *qp; /* normalized k_p, q_p: [T][K] */
    float *kd, *qd; /* KDA: k_p, q_p times e^{G_p} per channel; GDN: kp, qp */
    float *gs, *ge; /* G_p as sum and error: [T] (GDN) or [T][K] (KDA) */
    float *bt;      /* beta_p: [T] */
    float *vp;      /* v_p of the block's value rows: [T][rows_max] */
    float *end;     /* the first float after them */
    int32_t rows_max;
};

template <bool KDA>
__device__ __forceinline__ identity_tokens identity_tokens_at(float *at, const dims &d, int32_t T,
                                                              int32_t rows_max)
{
    identity_tokens t;
    const int32_t gate_len = KDA ? T * d.K : T;
    t.kp = at;
    t.qp = t.kp + T * d.K;
    t.kd = KDA ? t.qp + T * d.K : t.kp;
    t.qd = KDA ? t.kd + T * d.K : t.qp;
    t.gs = t.qd + T * d.K;
    t.ge = t.gs + gate_len;
    t.bt = t.ge + gate_len;
    t.vp = t.bt + T;
    t.end = t.vp + T * rows_max;
    t.rows_max = rows_max;
    return t;
}

/* The new tokens' G_p, beta_p, v_p of `rows` value rows from row0, and
 * normalized k and q (KDA: also times e^{G_p}), into s, by a block of
 * SSM_IDENTITY_THREADS threads, thread i holding row row0 + i. Loads go in
 * batches with no branch between them (a lane past the end loads a real
 * element and drops it), all before the batch's first store, so their
 * latencies overlap (T <= MAXT <= SSM_IDENTITY_THREADS). No barrier: the
 * caller's comes before any read. */
template <int MAXT, bool KDA, class Act>
__device__ __forceinline__ void identity_stage_tokens(const tile_args &a, const identity_ring &g,
                                                      int32_t slot, int32_t h, int32_t row0,
                                                      int32_t rows, int32_t T,
                                                      const identity_tokens &s)
{
    const dims &d = a.d;
    const record_layout &lay = a.ring_layout;
    const int32_t kept = g.kept, key_head = h / d.group, rows_max = s.rows_max;
    const int32_t row = (int32_t)threadIdx.x < rows ? row0 + (int32_t)threadIdx.x : row0;
    float *kp = s.kp, *qp = s.qp, *kd = s.kd, *qd = s.qd, *gs = s.gs, *ge = s.ge, *bt = s.bt,
          *vp = s.vp;
    float gate_sum = 0.0f, gate_error = 0.0f, beta = 0.0f, values[MAXT];
    {
        const int32_t mine = (int32_t)threadIdx.x < T ? (int32_t)threadIdx.x : 0;
        const uint8_t *record = identity_record(a, g, kept + mine);
        gate_of(record, lay, d, h, 0, gate_sum, gate_error);
        beta = ((const float *)(record + lay.beta))[h];
#pragma unroll
        for (int p = 0; p < MAXT; p++) {
            const uint8_t *token = identity_record(a, g, kept + (p < T ? p : 0));
            values[p] = load((const Act *)(token + lay.v) + (int64_t)h * d.V + row);
        }
    }
    constexpr int BATCH = 4;
    for (int32_t base = 0; base < T * d.K; base += BATCH * SSM_IDENTITY_THREADS) {
        float k[BATCH], q[BATCH], sum[KDA ? BATCH : 1], error[KDA ? BATCH : 1];
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            int32_t i = base + j * SSM_IDENTITY_THREADS + (int32_t)threadIdx.x;
            i = i < T * d.K ? i : 0;
            int32_t p = i / d.K, c = i % d.K;
            const uint8_t *record = identity_record(a, g, kept + p);
            k[j] = ((const float *)(record + lay.k))[(int64_t)key_head * d.K + c];
            q[j] = a.q[((int64_t)slot * a.max_tokens + p) * d.H * d.K + (int64_t)key_head * d.K + c];
            if (KDA)
                gate_of(record, lay, d, h, c, sum[KDA ? j : 0], error[KDA ? j : 0]);
        }
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            int32_t i = base + j * SSM_IDENTITY_THREADS + (int32_t)threadIdx.x;
            if (i >= T * d.K)
                break;
            kp[i] = k[j];
            qp[i] = q[j];
            if (KDA) {
                gs[i] = sum[KDA ? j : 0];
                ge[i] = error[KDA ? j : 0];
                float decay = dev_expf(d, sum[KDA ? j : 0] + error[KDA ? j : 0]);
                kd[i] = decay * k[j];
                qd[i] = decay * q[j];
            }
        }
    }
    if ((int32_t)threadIdx.x < T) {
        if (!KDA) {
            gs[threadIdx.x] = gate_sum;
            ge[threadIdx.x] = gate_error;
        }
        bt[threadIdx.x] = beta;
    }
    if ((int32_t)threadIdx.x < rows)
#pragma unroll
        for (int p = 0; p < MAXT; p++) {
            if (p >= T)
                break;
            vp[p * rows_max + threadIdx.x] = values[p];
        }
}

/* e^{G_p} on the checkpoint's products of GDN's tokens (KDA's carry their
 * decays per channel already). */
template <int MAXT, bool KDA>
__device__ __forceinline__ void identity_checkpoint_decay(const dims &d, int32_t T,
                                                          const float *gs, const float *ge,
                                                          float (&sk)[MAXT], float (&sq)[MAXT])
{
#pragma unroll
    for (int p = 0; p < MAXT; p++) {
        float decay0 = KDA || p >= T ? 1.0f : dev_expf(d, gs[p] + ge[p]);
        sk[p] *= decay0;
        sq[p] *= decay0;
    }
}

/* Value row v of the block's `local`-th row of row r through the new tokens,
 * once sk and sq hold the checkpoint's and the history's terms: each
 * token's r_p takes the earlier new tokens' terms, then
 * u_p = beta_p (v_p - r_p) goes into record p (later steps read it) and
 * o_p = sq_p + w^q_{pp} u_p out. */
template <int MAXT, class Act>
__device__ __forceinline__ void identity_new_tokens(const tile_args &a, const identity_ring &g,
                                                    int32_t r, int32_t h, int32_t v,
                                                    int32_t local, int32_t T,
                                                    const identity_tokens &s, const float *wk,
                                                    const float *wq, float (&sk)[MAXT],
                                                    float (&sq)[MAXT])
{
    const dims &d = a.d;
    const int32_t kept = g.kept;
    float un[MAXT];
#pragma unroll
    for (int p = 0; p < MAXT; p++) {
        if (p >= T)
            break;
#pragma unroll
        for (int m = 0; m < p; m++) {
            sk[p] = fmaf(wk[(kept + m) * T + p], un[m], sk[p]);
            sq[p] = fmaf(wq[(kept + m) * T + p], un[m], sq[p]);
        }
        uint8_t *record = (uint8_t *)identity_record(a, g, kept + p);
        float u = s.bt[p] * (s.vp[p * s.rows_max + local] - sk[p]);
        un[p] = u;
        ((float *)(record + a.ring_layout.u))[(int64_t)h * d.V + v] = u;
        float o = fmaf(wq[(kept + p) * T + p], u, sq[p]);
        store((Act *)a.out + (((int64_t)r * T + p) * d.HV + h) * d.V + v, o);
    }
}

/* grid (rows * identity_row_blocks(V, ROWS), HV), SSM_IDENTITY_THREADS
 * threads, E = K / 8 (the fold's layout), ROWS value rows a block
 * (a compile-time constant: the GDN kernel lives at 96 registers, where a
 * runtime count spilled), identity_shared_bytes(history + T_max, T, d, ROWS)
 * dynamic shared memory;
 * T = a.tokens <= MAXT, and T = MAXT when EXACT (the loops over the tokens
 * then have a bound the compiler knows). */
template <int E, int MAXT, bool KDA, class Act, bool EXACT, int ROWS, bool TENSOR = false>
__global__ void __launch_bounds__(SSM_IDENTITY_THREADS, KDA ? 4 : 5) identity_kernel(tile_args a)
{
    extern __shared__ float4 shared_vectors[]; /* 16-byte aligned */
    float *shared = (float *)shared_vectors;
    const dims &d = a.d;
    const int32_t T = EXACT ? MAXT : a.tokens, h = blockIdx.y;
    static_assert(ROWS <= SSM_IDENTITY_THREADS, "one thread a value row");
    constexpr int32_t per_block = ROWS;
    const int32_t row_blocks = identity_row_blocks(d.V, per_block);
    const int32_t r = blockIdx.x / row_blocks;
    const int32_t row0 = (blockIdx.x % row_blocks) * per_block;
    const int32_t rows = d.V - row0 < per_block ? d.V - row0 : per_block;
    const int32_t v = row0 + threadIdx.x; /* this thread's value row, when threadIdx.x < rows */
    const int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, row0 == 0 && h == 0 && threadIdx.x == 0))
        return;
    /* The prologue before this kernel writes the records and q, the fold
     * job (unless a.fold_inside) the checkpoints of the rows that fold; the
     * ring's cursors move only in commits, before the step. With
     * a.fold_inside the kernel follows the prologue directly: a row that
     * does not fold asks for its checkpoint at once, while the prologue may
     * still run, and waits for it only before reading what it writes; a row
     * that folds first folds its rows of the checkpoint through the ring
     * (the barrier then makes the stores visible to the block's loads). */
    const identity_ring g = identity_ring_of(a, slot);
    const float *first_row = state_head<float>(a, slot, a.layer, 0, h) + (int64_t)row0 * d.K;
    const int32_t chunks = d.K / SSM_IDENTITY_CHUNK;
    const int32_t buffer = identity_block_rows(d.V, per_block) * SSM_IDENTITY_STRIDE;
    float *staged = shared;
    const bool asked_early = !g.folded && a.fold_inside;
    /* With a.fold_early a row that folds here folds before the prologue's
       wait: the prologue appends past the folded records (ring_folds keeps
       n + T <= L) and writes nothing else the fold reads. */
    const bool fold_now = g.folded && a.fold_inside, before_wait = fold_now && a.fold_early;
    if (asked_early)
        identity_stage_first(staged, first_row, rows, d, chunks, buffer);
    if (!before_wait)
        griddep_wait();
    if (!asked_early) {
        if (fold_now) {
            /* KDA's kernels (128 registers) stage the fold's records in the
               checkpoint's chunk buffers, which hold nothing until the fold
               is done; GDN's (96) keep the plain loop, which their rounds
               measured faster. */
            identity_fold<E, KDA, Act, KDA>(a, slot, h, row0, rows, staged,
                                            2 * (int64_t)buffer);
            __syncthreads();
        }
        identity_stage_first(staged, first_row, rows, d, chunks, buffer);
    }
    if (before_wait)
        griddep_wait();

    const record_layout &lay = a.ring_layout;
    const int32_t kept = g.kept, key_head = h / d.group;
    const int32_t rows_max = identity_block_rows(d.V, per_block);
    const int32_t row = (int32_t)threadIdx.x < rows ? v : row0; /* a real row to load */

    const identity_tokens tokens = identity_tokens_at<KDA>(staged + 2 * buffer, d, T, rows_max);
    const float *kp = tokens.kp, *qp = tokens.qp, *kd = tokens.kd, *qd = tokens.qd,
                *gs = tokens.gs, *ge = tokens.ge;
    float *wk = tokens.end, *wq = wk + (kept + T) * T;
    identity_stage_tokens<MAXT, KDA, Act>(a, g, slot, h, row0, rows, T, tokens);
    __syncthreads();
    identity_commit_arrive(a, slot, g, row_blocks * d.HV);

    /* This row's products with every token, chunk by chunk; the weights
     * w^k_{ip}, w^q_{ip} of every record i the tokens see (i <= kept + p)
     * are formed while chunks 2 and 3 are on their way (or after the last
     * chunk when K has fewer than three), and read after the next barrier. */
    float sk[MAXT], sq[MAXT], early[SSM_IDENTITY_EARLY];
#pragma unroll
    for (int p = 0; p < MAXT; p++)
        sk[p] = sq[p] = 0.0f;
    /* TENSOR: the products on tensor cores (launch_identity_rows takes this
       kernel only where its blocks stage 128 rows). */
    static_assert(!TENSOR || (MAXT <= 4 && ROWS == SSM_IDENTITY_TC_ROWS),
                  "tensor-core products take 128 rows of at most four tokens");
    float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
    for (int32_t q = 0; q < chunks; q++) {
        if (q == 2) {
            identity_all_weights<KDA>(a, g, h, key_head, T, kp, qp, gs, ge, wk, wq);
            identity_early_u(a, g, h, row, early);
        }
        copy_async_wait<1>(); /* this thread's pieces of chunk q are in */
        __syncthreads();      /* and everyone's (and, at q = 2, the weights) */
        if constexpr (TENSOR)
            identity_chunk_tc<MAXT>(staged + (q & 1) * buffer, kd, qd, d, T, q, acc);
        else if ((int32_t)threadIdx.x < rows)
            identity_chunk<MAXT>(staged + (q & 1) * buffer + threadIdx.x * SSM_IDENTITY_STRIDE,
                                 kd, qd, d, T, q, sk, sq);
        __syncthreads(); /* buffer q & 1 is read: it may take chunk q + 2 */
        if (q + 2 < chunks)
            identity_stage(staged + (q & 1) * buffer, first_row, rows, d, q + 2);
        copy_async_commit();
    }
    if (chunks <= 2) {
        identity_all_weights<KDA>(a, g, h, key_head, T, kp, qp, gs, ge, wk, wq);
        identity_early_u(a, g, h, row, early);
        __syncthreads();
    }
    if constexpr (TENSOR) /* both chunk buffers are read: the first takes the sums */
        identity_tc_sums<MAXT>(acc, staged, rows, T, sk, sq);
    if ((int32_t)threadIdx.x >= rows)
        return;

    /* The row through the tokens: e^{G_p} S0 k_p, the history's terms in
     * record order, then the earlier new tokens'. */
    identity_checkpoint_decay<MAXT, KDA>(d, T, gs, ge, sk, sq);
#pragma unroll
    for (int m = 0; m < SSM_IDENTITY_EARLY; m++) {
        if (m >= kept)
            break;
        identity_add_record<MAXT>(wk, wq, m, T, early[m], sk, sq);
    }
    constexpr int BATCH = 4;
    for (int32_t m0 = SSM_IDENTITY_EARLY; m0 < kept; m0 += BATCH) {
        float u[BATCH]; /* a batch of records' u, asked for together */
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            int32_t m = m0 + j < kept ? m0 + j : m0;
            u[j] = ((const float *)(identity_record(a, g, m) + lay.u))[(int64_t)h * d.V + v];
        }
#pragma unroll
        for (int j = 0; j < BATCH; j++) {
            if (m0 + j >= kept)
                break;
            identity_add_record<MAXT>(wk, wq, m0 + j, T, u[j], sk, sq);
        }
    }
    identity_new_tokens<MAXT, Act>(a, g, r, h, v, threadIdx.x, T, tokens, wk, wq, sk, sq);
}

} /* namespace ssm */
#endif
