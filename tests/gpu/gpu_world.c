/* Contexts side by side for the GPU suites (see gpu_world.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/gpu/gpu_world.h"

/* ------------------------------------------------------------ failures */

int world_fail(world *w, const char *fmt, ...)
{
    w->failed = 1;
    if (w->messages++ >= MAX_MESSAGES)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    printf("# %s [%s, step %d]: ", w->desc, w->op, w->step);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    return 0;
}

int world_expect_ok(world *w, ssm_status got, const char *what, const char *side)
{
    if (got == SSM_OK)
        return 1;
    return world_fail(w, "%s: %s: %s (%s)", side, what, ssm_status_name(got), ssm_last_error());
}

int world_cuda_ok(world *w, cudaError_t e, const char *what)
{
    return gpu_ok(e, what) || world_fail(w, "CUDA call failed: %s", what);
}

void *world_stream(const world *w, int s)
{
    return w->side[s].cuda ? (void *)w->stream : NULL;
}

/* Creates side s: a context of `mode` on the CPU or CUDA device 0, replay
 * with history 2 t_max and `outputs` (NULL: no such key, the device's
 * default; the other modes get that [replay] section too when the variant
 * asks for replay_section), and its lanes acquired in order, plus a spare
 * slot when `spare`. */
static int side_open_outputs(world *w, int s, const char *name, const char *mode, int cuda,
                             int spare, const char *outputs)
{
    side *sd = &w->side[s];
    ssm_config c;
    sd->name = name;
    sd->cuda = cuda;
    sd->spare = -1;
    test_config(&c, &w->m, mode, w->sd, w->ad, CAPACITY, w->t_max - 1);
    if (cuda)
        c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
    if (w->v.fast_prefill)
        c.prefill_precision = SSM_PREFILL_PRECISION_FAST;
    if (!strcmp(mode, "replay") || w->v.replay_section) {
        int32_t n = 0;
        sd->options[n++] = (ssm_mode_option){"history", w->history, 0};
        if (outputs)
            sd->options[n++] = (ssm_mode_option){"outputs", outputs, 0};
        if (!w->v.fold_every_step)
            sd->options[n++] = (ssm_mode_option){"fold_rows", "0", 0};
        sd->section_names[0] = "replay";
        sd->section_lines[0] = 0;
        sd->options_count[0] = n;
        sd->option_rows[0] = sd->options;
        c.mode_sections_count = 1;
        c.mode_section_names = sd->section_names;
        c.mode_section_lines = sd->section_lines;
        c.mode_options_count = sd->options_count;
        c.mode_options = sd->option_rows;
    }
    if (!world_expect_ok(w, ssm_ctx_create(&c, &sd->ctx), "ssm_ctx_create", name))
        return 0;
    for (int32_t lane = 0; lane < w->lanes; lane++)
        if (!world_expect_ok(w, ssm_slot_acquire(sd->ctx, &sd->slot[lane]), "ssm_slot_acquire",
                             name))
            return 0;
    return !spare ||
           world_expect_ok(w, ssm_slot_acquire(sd->ctx, &sd->spare), "ssm_slot_acquire", name);
}

/* side_open_outputs with outputs = identity when the variant asks, else
 * outputs = exact, said explicitly: the default on a CUDA context over an
 * fp32 state is identity. */
static int side_open(world *w, int s, const char *name, const char *mode, int cuda, int spare)
{
    return side_open_outputs(w, s, name, mode, cuda, spare, w->v.identity ? "identity" : "exact");
}

static void world_describe(world *w, const char *what)
{
    snprintf(w->desc, sizeof w->desc,
             "%s: %s%s H=%d HV=%d K=%d V=%d W=%d layers=%d state=%s act=%s T=%d mode=%s%s%s%s%s%s%s",
             what,
             ssm_model_kind_name(w->m.kind), w->m.has_lower_bound ? " lower-bound" : "", w->m.heads,
             w->m.value_heads, w->m.key_dim, w->m.value_dim, w->m.conv_width, w->m.layers,
             ssm_dtype_name(w->sd), ssm_dtype_name(w->ad), (int)w->t_max, w->v.mode,
             strcmp(w->v.mode, "replay") ? "" : " history=",
             strcmp(w->v.mode, "replay") ? "" : w->history,
             strcmp(w->v.mode, "replay") ? ""
             : w->v.identity             ? " outputs=identity"
                                         : " outputs=exact",
             strcmp(w->v.mode, "replay") ? ""
             : w->v.fold_every_step      ? " fold_rows=default"
                                         : " fold_rows=0",
             w->v.replay_section && strcmp(w->v.mode, "replay") ? " with a [replay] section" : "",
             w->v.fast_prefill ? " prefill_precision=fast" : "");
}

