/* The protocol errors (docs/reliability.md) against the plugin under test. Each
 * check injects bad calls into a live session and proves three things: the
 * exact status code; nothing written (idle slots exported before and after are
 * bit-identical, output buffers keep their sentinel, a rejected verify leaves
 * its ticket as it was); and the slots of the forward that was open around the
 * bad call commit to exactly what the reference says, so the bad call left no
 * trace there either. The session goes on afterwards. The checks are the same
 * on both devices but one: accepted lengths in device memory (a CUDA context)
 * are checked by the commit kernel, which flags the row's slot instead of
 * refusing the commit (accepted_range_on_device). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/conformance/conformance.h"

static int ticket_is_zero(const ssm_ticket *t)
{
    return t->context_id == 0 && t->forward == 0 && t->rows == 0 && t->tokens == 0;
}

/* Snapshots of the idle slots (not in busy) before a bad call... */
typedef struct idle_check {
    test_snapshot before[CONFORM_MAX_CAP];
    int busy[CONFORM_MAX_CAP];
} idle_check;

static void idle_begin_busy(session *s, idle_check *c, const int *busy)
{
    memset(c, 0, sizeof *c);
    if (busy)
        memcpy(c->busy, busy, sizeof c->busy);
    session_snapshots(s, c->busy, c->before);
}

static void idle_begin(session *s, idle_check *c, const forward *open)
{
    int busy[CONFORM_MAX_CAP] = {0};
    if (open)
        forward_busy(open, busy);
    idle_begin_busy(s, c, busy);
}

/* ...and after it: bit-identical. */
static void idle_end(session *s, idle_check *c, const char *what)
{
    test_snapshot after[CONFORM_MAX_CAP];
    session_snapshots(s, c->busy, after);
    session_snapshots_equal(s, c->before, after, what);
    session_snapshots_free(s, after);
    session_snapshots_free(s, c->before);
}

/* A random live slot of a forward. */
static int32_t forward_pick_live(session *s, const forward *f)
{
    int32_t live[CONFORM_MAX_ROWS], n = 0;
    for (int32_t r = 0; r < f->rows; r++)
        if (f->slots[r] >= 0)
            live[n++] = r;
    return live[test_rng_int(&s->rng, 0, n - 1)];
}

static void forward_open_all(session *s, forward *f)
{
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    forward_begin(s, f, test_rng_int(&s->rng, 1, s->t_max), live, test_rng_int(&s->rng, 0, 2),
                  NULL);
    forward_verify(s, f, 0, s->m.layers);
}

/* Runs one batch through decode, verify (fresh ticket, a random layer) and
 * prefill, expecting `want` from each with nothing written anywhere (slots
 * marked in busy, NULL for none, are in an open forward: not exported). */
static void expect_bad_batch(session *s, int32_t rows, const int32_t *slots, ssm_status want,
                             const int *busy, const char *what)
{
    idle_check c;
    idle_begin_busy(s, &c, busy);
    int32_t T = test_rng_int(&s->rng, 1, s->t_max);
    int64_t tokens = (int64_t)rows * (s->t_max > 4 ? s->t_max : 4);
    test_io *probe = session_ios(s, tokens);
    int32_t offsets[CONFORM_MAX_ROWS + 2];
    offsets[0] = 0;
    for (int32_t r = 0; r < rows; r++)
        offsets[r + 1] = offsets[r] + test_rng_int(&s->rng, 0, 4);
    int32_t l = test_rng_int(&s->rng, 0, s->m.layers - 1);
    const int32_t *staged_slots = staged_array(s, slots, rows),
                  *staged_offsets = staged_array(s, offsets, rows + 1);
    ssm_batch db = {rows, 1, staged_slots, slots}, vb = {rows, T, staged_slots, slots};
    ssm_prefill_batch pb = {rows, staged_slots, staged_offsets, 4, slots, offsets};
    ssm_ticket t = SSM_TICKET_INIT;
    CONFORM_EXPECT(s, staged_decode(s, s->ctx, l, &db, &probe[l].io), want);
    CONFORM_EXPECT(s, staged_verify(s, s->ctx, l, &vb, &probe[l].io, &t), want);
    ck_assert_msg(ticket_is_zero(&t), "%s [%s]: a rejected verify filled the ticket", s->desc,
                  what);
    CONFORM_EXPECT(s, staged_prefill(s, s->ctx, l, &pb, &probe[l].io), want);
    session_assert_sentinel(s, probe, 0, tokens, what);
    session_ios_free(s, probe);
    staged_array_free(s, staged_slots);
    staged_array_free(s, staged_offsets);
    idle_end(s, &c, what);
}

