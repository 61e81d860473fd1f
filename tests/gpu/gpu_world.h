/* Contexts side by side for the GPU suites: a "world" holds two or three
 * contexts ("sides": CPU or CUDA) of one model, the same lanes (requests)
 * acquired in each, shared random weights, and rules that hold one side to
 * another ("pairs"). A "step" is one prefill, decode or verify+commit with
 * one set of rows and inputs, run on every side through the public API and
 * compared afterwards.
 *
 * Failures are recorded in the world (world_fail): every function that can
 * fail returns 1 on success and 0 after recording why, so a case can chain
 * calls with && and stop at the first failure. The first MAX_MESSAGES
 * reasons are printed as "# desc [op, step N]: why". CUDA sides share one
 * stream (w->stream, a created, blocking stream); CPU sides run at once. */
#ifndef SSM_TESTS_GPU_WORLD_H
#define SSM_TESTS_GPU_WORLD_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "tests/gpu/gpu_util.h"
#include "tests/spec_bounds.h"
#include "tests/testutil.h"

#define MAX_LAYERS 3
#define MAX_LANES 5
#define MAX_ROWS 12 /* rows of a step, padding included: past a one-launch decode's 8 */
#define MAX_SIDES 3
#define CAPACITY 6     /* slots per context */
#define T_MAX 4        /* max_draft_tokens 3, unless the variant asks for another */
#define SENTINEL 0xA5  /* fills every output buffer before a step */
#define MAX_MESSAGES 6 /* failure reasons printed per case */

/* The mode under test: replay with `[replay] outputs = identity` or the
 * default (exact); replay always with history 2 T_max (rounds fold often), and with
 * `fold_rows = 0` (decode keeps the ring) unless fold_every_step asks for
 * the default (decodes of the test's few rows fold every step). */
typedef struct variant {
    const char *mode;
    int identity;
    int fold_every_step;
    /* Every side's config has the [replay] section, so creating a native or
     * compact context loads the replay plugin to check it and closes it
     * again before the context's first kernel (docs/abi.md, "Loading"). */
    int replay_section;
    int t_max; /* verify width (max_draft_tokens + 1); 0: T_MAX */
    /* The CUDA sides prefill under prefill_precision = fast (the CPU's is
     * fp32 either way); CPU-vs-CUDA pairs take the fast prefill's bound. */
    int fast_prefill;
} variant;

typedef struct setup {
    ssm_model_dims m;
    ssm_dtype sd, ad; /* state, activations */
} setup;

typedef enum rule { RULE_BITWISE, RULE_BOUND } rule;

/* One context and where each lane lives in it. */
typedef struct side {
    const char *name;
    ssm_ctx *ctx;
    int cuda;
    int32_t slot[MAX_LANES];
    int32_t spare; /* acquired, never in a batch; -1 when none */
    /* its [replay] section */
    const char *section_names[1];
    int32_t section_lines[1], options_count[1];
    ssm_mode_option options[3];
    const ssm_mode_option *option_rows[1];
} side;

/* What side `got` must satisfy against side `ref`: decode and verify
 * outputs, prefill outputs, exported states. Conv windows always bit for bit. */
typedef struct pair {
    int got, ref;
    rule outputs, prefill, states;
    /* RULE_BOUND's bounds (tests/spec_bounds.h): spec_bound_vs_native when
     * both sides are on one device, spec_bound_cpu_vs_cuda and
     * spec_bound_cpu_vs_cuda_state when not. */
    spec_bound bound, state_bound;
    spec_total total[MAX_LAYERS]; /* outputs under RULE_BOUND, over the session */
} pair;

typedef struct world {
    test_rng rng;
    ssm_model_dims m;
    ssm_dtype sd, ad;
    variant v;
    int32_t t_max;    /* the variant's verify width */
    char history[16]; /* replay's history, 2 t_max, as the config option's text */
    int sides, pairs, lanes;
    side side[MAX_SIDES];
    pair pair[MAX_SIDES];
    int dirty[MAX_LANES]; /* state undefined after bad input, until reset */
    test_weights hw[MAX_LAYERS];
    gpu_weights dw[MAX_LAYERS];
    cudaStream_t stream;
    char desc[256];
    const char *op; /* what runs now, for messages */
    int step, failed, messages;
} world;

typedef enum step_kind { STEP_PREFILL, STEP_DECODE, STEP_VERIFY } step_kind;

/* One step's rows, inputs and every side's outputs and metadata. Row r holds
 * tokens start[r] .. start[r + 1] - 1. A side may run a row as padding
 * (slots[s][r] == -1) where another runs it: such rows are in `skip`. */
typedef struct step {
    step_kind kind;
    int32_t rows, tokens, longest; /* tokens: T, or 0 for prefill */
    int32_t lanes[MAX_ROWS];       /* -1: padding */
    int32_t start[MAX_ROWS + 1];
    int skip[MAX_ROWS];                   /* not compared */
    test_io in[MAX_LAYERS];               /* host inputs (their out unused) */
    gpu_inputs din[MAX_LAYERS];           /* device copy, shared by CUDA sides */
    void *out[MAX_SIDES][MAX_LAYERS];     /* host outputs */
    void *out_dev[MAX_SIDES][MAX_LAYERS]; /* CUDA sides' outputs */
    size_t out_bytes;
    int32_t slots[MAX_SIDES][MAX_ROWS]; /* host; slots_host on CUDA */
    int32_t accepted[MAX_SIDES][MAX_ROWS];
    int32_t *offsets_dev, *slots_dev[MAX_SIDES], *accepted_dev[MAX_SIDES];
} step;

/* ------------------------------------------------------------ failures */

