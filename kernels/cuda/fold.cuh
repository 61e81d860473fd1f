/* Replay's fold before an identity verify (SPEC 3.4): a (slot, layer) whose
 * ring would overflow before the step's tokens (ring_folds) runs its n
 * committed records through native's update and stores the result as its
 * checkpoint; the identity kernel (identity.cuh) then reads it, and the
 * commit starts the ring after the folded records. SPEC 3.5 asks for the
 * native state's bits, so every sum runs in tile_token()'s order.
 *
 * Layout. Four threads share a value row (SSM_FOLD_LANES), each holding a
 * quarter of its key channels in registers: quarter Q holds lanes Q and
 * Q + 4 of the recurrence's row layout (tile.cuh, lane_channel), so a
 * lane's two sums run over its own elements in their order and the
 * quarters add them as group_sum's butterfly does (lanes 4, 2, 1 apart:
 * within the thread, then quarters 2 and 1 apart). One block per (row,
 * value head, SSM_FOLD_ROWS value rows). The records are staged in shared
 * memory SSM_FOLD_GROUP at a time (k, the decay, beta, v of the block's
 * rows; every load of a group issued before the first store), so a token
 * reads no global memory. A block whose ring does not fold reads two words
 * and returns. */
#ifndef SSM_KERNELS_CUDA_FOLD_CUH
#define SSM_KERNELS_CUDA_FOLD_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

#define SSM_FOLD_LANES 4   /* threads sharing a value row */
#define SSM_FOLD_ROWS 32   /* value rows of a block, at most */
#define SSM_FOLD_THREADS (SSM_FOLD_LANES * SSM_FOLD_ROWS)
#define SSM_FOLD_CHUNKS 8  /* chunks of four key channels a thread holds, at most (K 128) */
#define SSM_FOLD_GROUP 16  /* records staged at a time */
#define SSM_FOLD_MAX_K 128 /* the CUDA kernels' largest key_dim */

/* Blocks per value head. */
__host__ __device__ inline int32_t fold_row_blocks(int32_t V)
{
    return (V + SSM_FOLD_ROWS - 1) / SSM_FOLD_ROWS;
}

/* Key channel of chunk n (four channels) of quarter Q of a row: chunk n is
 * chunk n >> 1 of the recurrence's lane sub = Q + 4 (n & 1), its element i
 * that lane's element j = (n >> 1) * 4 + i, at lane_channel(sub, j)
 * = 32 (n >> 1) + 4 (Q + 4 (n & 1)) + i = 16 n + 4 Q + i. */
__device__ __forceinline__ int32_t fold_channel(int32_t quarter, int32_t n)
{
    return 16 * n + 4 * quarter;
}

/* One record through this thread's quarter row, tile_token()'s update
 * (layout 0, the only one replay runs: docs/tuning.md) with native's bits:
 * each of the two lanes here sums its elements in order (two chains, even
 * and odd j) and adds the chains; the thread adds its lanes Q and Q + 4
 * (group_sum's first stage), then the quarters 2 apart and 1 apart (its
 * second and third). `decay` is the record's per-channel decay (KDA), else
 * NULL and `decay1` the one decay (GDN). The row's threads call it
 * together (shuffles). */