/* A batch of a few acquired slots other than `special` and padding rows,
 * with `special` at a random position. */
static int32_t rows_for_error(session *s, int32_t special, int32_t *rows)
{
    int32_t pool[CONFORM_MAX_CAP], n = 0, count = 0;
    for (int32_t slot = 0; slot < s->cap; slot++)
        if (s->acquired[slot] && slot != special)
            pool[n++] = slot;
    int32_t others = n ? test_rng_int(&s->rng, 0, n < 3 ? n : 3) : 0;
    for (int32_t i = 0; i < others; i++) {
        int32_t j = test_rng_int(&s->rng, i, n - 1), t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        rows[count++] = pool[i];
    }
    int32_t pads = test_rng_int(&s->rng, 0, 1);
    for (int32_t p = 0; p < pads; p++)
        rows[count++] = -1;
    int32_t at = test_rng_int(&s->rng, 0, count);
    memmove(rows + at + 1, rows + at, sizeof *rows * (size_t)(count - at));
    rows[at] = special;
    return count + 1;
}

/* A committed forward's ticket after its rows were verified again: STALE at
 * commit and at a later layer's verify. */
void error_stale(session *s)
{
    s->op = "stale ticket";
    forward f1, f2;
    forward_open_all(s, &f1);
    forward_commit(s, &f1);
    forward_setup(s, &f2, test_rng_int(&s->rng, 1, s->t_max), f1.rows, f1.slots);
    int32_t L = s->m.layers;
    forward_verify(s, &f2, 0, L - 1);
    idle_check c;
    idle_begin(s, &c, &f2);
    if (L >= 2) {
        ssm_batch b = {f2.rows, f2.T, f2.staged_slots, f2.slots};
        test_io *probe = session_ios(s, (int64_t)f2.rows * f2.T);
        ssm_ticket old = f1.ticket;
        CONFORM_EXPECT(s, staged_verify(s, s->ctx, L - 1, &b, &probe[L - 1].io, &old),
                       SSM_ERR_TICKET_STALE);
        ck_assert_msg(memcmp(&old, &f1.ticket, sizeof old) == 0,
                      "%s: a rejected verify changed the ticket", s->desc);
        session_assert_sentinel(s, probe, 0, (int64_t)f2.rows * f2.T, "verify, stale ticket");
        session_ios_free(s, probe);
    }
    forward_verify(s, &f2, L - 1, L);
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f1.ticket, f1.accepted, f1.rows),
                   SSM_ERR_TICKET_STALE);
    idle_end(s, &c, "a stale commit");
    forward_commit(s, &f2);
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f1.ticket, f1.accepted, f1.rows),
                   SSM_ERR_TICKET_STALE);
    forward_free(s, &f1);
    forward_free(s, &f2);
}

/* A committed ticket presented again: REPEATED, whatever the lengths. */
void error_repeated(session *s)
{
    s->op = "repeated ticket";
    forward f;
    forward_open_all(s, &f);
    forward_commit(s, &f);
    idle_check c;
    idle_begin(s, &c, NULL);
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f.ticket, f.accepted, f.rows),
                   SSM_ERR_TICKET_REPEATED);
    int32_t other[CONFORM_MAX_ROWS];
    for (int32_t r = 0; r < f.rows; r++)
        other[r] = test_rng_int(&s->rng, 1, f.T);
    ssm_ticket copy = f.ticket;
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &copy, other, f.rows), SSM_ERR_TICKET_REPEATED);
    idle_end(s, &c, "a repeated commit");
    forward_free(s, &f);
}

/* Tickets of another context of the same plugin and shape: FOREIGN both
 * ways, at commit and at a later layer's verify. */
