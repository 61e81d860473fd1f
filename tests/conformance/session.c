/* A conformance session: one context of the plugin under test (on the CPU
 * or CUDA device 0, its calls staged by device_io.c), the reference per slot
 * (reference.c), and the engine's operations, each checked as it runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/conformance/conformance.h"

#define SENTINEL 0xA5

conform_target conform;

/* ------------------------------------------------------------ options */

static void add_option(session *s, const char *key, const char *value)
{
    ck_assert_msg(s->options_count[0] < CONFORM_MAX_OPTIONS, "too many mode options");
    ssm_mode_option *o = &s->options[s->options_count[0]++];
    o->key = key;
    o->value = value;
    o->line = 0;
}

/* The mode's section: SSM_CONFORM_OPTIONS / the command line's options when
 * given ("key=value,key=value"); otherwise, for the built-in replay mode, an
 * outputs form from the variant bits, so every form is covered:
 *   - matrix for GDN with VARIANT_ALT;
 *   - identity for the other GVA variants with fp32 activations (GDN and
 *     KDA);
 *   - exact, the default (no `outputs` option), for the rest and for every
 *     bf16 state (the plugin refuses the identity forms over one);
 * and a history length L among {2T (exactly, T a power of two), 4T rounded
 * up to a power of two, 64}. */
static void session_options(session *s, int variant, int choice)
{
    if (conform.options && *conform.options) {
        snprintf(s->option_text, sizeof s->option_text, "%s", conform.options);
        char *save = NULL;
        for (char *item = strtok_r(s->option_text, ",", &save); item;
             item = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(item, '=');
            ck_assert_msg(eq != NULL, "mode option '%s' is not key=value", item);
            *eq = '\0';
            add_option(s, item, eq + 1);
        }
    } else if (strcmp(conform.mode, "replay") == 0) {
        const char *outputs = NULL;
        if (s->m.kind == SSM_MODEL_GDN && (variant & VARIANT_ALT))
            outputs = "matrix";
        else if ((variant & VARIANT_GVA) && (variant & VARIANT_ACT_F32))
            outputs = "identity";
        if (s->sd == SSM_DTYPE_BF16)
            outputs = NULL; /* the identity forms need an fp32 state */
        int32_t history = choice == 0 ? 2 * s->t_max : choice == 1 ? 4 * s->t_max : 64;
        int32_t pow2 = 1;
        while (pow2 < history)
            pow2 *= 2;
        snprintf(s->option_text, sizeof s->option_text, "%d", pow2);
        add_option(s, "history", s->option_text);
        if (outputs)
            add_option(s, "outputs", outputs);
    }
    if (s->options_count[0] == 0)
        return;
    s->section_names[0] = conform.mode;
    s->section_lines[0] = 0;
    s->option_rows[0] = s->options;
    s->cfg.mode_sections_count = 1;
    s->cfg.mode_section_names = s->section_names;
    s->cfg.mode_section_lines = s->section_lines;
    s->cfg.mode_options_count = s->options_count;
    s->cfg.mode_options = s->option_rows;
}

/* ------------------------------------------------------------ open/close */

/* The capabilities the variant needs that the plugin lacks (0: none). */
static uint64_t missing_capabilities(const session *s)
{
    uint64_t need = (s->cuda ? SSM_CAP_CUDA : SSM_CAP_CPU) | SSM_CAP_PAGES;
    need |= s->m.kind == SSM_MODEL_KDA ? SSM_CAP_KDA : SSM_CAP_GDN;
    need |= s->sd == SSM_DTYPE_BF16 ? SSM_CAP_STATE_BF16 : SSM_CAP_STATE_F32;
    need |= s->ad == SSM_DTYPE_BF16 ? SSM_CAP_ACT_BF16 : SSM_CAP_ACT_F32;
    int32_t count = 0;
    ssm_plugin_info *infos = calloc(64, sizeof *infos);
    ck_assert_int_eq(ssm_plugins_list(conform.plugin_dir, infos, 64, &count), SSM_OK);
    uint64_t have = 0;
    int found = 0;
    for (int32_t i = 0; i < count && i < 64; i++)
        if (strcmp(infos[i].name, conform.mode) == 0 && infos[i].status == SSM_OK) {
            have = infos[i].capabilities;
            found = 1;
            break;
        }
    free(infos);
    ck_assert_msg(found, "mode '%s': no loadable plugin on the search path (plugin_dir %s)",
                  conform.mode, conform.plugin_dir ? conform.plugin_dir : "(none)");
    return need & ~have;
}

