/* The SPEC 3.5 bounds `ssmstate run` holds results to, and the comparison
 * that measures them. The same bounds serve two rows of the table: "any
 * mode, CPU vs CUDA" (a mode against the CPU reference) and "replay outputs
 * vs native outputs" (one mode against another). */
#ifndef SSM_TOOLS_BOUND_H
#define SSM_TOOLS_BOUND_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"

typedef enum bound_kind {
    BOUND_REL_RMS, /* relative RMS over the whole block <= limit */
    BOUND_BF16_ULP /* each element within one bf16 ulp (floor: 4e-5 of the block RMS) */
} bound_kind;

typedef struct bound {
    bound_kind kind;
    double limit; /* BOUND_REL_RMS only */
} bound;

/* Outputs: fp32 activations and state, relative RMS <= 1e-5; bf16 outputs
 * over an fp32 state, one bf16 ulp per element; bf16 state, relative RMS
 * <= 4e-3. */
bound bound_for_outputs(ssm_dtype state_dtype, ssm_dtype act);

/* Matrix states: relative RMS <= 1e-5 (fp32) or <= 4e-3 (bf16). */
bound bound_for_states(ssm_dtype state_dtype);

/* The bound in words, e.g. "relative RMS <= 1e-5" (static storage). */
const char *bound_text(bound b);

/* One comparison: relative RMS ||got - ref|| / ||ref|| (NaN if got holds a
 * NaN), the largest distance in bf16 ulps when the dtype is bf16 (0
 * otherwise; INT64_MAX for a NaN), and whether the bound holds. */
typedef struct bound_result {
    double rel_rms;
    int64_t max_ulps;
    int pass;
} bound_result;

/* Compares n elements of dtype t, got against ref, under bound b. */
bound_result bound_compare(const void *got, const void *ref, ssm_dtype t, int64_t n, bound b);

/* *max = the larger of *max and value, where NaN is the worst error: once
 * NaN, it stays NaN. */
void bound_track_max(double *max, double value);

#endif