template <bool KDA>
__device__ __forceinline__ void fold_token(float (&s)[4 * SSM_FOLD_CHUNKS], int32_t chunks,
                                           int32_t quarter, const float *k, const float *decay,
                                           float decay1, float beta, float value)
{
    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
#pragma unroll
    for (int n = 0; n < SSM_FOLD_CHUNKS; n++) {
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
    for (int n = 0; n < SSM_FOLD_CHUNKS; n++) {
        if (n >= chunks)
            break;
        float k4[4];
        load4(k + fold_channel(quarter, n), k4);
#pragma unroll
        for (int i = 0; i < 4; i++)
            s[4 * n + i] = fmaf(u, k4[i], s[4 * n + i]);
    }
}

/* grid (rows * fold_row_blocks(V), HV), SSM_FOLD_THREADS threads; fp32
 * state (replay's identity outputs take no other). The checkpoint is
 * snapshot 0 of (slot, layer); a.tokens and a.max_tokens give the fold
 * rule; the cursors stay for the commit. */
template <bool KDA, class Act>
__global__ void __launch_bounds__(SSM_FOLD_THREADS) fold_kernel(tile_args a)
{
    __shared__ __align__(16) float gk[SSM_FOLD_GROUP][SSM_FOLD_MAX_K];
    __shared__ __align__(16) float gd[SSM_FOLD_GROUP][KDA ? SSM_FOLD_MAX_K : 1];
    __shared__ float gb[SSM_FOLD_GROUP];
    __shared__ float gv[SSM_FOLD_GROUP][SSM_FOLD_ROWS];
    const dims &d = a.d;
    const int32_t h = blockIdx.y, row_blocks = fold_row_blocks(d.V);
    const int32_t r = blockIdx.x / row_blocks;
    const int32_t row0 = (blockIdx.x % row_blocks) * SSM_FOLD_ROWS;
    const int32_t rows = d.V - row0 < SSM_FOLD_ROWS ? d.V - row0 : SSM_FOLD_ROWS;
    const int32_t quarter = threadIdx.x % SSM_FOLD_LANES, local = threadIdx.x / SSM_FOLD_LANES;
    const bool live = local < rows; /* this thread's row row0 + local is the block's */
    const int32_t slot = a.slots[r];
    if (!slot_is_live(slot, a.capacity, a.flags, false)) /* the identity kernel reports */
        return;
    griddep_wait(); /* the prologue before may write the cursors */
    const int64_t cell = (int64_t)slot * a.layers + a.layer;
    const int32_t used = a.ring_n[cell];
    if (!ring_folds(used, a.tokens, a.max_tokens, a.history))
        return;
    const int32_t start = a.ring_start[cell];
    const uint8_t *ring =
        a.ring + (int64_t)slot * a.ring_slot_stride + (int64_t)a.layer * a.ring_layer_stride;
    const record_layout &lay = a.ring_layout;
    const int32_t K = d.K, chunks = K / (4 * SSM_FOLD_LANES), key_head = h / d.group;

    float *row = state_head<float>(a, slot, a.layer, 0, h) + (int64_t)(row0 + (live ? local : 0)) * K;
    float s[4 * SSM_FOLD_CHUNKS];
#pragma unroll
    for (int n = 0; n < SSM_FOLD_CHUNKS; n++) {
        if (n >= chunks)
            break;
        if (live)
            load4(row + fold_channel(quarter, n), s + 4 * n);
        else
            s[4 * n] = s[4 * n + 1] = s[4 * n + 2] = s[4 * n + 3] = 0.0f;
    }
    for (int32_t g0 = 0; g0 < used; g0 += SSM_FOLD_GROUP) {
        const int32_t count = used - g0 < SSM_FOLD_GROUP ? used - g0 : SSM_FOLD_GROUP;
        __syncthreads(); /* the previous group is read */
        constexpr int KEYS = SSM_FOLD_GROUP * SSM_FOLD_MAX_K / 4 / SSM_FOLD_THREADS;
        constexpr int VALUES = SSM_FOLD_GROUP * SSM_FOLD_ROWS / SSM_FOLD_THREADS;
        const int32_t quads = K / 4;
        float4 kk[KEYS], dd[KDA ? KEYS : 1];
        float vv[VALUES];
#pragma unroll
        for (int j = 0; j < KEYS; j++) {
            int32_t i = (int32_t)threadIdx.x + j * SSM_FOLD_THREADS, m = i / quads;
            if (m >= count)
                continue;
            const uint8_t *record = ring + (int64_t)((start + g0 + m) & a.ring_mask) * lay.bytes;
            int64_t c = 4 * (int64_t)(i % quads);
            kk[j] = *(const float4 *)((const float *)(record + lay.k) + key_head * K + c);
            if (KDA)
                dd[KDA ? j : 0] = *(const float4 *)((const float *)(record + lay.decay) + h * K + c);
        }
#pragma unroll
        for (int j = 0; j < VALUES; j++) {
            int32_t i = (int32_t)threadIdx.x + j * SSM_FOLD_THREADS;
            int32_t m = i / SSM_FOLD_ROWS, v = i % SSM_FOLD_ROWS;
            if (m >= count || v >= rows)
                continue;
            const uint8_t *record = ring + (int64_t)((start + g0 + m) & a.ring_mask) * lay.bytes;
            vv[j] = load((const Act *)(record + lay.v) + (int64_t)h * d.V + row0 + v);
        }
        if ((int32_t)threadIdx.x < count) {
            int32_t m = threadIdx.x;
            const uint8_t *record = ring + (int64_t)((start + g0 + m) & a.ring_mask) * lay.bytes;
            gb[m] = ((const float *)(record + lay.beta))[h];
            if (!KDA)
                gd[m][0] = ((const float *)(record + lay.decay))[h];
        }
#pragma unroll
        for (int j = 0; j < KEYS; j++) {
            int32_t i = (int32_t)threadIdx.x + j * SSM_FOLD_THREADS, m = i / quads;
            if (m >= count)
                continue;
            *(float4 *)&gk[m][4 * (i % quads)] = kk[j];
            if (KDA)
                *(float4 *)&gd[m][4 * (i % quads)] = dd[KDA ? j : 0];
        }
#pragma unroll
        for (int j = 0; j < VALUES; j++) {
            int32_t i = (int32_t)threadIdx.x + j * SSM_FOLD_THREADS;
            int32_t m = i / SSM_FOLD_ROWS, v = i % SSM_FOLD_ROWS;
            if (m < count && v < rows)
                gv[m][v] = vv[j];
        }
        __syncthreads();
        for (int32_t m = 0; m < count; m++)
            fold_token<KDA>(s, chunks, quarter, gk[m], KDA ? gd[m] : (const float *)0,
                            KDA ? 1.0f : gd[m][0], gb[m], live ? gv[m][local] : 0.0f);
    }
    if (live)
#pragma unroll
        for (int n = 0; n < SSM_FOLD_CHUNKS; n++) {
            if (n >= chunks)
                break;
            store4(row + fold_channel(quarter, n), s + 4 * n);
        }
}

} /* namespace ssm */
#endif
