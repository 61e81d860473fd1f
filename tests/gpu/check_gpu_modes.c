/* The three modes on a CUDA context (docs/numerics.md, docs/reliability.md),
 * against the CPU reference and against each other, on fresh random inputs:
 *
 * 1. modes: a CPU context of the native mode (the reference), a CUDA native
 *    context and, for compact and replay, a CUDA context of that mode run one
 *    seeded session (same weights, inputs, rows, accepted lengths): prefill of
 *    variable lengths (an empty row, padding rows, rows past two of the CUDA
 *    prefill's pieces of 64 tokens), then decode steps, verify
 *    rounds of T = 4 with accepted lengths 1..4, resets and re-acquired slots,
 *    more prefill chunks. After every step each CUDA context's outputs are
 *    within the numerics contract's CPU-vs-CUDA bound of the CPU's
 *    (tests/spec_bounds.h: relative RMS over the session's output per
 *    layer, <= 1e-4 for fp32 outputs and <= 5e-4 for bf16 ones over an fp32
 *    state, <= 1e-2 over a bf16 state; nothing per element), and every
 *    slot's export is: the conv window bit for bit (it holds copies of
 *    inputs), the matrix state within relative RMS 1e-4 (fp32 state) or
 *    1e-2 (bf16 state) per slot and layer; both sides prefill through the
 *    chunked form. No flag may be raised. CPU and CUDA round every conv
 *    output to bf16 alike, since both run one SiLU (kernels/math.h's
 *    ssm_expf): with the libraries' expf, a few ulps apart, a conv output
 *    would now and then round to the neighbouring bf16 value, and every
 *    later state with it.
 * 2. On the GPU, compact's outputs and exports are bit-identical to native's
 *    after every step; replay's exports (materialized: its ring folded into
 *    the copy) too, and its outputs with `outputs = exact`; with `outputs =
 *    identity` (fp32 state only) within the bound for any output form
 *    against native's on one device (relative RMS <= 1e-5 for fp32 outputs,
 *    <= 2e-4 for bf16 ones), prefill still bit for bit. Every replay
 *    context of these cases names its form. Replay runs with history
 *    2 T_max (8): every verify round after committed history folds. Also
 *    with T_max = 8 (history 16) on two shapes in every mode, and with conv
 *    widths 2, 3 and 6 (every other case has 4). Native and replay's
 *    identity also run value heads of 160 rows, and two shapes at K = 128
 *    that the identity kernel reading the checkpoint into registers takes
 *    (identity_direct.cuh): KDA, and GDN with value heads of 256 rows.
 * 3. graph: two CUDA contexts of one mode, the same prefill; one full round
 *    (ssm_verify of every layer with one ticket, then ssm_commit) of the first
 *    is captured on a non-default stream into a CUDA graph and replayed 24
 *    times, each time after new device inputs (x, gate, beta) and accepted
 *    lengths were copied in; the twin runs the same rounds through the API.
 *    Outputs and exports bit-identical after every round. The host ticket
 *    protocol of the captured context ran once, at capture.
 * 4. bad device metadata and inputs: a verify whose device accepted lengths
 *    hold 0 and T + 1 for two rows flags those slots SSM_FLAG_BAD_ACCEPTED and
 *    commits the others as the CPU commits them (the CPU runs those rows as
 *    padding); a graph replay whose device slots name capacity + 3 in one row
 *    raises SSM_FLAG_BAD_SLOT in ssm_ctx_status and changes no other slot
 *    (the twin runs that row as padding; the row's own slot and an acquired
 *    slot outside the batch export as before); a NaN in one row's x (a
 *    decode, verify or prefill) flags that slot SSM_FLAG_NONFINITE_INPUT and
 *    no other, whose outputs still match. A reset clears the flags.
 * 5. long prompt: as 1, two lanes prefill 4096 and 300 tokens over 2 to 5
 *    calls, exports compared after every call, then decodes and
 *    verifies from there; every mode, Qwen3-Next's head shape with an fp32
 *    state and KDA with the lower bound with a bf16 state.
 *    Again with every CUDA side under prefill_precision = fast (bf16
 *    products in the tensor-core prefill): the CUDA modes still agree bit
 *    for bit, the CPU within 1e-2 (each side within 5e-3 of fp64).
 * 6. another mode's section: as 1 for native and compact, every config with
 *    a [replay] section, so each context's creation loads the replay plugin
 *    to check it and closes it before the context's first kernel.
 * 7. replay's default output form: a CUDA replay context without [replay]
 *    outputs runs a session beside one that asks for identity and one that
 *    asks for exact. Over an fp32 state its outputs and exports are the
 *    identity context's bit for bit, its outputs differ from exact's
 *    somewhere (else the case could not tell the forms apart) and stay
 *    within the bound for one device; over a bf16 state they are exact's
 *    bit for bit, and a context that asks for identity is refused.
 * 8. verify widths mixed: as 1, rounds of T_max (one launch) and a round of
 *    one token over 12 rows, padding included (two launches), so a compact
 *    commit follows a verify that wrote either record set; then rounds of 2
 *    and 3 tokens. Replay's identity also on the two K = 128 shapes, every
 *    token count of the register kernel.
 * Any non-finite output or state where a finite one is expected fails.
 *
 * A plain program for Automake's plain driver (tests/gpu/gpu_modes.gpu): one
 * TAP-like line per case; exit 0 when all pass, 1 on any failure, 77 when no
 * CUDA device is visible (checked before anything else). SSM_TEST_SEED
 * replays a run. The CUDA kernels take key_dim 32, 64 or 128 only. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "tests/gpu/gpu_world.h"

#define MAX_PREFILL 12
#define LONG_PREFILL 150 /* past two of the chunked prefill's pieces of 64 */
#define LONG_PROMPT 4096 /* the longest prompt of the prefill tests (case 5) */
#define SESSION_OPS 14
#define GRAPH_ROUNDS 24

