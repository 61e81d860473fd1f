/* The engine's operations on one context, each run on the library and the
 * model side by side and checked as it goes: slots (acquire, release and
 * reuse, reset, copy), prefill in pieces of random length, decode, and
 * forwards (verify opened over some layers, continued, committed with random
 * accepted lengths, or aborted), several open at once. */
#include <stdlib.h>
#include <string.h>

#include "tests/stress/stress.h"

#define SENTINEL 0xA5

/* ------------------------------------------------------------ inputs */

static size_t out_bytes(const st_session *s, int64_t tokens)
{
    return (size_t)(tokens * s->m.value_heads * s->m.value_dim) * ssm_dtype_size(s->ad);
}

void st_ios_make(st_session *s, test_io *io, int64_t n)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        test_io_make(&s->rng, &s->m, s->ad, n, &io[l]);
        memset(io[l].out, SENTINEL, out_bytes(s, n > 0 ? n : 1));
    }
}

void st_ios_free(st_session *s, test_io *io)
{
    for (int32_t l = 0; l < s->m.layers; l++)
        test_io_free(&io[l]);
}

void st_assert_sentinel(st_session *s, const test_io *io, int64_t t0, int64_t t1, const char *what)
{
    size_t from = out_bytes(s, t0), to = out_bytes(s, t1);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (size_t i = from; i < to; i++)
            if (((const unsigned char *)io[l].out)[i] != SENTINEL)
                st_fail(s, "%s: layer %d output byte %zu (tokens %lld..%lld) was written", what,
                        l, i, (long long)t0, (long long)t1);
}

ssm_step_io st_io_at(const st_session *s, const ssm_step_io *io, int64_t t)
{
    const int64_t es = (int64_t)ssm_dtype_size(s->ad);
    ssm_step_io at = {(const char *)io->x + t * ssm_conv_channels(&s->m) * es,
                      (const char *)io->gate + t * ssm_gate_width(&s->m) * es,
                      (const char *)io->beta + t * s->m.value_heads * es,
                      (char *)io->out + t * (int64_t)s->m.value_heads * s->m.value_dim * es};
    return at;
}

/* ------------------------------------------------------------ rows */

int32_t st_random_pads(st_session *s)
{
    int32_t k = test_rng_int(&s->rng, 0, 5);
    return k < 3 ? 0 : k - 2;
}

int32_t st_rows(st_session *s, int ci, int32_t live, int32_t pads, int32_t *rows)
{
    int idle[ST_MAX_CAP];
    st_idle_slots(s, ci, idle);
    int32_t n = test_pick_rows(&s->rng, idle, s->cap, live, pads, ST_MAX_ROWS, rows);
    if (n == 0) /* a batch of padding alone */
        rows[n++] = -1;
    return n;
}

/* A random number of live rows: usually several, now and then none. */
static int32_t random_live(st_session *s, int ci)
{
    int idle[ST_MAX_CAP];
    int32_t n = st_idle_slots(s, ci, idle);
    return test_rng_int(&s->rng, 0, 19) == 0 ? 0 : test_rng_int(&s->rng, 1, n > 0 ? n : 1);
}

/* ------------------------------------------------------------ slots */

/* Acquires a slot (releasing an idle one first when the pool is full): it
 * must be one the model holds free, and fresh. */
int op_acquire(st_session *s, int ci)
{
    s->op_name = "acquire";
    st_ctx *c = &s->c[ci];
    if (st_pick_free(s, ci) < 0) { /* full: release one to reuse it */
        if (!op_release(s, ci))
            return 0;
        s->op_name = "release + acquire";
    }
    int32_t slot = -1;
    ST_EXPECT(s, ssm_slot_acquire(c->ctx, &slot), SSM_OK);
    if (slot < 0 || slot >= s->cap || c->acquired[slot])
        st_fail(s, "%s: acquire returned slot %d (capacity %d, %s)", c->mode, slot, s->cap,
                slot >= 0 && slot < s->cap ? "already held" : "out of range");
    c->acquired[slot] = 1;
    st_model_reset(s, ci, slot); /* st_check_all then proves it fresh */
    return 1;
}

/* Releases an idle slot; a ticket naming it is stale from then on. */
int op_release(st_session *s, int ci)
{
    s->op_name = "release";
    int32_t slot = st_pick_idle(s, ci);
    if (slot < 0)
        return 0;
    ST_EXPECT(s, ssm_slot_release(s->c[ci].ctx, slot), SSM_OK);
    s->c[ci].acquired[slot] = 0;
    st_book_forget(&s->c[ci].book, slot);
    return 1;
}

