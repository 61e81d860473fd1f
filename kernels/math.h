/* Scalar math of SPEC 2.2, shared by the CPU reference and every CUDA kernel
 * so that both evaluate the same operations in the same order. All fp32.
 *
 * Host and device agree bit for bit on everything built from IEEE-rounded
 * operations only (bf16 conversion, +, *, /, sqrtf: nvcc rounds division and
 * sqrtf correctly unless fast math is asked for, and contraction into FMA is
 * off on both sides: -ffp-contract=off, --fmad=false). Functions that call
 * expf or log1pf inherit the few-ulp differences between glibc and CUDA's
 * math library; SPEC 3.5 bounds CPU vs CUDA by tolerance for that reason. */
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

/* x * sigmoid(x), computed as x / (1 + e^-x): one rounding fewer than
 * multiplying by a separately rounded sigmoid. Very negative x gives -0. */
SSM_HD float ssm_silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* 1 / (1 + e^-x). */
SSM_HD float ssm_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* log(1 + e^x); x itself above 20, where the two differ by less than one
 * fp32 ulp and expf would head towards overflow. */
SSM_HD float ssm_softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

/* GDN decay (natural log, <= 0): -(e^a_log * softplus(a + dt_bias)).
 * Op order: s = a + dt_bias; p = e^a_log * softplus(s); g = -p. */
SSM_HD float ssm_gdn_gate(float a_log, float a, float dt_bias)
{
    return -(expf(a_log) * ssm_softplus(a + dt_bias));
}

/* KDA decay of one key channel. Without a lower bound it is the GDN form on
 * f; with one it is lb * sigmoid(e^a_log * (f + dt_bias)), which lies in
 * (lb, 0). Op order: s = f + dt_bias; z = e^a_log * s; g = lb * sigmoid(z). */
SSM_HD float ssm_kda_gate(float a_log, float f, float dt_bias, int has_lower_bound,
                          float lower_bound)
{
    if (!has_lower_bound)
        return ssm_gdn_gate(a_log, f, dt_bias);
    return lower_bound * ssm_sigmoid(expf(a_log) * (f + dt_bias));
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