/* ------------------------------------------------------------ operations */

/* A prefill chunk: random lanes (every clean lane when `all`), lengths 0,
 * at most W - 1, up to MAX_PREFILL, or 65 to LONG_PREFILL (several of the
 * CUDA prefill's pieces); one row empty when `empty`. */
static int op_prefill(world *w, int all, int empty)
{
    w->op = "prefill";
    int32_t lanes[MAX_ROWS], lengths[MAX_ROWS];
    int32_t count = all ? w->lanes : test_rng_int(&w->rng, 1, w->lanes);
    int32_t rows = world_pick_rows(w, count, test_rng_int(&w->rng, 0, 2), lanes);
    for (int32_t r = 0; r < rows; r++) {
        int k = test_rng_int(&w->rng, 0, 4);
        lengths[r] = k == 0   ? 0
                     : k == 1 ? test_rng_int(&w->rng, 1, w->m.conv_width - 1)
                     : k == 4 ? test_rng_int(&w->rng, SSM_CHUNK_TOKENS + 1, LONG_PREFILL)
                              : test_rng_int(&w->rng, 1, MAX_PREFILL);
    }
    if (empty)
        for (int32_t r = 0; r < rows; r++)
            if (lanes[r] >= 0) {
                lengths[r] = 0;
                break;
            }
    return step_finish(w, step_make(w, STEP_PREFILL, 0, rows, lanes, lengths));
}

/* A decode step or a verify round of T_max with random accepted lengths. */
static int op_step(world *w, step_kind kind)
{
    w->op = step_kind_name(kind);
    int32_t lanes[MAX_ROWS];
    int32_t rows =
        world_pick_rows(w, test_rng_int(&w->rng, 1, w->lanes), test_rng_int(&w->rng, 0, 2), lanes);
    return step_finish(w, step_make(w, kind, kind == STEP_DECODE ? 1 : w->t_max, rows, lanes, NULL));
}

/* Makes a lane fresh on every side (CUDA: on the test's stream). */
static int op_reset(world *w, int32_t lane)
{
    w->op = "reset";
    for (int s = 0; s < w->sides; s++)
        if (!world_expect_ok(
                w, ssm_slot_reset(w->side[s].ctx, w->side[s].slot[lane], world_stream(w, s)),
                "ssm_slot_reset", w->side[s].name))
            return 0;
    w->dirty[lane] = 0;
    return 1;
}

/* Releases a lane's slot and takes a fresh one on every side. */
static int op_release_reacquire(world *w, int32_t lane)
{
    w->op = "release+reacquire";
    if (!world_cuda_ok(w, cudaStreamSynchronize(w->stream), "cudaStreamSynchronize"))
        return 0;
    for (int s = 0; s < w->sides; s++) {
        side *sd = &w->side[s];
        if (!world_expect_ok(w, ssm_slot_release(sd->ctx, sd->slot[lane]), "ssm_slot_release",
                             sd->name) ||
            !world_expect_ok(w, ssm_slot_acquire(sd->ctx, &sd->slot[lane]), "ssm_slot_acquire",
                             sd->name))
            return 0;
    }
    return 1;
}

static int op_random(world *w)
{
    int k = test_rng_int(&w->rng, 0, 99);
    int ok = k < 10   ? op_prefill(w, 0, 0)
             : k < 35 ? op_step(w, STEP_DECODE)
             : k < 92 ? op_step(w, STEP_VERIFY)
             : k < 96 ? op_reset(w, test_rng_int(&w->rng, 0, w->lanes - 1))
                      : op_release_reacquire(w, test_rng_int(&w->rng, 0, w->lanes - 1));
    ok = ok && world_compare_exports(w);
    w->step++;
    return ok;
}

/* The end of a session: the whole-output bounds and no flag anywhere. */
static int session_end(world *w)
{
    w->op = "end";
    int ok = world_check_totals(w, 1);
    for (int s = 0; s < w->sides && ok; s++)
        ok = world_expect_flags(w, s, 0, 0);
    return ok;
}

/* A verify round whose device accepted lengths hold 0 for one live row and
 * T + 1 for another (the CPU runs both rows as padding): those slots are
 * flagged SSM_FLAG_BAD_ACCEPTED, the others committed as on the CPU; a reset
 * clears the flags. */