/* Key dims of the CUDA sessions: the widths every CUDA mode takes (the
 * built-in kernels take no others), Qwen3-Next's and Kimi-Linear's 128
 * among them. Value dims stay test_random_dims's multiples of 8. */
static const int32_t cuda_key_dims[] = {32, 64, 128};

int conform_session_open(session *s, int variant, uint64_t salt, int32_t min_layers)
{
    memset(s, 0, sizeof *s);
    s->op = "open";
    s->cuda = conform.device == SSM_DEVICE_CUDA;
    test_rng_init(&s->rng,
                  test_seed() ^ ((salt * 131 + (uint64_t)variant) * 0x9e3779b97f4a7c15ull));
    ssm_model_kind kind = (variant & VARIANT_KDA) ? SSM_MODEL_KDA : SSM_MODEL_GDN;
    test_random_dims(&s->rng, kind, variant & VARIANT_GVA, &s->m);
    if (s->cuda)
        s->m.key_dim = cuda_key_dims[test_rng_int(&s->rng, 0, 2)];
    s->m.has_lower_bound = kind == SSM_MODEL_KDA && (variant & VARIANT_ALT);
    s->m.lower_bound = s->m.has_lower_bound ? (float)-(1.0 + 9.0 * test_rng_uniform(&s->rng)) : 0;
    if (s->m.layers < min_layers)
        s->m.layers = min_layers;
    s->sd = (variant & VARIANT_STATE_BF16) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    s->ad = (variant & VARIANT_ACT_F32) ? SSM_DTYPE_F32 : SSM_DTYPE_BF16;
    s->cap = test_rng_int(&s->rng, 3, CONFORM_MAX_CAP);
    int choice = test_rng_int(&s->rng, 0, 2);
    int32_t ceiling = conform.max_tokens >= 1 ? conform.max_tokens : 5;
    s->t_max = choice == 0 ? 1 << test_rng_int(&s->rng, 0, 2) : test_rng_int(&s->rng, 1, 5);
    if (s->t_max > ceiling)
        s->t_max = ceiling;
    test_config(&s->cfg, &s->m, conform.mode, s->sd, s->ad, s->cap, s->t_max - 1);
    s->cfg.plugin_dir = conform.plugin_dir;
    if (s->cuda) {
        s->cfg.device = (ssm_device){SSM_DEVICE_CUDA, 0};
        /* One CUDA session in four prefills under the fast precision (the
         * tensor-core products), held to that prefill's bound (reference.c). */
        if (test_rng_int(&s->rng, 0, 3) == 0)
            s->cfg.prefill_precision = SSM_PREFILL_PRECISION_FAST;
    }
    session_options(s, variant, choice);

    int n = snprintf(s->desc, sizeof s->desc,
                     "%s, variant %d: %s%s H=%d HV=%d K=%d V=%d W=%d layers=%d state=%s act=%s "
                     "slots=%d T_max=%d",
                     conform.mode, variant, ssm_model_kind_name(s->m.kind),
                     s->m.has_lower_bound ? " lower-bound" : "", s->m.heads, s->m.value_heads,
                     s->m.key_dim, s->m.value_dim, s->m.conv_width, s->m.layers,
                     ssm_dtype_name(s->sd), ssm_dtype_name(s->ad), s->cap, s->t_max);
    for (int32_t i = 0; i < s->options_count[0] && n > 0 && (size_t)n < sizeof s->desc; i++)
        n += snprintf(s->desc + n, sizeof s->desc - (size_t)n, " %s=%s", s->options[i].key,
                      s->options[i].value);
    if (s->cuda && n > 0 && (size_t)n < sizeof s->desc)
        snprintf(s->desc + n, sizeof s->desc - (size_t)n, " on cuda:0%s",
                 s->cfg.prefill_precision == SSM_PREFILL_PRECISION_FAST
                     ? " prefill_precision=fast"
                     : "");

    uint64_t missing = missing_capabilities(s);
    if (missing) {
        ssm_ctx *ctx = NULL;
        ssm_status st = ssm_ctx_create(&s->cfg, &ctx);
        ck_assert_msg(st != SSM_OK, "%s: the plugin lacks capabilities 0x%llx yet accepts the "
                      "configuration", s->desc, (unsigned long long)missing);
        return 0;
    }
    ssm_status st = ssm_ctx_create(&s->cfg, &s->ctx);
    ck_assert_msg(st == SSM_OK, "%s: ssm_ctx_create: %s (%s)", s->desc, ssm_status_name(st),
                  ssm_last_error());
    s->w = calloc((size_t)s->m.layers, sizeof *s->w);
    for (int32_t l = 0; l < s->m.layers; l++)
        test_weights_make(&s->rng, &s->m, test_rng_int(&s->rng, 0, 1), &s->w[l]);
    staged_open(s);
    ref_open(s);
    s->op = "idle";
    return 1;
}

