/* The numerics contract's bounds and the comparisons behind them (see bound.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/reference.h"
#include "bound.h"

bound bound_for_outputs(bound_relation relation, ssm_dtype state_dtype, ssm_dtype act)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (bound){1e-2, "relative RMS <= 1e-2"};
    if (relation == BOUND_CPU_VS_CUDA)
        return act == SSM_DTYPE_F32 ? (bound){1e-4, "relative RMS <= 1e-4"}
                                    : (bound){5e-4, "relative RMS <= 5e-4"};
    return act == SSM_DTYPE_F32 ? (bound){1e-5, "relative RMS <= 1e-5"}
                                : (bound){2e-4, "relative RMS <= 2e-4"};
}

bound bound_for_states(bound_relation relation, ssm_dtype state_dtype)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (bound){1e-2, "relative RMS <= 1e-2"};
    return relation == BOUND_CPU_VS_CUDA ? (bound){1e-4, "relative RMS <= 1e-4"}
                                         : (bound){1e-5, "relative RMS <= 1e-5"};
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
    if (total->nonfinite || isnan(total->diff2) || isnan(total->ref2))
        return NAN;
    if (total->ref2 == 0.0)
        return total->diff2 == 0.0 ? 0.0 : INFINITY;
    return sqrt(total->diff2 / total->ref2);
}

int bound_total_pass(bound b, const bound_total *total)
{
    double rel = bound_total_rel_rms(total), limit = b.limit;
    if (total->ref2 > 0.0) { /* as the relative RMS is computed: one step is at it */
        double floor = sqrt(total->bf16_step * total->bf16_step / total->ref2);
        limit = floor > limit ? floor : limit;
    }
    return !total->nonfinite && rel <= limit; /* NaN compares false */
}

bound_result bound_add(bound_total *total, const void *got, const void *ref, ssm_dtype t,
                       int64_t n)
{
    bound_total block = {0.0, 0.0, n, 0, 0.0};
    double largest = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = ssm_ref_load(got, t, i), r = ssm_ref_load(ref, t, i);
        if (!isfinite(g) || !isfinite(r))
            block.nonfinite = 1;
        block.diff2 += (g - r) * (g - r);
        block.ref2 += r * r;
        largest = fabs(r) > largest ? fabs(r) : largest;
    }
    total->diff2 += block.diff2;
    total->ref2 += block.ref2;
    total->elements += n;
    total->nonfinite |= block.nonfinite;
    if (t == SSM_DTYPE_BF16 && bf16_step(largest) > total->bf16_step)
        total->bf16_step = bf16_step(largest);
    bound_result r = {bound_total_rel_rms(&block), 0, !block.nonfinite};
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
