/* A stress session: the random model and contexts, the checks after every
 * operation, the operation mix, and failure reporting (see stress.h). */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/stress/stress.h"

static const char *const MODES[] = {"native", "compact", "replay"};

/* ------------------------------------------------------------ failure */

/* The failure report: what failed, where, and how to replay it. */
static void report(const st_session *s, const char *msg)
{
    printf("# FAIL %s\n#   at operation %lld (%s): %s\n", s->desc, (long long)s->op,
           s->op_name ? s->op_name : "?", msg);
    const char *plugins = getenv("SSMSTATE_PLUGIN_PATH");
    printf("#   replay: %s%s%sSSM_STRESS_SEED=%llu SSM_STRESS_MODES=%s SSM_STRESS_KINDS=%s "
           "SSM_STRESS_OPS=%lld SSM_STRESS_VERBOSE=1 tests/stress/check_stress\n",
           plugins ? "SSMSTATE_PLUGIN_PATH=" : "", plugins ? plugins : "", plugins ? " " : "",
           (unsigned long long)s->seed, s->mode, ssm_model_kind_name(s->kind),
           (long long)s->op + 1);
    fflush(stdout);
}

_Noreturn void st_fail(st_session *s, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    report(s, msg);
    longjmp(s->fail, 1);
}

/* A crash (a library bug the checks did not see first) still names the
 * session and operation; best effort, then the default action. */
static st_session *running;

