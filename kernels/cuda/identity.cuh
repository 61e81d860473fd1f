/* Replay outputs through SPEC 2.4's identity on the GPU (fp32 checkpoint):
 * the checkpoint S0 is read once, never written (except by a fold), and each
 * new token p of a row gets
 *   r_p = e^{G_p} S0 k_p + sum_{i<p}  w^k_{ip} u_i,  u_p = beta_p (v_p - r_p),
 *   o_p = e^{G_p} S0 q_p + sum_{i<=p} w^q_{ip} u_i,
 * with w^k_{ip} = sum_c e^{G_p[c]-G_i[c]} k_i[c] k_p[c] (one decay for GDN,
 * one per key channel for KDA) and w^q likewise with q_p. The weights are
 * per key head: the block computes them once into shared memory, then each
 * warp runs its rows. u_p goes into record p, where later steps read it.
 *
 * When the ring would overflow the block first folds: it applies the
 * committed raw records with tile_token (native's update) and stores the
 * checkpoint, exactly as tile_kernel's HISTORY_STEP does; the new records'
 * gate sums then start from zero (prep.cuh knows the same rule). */
#ifndef SSM_KERNELS_CUDA_IDENTITY_CUH
#define SSM_KERNELS_CUDA_IDENTITY_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

/* Shared memory of one block for m records and T tokens of key dim K. */
__host__ __device__ inline size_t identity_shared_bytes(int32_t records, int32_t tokens,
                                                        int32_t K, bool kda)
{
    size_t gate = kda ? (size_t)K : 1;
    return sizeof(float) * ((size_t)2 * records * tokens      /* w^k, w^q */
                            + (size_t)2 * tokens * K          /* k_p, q_p */
                            + (size_t)tokens * gate           /* G_p (sum + error) */
                            + (size_t)records * SSM_TILE_ROWS); /* u_i of the tile rows */
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

/* grid (tiles_per_head(V) * rows, HV), 32 * SSM_TILE_WARPS threads,
 * identity_shared_bytes(history + T_max, T_max, K, kda) dynamic shared memory. */
template <int KPL, class Act>
__global__ void __launch_bounds__(32 * SSM_TILE_WARPS) identity_kernel(tile_args a)
{
    extern __shared__ float shared[];
    const dims &d = a.d;
    const int32_t T = a.tokens;
    int32_t tiles = tiles_per_head(d.V);
    int32_t r = blockIdx.x / tiles, tile = blockIdx.x % tiles, layer = a.layer, h = blockIdx.y;
    int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, tile == 0 && h == 0 && threadIdx.x == 0))
        return;
    const int32_t warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    head_tile<KPL, float> t;
    t.lane = lane;
    t.row0 = tile * SSM_TILE_ROWS + warp * SSM_ROWS_PER_WARP;
    float *checkpoint = state_head<float>(a, slot, layer, 0, h);
    tile_load(t, d, checkpoint);

    int64_t cell = (int64_t)slot * a.layers + layer;
    int32_t used = a.ring_n[cell], start = a.ring_start[cell];
    const uint8_t *ring =
        a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)layer * a.ring_layer_stride;
    const record_layout &lay = a.ring_layout;
    int32_t kept = used, first = start; /* the history the outputs see */
    if (ring_folds(used, T, a.max_tokens, a.history)) {
        apply_records<KPL, float, Act>(t, a, ring, lay, start, used, a.ring_mask, h);
        tile_store(t, d, checkpoint);
        kept = 0;
        first = start + used;
    }
    const int32_t M = kept + T;
    auto record_at = [&](int32_t i) {
        return ring + (int64_t)((first + i) & a.ring_mask) * lay.bytes;
    };
    const int32_t gates = d.kda ? d.K : 1;
    float *wk = shared, *wq = wk + M * T;
    float *kp = wq + M * T, *qp = kp + T * d.K;
    float *gp = qp + T * d.K, *up = gp + T * gates; /* up: u_i, row r at [i * TILE_ROWS + r] */
    const int32_t key_head = h / d.group;

    /* The history's u for this tile's rows, one coalesced row of 32 per record. */
    for (int32_t i = warp; i < kept; i += SSM_TILE_WARPS) {
        int32_t row = tile * SSM_TILE_ROWS + lane;
        if (lane < SSM_TILE_ROWS && row < d.V)
            up[i * SSM_TILE_ROWS + lane] =
                ((const float *)(record_at(i) + lay.u))[(int64_t)h * d.V + row];
    }

    /* The new tokens' normalized k and q, and G_p = sum + error. */
    for (int32_t p = warp; p < T; p += SSM_TILE_WARPS) {
        const uint8_t *record = record_at(kept + p);
        float x[KPL];
        load_row<KPL>((const float *)(record + lay.k) + (int64_t)key_head * d.K + lane * KPL, x);
        for (int j = 0; j < KPL; j++)
            kp[p * d.K + lane * KPL + j] = x[j];
        const float *q = a.q + ((int64_t)slot * a.max_tokens + p) * d.H * d.K;
        load_row<KPL>(q + (int64_t)key_head * d.K + lane * KPL, x);
        for (int j = 0; j < KPL; j++)
            qp[p * d.K + lane * KPL + j] = x[j];
        for (int32_t c = lane; c < gates; c += 32) {
            float sum, error;
            gate_of(record, lay, d, h, c, sum, error);
            gp[p * gates + c] = sum + error;
        }
    }
    __syncthreads();

    /* w^k_{ip}, w^q_{ip} for every record i the tokens see. */
    for (int32_t i = warp; i < M; i += SSM_TILE_WARPS) {
        const uint8_t *record = record_at(i);
        float ki[KPL];
        load_row<KPL>((const float *)(record + lay.k) + (int64_t)key_head * d.K + lane * KPL, ki);
        for (int32_t p = (i > kept ? i - kept : 0); p < T; p++) {
            const uint8_t *token = record_at(kept + p);
            float dk = 0.0f, dq = 0.0f;
            if (d.kda) {
                for (int j = 0; j < KPL; j++) {
                    int32_t c = lane * KPL + j;
                    float si, ei, sp, ep;
                    gate_of(record, lay, d, h, c, si, ei);
                    gate_of(token, lay, d, h, c, sp, ep);
                    float w = ssm_expf((sp - si) + (ep - ei)) * ki[j];
                    dk += w * kp[p * d.K + c];
                    dq += w * qp[p * d.K + c];
                }
                dk = warp_sum(dk);
                dq = warp_sum(dq);
            } else {
                for (int j = 0; j < KPL; j++) {
                    dk += ki[j] * kp[p * d.K + lane * KPL + j];
                    dq += ki[j] * qp[p * d.K + lane * KPL + j];
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

    /* Each warp's rows, token by token; u of record m, row i at u_tile[m * TILE_ROWS + i]. */
    float *u_tile = up + warp * SSM_ROWS_PER_WARP;
    for (int32_t p = 0; p < T; p++) {
        const uint8_t *token = record_at(kept + p);
        float sk[SSM_ROWS_PER_WARP], sq[SSM_ROWS_PER_WARP];
        for (int i = 0; i < SSM_ROWS_PER_WARP; i++) {
            sk[i] = 0.0f;
            sq[i] = 0.0f;
            for (int j = 0; j < KPL; j++) {
                int32_t c = lane * KPL + j;
                float decay = ssm_expf(gp[p * gates + (d.kda ? c : 0)]);
                float kd = d.kda ? decay * kp[p * d.K + c] : kp[p * d.K + c];
                float qd = d.kda ? decay * qp[p * d.K + c] : qp[p * d.K + c];
                sk[i] = fmaf(t.s[i][j], kd, sk[i]);
                sq[i] = fmaf(t.s[i][j], qd, sq[i]);
            }
        }
        float beta = ((const float *)(token + lay.beta))[h];
        float decay0 = d.kda ? 1.0f : ssm_expf(gp[p * gates]);
        float o[SSM_ROWS_PER_WARP];
        for (int i = 0; i < SSM_ROWS_PER_WARP; i++) {
            int32_t row = t.row0 + i;
            float rk = decay0 * warp_sum(sk[i]), oq = decay0 * warp_sum(sq[i]);
            if (row >= d.V) {
                o[i] = 0.0f;
                continue;
            }
            for (int32_t m = 0; m < kept + p; m++) {
                float u = u_tile[m * SSM_TILE_ROWS + i];
                rk = fmaf(wk[m * T + p], u, rk);
                oq = fmaf(wq[m * T + p], u, oq);
            }
            float v = load((const Act *)(token + lay.v) + (int64_t)h * d.V + row);
            float u = beta * (v - rk);
            oq = fmaf(wq[(kept + p) * T + p], u, oq);
            o[i] = oq;
            if (lane == 0)
                u_tile[(kept + p) * SSM_TILE_ROWS + i] = u;
            if (lane == i)
                ((float *)(token + lay.u))[(int64_t)h * d.V + row] = u;
        }
        __syncwarp();
        int64_t out_token = (int64_t)r * T + p;
        store_outputs((Act *)a.out + (out_token * d.HV + h) * d.V, d, t.row0, lane, o);
    }
}

} /* namespace ssm */
#endif
