/* Replay outputs through SPEC 2.4's identity on the GPU (fp32 checkpoint),
 * and replay's fold when the ring would overflow. Each new token p of a row
 * gets
 *   r_p = e^{G_p} S0 k_p + sum_{i<p}  w^k_{ip} u_i,  u_p = beta_p (v_p - r_p),
 *   o_p = e^{G_p} S0 q_p + sum_{i<=p} w^q_{ip} u_i,
 * with w^k_{ip} = sum_c e^{G_p[c]-G_i[c]} k_i[c] k_p[c] (one decay for GDN,
 * one per key channel for KDA) and w^q likewise with q_p.
 *
 * One block per (row, value head, SSM_IDENTITY_ROWS value rows), four
 * threads a value row (SSM_IDENTITY_LANES), each holding a quarter of the
 * row's key channels in registers, in the recurrence's lanes (fold_channel:
 * quarter Q holds lanes Q and Q + 4 of tile.cuh's row layout). The block
 * asks for its rows of S0 first, then forms the new tokens' vectors and the
 * weights w^k, w^q (one (record, token) pair per 8 lanes) while they
 * arrive. A row whose ring would overflow (ring_folds) then runs its n
 * committed records through native's update on those registers
 * (fold_token: the lanes' sums added in group_sum's order, so native's
 * bits, SPEC 3.4's fold) and stores the new checkpoint; its outputs then
 * see no history. Each row's 2T products S0 k_p, S0 q_p (KDA: k_p, q_p
 * times e^{G_p} per channel) are a quarter's sum and two shuffles; then the
 * four threads of a row run the scalar terms above alike, and the first
 * writes u_p into record p (later steps read it) and the outputs.
 *
 * Every sum has one fixed order (a quarter's products over its channels in
 * order, then the quarters 2 and 1 apart; a weight's over its lanes'
 * channels and then the lanes; the history terms in record order), so the
 * results do not depend on the launch. After a fold the new records' gate
 * sums start from zero (prep.cuh knows the same rule). */
#ifndef SSM_KERNELS_CUDA_IDENTITY_CUH
#define SSM_KERNELS_CUDA_IDENTITY_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

#define SSM_IDENTITY_LANES 4   /* threads sharing a value row */
#define SSM_IDENTITY_ROWS 32   /* value rows of a block */
#define SSM_IDENTITY_THREADS (SSM_IDENTITY_ROWS * SSM_IDENTITY_LANES)
#define SSM_IDENTITY_CHUNKS 8  /* chunks of four key channels a thread holds, at most (K 128) */
#define SSM_IDENTITY_GROUP 16  /* records a folding block stages at a time */

/* Blocks per value head: SSM_IDENTITY_ROWS value rows each. */
__host__ __device__ inline int32_t identity_row_blocks(int32_t V)
{
    return (V + SSM_IDENTITY_ROWS - 1) / SSM_IDENTITY_ROWS;
}

/* Floats a folding block stages per record: k, the decay (KDA: per
 * channel), beta, and v of the block's rows. */
__host__ __device__ inline int32_t fold_record_floats(const dims &d)
{
    return d.K + (d.kda ? d.K : 1) + 1 + SSM_IDENTITY_ROWS;
}

/* Shared memory of one block for `records` records seen (history and
 * tokens) and T tokens. */
