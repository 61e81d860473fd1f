/* The scan of chunk_tc.cuh with bf16 products (chunk_args.bf16_products),
 * included by chunk_tc.cuh after its record layout and before its launch.
 *
 * The same work as chunk_scan_kernel, on bf16 operands in their own
 * fragment layout:
 * - a chunk of at least SSM_TC_BF16_MIN_TOKENS tokens has a bf16 record
 *   (W, e^G q, e^{G_last - G} k and QK as bf16, tc_record16; Uv and the
 *   decay fp32), staged as bf16 rows and loaded with ldmatrix; U is stored
 *   as bf16 for QK U and U^T Kd;
 * - the state tile lives in the registers of the warps that update it
 *   (one unit of two 16 x 16 tiles a warp) and shared memory holds its bf16
 *   pair (hi and lo), written once a chunk: W S^T and (e^G q) S^T are two
 *   m16n8k16 each (a state rounded to bf16 alone put single-token KDA
 *   prompts past 5e-3 from fp64, as an output is mostly (e^G q) S^T);
 * - a shorter chunk (a prompt's last few tokens, whose outputs are a
 *   handful of dot products each) keeps an fp32 record and 3xTF32
 *   products, its W and e^G q split in two bf16 against the pair.
 * Every value reaches the tensor cores rounded to bf16 as it did when
 * the record was fp32 and the operands were rounded at use, so the record's
 * format changes no product's operands.
 *
 * Two schedules of the same sums (BUFFERS), so the same bits:
 * - 1: one record's room; a chunk's record streams in two groups, each
 *   behind half of the chunk before (three barriers a chunk);
 * - 2: two records' room (chunk_scan2_shared_bytes); the whole record of
 *   chunk j + 1 streams while chunk j computes (two barriers a chunk). A
 *   short chunk, a row's last, is staged in both records' room once the
 *   chunk before is done. */
#ifndef SSM_KERNELS_CUDA_CHUNK_SCAN_BF16_CUH
#define SSM_KERNELS_CUDA_CHUNK_SCAN_BF16_CUH