/* The shared part of opening: seed, shape, stream, weights on both sides. */
static int world_init(world *w, const setup *su, variant v, uint64_t salt, const char *what)
{
    memset(w, 0, sizeof *w);
    w->op = "open";
    w->m = su->m;
    w->sd = su->sd;
    w->ad = su->ad;
    w->v = v;
    w->t_max = v.t_max > 0 ? v.t_max : T_MAX;
    snprintf(w->history, sizeof w->history, "%d", (int)(2 * w->t_max));
    test_rng_init(&w->rng, test_seed() ^ (salt * 0x9e3779b97f4a7c15ull));
    world_describe(w, what);
    if (!world_cuda_ok(w, cudaStreamCreate(&w->stream), "cudaStreamCreate"))
        return 0;
    for (int32_t l = 0; l < w->m.layers; l++) {
        test_weights_make(&w->rng, &w->m, test_rng_int(&w->rng, 0, 1), &w->hw[l]);
        if (!gpu_weights_upload(&w->m, &w->hw[l], &w->dw[l]))
            return world_fail(w, "cannot upload the weights of layer %d", l);
    }
    return 1;
}

/* Holds side `got` to `ref`: outputs of decode and verify, of prefill, and
 * exported states by the rules given (totals start empty). RULE_BOUND is
 * the numerics contract's bound for the pair (tests/spec_bounds.h): on one
 * device any output form against native's; across devices the CPU against
 * CUDA, for outputs and states alike. Both sides prefill through the
 * chunked form (docs/prefill.md), so a bf16 state is rounded at the same
 * chunk ends on both. */
static void add_pair(world *w, int got, int ref, rule outputs, rule prefill, rule states)
{
    pair *p = &w->pair[w->pairs++];
    memset(p, 0, sizeof *p);
    p->got = got;
    p->ref = ref;
    p->outputs = outputs;
    p->prefill = prefill;
    p->states = states;
    if (w->side[got].cuda == w->side[ref].cuda) {
        p->bound = spec_bound_vs_native(w->sd, w->ad);
        p->state_bound = spec_bound_vs_native_state(w->sd);
    } else if (w->v.fast_prefill) {
        p->bound = p->state_bound = spec_bound_fast_prefill_cpu_vs_cuda();
    } else {
        p->bound = spec_bound_cpu_vs_cuda(w->sd, w->ad);
        p->state_bound = spec_bound_cpu_vs_cuda_state(w->sd);
    }
}

int world_open_modes(world *w, const setup *su, variant v, uint64_t salt, const char *what)
{
    if (!world_init(w, su, v, salt, what))
        return 0;
    int native = !strcmp(v.mode, "native");
    w->lanes = MAX_LANES;
    w->sides = native ? 2 : 3;
    if (!side_open(w, 0, "CPU native", "native", 0, 0) ||
        !side_open(w, 1, "CUDA native", "native", 1, 0) ||
        (!native && !side_open(w, 2, "CUDA mode", v.mode, 1, 0)))
        return 0;
    add_pair(w, 1, 0, RULE_BOUND, RULE_BOUND, RULE_BOUND);
    if (!native) {
        add_pair(w, 2, 0, RULE_BOUND, RULE_BOUND, RULE_BOUND);
        add_pair(w, 2, 1, v.identity ? RULE_BOUND : RULE_BITWISE, RULE_BITWISE, RULE_BITWISE);
    }
    w->op = "idle";
    return 1;
}

int world_open_graph(world *w, const setup *su, variant v, uint64_t salt, const char *what)
{
    if (!world_init(w, su, v, salt, what))
        return 0;
    w->lanes = MAX_LANES - 1;
    w->sides = 2;
    if (!side_open(w, 0, "CUDA captured", v.mode, 1, 1) ||
        !side_open(w, 1, "CUDA twin", v.mode, 1, 1))
        return 0;
    add_pair(w, 0, 1, RULE_BITWISE, RULE_BITWISE, RULE_BITWISE);
    w->op = "idle";
    return 1;
}

