/* SPEC 3.5's output bounds as the tests hold them (see spec_bounds.h). */
#include <math.h>
#include <stdio.h>

#include "kernels/reference.h"
#include "tests/spec_bounds.h"

spec_bound spec_bound_outputs(ssm_dtype state_dtype, ssm_dtype act)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (spec_bound){SPEC_REL_RMS_WHOLE, 4e-3};
    if (act == SSM_DTYPE_F32)
        return (spec_bound){SPEC_REL_RMS_WHOLE, 1e-5};
    return (spec_bound){SPEC_BF16_ULP, 4e-5}; /* the block-RMS share: spec_bounds.h */
}

const char *spec_bound_text(spec_bound b)
{
    if (b.kind == SPEC_BF16_ULP)
        return "each element within one bf16 ulp (+ 4e-5 of the block's RMS)";
    return b.limit < 1e-4 ? "relative RMS <= 1e-5 over the whole output"
                          : "relative RMS <= 4e-3 over the whole output";
}

/* Spacing of bf16 values at |x| (the ulp above it); subnormal spacing at 0. */
static double bf16_ulp(float x)
{
    int exponent = 0;
    if (x == 0.0f || !isfinite(x))
        return ldexp(1.0, -133);
    frexp(fabs((double)x), &exponent); /* |x| = m * 2^exponent, m in [0.5, 1) */
    if (exponent - 1 < -126)
        return ldexp(1.0, -133);
    return ldexp(1.0, exponent - 1 - 7);
}

int spec_check_block(spec_bound b, spec_total *total, const void *got, const void *ref,
                     ssm_dtype act, int64_t n, char *why, size_t why_len)
{
    double diff2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = ssm_ref_load(got, act, i), r = ssm_ref_load(ref, act, i);
        if (!isfinite(g) || !isfinite(r)) {
            total->nonfinite = 1;
            snprintf(why, why_len, "element %lld is %g, expected %g", (long long)i, g, r);
            return 0;
        }
        diff2 += (g - r) * (g - r);
        ref2 += r * r;
    }
    total->diff2 += diff2;
    total->ref2 += ref2;
    total->elements += n;
    if (b.kind != SPEC_BF16_ULP)
        return 1;
    double share = n > 0 ? b.limit * sqrt(ref2 / (double)n) : 0.0;
    for (int64_t i = 0; i < n; i++) {
        float g = ssm_ref_load(got, act, i), r = ssm_ref_load(ref, act, i);
        double ulp = bf16_ulp(r);
        if (fabs((double)g - (double)r) > ulp + share) {
            snprintf(why, why_len,
                     "element %lld is %.6g, expected %.6g: %.3g bf16 ulps apart (block RMS "
                     "%.3g)",
                     (long long)i, g, r, fabs((double)g - (double)r) / ulp, sqrt(ref2 / (double)n));
            return 0;
        }
    }
    return 1;
}

double spec_total_rel_rms(const spec_total *t)
{
    if (t->nonfinite)
        return INFINITY;
    if (t->ref2 == 0.0)
        return t->diff2 == 0.0 ? 0.0 : INFINITY;
    return sqrt(t->diff2 / t->ref2);
}

int spec_check_total(spec_bound b, const spec_total *t, int final)
{
    if (b.kind != SPEC_REL_RMS_WHOLE)
        return !t->nonfinite;
    if (!final && t->elements < SPEC_WHOLE_MIN_ELEMENTS)
        return !t->nonfinite;
    return spec_total_rel_rms(t) <= b.limit;
}
