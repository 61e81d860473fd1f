/* The conformance suite: what any mode plugin must do, checked against the
 * CPU reference (kernels/reference.h) at the numerics contract's bounds
 * (tests/spec_bounds.h, docs/numerics.md: one device's for CPU contexts,
 * CPU against CUDA for CUDA contexts), plus every protocol error of the
 * bad-input rules (docs/reliability.md).
 *
 * A `session` is one context of the plugin under test, on the CPU or on CUDA
 * device 0, with the reference's state per slot (reference.c); the
 * operations below (session.c) drive it the way an engine does and check
 * every output block and, after every step, the canonical export of every
 * acquired slot. Its step calls go through device_io.c, which hands a CPU
 * context host buffers and stages a CUDA context's in device memory. The
 * protocol-error checks (errors.c) inject one bad call into a live session
 * and prove it returned its code and changed nothing. conformance.c
 * assembles the suite for one device. */
#ifndef SSM_TESTS_CONFORMANCE_H
#define SSM_TESTS_CONFORMANCE_H

#include <check.h>
#include <stdint.h>

#include "ssmstate/plugin_v2.h" /* SSM_CAP_*, the ABI versions */
#include "ssmstate/ssmstate.h"
#include "tests/spec_bounds.h"
#include "tests/testutil.h"

/* The plugin under test; main() fills it before the suite runs. */
typedef struct conform_target {
    const char *mode;       /* mode name: the plugin file's basename without .so */
    const char *plugin_dir; /* directory searched first, or NULL for the search path */
    const char *options;    /* "key=value,key=value" for the mode's section, or NULL */
    int32_t max_tokens;     /* ceiling of the verify width T_max drawn per test (1..5) */
    /* The device of the test case running now: set by the case's fixture
     * (conformance.c) before its tests fork. */
    ssm_device_type device;
} conform_target;
extern conform_target conform;

/* The suite on one device's contexts: SSM_DEVICE_CPU, or SSM_DEVICE_CUDA
 * (device 0; only where the build has CUDA, a GPU is visible and the plugin
 * declares SSM_CAP_CUDA: conform_main decides). The CUDA suite's test cases
 * carry a "_cuda" suffix (CK_RUN_CASE=sessions_cuda). */
Suite *conformance_suite(ssm_device_type device);

#define CONFORM_MAX_CAP 5
#define CONFORM_MAX_LAYERS 3
#define CONFORM_MAX_OPTIONS 8
#define CONFORM_MAX_ROWS 8
#define CONFORM_MAX_PREFILL 16 /* longest prefill row */

/* Variant bits of a loop test's index. */
enum {
    VARIANT_KDA = 1,
    VARIANT_GVA = 2,
    VARIANT_STATE_BF16 = 4,
    VARIANT_ACT_F32 = 8,
    VARIANT_ALT = 16 /* KDA: gate lower bound; GDN: the replay mode's matrix outputs */
};
#define CONFORM_VARIANTS 32

typedef struct session {
    test_rng rng;
    /* where the contexts run (device_io.c): CUDA device 0 when `cuda`,
     * with every step call on `stream` (a cudaStream_t) and the weights
     * of each layer in device memory (`device_weights`); the CPU otherwise
     * (both NULL) */
    int cuda;
    void *stream;
    void *device_weights;
    ssm_model_dims m;
    ssm_dtype sd, ad;
    int32_t cap, t_max;
    ssm_config cfg;
    /* the mode's config section, built here (see session_options) */
    const char *section_names[1];
    int32_t section_lines[1], options_count[1];
    ssm_mode_option options[CONFORM_MAX_OPTIONS];
    const ssm_mode_option *option_rows[1];
    char option_text[512];
    ssm_ctx *ctx;
    test_weights *w;             /* [layers] */
    int acquired[CONFORM_MAX_CAP]; /* by slot number */
    /* the reference (reference.c): per slot and layer, window and state */
    size_t window_bytes, state_bytes;
    unsigned char *windows, *states;         /* [cap][layers][...] */
    unsigned char *tail_window, *tail_state; /* a verify's rejected tokens */
    void *ref_out;                           /* reference outputs of one row */
    float *scratch;
    spec_bound out_bound;
    double state_limit;                      /* relative RMS of an exported state */
    spec_total totals[CONFORM_MAX_LAYERS];   /* every output so far, per layer */
    char desc[400];              /* the variant, for failure messages */
    const char *op;              /* the operation running, for failure messages */
    int32_t step;                /* operations so far */
} session;

/* Opens a session of variant bits `variant` with at least `min_layers`
 * layers. Returns 0 (after checking that ssm_ctx_create refuses it) when the
 * plugin does not declare a capability the variant needs; the test then has
 * nothing more to check. */