/* Marks the world failed and prints why (the first MAX_MESSAGES reasons).
 * Returns 0. */
int world_fail(world *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* 1 when an ssmstate call of side `side` returned SSM_OK, else a failure
 * naming the call, the status and ssm_last_error(). */
int world_expect_ok(world *w, ssm_status got, const char *what, const char *side);

/* 1 when a CUDA call succeeded, else a failure. */
int world_cuda_ok(world *w, cudaError_t e, const char *what);

/* ------------------------------------------------------------ worlds */

/* Against the CPU: side 0 the CPU native reference, side 1 CUDA native and,
 * unless the variant's mode is native, side 2 CUDA of the mode; every side
 * MAX_LANES lanes. Pairs: each CUDA side within the bound of the CPU
 * (outputs and states); side 2 bit-identical to side 1 (outputs within the
 * bound for replay's identity form, prefill still bit for bit). `what`
 * starts the description. Seeded from test_seed() and `salt`. */
int world_open_modes(world *w, const setup *su, variant v, uint64_t salt, const char *what);

/* Replay's default output form on CUDA device 0: side 0 a replay context
 * whose [replay] section has no `outputs` key, side 1 one with outputs =
 * `twin` (the form the default must be: bit-identical to side 0 in
 * everything) and, unless `other` is NULL, side 2 with outputs = `other`
 * (outputs within the bound for one device, prefill and exports bit for
 * bit). Every side MAX_LANES lanes; the variant's fold_every_step and t_max
 * apply. */
int world_open_default_outputs(world *w, const setup *su, variant v, const char *twin,
                               const char *other, uint64_t salt, const char *what);

/* Graph: sides 0 (captured) and 1 (twin), both CUDA contexts of the mode,
 * MAX_LANES - 1 lanes and a spare slot each; side 0 bit-identical to side 1
 * in everything. */
int world_open_graph(world *w, const setup *su, variant v, uint64_t salt, const char *what);

/* Waits for the stream, destroys the contexts and frees the weights. Safe
 * on a world whose open failed part way. */
void world_close(world *w);

/* The stream argument of side s's step calls (NULL on the CPU). */
void *world_stream(const world *w, int s);

/* `count` distinct clean lanes (capped) in random order, with `pads`
 * padding rows (-1) at random positions. Returns the number of rows. */
int32_t world_pick_rows(world *w, int32_t count, int32_t pads, int32_t *lanes);

/* ------------------------------------------------------------ steps */

/* Name of a step kind, for messages. */
const char *step_kind_name(step_kind kind);

/* Host inputs and metadata of a step: random inputs, every side's slots
 * for the lanes, random accepted lengths in [1, T] (the same on every side;
 * 0 on padding rows), outputs filled with SENTINEL. lengths: the prefill
 * rows' lengths, else NULL (every row `tokens` tokens). The caller may
 * change any of it before step_upload. Host allocations are not checked
 * (as in testutil.c). */
step *step_make(world *w, step_kind kind, int32_t tokens, int32_t rows, const int32_t *lanes,
                const int32_t *lengths);

/* Device copies for the CUDA sides: inputs (stream-ordered), offsets, each
 * side's slots and accepted lengths, outputs filled with SENTINEL. */
int step_upload(world *w, step *st);

/* New random inputs and accepted lengths (`pattern` 1: all T; 2: all 1;
 * else random) into the same host and device buffers, stream-ordered: what
 * a captured graph reads at its next launch. */
int step_refill(world *w, step *st, int pattern);

/* Sets row r's slot of side s on the device (stream-ordered) and, when
 * host_too, in the host copy the API reads. */
int step_set_slot(world *w, step *st, int s, int32_t r, int32_t slot, int host_too);

/* Runs the step on side s through the API: every layer, then the commit of
 * a verify (one ticket). CUDA sides get device pointers and the host copies
 * of slots and offsets; stream-ordered. */
int world_run_side(world *w, step *st, int s);

/* Waits for the stream and copies the CUDA sides' outputs to the host. */
int step_fetch(world *w, step *st);

/* step_upload, world_run_side on every side, step_fetch,
 * world_compare_outputs; then frees st. */
int step_finish(world *w, step *st);

/* Waits for the stream and frees everything of st; NULL is fine. */
void step_free(world *w, step *st);

/* ------------------------------------------------------------ comparisons */

/* Every pair's outputs of a fetched step, row block by row block: live rows by
 * the pair's rule (RULE_BITWISE: finite and bit-identical; RULE_BOUND: the
 * numerics contract per block, into the pair's totals, then
 * world_check_totals); padding rows, when both sides are on one device, bit for
 * bit (untouched alike); rows in `skip` not at all. */
int world_compare_outputs(world *w, step *st);

/* The whole-output bound of every pair's totals: once a layer holds
 * SPEC_WHOLE_MIN_ELEMENTS outputs, or always when `final`. */
int world_check_totals(world *w, int final);

/* Side s's canonical copy of `slot` on the host (CUDA: exported into
 * device buffers on the stream, then copied). Release with
 * test_snapshot_free; *out is always initialized. */
int world_snapshot(world *w, int s, int32_t slot, test_snapshot *out);

/* Exports every clean lane on every side and holds each pair to its rule:
 * conv windows bit for bit; states finite and bit for bit, or within the
 * pair's state_bound (per slot and layer; a non-finite value fails). */
int world_compare_exports(world *w);

/* Side s's flags: ssm_slot_flags equal to `expect` on the lanes in `mask`
 * (bit per lane) and 0 on the other lanes, and ssm_ctx_status reporting
 * exactly those. */
int world_expect_flags(world *w, int s, uint32_t mask, uint32_t expect);

#endif
