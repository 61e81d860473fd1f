/* SPEC 3.5 bounds and the comparison behind them (see bound.h). */
#include <math.h>
#include <stdlib.h>

#include "kernels/reference.h"
#include "bound.h"

bound bound_for_outputs(ssm_dtype state_dtype, ssm_dtype act)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (bound){BOUND_REL_RMS, 4e-3};
    if (act == SSM_DTYPE_F32)
        return (bound){BOUND_REL_RMS, 1e-5};
    return (bound){BOUND_BF16_ULP, INFINITY}; /* the ulp test decides */
}

bound bound_for_states(ssm_dtype state_dtype)
{
    return (bound){BOUND_REL_RMS, state_dtype == SSM_DTYPE_BF16 ? 4e-3 : 1e-5};
}

const char *bound_text(bound b)
{
    if (b.kind == BOUND_BF16_ULP)
        return "each element within 1 bf16 ulp";
    return b.limit < 1e-4 ? "relative RMS <= 1e-5" : "relative RMS <= 4e-3";
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

static int64_t max_bf16_ulps(const uint16_t *got, const uint16_t *ref, int64_t n)
{
    int64_t worst = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t ulps = llabs(bf16_ordinal(got[i]) - bf16_ordinal(ref[i]));
        if (bf16_is_nan(got[i]) || bf16_is_nan(ref[i]))
            ulps = INT64_MAX;
        if (ulps > worst)
            worst = ulps;
    }
    return worst;
}

static double relative_rms(const void *got, const void *ref, ssm_dtype t, int64_t n)
{
    double diff2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = ssm_ref_load(got, t, i), r = ssm_ref_load(ref, t, i);
        diff2 += (g - r) * (g - r); /* NaN in got makes the result NaN: never passes */
        ref2 += r * r;
    }
    if (ref2 == 0.0)
        return diff2 == 0.0 ? 0.0 : (isnan(diff2) ? NAN : INFINITY);
    return sqrt(diff2 / ref2);
}

/* One bf16 ulp per element, with the floor tests/spec_bounds.h explains: an
 * element far below the block's scale may be off by more than one ulp of
 * itself when the difference is under 4e-5 of the block's RMS (the fp32
 * error of the dot product it came from); a normal-sized element may not. */
static int within_one_ulp(const uint16_t *got, const uint16_t *ref, int64_t n)
{
    double ref2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double r = ssm_ref_load(ref, SSM_DTYPE_BF16, i);
        ref2 += r * r;
    }
    double floor = 4e-5 * sqrt(ref2 / (n > 0 ? (double)n : 1.0));
    for (int64_t i = 0; i < n; i++) {
        if (bf16_is_nan(got[i]) || bf16_is_nan(ref[i]))
            return 0;
        int64_t ulps = llabs(bf16_ordinal(got[i]) - bf16_ordinal(ref[i]));
        double diff = fabs((double)ssm_ref_load(got, SSM_DTYPE_BF16, i) -
                           (double)ssm_ref_load(ref, SSM_DTYPE_BF16, i));
        if (ulps > 1 && !(diff <= floor))
            return 0;
    }
    return 1;
}

bound_result bound_compare(const void *got, const void *ref, ssm_dtype t, int64_t n, bound b)
{
    bound_result r = {relative_rms(got, ref, t, n), 0, 0};
    if (t == SSM_DTYPE_BF16)
        r.max_ulps = max_bf16_ulps(got, ref, n);
    if (b.kind == BOUND_REL_RMS)
        r.pass = r.rel_rms <= b.limit;
    else
        r.pass = t == SSM_DTYPE_BF16 && within_one_ulp(got, ref, n);
    return r;
}

void bound_track_max(double *max, double value)
{
    if (!isnan(*max) && (isnan(value) || value > *max))
        *max = value;
}
