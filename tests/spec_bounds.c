/* The numerics contract's bounds as the tests hold them (see spec_bounds.h). */
#include <math.h>
#include <stdio.h>

#include "kernels/reference.h"
#include "tests/spec_bounds.h"

/* Over a bf16 state, every comparison takes the bound native itself meets
 * against an fp64 reference: rounding the state after every token
 * accumulates under slowly decaying gates. */
#define BF16_STATE_LIMIT 1e-2

spec_bound spec_bound_vs_native(ssm_dtype state_dtype, ssm_dtype act)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (spec_bound){BF16_STATE_LIMIT,
                            "relative RMS <= 1e-2 over the whole output (one device, bf16 state)"};
    if (act == SSM_DTYPE_F32)
        return (spec_bound){1e-5, "relative RMS <= 1e-5 over the whole output (one device, "
                                  "fp32 state, fp32 outputs)"};
    return (spec_bound){2e-4, "relative RMS <= 2e-4 over the whole output (one device, fp32 "
                              "state, bf16 outputs)"};
}

spec_bound spec_bound_cpu_vs_cuda(ssm_dtype state_dtype, ssm_dtype act)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (spec_bound){BF16_STATE_LIMIT,
                            "relative RMS <= 1e-2 over the whole output (CPU vs CUDA, bf16 "
                            "state)"};
    if (act == SSM_DTYPE_F32)
        return (spec_bound){1e-4, "relative RMS <= 1e-4 over the whole output (CPU vs CUDA, "
                                  "fp32 outputs)"};
    return (spec_bound){5e-4, "relative RMS <= 5e-4 over the whole output (CPU vs CUDA, bf16 "
                              "outputs)"};
}

spec_bound spec_bound_cpu_vs_cuda_state(ssm_dtype state_dtype)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (spec_bound){BF16_STATE_LIMIT,
                            "relative RMS <= 1e-2 over the state (CPU vs CUDA, bf16 state)"};
    return (spec_bound){1e-4, "relative RMS <= 1e-4 over the state (CPU vs CUDA, fp32 state)"};
}

spec_bound spec_bound_vs_native_state(ssm_dtype state_dtype)
{
    if (state_dtype == SSM_DTYPE_BF16)
        return (spec_bound){BF16_STATE_LIMIT,
                            "relative RMS <= 1e-2 over the state (one device, bf16 state)"};
    return (spec_bound){1e-5, "relative RMS <= 1e-5 over the state (one device, fp32 state)"};
}

const char *spec_bound_text(spec_bound b)
{
    return b.text ? b.text : "relative RMS over the whole tensor";
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

int spec_add_block(spec_total *total, const void *got, const void *ref, ssm_dtype t, int64_t n,
                   char *why, size_t why_len)
{
    double diff2 = 0.0, ref2 = 0.0, largest = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = ssm_ref_load(got, t, i), r = ssm_ref_load(ref, t, i);
        if (!isfinite(g) || !isfinite(r)) {
            total->nonfinite = 1;
            snprintf(why, why_len, "element %lld is %g, expected %g", (long long)i, g, r);
            return 0;
        }
        diff2 += (g - r) * (g - r);
        ref2 += r * r;
        largest = fabs(r) > largest ? fabs(r) : largest;
    }
    total->diff2 += diff2;
    total->ref2 += ref2;
    total->elements += n;
    if (t == SSM_DTYPE_BF16 && bf16_step(largest) > total->bf16_step)
        total->bf16_step = bf16_step(largest);
    return 1;
}

double spec_total_limit(spec_bound b, const spec_total *t)
{
    /* As spec_total_rel_rms computes it, so one step is exactly at it. */
    double floor = t->ref2 > 0.0 ? sqrt(t->bf16_step * t->bf16_step / t->ref2) : 0.0;
    return floor > b.limit ? floor : b.limit;
}

double spec_total_rel_rms(const spec_total *t)
{
    if (t->nonfinite || !isfinite(t->diff2) || !isfinite(t->ref2))
        return INFINITY;
    if (t->ref2 == 0.0)
        return t->diff2 == 0.0 ? 0.0 : INFINITY;
    return sqrt(t->diff2 / t->ref2);
}

int spec_check_total(spec_bound b, const spec_total *t, int final)
{
    if (t->nonfinite)
        return 0;
    if (!final && t->elements < SPEC_WHOLE_MIN_ELEMENTS)
        return 1;
    return spec_total_rel_rms(t) <= spec_total_limit(b, t);
}

int spec_check_tensor(spec_bound b, const void *got, const void *ref, ssm_dtype t, int64_t n,
                      char *why, size_t why_len)
{
    spec_total total = {0};
    if (!spec_add_block(&total, got, ref, t, n, why, why_len))
        return 0;
    if (spec_check_total(b, &total, 1))
        return 1;
    snprintf(why, why_len, "relative RMS %.3g over %lld elements, limit %.3g; bound: %s",
             spec_total_rel_rms(&total), (long long)n, spec_total_limit(b, &total),
             spec_bound_text(b));
    return 0;
}
