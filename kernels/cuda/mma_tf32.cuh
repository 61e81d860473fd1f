/* TF32 tensor-core products on shared-memory operands, for chunk_tc.cuh:
 * PTX's mma.m16n8k8 (fp32 accumulation) on fragments loaded with ldmatrix
 * or plain shared loads, and the 3xTF32 split that keeps the products
 * close to fp32; or, from the same fp32 fragments, one bf16 product
 * (mma.m16n8k16) per two k-steps, the operands rounded to bf16.
 *
 * A warp computes 16 x 16 output tiles (two m16n8 halves). Operands come in
 * four layouts, each with the row stride that keeps its loads free of bank
 * conflicts:
 *   A by rows    (A[m][k], k contiguous)   ldmatrix, stride = 4 mod 32 floats
 *   B by columns (B[k][n] stored [n][k])   ldmatrix, stride = 4 mod 32
 *   B by rows    (B[k][n] stored [k][n])   4 loads, stride = 8 mod 32
 *   A by columns (A[m][k] stored [k][m])   4 loads, stride = 8 mod 32
 * ldmatrix moves 16-bit pairs; an fp32 element is one pair, so its 8 x 8
 * matrices of pairs are 8 x 4 fp32 matrices and their thread mapping is
 * exactly mma's TF32 fragment mapping (PTX ISA, "mma.m16n8k8"):
 *   g = lane / 4, t = lane % 4;
 *   A 16 x 8:  a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4);
 *   B 8 x 8:   b0 (t, g), b1 (t + 4, g);
 *   C 16 x 8:  c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1).
 * Rows given to ldmatrix must be 16-byte aligned (strides multiples of 4). */
#ifndef SSM_KERNELS_CUDA_MMA_TF32_CUH
#define SSM_KERNELS_CUDA_MMA_TF32_CUH

#include <cstdint>

namespace ssm {
namespace tc {

/* An operand fragment of one k-step of 8: A (16 x 8) or the two 8 x 8
 * halves of B (n 0-7 and 8-15), as raw fp32 bits. */
struct frag {
    uint32_t x[4];
};

/* A 16 x 16 fp32 accumulator: half h holds columns 8h .. 8h + 7. */
struct tile {
    float x[2][4];
};

__device__ __forceinline__ void zero(tile &c)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            c.x[h][i] = 0.0f;
}

__device__ __forceinline__ uint32_t shared_address(const float *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldmatrix4(frag &f, const float *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                 : "r"(shared_address(row)));
}

__device__ __forceinline__ uint32_t load_shared(const float *p)
{
    uint32_t v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(shared_address(p)));
    return v;
}

/* A [16][8] by rows at p (stride ld). */
__device__ __forceinline__ void load_a_rows(frag &f, const float *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31;
    ldmatrix4(f, p + (lane & 15) * ld + (lane >> 4) * 4);
}

/* B [8][16] stored by columns: p points at n = 0, k = 0 of rows [n][k]. */
__device__ __forceinline__ void load_b_cols(frag &f, const float *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31;
    ldmatrix4(f, p + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 4);
}

/* B [8][16] stored by rows [k][n] at p. */
__device__ __forceinline__ void load_b_rows(frag &f, const float *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    f.x[0] = load_shared(p + t * ld + g);
    f.x[1] = load_shared(p + (t + 4) * ld + g);
    f.x[2] = load_shared(p + t * ld + g + 8);
    f.x[3] = load_shared(p + (t + 4) * ld + g + 8);
}

/* A [16][8] stored by columns [k][m] at p. */
__device__ __forceinline__ void load_a_cols(frag &f, const float *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    f.x[0] = load_shared(p + t * ld + g);
    f.x[1] = load_shared(p + t * ld + g + 8);
    f.x[2] = load_shared(p + (t + 4) * ld + g);
    f.x[3] = load_shared(p + (t + 4) * ld + g + 8);
}

/* x = hi + lo: hi x cut to TF32 (its 13 low mantissa bits cleared, one
 * integer operation), lo the rest, exact (x - hi loses nothing). The tensor
 * cores read only a TF32's bits of lo (its low 13 bits are ignored), so hi
 * + lo as they read them holds about 21 of fp32's 24 bits, and a product of
 * split operands is within about 2^-20 relative of the fp32 product.
 * Rounding hi to nearest instead (cvt.rna: add half a TF32 ulp first) gains
 * one bit for a third instruction; the split is most of the scan's
 * instructions, and the bit does not show in the distances of
 * docs/prefill.md. A non-finite x leaves NaN in lo (x - hi), so its products
 * are NaN, never finite. */