__host__ __device__ inline size_t identity_shared_bytes(int32_t records, int32_t tokens,
                                                        const dims &d)
{
    size_t K = (size_t)d.K, T = (size_t)tokens;
    size_t keys = d.kda ? 4 : 2; /* k_p, q_p, and for KDA both times e^{G_p} */
    return sizeof(float) * ((size_t)SSM_IDENTITY_GROUP * fold_record_floats(d) /* a fold's */
                            + keys * T * K                  /* token vectors */
                            + 2 * T                         /* G_p (GDN), beta_p */
                            + (size_t)2 * records * T);     /* w^k, w^q */
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

/* The ring of (slot, layer) in a verify: its `used` committed records from
 * `start`; whether the step folds them into the checkpoint first
 * (ring_folds); and the records its outputs see, `kept` from `first`. */
struct identity_ring {
    const uint8_t *ring;
    int32_t start, used;
    bool folded;
    int32_t kept, first;
};

__device__ __forceinline__ identity_ring identity_ring_of(const tile_args &a, int32_t slot)
{
    identity_ring g;
    int64_t cell = (int64_t)slot * a.layers + a.layer;
    int32_t used = a.ring_n[cell], start = a.ring_start[cell];
    bool folded = ring_folds(used, a.tokens, a.max_tokens, a.history);
    g.ring = a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)a.layer * a.ring_layer_stride;
    g.start = start;
    g.used = used;
    g.folded = folded;
    g.kept = folded ? 0 : used;
    g.first = folded ? start + used : start;
    return g;
}

__device__ __forceinline__ const uint8_t *identity_record(const tile_args &a,
                                                          const identity_ring &g, int32_t i)
{
    return g.ring + (int64_t)((g.first + i) & a.ring_mask) * a.ring_layout.bytes;
}

/* w^k_{ip} and w^q_{ip} of one (record i, token p) pair, shared by the
 * SSM_ROW_LANES lanes of a group: lane `sub` sums channels sub * 4 .. + 3,
 * then 32 on (tile.cuh's lane_channel), and group_sum adds the lanes' sums,
 * so the order is fixed. ki from the record, kp and qp the token's k and q.
 * Every lane of the warp must call it (it shuffles). */
template <bool KDA>
__device__ __forceinline__ void identity_weight(const dims &d, const record_layout &lay,
                                                const uint8_t *record, const uint8_t *token,
                                                const float *ki, const float *kp,
                                                const float *qp, int32_t h, int32_t sub,
                                                float &wk, float &wq)
{
    float ak = 0.0f, aq = 0.0f;
    for (int32_t c = sub * 4; c < d.K; c += 4 * SSM_ROW_LANES) {
        float k4[4], kp4[4], qp4[4];
        load4(ki + c, k4);
        load4(kp + c, kp4);
        load4(qp + c, qp4);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float w = k4[j];
            if (KDA) {
                float si, ei, sp, ep;
                gate_of(record, lay, d, h, c + j, si, ei);
                gate_of(token, lay, d, h, c + j, sp, ep);
                w *= ssm_expf((sp - si) + (ep - ei));
            }
            ak = fmaf(w, kp4[j], ak);
            aq = fmaf(w, qp4[j], aq);
        }
    }
    wk = group_sum(ak);
    wq = group_sum(aq);
    if (!KDA) {
        float si, ei, sp, ep;
        gate_of(record, lay, d, h, 0, si, ei);
        gate_of(token, lay, d, h, 0, sp, ep);
        float decay = ssm_expf((sp - si) + (ep - ei));
        wk *= decay;
        wq *= decay;
    }
}

/* ------------------------------------------------------------- a row in quarters */

/* Key channel of chunk n (four channels) of quarter `quarter` of a row.
 * The recurrence (tile.cuh) gives lane `sub` of a row the
 * channels lane_channel(sub, j); here quarter Q of the row holds the lanes
 * sub = Q + 4 s, s = 0, 1, and its chunk n is chunk n >> 1 of lane
 * s = n & 1: element i of chunk n is that lane's element
 * j = (n >> 1) * 4 + i, at channel 32 (n >> 1) + 4 (Q + 4 (n & 1)) + i
 * = 16 n + 4 Q + i. */
__device__ __forceinline__ int32_t fold_channel(int32_t quarter, int32_t n)
{
    return 16 * n + 4 * quarter;
}

/* One record through this thread's quarter row: tile_token()'s update with
 * native's bits. Each lane's two sums run over its elements in tile_token's
 * order (lane s of this quarter in acc[s]); then they are added as
 * group_sum's butterfly adds them, lanes 4, 2, 1 apart: sub Q + sub Q + 4
 * here, then the quarters 2 apart (Q ^ 2), then 1 apart (Q ^ 1). `decay` is
 * the record's per-channel decay (KDA) or NULL with one decay (GDN). */
