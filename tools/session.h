/* The simulated serving session behind `ssmstate run`: requests from the
 * config's [workload] flow through a context's slots (prefill in chunks, then
 * decode or MTP verify + commit rounds, slots released and reused), every
 * output checked against the CPU reference. */
#ifndef SSM_TOOLS_SESSION_H
#define SSM_TOOLS_SESSION_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"

typedef struct session_options {
    const char *dump_dir; /* NULL: no dump */
    int show_progress;    /* draw the progress bar (on a terminal only) */
} session_options;

typedef struct session_summary {
    int32_t requests;
    int32_t lanes;            /* requests served concurrently at most */
    int32_t tokens_per_row;   /* T of a decode (1) or verify round */
    int64_t forwards;
    int64_t prefill_tokens;
    int64_t rounds;           /* decode or verify rows of real requests */
    int64_t round_tokens;     /* tokens in those rows (rows * T) */
    int64_t padding_rows;
    int64_t accepted_tokens;  /* committed decode tokens */
    double wall_seconds;
    double library_seconds;   /* inside prefill/decode/verify/commit calls */
    /* checks */
    int64_t output_blocks;    /* (row, layer) output blocks compared */
    int64_t final_states;     /* (request, layer) exported states compared */
    int64_t violations;
    double max_rel_error;     /* over outputs; NaN if any was NaN */
    double max_state_rel_error;
    int64_t max_ulps;         /* bf16 activations over fp32 state only */
    const char *bound;        /* the output bound in words */
    char first_violation[256];
    uint32_t status_flags;    /* ssm_ctx_status() at the end */
} session_summary;

/* Runs the whole workload on ctx (a CPU context). Returns CLI_EXIT_OK when the
 * session ran to the end (the checks' outcome is in *out), or an exit code
 * after printing why it could not. */
int session_run(ssm_ctx *ctx, const session_options *opt, session_summary *out);

#endif