static int op_bad_accepted(world *w)
{
    w->op = "verify with bad device accepted lengths";
    int32_t lanes[MAX_ROWS], live[MAX_ROWS], count = 0, bad[2];
    int32_t rows = world_pick_rows(w, w->lanes, 1, lanes);
    for (int32_t r = 0; r < rows; r++)
        if (lanes[r] >= 0)
            live[count++] = r;
    if (count < 2)
        return world_fail(w, "fewer than two live rows");
    step *st = step_make(w, STEP_VERIFY, w->t_max, rows, lanes, NULL);
    int32_t first = test_rng_int(&w->rng, 0, count - 1);
    int32_t second = (first + test_rng_int(&w->rng, 1, count - 1)) % count;
    int32_t bad_rows[2] = {live[first], live[second]};
    for (int i = 0; i < 2; i++) {
        int32_t r = bad_rows[i];
        bad[i] = lanes[r];
        st->skip[r] = 1;
        for (int s = 0; s < w->sides; s++) {
            st->accepted[s][r] = w->side[s].cuda ? (i == 0 ? 0 : w->t_max + 1) : 0;
            if (!w->side[s].cuda)
                st->slots[s][r] = -1;
        }
    }
    if (!step_finish(w, st))
        return 0;
    uint32_t mask = (1u << bad[0]) | (1u << bad[1]);
    for (int s = 0; s < w->sides; s++)
        if (!world_expect_flags(w, s, w->side[s].cuda ? mask : 0, SSM_FLAG_BAD_ACCEPTED))
            return 0;
    w->dirty[bad[0]] = w->dirty[bad[1]] = 1;
    if (!world_compare_exports(w) || !op_reset(w, bad[0]) || !op_reset(w, bad[1]))
        return 0;
    for (int s = 0; s < w->sides; s++)
        if (!world_expect_flags(w, s, 0, 0))
            return 0;
    return world_compare_exports(w);
}

/* A decode, verify or prefill with a NaN in one live row's x (layer 0):
 * that slot, and no other, gets SSM_FLAG_NONFINITE_INPUT on every side; the
 * other rows' outputs and states still match; a reset clears the flag. */
static int op_nonfinite(world *w)
{
    static const step_kind kinds[3] = {STEP_DECODE, STEP_VERIFY, STEP_PREFILL};
    static const char *names[3] = {"decode with a NaN input", "verify with a NaN input",
                                   "prefill with a NaN input"};
    int k = test_rng_int(&w->rng, 0, 2);
    step_kind kind = kinds[k];
    w->op = names[k];
    int32_t lanes[MAX_ROWS], lengths[MAX_ROWS];
    int32_t rows = world_pick_rows(w, w->lanes, test_rng_int(&w->rng, 0, 1), lanes);
    for (int32_t r = 0; r < rows; r++)
        lengths[r] = test_rng_int(&w->rng, 1, MAX_PREFILL);
    int32_t tokens = kind == STEP_DECODE ? 1 : kind == STEP_VERIFY ? w->t_max : 0;
    step *st = step_make(w, kind, tokens, rows, lanes, kind == STEP_PREFILL ? lengths : NULL);
    int32_t r = 0;
    while (lanes[r] < 0)
        r++;
    int32_t lane = lanes[r];
    int64_t token = st->start[r] + test_rng_int(&w->rng, 0, st->start[r + 1] - st->start[r] - 1);
    int64_t channel = test_rng_int(&w->rng, 0, (int32_t)ssm_conv_channels(&w->m) - 1);
    ssm_ref_store(st->in[0].x, w->ad, token * ssm_conv_channels(&w->m) + channel, NAN);
    st->skip[r] = 1;
    if (!step_finish(w, st))
        return 0;
    for (int s = 0; s < w->sides; s++)
        if (!world_expect_flags(w, s, 1u << lane, SSM_FLAG_NONFINITE_INPUT))
            return 0;
    w->dirty[lane] = 1;
    if (!world_compare_exports(w) || !op_reset(w, lane))
        return 0;
    for (int s = 0; s < w->sides; s++)
        if (!world_expect_flags(w, s, 0, 0))
            return 0;
    return world_compare_exports(w);
}

/* A prefill on every CUDA side with io->out (then io->x) one element off
 * its four-element alignment: refused before anything runs, naming the
 * tensor, and every slot exports as before (the comparison with the CPU
 * side, which never ran it). */