void error_foreign(session *s)
{
    s->op = "foreign ticket";
    ssm_ctx *other = NULL;
    CONFORM_EXPECT(s, ssm_ctx_create(&s->cfg, &other), SSM_OK);
    for (int32_t i = 0; i < s->cap; i++) {
        int32_t slot = -1;
        CONFORM_EXPECT(s, ssm_slot_acquire(other, &slot), SSM_OK);
    }
    forward f;
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    forward_begin(s, &f, test_rng_int(&s->rng, 1, s->t_max), live, test_rng_int(&s->rng, 0, 2),
                  NULL);
    /* The other context verifies the same slot numbers and shape. */
    test_io *oio = session_ios(s, (int64_t)f.rows * f.T);
    int32_t oslots[CONFORM_MAX_ROWS];
    memcpy(oslots, f.slots, sizeof oslots);
    const int32_t *staged_oslots = staged_array(s, oslots, f.rows);
    ssm_batch ob = {f.rows, f.T, staged_oslots, oslots};
    ssm_ticket ot = SSM_TICKET_INIT;
    for (int32_t l = 0; l < s->m.layers; l++)
        CONFORM_EXPECT(s, staged_verify(s, other, l, &ob, &oio[l].io, &ot), SSM_OK);

    int32_t L = s->m.layers;
    forward_verify(s, &f, 0, L - 1);
    idle_check c;
    idle_begin(s, &c, &f);
    if (L >= 2) {
        ssm_batch b = {f.rows, f.T, f.staged_slots, f.slots};
        test_io *probe = session_ios(s, (int64_t)f.rows * f.T);
        ssm_ticket foreign = ot;
        CONFORM_EXPECT(s, staged_verify(s, s->ctx, L - 1, &b, &probe[L - 1].io, &foreign),
                       SSM_ERR_TICKET_FOREIGN);
        ck_assert_msg(memcmp(&foreign, &ot, sizeof ot) == 0,
                      "%s: a rejected verify changed the ticket", s->desc);
        session_assert_sentinel(s, probe, 0, (int64_t)f.rows * f.T, "verify, foreign ticket");
        session_ios_free(s, probe);
    }
    forward_verify(s, &f, L - 1, L);
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &ot, f.accepted, f.rows), SSM_ERR_TICKET_FOREIGN);
    CONFORM_EXPECT(s, staged_commit(s, other, &f.ticket, f.accepted, f.rows),
                   SSM_ERR_TICKET_FOREIGN);
    idle_end(s, &c, "a foreign commit");
    forward_commit(s, &f);
    CONFORM_EXPECT(s, staged_commit(s, other, &ot, f.accepted, f.rows), SSM_OK);
    session_ios_free(s, oio);
    staged_array_free(s, staged_oslots);
    forward_free(s, &f);
    ssm_ctx_destroy(other);
}

/* Device accepted lengths (a CUDA context): the commit kernel checks them,
 * not the host. The commit of `bad` on one live row succeeds, skips that
 * row and flags its slot SSM_FLAG_BAD_ACCEPTED alone; the other rows commit
 * as the reference says and no idle slot changes; a reset makes the flagged
 * slot fresh (its state is undefined until then). */
static void accepted_range_on_device(session *s, forward *f, idle_check *c, int32_t bad)
{
    int32_t row = forward_pick_live(s, f), slot = f->slots[row];
    int32_t acc[CONFORM_MAX_ROWS];
    memcpy(acc, f->accepted, sizeof acc);
    acc[row] = bad;
    CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f->ticket, acc, f->rows), SSM_OK);
    idle_end(s, c, "a commit with a device accepted length out of range");
    forward_check(s, f, row);
    session_expect_flagged(s, slot, SSM_FLAG_BAD_ACCEPTED);
    CONFORM_EXPECT(s, ssm_slot_reset(s->ctx, slot, s->stream), SSM_OK);
    ref_reset(s, slot);
}

/* Accepted lengths outside [1, T] on a live row: ACCEPTED_RANGE from host
 * lengths (the CPU), and the forward stays open for the right commit; on
 * CUDA, accepted_range_on_device. */
