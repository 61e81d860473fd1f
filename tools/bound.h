/* The numerics contract's bounds (docs/numerics.md) that `ssmstate run` and
 * `ssmstate serve` hold results to, and the comparisons that measure them.
 *
 * Every bound is a relative RMS, ||got - ref|| / ||ref||, over a whole
 * tensor; there is no rule per element (an element near zero may land many
 * bf16 ulps away when two exact forms round differently). NaN never passes.
 * Two comparisons have their own numbers:
 *   BOUND_ONE_DEVICE: a mode against the CPU reference or against native on
 *     the same device (`ssmstate run`, `run --modes`, serve's check on the
 *     CPU): outputs 1e-5 (fp32) or 2e-4 (bf16) over an fp32 state; states
 *     1e-5; over a bf16 state 1e-2, the bound native itself meets against
 *     an fp64 reference.
 *   BOUND_CPU_VS_CUDA: a CUDA context against the CPU (`ssmstate run` on a
 *     CUDA context, serve's check on a GPU): outputs 1e-4 (fp32) or 5e-4 (bf16) over an fp32 state; states
 *     1e-4; over a bf16 state 1e-2.
 * A bf16 tensor too small to resolve its bound is held to one rounding step
 * of its largest element relative to its norm when that is larger, as the
 * test suites hold it (tests/spec_bounds.h). */
#ifndef SSM_TOOLS_BOUND_H
#define SSM_TOOLS_BOUND_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"

typedef enum bound_relation {
    BOUND_ONE_DEVICE, /* a mode against native's computation, one device */
    BOUND_CPU_VS_CUDA /* a CUDA context against the CPU */
} bound_relation;

/* Relative RMS over a whole tensor <= limit. */
typedef struct bound {
    double limit;
    const char *text; /* e.g. "relative RMS <= 2e-4" (static storage) */
} bound;

bound bound_for_outputs(bound_relation relation, ssm_dtype state_dtype, ssm_dtype act);

/* Matrix states, one per (request, layer). */
bound bound_for_states(bound_relation relation, ssm_dtype state_dtype);

/* The bound in words (static storage). */
const char *bound_text(bound b);

/* The ulp distance of an element that is NaN on either side: no number of
 * ulps, printed "nan" (bound_ulps_text), null in JSON. */
#define BOUND_ULPS_NAN INT64_MAX

/* An ulp distance as text into buf: the number, or "nan" for
 * BOUND_ULPS_NAN. Returns buf. */
const char *bound_ulps_text(int64_t ulps, char *buf, size_t len);

/* One comparison: relative RMS ||got - ref|| / ||ref|| (NaN if either side
 * holds a non-finite value), the largest distance in bf16 ulps when the
 * dtype is bf16 (0 otherwise; BOUND_ULPS_NAN for a NaN: shown, never
 * bounded), and whether the bound holds for the n elements as one tensor. */
typedef struct bound_result {
    double rel_rms;
    int64_t max_ulps;
    int pass;
} bound_result;

/* Compares n elements of dtype t, got against ref, as one tensor under b. */
bound_result bound_compare(const void *got, const void *ref, ssm_dtype t, int64_t n, bound b);

/* A whole tensor assembled block by block (the outputs of a session, say). */
typedef struct bound_total {
    double diff2, ref2;
    int64_t elements;
    int nonfinite;
    double bf16_step; /* bf16 tensors: one rounding step of the largest |ref| */
} bound_total;

/* Adds n elements of dtype t to *total and returns the block's own
 * comparison, pass meaning only that it held no non-finite value: the
 * bound is the total's (bound_total_pass). */
bound_result bound_add(bound_total *total, const void *got, const void *ref, ssm_dtype t,
                       int64_t n);

/* Relative RMS of the total: NaN after a non-finite value, +inf when
 * ||ref|| == 0 < ||got - ref||, 0 when nothing was added. */
double bound_total_rel_rms(const bound_total *total);

/* 1 when the total holds b, or for a bf16 tensor too small to resolve b,
 * one rounding step of its largest element (a non-finite value never
 * does). */
int bound_total_pass(bound b, const bound_total *total);

/* *max = the larger of *max and value, where NaN is the worst error: once
 * NaN, it stays NaN. */
void bound_track_max(double *max, double value);

#endif