static int op_misaligned(world *w)
{
    w->op = "prefill with a misaligned tensor";
    int32_t lanes[MAX_ROWS], lengths[MAX_ROWS];
    int32_t rows = world_pick_rows(w, 1, 0, lanes);
    lengths[0] = test_rng_int(&w->rng, 1, 70);
    step *st = step_make(w, STEP_PREFILL, 0, rows, lanes, lengths);
    int ok = step_upload(w, st);
    size_t act = ssm_dtype_size(w->ad);
    for (int s = 0; ok && s < w->sides; s++) {
        side *sd = &w->side[s];
        if (!sd->cuda)
            continue;
        for (int which = 0; ok && which < 2; which++) {
            ssm_step_io io = gpu_inputs_io(&st->din[0], st->out_dev[s][0]);
            if (which == 0)
                io.out = (char *)io.out + act;
            else
                io.x = (const char *)io.x + act;
            ssm_prefill_batch b = {st->rows, st->slots_dev[s], st->offsets_dev,
                                   st->longest, st->slots[s], st->start};
            ssm_status status = ssm_prefill(sd->ctx, 0, &b, &w->dw[0].w, &io, world_stream(w, s));
            const char *want = which == 0 ? "io->out must be aligned" : "io->x must be aligned";
            if (status != SSM_ERR_INVALID_ARGUMENT || !strstr(ssm_last_error(), want))
                ok = world_fail(w, "%s: a prefill with %s off by one element gave %s (%s)",
                                sd->name, which == 0 ? "out" : "x", ssm_status_name(status),
                                ssm_last_error());
        }
    }
    step_free(w, st);
    return ok && world_compare_exports(w);
}

/* ------------------------------------------------------------ cases */

/* Cases 1 and 2: one session on the CPU and CUDA side by side. */
static int case_modes(const setup *su, variant v, uint64_t salt, char *desc, size_t len)
{
    world w;
    int ok = world_open_modes(&w, su, v, salt, "modes") && world_compare_exports(&w) &&
             op_prefill(&w, 1, 1) && world_compare_exports(&w);
    for (int k = 0; k < SESSION_OPS && ok; k++)
        ok = op_random(&w);
    ok = ok && session_end(&w);
    snprintf(desc, len, "%s", w.desc);
    world_close(&w);
    return ok && !w.failed;
}

/* Verify rounds of different widths: two of T_max tokens (one launch each;
 * the second applies the first's commit and writes compact's other record
 * set), then one of a single token over 12 rows, padding included, more
 * than a one-launch step of one token takes (two launches: its prologue
 * writes set 0, and the commit must apply that set), then a decode that
 * applies it, then rounds of 2 and 3 tokens (at most T_max). Exports
 * compared after every step. */
static int case_mixed_verifies(const setup *su, variant v, uint64_t salt, char *desc, size_t len)
{
    world w;
    int ok = world_open_modes(&w, su, v, salt, "mixed verify widths") && op_prefill(&w, 1, 0) &&
             world_compare_exports(&w);
    for (int k = 0; k < 12 && ok; k++) {
        int32_t lanes[MAX_ROWS], phase = k % 6;
        if (phase == 3) {
            ok = op_step(&w, STEP_DECODE) && world_compare_exports(&w);
            continue;
        }
        int wide = phase == 2, narrow = phase >= 4;
        int32_t tokens = wide ? 1 : narrow ? phase - 2 : w.t_max;
        tokens = tokens < w.t_max ? tokens : w.t_max;
        w.op = wide ? "verify T=1 over 12 rows" : narrow ? "verify T=2 or 3" : "verify T_max";
        int32_t rows = world_pick_rows(&w, w.lanes, wide ? MAX_ROWS - w.lanes : 0, lanes);
        ok = step_finish(&w, step_make(&w, STEP_VERIFY, tokens, rows, lanes, NULL)) &&
             world_compare_exports(&w);
    }
    ok = ok && session_end(&w);
    snprintf(desc, len, "%s", w.desc);
    world_close(&w);
    return ok && !w.failed;
}

/* Case 5: long prompts continued over several calls. Two lanes prefill
 * 4096 and 300 tokens in 2 to 5 calls each (random cuts, both lanes in every
 * call until one is done), CPU and CUDA compared after every call; then
 * decodes and verifies continue from the prefilled states. */
static int case_long_prompt(const setup *su, variant v, uint64_t salt, char *desc, size_t len)
{
    world w;
    int ok = world_open_modes(&w, su, v, salt, "long prompt");
    int32_t total[2] = {LONG_PROMPT, 300}, done[2] = {0, 0};
    int32_t calls = ok ? test_rng_int(&w.rng, 2, 5) : 0;
    for (int32_t c = 0; c < calls && ok; c++) {
        int32_t lanes[2], lengths[2], rows = 0;
        for (int32_t i = 0; i < 2; i++) {
            int32_t left = total[i] - done[i];
            int32_t take = c == calls - 1 ? left : test_rng_int(&w.rng, 0, left);
            if (take == 0)
                continue;
            lanes[rows] = i;
            lengths[rows++] = take;
            done[i] += take;
        }
        w.op = "long prefill";
        ok = rows == 0 || (step_finish(&w, step_make(&w, STEP_PREFILL, 0, rows, lanes, lengths)) &&
                           world_compare_exports(&w));
    }
    for (int k = 0; k < 4 && ok; k++)
        ok = op_step(&w, k % 2 ? STEP_VERIFY : STEP_DECODE);
    ok = ok && session_end(&w);
    snprintf(desc, len, "%s", w.desc);
    world_close(&w);
    return ok && !w.failed;
}