template <bool KDA>
__device__ __forceinline__ void fold_token(float (&s)[4 * SSM_IDENTITY_CHUNKS], int32_t chunks,
                                           int32_t quarter, const float *k, const float *decay,
                                           float decay1, float beta, float value)
{
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < SSM_IDENTITY_CHUNKS; n++) {
        if (n >= chunks)
            break;
        float k4[4], d4[4];
        load4(k + fold_channel(quarter, n), k4);
        if (KDA)
            load4(decay + fold_channel(quarter, n), d4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s[4 * n + i] *= KDA ? d4[i] : decay1;
            acc[n & 1][i & 1] = fmaf(s[4 * n + i], k4[i], acc[n & 1][i & 1]);
        }
    }
    float sum = (acc[0][0] + acc[0][1]) + (acc[1][0] + acc[1][1]);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    float u = beta * (value - sum);
#pragma unroll
    for (int n = 0; n < SSM_IDENTITY_CHUNKS; n++) {
        if (n >= chunks)
            break;
        float k4[4];
        load4(k + fold_channel(quarter, n), k4);
#pragma unroll
        for (int i = 0; i < 4; i++)
            s[4 * n + i] = fmaf(u, k4[i], s[4 * n + i]);
    }
}

/* Runs this thread's quarter row s (value row row0 + `local` of head h;
 * `live`: the block has that row) through the ring's g.used committed
 * records with native's update (fold_token), the records staged
 * SSM_IDENTITY_GROUP at a time in `staged`. Every thread of the block calls
 * it. */
template <bool KDA, class Act>
__device__ void identity_fold(const tile_args &a, const identity_ring &g,
                              float (&s)[4 * SSM_IDENTITY_CHUNKS], int32_t row0, int32_t rows,
                              int32_t h, int32_t local, int32_t quarter, float *staged)
{
    const dims &d = a.d;
    const record_layout &lay = a.ring_layout;
    const int32_t K = d.K, chunks = K / (4 * SSM_IDENTITY_LANES), key_head = h / d.group;
    float *gk = staged, *gd = gk + SSM_IDENTITY_GROUP * K;
    float *gb = gd + SSM_IDENTITY_GROUP * (KDA ? K : 1), *gv = gb + SSM_IDENTITY_GROUP;
    for (int32_t g0 = 0; g0 < g.used; g0 += SSM_IDENTITY_GROUP) {
        const int32_t count = g.used - g0 < SSM_IDENTITY_GROUP ? g.used - g0 : SSM_IDENTITY_GROUP;
        __syncthreads(); /* the previous group's records are read */
        for (int32_t i = threadIdx.x; i < count * K; i += blockDim.x) {
            int32_t m = i / K, c = i % K;
            const uint8_t *record = g.ring + (int64_t)((g.start + g0 + m) & a.ring_mask) * lay.bytes;
            gk[i] = ((const float *)(record + lay.k))[(int64_t)key_head * K + c];
            if (KDA)
                gd[i] = ((const float *)(record + lay.decay))[(int64_t)h * K + c];
        }
        for (int32_t i = threadIdx.x; i < count * SSM_IDENTITY_ROWS; i += blockDim.x) {
            int32_t m = i / SSM_IDENTITY_ROWS, v = i % SSM_IDENTITY_ROWS;
            const uint8_t *record = g.ring + (int64_t)((g.start + g0 + m) & a.ring_mask) * lay.bytes;
            gv[i] = v < rows ? load((const Act *)(record + lay.v) + (int64_t)h * d.V + row0 + v)
                             : 0.0f;
            if (v == 0) {
                gb[m] = ((const float *)(record + lay.beta))[h];
                if (!KDA)
                    gd[m] = ((const float *)(record + lay.decay))[h];
            }
        }
        __syncthreads();
        for (int32_t m = 0; m < count; m++)
            fold_token<KDA>(s, chunks, quarter, gk + m * K, KDA ? gd + m * K : (const float *)0,
                            KDA ? 1.0f : gd[m], gb[m], gv[m * SSM_IDENTITY_ROWS + local]);
    }
}

