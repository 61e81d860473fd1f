/* The numerics contract's bounds as the tests hold them (see spec_bounds.h):
 * the numbers and the totals are tools/bound.c's. */
#include <math.h>
#include <stdio.h>

#include "kernels/reference.h"
#include "tests/spec_bounds.h"

/* The command's bound, in the words that say what it covers. */
static spec_bound named(bound b)
{
    return (spec_bound){b.limit, b.detail};
}

/* A test's bound as bound.h's totals take it. */
static bound as_bound(spec_bound b)
{
    return (bound){b.limit, b.text, b.text};
}

spec_bound spec_bound_vs_native(ssm_dtype state_dtype, ssm_dtype act)
{
    return named(bound_for_outputs(BOUND_ONE_DEVICE, state_dtype, act));
}

spec_bound spec_bound_cpu_vs_cuda(ssm_dtype state_dtype, ssm_dtype act)
{
    return named(bound_for_outputs(BOUND_CPU_VS_CUDA, state_dtype, act));
}

spec_bound spec_bound_cpu_vs_cuda_state(ssm_dtype state_dtype)
{
    return named(bound_for_states(BOUND_CPU_VS_CUDA, state_dtype));
}

spec_bound spec_bound_fast_prefill_cpu_vs_cuda(void)
{
    return named(bound_for_states(BOUND_CPU_VS_CUDA_FAST_PREFILL, SSM_DTYPE_F32));
}

spec_bound spec_bound_vs_native_state(ssm_dtype state_dtype)
{
    return named(bound_for_states(BOUND_ONE_DEVICE, state_dtype));
}

const char *spec_bound_text(spec_bound b)
{
    return b.text ? b.text : "relative RMS over the whole tensor";
}

int spec_add_block(spec_total *total, const void *got, const void *ref, ssm_dtype t, int64_t n,
                   char *why, size_t why_len)
{
    int64_t bad = bound_accumulate(total, got, ref, t, n);
    if (bad < 0)
        return 1;
    snprintf(why, why_len, "element %lld is %g, expected %g", (long long)bad,
             ssm_ref_load(got, t, bad), ssm_ref_load(ref, t, bad));
    return 0;
}

double spec_total_limit(spec_bound b, const spec_total *t)
{
    return bound_total_limit(as_bound(b), t);
}

double spec_total_rel_rms(const spec_total *t)
{
    double rel = bound_total_rel_rms(t);
    return isnan(rel) ? INFINITY : rel;
}

int spec_check_total(spec_bound b, const spec_total *t, int final)
{
    if (t->nonfinite)
        return 0;
    if (!final && t->elements < SPEC_WHOLE_MIN_ELEMENTS)
        return 1;
    return bound_total_pass(as_bound(b), t);
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