/* Case 7: replay's default output form on a CUDA context. */
static int case_default_outputs(const setup *su, uint64_t salt, char *desc, size_t len)
{
    world w;
    const int f32 = su->sd == SSM_DTYPE_F32;
    const variant v = {"replay", 0, 0, 0, 0, 0}; /* fold_rows 0: decodes run the form too */
    int ok = world_open_default_outputs(&w, su, v, f32 ? "identity" : "exact",
                                        f32 ? "exact" : NULL, salt, "default outputs") &&
             world_compare_exports(&w) && op_prefill(&w, 1, 1) && world_compare_exports(&w);
    for (int k = 0; k < SESSION_OPS && ok; k++)
        ok = op_random(&w);
    ok = ok && session_end(&w);
    if (ok && f32) {
        double diff2 = 0.0;
        for (int32_t l = 0; l < w.m.layers; l++)
            diff2 += w.pair[1].total[l].diff2;
        if (diff2 == 0.0)
            ok = world_fail(&w, "identity's outputs equal exact's over the whole session: the "
                                "case cannot tell which form the default ran");
    }
    if (ok && !f32) {
        w.op = "outputs = identity over a bf16 state";
        ssm_config c;
        test_config(&c, &w.m, "replay", w.sd, w.ad, CAPACITY, w.t_max - 1);
        c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
        const ssm_mode_option options[2] = {{"history", w.history, 0}, {"outputs", "identity", 0}};
        const ssm_mode_option *rows[1] = {options};
        const char *names[1] = {"replay"};
        int32_t lines[1] = {0}, counts[1] = {2};
        c.mode_sections_count = 1;
        c.mode_section_names = names;
        c.mode_section_lines = lines;
        c.mode_options_count = counts;
        c.mode_options = rows;
        ssm_ctx *ctx = NULL;
        ssm_status st = ssm_ctx_create(&c, &ctx);
        if (st != SSM_ERR_CONFIG)
            ok = world_fail(&w, "ssm_ctx_create: %s, want SSM_ERR_CONFIG", ssm_status_name(st));
        ssm_ctx_destroy(ctx);
    }
    snprintf(desc, len, "%s", w.desc);
    world_close(&w);
    return ok && !w.failed;
}

/* Case 4, host-visible part: bad device accepted lengths and a NaN input in
 * the middle of a session. */
static int case_bad_input(const setup *su, variant v, uint64_t salt, char *desc, size_t len)
{
    world w;
    int ok = world_open_modes(&w, su, v, salt, "bad input") && op_prefill(&w, 1, 0) &&
             world_compare_exports(&w);
    for (int k = 0; k < 3 && ok; k++)
        ok = op_random(&w);
    ok = ok && op_bad_accepted(&w);
    for (int k = 0; k < 3 && ok; k++)
        ok = op_random(&w);
    ok = ok && op_nonfinite(&w);
    for (int k = 0; k < 3 && ok; k++)
        ok = op_random(&w);
    ok = ok && op_misaligned(&w);
    ok = ok && session_end(&w);
    snprintf(desc, len, "%s", w.desc);
    world_close(&w);
    return ok && !w.failed;
}

/* Captures side 0's full round (every layer's verify, then the commit) on
 * the world's stream. */
static int capture_round(world *w, step *st, cudaGraphExec_t *exec)
{
    w->op = "capture";
    cudaGraph_t graph = NULL;
    if (!world_cuda_ok(w, cudaStreamBeginCapture(w->stream, cudaStreamCaptureModeThreadLocal),
                       "cudaStreamBeginCapture"))
        return 0;
    int ran = world_run_side(w, st, 0);
    /* End the capture whatever happened, so the stream is usable again. */
    int ended = world_cuda_ok(w, cudaStreamEndCapture(w->stream, &graph), "cudaStreamEndCapture");
    int ok =
        ran && ended &&
        world_cuda_ok(w, cudaGraphInstantiateWithFlags(exec, graph, 0), "cudaGraphInstantiate");
    if (graph)
        (void)cudaGraphDestroy(graph);
    return ok;
}

/* One replayed round: new device inputs and accepted lengths, the graph on
 * side 0, the same round through the API on side 1, then both compared. */
static int graph_round(world *w, step *st, cudaGraphExec_t exec, int pattern)
{
    w->op = "graph replay";
    int ok = step_refill(w, st, pattern) &&
             world_cuda_ok(w, cudaGraphLaunch(exec, w->stream), "cudaGraphLaunch") &&
             world_run_side(w, st, 1) && step_fetch(w, st) && world_compare_outputs(w, st) &&
             world_compare_exports(w);
    w->step++;
    return ok;
}

/* Side 0 after a replay with a slot outside the pool: ssm_ctx_status
 * reports SSM_FLAG_BAD_SLOT and nothing else, on no slot (the bit belongs to
 * no slot); no lane's slot and not the spare has a flag. */