int world_open_default_outputs(world *w, const setup *su, variant v, const char *twin,
                               const char *other, uint64_t salt, const char *what)
{
    if (!world_init(w, su, v, salt, what))
        return 0;
    w->lanes = MAX_LANES;
    w->sides = other ? 3 : 2;
    snprintf(w->desc, sizeof w->desc,
             "%s: %s%s H=%d HV=%d K=%d V=%d layers=%d state=%s act=%s T=%d replay history=%s "
             "fold_rows=%s, outputs unset against outputs=%s%s%s",
             what, ssm_model_kind_name(w->m.kind), w->m.has_lower_bound ? " lower-bound" : "",
             w->m.heads, w->m.value_heads, w->m.key_dim, w->m.value_dim, w->m.layers,
             ssm_dtype_name(w->sd), ssm_dtype_name(w->ad), (int)w->t_max, w->history,
             v.fold_every_step ? "default" : "0", twin, other ? " and outputs=" : "",
             other ? other : "");
    if (!side_open_outputs(w, 0, "CUDA replay, outputs unset", "replay", 1, 0, NULL) ||
        !side_open_outputs(w, 1, twin, "replay", 1, 0, twin) ||
        (other && !side_open_outputs(w, 2, other, "replay", 1, 0, other)))
        return 0;
    add_pair(w, 0, 1, RULE_BITWISE, RULE_BITWISE, RULE_BITWISE);
    if (other)
        add_pair(w, 0, 2, RULE_BOUND, RULE_BITWISE, RULE_BITWISE);
    w->op = "idle";
    return 1;
}

void world_close(world *w)
{
    if (w->stream)
        (void)cudaStreamSynchronize(w->stream);
    for (int s = 0; s < MAX_SIDES; s++)
        ssm_ctx_destroy(w->side[s].ctx);
    for (int32_t l = 0; l < MAX_LAYERS; l++) {
        test_weights_free(&w->hw[l]);
        gpu_weights_free(&w->dw[l]);
    }
    if (w->stream)
        (void)cudaStreamDestroy(w->stream);
}

const char *step_kind_name(step_kind kind)
{
    static const char *const names[] = {"prefill", "decode", "verify+commit"};
    return names[kind];
}

/* Random accepted lengths in [1, T] for live rows of a verify (1 for the
 * other kinds: unused), 0 for padding rows (ignored); the same on every
 * side. `pattern` 1 takes all T, 2 takes 1 everywhere. */
static void step_accept(world *w, step *st, int pattern)
{
    for (int32_t r = 0; r < st->rows; r++) {
        int32_t a = st->lanes[r] < 0          ? 0
                    : st->kind != STEP_VERIFY ? 1
                    : pattern == 1            ? st->tokens
                    : pattern == 2            ? 1
                                              : test_rng_int(&w->rng, 1, st->tokens);
        for (int s = 0; s < w->sides; s++)
            st->accepted[s][r] = a;
    }
}

step *step_make(world *w, step_kind kind, int32_t tokens, int32_t rows, const int32_t *lanes,
                const int32_t *lengths)
{
    step *st = calloc(1, sizeof *st);
    st->kind = kind;
    st->rows = rows;
    st->tokens = kind == STEP_PREFILL ? 0 : tokens;
    memcpy(st->lanes, lanes, sizeof *lanes * (size_t)rows);
    for (int32_t r = 0; r < rows; r++) {
        int32_t len = lengths ? lengths[r] : tokens;
        st->start[r + 1] = st->start[r] + len;
        st->longest = len > st->longest ? len : st->longest;
    }
    st->out_bytes = gpu_out_bytes(&w->m, w->ad, st->start[rows]);
    for (int32_t l = 0; l < w->m.layers; l++) {
        test_io_make(&w->rng, &w->m, w->ad, st->start[rows], &st->in[l]);
        for (int s = 0; s < w->sides; s++) {
            st->out[s][l] = malloc(st->out_bytes);
            memset(st->out[s][l], SENTINEL, st->out_bytes);
        }
    }
    for (int s = 0; s < w->sides; s++)
        for (int32_t r = 0; r < rows; r++)
            st->slots[s][r] = lanes[r] < 0 ? -1 : w->side[s].slot[lanes[r]];
    step_accept(w, st, 0);
    return st;
}

