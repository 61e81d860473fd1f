/* The numerics contract's bounds and the comparisons behind them (see bound.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/reference.h"
#include "bound.h"

/* Over a bf16 state, every comparison: the bound native itself meets
 * against an fp64 reference. */
#define BF16_STATE_LIMIT 1e-2

bound_relation bound_relation_of(ssm_device_type device, ssm_prefill_precision precision)
{
    if (device == SSM_DEVICE_CPU)
        return BOUND_ONE_DEVICE;
    return precision == SSM_PREFILL_PRECISION_FAST ? BOUND_CPU_VS_CUDA_FAST_PREFILL
                                                   : BOUND_CPU_VS_CUDA;
}

#define BOUND_WORDS(limit) BOUND_WORDS_(limit)
#define BOUND_WORDS_(limit) "relative RMS <= " #limit
/* A bound of `limit` (a number as written) over `what`: the limit, its
 * words, and the words with what it covers, each number written once. */
#define BOUND(limit, what) ((bound){limit, BOUND_WORDS(limit), BOUND_WORDS(limit) " over " what})

/* Outputs and states of a CUDA context whose prefills take bf16 products,
 * against the CPU: each within 5e-3 of fp64. */
#define FAST_PREFILL_BOUND \
    BOUND(1e-2, "the whole tensor, outputs or state (CPU vs CUDA, prefills in bf16 products)")

bound bound_for_outputs(bound_relation relation, ssm_dtype state_dtype, ssm_dtype act)
{
    if (relation == BOUND_CPU_VS_CUDA_FAST_PREFILL)
        return FAST_PREFILL_BOUND;
    if (relation == BOUND_CPU_VS_CUDA) {
        if (state_dtype == SSM_DTYPE_BF16)
            return BOUND(BF16_STATE_LIMIT, "the whole output (CPU vs CUDA, bf16 state)");
        return act == SSM_DTYPE_F32
                   ? BOUND(1e-4, "the whole output (CPU vs CUDA, fp32 outputs)")
                   : BOUND(5e-4, "the whole output (CPU vs CUDA, bf16 outputs)");
    }
    if (state_dtype == SSM_DTYPE_BF16)
        return BOUND(BF16_STATE_LIMIT, "the whole output (one device, bf16 state)");
    return act == SSM_DTYPE_F32
               ? BOUND(1e-5, "the whole output (one device, fp32 state, fp32 outputs)")
               : BOUND(2e-4, "the whole output (one device, fp32 state, bf16 outputs)");
}

bound bound_for_states(bound_relation relation, ssm_dtype state_dtype)
{
    if (relation == BOUND_CPU_VS_CUDA_FAST_PREFILL)
        return FAST_PREFILL_BOUND;
    if (relation == BOUND_CPU_VS_CUDA)
        return state_dtype == SSM_DTYPE_BF16
                   ? BOUND(BF16_STATE_LIMIT, "the state (CPU vs CUDA, bf16 state)")
                   : BOUND(1e-4, "the state (CPU vs CUDA, fp32 state)");
    return state_dtype == SSM_DTYPE_BF16
               ? BOUND(BF16_STATE_LIMIT, "the state (one device, bf16 state)")
               : BOUND(1e-5, "the state (one device, fp32 state)");
}

const char *bound_text(bound b)
{
    return b.text ? b.text : "relative RMS";
}

/* Position of a bf16 value on the number line, so that adjacent values
 * differ by one and +0 == -0. */
static int64_t bf16_ordinal(uint16_t bits)
{
    int64_t magnitude = bits & 0x7fff;
    return (bits & 0x8000) ? -magnitude : magnitude;
}

static int bf16_is_nan(uint16_t bits)
{
    return (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
}

const char *bound_ulps_text(int64_t ulps, char *buf, size_t len)
{
    if (ulps == BOUND_ULPS_NAN)
        snprintf(buf, len, "nan");
    else
        snprintf(buf, len, "%lld", (long long)ulps);
    return buf;
}

/* The largest distance in bf16 ulps: a statistic shown beside the relative
 * RMS, never a bound (an element near zero may be many ulps off). */
static int64_t max_bf16_ulps(const uint16_t *got, const uint16_t *ref, int64_t n)
{
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ulps = llabs(bf16_ordinal(got[i]) - bf16_ordinal(ref[i]));
        if (bf16_is_nan(got[i]) || bf16_is_nan(ref[i]))
            ulps = BOUND_ULPS_NAN;
        if (ulps > worst)
            worst = ulps;
    }
    return worst;
}