__device__ __forceinline__ void split(frag &hi, frag &lo, const frag &x)
{
#pragma unroll
    for (int i = 0; i < 4; i++) {
        hi.x[i] = x.x[i] & 0xffffe000u;
        lo.x[i] = __float_as_uint(__uint_as_float(x.x[i]) - __uint_as_float(hi.x[i]));
    }
}

/* c (16 x 8) += a b for one B half (h = 0 or 1 of a B fragment). */
__device__ __forceinline__ void mma(float (&c)[4], const frag &a, const frag &b, int h)
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x[0]), "r"(a.x[1]), "r"(a.x[2]), "r"(a.x[3]), "r"(b.x[2 * h]),
          "r"(b.x[2 * h + 1]));
}

/* c += a b for the split operands, small terms first: a_lo b_hi + a_hi
 * b_lo + a_hi b_hi ("3xTF32"; a_lo b_lo is below fp32's rounding). */
__device__ __forceinline__ void mma3(tile &c, const frag &a, const frag &a_lo, const frag &b,
                                     const frag &b_lo)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mma(c.x[h], a_lo, b, h);
        mma(c.x[h], a, b_lo, h);
        mma(c.x[h], a, b, h);
    }
}

/* Two fp32 values (raw bits) as a bf16 pair, each rounded to nearest
 * even: `lo` in the low half, the element of the lower k. */
__device__ __forceinline__ uint32_t pack_bf16(uint32_t lo, uint32_t hi)
{
    uint32_t d;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n"
        : "=r"(d)
        : "f"(__uint_as_float(hi)), "f"(__uint_as_float(lo)));
    return d;
}

/* The A operand of one bf16 product m16n8k16 from two TF32 k-steps' A
 * fragments (a0 of k-step d, a1 of d + 8), each value rounded to bf16. A
 * thread holds k = t, t + 4, 8 + t and 12 + t (the TF32 fragments'
 * mapping); packed in that order they are what mma's bf16 layout calls
 * k = 2t, 2t + 1, 2t + 8 and 2t + 9. A B operand packed the same way sums
 * the same 16 terms. */
__device__ __forceinline__ void pack_a_bf16(uint32_t (&a)[4], const frag &a0, const frag &a1)
{
    a[0] = pack_bf16(a0.x[0], a0.x[2]);
    a[1] = pack_bf16(a0.x[1], a0.x[3]);
    a[2] = pack_bf16(a1.x[0], a1.x[2]);
    a[3] = pack_bf16(a1.x[1], a1.x[3]);
}

/* x rounded to bf16 (nearest even), as pack_bf16 rounds each of its two. */
__device__ __forceinline__ uint16_t to_bf16(float x)
{
    uint16_t d;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(d) : "f"(x));
    return d;
}