int step_upload(world *w, step *st)
{
    size_t meta = sizeof(int32_t) * (size_t)st->rows;
    for (int32_t l = 0; l < w->m.layers; l++)
        if (!gpu_inputs_alloc(&w->m, w->ad, st->start[st->rows], &st->din[l]) ||
            !gpu_inputs_copy(&st->din[l], &st->in[l], w->stream))
            return world_fail(w, "cannot upload the inputs");
    if (!gpu_alloc((void **)&st->offsets_dev, meta + sizeof(int32_t), st->start, 0))
        return world_fail(w, "cannot upload the token offsets");
    for (int s = 0; s < w->sides; s++) {
        if (!w->side[s].cuda)
            continue;
        if (!gpu_alloc((void **)&st->slots_dev[s], meta, st->slots[s], 0) ||
            !gpu_alloc((void **)&st->accepted_dev[s], meta, st->accepted[s], 0))
            return world_fail(w, "cannot upload the batch metadata");
        for (int32_t l = 0; l < w->m.layers; l++)
            if (!gpu_alloc(&st->out_dev[s][l], st->out_bytes, NULL, SENTINEL))
                return world_fail(w, "cannot allocate the outputs");
    }
    return 1;
}

int step_refill(world *w, step *st, int pattern)
{
    for (int32_t l = 0; l < w->m.layers; l++) {
        test_io_free(&st->in[l]);
        test_io_make(&w->rng, &w->m, w->ad, st->start[st->rows], &st->in[l]);
        if (!gpu_inputs_copy(&st->din[l], &st->in[l], w->stream))
            return world_fail(w, "cannot copy the new inputs");
    }
    step_accept(w, st, pattern);
    for (int s = 0; s < w->sides; s++)
        if (w->side[s].cuda && !world_cuda_ok(w,
                                              cudaMemcpyAsync(st->accepted_dev[s], st->accepted[s],
                                                              sizeof(int32_t) * (size_t)st->rows,
                                                              cudaMemcpyHostToDevice, w->stream),
                                              "cudaMemcpyAsync (accepted)"))
            return 0;
    return 1;
}

int step_set_slot(world *w, step *st, int s, int32_t r, int32_t slot, int host_too)
{
    if (host_too)
        st->slots[s][r] = slot;
    return world_cuda_ok(w,
                         cudaMemcpyAsync(st->slots_dev[s] + r, &slot, sizeof slot,
                                         cudaMemcpyHostToDevice, w->stream),
                         "cudaMemcpyAsync (slot)");
}

void step_free(world *w, step *st)
{
    if (!st)
        return;
    (void)cudaStreamSynchronize(w->stream);
    for (int32_t l = 0; l < MAX_LAYERS; l++) {
        test_io_free(&st->in[l]);
        gpu_inputs_free(&st->din[l]);
        for (int s = 0; s < MAX_SIDES; s++) {
            free(st->out[s][l]);
            gpu_free(st->out_dev[s][l]);
        }
    }
    gpu_free(st->offsets_dev);
    for (int s = 0; s < MAX_SIDES; s++) {
        gpu_free(st->slots_dev[s]);
        gpu_free(st->accepted_dev[s]);
    }
    free(st);
}

int world_run_side(world *w, step *st, int s)
{
    side *sd = &w->side[s];
    const int32_t *slots = sd->cuda ? st->slots_dev[s] : st->slots[s];
    ssm_ticket ticket = SSM_TICKET_INIT;
    for (int32_t l = 0; l < w->m.layers; l++) {
        ssm_step_io io = st->in[l].io;
        io.out = st->out[s][l];
        if (sd->cuda)
            io = gpu_inputs_io(&st->din[l], st->out_dev[s][l]);
        const ssm_layer_weights *wt = sd->cuda ? &w->dw[l].w : &w->hw[l].w;
        ssm_status status;
        if (st->kind == STEP_PREFILL) {
            ssm_prefill_batch b = {
                st->rows,    slots,        sd->cuda ? st->offsets_dev : st->start,
                st->longest, st->slots[s], st->start};
            status = ssm_prefill(sd->ctx, l, &b, wt, &io, world_stream(w, s));
        } else {
            ssm_batch b = {st->rows, st->tokens, slots, st->slots[s]};
            status = st->kind == STEP_DECODE
                         ? ssm_decode(sd->ctx, l, &b, wt, &io, world_stream(w, s))
                         : ssm_verify(sd->ctx, l, &b, wt, &io, &ticket, world_stream(w, s));
        }
        if (!world_expect_ok(w, status, step_kind_name(st->kind), sd->name))
            return 0;
    }
    if (st->kind != STEP_VERIFY)
        return 1;
    const int32_t *accepted = sd->cuda ? st->accepted_dev[s] : st->accepted[s];
    return world_expect_ok(w, ssm_commit(sd->ctx, &ticket, accepted, world_stream(w, s)),
                           "ssm_commit", sd->name);
}