static int expect_bad_slot_only(world *w)
{
    side *cap = &w->side[0];
    ssm_ctx_report report;
    if (!world_expect_ok(w, ssm_ctx_status(cap->ctx, &report), "ssm_ctx_status", cap->name))
        return 0;
    if (report.flags != SSM_FLAG_BAD_SLOT || report.flagged_slots != 0)
        return world_fail(w,
                          "%s: ssm_ctx_status reports flags 0x%x on %d slots, want 0x%x "
                          "(BAD_SLOT) on none",
                          cap->name, report.flags, report.flagged_slots, SSM_FLAG_BAD_SLOT);
    for (int32_t lane = 0; lane <= w->lanes; lane++) {
        int32_t slot = lane < w->lanes ? cap->slot[lane] : cap->spare;
        uint32_t flags = 0;
        if (!world_expect_ok(w, ssm_slot_flags(cap->ctx, slot, &flags), "ssm_slot_flags",
                             cap->name))
            return 0;
        if (flags != 0)
            return world_fail(w,
                              "%s: slot %d has flags 0x%x after a row with a slot outside the "
                              "pool was skipped",
                              cap->name, slot, flags);
    }
    return 1;
}

/* Case 4, graph part: device slots naming capacity + 3 in row r of the
 * captured round (the twin runs that row as padding). BAD_SLOT raised, no
 * slot flagged, the row's own slot and the spare export as before; then the
 * slot restored and one more round matches. */
static int graph_bad_slot(world *w, step *st, cudaGraphExec_t exec)
{
    w->op = "graph replay with a slot outside the pool";
    int32_t r = test_rng_int(&w->rng, 0, st->rows - 1);
    while (st->lanes[r] < 0)
        r = (r + 1) % st->rows;
    int32_t lane = st->lanes[r];
    side *cap = &w->side[0];
    test_snapshot before[2], after[2];
    memset(before, 0, sizeof before);
    memset(after, 0, sizeof after);
    int ok = world_snapshot(w, 0, cap->slot[lane], &before[0]) &&
             world_snapshot(w, 0, cap->spare, &before[1]);
    ok = ok && step_set_slot(w, st, 0, r, CAPACITY + 3, 0) && step_set_slot(w, st, 1, r, -1, 1);
    st->skip[r] = 1;
    ok = ok && graph_round(w, st, exec, 0);
    w->op = "after the replay with a slot outside the pool";
    ok = ok && world_snapshot(w, 0, cap->slot[lane], &after[0]) &&
         world_snapshot(w, 0, cap->spare, &after[1]);
    if (ok && !test_snapshot_equal(&before[0], &after[0]))
        ok = world_fail(w, "the slot of the skipped row (lane %d) changed", lane);
    if (ok && !test_snapshot_equal(&before[1], &after[1]))
        ok = world_fail(w, "a slot outside the batch changed");
    for (int i = 0; i < 2; i++) {
        test_snapshot_free(&before[i]);
        test_snapshot_free(&after[i]);
    }
    ok = ok && expect_bad_slot_only(w) && world_expect_flags(w, 1, 0, 0);
    w->op = "graph replay, slot restored";
    ok = ok && step_set_slot(w, st, 0, r, cap->slot[lane], 0) &&
         step_set_slot(w, st, 1, r, w->side[1].slot[lane], 1);
    st->skip[r] = 0;
    return ok && graph_round(w, st, exec, 0);
}

/* Case 3 (and 4's bad slot): returns the graph result, the bad-slot result
 * in *bad_slot_ok. */
static int case_graph(const setup *su, variant v, uint64_t salt, char *desc, size_t len,
                      int *bad_slot_ok)
{
    world w;
    step *st = NULL;
    cudaGraphExec_t exec = NULL;
    *bad_slot_ok = 0;
    int ok = world_open_graph(&w, su, v, salt, "graph") && op_prefill(&w, 1, 1) &&
             world_compare_exports(&w);
    if (ok) {
        int32_t lanes[MAX_ROWS];
        int32_t rows = world_pick_rows(&w, w.lanes, 1, lanes);
        st = step_make(&w, STEP_VERIFY, w.t_max, rows, lanes, NULL);
        ok = step_upload(&w, st) && capture_round(&w, st, &exec);
    }
    for (int k = 0; k < GRAPH_ROUNDS && ok; k++)
        ok = graph_round(&w, st, exec, k % 6 == 0 ? 1 : k % 6 == 1 ? 2 : 0);
    ok = ok && !w.failed;
    snprintf(desc, len, "%s", w.desc);
    if (ok) {
        *bad_slot_ok = graph_bad_slot(&w, st, exec) && !w.failed;
        if (!*bad_slot_ok)
            printf("# (graph rounds before it passed)\n");
    }
    if (exec)
        (void)cudaGraphExecDestroy(exec);
    step_free(&w, st);
    world_close(&w);
    return ok;
}

/* ------------------------------------------------------------ the plan */

#define DIMS(kind_, layers_, h_, hv_, k_, v_, lb_)                                                 \
    {                                                                                              \
        .kind = (kind_), .layers = (layers_), .heads = (h_), .value_heads = (hv_),                 \
        .key_dim = (k_), .value_dim = (v_), .conv_width = 4, .has_lower_bound = (lb_),             \
        .lower_bound = (lb_) ? -5.0f : 0.0f                                                        \
    }