void conform_session_close(session *s)
{
    if (s->ctx) {
        s->op = "end";
        ref_check_totals(s, 1);
    }
    staged_close(s);
    if (s->w)
        for (int32_t l = 0; l < s->m.layers; l++)
            test_weights_free(&s->w[l]);
    free(s->w);
    ref_close(s);
    ssm_ctx_destroy(s->ctx);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ slots */

static void check_slot(session *s, int32_t slot)
{
    test_snapshot snap;
    CONFORM_EXPECT(s, staged_export(s, s->ctx, slot, &snap), SSM_OK);
    ref_check_export(s, slot, &snap);
    test_snapshot_free(&snap);
}

int32_t session_count_acquired(const session *s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < s->cap; i++)
        n += s->acquired[i];
    return n;
}

void session_check_slots(session *s)
{
    for (int32_t slot = 0; slot < s->cap; slot++)
        if (s->acquired[slot])
            check_slot(s, slot);
    ssm_pool_stats st = {-1, -1, -1};
    ssm_pool_query(s->ctx, &st);
    int32_t used = session_count_acquired(s);
    ck_assert_msg(st.capacity == s->cap && st.used == used && st.free == s->cap - used,
                  "%s [%s, step %d]: pool says capacity %d used %d free %d; want %d %d %d",
                  s->desc, s->op, s->step, st.capacity, st.used, st.free, s->cap, used,
                  s->cap - used);
    ssm_ctx_report rep;
    CONFORM_EXPECT(s, ssm_ctx_status(s->ctx, &rep), SSM_OK);
    ck_assert_msg(rep.flags == 0 && rep.flagged_slots == 0,
                  "%s [%s, step %d]: flags 0x%x raised on %d slots (first %d)", s->desc, s->op,
                  s->step, rep.flags, rep.flagged_slots, rep.first_flagged);
    ref_check_totals(s, 0);
}

void session_expect_flagged(session *s, int32_t flagged, uint32_t flag)
{
    for (int32_t slot = 0; slot < s->cap; slot++) {
        if (!s->acquired[slot])
            continue;
        uint32_t flags = 0;
        CONFORM_EXPECT(s, ssm_slot_flags(s->ctx, slot, &flags), SSM_OK);
        if (slot == flagged)
            ck_assert_msg(flags & flag, "%s [%s, step %d]: slot %d lacks flag 0x%x (flags 0x%x)",
                          s->desc, s->op, s->step, slot, flag, flags);
        else
            ck_assert_msg(flags == 0, "%s [%s, step %d]: slot %d is flagged 0x%x", s->desc, s->op,
                          s->step, slot, flags);
    }
}

int32_t session_acquire(session *s)
{
    int32_t slot = -1;
    CONFORM_EXPECT(s, ssm_slot_acquire(s->ctx, &slot), SSM_OK);
    ck_assert_msg(slot >= 0 && slot < s->cap && !s->acquired[slot],
                  "%s: acquire returned slot %d (capacity %d, %s)", s->desc, slot, s->cap,
                  slot >= 0 && slot < s->cap ? "already held" : "out of range");
    s->acquired[slot] = 1;
    ref_reset(s, slot);
    check_slot(s, slot); /* fresh: zero window and state */
    return slot;
}

void session_release(session *s, int32_t slot)
{
    CONFORM_EXPECT(s, ssm_slot_release(s->ctx, slot), SSM_OK);
    s->acquired[slot] = 0;
}