/* Spacing of bf16 values at |x| (the step above it); 0 at 0. */
static double bf16_step(double x)
{
    int exponent = 0;
    if (x == 0.0)
        return 0.0;
    frexp(fabs(x), &exponent); /* |x| = m * 2^exponent, m in [0.5, 1) */
    return ldexp(1.0, (exponent - 1 < -126 ? -126 : exponent - 1) - 7);
}

double bound_total_rel_rms(const bound_total *total)
{
    if (total->nonfinite || isnan(total->diff2) || !isfinite(total->ref2))
        return NAN;
    if (total->ref2 == 0.0)
        return total->diff2 == 0.0 ? 0.0 : INFINITY;
    return sqrt(total->diff2 / total->ref2);
}

double bound_total_limit(bound b, const bound_total *total)
{
    /* As the relative RMS is computed, so one step each of the two largest
       elements is exactly at it. */
    double steps2 = total->bf16_steps[0] * total->bf16_steps[0] +
                    total->bf16_steps[1] * total->bf16_steps[1];
    double floor = total->ref2 > 0.0 ? sqrt(steps2 / total->ref2) : 0.0;
    return floor > b.limit ? floor : b.limit;
}

/* Adds |value| to the two largest magnitudes top[0] >= top[1]. */
static void keep_two_largest(double top[2], double value)
{
    double v = fabs(value);
    if (v > top[0]) {
        top[1] = top[0];
        top[0] = v;
    } else if (v > top[1]) {
        top[1] = v;
    }
}

int bound_total_pass(bound b, const bound_total *total)
{
    /* NaN compares false. */
    return !total->nonfinite && bound_total_rel_rms(total) <= bound_total_limit(b, total);
}

int64_t bound_accumulate(bound_total *total, const void *got, const void *ref, ssm_dtype t,
                         int64_t n)
{
    double diff2 = 0.0, ref2 = 0.0, largest[2] = {0.0, 0.0};
    for (int64_t i = 0; i < n; i++) {
        double g = ssm_ref_load(got, t, i), r = ssm_ref_load(ref, t, i);
        if (!isfinite(g) || !isfinite(r)) {
            total->nonfinite = 1;
            return i;
        }
        diff2 += (g - r) * (g - r);
        ref2 += r * r;
        keep_two_largest(largest, r);
    }
    total->diff2 += diff2;
    total->ref2 += ref2;
    total->elements += n;
    if (t == SSM_DTYPE_BF16)
        for (int k = 0; k < 2; k++)
            keep_two_largest(total->bf16_steps, bf16_step(largest[k]));
    return -1;
}

bound_result bound_add(bound_total *total, const void *got, const void *ref, ssm_dtype t,
                       int64_t n)
{
    bound_total block = {0};
    int64_t bad = bound_accumulate(&block, got, ref, t, n);
    total->diff2 += block.diff2;
    total->ref2 += block.ref2;
    total->elements += n;
    total->nonfinite |= block.nonfinite;
    for (int k = 0; k < 2; k++)
        keep_two_largest(total->bf16_steps, block.bf16_steps[k]);
    bound_result r = {bound_total_rel_rms(&block), 0, bad < 0};
    if (t == SSM_DTYPE_BF16)
        r.max_ulps = max_bf16_ulps(got, ref, n);
    return r;
}

bound_result bound_compare(const void *got, const void *ref, ssm_dtype t, int64_t n, bound b)
{
    bound_total total = {0};
    bound_result r = bound_add(&total, got, ref, t, n);
    r.pass = bound_total_pass(b, &total);
    return r;
}

void bound_track_max(double *max, double value)
{
    if (!isnan(*max) && (isnan(value) || value > *max))
        *max = value;
}
