/* Protocol errors (docs/reliability.md) injected into a live session. Each one
 * prepares what it needs with ordinary operations, then makes its bad
 * calls and proves: the exact status (for tickets, the one the model of the
 * book predicts); nothing written: every idle slot of both contexts exports
 * the same bytes before and after, the pools say the same, probe outputs
 * keep their sentinel and a rejected verify leaves its ticket as it was.
 * Slots inside an open forward cannot be exported; their forward is
 * committed later and checked against the model, so a bad call that
 * touched them fails there. */
#include <stdlib.h>
#include <string.h>

#include "tests/stress/stress.h"

/* ------------------------------------------------------------ nothing changed */

typedef struct idle_check {
    int idle[2][ST_MAX_CAP];
    test_snapshot snap[2][ST_MAX_CAP];
    ssm_pool_stats pool[2];
} idle_check;

static void take(st_session *s, idle_check *c, test_snapshot snap[2][ST_MAX_CAP])
{
    for (int ci = 0; ci < 2; ci++)
        for (int32_t slot = 0; slot < s->cap; slot++) {
            memset(&snap[ci][slot], 0, sizeof snap[ci][slot]);
            if (c->idle[ci][slot])
                ST_EXPECT(s, test_snapshot_take(s->c[ci].ctx, slot, &snap[ci][slot]), SSM_OK);
        }
}

static void idle_begin(st_session *s, idle_check *c)
{
    for (int ci = 0; ci < 2; ci++) {
        st_idle_slots(s, ci, c->idle[ci]);
        ssm_pool_query(s->c[ci].ctx, &c->pool[ci]);
    }
    take(s, c, c->snap);
}

static void idle_end(st_session *s, idle_check *c)
{
    test_snapshot after[2][ST_MAX_CAP];
    take(s, c, after);
    for (int ci = 0; ci < 2; ci++) {
        ssm_pool_stats now;
        ssm_pool_query(s->c[ci].ctx, &now);
        if (memcmp(&now, &c->pool[ci], sizeof now) != 0)
            st_fail(s, "%s: a rejected call changed the pool (used %d -> %d)", s->c[ci].mode,
                    c->pool[ci].used, now.used);
        for (int32_t slot = 0; slot < s->cap; slot++) {
            if (!c->idle[ci][slot])
                continue;
            if (!test_snapshot_equal(&c->snap[ci][slot], &after[ci][slot]))
                st_fail(s, "%s: a rejected call changed slot %d", s->c[ci].mode, slot);
            test_snapshot_free(&c->snap[ci][slot]);
            test_snapshot_free(&after[ci][slot]);
        }
    }
}

/* ------------------------------------------------------------ bad batches */

/* Runs `rows` through decode, an opening verify and prefill of context ci,
 * expecting `want` from each, with no output written and the ticket zero. */
static void bad_batch(st_session *s, int ci, int32_t n, const int32_t *rows, ssm_status want)
{
    ssm_ctx *ctx = s->c[ci].ctx;
    int32_t T = test_rng_int(&s->rng, 1, s->t_max), l = test_rng_int(&s->rng, 0, s->m.layers - 1);
    int64_t tokens = (int64_t)n * (s->t_max > 4 ? s->t_max : 4);
    test_io probe[ST_MAX_LAYERS];
    st_ios_make(s, probe, tokens);
    int32_t offsets[ST_MAX_ROWS + 2] = {0};
    for (int32_t r = 0; r < n; r++)
        offsets[r + 1] = offsets[r] + test_rng_int(&s->rng, 1, 4);
    ssm_batch db = {n, 1, rows, NULL}, vb = {n, T, rows, NULL};
    ssm_prefill_batch pb = {n, rows, offsets, 4, NULL, NULL};
    ssm_ticket t = SSM_TICKET_INIT;
    const ssm_layer_weights *w = &s->w[l].w;
    ST_EXPECT(s, ssm_decode(ctx, l, &db, w, &probe[l].io, NULL), want);
    ST_EXPECT(s, ssm_verify(ctx, l, &vb, w, &probe[l].io, &t, NULL), want);
    if (t.context_id || t.forward || t.rows || t.tokens)
        st_fail(s, "a rejected verify filled the ticket");
    ST_EXPECT(s, ssm_prefill(ctx, l, &pb, w, &probe[l].io, NULL), want);
    st_assert_sentinel(s, probe, 0, tokens, "a rejected step");
    st_ios_free(s, probe);
}

