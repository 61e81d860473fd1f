/* Replay outputs through SPEC 2.4's identity on the GPU (fp32 checkpoint):
 * the checkpoint S0 is read once, never written (except by a fold), and each
 * new token p of a row gets
 *   r_p = e^{G_p} S0 k_p + sum_{i<p}  w^k_{ip} u_i,  u_p = beta_p (v_p - r_p),
 *   o_p = e^{G_p} S0 q_p + sum_{i<=p} w^q_{ip} u_i,
 * with w^k_{ip} = sum_c e^{G_p[c]-G_i[c]} k_i[c] k_p[c] (one decay for GDN,
 * one per key channel for KDA) and w^q likewise with q_p.
 *
 * One block per (row, value head, tile of SSM_IDENTITY_TILE value rows),
 * SSM_IDENTITY_WARPS warps, two rows per lane: the weights are per head,
 * so the block computes them once in shared memory (with the tile's rows of
 * the history's u), and then every row costs two dot products with S0 per
 * token (the row layout of tile.cuh: 8 lanes a row, three shuffles a sum)
 * and O(history) scalar terms. All of the block's S0 is loaded before the
 * shared-memory phase, so its latency hides behind it. u_p goes into
 * record p, where later steps read it.
 *
 * When the ring would overflow the block first folds: it applies the
 * committed raw records with tile_token (native's update, same row layout,
 * so the same bits as native) and stores the checkpoint; the new records'
 * gate sums then start from zero (prep.cuh knows the same rule). */
#ifndef SSM_KERNELS_CUDA_IDENTITY_CUH
#define SSM_KERNELS_CUDA_IDENTITY_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

#define SSM_IDENTITY_WARPS 8
#define SSM_IDENTITY_ROWS (SSM_IDENTITY_WARPS * SSM_WARP_ROWS) /* rows of one pass */
#define SSM_IDENTITY_TILE (2 * SSM_IDENTITY_ROWS) /* rows of one block: two passes */

/* Blocks per value head. */
__host__ __device__ inline int32_t identity_tiles(int32_t V)
{
    return (V + SSM_IDENTITY_TILE - 1) / SSM_IDENTITY_TILE;
}

/* Shared memory of one block for `records` records seen, T tokens and key
 * dim K. */
__host__ __device__ inline size_t identity_shared_bytes(int32_t records, int32_t tokens,
                                                        int32_t K, bool kda)
{
    size_t gate = kda ? (size_t)K : 1;
    size_t keys = kda ? 4 : 2; /* k_p, q_p, and for KDA both times e^{G_p} */
    return sizeof(float) * ((size_t)2 * records * tokens  /* w^k, w^q */
                            + keys * tokens * K           /* k_p, q_p (decayed) */
                            + (size_t)tokens * gate       /* G_p (sum + error) */
                            + (size_t)records * SSM_IDENTITY_TILE); /* u_i of the rows */
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

/* Row of this lane in pass `pass` (0 or 1) of tile `tile` of a head. */
__device__ __forceinline__ int32_t identity_row(int32_t tile, int32_t pass)
{
    int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    return tile * SSM_IDENTITY_TILE + pass * SSM_IDENTITY_ROWS + warp * SSM_WARP_ROWS +
           lane / SSM_ROW_LANES;
}

/* This lane's channels of S0 for both passes (rows past V read as zero). */
template <int E>
__device__ __forceinline__ void identity_load(const float *checkpoint, const dims &d,
                                              int32_t tile, float (&s)[2][E])
{
    int32_t sub = threadIdx.x % SSM_ROW_LANES;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        int32_t row = identity_row(tile, i);
        if (row < d.V)
            load_lane<E>(checkpoint + (int64_t)row * d.K, sub, s[i]);
        else
#pragma unroll
            for (int j = 0; j < E; j++)
                s[i][j] = 0.0f;
    }
}

/* grid (identity_tiles(V) * rows, HV), 32 * SSM_IDENTITY_WARPS threads,
 * identity_shared_bytes(history + T_max, T, K, kda) dynamic shared memory. */