void error_accepted_range(session *s)
{
    s->op = "accepted range";
    forward f;
    forward_open_all(s, &f);
    idle_check c;
    idle_begin(s, &c, &f);
    const int32_t bad[] = {0, f.T + 1, -1, INT32_MAX, INT32_MIN};
    if (s->cuda) {
        accepted_range_on_device(s, &f, &c, bad[test_rng_int(&s->rng, 0, 4)]);
        forward_free(s, &f);
        return;
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t acc[CONFORM_MAX_ROWS];
        memcpy(acc, f.accepted, sizeof acc);
        acc[forward_pick_live(s, &f)] = bad[i];
        CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f.ticket, acc, f.rows),
                       SSM_ERR_ACCEPTED_RANGE);
    }
    idle_end(s, &c, "a commit with accepted lengths out of range");
    forward_commit(s, &f);
    forward_free(s, &f);
}

/* A commit before every layer was verified: INCOMPLETE. */
void error_incomplete(session *s)
{
    s->op = "incomplete forward";
    forward f;
    int32_t live = test_rng_int(&s->rng, 1, session_count_acquired(s));
    forward_begin(s, &f, test_rng_int(&s->rng, 1, s->t_max), live, test_rng_int(&s->rng, 0, 2),
                  NULL);
    int32_t L = s->m.layers;
    idle_check c;
    idle_begin(s, &c, &f);
    for (int32_t l = 0; l < L - 1; l++) {
        forward_verify(s, &f, l, l + 1);
        CONFORM_EXPECT(s, staged_commit(s, s->ctx, &f.ticket, f.accepted, f.rows),
                       SSM_ERR_TICKET_INCOMPLETE);
    }
    idle_end(s, &c, "an incomplete commit");
    forward_verify(s, &f, L - 1, L);
    forward_commit(s, &f);
    forward_free(s, &f);
}

/* A second verify (fresh ticket) over a batch holding a slot of the open
 * forward: VERIFY_PENDING; so are decode, prefill, reset, release and export
 * of that slot. */
void error_second_verify(session *s)
{
    s->op = "second verify";
    forward f;
    forward_begin(s, &f, test_rng_int(&s->rng, 1, s->t_max),
                  test_rng_int(&s->rng, 1, session_count_acquired(s)),
                  test_rng_int(&s->rng, 0, 2), NULL);
    int32_t verified = test_rng_int(&s->rng, 1, s->m.layers);
    forward_verify(s, &f, 0, verified);
    int32_t pending = f.slots[forward_pick_live(s, &f)];
    idle_check c;
    idle_begin(s, &c, &f);

    int32_t rows[CONFORM_MAX_ROWS];
    int32_t n = rows_for_error(s, pending, rows);
    expect_bad_batch(s, n, rows, SSM_ERR_VERIFY_PENDING, c.busy, "a batch over a pending slot");
    CONFORM_EXPECT(s, ssm_slot_reset(s->ctx, pending, s->stream), SSM_ERR_VERIFY_PENDING);
    CONFORM_EXPECT(s, ssm_slot_release(s->ctx, pending), SSM_ERR_VERIFY_PENDING);
    test_snapshot snap;
    CONFORM_EXPECT(s, staged_export(s, s->ctx, pending, &snap), SSM_ERR_VERIFY_PENDING);
    test_snapshot_free(&snap);
    idle_end(s, &c, "calls over a pending slot");
    forward_verify(s, &f, verified, s->m.layers);
    forward_commit(s, &f);
    forward_free(s, &f);
}

/* Slots outside the pool (other than -1) anywhere in a batch: SLOT_RANGE. */
void error_slot_range(session *s)
{
    s->op = "slot out of range";
    const int32_t bad[] = {s->cap, s->cap + 1, 1 << 20, INT32_MAX, -2, INT32_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t rows[CONFORM_MAX_ROWS];
        int32_t n = rows_for_error(s, bad[i], rows);
        expect_bad_batch(s, n, rows, SSM_ERR_SLOT_RANGE, NULL, "a batch with a slot out of range");
    }
    int32_t bad_slot = bad[test_rng_int(&s->rng, 0, 5)];
    CONFORM_EXPECT(s, ssm_slot_reset(s->ctx, bad_slot, s->stream), SSM_ERR_SLOT_RANGE);
    CONFORM_EXPECT(s, ssm_slot_release(s->ctx, bad_slot), SSM_ERR_SLOT_RANGE);
}

/* A free slot in a batch (and reset, release, export of it):
 * SLOT_NOT_ACQUIRED. The session releases one first if all are held. */