static void on_crash(int sig)
{
    if (running) {
        char msg[64];
        snprintf(msg, sizeof msg, "crashed with signal %d", sig);
        report(running, msg);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* ------------------------------------------------------------ slots */

int32_t st_count_acquired(const st_session *s, int ci)
{
    int32_t n = 0;
    for (int32_t i = 0; i < s->cap; i++)
        n += s->c[ci].acquired[i];
    return n;
}

int st_busy_in(const st_session *s, int ci, int32_t slot)
{
    for (int fi = 0; fi < ST_OPEN; fi++) {
        const st_fwd *f = &s->c[ci].fwd[fi];
        for (int32_t r = 0; f->open && r < f->rows; r++)
            if (f->slots[r] == slot)
                return fi;
    }
    return -1;
}

int32_t st_idle_slots(const st_session *s, int ci, int *idle)
{
    int32_t n = 0;
    for (int32_t i = 0; i < s->cap; i++) {
        idle[i] = s->c[ci].acquired[i] && st_busy_in(s, ci, i) < 0;
        n += idle[i];
    }
    return n;
}

int32_t st_pick_idle(st_session *s, int ci)
{
    int idle[ST_MAX_CAP];
    int32_t n = st_idle_slots(s, ci, idle);
    if (n == 0)
        return -1;
    int32_t k = test_rng_int(&s->rng, 0, n - 1);
    for (int32_t i = 0; i < s->cap; i++)
        if (idle[i] && k-- == 0)
            return i;
    return -1;
}

int32_t st_pick_free(const st_session *s, int ci)
{
    for (int32_t i = 0; i < s->cap; i++)
        if (!s->c[ci].acquired[i])
            return i;
    return -1;
}

/* ------------------------------------------------------------ checks */

void st_check_all(st_session *s)
{
    for (int ci = 0; ci < 2; ci++) {
        st_ctx *c = &s->c[ci];
        int idle[ST_MAX_CAP];
        st_idle_slots(s, ci, idle);
        for (int32_t slot = 0; slot < s->cap; slot++)
            if (idle[slot])
                st_model_check_slot(s, ci, slot);
        ssm_pool_stats st = {-1, -1, -1};
        ssm_pool_query(c->ctx, &st);
        int32_t used = st_count_acquired(s, ci);
        if (st.capacity != s->cap || st.used != used || st.free != s->cap - used ||
            st.free + st.used != st.capacity)
            st_fail(s, "%s: pool says capacity %d used %d free %d; the model %d %d %d", c->mode,
                    st.capacity, st.used, st.free, s->cap, used, s->cap - used);
        ssm_ctx_report rep;
        ST_EXPECT(s, ssm_ctx_status(c->ctx, &rep), SSM_OK);
        if (rep.flags || rep.flagged_slots)
            st_fail(s, "%s: flags 0x%x on %d slots (first %d)", c->mode, rep.flags,
                    rep.flagged_slots, rep.first_flagged);
        st_model_check_totals(s, ci, 0);
    }
}

/* ------------------------------------------------------------ open/close */

/* A power of two >= n. */
static int32_t pow2_at_least(int32_t n)
{
    int32_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* The config of context ci in `mode`; replay gets a random history length
 * and outputs form among those its checks allow. */
static void ctx_config(st_session *s, int ci, const char *mode)
{
    st_ctx *c = &s->c[ci];
    c->mode = mode;
    test_config(&c->cfg, &s->m, mode, s->sd, s->ad, s->cap, s->t_max - 1);
    snprintf(c->desc, sizeof c->desc, "%s", mode);
    if (strcmp(mode, "replay") != 0)
        return;
    int32_t least = pow2_at_least(2 * s->t_max), pick = test_rng_int(&s->rng, 0, 2);
    int32_t history = pick == 0 ? least : pick == 1 ? (least > 16 ? least : 16) : 64;
    snprintf(c->history, sizeof c->history, "%d", history);
    int n = 0;
    c->options[n++] = (ssm_mode_option){"history", c->history, 0};
    int form = test_rng_int(&s->rng, 0, 2);
    if (s->sd == SSM_DTYPE_F32 && form == 1)
        c->options[n++] = (ssm_mode_option){"outputs", "identity", 0};
    else if (s->sd == SSM_DTYPE_F32 && form == 2 && s->m.kind == SSM_MODEL_GDN)
        c->options[n++] = (ssm_mode_option){"outputs", "matrix", 0};
    snprintf(c->desc, sizeof c->desc, "replay(history=%d%s%s)", history, n > 1 ? " outputs=" : "",
             n > 1 ? c->options[1].value : "");
    c->section_names[0] = "replay";
    c->options_count[0] = n;
    c->option_rows[0] = c->options;
    c->cfg.mode_sections_count = 1;
    c->cfg.mode_section_names = c->section_names;
    c->cfg.mode_section_lines = c->section_lines;
    c->cfg.mode_options_count = c->options_count;
    c->cfg.mode_options = c->option_rows;
}

/* A small random model of the session's kind (GVA at random), dtypes,
 * pool and verify width. */
static void pick_model(st_session *s)
{
    static const int32_t dims[] = {8, 16, 16, 32};
    ssm_model_dims *m = &s->m;
    memset(m, 0, sizeof *m);
    m->kind = s->kind;
    int k = test_rng_int(&s->rng, 0, 9);
    m->layers = k < 3 ? 1 : k < 8 ? 2 : 3;
    m->heads = test_rng_int(&s->rng, 1, 2);
    m->value_heads = m->heads * test_rng_int(&s->rng, 1, 3);
    m->key_dim = dims[test_rng_int(&s->rng, 0, 3)];
    m->value_dim = dims[test_rng_int(&s->rng, 0, 2)];
    m->conv_width = test_rng_int(&s->rng, 2, 4);
    if (m->kind == SSM_MODEL_KDA && test_rng_int(&s->rng, 0, 1)) {
        m->has_lower_bound = 1;
        m->lower_bound = (float)-(1.0 + 9.0 * test_rng_uniform(&s->rng));
    }
    s->sd = test_rng_int(&s->rng, 0, 1) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    s->ad = test_rng_int(&s->rng, 0, 1) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    s->cap = test_rng_int(&s->rng, 3, ST_MAX_CAP);
    s->t_max = test_rng_int(&s->rng, 1, 5);
}

static void session_open(st_session *s)
{
    s->op_name = "open";
    pick_model(s);
    const char *peer = MODES[test_rng_int(&s->rng, 0, 2)];
    while (!strcmp(peer, s->mode))
        peer = MODES[test_rng_int(&s->rng, 0, 2)];
    ctx_config(s, 0, s->mode);
    ctx_config(s, 1, peer);
    for (int32_t l = 0; l < s->m.layers; l++)
        test_weights_make(&s->rng, &s->m, test_rng_int(&s->rng, 0, 1), &s->w[l]);
    snprintf(s->desc, sizeof s->desc,
             "seed %llu: %s %s H=%d HV=%d K=%d V=%d W=%d layers=%d state=%s act=%s slots=%d "
             "T_max=%d, peer %s",
             (unsigned long long)s->seed, s->c[0].desc, ssm_model_kind_name(s->m.kind),
             s->m.heads, s->m.value_heads, s->m.key_dim, s->m.value_dim, s->m.conv_width,
             s->m.layers, ssm_dtype_name(s->sd), ssm_dtype_name(s->ad), s->cap, s->t_max,
             s->c[1].desc);
    st_model_open(s);
    for (int ci = 0; ci < 2; ci++) {
        ST_EXPECT(s, ssm_ctx_create(&s->c[ci].cfg, &s->c[ci].ctx), SSM_OK);
        st_book_init(&s->c[ci].book, 0);
    }
    s->page_bytes = ssm_page_bytes(s->c[0].ctx);
    if (s->page_bytes != ssm_page_bytes(s->c[1].ctx))
        st_fail(s, "pages of %s are %zu bytes, of %s %zu", s->c[0].mode, s->page_bytes,
                s->c[1].mode, ssm_page_bytes(s->c[1].ctx));
    /* Another model (one more key channel group), for pages that must not fit. */
    ssm_model_dims alien = s->m;
    alien.key_dim = s->m.key_dim == 8 ? 16 : 8;
    ssm_config ac;
    test_config(&ac, &alien, "native", s->sd, s->ad, 1, 0);
    ST_EXPECT(s, ssm_ctx_create(&ac, &s->alien), SSM_OK);
    int32_t slot;
    ST_EXPECT(s, ssm_slot_acquire(s->alien, &slot), SSM_OK);
    s->alien_page_bytes = ssm_page_bytes(s->alien);
    s->op_name = "idle";
}

/* Commits every open forward and checks the
 * outputs' whole-session bound. */
static void session_finish(st_session *s)
{
    s->op_name = "finish";
    for (int ci = 0; ci < 2; ci++)
        while (op_commit(s, ci))
            ;
    st_check_all(s);
    for (int ci = 0; ci < 2; ci++)
        st_model_check_totals(s, ci, 1);
}

static void session_close(st_session *s)
{
    for (int ci = 0; ci < 2; ci++) {
        ssm_ctx_destroy(s->c[ci].ctx);
        for (int fi = 0; fi < ST_OPEN; fi++)
            if (s->c[ci].fwd[fi].open)
                for (int32_t l = 0; l < s->m.layers; l++)
                    test_io_free(&s->c[ci].fwd[fi].io[l]);
    }
    ssm_ctx_destroy(s->alien);
    for (int32_t l = 0; l < s->m.layers; l++)
        test_weights_free(&s->w[l]);
    st_pages_free(s);
    st_model_close(s);
}

/* ------------------------------------------------------------ the mix */

/* One random operation on the library and the model, on c[0] three times
 * in four; returns 0 when its preconditions did not hold (nothing ran). */
static int random_op(st_session *s)
{
    int ci = test_rng_int(&s->rng, 0, 3) == 0 ? 1 : 0;
    int k = test_rng_int(&s->rng, 0, 99);
    if (k < 6)
        return op_acquire(s, ci);
    if (k < 10)
        return st_count_acquired(s, ci) > 1 ? op_release(s, ci) : 0;
    if (k < 13)
        return op_reset(s, ci);
    if (k < 22)
        return st_pick_idle(s, ci) >= 0 ? op_prefill(s, ci) : 0;
    if (k < 36)
        return st_pick_idle(s, ci) >= 0 ? op_decode(s, ci) : 0;
    if (k < 40)
        return op_burst(s, ci);
    if (k < 52)
        return op_verify_open(s, ci);
    if (k < 58)
        return op_verify_more(s, ci);
    if (k < 70)
        return op_commit(s, ci);
    if (k < 72)
        return op_abort(s, ci);
    if (k < 76)
        return op_copy(s, ci);
    if (k < 81)
        return op_page_move(s);
    if (k < 83)
        return op_pages_batch(s);
    if (k < 85)
        return op_page_save(s);
    if (k < 87)
        return op_page_restore(s);
    return op_error(s);
}

int st_run_session(uint64_t seed, const char *mode, ssm_model_kind kind, int64_t ops,
                   st_counts *count, int verbose)
{
    st_session *s = calloc(1, sizeof *s);
    s->seed = seed;
    s->mode = mode;
    s->kind = kind;
    s->ops = ops;
    s->count = count;
    s->verbose = verbose;
    uint64_t salt = (uint64_t)(mode[0] * 31 + mode[1]) * 0x9e3779b97f4a7c15ull + (uint64_t)kind;
    test_rng_init(&s->rng, seed ^ salt);
    int failed = 0;
    running = s;
    signal(SIGSEGV, on_crash);
    signal(SIGBUS, on_crash);
    signal(SIGFPE, on_crash);
    signal(SIGABRT, on_crash);
    if (setjmp(s->fail) == 0) {
        session_open(s);
        printf("# %s\n", s->desc);
        for (s->op = 0; s->op < ops;) {
            if (!random_op(s))
                continue;
            if (verbose)
                printf("# op %lld: %s\n", (long long)s->op, s->op_name);
            st_check_all(s);
            s->op++;
            count->ops++;
        }
        session_finish(s);
    } else {
        failed = 1;
    }
    count->sessions++;
    session_close(s);
    running = NULL;
    free(s);
    return failed;
}