/* Resets an idle slot: fresh, and its last ticket stale. */
int op_reset(st_session *s, int ci)
{
    s->op_name = "reset";
    int32_t slot = st_pick_idle(s, ci);
    if (slot < 0)
        return 0;
    ST_EXPECT(s, ssm_slot_reset(s->c[ci].ctx, slot, NULL), SSM_OK);
    st_model_reset(s, ci, slot);
    st_book_forget(&s->c[ci].book, slot);
    return 1;
}

/* Copies an idle slot onto another (or itself, a no-op). */
int op_copy(st_session *s, int ci)
{
    s->op_name = "copy";
    int32_t src = st_pick_idle(s, ci), dst = st_pick_idle(s, ci);
    if (src < 0)
        return 0;
    if (test_rng_int(&s->rng, 0, 4) == 0)
        dst = src;
    ST_EXPECT(s, ssm_slot_copy(s->c[ci].ctx, src, dst, NULL), SSM_OK);
    st_model_save(s, ci, src, s->lane_scratch);
    st_model_load(s, ci, dst, s->lane_scratch);
    s->count->copies++;
    return 1;
}

/* ------------------------------------------------------------ prefill, decode */

/* A prefill row length: empty, one token, around the conv window, short,
 * up to a chunk, around a chunk boundary, or over several chunks (rarer:
 * the chunked prefill is most of a session's time). */
static int32_t prefill_length(st_session *s)
{
    int32_t w = s->m.conv_width, k = test_rng_int(&s->rng, 0, 39);
    if (k < 4)
        return 0;
    if (k < 8)
        return 1;
    if (k < 16)
        return test_rng_int(&s->rng, 2, w + 1);
    if (k < 30)
        return test_rng_int(&s->rng, 1, 16);
    if (k < 36)
        return test_rng_int(&s->rng, 17, 62);
    if (k < 39)
        return test_rng_int(&s->rng, 63, 66);
    return test_rng_int(&s->rng, 67, ST_MAX_PREFILL);
}

/* One prefill call over `rows`, checked. */
static void prefill_piece(st_session *s, int ci, int32_t n, const int32_t *rows)
{
    int32_t offsets[ST_MAX_ROWS + 1] = {0}, longest = 0;
    for (int32_t r = 0; r < n; r++) {
        int32_t len = prefill_length(s);
        offsets[r + 1] = offsets[r] + len;
        longest = len > longest ? len : longest;
        if (rows[r] >= 0)
            s->count->prefill_tokens += len;
    }
    ssm_prefill_batch b = {n, rows, offsets, longest + test_rng_int(&s->rng, 0, 2), NULL, NULL};
    test_io io[ST_MAX_LAYERS];
    st_ios_make(s, io, offsets[n]);
    for (int32_t l = 0; l < s->m.layers; l++)
        ST_EXPECT(s, ssm_prefill(s->c[ci].ctx, l, &b, &s->w[l].w, &io[l].io, NULL), SSM_OK);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (int32_t r = 0; r < n; r++) {
            int32_t len = offsets[r + 1] - offsets[r];
            if (rows[r] >= 0) {
                ssm_step_io at = st_io_at(s, &io[l].io, offsets[r]);
                st_model_row(s, ci, rows[r], l, &at, len, len, 1);
            }
        }
    for (int32_t r = 0; r < n; r++)
        if (rows[r] < 0)
            st_assert_sentinel(s, io, offsets[r], offsets[r + 1], "prefill, padding row");
    st_ios_free(s, io);
}

/* A prompt in 1 to 3 pieces (continued prompts) over the same rows. */
int op_prefill(st_session *s, int ci)
{
    s->op_name = "prefill";
    int32_t rows[ST_MAX_ROWS];
    int32_t n = st_rows(s, ci, random_live(s, ci), st_random_pads(s), rows);
    int32_t pieces = test_rng_int(&s->rng, 0, 3) ? 1 : test_rng_int(&s->rng, 2, 3);
    for (int32_t p = 0; p < pieces; p++)
        prefill_piece(s, ci, n, rows);
    return 1;
}

/* See stress.h. */
void st_decode_rows(st_session *s, int ci, int32_t n, const int32_t *rows)
{
    ssm_batch b = {n, 1, rows, NULL};
    test_io io[ST_MAX_LAYERS];
    st_ios_make(s, io, n);
    for (int32_t l = 0; l < s->m.layers; l++) {
        ST_EXPECT(s, ssm_decode(s->c[ci].ctx, l, &b, &s->w[l].w, &io[l].io, NULL), SSM_OK);
        for (int32_t r = 0; r < n; r++)
            if (rows[r] >= 0) {
                ssm_step_io at = st_io_at(s, &io[l].io, r);
                st_model_row(s, ci, rows[r], l, &at, 1, 1, 0);
            } else {
                st_assert_sentinel(s, io, r, r + 1, "decode, padding row");
            }
    }
    /* A decode is a verify and commit of one token: it overtakes the
     * forward that last verified each row. */
    for (int32_t r = 0; r < n; r++)
        if (rows[r] >= 0)
            st_book_forget(&s->c[ci].book, rows[r]);
    st_ios_free(s, io);
}