int32_t session_pick_slot(session *s)
{
    int32_t n = session_count_acquired(s);
    if (n == 0)
        return -1;
    int32_t k = test_rng_int(&s->rng, 0, n - 1);
    for (int32_t slot = 0; slot < s->cap; slot++)
        if (s->acquired[slot] && k-- == 0)
            return slot;
    return -1;
}

/* Rows from the acquired slots not marked in busy (NULL: none busy). */
static int32_t rows_excluding(session *s, int32_t live, int32_t pads, const int *busy,
                              int32_t *rows)
{
    int32_t pool[CONFORM_MAX_CAP], n = 0;
    for (int32_t slot = 0; slot < s->cap; slot++)
        if (s->acquired[slot] && !(busy && busy[slot]))
            pool[n++] = slot;
    for (int32_t i = n - 1; i > 0; i--) {
        int32_t j = test_rng_int(&s->rng, 0, i);
        int32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
    if (live > n)
        live = n;
    if (live + pads > CONFORM_MAX_ROWS)
        pads = CONFORM_MAX_ROWS - live;
    int32_t count = 0;
    for (int32_t i = 0; i < live; i++)
        rows[count++] = pool[i];
    for (int32_t p = 0; p < pads; p++) {
        int32_t at = test_rng_int(&s->rng, 0, count);
        memmove(rows + at + 1, rows + at, sizeof *rows * (size_t)(count - at));
        rows[at] = -1;
        count++;
    }
    return count;
}

int32_t session_rows(session *s, int32_t live, int32_t pads, int32_t *rows)
{
    return rows_excluding(s, live, pads, NULL, rows);
}

/* ------------------------------------------------------------ snapshots */

void session_snapshots(session *s, const int *busy, test_snapshot *snaps)
{
    for (int32_t slot = 0; slot < s->cap; slot++) {
        memset(&snaps[slot], 0, sizeof snaps[slot]);
        if (s->acquired[slot] && !(busy && busy[slot]))
            CONFORM_EXPECT(s, staged_export(s, s->ctx, slot, &snaps[slot]), SSM_OK);
    }
}

void session_snapshots_equal(session *s, const test_snapshot *a, const test_snapshot *b,
                             const char *what)
{
    for (int32_t slot = 0; slot < s->cap; slot++)
        if (a[slot].layers || b[slot].layers)
            ck_assert_msg(test_snapshot_equal(&a[slot], &b[slot]),
                          "%s [%s, step %d]: %s changed slot %d", s->desc, s->op, s->step, what,
                          slot);
}

void session_snapshots_free(session *s, test_snapshot *snaps)
{
    for (int32_t slot = 0; slot < s->cap; slot++)
        if (snaps[slot].layers)
            test_snapshot_free(&snaps[slot]);
}

/* ------------------------------------------------------------ inputs */

size_t session_out_bytes(const session *s, int64_t tokens)
{
    return (size_t)(tokens * s->m.value_heads * s->m.value_dim) * ssm_dtype_size(s->ad);
}

test_io *session_ios(session *s, int64_t n)
{
    test_io *ios = calloc((size_t)s->m.layers, sizeof *ios);
    for (int32_t l = 0; l < s->m.layers; l++) {
        test_io_make(&s->rng, &s->m, s->ad, n, &ios[l]);
        memset(ios[l].out, SENTINEL, session_out_bytes(s, n > 0 ? n : 1));
    }
    return ios;
}

void session_ios_free(session *s, test_io *ios)
{
    for (int32_t l = 0; l < s->m.layers; l++)
        test_io_free(&ios[l]);
    free(ios);
}

void session_assert_sentinel(session *s, const test_io *ios, int64_t t0, int64_t t1,
                             const char *what)
{
    /* Check's assertions are costly (each reports its location to the
     * runner): look first, assert once. */
    size_t from = session_out_bytes(s, t0), to = session_out_bytes(s, t1);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (size_t i = from; i < to; i++)
            if (((const unsigned char *)ios[l].out)[i] != SENTINEL)
                ck_abort_msg("%s [%s, step %d]: %s: layer %d output byte %zu (tokens "
                             "%lld..%lld) was written",
                             s->desc, s->op, s->step, what, l, i, (long long)t0, (long long)t1);
}

/* Checks the outputs of tokens [t0, t0 + n) of one row (slot) in layer l;
 * the reference keeps the first `keep` tokens. */
static void check_row(session *s, const test_io *io, int32_t l, int32_t row, int32_t slot,
                      int64_t t0, int64_t n, int64_t keep, int prefill)
{
    size_t es = ssm_dtype_size(s->ad);
    ssm_step_io at = {(const char *)io->io.x + t0 * ssm_conv_channels(&s->m) * (int64_t)es,
                      (const char *)io->io.gate + t0 * ssm_gate_width(&s->m) * (int64_t)es,
                      (const char *)io->io.beta + t0 * s->m.value_heads * (int64_t)es,
                      (char *)io->io.out + t0 * s->m.value_heads * s->m.value_dim * (int64_t)es};
    ref_check_row(s, &at, l, row, slot, n, keep, prefill);
}

/* ------------------------------------------------------------ forwards */

void forward_begin(session *s, forward *f, int32_t T, int32_t live, int32_t pads,
                   const int *busy)
{
    int32_t slots[CONFORM_MAX_ROWS];
    int32_t rows = rows_excluding(s, live, pads, busy, slots);
    forward_setup(s, f, T, rows, slots);
}

void forward_setup(session *s, forward *f, int32_t T, int32_t rows, const int32_t *slots)
{
    memset(f, 0, sizeof *f);
    f->T = T;
    f->rows = rows;
    memcpy(f->slots, slots, sizeof *slots * (size_t)rows);
    for (int32_t r = 0; r < f->rows; r++) {
        if (f->slots[r] >= 0)
            f->accepted[r] = test_rng_int(&s->rng, 1, T);
        else /* ignored for padding rows */
            f->accepted[r] = test_rng_int(&s->rng, 0, 1) ? 0 : T + 1;
    }
    f->io = session_ios(s, (int64_t)f->rows * T);
    f->staged_slots = staged_array(s, f->slots, f->rows);
    ssm_ticket zero = SSM_TICKET_INIT;
    f->ticket = zero;
}

void forward_busy(const forward *f, int *busy)
{
    for (int32_t r = 0; r < f->rows; r++)
        if (f->slots[r] >= 0)
            busy[f->slots[r]] = 1;
}

void forward_verify(session *s, forward *f, int32_t l0, int32_t l1)
{
    ssm_batch b = {f->rows, f->T, f->staged_slots, f->slots};
    for (int32_t l = l0; l < l1; l++)
        CONFORM_EXPECT(s, staged_verify(s, s->ctx, l, &b, &f->io[l].io, &f->ticket), SSM_OK);
}

void forward_commit(session *s, forward *f)
{
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f->ticket, f->accepted, f->rows), SSM_OK);
    forward_check(s, f, -1);
}

