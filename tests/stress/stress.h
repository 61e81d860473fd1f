/* Model-based stress sessions (docs/reliability.md): the types every part
 * shares.
 *
 * A session is one small random model (GDN or KDA, GVA, fp32/bf16 state and
 * activations) served by two CPU contexts: `c[0]` of the mode under test and
 * `c[1]` of another mode, the peer pages and tickets travel to. For every
 * slot of both the model keeps the conv window and matrix state the CPU
 * reference reaches (model.c), a copy of the context's ticket book
 * (book.c), and the forwards it holds open. Operations (ops.c, pages.c,
 * errors.c) drive the library and the model side by side; after every one
 * session.c checks the whole of it. A failed check prints the seed, the
 * operation and a command that replays it, then longjmps out of the
 * session. */
#ifndef SSM_TESTS_STRESS_H
#define SSM_TESTS_STRESS_H

#include <setjmp.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "tests/spec_bounds.h"
#include "tests/testutil.h"

#define ST_MAX_CAP 6
#define ST_MAX_LAYERS 3
#define ST_MAX_ROWS 8      /* rows of a batch, padding included */
#define ST_MAX_PREFILL 150 /* longest prefill row (more than two 64-token chunks) */
#define ST_OPEN 2          /* forwards a context holds open at once */
#define ST_OLD_TICKETS 8   /* closed tickets remembered to present again */
#define ST_PAGES 4         /* saved pages (checkpoints) */
#define ST_BOOK_RING 256   /* core/tickets.h SSM_FORWARD_HISTORY */

/* ------------------------------------------------------------ counters */

/* What a run did, summed over sessions (driver.c prints it). */
typedef struct st_counts {
    int64_t sessions, ops, calls;
    int64_t errors[SSM_ERR_INTERNAL + 1]; /* rejected calls, by status */
    int64_t prefill_tokens, verify_rounds, page_moves, copies, aborts;
    double worst_out, worst_state; /* largest share of a relative-RMS bound used */
} st_counts;

/* ------------------------------------------------------------ tickets */

enum { BOOK_UNUSED, BOOK_OPEN, BOOK_COMMITTED, BOOK_ABORTED };

typedef struct st_book_fwd {
    uint64_t id;
    int state, superseded;
    int32_t rows, tokens;
} st_book_fwd;

/* The model of core/tickets.c's book: which status a ticket presented now
 * must get. */
typedef struct st_book {
    uint64_t context_id, last;
    st_book_fwd ring[ST_BOOK_RING];
    uint64_t slot_latest[ST_MAX_CAP];
} st_book;

/* ------------------------------------------------------------ contexts */

/* An open forward. Never moved while open: the library keeps `slots`. */
typedef struct st_fwd {
    int open;
    int32_t rows, T, layers_done;
    int32_t slots[ST_MAX_ROWS];
    uint8_t done[ST_MAX_LAYERS];
    test_io io[ST_MAX_LAYERS];
    ssm_ticket ticket;
} st_fwd;

typedef struct st_ctx {
    ssm_ctx *ctx;
    const char *mode;
    ssm_config cfg;
    const char *section_names[1];
    int32_t section_lines[1], options_count[1];
    ssm_mode_option options[2];
    const ssm_mode_option *option_rows[1];
    char history[16], desc[96];
    int acquired[ST_MAX_CAP];
    unsigned char *windows, *states; /* the model: [cap][layers][...] */
    spec_total totals[ST_MAX_LAYERS];
    st_book book;
    st_fwd fwd[ST_OPEN];
    ssm_ticket old[ST_OLD_TICKETS]; /* closed tickets, newest at old_next - 1 */
    int32_t old_next, old_count;
    ssm_ticket ancient; /* the first closed ticket: stale once the ring turns */
} st_ctx;

/* A saved page with the model's lane at the time. */
typedef struct st_page {
    int used;
    unsigned char *page, *lane;
} st_page;

typedef struct st_session {
    test_rng rng;
    uint64_t seed;
    const char *mode;
    ssm_model_kind kind;
    ssm_model_dims m;
    ssm_dtype sd, ad;
    int32_t cap, t_max;
    test_weights w[ST_MAX_LAYERS];
    st_ctx c[2];
    ssm_ctx *alien; /* another model: its pages must be refused */
    size_t window_bytes, state_bytes, page_bytes, alien_page_bytes;
    st_page pages[ST_PAGES];
    void *ref_out;
    unsigned char *tail_window, *tail_state, *lane_scratch;
    float *scratch;
    spec_bound out_bound;
    double state_limit;
    int64_t op, ops;
    const char *op_name;
    st_counts *count;
    jmp_buf fail;
    int verbose;
    char desc[400];
} st_session;

/* ------------------------------------------------------------ session.c */

/* Opens a session of `mode` and `kind` from `seed`; runs `ops` operations
 * in run_session. Returns 0 when the session passed, 1 when a check failed
 * (the failure is already printed). */
int st_run_session(uint64_t seed, const char *mode, ssm_model_kind kind, int64_t ops,
                   st_counts *count, int verbose);

