/* Replay outputs through SPEC 2.4's identity on the GPU (fp32 checkpoint):
 * the checkpoint S0 is read once, never written (except by a fold), and each
 * new token p of a row gets
 *   r_p = e^{G_p} S0 k_p + sum_{i<p}  w^k_{ip} u_i,  u_p = beta_p (v_p - r_p),
 *   o_p = e^{G_p} S0 q_p + sum_{i<=p} w^q_{ip} u_i,
 * with w^k_{ip} = sum_c e^{G_p[c]-G_i[c]} k_i[c] k_p[c] (one decay for GDN,
 * one per key channel for KDA) and w^q likewise with q_p.
 *
 * One block per (row, value head, tile of identity_rows(RPL) value rows),
 * SSM_IDENTITY_WARPS warps, RPL rows per lane in tile.cuh's row layout (8
 * lanes a row, three shuffles a sum). The block first asks for its rows of
 * S0, then stages in shared memory, while those loads are in flight, what
 * its rows share: the new tokens' k, q, beta and v, the history's u of its
 * rows, and the weights w^k, w^q, one (record, token) pair per 8 lanes, all
 * pairs at once. Every row then costs two dot products with S0 per token and
 * O(history) scalar terms. u_p goes into record p, where later steps read it.
 *
 * When the ring would overflow the block first folds: it applies the
 * committed raw records with tile_token (native's update, same row layout,
 * so the same bits as native) and stores the checkpoint, which then is S0
 * in its registers; the new records' gate sums start from zero (prep.cuh
 * knows the same rule). */
#ifndef SSM_KERNELS_CUDA_IDENTITY_CUH
#define SSM_KERNELS_CUDA_IDENTITY_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

#define SSM_IDENTITY_WARPS 8

/* Value rows of one block at RPL rows per lane. */
__host__ __device__ constexpr int32_t identity_rows(int32_t rpl)
{
    return SSM_IDENTITY_WARPS * SSM_WARP_ROWS * rpl;
}

/* Blocks per value head. */
__host__ __device__ inline int32_t identity_tiles(int32_t V, int32_t rpl)
{
    return (V + identity_rows(rpl) - 1) / identity_rows(rpl);
}

/* Shared memory of one block of RPL rows per lane for `records` records
 * seen and T tokens. */
__host__ __device__ inline size_t identity_shared_bytes(int32_t records, int32_t tokens,
                                                        const dims &d, int32_t rpl)
{
    size_t K = (size_t)d.K;
    size_t gate = d.kda ? K : 1;
    size_t keys = d.kda ? 4 : 2; /* k_p, q_p, and for KDA both times e^{G_p} */
    size_t rows = (size_t)identity_rows(rpl);
    return sizeof(float) * ((size_t)2 * records * tokens  /* w^k, w^q */
                            + keys * tokens * K           /* k_p, q_p (decayed) */
                            + (size_t)tokens * gate       /* G_p (sum + error) */
                            + (size_t)tokens * (rows + 1) /* v_p of the rows, beta_p */
                            + (size_t)records * rows);    /* u_i of the rows */
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

/* This lane's rows of tile `tile` of a head: tile.cuh's layout over
 * SSM_IDENTITY_WARPS warps (rows row0 + i * SSM_WARP_ROWS). */
template <int E, int RPL>
__device__ __forceinline__ void identity_place(head_tile<E, RPL, float> &t, int32_t tile)
{
    int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    t.sub = lane % SSM_ROW_LANES;
    t.row0 = tile * identity_rows(RPL) + warp * SSM_WARP_ROWS * RPL + lane / SSM_ROW_LANES;
}

/* w^k_{ip} and w^q_{ip} of one (record i, token p) pair: this lane's part
 * of the sum over its key channels (tile.cuh's lane_channel), summed over
 * the row's 8 lanes. Every lane of the warp must call it (it shuffles). */
template <int E, bool KDA>
__device__ __forceinline__ void identity_weight(const dims &d, const record_layout &lay,
                                                const uint8_t *record, const uint8_t *token,
                                                const float *ki, const float *kp,
                                                const float *qp, int32_t h, int32_t sub,
                                                float &wk, float &wq)
{
    float ak[2] = {0.0f, 0.0f}, aq[2] = {0.0f, 0.0f};
#pragma unroll
    for (int c = 0; c < E / 4; c++) {
        int32_t channel = c * 32 + sub * 4;
        float k4[4], kp4[4], qp4[4];
        load4(ki + channel, k4);
        load4(kp + channel, kp4);
        load4(qp + channel, qp4);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float w = k4[j];
            if (KDA) {
                float si, ei, sp, ep;
                gate_of(record, lay, d, h, channel + j, si, ei);
                gate_of(token, lay, d, h, channel + j, sp, ep);
                w *= ssm_expf((sp - si) + (ep - ei));
            }
            ak[j & 1] = fmaf(w, kp4[j], ak[j & 1]);
            aq[j & 1] = fmaf(w, qp4[j], aq[j & 1]);
        }
    }
    wk = group_sum(ak[0] + ak[1]);
    wq = group_sum(aq[0] + aq[1]);
    if (!KDA) {
        float si, ei, sp, ep;
        gate_of(record, lay, d, h, 0, si, ei);
        gate_of(token, lay, d, h, 0, sp, ep);
        float decay = ssm_expf((sp - si) + (ep - ei));
        wk *= decay;
        wq *= decay;
    }
}

