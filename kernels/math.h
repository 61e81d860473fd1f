/* Scalar math of the recurrence (docs/numerics.md), shared by the CPU
 * reference and every CUDA kernel so that both evaluate the same operations
 * in the same order. All fp32.
 *
 * Host and device agree bit for bit on everything here, because everything
 * is built from IEEE-rounded operations only (bf16 conversion, +, -, *, /,
 * sqrtf, floorf: nvcc rounds division and sqrtf correctly unless fast math is
 * asked for, and contraction into FMA is off on both sides: -ffp-contract=off,
 * --fmad=false). That includes the exponential and log1p: ssm_expf and
 * ssm_log1pf below replace the libraries' expf and log1pf, which differ by a
 * few ulps between glibc and CUDA. A one-ulp difference in SiLU is enough to
 * flip the bf16 rounding of a conv output, and from there every later state;
 * with one implementation, CPU and GPU get the same conv outputs and gates,
 * bit for bit, and differ in the order of their sums: the L2 norm's sum of
 * squares (the GPU's butterfly over a head's lanes), then the recurrence's
 * (docs/numerics.md). */
#ifndef SSM_KERNELS_MATH_H
#define SSM_KERNELS_MATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/hostdevice.h"

/* The bits of an fp32 value and back. The device pass uses the intrinsics;
 * the host pass (plain C, and nvcc's host side) uses memcpy, the one bit cast
 * that is defined behaviour in both C and C++. */
SSM_HD uint32_t ssm_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
#endif
}

SSM_HD float ssm_f32_from_bits(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
#endif
}

/* fp32 -> bf16 bits, round to nearest, ties to even. Overflow past the
 * largest finite bf16 carries into the exponent and gives Inf, as IEEE
 * rounding does. NaN keeps its sign and top payload bits and is made quiet,
 * so a NaN whose payload sits only in the low 16 bits cannot become Inf. */
SSM_HD uint16_t ssm_f32_to_bf16(float f)
{
    uint32_t u = ssm_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u);
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

/* bf16 bits -> fp32: exact (bf16 is the top half of an fp32). */
SSM_HD float ssm_bf16_to_f32(uint16_t h)
{
    return ssm_f32_from_bits((uint32_t)h << 16);
}

/* f rounded to the nearest bf16 and widened back. */
SSM_HD float ssm_bf16_round(float f)
{
    return ssm_bf16_to_f32(ssm_f32_to_bf16(f));
}

/* e^x to within about 1 ulp, from IEEE operations only: x = n ln2 + r with
 * n = round(x / ln2) and a two-part ln2 (Cody and Waite), e^r by its Taylor
 * series to r^8 (|r| <= ln2/2, truncation below 2^-27), then the power of two
 * put in as two exact multiplications so subnormal results round once.
 * Overflow gives +Inf, underflow 0, NaN stays NaN. Without a branch: the
 * series runs on x clamped into the finite range and the out-of-range
 * results are selected after, so a kernel's exponentials of several channels
 * interleave. For x in range the clamp returns x itself, so the operations,
 * and the bits, are those of the series alone. */
