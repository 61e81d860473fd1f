/* The numerics contract's bounds (docs/numerics.md) as the conformance,
 * cross-mode, stress and GPU suites hold outputs and states to them: names
 * over tools/bound.h, which holds the numbers, the relative-RMS totals, the
 * bf16 small-tensor floor and the NaN rule for the command and the tests
 * alike (what each bound is and why, there). Each comparison has its own
 * function:
 *
 *   spec_bound_vs_native, spec_bound_vs_native_state: one device, any
 *     output form against native's (replay's identity, matrix and exact
 *     forms; a plugin against the CPU reference, which computes what native
 *     computes): BOUND_ONE_DEVICE.
 *   spec_bound_cpu_vs_cuda, spec_bound_cpu_vs_cuda_state: the same mode (or
 *     native) on the CPU against a CUDA context, decode, verify and prefill:
 *     BOUND_CPU_VS_CUDA.
 *   spec_bound_fast_prefill_cpu_vs_cuda: a CUDA prefill under
 *     prefill_precision = fast against the CPU's.
 *
 * "Whole tensor" is here the whole output of a session, per layer,
 * assembled block by block (spec_add_block): held per block (one row of one
 * step: T * HV * V elements) the bounds fail on correct modes at small
 * shapes, because a history mode's error follows the scale of the state,
 * not of each output: replay vs native with a bf16 state at HV=4, K=V=128,
 * 600 decode steps, measured per-token relative RMS up to 4.7e-3 while the
 * whole output sits at 1.5e-3; with fp32 state and 16-element blocks,
 * single blocks reach 1.5e-5. The whole-output bound is checked after
 * every step once a layer has produced SPEC_WHOLE_MIN_ELEMENTS outputs, and
 * at the end always. An exported state is one tensor of its own.
 *
 * A bf16 tensor too small to resolve its bound is held to one rounding
 * step of its largest element relative to its norm when that is larger
 * (spec_total_limit).
 *
 * NaN never passes: every block is checked for non-finite values as it is
 * added (on either side: a NaN that both sides hold still fails), and a
 * total that saw one has relative RMS +inf. */
#ifndef SSM_TESTS_SPEC_BOUNDS_H
#define SSM_TESTS_SPEC_BOUNDS_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/types.h"
#include "tools/bound.h"

/* Outputs of one layer before the whole-output bound applies: one token of a
 * real model's layer (Qwen3-Next: HV * V = 4096). */
#define SPEC_WHOLE_MIN_ELEMENTS 4096

/* A relative-RMS bound over a whole tensor. */
typedef struct spec_bound {
    double limit;     /* ||got - ref|| / ||ref|| <= limit */
    const char *text; /* the bound in words, with what it covers (static storage) */
} spec_bound;

/* Outputs, one device: any output form (replay's identity, matrix, exact;
 * any plugin on the CPU against the CPU reference) against native's. */
spec_bound spec_bound_vs_native(ssm_dtype state_dtype, ssm_dtype act);

/* Outputs, the CPU against CUDA. */
spec_bound spec_bound_cpu_vs_cuda(ssm_dtype state_dtype, ssm_dtype act);

/* Matrix states, the CPU against CUDA (one exported state per slot and
 * layer). */
spec_bound spec_bound_cpu_vs_cuda_state(ssm_dtype state_dtype);

/* Outputs and states, the CPU against a CUDA prefill under prefill_precision
 * = fast: each side within the chunked prefill's 5e-3 of fp64, so the two
 * within 1e-2 (the CPU's fp32 prefill is within 1e-6 of fp64). */
spec_bound spec_bound_fast_prefill_cpu_vs_cuda(void);

/* Matrix states, one device: a mode whose exported state is not native's
 * bit for bit (the built-in modes' are) against the CPU reference. */
spec_bound spec_bound_vs_native_state(ssm_dtype state_dtype);

/* The bound in words (static storage). */
const char *spec_bound_text(spec_bound b);

/* A whole tensor assembled block by block. */
typedef bound_total spec_total;

/* The limit a total is held to: b.limit, or for a bf16 tensor too small to
 * resolve it, one rounding step each of its two largest elements relative
 * to its norm, whichever is larger (bound_total_limit). */
double spec_total_limit(spec_bound b, const spec_total *t);

/* Adds one block of n elements (dtype t) to *total. Returns 1, or 0 with
 * the first non-finite element in why (got or ref: NaN never passes); the
 * bound itself is the total's (spec_check_total). */
int spec_add_block(spec_total *total, const void *got, const void *ref, ssm_dtype t, int64_t n,
                   char *why, size_t why_len);

/* ||got - ref|| / ||ref|| over everything added (+inf after a non-finite
 * value, or when ||ref|| == 0 < ||got - ref||; 0 when nothing was added). */
double spec_total_rel_rms(const spec_total *t);

/* Checks a total against b: always when `final`, else once it holds
 * SPEC_WHOLE_MIN_ELEMENTS (before that, only that nothing was non-finite).
 * Returns 1 when it passes. */
int spec_check_total(spec_bound b, const spec_total *t, int final);

/* One tensor of n elements at once: spec_add_block, then spec_check_total
 * (final). Returns 1 when it passes; otherwise 0 with the reason in why. */
int spec_check_tensor(spec_bound b, const void *got, const void *ref, ssm_dtype t, int64_t n,
                      char *why, size_t why_len);

#endif