void error_not_acquired(session *s)
{
    s->op = "slot not acquired";
    if (session_count_acquired(s) == s->cap)
        session_release(s, session_pick_slot(s));
    int32_t free_slot = -1;
    for (int32_t slot = 0; slot < s->cap && free_slot < 0; slot++)
        if (!s->acquired[slot])
            free_slot = slot;
    int32_t rows[CONFORM_MAX_ROWS];
    int32_t n = rows_for_error(s, free_slot, rows);
    expect_bad_batch(s, n, rows, SSM_ERR_SLOT_NOT_ACQUIRED, NULL, "a batch with a free slot");
    idle_check c;
    idle_begin(s, &c, NULL);
    CONFORM_EXPECT(s, ssm_slot_reset(s->ctx, free_slot, s->stream), SSM_ERR_SLOT_NOT_ACQUIRED);
    CONFORM_EXPECT(s, ssm_slot_release(s->ctx, free_slot), SSM_ERR_SLOT_NOT_ACQUIRED);
    test_snapshot snap;
    CONFORM_EXPECT(s, staged_export(s, s->ctx, free_slot, &snap), SSM_ERR_SLOT_NOT_ACQUIRED);
    test_snapshot_free(&snap);
    idle_end(s, &c, "calls on a free slot");
    session_check_slots(s); /* pool accounting unchanged */
    session_acquire(s);
}

/* The same slot twice in one batch: INVALID_ARGUMENT. */
void error_duplicate_slot(session *s)
{
    s->op = "duplicate slot";
    int32_t twice = session_pick_slot(s);
    int32_t rows[CONFORM_MAX_ROWS];
    int32_t n = rows_for_error(s, twice, rows);
    int32_t at = test_rng_int(&s->rng, 0, n);
    memmove(rows + at + 1, rows + at, sizeof *rows * (size_t)(n - at));
    rows[at] = twice;
    expect_bad_batch(s, n + 1, rows, SSM_ERR_INVALID_ARGUMENT, NULL, "a batch with a slot twice");
}

/* Verify of 0 or more than 1 + max_draft tokens, decode of 2:
 * INVALID_ARGUMENT. */
void error_tokens_range(session *s)
{
    s->op = "tokens out of range";
    idle_check c;
    idle_begin(s, &c, NULL);
    int32_t rows[CONFORM_MAX_ROWS];
    int32_t n = session_rows(s, 1, test_rng_int(&s->rng, 0, 1), rows);
    int64_t tokens = (int64_t)n * (s->t_max + 1);
    test_io *probe = session_ios(s, tokens);
    int32_t l = test_rng_int(&s->rng, 0, s->m.layers - 1);
    const int32_t *staged_rows = staged_array(s, rows, n);
    const int32_t bad[] = {0, s->t_max + 1, -1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ssm_batch b = {n, bad[i], staged_rows, rows};
        ssm_ticket t = SSM_TICKET_INIT;
        CONFORM_EXPECT(s, staged_verify(s, s->ctx, l, &b, &probe[l].io, &t),
                       SSM_ERR_INVALID_ARGUMENT);
        ck_assert_msg(ticket_is_zero(&t), "%s: a rejected verify filled the ticket", s->desc);
    }
    ssm_batch d = {n, 2, staged_rows, rows};
    CONFORM_EXPECT(s, staged_decode(s, s->ctx, l, &d, &probe[l].io), SSM_ERR_INVALID_ARGUMENT);
    session_assert_sentinel(s, probe, 0, tokens, "verify/decode with a bad token count");
    session_ios_free(s, probe);
    staged_array_free(s, staged_rows);
    idle_end(s, &c, "a bad token count");
}

void error_random(session *s)
{
    switch (test_rng_int(&s->rng, 0, 9)) {
    case 0: error_stale(s); break;
    case 1: error_repeated(s); break;
    case 2: error_foreign(s); break;
    case 3: error_accepted_range(s); break;
    case 4: error_second_verify(s); break;
    case 5: error_slot_range(s); break;
    case 6: error_not_acquired(s); break;
    case 7: error_duplicate_slot(s); break;
    case 8: error_tokens_range(s); break;
    default: error_incomplete(s); break;
    }
}