SSM_HD float ssm_expf(float x)
{
    const float top = 88.72283935546875f, bottom = -103.97208404541015625f;
    float c = fminf(fmaxf(x, bottom), top); /* a NaN x gives bottom: any finite value does */
    float n = floorf(c * 1.44269502162933349609375f + 0.5f);
    float r = (c - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
    float p = 2.4801587301587302e-05f;
    p = p * r + 1.9841269841269841e-04f;
    p = p * r + 1.3888888888888889e-03f;
    p = p * r + 8.3333333333333332e-03f;
    p = p * r + 4.1666666666666664e-02f;
    p = p * r + 1.6666666666666666e-01f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n = 2^half * 2^(n - half), each factor a normal number. */
    int32_t k = (int32_t)n;
    int32_t half = k / 2;
    float a = ssm_f32_from_bits((uint32_t)(half + 127) << 23);
    float b = ssm_f32_from_bits((uint32_t)(k - half + 127) << 23);
    float e = (p * a) * b;
    e = x > top ? ssm_f32_from_bits(0x7f800000u) : e;
    e = x < bottom ? 0.0f : e;
    return x == x ? e : x + x;
}

/* log(y) for finite y > 0 (normal or subnormal): y = m 2^e with m in
 * [sqrt(1/2), sqrt(2)), log m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.172, by
 * its series to s^11. */
SSM_HD float ssm_logf_positive(float y)
{
    int32_t e = 0;
    if (y < 1.17549435e-38f) { /* subnormal: scale into the normal range */
        y *= 16777216.0f;
        e = -24;
    }
    uint32_t bits = ssm_f32_bits(y);
    e += (int32_t)((bits >> 23) & 0xffu) - 127;
    float m = ssm_f32_from_bits((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m *= 0.5f;
        e += 1;
    }
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float p = 0.09090909090909091f;
    p = p * s2 + 0.1111111111111111f;
    p = p * s2 + 0.14285714285714285f;
    p = p * s2 + 0.2f;
    p = p * s2 + 0.3333333333333333f;
    p = p * s2 + 1.0f;
    float log_m = 2.0f * s * p;
    float ef = (float)e;
    return (ef * 1.428606765330187045e-06f + log_m) + ef * 0.693145751953125f;
}

/* log(1 + y) for y >= 0, accurate for small y as well: with u = 1 + y
 * rounded, log(u) * y / (u - 1) cancels the rounding of u (Goldberg). */
SSM_HD float ssm_log1pf(float y)
{
    if (!(y == y))
        return y + y;
    float u = 1.0f + y;
    if (u == 1.0f)
        return y;
    if (u > 3.40282347e+38f)
        return u;
    return ssm_logf_positive(u) * (y / (u - 1.0f));
}

/* ssm_silu(x) given e = ssm_expf(-x): for code that takes several
 * exponentials before their divisions (the GPU's conv), the same bits. */
SSM_HD float ssm_silu_of(float x, float e)
{
    return x / (1.0f + e);
}

/* x * sigmoid(x), computed as x / (1 + e^-x): one rounding fewer than
 * multiplying by a separately rounded sigmoid. Very negative x gives -0. */
SSM_HD float ssm_silu(float x)
{
    return ssm_silu_of(x, ssm_expf(-x));
}

/* 1 / (1 + e^-x). */
SSM_HD float ssm_sigmoid(float x)
{
    return 1.0f / (1.0f + ssm_expf(-x));
}

/* log(1 + e^x); x itself above 20, where the two differ by less than one
 * fp32 ulp and the exponential would head towards overflow. */
SSM_HD float ssm_softplus(float x)
{
    return x > 20.0f ? x : ssm_log1pf(ssm_expf(x));
}

/* GDN decay (natural log, <= 0): -(e^a_log * softplus(a + dt_bias)).
 * Op order: s = a + dt_bias; p = e^a_log * softplus(s); g = -p. */
/* The floor of a log-decay g. Any g below about -104 already decays a
 * state to exactly 0 in one token (ssm_expf underflows), so the floor
 * changes no result of the token-by-token update; it keeps the chunked
 * form's running sums G finite (64 tokens of -inf would make G_t - G_i
 * = -inf - -inf = NaN where the update gives 0). NaN stays NaN. */
#define SSM_GATE_FLOOR (-128.0f)

SSM_HD float ssm_gate_floor(float g)
{
    return g < SSM_GATE_FLOOR ? SSM_GATE_FLOOR : g;
}

SSM_HD float ssm_gdn_gate(float a_log, float a, float dt_bias)
{
    return ssm_gate_floor(-(ssm_expf(a_log) * ssm_softplus(a + dt_bias)));
}

/* KDA decay of one key channel. Without a lower bound it is the GDN form on
 * f; with one it is lb * sigmoid(e^a_log * (f + dt_bias)), which lies in
 * (lb, 0). Op order: s = f + dt_bias; z = e^a_log * s; g = lb * sigmoid(z). */
SSM_HD float ssm_kda_gate(float a_log, float f, float dt_bias, int has_lower_bound,
                          float lower_bound)
{
    if (!has_lower_bound)
        return ssm_gdn_gate(a_log, f, dt_bias);
    return ssm_gate_floor(lower_bound * ssm_sigmoid(ssm_expf(a_log) * (f + dt_bias)));
}

/* The L2 normalization factor of a head vector: 1 / sqrt(sum x^2 + 1e-6).
 * A division by sqrtf, not rsqrtf, so host and device round identically. */
SSM_HD float ssm_l2_inv(float sum_of_squares)
{
    return 1.0f / sqrtf(sum_of_squares + 1e-6f);
}

/* The query scale K^-0.5, as 1 / sqrt(K). Applied after normalization:
 * q = (q * l2_inv) * scale. */
SSM_HD float ssm_query_scale(int32_t key_dim)
{
    return 1.0f / sqrtf((float)key_dim);
}

#endif