int conform_session_open(session *s, int variant, uint64_t salt, int32_t min_layers);
/* Checks the whole-tensor output bound one last time and frees. */
void conform_session_close(session *s);

/* The reference (reference.c). ref_open allocates for the session's dims;
 * ref_reset makes a slot's reference fresh; ref_check_row runs n tokens of
 * one row (inputs at io, the library's outputs at io->out) from the slot's
 * reference state in layer l, keeps the first `keep`, and checks the
 * outputs (a prefill's through the chunked form every mode's prefill runs,
 * others token by token); ref_check_export checks an export; ref_check_totals holds the
 * outputs so far to the whole-output bound once there are enough of them, or
 * always when `final`. */
void ref_open(session *s);
void ref_close(session *s);
void ref_reset(session *s, int32_t slot);
void ref_check_row(session *s, const ssm_step_io *io, int32_t l, int32_t row, int32_t slot,
                   int64_t n, int64_t keep, int prefill);
void ref_check_export(session *s, int32_t slot, const test_snapshot *snap);
void ref_check_totals(session *s, int final);

/* Device staging (device_io.c): the API's calls as an engine makes them on
 * the session's device. On the CPU each hands the host buffers straight to
 * the API, with no stream. On CUDA the engine's buffers are caller-owned
 * device memory: a step call uploads its inputs and its outputs as they
 * stand (so bytes it must not write keep their sentinel), runs on the
 * session's stream with the layer's device weights, waits, and copies the
 * outputs back into io->out, whatever the status. The CUDA runtime is only
 * called in a build with CUDA, inside a test (after Check's fork). Any
 * CUDA failure fails the test. */

/* Makes the device side of an open session: on CUDA a stream and the
 * weights in device memory; nothing on the CPU. staged_close waits for the
 * stream and releases them (before the contexts are destroyed). */
void staged_open(session *s);
void staged_close(session *s);

/* `n` int32 values of batch metadata (slots, token offsets, accepted
 * lengths) where the session's contexts read them: the host array itself
 * on the CPU; on CUDA a device copy, uploaded at once. A forward keeps one
 * copy of its slots from its first verify to its commit: the core checks
 * that every layer and the commit present the same buffer. staged_array_free
 * waits for the stream first; NULL is fine. */
const int32_t *staged_array(session *s, const int32_t *host, int32_t n);
void staged_array_free(session *s, const int32_t *array);

/* The step calls with the layer's weights on the session's device. Batches
 * come in the context's form: slots (and token offsets) from staged_array,
 * slots_host (and token_offsets_host) the host arrays; io holds host
 * buffers. */
ssm_status staged_prefill(session *s, ssm_ctx *ctx, int32_t l, const ssm_prefill_batch *b,
                          const ssm_step_io *io);
ssm_status staged_decode(session *s, ssm_ctx *ctx, int32_t l, const ssm_batch *b,
                         const ssm_step_io *io);
ssm_status staged_verify(session *s, ssm_ctx *ctx, int32_t l, const ssm_batch *b,
                         const ssm_step_io *io, ssm_ticket *ticket);
/* ssm_commit with the host lengths of `rows` rows (NULL: none), staged like
 * a batch's metadata. On CUDA the commit kernel checks them, not the host. */
ssm_status staged_commit(session *s, ssm_ctx *ctx, const ssm_ticket *ticket,
                         const int32_t *accepted, int32_t rows);
/* test_snapshot_take on the session's device: a CUDA context exports into
 * device buffers on the stream (tests/gpu/gpu_util.h's gpu_snapshot_take),
 * then the copy comes to the host. *out is always initialized. */
ssm_status staged_export(session *s, ssm_ctx *ctx, int32_t slot, test_snapshot *out);

/* Acquires a slot (expected fresh: zero export) and resets its reference. */
int32_t session_acquire(session *s);
/* Releases a slot: SSM_OK, and the pool shrinks by one. */
void session_release(session *s, int32_t slot);
int32_t session_count_acquired(const session *s);
/* A random acquired slot, or -1 if none. */
int32_t session_pick_slot(session *s);

/* Random rows for a batch: `live` distinct acquired slots in random order
 * with `pads` padding rows (-1) at random positions; returns the row count. */
int32_t session_rows(session *s, int32_t live, int32_t pads, int32_t *rows);

/* Exports every acquired slot and compares it with its reference (window
 * bitwise, state within the bound); checks pool accounting, that no slot is
 * flagged, and the outputs' running totals. */
void session_check_slots(session *s);

/* Every acquired slot's flags: `flag` among those of slot `flagged`, none on
 * the others. */