/* One decode over random idle rows and padding. */
int op_decode(st_session *s, int ci)
{
    s->op_name = "decode";
    int32_t rows[ST_MAX_ROWS];
    int32_t n = st_rows(s, ci, random_live(s, ci), st_random_pads(s), rows);
    st_decode_rows(s, ci, n, rows);
    return 1;
}

/* ------------------------------------------------------------ forwards */

int st_fwd_free(const st_session *s, int ci)
{
    for (int fi = 0; fi < ST_OPEN; fi++)
        if (!s->c[ci].fwd[fi].open)
            return fi;
    return -1;
}

int st_fwd_pick_open(st_session *s, int ci, int incomplete)
{
    int pool[ST_OPEN], n = 0;
    for (int fi = 0; fi < ST_OPEN; fi++) {
        const st_fwd *f = &s->c[ci].fwd[fi];
        if (f->open && (!incomplete || f->layers_done < s->m.layers))
            pool[n++] = fi;
    }
    return n ? pool[test_rng_int(&s->rng, 0, n - 1)] : -1;
}

void st_fwd_verify(st_session *s, int ci, int fi, int32_t n)
{
    st_ctx *c = &s->c[ci];
    st_fwd *f = &c->fwd[fi];
    ssm_batch b = {f->rows, f->T, f->slots, NULL};
    for (int32_t k = 0; k < n && f->layers_done < s->m.layers; k++) {
        int32_t left = s->m.layers - f->layers_done, pick = test_rng_int(&s->rng, 0, left - 1);
        int32_t l = 0; /* the pick-th layer not verified yet */
        for (int32_t j = 0; j < s->m.layers; j++)
            if (!f->done[j] && pick-- == 0) {
                l = j;
                break;
            }
        int opening = f->layers_done == 0;
        ST_EXPECT(s, ssm_verify(c->ctx, l, &b, &s->w[l].w, &f->io[l].io, &f->ticket, NULL),
                  SSM_OK);
        if (opening) {
            if (f->ticket.context_id == 0 || f->ticket.rows != f->rows || f->ticket.tokens != f->T)
                st_fail(s, "%s: verify filled the ticket with context %llx, %d rows x %d tokens "
                        "(the batch: %d x %d)", c->mode, (unsigned long long)f->ticket.context_id,
                        f->ticket.rows, f->ticket.tokens, f->rows, f->T);
            /* the book's numbering, not learnt from the library: forwards 1, 2, ...
               of one context id, which is not the peer context's */
            uint64_t known = c->book.context_id, peer = s->c[1 - ci].book.context_id;
            if ((known && f->ticket.context_id != known) || f->ticket.forward != c->book.last + 1 ||
                (peer && f->ticket.context_id == peer))
                st_fail(s, "%s: verify opened forward %llu of context %llx; the model expects "
                        "forward %llu of context %llx, not the peer's %llx", c->mode,
                        (unsigned long long)f->ticket.forward,
                        (unsigned long long)f->ticket.context_id,
                        (unsigned long long)(c->book.last + 1), (unsigned long long)known,
                        (unsigned long long)peer);
            st_book_open(&c->book, &f->ticket, f->slots);
        }
        f->done[l] = 1;
        f->layers_done++;
    }
}

int st_fwd_begin(st_session *s, int ci, int32_t n, const int32_t *rows, int32_t layers)
{
    int fi = st_fwd_free(s, ci);
    if (fi < 0)
        return -1;
    st_fwd *f = &s->c[ci].fwd[fi];
    memset(f, 0, sizeof *f);
    f->T = test_rng_int(&s->rng, 1, s->t_max);
    f->rows = n;
    memcpy(f->slots, rows, sizeof *rows * (size_t)n);
    st_ios_make(s, f->io, (int64_t)f->rows * f->T);
    f->open = 1;
    st_fwd_verify(s, ci, fi, layers);
    return fi;
}

int st_fwd_open(st_session *s, int ci, int32_t layers, int need_live)
{
    if (st_fwd_free(s, ci) < 0 || st_pick_idle(s, ci) < 0)
        return -1;
    int32_t rows[ST_MAX_ROWS], live = random_live(s, ci);
    int32_t n = st_rows(s, ci, need_live && live == 0 ? 1 : live, st_random_pads(s), rows);
    return st_fwd_begin(s, ci, n, rows, layers);
}