/* grid (identity_tiles(V, RPL) * rows, HV), 32 * SSM_IDENTITY_WARPS threads,
 * identity_shared_bytes(history + T_max, T, d, RPL) dynamic shared memory. RPL (2 or 4) never changes a bit: each row's sums follow the row
 * layout alone. */
template <int E, int RPL, bool KDA, class Act>
__global__ void __launch_bounds__(32 * SSM_IDENTITY_WARPS, RPL == 2 ? 3 : 2)
    identity_kernel(tile_args a)
{
    extern __shared__ float shared[];
    constexpr int32_t ROWS = identity_rows(RPL);
    const dims &d = a.d;
    const int32_t T = a.tokens;
    const int32_t tiles = identity_tiles(d.V, RPL);
    const int32_t r = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int32_t layer = a.layer, h = blockIdx.y;
    const int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, tile == 0 && h == 0 && threadIdx.x == 0))
        return;
    const int32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t first_row = tile * ROWS;
    float *checkpoint = state_head<float>(a, slot, layer, 0, h);

    /* S0: this thread's own rows, so neither the fold's store nor the loads
     * need a barrier; after a fold the folded state is S0 as it stands. */
    head_tile<E, RPL, float> t;
    identity_place(t, tile);
    tile_load(t, d, checkpoint);
    griddep_wait(); /* the ring and its cursors come after the prologue */

    int64_t cell = (int64_t)slot * a.layers + layer;
    int32_t used = a.ring_n[cell], start = a.ring_start[cell];
    const uint8_t *ring =
        a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)layer * a.ring_layer_stride;
    const record_layout &lay = a.ring_layout;
    int32_t kept = used, first = start; /* the history the outputs see */
    if (ring_folds(used, T, a.max_tokens, a.history)) {
        apply_records<E, RPL, KDA, float, Act, true>(t, d, ring, lay, start, used, a.ring_mask,
                                                     h);
        tile_store(t, d, checkpoint);
        kept = 0;
        first = start + used;
    }

    const int32_t M = kept + T;
    auto record_at = [&](int32_t i) {
        return ring + (int64_t)((first + i) & a.ring_mask) * lay.bytes;
    };
    const int32_t gates = d.kda ? d.K : 1;
    /* Key vectors first: K is a multiple of 32, so each starts 16-byte aligned. */
    float *kp = shared, *qp = kp + T * d.K;
    float *kd = d.kda ? qp + T * d.K : kp, *qd = d.kda ? kd + T * d.K : qp;
    float *gp = (d.kda ? qd : qp) + T * d.K;
    float *wk = gp + T * gates, *wq = wk + M * T;
    float *vb = wq + M * T;   /* v of token p, row first_row + i at vb[p * ROWS + i] */
    float *bt = vb + T * ROWS; /* beta of token p */
    float *ub = bt + T;       /* u of record m, row first_row + i at ub[m * ROWS + i] */
    const int32_t key_head = h / d.group;

    /* The history's u and the tokens' v for the block's rows, one coalesced
     * row per record, and the tokens' beta. */
    for (int32_t i = threadIdx.x; i < (kept + T) * ROWS; i += blockDim.x) {
        int32_t m = i / ROWS, row = first_row + i % ROWS;
        if (row >= d.V)
            continue;
        if (m < kept)
            ub[i] = ((const float *)(record_at(m) + lay.u))[(int64_t)h * d.V + row];
        else
            vb[i - kept * ROWS] = load((const Act *)(record_at(m) + lay.v) + (int64_t)h * d.V + row);
    }
    for (int32_t p = threadIdx.x; p < T; p += blockDim.x)
        bt[p] = ((const float *)(record_at(kept + p) + lay.beta))[h];
    /* The new tokens' normalized k and q, G_p = sum + error, and for KDA
     * k_p and q_p times e^{G_p} per channel. */
    for (int32_t p = warp; p < T; p += SSM_IDENTITY_WARPS) {
        const uint8_t *record = record_at(kept + p);
        const float *k = (const float *)(record + lay.k) + (int64_t)key_head * d.K;
        const float *q = a.q + ((int64_t)slot * a.max_tokens + p) * d.H * d.K +
                         (int64_t)key_head * d.K;
        for (int32_t c = lane; c < d.K; c += 32) {
            kp[p * d.K + c] = k[c];
            qp[p * d.K + c] = q[c];
        }
        for (int32_t c = lane; c < gates; c += 32) {
            float sum, error;
            gate_of(record, lay, d, h, c, sum, error);
            float g = sum + error;
            gp[p * gates + c] = g;
            if (d.kda) {
                float decay = ssm_expf(g);
                kd[p * d.K + c] = decay * k[c];
                qd[p * d.K + c] = decay * q[c];
            }
        }
    }
    __syncthreads();

    /* w^k_{ip}, w^q_{ip} for every record i the tokens see (i <= kept + p):
     * one pair per 8 lanes, every pair's loads in flight together. The loop
     * bound is the same for the whole block, so every lane shuffles. */
    const int32_t groups = blockDim.x / SSM_ROW_LANES, group = threadIdx.x / SSM_ROW_LANES;
    for (int32_t base = 0; base < M * T; base += groups) {
        int32_t pair = base + group;
        int32_t i = pair / T, p = pair % T;
        bool valid = pair < M * T && i <= kept + p;
        if (!valid)
            i = 0, p = 0; /* any real pair: the lane computes and drops it */
        const uint8_t *record = record_at(i), *token = record_at(kept + p);
        const float *ki = (const float *)(record + lay.k) + (int64_t)key_head * d.K;
        float dk, dq;
        identity_weight<E, KDA>(d, lay, record, token, ki, kp + p * d.K, qp + p * d.K, h,
                                t.sub, dk, dq);
        if (valid && t.sub == 0) {
            wk[i * T + p] = dk;
            wq[i * T + p] = dq;
        }
    }
    __syncthreads();

    /* Each lane's rows, token by token. */
    for (int32_t p = 0; p < T; p++) {
        float decay0 = KDA ? 1.0f : ssm_expf(gp[p * gates]);
        float sk[RPL], sq[RPL];
#pragma unroll
        for (int i = 0; i < RPL; i++) {
            float k4[4], q4[4], ak[2] = {0.0f, 0.0f}, aq[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < E; j++) {
                if ((j & 3) == 0) {
                    int32_t c = lane_channel(t.sub, j);
                    load4(kd + p * d.K + c, k4);
                    load4(qd + p * d.K + c, q4);
                }
                ak[j & 1] = fmaf(t.s[i][j], k4[j & 3], ak[j & 1]);
                aq[j & 1] = fmaf(t.s[i][j], q4[j & 3], aq[j & 1]);
            }
            sk[i] = group_sum(ak[0] + ak[1]);
            sq[i] = group_sum(aq[0] + aq[1]);
        }
#pragma unroll
        for (int i = 0; i < RPL; i++) {
            int32_t row = tile_row(t, i), local = row - first_row;
            if (row >= d.V)
                continue;
            float rk = decay0 * sk[i], oq = decay0 * sq[i];
            for (int32_t m = 0; m < kept + p; m++) {
                float u = ub[m * ROWS + local];
                rk = fmaf(wk[m * T + p], u, rk);
                oq = fmaf(wq[m * T + p], u, oq);
            }
            float u = bt[p] * (vb[p * ROWS + local] - rk);
            oq = fmaf(wq[(kept + p) * T + p], u, oq);
            if (t.sub == 0) {
                ub[(kept + p) * ROWS + local] = u;
                ((float *)(record_at(kept + p) + lay.u))[(int64_t)h * d.V + row] = u;
                int64_t out_token = (int64_t)r * T + p;
                store((Act *)a.out + (out_token * d.HV + h) * d.V + row, oq);
            }
        }
        __syncwarp();
    }
}

} /* namespace ssm */
#endif