int step_fetch(world *w, step *st)
{
    if (!world_cuda_ok(w, cudaStreamSynchronize(w->stream), "cudaStreamSynchronize"))
        return 0;
    for (int s = 0; s < w->sides; s++)
        for (int32_t l = 0; w->side[s].cuda && l < w->m.layers; l++)
            if (!world_cuda_ok(w,
                               cudaMemcpy(st->out[s][l], st->out_dev[s][l], st->out_bytes,
                                          cudaMemcpyDeviceToHost),
                               "cudaMemcpy (outputs)"))
                return 0;
    return 1;
}

/* ------------------------------------------------------------ comparisons */

static int expect_bitwise(world *w, const pair *p, const char *what, int32_t lane, int32_t layer,
                          const void *got, const void *ref, ssm_dtype t, int64_t n)
{
    int64_t i = test_first_difference(got, ref, t, n);
    if (i < 0)
        return 1;
    return world_fail(w,
                      "%s of lane %d layer %d: %s differs from %s at element %lld of %lld (%.9g vs "
                      "%.9g), must be bit-identical",
                      what, lane, layer, w->side[p->got].name, w->side[p->ref].name, (long long)i,
                      (long long)n, ssm_ref_load(got, t, i), ssm_ref_load(ref, t, i));
}

/* NaN never passes: bit-identical non-finite values fail too. */
static int expect_finite(world *w, int s, const char *what, int32_t lane, int32_t layer,
                         const void *buf, ssm_dtype t, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(ssm_ref_load(buf, t, i)))
            return world_fail(w, "%s of lane %d layer %d: %s has %g at element %lld of %lld", what,
                              lane, layer, w->side[s].name, ssm_ref_load(buf, t, i), (long long)i,
                              (long long)n);
    return 1;
}

int world_check_totals(world *w, int final)
{
    for (int i = 0; i < w->pairs; i++) {
        const pair *p = &w->pair[i];
        for (int32_t l = 0; l < w->m.layers; l++)
            if (!spec_check_total(p->bound, &p->total[l], final))
                return world_fail(w,
                                  "layer %d: %s's outputs vs %s's (%lld elements): relative RMS "
                                  "%.3g; bound: %s",
                                  l, w->side[p->got].name, w->side[p->ref].name,
                                  (long long)p->total[l].elements, spec_total_rel_rms(&p->total[l]),
                                  spec_bound_text(p->bound));
    }
    return 1;
}

int world_compare_outputs(world *w, step *st)
{
    int64_t tok = (int64_t)w->m.value_heads * w->m.value_dim;
    size_t es = ssm_dtype_size(w->ad);
    for (int i = 0; i < w->pairs; i++) {
        pair *p = &w->pair[i];
        rule rl = st->kind == STEP_PREFILL ? p->prefill : p->outputs;
        int one_device = w->side[p->got].cuda == w->side[p->ref].cuda;
        for (int32_t l = 0; l < w->m.layers; l++)
            for (int32_t r = 0; r < st->rows; r++) {
                int64_t n = (int64_t)(st->start[r + 1] - st->start[r]) * tok;
                size_t at = (size_t)st->start[r] * (size_t)tok * es;
                const char *got = (const char *)st->out[p->got][l] + at;
                const char *ref = (const char *)st->out[p->ref][l] + at;
                char why[256];
                if (n == 0 || st->skip[r] || (st->lanes[r] < 0 && !one_device))
                    continue;
                if (st->lanes[r] < 0) {
                    if (!expect_bitwise(w, p, "padding row outputs", -1, l, got, ref, w->ad, n))
                        return 0;
                } else if (rl == RULE_BITWISE) {
                    if (!expect_finite(w, p->got, "outputs", st->lanes[r], l, got, w->ad, n) ||
                        !expect_bitwise(w, p, "outputs", st->lanes[r], l, got, ref, w->ad, n))
                        return 0;
                } else if (!spec_add_block(&p->total[l], got, ref, w->ad, n, why, sizeof why)) {
                    return world_fail(
                        w, "lane %d layer %d row %d: %s's outputs vs %s's: %s; bound: %s",
                        st->lanes[r], l, r, w->side[p->got].name, w->side[p->ref].name, why,
                        spec_bound_text(p->bound));
                }
            }
    }
    return world_check_totals(w, 0);
}