static const ssm_model_dims shapes[] = {
    DIMS(SSM_MODEL_GDN, 3, 2, 4, 32, 48, 0),   /* GVA (HV = 2H), V not a power of two */
    DIMS(SSM_MODEL_KDA, 2, 2, 2, 64, 32, 0),   /* KDA, softplus gate */
    DIMS(SSM_MODEL_KDA, 2, 2, 2, 64, 32, 1),   /* KDA, gate lower bound -5 */
    DIMS(SSM_MODEL_GDN, 2, 2, 4, 128, 128, 0), /* Qwen3-Next's head shape */
};
#define SHAPES ((int)(sizeof shapes / sizeof shapes[0]))

/* Value heads wider than one block of the identity kernel (128 rows):
 * native and replay's identity outputs only (identity.cuh's row blocks). */
static const ssm_model_dims wide_heads = DIMS(SSM_MODEL_GDN, 2, 2, 2, 32, 160, 0);

/* Shapes of the identity kernel that reads the checkpoint into registers
 * (K = 128, value rows in blocks of 64), run like wide_heads: KDA, and GDN
 * with grouped value heads four row blocks wide. */
static const ssm_model_dims direct_heads[] = {
    DIMS(SSM_MODEL_KDA, 2, 2, 2, 128, 128, 1),
    DIMS(SSM_MODEL_GDN, 2, 1, 2, 128, 256, 0),
};

/* state, activations */
static const ssm_dtype dtypes[][2] = {
    {SSM_DTYPE_F32, SSM_DTYPE_F32},
    {SSM_DTYPE_F32, SSM_DTYPE_BF16},
    {SSM_DTYPE_BF16, SSM_DTYPE_BF16},
};
#define DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static const variant variants[] = {
    {"native", 0, 0, 0, 0, 0},
    {"compact", 0, 0, 0, 0, 0},
    {"replay", 0, 0, 0, 0, 0}, /* outputs = exact (said, not defaulted), decode keeps the ring */
    {"replay", 0, 1, 0, 0, 0}, /* exact, decodes fold every step (the default at few rows) */
    {"replay", 1, 0, 0, 0, 0}, /* outputs = identity: fp32 state only; last (no bad-input case) */
};
#define VARIANTS ((int)(sizeof variants / sizeof variants[0]))

typedef struct tally {
    int number, failures;
} tally;

static void report(tally *t, int ok, const char *desc)
{
    t->number++;
    t->failures += !ok;
    printf("%s %d - %s\n", ok ? "ok" : "not ok", t->number, desc);
    fflush(stdout);
}