void session_expect_flagged(session *s, int32_t flagged, uint32_t flag);

/* Exports every acquired slot not marked in busy (NULL: none) into
 * snaps[slot] (empty entries for the others); the second compares two such
 * sets bit for bit. */
void session_snapshots(session *s, const int *busy, test_snapshot *snaps);
void session_snapshots_equal(session *s, const test_snapshot *a, const test_snapshot *b,
                             const char *what);
void session_snapshots_free(session *s, test_snapshot *snaps);

/* Fresh inputs of n tokens per layer with outputs filled with a sentinel. */
test_io *session_ios(session *s, int64_t n);
void session_ios_free(session *s, test_io *ios);
size_t session_out_bytes(const session *s, int64_t tokens);
/* Outputs of tokens [t0, t1) of every layer still hold the sentinel. */
void session_assert_sentinel(session *s, const test_io *ios, int64_t t0, int64_t t1,
                             const char *what);

/* One forward: verify T tokens over rows (all layers), then commit. */
typedef struct forward {
    int32_t rows, T;
    int32_t slots[CONFORM_MAX_ROWS];
    int32_t accepted[CONFORM_MAX_ROWS];
    const int32_t *staged_slots; /* slots where the context reads them (staged_array) */
    test_io *io;
    ssm_ticket ticket;
} forward;
/* Picks T, rows (live acquired slots not in `busy`, plus padding) and
 * accepted lengths; makes inputs. busy may be NULL. */
void forward_begin(session *s, forward *f, int32_t T, int32_t live, int32_t pads,
                   const int *busy);
/* The same with the rows given. */
void forward_setup(session *s, forward *f, int32_t T, int32_t rows, const int32_t *slots);
/* Marks the live slots of f in busy[CONFORM_MAX_CAP]. */
void forward_busy(const forward *f, int *busy);
void forward_verify(session *s, forward *f, int32_t l0, int32_t l1);
/* Commits (SSM_OK), checks every verified output block against the
 * reference (all T tokens on a copy; the reference keeps the accepted ones)
 * and the padding rows' untouched outputs. */
void forward_commit(session *s, forward *f);
/* forward_commit's checks after a commit, every row but skip_row (-1:
 * none), which neither the reference nor the check sees. */
void forward_check(session *s, forward *f, int32_t skip_row);
void forward_free(session *s, forward *f);

/* The engine's operations, each checked against the reference. */
void op_prefill(session *s);
void op_decode(session *s);
void op_verify(session *s);
void op_verify_two_forwards(session *s);
void op_reset(session *s);
void op_release_reacquire(session *s);
void op_nonfinite(session *s);
void op_abort(session *s);
/* One random operation (errors included when with_errors); then checks. */
void op_random(session *s, int with_errors);

/* Protocol errors (errors.c): each injects bad calls, expects their codes
 * and proves nothing changed; the session stays usable. */
void error_stale(session *s);
void error_repeated(session *s);
void error_foreign(session *s);
void error_accepted_range(session *s);
void error_second_verify(session *s);
void error_slot_range(session *s);
void error_not_acquired(session *s);
void error_duplicate_slot(session *s);
void error_tokens_range(session *s);
void error_incomplete(session *s);
void error_random(session *s);

/* Asserts a call's exact status, naming the call, the variant and the
 * library's message. */
#define CONFORM_EXPECT(s, call, want)                                                         \
    do {                                                                                      \
        ssm_status got_ = (call);                                                             \
        ck_assert_msg(got_ == (want), "%s [%s, step %d]: %s: got %s, want %s (%s)",           \
                      (s)->desc, (s)->op, (s)->step, #call, ssm_status_name(got_),            \
                      ssm_status_name(want), ssm_last_error());                               \
    } while (0)

/* The suite's command line (main.c): `PLUGIN.so|MODE [key=value,...]` in
 * argv[1] and argv[2], or the environment; `devices` is "cpu", "cuda" or
 * "all" (NULL: $SSM_CONFORM_DEVICE, else all). Returns the exit status of
 * check_conformance (0 passed, 1 a test failed or bad usage,
 * CONFORM_NOT_A_PLUGIN, CONFORM_NO_DEVICE). */
int conform_main(int argc, char **argv, const char *devices);
/* conform_main's status when the target is no plugin that loads (one line
 * said why; no test ran). */
#define CONFORM_NOT_A_PLUGIN 2
/* conform_main's status when only CUDA was asked for and CUDA contexts cannot
 * run: no CUDA in the build, no GPU visible, or a plugin without
 * SSM_CAP_CUDA (one line said which; no test ran). Automake's SKIP. */
#define CONFORM_NO_DEVICE 77

#endif