/* The low bf16 of a pair as fp32 (exact). */
__device__ __forceinline__ float bf16_low(uint32_t pair) { return __uint_as_float(pair << 16); }
__device__ __forceinline__ float bf16_high(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

/* c (16 x 8, half h of a tile) += a b, one bf16 mma.m16n8k16 on packed
 * operands: b0 holds k = 2t, 2t + 1 and b1 k = 2t + 8, 2t + 9 of column g. */
__device__ __forceinline__ void mma16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* c += a b over two k-steps, a0 and b0 the fragments of k-step d, a1 and
 * b1 those of d + 8, as one bf16 product m16n8k16 (operands rounded to
 * bf16, fp32 accumulation; pack_a_bf16's order for both). */
__device__ __forceinline__ void mma_bf16(tile &c, const frag &a0, const frag &a1, const frag &b0,
                                         const frag &b1)
{
    uint32_t a[4];
    pack_a_bf16(a, a0, a1);
#pragma unroll
    for (int h = 0; h < 2; h++)
        mma16(c.x[h], a, pack_bf16(b0.x[2 * h], b0.x[2 * h + 1]),
              pack_bf16(b1.x[2 * h], b1.x[2 * h + 1]));
}

/* The layouts of the two operands of a product (see the top of the file). */
enum layout { A_ROWS, A_COLS, B_ROWS, B_COLS };

template <layout L> __device__ __forceinline__ void load(frag &f, const float *p, int32_t ld)
{
    if (L == A_ROWS)
        load_a_rows(f, p, ld);
    else if (L == A_COLS)
        load_a_cols(f, p, ld);
    else if (L == B_ROWS)
        load_b_rows(f, p, ld);
    else
        load_b_cols(f, p, ld);
}

/* Where k-step d of an operand starts: along rows for *_ROWS of A and
 * *_COLS of B (k contiguous), down the rows otherwise. */
template <layout L> __device__ __forceinline__ const float *step(const float *p, int32_t ld, int32_t d)
{
    return (L == A_ROWS || L == B_COLS) ? p + d : p + d * ld;
}

/* c += A[16 x depth] B[depth x 16] in 3xTF32, depth a multiple of 8; or
 * with BF16 in bf16 products, depth a multiple of 16. */
template <layout LA, layout LB, bool BF16 = false>
__device__ __forceinline__ void product(tile &c, const float *a, int32_t lda, const float *b,
                                        int32_t ldb, int32_t depth)
{
    if constexpr (BF16) {
#pragma unroll 2
        for (int32_t d = 0; d < depth; d += 16) {
            frag x0, x1, y0, y1;
            load<LA>(x0, step<LA>(a, lda, d), lda);
            load<LA>(x1, step<LA>(a, lda, d + 8), lda);
            load<LB>(y0, step<LB>(b, ldb, d), ldb);
            load<LB>(y1, step<LB>(b, ldb, d + 8), ldb);
            mma_bf16(c, x0, x1, y0, y1);
        }
    } else {
#pragma unroll 4
        for (int32_t d = 0; d < depth; d += 8) {
            frag x, y, x_hi, x_lo, y_hi, y_lo;
            load<LA>(x, step<LA>(a, lda, d), lda);
            load<LB>(y, step<LB>(b, ldb, d), ldb);
            split(x_hi, x_lo, x);
            split(y_hi, y_lo, y);
            mma3(c, x_hi, x_lo, y_hi, y_lo);
        }
    }
}

/* product's two forms chosen at run time (bf16: a value the whole warp
 * shares). */
template <layout LA, layout LB>
__device__ __forceinline__ void product_as(bool bf16, tile &c, const float *a, int32_t lda,
                                           const float *b, int32_t ldb, int32_t depth)
{
    if (bf16)
        product<LA, LB, true>(c, a, lda, b, ldb, depth);
    else
        product<LA, LB, false>(c, a, lda, b, ldb, depth);
}

/* Element i of half h of a tile: its row and column within the tile. */
__device__ __forceinline__ int32_t tile_row(int i) { return ((threadIdx.x & 31) >> 2) + (i >> 1) * 8; }
__device__ __forceinline__ int32_t tile_col(int h, int i)
{
    return h * 8 + (threadIdx.x & 3) * 2 + (i & 1);
}

/* Stores a tile row-major at p (stride ld), to shared or global memory. */
__device__ __forceinline__ void store(float *p, int32_t ld, const tile &c)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i += 2)
            *(float2 *)(p + tile_row(i) * ld + tile_col(h, i)) = make_float2(c.x[h][i], c.x[h][i + 1]);
}

/* Stores the transpose of a tile (element (r, c) at p[c * ld + r]). */
__device__ __forceinline__ void store_transposed(float *p, int32_t ld, const tile &c)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            p[tile_col(h, i) * ld + tile_row(i)] = c.x[h][i];
}

/* Loads a tile stored row-major at p. */
__device__ __forceinline__ void load(tile &c, const float *p, int32_t ld)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i += 2) {
            float2 v = *(const float2 *)(p + tile_row(i) * ld + tile_col(h, i));
            c.x[h][i] = v.x;
            c.x[h][i + 1] = v.y;
        }
}

/* bf16 operands stored as bf16 (16-bit elements) in shared memory, loaded
 * with ldmatrix, whose 8 x 8 matrices of 16-bit elements are the bf16
 * mma's own fragments (natural k order; rows 16-byte aligned, and a row
 * stride of an odd multiple of 16 bytes keeps ldmatrix's eight rows on
 * distinct banks). A frag's x[0..3] are then mma16's a[0..3] for an A operand, and
 * x[2h], x[2h + 1] half h's b0 and b1 for a B operand. */
__device__ __forceinline__ void ldmatrix4_trans(frag &f, const uint16_t *row)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(f.x[0]), "=r"(f.x[1]), "=r"(f.x[2]), "=r"(f.x[3])
                 : "r"((uint32_t)__cvta_generic_to_shared(row)));
}