int main(void)
{
    if (gpu_device_count() == 0) {
        printf("1..0 # SKIP no CUDA device\n");
        return 77;
    }
    uint64_t seed = test_seed();
    printf("# seed %llu: rerun with SSM_TEST_SEED=%llu\n", (unsigned long long)seed,
           (unsigned long long)seed);
    if (!gpu_ok(cudaSetDevice(0), "cudaSetDevice"))
        return 1;
    tally t = {0, 0};
    char desc[256];
    uint64_t salt = 1;
    for (int i = 0; i < SHAPES; i++)
        for (int d = 0; d < DTYPES; d++)
            for (int k = 0; k < VARIANTS; k++) {
                setup su = {shapes[i], dtypes[d][0], dtypes[d][1]};
                if (variants[k].identity && su.sd != SSM_DTYPE_F32)
                    continue;
                int ok = case_modes(&su, variants[k], salt++, desc, sizeof desc);
                report(&t, ok, desc);
            }
    for (int k = 0; k < VARIANTS; k += VARIANTS - 1) { /* native, replay identity */
        setup su = {wide_heads, SSM_DTYPE_F32, SSM_DTYPE_BF16};
        report(&t, case_modes(&su, variants[k], salt++, desc, sizeof desc), desc);
        for (int i = 0; i < 2; i++) {
            setup sd = {direct_heads[i], SSM_DTYPE_F32, i ? SSM_DTYPE_F32 : SSM_DTYPE_BF16};
            report(&t, case_modes(&sd, variants[k], salt++, desc, sizeof desc), desc);
        }
    }
    /* Conv widths other than 4, every mode: 2 and 3 (the one-launch conv
       and the prologue kernel's width-4 build with the width a run-time
       value), 6 (its wide build); GDN over an fp32 state with bf16
       activations, KDA with the lower bound in bf16. */
    {
        const int32_t widths[] = {2, 3, 6};
        for (int i = 0; i < 3; i++)
            for (int k = 0; k < VARIANTS; k++) {
                setup a = {shapes[0], SSM_DTYPE_F32, SSM_DTYPE_BF16};
                a.m.conv_width = widths[i];
                report(&t, case_modes(&a, variants[k], salt++, desc, sizeof desc), desc);
                if (variants[k].identity)
                    continue;
                setup b = {shapes[2], SSM_DTYPE_BF16, SSM_DTYPE_BF16};
                b.m.conv_width = widths[i];
                report(&t, case_modes(&b, variants[k], salt++, desc, sizeof desc), desc);
            }
    }
    /* Verify rounds of 8 tokens (max_draft_tokens 7, replay's history 16):
       every mode's multi-token jobs past T = 4 and the identity kernel's
       16-token instantiation; Qwen3-Next's head shape and KDA, fp32 state. */
    for (int k = 0; k < VARIANTS; k++) {
        variant v = variants[k];
        v.t_max = 8;
        setup a = {shapes[3], SSM_DTYPE_F32, SSM_DTYPE_BF16};
        setup b = {shapes[1], SSM_DTYPE_F32, SSM_DTYPE_F32};
        report(&t, case_modes(&a, v, salt++, desc, sizeof desc), desc);
        report(&t, case_modes(&b, v, salt++, desc, sizeof desc), desc);
    }
    /* Verify widths mixed: T_max in one launch, then T = 1 over 12 rows in
       two (compact's record sets), every mode, GDN fp32 and KDA bf16. */
    for (int k = 0; k < VARIANTS; k++) {
        setup a = {shapes[0], SSM_DTYPE_F32, SSM_DTYPE_BF16};
        report(&t, case_mixed_verifies(&a, variants[k], salt++, desc, sizeof desc), desc);
        if (variants[k].identity) {
            for (int i = 0; i < 2; i++) { /* every token count of the register kernel */
                setup d = {direct_heads[i], SSM_DTYPE_F32, SSM_DTYPE_BF16};
                report(&t, case_mixed_verifies(&d, variants[k], salt++, desc, sizeof desc), desc);
            }
            continue;
        }
        setup b = {shapes[2], SSM_DTYPE_BF16, SSM_DTYPE_BF16};
        report(&t, case_mixed_verifies(&b, variants[k], salt++, desc, sizeof desc), desc);
    }
    /* The other modes' configs with a [replay] section: the replay plugin
       loaded and closed by each context's creation, before its first
       kernel (serve-tiny.ini's case; docs/abi.md, "Loading", step 5). */
    for (int k = 0; k < 2; k++) {
        variant v = variants[k];
        v.replay_section = 1;
        setup su = {shapes[0], SSM_DTYPE_F32, SSM_DTYPE_BF16};
        report(&t, case_modes(&su, v, salt++, desc, sizeof desc), desc);
    }
    /* Long prompts: each mode on Qwen3-Next's head shape (fp32 state) and
     * on KDA with the lower bound (bf16 state); then again with the CUDA
     * sides under prefill_precision = fast. */
    for (int fast = 0; fast < 2; fast++)
        for (int k = 0; k < VARIANTS - 1; k++) {
            variant v = variants[k];
            v.fast_prefill = fast;
            setup a = {shapes[3], SSM_DTYPE_F32, SSM_DTYPE_BF16};
            setup b = {shapes[2], SSM_DTYPE_BF16, SSM_DTYPE_BF16};
            report(&t, case_long_prompt(&a, v, salt++, desc, sizeof desc), desc);
            report(&t, case_long_prompt(&b, v, salt++, desc, sizeof desc), desc);
        }
    /* Bad input: each mode on the small GDN shape in fp32 and on KDA with
     * the lower bound in bf16. */
    for (int k = 0; k < VARIANTS - 1; k++) {
        setup a = {shapes[0], SSM_DTYPE_F32, SSM_DTYPE_F32};
        setup b = {shapes[2], SSM_DTYPE_BF16, SSM_DTYPE_BF16};
        report(&t, case_bad_input(&a, variants[k], salt++, desc, sizeof desc), desc);
        report(&t, case_bad_input(&b, variants[k], salt++, desc, sizeof desc), desc);
    }
    /* Replay's default output form: Qwen3-Next's head shape and KDA in fp32
     * (bf16 and fp32 outputs), KDA with the lower bound over a bf16 state. */
    {
        const setup defaults[] = {{shapes[3], SSM_DTYPE_F32, SSM_DTYPE_BF16},
                                  {shapes[1], SSM_DTYPE_F32, SSM_DTYPE_F32},
                                  {shapes[2], SSM_DTYPE_BF16, SSM_DTYPE_BF16}};
        for (int i = 0; i < 3; i++)
            report(&t, case_default_outputs(&defaults[i], salt++, desc, sizeof desc), desc);
    }
    /* Graphs: every mode on every shape, the dtypes taking turns. */
    for (int i = 0; i < SHAPES; i++)
        for (int k = 0; k < VARIANTS; k++) {
            int d = (i + k) % DTYPES;
            setup su = {shapes[i], dtypes[d][0], dtypes[d][1]};
            if (variants[k].identity && su.sd != SSM_DTYPE_F32)
                su.sd = su.ad = SSM_DTYPE_F32;
            int bad_slot_ok = 0;
            int ok = case_graph(&su, variants[k], salt++, desc, sizeof desc, &bad_slot_ok);
            report(&t, ok, desc);
            char bad[300];
            snprintf(bad, sizeof bad, "%s%s", desc,
                     ok ? ", bad device slot" : ", bad device slot (not run)");
            report(&t, ok && bad_slot_ok, bad);
        }
    printf("1..%d\n", t.number);
    return t.failures ? 1 : 0;
}
