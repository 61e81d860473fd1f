/* The simulated serving session behind `ssmstate run`: requests from the
 * config's [workload] flow through a context's slots (prefill in chunks, then
 * decode or MTP verify + commit rounds, slots released and reused), every
 * output checked against the CPU reference. */
#ifndef SSM_TOOLS_SESSION_H
#define SSM_TOOLS_SESSION_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "workload.h"

/* One row's outputs for one layer, as the library just wrote them. */
typedef enum session_step_kind {
    SESSION_PREFILL,
    SESSION_DECODE,
    SESSION_VERIFY
} session_step_kind;

typedef struct session_block {
    int32_t request;
    int32_t layer;
    session_step_kind kind;
    int32_t tokens;  /* the row's tokens: a prompt chunk, or T */
    int32_t keep;    /* tokens it commits: the chunk, or the accepted length */
    int32_t first;   /* the request's position of the row's first token */
    int32_t rows;    /* rows of the library call's batch, padding included */
    const void *out; /* [tokens][HV][V] in the activation dtype; valid during the call */
} session_block;

/* Sees what a session computes, for comparing it with another run of the
 * same workload: every real row's output block right after its library call,
 * and each finished request's exported final state, layer by layer. */
typedef struct session_observer {
    void *user;
    void (*output)(void *user, const session_block *block);
    /* window [W-1][D] activation dtype, state [HV][V][K] state dtype */
    void (*final_state)(void *user, int32_t request, int32_t layer, const void *window,
                        const void *state);
} session_observer;

typedef struct session_options {
    const workload *workload;         /* the session's requests (the config's [workload]) */
    const char *dump_dir;             /* NULL: no dump */
    int show_progress;                /* draw the progress bar (on a terminal only) */
    const session_observer *observer; /* NULL: none */
    /* Checkpoints (session_checkpoint.c): resume from load_dir before the
     * first forward; stop after stop_after forwards (0: run to the end) and
     * save to save_dir. */
    const char *load_dir, *save_dir;
    int64_t stop_after;
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
    double wall_seconds;      /* in the session's calls, checks included */
    double library_seconds;   /* inside prefill/decode/verify/commit calls */
    /* checks */
    int64_t output_blocks;    /* (row, layer) output blocks compared */
    int64_t final_states;     /* (request, layer) exported states compared */
    int64_t violations;
    double max_rel_error;     /* the worst layer's whole output; NaN if any was NaN */
    double max_state_rel_error;
    int64_t max_ulps;         /* bf16 activations: largest distance, shown, never bounded */
    const char *bound;        /* the output bound in words (over a layer's whole output) */
    char first_violation[256];
    uint32_t status_flags;    /* ssm_ctx_status() at the end */
} session_summary;

/* 1 when a finished session met every check: no violation, no status flag,
 * no NaN. */
int session_passed(const session_summary *s);

/* Runs the whole workload (opt->workload) on ctx. Returns CLI_EXIT_OK when the
 * session ran to the end (the checks' outcome is in *out), or an exit code
 * after printing why it could not. */
int session_run(ssm_ctx *ctx, const session_options *opt, session_summary *out);

/* The same, one forward at a time, so several sessions can run in lockstep.
 * The schedule is a pure function of the workload and max_requests,
 * so sessions of one config on different modes make the same forwards.
 *
 * session_open prepares a session on ctx (which must outlive it) writing its
 * summary into *out; session_forward runs the next forward and finishes the
 * requests it completes; session_close reads the context's status flags,
 * ends the dump, frees the session, and returns exit_code (or its own error
 * when exit_code is CLI_EXIT_OK). Each returns CLI_EXIT_OK or an exit code
 * after printing the error; wall_seconds sums the time spent in them. */
typedef struct session session;
int session_open(ssm_ctx *ctx, const session_options *opt, session_summary *out,
                 session **result);
int session_forward(session *s);
int32_t session_finished(const session *s); /* requests finished so far */
int session_close(session *s, int exit_code);

/* Writes the session's checkpoint to dir (created with its parents if
 * missing): where the schedule is, and every busy lane's slot as a page and
 * its reference state. session_load reads one back into a session just
 * opened on a config of the same model and workload (any mode), refusing
 * any field outside what that workload can reach. Each returns CLI_EXIT_OK
 * or an exit code after printing the error. */
int session_save(session *s, const char *dir);
int session_load(session *s, const char *dir);

#endif