void forward_check(session *s, forward *f, int32_t skip_row)
{
    for (int32_t l = 0; l < s->m.layers; l++)
        for (int32_t r = 0; r < f->rows; r++) {
            int64_t t0 = (int64_t)r * f->T;
            if (r == skip_row)
                continue;
            if (f->slots[r] >= 0)
                check_row(s, &f->io[l], l, r, f->slots[r], t0, f->T, f->accepted[r], 0);
            else
                session_assert_sentinel(s, f->io, t0, t0 + f->T, "verify, padding row");
        }
}

void forward_free(session *s, forward *f)
{
    if (f->io)
        session_ios_free(s, f->io);
    f->io = NULL;
    staged_array_free(s, f->staged_slots);
    f->staged_slots = NULL;
}

/* ------------------------------------------------------------ operations */

static int32_t random_pads(session *s)
{
    int32_t k = test_rng_int(&s->rng, 0, 5);
    return k < 3 ? 0 : k - 2;
}

/* A row length for prefill: empty, shorter than the conv window (W-1),
 * around it, or long. */
static int32_t prefill_length(session *s)
{
    int32_t w1 = s->m.conv_width - 1;
    switch (test_rng_int(&s->rng, 0, 4)) {
    case 0:
        return 0;
    case 1:
        return w1 > 1 ? test_rng_int(&s->rng, 1, w1 - 1) : 0;
    case 2:
        return test_rng_int(&s->rng, w1, w1 + 2);
    default:
        return test_rng_int(&s->rng, 1, CONFORM_MAX_PREFILL);
    }
}