template <int E, bool KDA, class Act>
__global__ void __launch_bounds__(32 * SSM_IDENTITY_WARPS, 3) identity_kernel(tile_args a)
{
    extern __shared__ float shared[];
    const dims &d = a.d;
    const int32_t T = a.tokens;
    const int32_t tiles = identity_tiles(d.V);
    const int32_t r = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    const int32_t layer = a.layer, h = blockIdx.y;
    const int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, tile == 0 && h == 0 && threadIdx.x == 0))
        return;
    const int32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int32_t sub = lane % SSM_ROW_LANES;
    const int32_t first_row = tile * SSM_IDENTITY_TILE;
    float *checkpoint = state_head<float>(a, slot, layer, 0, h);

    int64_t cell = (int64_t)slot * a.layers + layer;
    int32_t used = a.ring_n[cell], start = a.ring_start[cell];
    const uint8_t *ring =
        a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)layer * a.ring_layer_stride;
    const record_layout &lay = a.ring_layout;
    int32_t kept = used, first = start; /* the history the outputs see */
    if (ring_folds(used, T, a.max_tokens, a.history)) {
        for (int32_t pass = 0; pass < 2; pass++) {
            head_tile<E, 1, float> t;
            t.sub = sub;
            t.row0 = identity_row(tile, pass);
            tile_load(t, d, checkpoint);
            apply_records<E, 1, KDA, float, Act>(t, a, ring, lay, start, used, a.ring_mask, h);
            tile_store(t, d, checkpoint);
        }
        kept = 0;
        first = start + used;
    }
    /* The block's rows of S0 (this thread's own rows, so a fold above needs
     * no barrier) are in flight while the block stages. */
    float s[2][E];
    identity_load<E>(checkpoint, d, tile, s);

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
    float *ub = wq + M * T; /* u of record m, row first_row + i at ub[m * TILE + i] */
    const int32_t key_head = h / d.group;

    /* The history's u for the block's rows, one coalesced row per record. */
    for (int32_t i = threadIdx.x; i < kept * SSM_IDENTITY_TILE; i += blockDim.x) {
        int32_t m = i / SSM_IDENTITY_TILE, row = first_row + i % SSM_IDENTITY_TILE;
        if (row < d.V)
            ub[i] = ((const float *)(record_at(m) + lay.u))[(int64_t)h * d.V + row];
    }
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

    /* w^k_{ip}, w^q_{ip} for every record i the tokens see. */
    for (int32_t i = warp; i < M; i += SSM_IDENTITY_WARPS) {
        const uint8_t *record = record_at(i);
        const float *ki = (const float *)(record + lay.k) + (int64_t)key_head * d.K;
        for (int32_t p = (i > kept ? i - kept : 0); p < T; p++) {
            const uint8_t *token = record_at(kept + p);
            float dk = 0.0f, dq = 0.0f;
            if (d.kda) {
                for (int32_t c = lane; c < d.K; c += 32) {
                    float si, ei, sp, ep;
                    gate_of(record, lay, d, h, c, si, ei);
                    gate_of(token, lay, d, h, c, sp, ep);
                    float w = ssm_expf((sp - si) + (ep - ei)) * ki[c];
                    dk += w * kp[p * d.K + c];
                    dq += w * qp[p * d.K + c];
                }
                dk = warp_sum(dk);
                dq = warp_sum(dq);
            } else {
                for (int32_t c = lane; c < d.K; c += 32) {
                    dk += ki[c] * kp[p * d.K + c];
                    dq += ki[c] * qp[p * d.K + c];
                }
                float si, ei, sp, ep;
                gate_of(record, lay, d, h, 0, si, ei);
                gate_of(token, lay, d, h, 0, sp, ep);
                float decay = ssm_expf((sp - si) + (ep - ei));
                dk = decay * warp_sum(dk);
                dq = decay * warp_sum(dq);
            }
            if (lane == 0) {
                wk[i * T + p] = dk;
                wq[i * T + p] = dq;
            }
        }
    }
    __syncthreads();

    /* Each lane's two rows, token by token. */
    for (int32_t p = 0; p < T; p++) {
        const uint8_t *token = record_at(kept + p);
        float beta = ((const float *)(token + lay.beta))[h];
        float decay0 = KDA ? 1.0f : ssm_expf(gp[p * gates]);
        float sk[2], sq[2];
#pragma unroll
        for (int i = 0; i < 2; i++) {
            float k4[4], q4[4], ak[2] = {0.0f, 0.0f}, aq[2] = {0.0f, 0.0f};
#pragma unroll
            for (int j = 0; j < E; j++) {
                if ((j & 3) == 0) {
                    int32_t c = lane_channel(sub, j);
                    load4(kd + p * d.K + c, k4);
                    load4(qd + p * d.K + c, q4);
                }
                ak[j & 1] = fmaf(s[i][j], k4[j & 3], ak[j & 1]);
                aq[j & 1] = fmaf(s[i][j], q4[j & 3], aq[j & 1]);
            }
            sk[i] = group_sum(ak[0] + ak[1]);
            sq[i] = group_sum(aq[0] + aq[1]);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int32_t row = identity_row(tile, i), local = row - first_row;
            if (row >= d.V)
                continue;
            float rk = decay0 * sk[i], oq = decay0 * sq[i];
            for (int32_t m = 0; m < kept + p; m++) {
                float u = ub[m * SSM_IDENTITY_TILE + local];
                rk = fmaf(wk[m * T + p], u, rk);
                oq = fmaf(wq[m * T + p], u, oq);
            }
            float v = load((const Act *)(token + lay.v) + (int64_t)h * d.V + row);
            float u = beta * (v - rk);
            oq = fmaf(wq[(kept + p) * T + p], u, oq);
            if (sub == 0) {
                ub[(kept + p) * SSM_IDENTITY_TILE + local] = u;
                ((float *)(token + lay.u))[(int64_t)h * d.V + row] = u;
                int64_t out_token = (int64_t)r * T + p;
                store((Act *)a.out + (out_token * d.HV + h) * d.V + row, oq);
            }
        }
        __syncwarp();
    }
}

} /* namespace ssm */
#endif