/* Some idle slots of ci (not `special`), padding, and `special` at a random
 * position; returns the row count. */
static int32_t rows_with(st_session *s, int ci, int32_t special, int32_t *rows)
{
    int idle[ST_MAX_CAP];
    st_idle_slots(s, ci, idle);
    if (special >= 0 && special < s->cap)
        idle[special] = 0;
    int32_t n = test_pick_rows(&s->rng, idle, s->cap, test_rng_int(&s->rng, 0, 3),
                               test_rng_int(&s->rng, 0, 1), ST_MAX_ROWS - 1, rows);
    int32_t at = test_rng_int(&s->rng, 0, n);
    memmove(rows + at + 1, rows + at, sizeof *rows * (size_t)(n - at));
    rows[at] = special;
    return n + 1;
}

/* Every single-slot call of ci on `slot`, expecting `want`; `page` is a
 * valid page to import. */
static void bad_slot_calls(st_session *s, int ci, int32_t slot, ssm_status want,
                           const unsigned char *page)
{
    ssm_ctx *ctx = s->c[ci].ctx;
    int32_t other = st_pick_idle(s, ci);
    if (other < 0)
        other = slot;
    ST_EXPECT(s, ssm_slot_reset(ctx, slot, NULL), want);
    ST_EXPECT(s, ssm_slot_release(ctx, slot), want);
    test_snapshot snap;
    ST_EXPECT(s, test_snapshot_take(ctx, slot, &snap), want);
    test_snapshot_free(&snap);
    unsigned char *out = malloc(s->page_bytes);
    ST_EXPECT(s, ssm_slot_export_page(ctx, slot, out, s->page_bytes), want);
    ST_EXPECT(s, ssm_slot_import_page(ctx, slot, page, s->page_bytes), want);
    ST_EXPECT(s, ssm_slots_export_pages(ctx, 1, &slot, out, s->page_bytes), want);
    ST_EXPECT(s, ssm_slot_copy(ctx, slot, other, NULL), want);
    ST_EXPECT(s, ssm_slot_copy(ctx, other, slot, NULL), want);
    free(out);
}

/* A valid page (of an idle slot of either context), or NULL. */
static unsigned char *some_page(st_session *s)
{
    int ci = test_rng_int(&s->rng, 0, 1);
    int32_t slot = st_pick_idle(s, ci);
    if (slot < 0 && (slot = st_pick_idle(s, 1 - ci)) >= 0)
        ci = 1 - ci;
    if (slot < 0)
        return NULL;
    unsigned char *page = malloc(s->page_bytes);
    ST_EXPECT(s, ssm_slot_export_page(s->c[ci].ctx, slot, page, s->page_bytes), SSM_OK);
    return page;
}

/* ------------------------------------------------------------ tickets */

/* A ticket to present to ci: an old one of ci, the first it closed, one of
 * the peer's, or one of ci's open tickets altered. */
static ssm_ticket some_ticket(st_session *s, int ci)
{
    st_ctx *c = &s->c[ci], *peer = &s->c[1 - ci];
    ssm_ticket t = {~0ull, 1, 1, 1, 0}; /* forged */
    switch (test_rng_int(&s->rng, 0, 4)) {
    case 0: /* the newest: repeated unless its slots moved on */
        if (c->old_count)
            t = c->old[(c->old_next + ST_OLD_TICKETS - 1) % ST_OLD_TICKETS];
        break;
    case 1:
        if (c->old_count)
            t = c->old[test_rng_int(&s->rng, 0, c->old_count - 1)];
        break;
    case 2:
        if (c->ancient.forward)
            t = c->ancient;
        break;
    case 3: {
        int fi = st_fwd_pick_open(s, 1 - ci, 0);
        if (fi >= 0)
            t = peer->fwd[fi].ticket;
        else if (peer->old_count)
            t = peer->old[test_rng_int(&s->rng, 0, peer->old_count - 1)];
        break;
    }
    default: {
        int fi = st_fwd_pick_open(s, ci, 0);
        if (fi < 0)
            break;
        t = c->fwd[fi].ticket;
        switch (test_rng_int(&s->rng, 0, 3)) {
        case 0: t.rows += test_rng_int(&s->rng, 0, 1) ? 1 : -1; break;
        case 1: t.tokens += 1; break;
        case 2: t.forward = c->book.last + 1 + (uint64_t)test_rng_int(&s->rng, 0, 99); break;
        default: t.context_id ^= 1ull << test_rng_int(&s->rng, 0, 63); break;
        }
    }
    }
    return t;
}