/* grid (rows * identity_row_blocks(V), HV), SSM_IDENTITY_THREADS threads,
 * identity_shared_bytes(history + T_max, T, d) dynamic shared memory;
 * T = a.tokens <= MAXT. */
template <int MAXT, bool KDA, class Act>
__global__ void __launch_bounds__(SSM_IDENTITY_THREADS, 5) identity_kernel(tile_args a)
{
    extern __shared__ float4 shared_vectors[]; /* 16-byte aligned */
    float *shared = (float *)shared_vectors;
    const dims &d = a.d;
    const int32_t T = a.tokens, h = blockIdx.y, row_blocks = identity_row_blocks(d.V);
    const int32_t r = blockIdx.x / row_blocks;
    const int32_t row0 = (blockIdx.x % row_blocks) * SSM_IDENTITY_ROWS;
    const int32_t rows = d.V - row0 < SSM_IDENTITY_ROWS ? d.V - row0 : SSM_IDENTITY_ROWS;
    const int32_t quarter = threadIdx.x % SSM_IDENTITY_LANES;
    const int32_t local = threadIdx.x / SSM_IDENTITY_LANES, v = row0 + local;
    const bool live = local < rows; /* this thread's value row v is the block's */
    const int32_t chunks = d.K / (4 * SSM_IDENTITY_LANES);
    const int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, row0 == 0 && h == 0 && threadIdx.x == 0))
        return;
    /* The prologue before writes the records, q and the cursors. */
    griddep_wait();
    float *row = state_head<float>(a, slot, a.layer, 0, h) + (int64_t)(live ? v : 0) * d.K;
    float s[4 * SSM_IDENTITY_CHUNKS];
#pragma unroll
    for (int n = 0; n < SSM_IDENTITY_CHUNKS; n++) {
        if (n >= chunks)
            break;
        if (live)
            load4(row + fold_channel(quarter, n), s + 4 * n);
        else
            s[4 * n] = s[4 * n + 1] = s[4 * n + 2] = s[4 * n + 3] = 0.0f;
    }

    const identity_ring g = identity_ring_of(a, slot);
    const record_layout &lay = a.ring_layout;
    const int32_t kept = g.kept, M = kept + T, key_head = h / d.group;
    float *staged = shared; /* a fold's records */
    float *kp = staged + SSM_IDENTITY_GROUP * fold_record_floats(d), *qp = kp + T * d.K;
    float *kd = KDA ? qp + T * d.K : kp, *qd = KDA ? kd + T * d.K : qp;
    float *gp = qd + T * d.K, *bt = gp + T, *wk = bt + T, *wq = wk + M * T;
    /* The new tokens' normalized k and q (KDA: also times e^{G_p}), G_p and beta_p. */
    for (int32_t i = threadIdx.x; i < T * d.K; i += blockDim.x) {
        int32_t p = i / d.K, c = i % d.K;
        const uint8_t *record = identity_record(a, g, kept + p);
        float k = ((const float *)(record + lay.k))[(int64_t)key_head * d.K + c];
        float q = a.q[((int64_t)slot * a.max_tokens + p) * d.H * d.K + (int64_t)key_head * d.K + c];
        kp[i] = k;
        qp[i] = q;
        if (KDA) {
            float sum, error;
            gate_of(record, lay, d, h, c, sum, error);
            float decay = ssm_expf(sum + error);
            kd[i] = decay * k;
            qd[i] = decay * q;
        }
    }
    for (int32_t p = threadIdx.x; p < T; p += blockDim.x) {
        const uint8_t *record = identity_record(a, g, kept + p);
        float sum, error;
        gate_of(record, lay, d, h, 0, sum, error);
        gp[p] = sum + error;
        bt[p] = ((const float *)(record + lay.beta))[h];
    }
    __syncthreads();

    /* w^k_{ip}, w^q_{ip} for every record i the tokens see (i <= kept + p):
     * one pair per SSM_ROW_LANES lanes. The loop bound is the same for the
     * whole block, so every lane shuffles. */
    const int32_t groups = blockDim.x / SSM_ROW_LANES, group = threadIdx.x / SSM_ROW_LANES;
    const int32_t sub = threadIdx.x % SSM_ROW_LANES;
    for (int32_t base = 0; base < M * T; base += groups) {
        int32_t pair = base + group;
        int32_t i = pair / T, p = pair % T;
        bool valid = pair < M * T && i <= kept + p;
        if (!valid)
            i = 0, p = 0; /* any real pair: the lanes compute and drop it */
        const uint8_t *record = identity_record(a, g, i);
        const float *ki = (const float *)(record + lay.k) + (int64_t)key_head * d.K;
        float dk, dq;
        identity_weight<KDA>(d, lay, record, identity_record(a, g, kept + p), ki, kp + p * d.K,
                             qp + p * d.K, h, sub, dk, dq);
        if (valid && sub == 0) {
            wk[pair] = dk;
            wq[pair] = dq;
        }
    }

    if (g.folded) {
        identity_fold<KDA, Act>(a, g, s, row0, rows, h, local, quarter, staged);
        if (live)
#pragma unroll
            for (int n = 0; n < SSM_IDENTITY_CHUNKS; n++) {
                if (n >= chunks)
                    break;
                store4(row + fold_channel(quarter, n), s + 4 * n);
            }
    }
    __syncthreads(); /* the weights are in */

    /* This row's products with every token: a quarter's channels in order,
     * then the quarters 2 and 1 apart (every thread of the row gets them). */
    float sk[MAXT], sq[MAXT];