namespace ssm {

/* Bytes of shared memory of the two-record scan: the state's bf16 pair, U,
 * two (Uv, decay) pairs (a chunk's outputs go through its Uv's place once
 * U is formed), and two bf16 records' room, which also holds one fp32
 * record. */
__host__ __device__ inline size_t chunk_scan2_shared_bytes(int32_t K, int32_t R)
{
    size_t C = SSM_CHUNK_TOKENS, LK16 = K + 8, LC16 = C + 8, LR = tc_pad_rows(R);
    size_t pair = 2 * (size_t)R * LK16 * 2, values = C * LR * 4, decay = align16(K) * 4;
    size_t bf16_record = (3 * C * LK16 + C * LC16) * 2,
           f32_record = (2 * C * tc_pad(K) + C * tc_pad_rows(K) + C * tc_pad(C)) * 4;
    size_t records = 2 * bf16_record > f32_record ? 2 * bf16_record : f32_record;
    return pair + values + 2 * (values + decay) + records;
}

namespace tc {

/* Where a staged chunk lies in shared memory: its bf16 rows (a chunk of
 * at least SSM_TC_BF16_MIN_TOKENS tokens) or fp32 rows (a shorter one),
 * and its Uv and decay, fp32 either way. */
struct scan_chunk {
    uint16_t *W16, *Qg16, *Kd16, *QK16;
    float *W, *Qg, *Kd, *QK, *Uv, *decay;
};

/* Stages part 0 (W, Qg, the block's Uv) or 1 (Kd, QK, the decay) of the
 * record at `rec`, of a chunk of `c` tokens, into x; 16 bytes a copy. */
template <int K, int R, int THREADS>
__device__ __forceinline__ void stage_scan_part(const float *rec, int32_t c, int32_t part,
                                                const scan_chunk &x, int32_t V, int32_t e0,
                                                int32_t live_rows)
{
    constexpr int32_t C = SSM_CHUNK_TOKENS, LK16 = K + 8, LC16 = C + 8;
    const tc_record L = tc_record_layout(K, V);
    const tc_record16 L16 = tc_record16_layout(K);
    const uint16_t *rec16 = (const uint16_t *)rec;
    const int32_t tid = threadIdx.x;
    if (c >= SSM_TC_BF16_MIN_TOKENS) {
        uint16_t *first = part == 0 ? x.W16 : x.Kd16;
        const uint16_t *from = rec16 + (part == 0 ? L16.W : L16.Kd);
#pragma unroll
        for (int32_t e = tid; e < C * K / 8; e += THREADS) {
            int32_t t = e / (K / 8), k = 8 * (e % (K / 8));
            copy_chunk_async((float *)(first + t * LK16 + k), (const float *)(from + t * K + k),
                             true);
            if (part == 0)
                copy_chunk_async((float *)(x.Qg16 + t * LK16 + k),
                                 (const float *)(rec16 + L16.Qg + t * K + k), true);
        }
        if (part == 1)
            for (int32_t e = tid; e < C * C / 8; e += THREADS) {
                int32_t t = e / (C / 8), k = 8 * (e % (C / 8));
                copy_chunk_async((float *)(x.QK16 + t * LC16 + k),
                                 (const float *)(rec16 + L16.QK + t * C + k), true);
            }
    } else {
        stage_record_f32<K, THREADS>(rec, L, part, x.W, x.Qg, x.Kd, x.QK);
    }
    stage_values_decay<K, R, THREADS>(rec, L, part, x.Uv, x.decay, V, e0, live_rows);
}

/* The scan's first pass for warp (I, J): U = Uv - W S^T into U (bf16 rows
 * of stride LR16 for a bf16 chunk, else fp32 of stride LR), and po =
 * (e^G q) S^T, one pass over the state's pair: W and e^G q against lo,
 * then hi (small terms first). */
template <int K, int R>
__device__ __forceinline__ void scan_state_terms(const scan_chunk &x, bool bf16,
                                                 const uint16_t *S_hi, const uint16_t *S_lo,
                                                 int32_t I, int32_t J, float *U, tile &po)
{
    constexpr int32_t B = SSM_TC_SUB, LK16 = K + 8, LR16 = R + 8;
    const int32_t LK = tc_pad(K), LR = tc_pad_rows(R);
    tile pu;
    zero(pu);
    zero(po);
    const uint16_t *sh = S_hi + J * B * LK16, *sl = S_lo + J * B * LK16;
    if (bf16) {
#pragma unroll 2
        for (int32_t d = 0; d < K; d += 16) {
            frag s_hi, s_lo, w, q;
            load_b_cols16(s_lo, sl + d, LK16);
            load_b_cols16(s_hi, sh + d, LK16);
            load_a_rows16(w, x.W16 + I * B * LK16 + d, LK16);
            load_a_rows16(q, x.Qg16 + I * B * LK16 + d, LK16);
            mma16(pu, w, s_lo);
            mma16(pu, w, s_hi);
            mma16(po, q, s_lo);
            mma16(po, q, s_hi);
        }
    } else {
        for (int32_t d = 0; d < K; d += 16) {
            frag s_hi, s_lo, w_hi, w_lo, q_hi, q_lo;
            float2 f[4];
            load_b_cols16(s_lo, sl + d, LK16);
            load_b_cols16(s_hi, sh + d, LK16);
            load_a_rows_f32(f, x.W + I * B * LK + d, LK);
            pack_a_split(w_hi, w_lo, f);
            load_a_rows_f32(f, x.Qg + I * B * LK + d, LK);
            pack_a_split(q_hi, q_lo, f);
            mma16(pu, w_lo, s_hi);
            mma16(pu, w_hi, s_lo);
            mma16(pu, w_hi, s_hi);
            mma16(po, q_lo, s_hi);
            mma16(po, q_hi, s_lo);
            mma16(po, q_hi, s_hi);
        }
    }
    tile u;
    load(u, x.Uv + I * B * LR + J * B, LR);
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            u.x[hh][i] -= pu.x[hh][i];
    if (bf16)
        store_bf16((uint16_t *)U + I * B * LR16 + J * B, LR16, u);
    else
        store(U + I * B * LR + J * B, LR, u);
}

/* The rest of warp (I, J)'s tile of the outputs: po += QK U, out through
 * the warp's own place in O (C x R, stride LR) to the row's tokens
 * (store_output_tile's arguments from r on). */
template <int R, class Act>
__device__ __forceinline__ void scan_outputs(const chunk_args &a, const scan_chunk &x, bool bf16,
                                             const float *U, tile &po, float *O, int32_t I,
                                             int32_t J, int32_t r, int32_t h, int32_t e0,
                                             int32_t t0, int32_t c, int32_t live_rows)
{
    constexpr int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB, LR16 = R + 8, LC16 = C + 8;
    const int32_t LR = tc_pad_rows(R), LC = tc_pad(C);
    if (bf16) {
        for (int32_t d = 0; d < (I + 1) * B; d += 16) {
            frag qk, u;
            load_a_rows16(qk, x.QK16 + I * B * LC16 + d, LC16);
            load_b_rows16(u, (const uint16_t *)U + d * LR16 + J * B, LR16);
            mma16(po, qk, u);
        }
    } else {
        product<A_ROWS, B_ROWS>(po, x.QK + I * B * LC, LC, U + J * B, LR, (I + 1) * B);
    }
    store(O + I * B * LR + J * B, LR, po);
    __syncwarp();
    store_output_tile<Act>(a, O, LR, I, J, r, h, e0, t0, c, live_rows);
}

/* S = e^{G_last} S + U^T (e^{G_last - G} k) on a warp's state unit (rows
 * v0 .. v0 + 31 of channels n16 * 16 .. + 15, st0 and st1), in its
 * registers, rounded to the state's dtype, then its pair (hi, lo rows of
 * stride K + 8) for the next chunk. */
template <int K, int R, class State>
__device__ __forceinline__ void scan_update_unit(const chunk_args &a, const scan_chunk &x,
                                                 bool bf16, const float *U, tile &st0,
                                                 tile &st1, int32_t v0, int32_t n16,
                                                 uint16_t *S_hi, uint16_t *S_lo)
{
    constexpr int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB, LK16 = K + 8, LR16 = R + 8;
    const int32_t LR = tc_pad_rows(R), LKr = tc_pad_rows(K);
    tile s0 = st0, s1 = st1;
#pragma unroll
    for (int hh = 0; hh < 2; hh++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float dk = x.decay[a.gk == 1 ? 0 : n16 * B + tile_col(hh, i)];
            s0.x[hh][i] *= dk;
            s1.x[hh][i] *= dk;
        }
    if (bf16) {
        const uint16_t *U16 = (const uint16_t *)U;
#pragma unroll 2
        for (int32_t d = 0; d < C; d += 16) {
            frag k, u0, u1;
            load_b_rows16(k, x.Kd16 + d * LK16 + n16 * B, LK16);
            load_a_cols16(u0, U16 + d * LR16 + v0, LR16);
            load_a_cols16(u1, U16 + d * LR16 + v0 + B, LR16);
            mma16(s0, u0, k);
            mma16(s1, u1, k);
        }
    } else {
        update_unit_tf32(s0, s1, U, LR, x.Kd, LKr, v0, n16);
    }
    round_unit<State>(s0, s1);
    st0 = s0;
    st1 = s1;
    store_pair(S_hi + v0 * LK16 + n16 * B, S_lo + v0 * LK16 + n16 * B, LK16, st0);
    store_pair(S_hi + (v0 + B) * LK16 + n16 * B, S_lo + (v0 + B) * LK16 + n16 * B, LK16, st1);
}

} /* namespace tc */

/* grid (V / R, HV, rows), 8 R threads; dynamic shared memory:
 * chunk_scan_shared_floats(K, R) floats (BUFFERS 1, as chunk_scan_kernel)
 * or chunk_scan2_shared_bytes(K, R) bytes (BUFFERS 2). */
template <int K, int R, int BUFFERS, class State, class Act>
__global__ void __launch_bounds__(8 * R, 1)
    chunk_scan_bf16_kernel(chunk_args a, const float *work, int32_t chunks)
{
    static_assert(BUFFERS == 1 || BUFFERS == 2, "one or two records' room");
    extern __shared__ float shared[];
    constexpr int32_t THREADS = 8 * R, WARPS = THREADS / 32;
    constexpr int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB;
    /* The units of the state update: two 16 x 16 tiles (32 rows) each,
       at most one a warp. */
    constexpr int32_t UNITS = (K / B) * (R / 32);
    static_assert(UNITS <= WARPS, "one state unit a warp");
    const int32_t V = a.V;
    const int32_t LK = tc_pad(K), LKr = tc_pad_rows(K), LR = tc_pad_rows(R);
    constexpr int32_t LK16 = K + 8, LC16 = C + 8;
    const int32_t r = blockIdx.z, h = blockIdx.y, e0 = blockIdx.x * R;
    const int32_t tid = threadIdx.x, warp = tid >> 5;
    int32_t in_row, n, row_chunks;
    if (!tc::scan_row_start<Act>(a, chunks, in_row, n, row_chunks))
        return;
    uint16_t *S_hi = (uint16_t *)shared, *S_lo = S_hi + R * LK16;
    /* BUFFERS 1: chunk_scan_kernel's regions (sized for fp32); a bf16
       chunk uses the start of W, Qg, Kd, U and QK as bf16 rows, S holds
       the pair. BUFFERS 2: the pair, U, two (Uv, decay) pairs, two bf16
       records (a short chunk's fp32 record across both). */
    float *const U = BUFFERS == 1 ? shared + R * LKr + 2 * C * LK + C * LKr + C * LR
                                  : (float *)(S_lo + R * LK16);
    float *const O = U + C * LR; /* BUFFERS 1 only: BUFFERS 2 writes each chunk's own Uv */
    /* the place of record b (chunk j's is j % BUFFERS) */
    auto room = [&](int32_t b) {
        tc::scan_chunk x;
        if (BUFFERS == 1) {
            x.W = shared + R * LKr;
            x.Qg = x.W + C * LK;
            x.Kd = x.Qg + C * LK;
            x.Uv = x.Kd + C * LKr;
            x.QK = O + C * LR;
            x.decay = x.QK + C * tc_pad(C);
            x.W16 = (uint16_t *)x.W;
            x.Qg16 = (uint16_t *)x.Qg;
            x.Kd16 = (uint16_t *)x.Kd;
            x.QK16 = (uint16_t *)x.QK;
        } else {
            float *values = U + C * LR;
            uint16_t *records = (uint16_t *)(values + 2 * (C * LR + align16(K)));
            x.Uv = values + b * (C * LR + align16(K));
            x.decay = x.Uv + C * LR;
            x.W16 = records + b * (3 * C * LK16 + C * LC16);
            x.Qg16 = x.W16 + C * LK16;
            x.Kd16 = x.Qg16 + C * LK16;
            x.QK16 = x.Kd16 + C * LK16;
            x.W = (float *)records;
            x.Qg = x.W + C * LK;
            x.Kd = x.Qg + C * LK;
            x.QK = x.Kd + C * LKr;
        }
        return x;
    };
    const int64_t snapshot = ((int64_t)in_row * a.layers + a.layer) * a.snapshots +
                             (a.current ? a.current[in_row] : 0);
    State *state = (State *)a.state + (snapshot * a.HV + h) * (int64_t)V * K;
    const int32_t live_rows = V - e0 < R ? V - e0 : R;
    auto tokens_of = [&](int32_t j) { return n - j * C < C ? n - j * C : C; };
    const int64_t record_floats = tc_record_layout(K, V).floats;
    auto record = [&](int32_t j) { return work + (((int64_t)r * chunks + j) * a.HV + h) * record_floats; };
    /* part 0, 1 or both (-1) of chunk j into room[j % BUFFERS], then one
       commit (possibly empty) */
    auto stage = [&](int32_t j, int32_t part) {
        if (j < row_chunks)
            for (int32_t p = 0; p < 2; p++)
                if (part < 0 || part == p)
                    tc::stage_scan_part<K, R, THREADS>(record(j), tokens_of(j), p,
                                                       room(j % BUFFERS), V, e0, live_rows);
        copy_async_commit();
    };
    if (BUFFERS == 1) {
        stage(0, 0);
        stage(0, 1);
    } else {
        stage(0, -1);
    }

    /* Warp (I, J) owns tile (I, J) of U and o (C x R); warp w < UNITS
     * owns state unit w: rows v0 .. v0 + 31 (tiles st0 and st1) of the
     * 16 channels from n16 * 16, in registers across the row's chunks. */
    const int32_t I = warp / (R / B), J = warp % (R / B);
    const bool owner = warp < UNITS;
    const int32_t n16 = warp % (K / B), v0 = warp / (K / B) * 2 * B;
    tc::tile st0, st1;
    /* f(element of st0 or st1, its state row v (live or not), channel x) */
    auto each_unit_element = [&](auto f) {
#pragma unroll
        for (int hh = 0; hh < 2; hh++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int32_t v = v0 + tc::tile_row(i), x = n16 * B + tc::tile_col(hh, i);
                f(st0.x[hh][i], v, x);
                f(st1.x[hh][i], v + B, x);
            }
    };
    if (owner) {
        each_unit_element([&](float &s, int32_t v, int32_t x) {
            s = v < live_rows ? load(state + (int64_t)(e0 + v) * K + x) : 0.0f;
        });
        tc::store_pair(S_hi + v0 * LK16 + n16 * B, S_lo + v0 * LK16 + n16 * B, LK16, st0);
        tc::store_pair(S_hi + (v0 + B) * LK16 + n16 * B, S_lo + (v0 + B) * LK16 + n16 * B, LK16, st1);
    }
    for (int32_t j = 0; j < row_chunks; j++) {
        const int32_t t0 = j * C, c = tokens_of(j);
        const bool bf16 = c >= SSM_TC_BF16_MIN_TOKENS; /* this chunk's record and products */
        const tc::scan_chunk x = room(j % BUFFERS);
        if (BUFFERS == 1) {
            copy_async_wait<1>();
            __syncthreads(); /* W, Uv, Qg of chunk j; the state's pair after chunk j - 1 */
        } else {
            copy_async_wait<0>();
            /* chunk j's record (staged after the barrier of chunk j - 1, or
               before the loop); the state's pair and U after chunk j - 1;
               chunk j - 1's room is free */
            __syncthreads();
            if (!bf16 && j > 0) { /* a short last chunk: staged now, in both rooms */
                stage(j, -1);
                copy_async_wait<0>();
                __syncthreads();
            }
            if (j + 1 < row_chunks && tokens_of(j + 1) >= SSM_TC_BF16_MIN_TOKENS)
                stage(j + 1, -1);
        }
        tc::tile po;
        tc::scan_state_terms<K, R>(x, bf16, S_hi, S_lo, I, J, U, po);
        if (BUFFERS == 1)
            copy_async_wait<0>();
        __syncthreads(); /* U is whole (BUFFERS 1: QK, Kd and the decay of chunk j
                            too; W, Uv and Qg are free) */
        if (BUFFERS == 1)
            stage(j + 1, 0);
        tc::scan_outputs<R, Act>(a, x, bf16, U, po, BUFFERS == 1 ? O : x.Uv, I, J, r, h, e0,
                                 t0, c, live_rows);
        /* the pair for the next chunk: nothing reads it until the next barrier */
        if (owner)
            tc::scan_update_unit<K, R, State>(a, x, bf16, U, st0, st1, v0, n16, S_hi, S_lo);
        if (BUFFERS == 1) {
            __syncthreads(); /* QK, Kd and U are free */
            stage(j + 1, 1);
        }
    }
    copy_async_wait<0>();
    if (owner)
        each_unit_element([&](float &s, int32_t v, int32_t x) {
            if (v < live_rows)
                store(state + (int64_t)(e0 + v) * K + x, s);
        });
}

} /* namespace ssm */
#endif
