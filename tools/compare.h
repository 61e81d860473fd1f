/* Mode against mode for `ssmstate run --modes`: sessions of one config on
 * several modes run in lockstep, forward by forward, the baseline (native)
 * first. The baseline's output blocks and finished requests' final states of
 * the current forward are kept; every other mode's, from the same forward,
 * are compared with them as they come. Memory is one forward's worth. */
#ifndef SSM_TOOLS_COMPARE_H
#define SSM_TOOLS_COMPARE_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "bound.h"
#include "session.h"

typedef struct compare_baseline compare_baseline;

/* A baseline whose comparisons take the bounds of `relation` (bound.h):
 * BOUND_ONE_DEVICE for modes on one device, BOUND_CPU_VS_CUDA for a CUDA
 * run against the CPU. Returns 0, or -1 when out of memory. */
int compare_baseline_create(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                            bound_relation relation, compare_baseline **out);
void compare_baseline_destroy(compare_baseline *b); /* NULL is fine */

/* Keeps a baseline block or final state (copies it). A failed allocation is
 * remembered and reported by compare_baseline_ok(). */
void compare_keep_output(compare_baseline *b, const session_block *block);
void compare_keep_final_state(compare_baseline *b, int32_t request, int32_t layer,
                              const void *window, const void *state);
int compare_baseline_ok(const compare_baseline *b);

/* Forgets the current forward's blocks and states: call it once every mode
 * has run the forward. */
void compare_next_forward(compare_baseline *b);

/* How far one mode is from the baseline over the whole session. Outputs are
 * held to the output bound as one tensor: every block compared goes into
 * one total, which compare_outputs_finish holds to the bound (a block with
 * a non-finite value fails at once); final states, each one tensor, to bit
 * equality and, separately, to the state bound. */
typedef struct compare_difference {
    int64_t blocks;            /* output blocks compared */
    int64_t states;            /* (request, layer) final states compared */
    int64_t unmatched;         /* blocks or states the baseline does not have */
    int outputs_identical;     /* every compared block bit for bit */
    int outputs_within_bound;  /* set by compare_outputs_finish (and by a NaN) */
    double max_output_rel_rms; /* the total's relative RMS, once finished; NaN sticks */
    int64_t max_output_ulps;   /* bf16 activations only: shown, never bounded */
    bound_total outputs;       /* every compared output so far */
    int states_identical;      /* matrix states bit for bit */
    int windows_identical;     /* conv windows bit for bit */
    int states_within_bound;
    double max_state_rel_rms;
} compare_difference;

/* Nothing compared yet: identical and within bounds. */
void compare_difference_init(compare_difference *d);

/* Compares a block or final state of another mode with the baseline's. */
void compare_output(const compare_baseline *b, compare_difference *d,
                    const session_block *block);
void compare_final_state(const compare_baseline *b, compare_difference *d, int32_t request,
                         int32_t layer, const void *window, const void *state);

/* Holds the outputs compared so far, as one tensor, to the output bound:
 * sets outputs_within_bound and max_output_rel_rms from the total. Call it
 * when a tensor's blocks are all in: at the end of a session (`run
 * --modes`), after each (request, layer) (serve's check). */
void compare_outputs_finish(const compare_baseline *b, compare_difference *d);

#endif