int world_snapshot(world *w, int s, int32_t slot, test_snapshot *out)
{
    side *sd = &w->side[s];
    ssm_status status = sd->cuda ? gpu_snapshot_take(sd->ctx, slot, w->stream, out)
                                 : test_snapshot_take(sd->ctx, slot, out);
    return world_expect_ok(w, status, "ssm_slot_export_canonical", sd->name);
}

/* One exported state of `got` vs `ref` (one slot, one layer), one tensor:
 * relative RMS over the state within the pair's state_bound (CPU vs CUDA:
 * 1e-4 for an fp32 state, 1e-2 for a bf16 one). */
static int state_within_bound(world *w, const pair *p, int32_t lane, int32_t layer, const void *got,
                              const void *ref)
{
    char why[256] = "";
    if (spec_check_tensor(p->state_bound, got, ref, w->sd, ssm_ref_state_elems(&w->m), why,
                          sizeof why))
        return 1;
    return world_fail(w, "exported state of lane %d layer %d: %s vs %s: %s", lane, layer,
                      w->side[p->got].name, w->side[p->ref].name, why);
}

int world_compare_exports(world *w)
{
    for (int32_t lane = 0; lane < w->lanes && !w->failed; lane++) {
        if (w->dirty[lane])
            continue;
        test_snapshot snap[MAX_SIDES];
        memset(snap, 0, sizeof snap);
        int ok = 1;
        for (int s = 0; s < w->sides && ok; s++)
            ok = world_snapshot(w, s, w->side[s].slot[lane], &snap[s]);
        for (int i = 0; i < w->pairs && ok; i++) {
            const pair *p = &w->pair[i];
            const test_snapshot *g = &snap[p->got], *r = &snap[p->ref];
            for (int32_t l = 0; l < w->m.layers && ok; l++) {
                ok = expect_bitwise(w, p, "conv window", lane, l, g->conv[l], r->conv[l], w->ad,
                                    ssm_ref_window_elems(&w->m));
                if (ok && p->states == RULE_BITWISE)
                    ok = expect_finite(w, p->got, "exported state", lane, l, g->state[l], w->sd,
                                       ssm_ref_state_elems(&w->m)) &&
                         expect_bitwise(w, p, "exported state", lane, l, g->state[l], r->state[l],
                                        w->sd, ssm_ref_state_elems(&w->m));
                else if (ok)
                    ok = state_within_bound(w, p, lane, l, g->state[l], r->state[l]);
            }
        }
        for (int s = 0; s < w->sides; s++)
            test_snapshot_free(&snap[s]);
    }
    return !w->failed;
}

int world_expect_flags(world *w, int s, uint32_t mask, uint32_t expect)
{
    side *sd = &w->side[s];
    ssm_ctx_report report;
    if (!world_expect_ok(w, ssm_ctx_status(sd->ctx, &report), "ssm_ctx_status", sd->name))
        return 0;
    int32_t flagged = 0;
    for (int32_t lane = 0; lane < w->lanes; lane++) {
        uint32_t flags = 0, want = (mask >> lane) & 1u ? expect : 0;
        if (!world_expect_ok(w, ssm_slot_flags(sd->ctx, sd->slot[lane], &flags), "ssm_slot_flags",
                             sd->name))
            return 0;
        if (flags != want)
            return world_fail(w, "%s: slot %d (lane %d) has flags 0x%x, want 0x%x", sd->name,
                              sd->slot[lane], lane, flags, want);
        flagged += want != 0;
    }
    if (report.flags != (mask ? expect : 0u) || report.flagged_slots != flagged)
        return world_fail(w, "%s: ssm_ctx_status reports flags 0x%x on %d slots, want 0x%x on %d",
                          sd->name, report.flags, report.flagged_slots, mask ? expect : 0u,
                          flagged);
    return 1;
}

int32_t world_pick_rows(world *w, int32_t count, int32_t pads, int32_t *lanes)
{
    int clean[MAX_LANES];
    for (int32_t i = 0; i < w->lanes; i++)
        clean[i] = !w->dirty[i];
    return test_pick_rows(&w->rng, clean, w->lanes, count, pads, MAX_ROWS, lanes);
}

int step_finish(world *w, step *st)
{
    int ok = step_upload(w, st);
    for (int s = 0; s < w->sides && ok; s++)
        ok = world_run_side(w, st, s);
    ok = ok && step_fetch(w, st) && world_compare_outputs(w, st);
    step_free(w, st);
    return ok;
}