void op_prefill(session *s)
{
    s->op = "prefill";
    int32_t rows[CONFORM_MAX_ROWS], offsets[CONFORM_MAX_ROWS + 1];
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    int32_t n = session_rows(s, live, random_pads(s), rows);
    int32_t longest = 0;
    offsets[0] = 0;
    for (int32_t r = 0; r < n; r++) {
        int32_t len = prefill_length(s);
        offsets[r + 1] = offsets[r] + len;
        if (len > longest)
            longest = len;
    }
    const int32_t *staged_rows = staged_array(s, rows, n),
                  *staged_offsets = staged_array(s, offsets, n + 1);
    int32_t max_row_tokens = longest + test_rng_int(&s->rng, 0, 2);
    ssm_prefill_batch b = {n, staged_rows, staged_offsets, max_row_tokens, rows, offsets};
    test_io *io = session_ios(s, offsets[n]);
    for (int32_t l = 0; l < s->m.layers; l++)
        CONFORM_EXPECT(s, staged_prefill(s, s->ctx, l, &b, &io[l].io), SSM_OK);
    staged_array_free(s, staged_rows);
    staged_array_free(s, staged_offsets);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (int32_t r = 0; r < n; r++) {
            int32_t len = offsets[r + 1] - offsets[r];
            if (rows[r] >= 0)
                check_row(s, &io[l], l, r, rows[r], offsets[r], len, len, 1);
            else
                session_assert_sentinel(s, io, offsets[r], offsets[r + 1], "prefill, padding row");
        }
    session_ios_free(s, io);
}

void op_decode(session *s)
{
    s->op = "decode";
    int32_t rows[CONFORM_MAX_ROWS];
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    int32_t n = session_rows(s, live, random_pads(s), rows);
    const int32_t *staged_rows = staged_array(s, rows, n);
    ssm_batch b = {n, 1, staged_rows, rows};
    test_io *io = session_ios(s, n);
    for (int32_t l = 0; l < s->m.layers; l++) {
        CONFORM_EXPECT(s, staged_decode(s, s->ctx, l, &b, &io[l].io), SSM_OK);
        for (int32_t r = 0; r < n; r++)
            if (rows[r] >= 0)
                check_row(s, &io[l], l, r, rows[r], r, 1, 1, 0);
    }
    for (int32_t r = 0; r < n; r++)
        if (rows[r] < 0)
            session_assert_sentinel(s, io, r, r + 1, "decode, padding row");
    session_ios_free(s, io);
    staged_array_free(s, staged_rows);
}

void op_verify(session *s)
{
    s->op = "verify";
    forward f;
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    forward_begin(s, &f, test_rng_int(&s->rng, 1, s->t_max), live, random_pads(s), NULL);
    forward_verify(s, &f, 0, s->m.layers);
    forward_commit(s, &f);
    forward_free(s, &f);
}

/* Two forwards over disjoint rows open side by side, layers interleaved,
 * committed in random order. */
void op_verify_two_forwards(session *s)
{
    s->op = "two forwards";
    int32_t n = session_count_acquired(s);
    if (n < 2) {
        op_verify(s);
        return;
    }
    forward a, b;
    int busy[CONFORM_MAX_CAP] = {0};
    forward_begin(s, &a, test_rng_int(&s->rng, 1, s->t_max), test_rng_int(&s->rng, 1, n - 1),
                  random_pads(s), NULL);
    forward_busy(&a, busy);
    forward_begin(s, &b, test_rng_int(&s->rng, 1, s->t_max), n, random_pads(s), busy);
    for (int32_t l = 0; l < s->m.layers; l++) {
        forward_verify(s, &a, l, l + 1);
        forward_verify(s, &b, l, l + 1);
    }
    if (test_rng_int(&s->rng, 0, 1)) {
        forward_commit(s, &b);
        forward_commit(s, &a);
    } else {
        forward_commit(s, &a);
        forward_commit(s, &b);
    }
    forward_free(s, &a);
    forward_free(s, &b);
}

void op_reset(session *s)
{
    s->op = "reset";
    int32_t slot = session_pick_slot(s);
    CONFORM_EXPECT(s, ssm_slot_reset(s->ctx, slot, s->stream), SSM_OK);
    ref_reset(s, slot);
}

/* Releases a slot (or two) and acquires again: the slot that comes back,
 * whichever it is, is fresh. */