/* Presents a ticket that is not current to commit, abort and a verify:
 * each gets the status the model of the book predicts. */
static int err_ticket(st_session *s, int ci)
{
    s->op_name = "error: old, foreign or altered ticket";
    ssm_ticket t = some_ticket(s, ci);
    ssm_status want = st_book_judge(&s->c[ci].book, &t);
    if (want == SSM_OK)
        return 0;
    int32_t ones[ST_MAX_ROWS + 2], rows[ST_MAX_ROWS];
    for (int i = 0; i < ST_MAX_ROWS + 2; i++)
        ones[i] = 1;
    int32_t n = st_rows(s, ci, 2, 0, rows), l = test_rng_int(&s->rng, 0, s->m.layers - 1);
    test_io probe[ST_MAX_LAYERS];
    st_ios_make(s, probe, (int64_t)n * s->t_max);
    ssm_batch b = {n, test_rng_int(&s->rng, 1, s->t_max), rows, NULL};
    idle_check c;
    idle_begin(s, &c);
    ssm_ticket presented = t;
    ST_EXPECT(s, ssm_commit(s->c[ci].ctx, &presented, ones, NULL), want);
    ST_EXPECT(s, ssm_forward_abort(s->c[ci].ctx, &presented, NULL), want);
    ST_EXPECT(s, ssm_verify(s->c[ci].ctx, l, &b, &s->w[l].w, &probe[l].io, &presented, NULL),
              want);
    if (memcmp(&presented, &t, sizeof t) != 0)
        st_fail(s, "a rejected verify changed the ticket");
    st_assert_sentinel(s, probe, 0, (int64_t)n * s->t_max, "a verify with a bad ticket");
    idle_end(s, &c);
    st_ios_free(s, probe);
    return 1;
}

/* An open forward of ci with every layer verified and a live row. */
static int complete_forward(st_session *s, int ci)
{
    int fi = -1;
    for (int k = 0; k < ST_OPEN && fi < 0; k++)
        if (s->c[ci].fwd[k].open)
            for (int32_t r = 0; r < s->c[ci].fwd[k].rows; r++)
                if (s->c[ci].fwd[k].slots[r] >= 0)
                    fi = k;
    if (fi < 0)
        fi = st_fwd_open(s, ci, s->m.layers, 1);
    if (fi >= 0)
        st_fwd_verify(s, ci, fi, s->m.layers);
    return fi;
}

static int err_accepted(st_session *s, int ci)
{
    int fi = complete_forward(s, ci);
    s->op_name = "error: accepted length out of range";
    if (fi < 0)
        return 0;
    st_fwd *f = &s->c[ci].fwd[fi];
    const int32_t bad[] = {0, f->T + 1, -1, INT32_MIN, INT32_MAX, f->T + 100};
    idle_check c;
    idle_begin(s, &c);
    for (int k = test_rng_int(&s->rng, 1, 3); k > 0; k--) {
        int32_t acc[ST_MAX_ROWS], live[ST_MAX_ROWS], n = 0;
        for (int32_t r = 0; r < f->rows; r++) {
            acc[r] = test_rng_int(&s->rng, 1, f->T);
            if (f->slots[r] >= 0)
                live[n++] = r;
        }
        acc[live[test_rng_int(&s->rng, 0, n - 1)]] = bad[test_rng_int(&s->rng, 0, 5)];
        ST_EXPECT(s, ssm_commit(s->c[ci].ctx, &f->ticket, acc, NULL), SSM_ERR_ACCEPTED_RANGE);
    }
    idle_end(s, &c);
    return 1; /* the forward stays open; a later commit checks it */
}