/* Prints a failed check (with the replay command) and leaves the session. */
_Noreturn void st_fail(st_session *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Checks everything the model knows after an operation: each idle slot's
 * export, pool accounting, flags and the output totals, in both contexts. */
void st_check_all(st_session *s);

/* Acquired slots of a context that are in no open forward, as a mask and a
 * count; a random one of them, or -1. */
int32_t st_idle_slots(const st_session *s, int ci, int *idle);
int32_t st_pick_idle(st_session *s, int ci);
int32_t st_pick_free(const st_session *s, int ci);
int32_t st_count_acquired(const st_session *s, int ci);
/* Slot -> open forward index holding it, or -1. */
int st_busy_in(const st_session *s, int ci, int32_t slot);

/* Expects a status; counts the call (and the rejection when want != OK). */
#define ST_EXPECT(s, call, want)                                                              \
    do {                                                                                      \
        ssm_status got_ = (call);                                                             \
        (s)->count->calls++;                                                                  \
        if (got_ != (want))                                                                   \
            st_fail((s), "%s: got %s, want %s (%s)", #call, ssm_status_name(got_),            \
                    ssm_status_name(want), got_ ? ssm_last_error() : "no error");            \
        if ((want) != SSM_OK)                                                                 \
            (s)->count->errors[(want)]++;                                                     \
    } while (0)

/* ------------------------------------------------------------ model.c */

void st_model_open(st_session *s);
void st_model_close(st_session *s);
unsigned char *st_model_window(const st_session *s, int ci, int32_t slot, int32_t l);
unsigned char *st_model_state(const st_session *s, int ci, int32_t slot, int32_t l);
void st_model_reset(st_session *s, int ci, int32_t slot);
/* Whole lane (every layer's window and state) to and from bytes. */
size_t st_model_lane_bytes(const st_session *s);
void st_model_save(const st_session *s, int ci, int32_t slot, unsigned char *lane);
void st_model_load(st_session *s, int ci, int32_t slot, const unsigned char *lane);
/* Runs n tokens (inputs at io, the library's outputs at io->out) of one row
 * from the lane in layer l, keeps the first `keep`, checks the outputs. */
void st_model_row(st_session *s, int ci, int32_t slot, int32_t l, const ssm_step_io *io,
                  int64_t n, int64_t keep, int prefill);
/* Exports the slot and compares it with the lane (window bitwise, state
 * within the numerics contract). */
void st_model_check_slot(st_session *s, int ci, int32_t slot);
/* Holds the context's outputs so far to the whole-output bound. */
void st_model_check_totals(st_session *s, int ci, int final);

/* ------------------------------------------------------------ book.c */

void st_book_init(st_book *b, uint64_t context_id);
ssm_status st_book_judge(const st_book *b, const ssm_ticket *t);
void st_book_open(st_book *b, const ssm_ticket *t, const int32_t *slots);
void st_book_close(st_book *b, const ssm_ticket *t, int state);
void st_book_forget(st_book *b, int32_t slot);

/* ------------------------------------------------------------ ops.c */

/* Inputs of n tokens per layer, outputs filled with a sentinel. */
void st_ios_make(st_session *s, test_io *io, int64_t n);
void st_ios_free(st_session *s, test_io *io);
void st_assert_sentinel(st_session *s, const test_io *io, int64_t t0, int64_t t1,
                        const char *what);
ssm_step_io st_io_at(const st_session *s, const ssm_step_io *io, int64_t t);
/* Rows of idle slots of context ci: `live` of them at most, `pads` padding
 * rows; returns the row count. */
int32_t st_rows(st_session *s, int ci, int32_t live, int32_t pads, int32_t *rows);
int32_t st_random_pads(st_session *s);

/* Engine operations on context ci, each checked against the model as it
 * runs; each returns 0 when its preconditions do not hold (nothing ran). */
int op_acquire(st_session *s, int ci);
int op_release(st_session *s, int ci);
int op_reset(st_session *s, int ci);
int op_prefill(st_session *s, int ci);
int op_decode(st_session *s, int ci);
int op_verify_open(st_session *s, int ci);
int op_verify_more(st_session *s, int ci);
int op_commit(st_session *s, int ci);
int op_abort(st_session *s, int ci);
int op_copy(st_session *s, int ci);
/* burst.c: a decode phase, many rounds over the same rows. */
int op_burst(st_session *s, int ci);
/* Index of a free forward entry of ci, or -1; of a random open one (with
 * fewer than all layers verified when `incomplete`), or -1. */
int st_fwd_free(const st_session *s, int ci);
int st_fwd_pick_open(st_session *s, int ci, int incomplete);
/* Decodes `rows` (idle slots and padding) of ci on every layer, checked. */
void st_decode_rows(st_session *s, int ci, int32_t n, const int32_t *rows);
/* Opens a forward over `rows` of ci (idle slots and padding), T at random,
 * and verifies `layers` of its layers; its index, or -1 when no entry is
 * free. */
int st_fwd_begin(st_session *s, int ci, int32_t n, const int32_t *rows, int32_t layers);
/* Verifies the layers left of forward fi, commits it with random accepted
 * lengths and checks every verified output, the model keeping the accepted
 * tokens. */
void st_fwd_commit(st_session *s, int ci, int fi);
/* Opens a forward over idle rows of ci (a live one at least when
 * need_live) and verifies `layers` of its layers; its index, or -1 when no
 * entry or idle slot is left. */
int st_fwd_open(st_session *s, int ci, int32_t layers, int need_live);
/* Verifies `n` more layers (at random among those left) of forward fi. */
void st_fwd_verify(st_session *s, int ci, int fi, int32_t n);
/* Closes forward fi of ci after its commit or abort (tickets remembered). */
void st_fwd_close(st_session *s, int ci, int fi, int book_state);

/* ------------------------------------------------------------ pages.c */

int op_page_move(st_session *s);
int op_pages_batch(st_session *s);
int op_page_save(st_session *s);
int op_page_restore(st_session *s);
void st_pages_free(st_session *s);

/* ------------------------------------------------------------ errors.c */

/* One protocol error (docs/reliability.md), chosen at random, proved to return
 * its code and change nothing. */
int op_error(st_session *s);

#endif
