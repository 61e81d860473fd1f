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
 * format changes no product's operands. */
#ifndef SSM_KERNELS_CUDA_CHUNK_SCAN_BF16_CUH
#define SSM_KERNELS_CUDA_CHUNK_SCAN_BF16_CUH

namespace ssm {

/* grid (V / R, HV, rows), 8 R threads, chunk_scan_shared_floats(K, R)
 * floats of dynamic shared memory, as chunk_scan_kernel. */
template <int K, int R, class State, class Act>
__global__ void __launch_bounds__(8 * R, 1)
    chunk_scan_bf16_kernel(chunk_args a, const float *work, int32_t chunks)
{
    extern __shared__ float shared[];
    constexpr int32_t THREADS = 8 * R, WARPS = THREADS / 32;
    constexpr int32_t C = SSM_CHUNK_TOKENS, B = SSM_TC_SUB;
    /* The units of the state update: two 16 x 16 tiles (32 rows) each,
       at most one a warp. */
    constexpr int32_t UNITS = (K / B) * (R / 32);
    static_assert(UNITS <= WARPS, "one state unit a warp");
    const int32_t V = a.V;
    const int32_t LK = tc_pad(K), LKr = tc_pad_rows(K), LC = tc_pad(C), LR = tc_pad_rows(R);
    /* bf16 rows: 16-byte aligned, an odd multiple of 16 bytes apart */
    constexpr int32_t LK16 = K + 8, LR16 = R + 8, LC16 = C + 8;
    const int32_t r = blockIdx.z, h = blockIdx.y, e0 = blockIdx.x * R;
    const int32_t tid = threadIdx.x, warp = tid >> 5;
    int32_t in_row, n, row_chunks;
    if (!tc::scan_row_start<Act>(a, chunks, in_row, n, row_chunks))
        return;
    /* chunk_scan_kernel's regions (sized for fp32); a bf16 chunk uses the
       start of W, Qg, Kd, U and QK as bf16 rows, S always holds the pair */
    float *S = shared, *W = S + R * LKr, *Qg = W + C * LK, *Kd = Qg + C * LK;
    float *Uv = Kd + C * LKr, *U = Uv + C * LR, *O = U + C * LR, *QK = O + C * LR;
    float *decay = QK + C * LC;
    uint16_t *S_hi = (uint16_t *)S, *S_lo = S_hi + R * LK16;
    uint16_t *W16 = (uint16_t *)W, *Qg16 = (uint16_t *)Qg, *Kd16 = (uint16_t *)Kd;
    uint16_t *U16 = (uint16_t *)U, *QK16 = (uint16_t *)QK;
    const tc_record L = tc_record_layout(K, V);
    const tc_record16 L16 = tc_record16_layout(K);
    const int64_t snapshot = ((int64_t)in_row * a.layers + a.layer) * a.snapshots +
                             (a.current ? a.current[in_row] : 0);
    State *state = (State *)a.state + (snapshot * a.HV + h) * (int64_t)V * K;
    const int32_t live_rows = V - e0 < R ? V - e0 : R;
    auto tokens_of = [&](int32_t j) { return n - j * C < C ? n - j * C : C; };

    /* The record parts of chunk j in two groups, in the order they are
     * used: W, Uv and Qg (the products with the state), then QK, Kd and
     * the decay; 16 bytes a copy. */
    auto stage = [&](int32_t j, int32_t part) {
        if (j < row_chunks) {
            const float *rec = work + (((int64_t)r * chunks + j) * a.HV + h) * L.floats;
            const uint16_t *rec16 = (const uint16_t *)rec;
            if (tokens_of(j) >= SSM_TC_BF16_MIN_TOKENS) {
                uint16_t *first = part == 0 ? W16 : Kd16;
                const uint16_t *from = rec16 + (part == 0 ? L16.W : L16.Kd);
#pragma unroll
                for (int32_t e = tid; e < C * K / 8; e += THREADS) {
                    int32_t t = e / (K / 8), x = 8 * (e % (K / 8));
                    copy_chunk_async((float *)(first + t * LK16 + x),
                                     (const float *)(from + t * K + x), true);
                    if (part == 0)
                        copy_chunk_async((float *)(Qg16 + t * LK16 + x),
                                         (const float *)(rec16 + L16.Qg + t * K + x), true);
                }
                if (part == 1)
                    for (int32_t e = tid; e < C * C / 8; e += THREADS) {
                        int32_t t = e / (C / 8), x = 8 * (e % (C / 8));
                        copy_chunk_async((float *)(QK16 + t * LC16 + x),
                                         (const float *)(rec16 + L16.QK + t * C + x), true);
                    }
            } else {
                tc::stage_record_f32<K, THREADS>(rec, L, part, W, Qg, Kd, QK);
            }
            tc::stage_values_decay<K, R, THREADS>(rec, L, part, Uv, decay, V, e0, live_rows);
        }
        copy_async_commit(); /* possibly empty: two groups per chunk */
    };
    stage(0, 0);
    stage(0, 1);

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
        copy_async_wait<1>();
        __syncthreads(); /* W, Uv, Qg of chunk j; the state's pair after chunk j - 1 */
        /* U = Uv - W S^T and o = (e^G q) S^T, one pass over the pair: W and
           e^G q against lo, then hi (small terms first) */
        tc::tile pu, po;
        tc::zero(pu);
        tc::zero(po);
        {
            const uint16_t *sh = S_hi + J * B * LK16, *sl = S_lo + J * B * LK16;
            if (bf16) {
#pragma unroll 2
                for (int32_t d = 0; d < K; d += 16) {
                    tc::frag s_hi, s_lo, w, q;
                    tc::load_b_cols16(s_lo, sl + d, LK16);
                    tc::load_b_cols16(s_hi, sh + d, LK16);
                    tc::load_a_rows16(w, W16 + I * B * LK16 + d, LK16);
                    tc::load_a_rows16(q, Qg16 + I * B * LK16 + d, LK16);
                    tc::mma16(pu, w, s_lo);
                    tc::mma16(pu, w, s_hi);
                    tc::mma16(po, q, s_lo);
                    tc::mma16(po, q, s_hi);
                }
            } else {
                for (int32_t d = 0; d < K; d += 16) {
                    tc::frag s_hi, s_lo, w_hi, w_lo, q_hi, q_lo;
                    float2 x[4];
                    tc::load_b_cols16(s_lo, sl + d, LK16);
                    tc::load_b_cols16(s_hi, sh + d, LK16);
                    tc::load_a_rows_f32(x, W + I * B * LK + d, LK);
                    tc::pack_a_split(w_hi, w_lo, x);
                    tc::load_a_rows_f32(x, Qg + I * B * LK + d, LK);
                    tc::pack_a_split(q_hi, q_lo, x);
                    tc::mma16(pu, w_lo, s_hi);
                    tc::mma16(pu, w_hi, s_lo);
                    tc::mma16(pu, w_hi, s_hi);
                    tc::mma16(po, q_lo, s_hi);
                    tc::mma16(po, q_hi, s_lo);
                    tc::mma16(po, q_hi, s_hi);
                }
            }
        }
        {
            tc::tile u;
            tc::load(u, Uv + I * B * LR + J * B, LR);
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    u.x[hh][i] -= pu.x[hh][i];
            if (bf16)
                tc::store_bf16(U16 + I * B * LR16 + J * B, LR16, u);
            else
                tc::store(U + I * B * LR + J * B, LR, u);
        }
        copy_async_wait<0>();
        __syncthreads(); /* U is whole; QK, Kd, decay of chunk j; W, Uv, Qg are free */
        stage(j + 1, 0);
        /* o += QK U, this warp's tile out through its own place in O */
        if (bf16) {
            for (int32_t d = 0; d < (I + 1) * B; d += 16) {
                tc::frag qk, u;
                tc::load_a_rows16(qk, QK16 + I * B * LC16 + d, LC16);
                tc::load_b_rows16(u, U16 + d * LR16 + J * B, LR16);
                tc::mma16(po, qk, u);
            }
        } else {
            tc::product<tc::A_ROWS, tc::B_ROWS>(po, QK + I * B * LC, LC, U + J * B, LR, (I + 1) * B);
        }
        tc::store(O + I * B * LR + J * B, LR, po);
        __syncwarp();
        tc::store_output_tile<Act>(a, O, LR, I, J, r, h, e0, t0, c, live_rows);
        /* S = e^{G_last} S + U^T (e^{G_last - G} k) on this warp's unit, in
           its registers, then its pair for the next chunk (nothing reads the
           pair until the next barrier) */
        if (owner) {
            tc::tile s0 = st0, s1 = st1;
#pragma unroll
            for (int hh = 0; hh < 2; hh++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    float dk = decay[a.gk == 1 ? 0 : n16 * B + tc::tile_col(hh, i)];
                    s0.x[hh][i] *= dk;
                    s1.x[hh][i] *= dk;
                }
            if (bf16) {
#pragma unroll 2
                for (int32_t d = 0; d < C; d += 16) {
                    tc::frag k, u0, u1;
                    tc::load_b_rows16(k, Kd16 + d * LK16 + n16 * B, LK16);
                    tc::load_a_cols16(u0, U16 + d * LR16 + v0, LR16);
                    tc::load_a_cols16(u1, U16 + d * LR16 + v0 + B, LR16);
                    tc::mma16(s0, u0, k);
                    tc::mma16(s1, u1, k);
                }
            } else {
                tc::update_unit_tf32(s0, s1, U, LR, Kd, LKr, v0, n16);
            }
            tc::round_unit<State>(s0, s1);
            st0 = s0;
            st1 = s1;
            tc::store_pair(S_hi + v0 * LK16 + n16 * B, S_lo + v0 * LK16 + n16 * B, LK16, st0);
            tc::store_pair(S_hi + (v0 + B) * LK16 + n16 * B, S_lo + (v0 + B) * LK16 + n16 * B,
                           LK16, st1);
        }
        __syncthreads(); /* QK, Kd and U are free */
        stage(j + 1, 1);
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