void op_release_reacquire(session *s)
{
    s->op = "release+reacquire";
    int32_t k = test_rng_int(&s->rng, 1, 2);
    for (int32_t i = 0; i < k && session_count_acquired(s) > 1; i++)
        session_release(s, session_pick_slot(s));
    session_check_slots(s);
    while (session_count_acquired(s) < s->cap)
        session_acquire(s);
}

/* A non-finite input in one row: that slot alone is flagged, every other row
 * is exact; then the flagged slot is reset (flags cleared). */
void op_nonfinite(session *s)
{
    s->op = "non-finite input";
    int32_t rows[CONFORM_MAX_ROWS];
    int32_t n = session_rows(s, test_rng_int(&s->rng, 1, session_count_acquired(s)),
                             random_pads(s), rows);
    int32_t bad = -1, bad_row = -1;
    for (int32_t r = 0; r < n && bad < 0; r++)
        if (rows[r] >= 0) {
            bad = rows[r];
            bad_row = r;
        }
    int decode = test_rng_int(&s->rng, 0, 1);
    int32_t T = decode ? 1 : test_rng_int(&s->rng, 1, s->t_max);
    test_io *io = session_ios(s, (int64_t)n * T);
    int32_t pl = test_rng_int(&s->rng, 0, s->m.layers - 1);
    int64_t tok = (int64_t)bad_row * T + test_rng_int(&s->rng, 0, T - 1);
    ssm_ref_store(io[pl].x, s->ad, tok * ssm_conv_channels(&s->m), NAN);
    const int32_t *staged_rows = staged_array(s, rows, n);
    ssm_batch b = {n, T, staged_rows, rows};
    ssm_ticket t = SSM_TICKET_INIT;
    int32_t accepted[CONFORM_MAX_ROWS];
    for (int32_t r = 0; r < n; r++)
        accepted[r] = test_rng_int(&s->rng, 1, T);
    for (int32_t l = 0; l < s->m.layers; l++)
        CONFORM_EXPECT(s,
                       decode ? staged_decode(s, s->ctx, l, &b, &io[l].io)
                              : staged_verify(s, s->ctx, l, &b, &io[l].io, &t),
                       SSM_OK);
    if (!decode)
        CONFORM_EXPECT(s, staged_commit(s, s->ctx, &t, accepted, n), SSM_OK);
    staged_array_free(s, staged_rows);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (int32_t r = 0; r < n; r++)
            if (rows[r] >= 0 && rows[r] != bad)
                check_row(s, &io[l], l, r, rows[r], (int64_t)r * T, T, accepted[r], 0);
    session_expect_flagged(s, bad, SSM_FLAG_NONFINITE_INPUT);
    CONFORM_EXPECT(s, ssm_slot_reset(s->ctx, bad, s->stream), SSM_OK);
    ref_reset(s, bad);
    session_ios_free(s, io);
}

/* A forward verified on some layers, then aborted: its slots are fresh. */
void op_abort(session *s)
{
    s->op = "abort";
    forward f;
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    forward_begin(s, &f, test_rng_int(&s->rng, 1, s->t_max), live, random_pads(s), NULL);
    forward_verify(s, &f, 0, test_rng_int(&s->rng, 1, s->m.layers));
    CONFORM_EXPECT(s, ssm_forward_abort(s->ctx, &f.ticket, s->stream), SSM_OK);
    for (int32_t r = 0; r < f.rows; r++)
        if (f.slots[r] >= 0)
            ref_reset(s, f.slots[r]);
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f.ticket, f.accepted, f.rows),
                   SSM_ERR_TICKET_STALE);
    forward_free(s, &f);
}

void op_random(session *s, int with_errors)
{
    if (session_count_acquired(s) == 0)
        session_acquire(s);
    int k = test_rng_int(&s->rng, 0, 99);
    if (k < 14)
        op_prefill(s);
    else if (k < 32)
        op_decode(s);
    else if (k < 62)
        op_verify(s);
    else if (k < 72)
        op_verify_two_forwards(s);
    else if (k < 76)
        op_reset(s);
    else if (k < 82)
        op_release_reacquire(s);
    else if (k < 84)
        op_nonfinite(s);
    else if (k < 86)
        op_abort(s);
    else if (with_errors)
        error_random(s);
    else
        op_verify(s);
    session_check_slots(s);
    s->step++;
}