#pragma unroll
    for (int p = 0; p < MAXT; p++) {
        sk[p] = sq[p] = 0.0f;
        if (p >= T)
            continue;
#pragma unroll
        for (int n = 0; n < SSM_IDENTITY_CHUNKS; n++) {
            if (n >= chunks)
                break;
            float k4[4], q4[4];
            load4(kd + p * d.K + fold_channel(quarter, n), k4);
            load4(qd + p * d.K + fold_channel(quarter, n), q4);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                sk[p] = fmaf(s[4 * n + i], k4[i], sk[p]);
                sq[p] = fmaf(s[4 * n + i], q4[i], sq[p]);
            }
        }
        sk[p] += __shfl_xor_sync(0xffffffffu, sk[p], 2);
        sq[p] += __shfl_xor_sync(0xffffffffu, sq[p], 2);
        sk[p] += __shfl_xor_sync(0xffffffffu, sk[p], 1);
        sq[p] += __shfl_xor_sync(0xffffffffu, sq[p], 1);
    }
    if (!live)
        return;

    /* The row through the tokens: e^{G_p} S0 k_p, the history's terms in
     * record order, then the earlier new tokens'. */
    float un[MAXT];
#pragma unroll
    for (int p = 0; p < MAXT; p++) {
        float decay0 = KDA || p >= T ? 1.0f : ssm_expf(gp[p]);
        sk[p] *= decay0;
        sq[p] *= decay0;
    }
    for (int32_t m = 0; m < kept; m++) {
        float u = ((const float *)(identity_record(a, g, m) + lay.u))[(int64_t)h * d.V + v];
#pragma unroll
        for (int p = 0; p < MAXT; p++) {
            if (p >= T)
                break;
            sk[p] = fmaf(wk[m * T + p], u, sk[p]);
            sq[p] = fmaf(wq[m * T + p], u, sq[p]);
        }
    }
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
        float value = load((const Act *)(record + lay.v) + (int64_t)h * d.V + v);
        float u = bt[p] * (value - sk[p]);
        un[p] = u;
        if (quarter != 0)
            continue;
        ((float *)(record + lay.u))[(int64_t)h * d.V + v] = u;
        float o = fmaf(wq[(kept + p) * T + p], u, sq[p]);
        store((Act *)a.out + (((int64_t)r * T + p) * d.HV + h) * d.V + v, o);
    }
}

} /* namespace ssm */
#endif