int op_verify_open(st_session *s, int ci)
{
    s->op_name = "verify (open)";
    return st_fwd_open(s, ci, test_rng_int(&s->rng, 1, s->m.layers), 0) >= 0;
}

int op_verify_more(st_session *s, int ci)
{
    s->op_name = "verify (more layers)";
    int fi = st_fwd_pick_open(s, ci, 1);
    if (fi < 0)
        return 0;
    st_fwd_verify(s, ci, fi, test_rng_int(&s->rng, 1, s->m.layers - s->c[ci].fwd[fi].layers_done));
    return 1;
}

void st_fwd_close(st_session *s, int ci, int fi, int book_state)
{
    st_ctx *c = &s->c[ci];
    st_fwd *f = &c->fwd[fi];
    st_book_close(&c->book, &f->ticket, book_state);
    if (c->ancient.forward == 0)
        c->ancient = f->ticket;
    c->old[c->old_next] = f->ticket;
    c->old_next = (c->old_next + 1) % ST_OLD_TICKETS;
    if (c->old_count < ST_OLD_TICKETS)
        c->old_count++;
    st_ios_free(s, f->io);
    f->open = 0;
}

void st_fwd_commit(st_session *s, int ci, int fi)
{
    st_ctx *c = &s->c[ci];
    st_fwd *f = &c->fwd[fi];
    st_fwd_verify(s, ci, fi, s->m.layers);
    int32_t accepted[ST_MAX_ROWS];
    for (int32_t r = 0; r < f->rows; r++) {
        int k = test_rng_int(&s->rng, 0, 3);
        if (f->slots[r] < 0) /* ignored for padding rows */
            accepted[r] = k == 0 ? 0 : k == 1 ? f->T + 1 : 1;
        else
            accepted[r] = k == 0 ? f->T : test_rng_int(&s->rng, 1, f->T);
    }
    ST_EXPECT(s, ssm_commit(c->ctx, &f->ticket, accepted, NULL), SSM_OK);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (int32_t r = 0; r < f->rows; r++) {
            int64_t t0 = (int64_t)r * f->T;
            if (f->slots[r] >= 0) {
                ssm_step_io at = st_io_at(s, &f->io[l].io, t0);
                st_model_row(s, ci, f->slots[r], l, &at, f->T, accepted[r], 0);
            } else {
                st_assert_sentinel(s, f->io, t0, t0 + f->T, "verify, padding row");
            }
        }
    ssm_ticket t = f->ticket;
    st_fwd_close(s, ci, fi, BOOK_COMMITTED);
    if (test_rng_int(&s->rng, 0, 7) == 0) /* at once again: REPEATED */
        ST_EXPECT(s, ssm_commit(c->ctx, &t, accepted, NULL), st_book_judge(&c->book, &t));
    s->count->verify_rounds++;
}

/* Commits a random open forward. */
int op_commit(st_session *s, int ci)
{
    s->op_name = "commit";
    int fi = st_fwd_pick_open(s, ci, 0);
    if (fi < 0)
        return 0;
    st_fwd_commit(s, ci, fi);
    return 1;
}

/* Aborts a random open forward: its verified outputs were still right, and
 * its slots are fresh; its ticket is stale from then on. */
int op_abort(st_session *s, int ci)
{
    s->op_name = "abort";
    int fi = st_fwd_pick_open(s, ci, 0);
    if (fi < 0)
        return 0;
    st_ctx *c = &s->c[ci];
    st_fwd *f = &c->fwd[fi];
    ST_EXPECT(s, ssm_forward_abort(c->ctx, &f->ticket, NULL), SSM_OK);
    for (int32_t l = 0; l < s->m.layers; l++)
        for (int32_t r = 0; r < f->rows; r++)
            if (f->done[l] && f->slots[r] >= 0) {
                ssm_step_io at = st_io_at(s, &f->io[l].io, (int64_t)r * f->T);
                st_model_row(s, ci, f->slots[r], l, &at, f->T, 0, 0);
            }
    for (int32_t r = 0; r < f->rows; r++)
        if (f->slots[r] >= 0)
            st_model_reset(s, ci, f->slots[r]);
    int32_t ones[ST_MAX_ROWS] = {1, 1, 1, 1, 1, 1, 1, 1};
    ssm_ticket t = f->ticket;
    st_fwd_close(s, ci, fi, BOOK_ABORTED);
    ST_EXPECT(s, ssm_commit(c->ctx, &t, ones, NULL), SSM_ERR_TICKET_STALE);
    s->count->aborts++;
    return 1;
}
