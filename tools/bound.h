/* The numerics contract's bounds (docs/numerics.md) and the comparisons that
 * measure them: the one copy of the numbers, which `ssmstate run`, `run
 * --modes` and `serve` hold their results to and the test suites hold every
 * mode to (tests/spec_bounds.h is their names for the same bounds).
 *
 * Every bound is a relative RMS, ||got - ref|| / ||ref||, over a whole
 * tensor; there is no rule per element. An element near zero (cancellation
 * in q . S, a value head whose v is tiny) may land many bf16 ulps from its
 * reference when two exact forms round differently, and that is no defect.
 * Two comparisons have their own numbers:
 *   BOUND_ONE_DEVICE: a mode against native's computation on one device
 *     (any output form against native's; any plugin against the CPU
 *     reference, which computes what native computes): outputs 1e-5 (fp32)
 *     or 2e-4 (bf16) over an fp32 state; states 1e-5.
 *   BOUND_CPU_VS_CUDA: a CUDA context against the CPU, decode, verify and
 *     prefill (the GPU may contract multiply-adds and use the hardware's
 *     approximations): outputs 1e-4 (fp32) or 5e-4 (bf16) over an fp32
 *     state; states 1e-4.
 *   BOUND_CPU_VS_CUDA_FAST_PREFILL: the same with the CUDA context's
 *     prefills under prefill_precision = fast (bf16 products): each side
 *     within the chunked prefill's 5e-3 of fp64, so outputs and states 1e-2
 *     apart at most, and every step after a prefill starts from its state.
 * Over a bf16 state every comparison takes 1e-2, outputs and states: the
 * bound native itself meets against an fp64 reference (rounding the state
 * after every token accumulates under slowly decaying gates).
 *
 * A bf16 tensor too small to resolve its bound is held to one rounding step
 * each of its two largest elements relative to its norm,
 * sqrt(ulp(first)^2 + ulp(second)^2) / ||ref||, when that is larger
 * (bound_total_limit): two exact forms may round any element to
 * neighbouring bf16 values, and in a small tensor one such step of a large
 * element is several times 2e-4 (replay's identity against native, KDA,
 * HV=9, V=16: 6192 outputs bit-identical but one element 3.5 times the RMS
 * one step apart, relative RMS 5e-4). Two, not one: outputs a few 1e-6
 * apart in fp32 (CPU against CUDA) put two of a small tensor's largest
 * elements on neighbouring values often enough that one step failed about
 * one random case in 300 (docs/numerics.md). At a real model's sizes the
 * steps are far below every bound; two steps of the largest element still
 * fail (tests/check_numerics.c).
 *
 * NaN never passes, nor an infinity: a value that is not finite on either
 * side (a NaN that both sides hold included) fails the tensor it is in, for
 * good. */
#ifndef SSM_TOOLS_BOUND_H
#define SSM_TOOLS_BOUND_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"

typedef enum bound_relation {
    BOUND_ONE_DEVICE,              /* a mode against native's computation, one device */
    BOUND_CPU_VS_CUDA,             /* a CUDA context against the CPU */
    BOUND_CPU_VS_CUDA_FAST_PREFILL /* ... whose prefills take bf16 products */
} bound_relation;

/* The relation a context on `device` under `precision` is held to against
 * the CPU reference. */
bound_relation bound_relation_of(ssm_device_type device, ssm_prefill_precision precision);

/* Relative RMS over a whole tensor <= limit. */
typedef struct bound {
    double limit;
    const char *text;   /* e.g. "relative RMS <= 2e-4" (static storage) */
    const char *detail; /* the same with what it covers, e.g. "relative RMS <= 2e-4 over
                           the whole output (one device, fp32 state, bf16 outputs)"; or NULL */
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
    double bf16_steps[2]; /* bf16 tensors: one rounding step of each of the two
                             largest |ref|, the larger first */
} bound_total;

/* Adds n elements of dtype t to *total. Returns -1, or the index of the
 * first element that is not finite on either side: the total is then
 * marked non-finite and the block adds nothing else. */
int64_t bound_accumulate(bound_total *total, const void *got, const void *ref, ssm_dtype t,
                         int64_t n);

/* bound_accumulate, returning the block's own comparison, pass meaning
 * only that it held no non-finite value: the bound is the total's
 * (bound_total_pass). */
bound_result bound_add(bound_total *total, const void *got, const void *ref, ssm_dtype t,
                       int64_t n);

/* Relative RMS of the total: NaN after a non-finite value (or sums past
 * double's range), +inf when ||ref|| == 0 < ||got - ref||, 0 when nothing
 * was added. */
double bound_total_rel_rms(const bound_total *total);

/* The limit a total is held to: b.limit, or for a bf16 tensor too small to
 * resolve it, one rounding step each of its two largest elements relative
 * to its norm, whichever is larger. */
double bound_total_limit(bound b, const bound_total *total);

/* 1 when the total's relative RMS is within bound_total_limit (a
 * non-finite value never is). */
int bound_total_pass(bound b, const bound_total *total);

/* *max = the larger of *max and value, where NaN is the worst error: once
 * NaN, it stays NaN. */
void bound_track_max(double *max, double value);

#endif