static int err_incomplete(st_session *s, int ci)
{
    if (s->m.layers < 2)
        return 0;
    int fi = st_fwd_pick_open(s, ci, 1);
    if (fi < 0)
        fi = st_fwd_open(s, ci, test_rng_int(&s->rng, 1, s->m.layers - 1), 0);
    s->op_name = "error: commit of an incomplete forward";
    if (fi < 0)
        return 0;
    int32_t ones[ST_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    idle_check c;
    idle_begin(s, &c);
    ST_EXPECT(s, ssm_commit(s->c[ci].ctx, &s->c[ci].fwd[fi].ticket, ones, NULL),
              SSM_ERR_TICKET_INCOMPLETE);
    idle_end(s, &c);
    return 1;
}

/* A forward whose slots are changed under it: a verify with a copy of its
 * slot buffer, or another T, is refused. */
static int err_rows_changed(st_session *s, int ci)
{
    int fi = st_fwd_pick_open(s, ci, 1);
    s->op_name = "error: forward continued with other rows";
    if (fi < 0)
        return 0;
    st_fwd *f = &s->c[ci].fwd[fi];
    int32_t copy[ST_MAX_ROWS], l = 0;
    memcpy(copy, f->slots, sizeof copy);
    while (f->done[l])
        l++;
    ssm_batch b = {f->rows, f->T, copy, NULL};
    if (s->t_max > 1 && test_rng_int(&s->rng, 0, 1)) {
        b.slots = f->slots;
        b.tokens = f->T == 1 ? 2 : f->T - 1;
    }
    ssm_ticket t = f->ticket;
    idle_check c;
    idle_begin(s, &c);
    ST_EXPECT(s, ssm_verify(s->c[ci].ctx, l, &b, &s->w[l].w, &f->io[l].io, &t, NULL),
              SSM_ERR_INVALID_ARGUMENT);
    if (memcmp(&t, &f->ticket, sizeof t) != 0)
        st_fail(s, "a rejected verify changed the ticket");
    idle_end(s, &c);
    return 1;
}

/* ------------------------------------------------------------ slots */

/* A slot of an open forward: a second verify over it, decode, prefill,
 * and every single-slot call are VERIFY_PENDING; so is a layer verified
 * twice. */
static int err_pending(st_session *s, int ci)
{
    int fi = complete_forward(s, ci);
    s->op_name = "error: slot with a pending verify";
    unsigned char *page = some_page(s);
    if (fi < 0 || !page) {
        free(page);
        return 0;
    }
    st_fwd *f = &s->c[ci].fwd[fi];
    int32_t pending = -1, rows[ST_MAX_ROWS];
    for (int32_t r = 0; r < f->rows && pending < 0; r++)
        pending = f->slots[r];
    idle_check c;
    idle_begin(s, &c);
    bad_batch(s, ci, rows_with(s, ci, pending, rows), rows, SSM_ERR_VERIFY_PENDING);
    bad_slot_calls(s, ci, pending, SSM_ERR_VERIFY_PENDING, page);
    int32_t l = test_rng_int(&s->rng, 0, s->m.layers - 1);
    ssm_batch b = {f->rows, f->T, f->slots, NULL};
    ssm_ticket t = f->ticket;
    test_io probe[ST_MAX_LAYERS];
    st_ios_make(s, probe, (int64_t)f->rows * f->T);
    ST_EXPECT(s, ssm_verify(s->c[ci].ctx, l, &b, &s->w[l].w, &probe[l].io, &t, NULL),
              SSM_ERR_VERIFY_PENDING); /* layer l was verified already */
    st_assert_sentinel(s, probe, 0, (int64_t)f->rows * f->T, "a layer verified twice");
    st_ios_free(s, probe);
    idle_end(s, &c);
    free(page);
    return 1;
}

static int err_slot_range(st_session *s, int ci)
{
    s->op_name = "error: slot out of range";
    unsigned char *page = some_page(s);
    if (!page)
        return 0;
    const int32_t bad[] = {s->cap, s->cap + 1, 1 << 20, INT32_MAX, -2, INT32_MIN};
    int32_t slot = bad[test_rng_int(&s->rng, 0, 5)], rows[ST_MAX_ROWS];
    uint32_t flags = 0;
    idle_check c;
    idle_begin(s, &c);
    bad_batch(s, ci, rows_with(s, ci, slot, rows), rows, SSM_ERR_SLOT_RANGE);
    bad_slot_calls(s, ci, slot, SSM_ERR_SLOT_RANGE, page);
    ST_EXPECT(s, ssm_slot_flags(s->c[ci].ctx, slot, &flags), SSM_ERR_SLOT_RANGE);
    idle_end(s, &c);
    free(page);
    return 1;
}

static int err_not_acquired(st_session *s, int ci)
{
    if (st_pick_free(s, ci) < 0 && !op_release(s, ci))
        return 0;
    s->op_name = "error: slot not acquired";
    unsigned char *page = some_page(s);
    if (!page)
        return 0;
    int32_t slot = st_pick_free(s, ci), rows[ST_MAX_ROWS];
    idle_check c;
    idle_begin(s, &c);
    bad_batch(s, ci, rows_with(s, ci, slot, rows), rows, SSM_ERR_SLOT_NOT_ACQUIRED);
    bad_slot_calls(s, ci, slot, SSM_ERR_SLOT_NOT_ACQUIRED, page);
    idle_end(s, &c);
    free(page);
    return 1;
}

static int err_duplicate(st_session *s, int ci)
{
    s->op_name = "error: slot twice in a batch";
    int32_t twice = st_pick_idle(s, ci), rows[ST_MAX_ROWS + 1];
    if (twice < 0)
        return 0;
    int32_t n = rows_with(s, ci, twice, rows), at = test_rng_int(&s->rng, 0, n);
    memmove(rows + at + 1, rows + at, sizeof *rows * (size_t)(n - at));
    rows[at] = twice;
    int32_t pair[2] = {twice, twice};
    unsigned char *pages = calloc(2, s->page_bytes);
    idle_check c;
    idle_begin(s, &c);
    bad_batch(s, ci, n + 1, rows, SSM_ERR_INVALID_ARGUMENT);
    ST_EXPECT(s, ssm_slots_export_pages(s->c[ci].ctx, 2, pair, pages, s->page_bytes),
              SSM_ERR_INVALID_ARGUMENT);
    ST_EXPECT(s, ssm_slots_import_pages(s->c[ci].ctx, 2, pair, pages, s->page_bytes),
              SSM_ERR_INVALID_ARGUMENT);
    idle_end(s, &c);
    free(pages);
    return 1;
}

/* Verify of 0 or too many tokens, decode of 2, prefill offsets that
 * decrease or exceed max_row_tokens, a page buffer one byte short. */
static int err_shapes(st_session *s, int ci)
{
    s->op_name = "error: bad shapes";
    int32_t rows[ST_MAX_ROWS];
    int32_t n = st_rows(s, ci, 1, test_rng_int(&s->rng, 0, 1), rows), slot = st_pick_idle(s, ci);
    if (slot < 0)
        return 0;
    ssm_ctx *ctx = s->c[ci].ctx;
    int32_t l = test_rng_int(&s->rng, 0, s->m.layers - 1);
    int64_t tokens = (int64_t)(n + 1) * (s->t_max + 1) + 8;
    test_io probe[ST_MAX_LAYERS];
    st_ios_make(s, probe, tokens);
    const ssm_layer_weights *w = &s->w[l].w;
    idle_check c;
    idle_begin(s, &c);
    const int32_t bad_t[] = {0, s->t_max + 1, -1};
    ssm_ticket t = SSM_TICKET_INIT;
    ssm_batch vb = {n, bad_t[test_rng_int(&s->rng, 0, 2)], rows, NULL}, db = {n, 2, rows, NULL};
    ST_EXPECT(s, ssm_verify(ctx, l, &vb, w, &probe[l].io, &t, NULL), SSM_ERR_INVALID_ARGUMENT);
    ST_EXPECT(s, ssm_decode(ctx, l, &db, w, &probe[l].io, NULL), SSM_ERR_INVALID_ARGUMENT);
    int32_t one[1] = {slot}, late[2] = {3, 5}, wide[2] = {0, 5};
    int32_t two[2] = {slot, -1}, falls[3] = {0, 3, 1};
    ssm_prefill_batch long_row = {1, one, wide, 4, NULL, NULL};
    ssm_prefill_batch decreasing = {2, two, falls, 4, NULL, NULL};
    ssm_prefill_batch bad_start = {1, one, late, 4, NULL, NULL};
    ST_EXPECT(s, ssm_prefill(ctx, l, &long_row, w, &probe[l].io, NULL), SSM_ERR_INVALID_ARGUMENT);
    ST_EXPECT(s, ssm_prefill(ctx, l, &decreasing, w, &probe[l].io, NULL),
              SSM_ERR_INVALID_ARGUMENT);
    ST_EXPECT(s, ssm_prefill(ctx, l, &bad_start, w, &probe[l].io, NULL), SSM_ERR_INVALID_ARGUMENT);
    unsigned char *page = malloc(s->page_bytes);
    ST_EXPECT(s, ssm_slot_export_page(ctx, slot, page, s->page_bytes - 1),
              SSM_ERR_INVALID_ARGUMENT);
    free(page);
    st_assert_sentinel(s, probe, 0, tokens, "a call with a bad shape");
    idle_end(s, &c);
    st_ios_free(s, probe);
    return 1;
}

static int err_exhausted(st_session *s, int ci)
{
    while (st_pick_free(s, ci) >= 0)
        op_acquire(s, ci);
    s->op_name = "error: pool exhausted";
    int32_t slot = -7;
    idle_check c;
    idle_begin(s, &c);
    ST_EXPECT(s, ssm_slot_acquire(s->c[ci].ctx, &slot), SSM_ERR_POOL_EXHAUSTED);
    if (slot != -7)
        st_fail(s, "a refused acquire wrote slot %d", slot);
    idle_end(s, &c);
    return 1;
}

/* ------------------------------------------------------------ pages */

/* Pages that must be refused with the target slot untouched: a flipped
 * bit anywhere, a truncated page, another model's page, and a batch with
 * one bad page among good ones (none loads). */
static int err_bad_page(st_session *s, int ci)
{
    s->op_name = "error: corrupted page";
    int idle[ST_MAX_CAP];
    int32_t n = st_idle_slots(s, ci, idle);
    unsigned char *page = some_page(s);
    if (!page || n == 0) {
        free(page);
        return 0;
    }
    int32_t dst = st_pick_idle(s, ci), to[ST_MAX_CAP];
    ssm_ctx *ctx = s->c[ci].ctx;
    size_t at = (size_t)(test_rng_next(&s->rng) % s->page_bytes);
    int32_t count = test_rng_int(&s->rng, 1, n), bad = test_rng_int(&s->rng, 0, count - 1);
    test_pick_rows(&s->rng, idle, s->cap, count, 0, count, to);
    unsigned char *pages = calloc((size_t)count, s->page_bytes);
    for (int32_t k = 0; k < count; k++)
        memcpy(pages + (size_t)k * s->page_bytes, page, s->page_bytes);
    pages[(size_t)bad * s->page_bytes + at] ^= (unsigned char)(1u << test_rng_int(&s->rng, 0, 7));
    unsigned char *alien = malloc(s->alien_page_bytes);
    ST_EXPECT(s, ssm_slot_export_page(s->alien, 0, alien, s->alien_page_bytes), SSM_OK);
    idle_check c;
    idle_begin(s, &c);
    const unsigned char *flipped = pages + (size_t)bad * s->page_bytes;
    ssm_page_info info;
    ST_EXPECT(s, ssm_page_inspect(flipped, s->page_bytes, &info), SSM_ERR_PAGE_INVALID);
    ST_EXPECT(s, ssm_slot_import_page(ctx, dst, flipped, s->page_bytes), SSM_ERR_PAGE_INVALID);
    size_t cut = (size_t)(test_rng_next(&s->rng) % s->page_bytes);
    ST_EXPECT(s, ssm_slot_import_page(ctx, dst, page, cut), SSM_ERR_PAGE_INVALID);
    ST_EXPECT(s, ssm_slot_import_page(ctx, dst, alien, s->alien_page_bytes), SSM_ERR_PAGE_INVALID);
    ST_EXPECT(s, ssm_slots_import_pages(ctx, count, to, pages, s->page_bytes),
              SSM_ERR_PAGE_INVALID);
    idle_end(s, &c);
    free(alien);
    free(pages);
    free(page);
    return 1;
}

/* ------------------------------------------------------------ the mix */

int op_error(st_session *s)
{
    int ci = test_rng_int(&s->rng, 0, 3) == 0 ? 1 : 0;
    switch (test_rng_int(&s->rng, 0, 10)) {
    case 0: return err_ticket(s, ci);
    case 1: return err_accepted(s, ci);
    case 2: return err_incomplete(s, ci);
    case 3: return err_rows_changed(s, ci);
    case 4: return err_pending(s, ci);
    case 5: return err_slot_range(s, ci);
    case 6: return err_not_acquired(s, ci);
    case 7: return err_duplicate(s, ci);
    case 8: return err_shapes(s, ci);
    case 9: return err_exhausted(s, ci);
    default: return err_bad_page(s, ci);
    }
}