__device__ __forceinline__ void ldmatrix4(frag &f, const uint16_t *row)
{
    ldmatrix4(f, (const float *)row);
}

/* A [16][16] by rows (A[m][k] at p[m * ld + k]). */
__device__ __forceinline__ void load_a_rows16(frag &f, const uint16_t *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31;
    ldmatrix4(f, p + (lane & 15) * ld + (lane >> 4) * 8);
}

/* A [16][16] by columns (A[m][k] at p[k * ld + m]). */
__device__ __forceinline__ void load_a_cols16(frag &f, const uint16_t *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31;
    ldmatrix4_trans(f, p + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8);
}

/* B [16][16] by columns (B[k][n] at p[n * ld + k]). */
__device__ __forceinline__ void load_b_cols16(frag &f, const uint16_t *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31;
    ldmatrix4(f, p + ((lane & 7) + ((lane >> 4) << 3)) * ld + ((lane >> 3) & 1) * 8);
}

/* B [16][16] by rows (B[k][n] at p[k * ld + n]). */
__device__ __forceinline__ void load_b_rows16(frag &f, const uint16_t *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31;
    ldmatrix4_trans(f, p + (lane & 15) * ld + (lane >> 4) * 8);
}

/* c += a b on both halves of a tile: a a 16 x 16 A fragment, b a 16 x 16 B
 * fragment, one mma.m16n8k16 a half. */
__device__ __forceinline__ void mma16(tile &c, const frag &a, const frag &b)
{
    const uint32_t r[4] = {a.x[0], a.x[1], a.x[2], a.x[3]};
#pragma unroll
    for (int h = 0; h < 2; h++)
        mma16(c.x[h], r, b.x[2 * h], b.x[2 * h + 1]);
}

/* The A fragment of a [16][16] fp32 operand by rows (A[m][k] at p[m * ld +
 * k], ld even), rounded to bf16, in natural k order: two fp32 a register. */
__device__ __forceinline__ void load_a_rows_f32(float2 (&x)[4], const float *p, int32_t ld)
{
    const int32_t lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 4; i++)
        x[i] = *(const float2 *)(p + (g + (i & 1) * 8) * ld + 2 * t + (i >> 1) * 8);
}

/* Those values as bf16, and split in two: hi rounded to nearest, lo the
 * rest rounded (hi + lo within about 2^-16 relative of each value). */
__device__ __forceinline__ void pack_a(frag &a, const float2 (&x)[4])
{
#pragma unroll
    for (int i = 0; i < 4; i++)
        a.x[i] = pack_bf16(__float_as_uint(x[i].x), __float_as_uint(x[i].y));
}

__device__ __forceinline__ void pack_a_split(frag &hi, frag &lo, const float2 (&x)[4])
{
    pack_a(hi, x);
#pragma unroll
    for (int i = 0; i < 4; i++)
        lo.x[i] = pack_bf16(__float_as_uint(x[i].x - bf16_low(hi.x[i])),
                            __float_as_uint(x[i].y - bf16_high(hi.x[i])));
}

/* Stores a tile row-major at p (stride ld elements, even) as bf16, each
 * value rounded to nearest: to shared or global memory. */
__device__ __forceinline__ void store_bf16(uint16_t *p, int32_t ld, const tile &c)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i += 2)
            *(uint32_t *)(p + tile_row(i) * ld + tile_col(h, i)) =
                pack_bf16(__float_as_uint(c.x[h][i]), __float_as_uint(c.x[h][i + 1]));
}

/* A tile as a bf16 pair (hi rounded to nearest, lo the rest rounded), row-
 * major in two arrays of stride ld: the state's operand in the scan. A
 * finite value past bf16's largest (|x| > 3.39e38) takes an infinite hi
 * and leaves NaN in the products, as a non-finite one does. */
__device__ __forceinline__ void store_pair(uint16_t *hi, uint16_t *lo, int32_t ld, const tile &c)
{
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 4; i += 2) {
            const int32_t at = tile_row(i) * ld + tile_col(h, i);
            const uint32_t top = pack_bf16(__float_as_uint(c.x[h][i]), __float_as_uint(c.x[h][i + 1]));
            *(uint32_t *)(hi + at) = top;
            *(uint32_t *)(lo + at) = pack_bf16(__float_as_uint(c.x[h][i] - bf16_low(top)),
                                               __float_as_uint(c.x[h][i + 1] - bf16_high(top)));
        }
}

} /* namespace tc */
} /* namespace ssm */
#endif
