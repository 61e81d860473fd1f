/* The step protocol (docs/architecture.md) on CPU contexts of mode "native":
 * tickets (stale, repeated, foreign, forged, altered), accepted lengths,
 * incomplete forwards, pending slots, forwards open side by side, and the
 * rollback identity "verify T + commit a == a decodes".
 *
 * Every rejected call is checked three ways: the exact status code, nothing
 * written (snapshots of the slots involved, output buffers filled with a
 * sentinel), and the context still working (the open forward then commits and
 * the result equals a twin context that never saw the bad call). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/runner.h"
#include "tests/testutil.h"

#include "tests/world.h"

/* The end of every error test: both contexts hold the same state in every
 * slot, and both still decode one more token over every slot to the same
 * outputs and states. */
static void assert_twins_and_working(world *wd, ssm_ctx *a, const int32_t *sa, ssm_ctx *b,
                                     const int32_t *sb)
{
    for (int32_t i = 0; i < wd->cap; i++)
        assert_slot_same(a, sa[i], b, sb[i], "after the commit");
    test_io *ia = ios_make(wd, wd->cap);
    test_io *ib = ios_clone(wd, ia, wd->cap);
    ssm_batch ba = {wd->cap, 1, sa, NULL}, bb = {wd->cap, 1, sb, NULL};
    decode_all(a, wd, &ba, ia);
    decode_all(b, wd, &bb, ib);
    ios_assert_out_equal(wd, ia, ib, wd->cap, "decode after the commit");
    for (int32_t i = 0; i < wd->cap; i++)
        assert_slot_same(a, sa[i], b, sb[i], "decode after the commit");
    ios_free(wd, ia);
    ios_free(wd, ib);
}

static int ticket_is_zero(const ssm_ticket *t)
{
    return t->context_id == 0 && t->forward == 0 && t->rows == 0 && t->tokens == 0;
}

static int32_t random_accepted(world *wd, int32_t T)
{
    return test_rng_int(&wd->rng, 1, T);
}

#define SALT(n) ((uint64_t)(n) * 1000003u + (uint64_t)_i)

/* ============================================================ stale */

/* A committed forward's ticket, presented after its rows were verified
 * again, is stale: at commit and at a later layer's verify. */
START_TEST(test_stale_after_reverify)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T1 = test_rng_int(&wd.rng, 1, T_MAX), T2 = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]};
    ssm_batch b1a = {2, T1, rows_a, NULL}, b1b = {2, T1, rows_b, NULL};
    ssm_batch b2a = {2, T2, rows_a, NULL}, b2b = {2, T2, rows_b, NULL};
    int32_t acc1[2] = {random_accepted(&wd, T1), random_accepted(&wd, T1)};
    int32_t acc2[2] = {random_accepted(&wd, T2), random_accepted(&wd, T2)};

    test_io *v1 = ios_make(&wd, 2 * T1), *v1b = ios_clone(&wd, v1, 2 * T1);
    test_io *v2 = ios_make(&wd, 2 * T2), *v2b = ios_clone(&wd, v2, 2 * T2);
    ssm_ticket t1 = SSM_TICKET_INIT, t1b = SSM_TICKET_INIT;
    verify_all(a, &wd, &b1a, v1, &t1);
    verify_all(b, &wd, &b1b, v1b, &t1b);
    EXPECT(ssm_commit(a, &t1, acc1, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &t1b, acc1, NULL), SSM_OK);

    /* The same rows verified again (all layers but the last for now). */
    ssm_ticket t2 = SSM_TICKET_INIT, t2b = SSM_TICKET_INIT;
    verify_layers(a, &wd, &b2a, v2, &t2, 0, wd.m.layers - 1);
    verify_all(b, &wd, &b2b, v2b, &t2b);

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);
    /* Stale at a verify of the missing layer: no output written. */
    test_io *probe = ios_clone(&wd, v2, 2 * T2);
    ios_sentinel(&wd, probe, 2 * T2);
    ssm_ticket old = t1;
    int32_t last = wd.m.layers - 1;
    EXPECT(ssm_verify(a, last, &b2a, &wd.w[last].w, &probe[last].io, &old, NULL),
           SSM_ERR_TICKET_STALE);
    ck_assert_msg(memcmp(&old, &t1, sizeof old) == 0, "a rejected verify changed the ticket");
    ios_assert_sentinel(&wd, probe, 2 * T2, "verify with a stale ticket");
    verify_layers(a, &wd, &b2a, v2, &t2, last, wd.m.layers);

    /* Stale at commit, with the accepted lengths the first commit used and
     * with others. */
    EXPECT(ssm_commit(a, &t1, acc1, NULL), SSM_ERR_TICKET_STALE);
    ck_assert_msg(strstr(ssm_last_error(), "already committed, and its rows were verified again "
                                           "since") != NULL,
                  "%s", ssm_last_error());
    EXPECT(ssm_commit(a, &t1, acc2, NULL), SSM_ERR_TICKET_STALE);
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a stale commit changed an idle slot");
    ios_assert_out_equal(&wd, v2, v2b, 2 * T2, "verify outputs after the stale commit");

    /* The open forward commits; the old ticket stays stale, the new one is
     * then repeated. */
    EXPECT(ssm_commit(a, &t2, acc2, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &t2b, acc2, NULL), SSM_OK);
    EXPECT(ssm_commit(a, &t1, acc1, NULL), SSM_ERR_TICKET_STALE);
    EXPECT(ssm_commit(a, &t2, acc2, NULL), SSM_ERR_TICKET_REPEATED);
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v1);
    ios_free(&wd, v1b);
    ios_free(&wd, v2);
    ios_free(&wd, v2b);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A forward over only part of a committed forward's rows still makes the
 * old ticket stale. */
START_TEST(test_stale_after_partial_reverify)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]};
    int32_t one_a[1] = {sa[1]}, one_b[1] = {sb[1]};
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
    ssm_batch oa = {1, T, one_a, NULL}, ob = {1, T, one_b, NULL};
    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    test_io *v1 = ios_make(&wd, 2 * T), *v1b = ios_clone(&wd, v1, 2 * T);
    test_io *v2 = ios_make(&wd, T), *v2b = ios_clone(&wd, v2, T);
    ssm_ticket t1 = SSM_TICKET_INIT, t1b = SSM_TICKET_INIT;
    ssm_ticket t2 = SSM_TICKET_INIT, t2b = SSM_TICKET_INIT;
    verify_all(a, &wd, &ba, v1, &t1);
    verify_all(b, &wd, &bb, v1b, &t1b);
    EXPECT(ssm_commit(a, &t1, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &t1b, acc, NULL), SSM_OK);
    verify_all(a, &wd, &oa, v2, &t2);
    verify_all(b, &wd, &ob, v2b, &t2b);

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[0], &before), SSM_OK);
    EXPECT(ssm_commit(a, &t1, acc, NULL), SSM_ERR_TICKET_STALE);
    EXPECT(test_snapshot_take(a, sa[0], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after),
                  "a stale commit changed a row of its own forward");
    EXPECT(ssm_commit(a, &t2, acc + 1, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &t2b, acc + 1, NULL), SSM_OK);
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v1);
    ios_free(&wd, v1b);
    ios_free(&wd, v2);
    ios_free(&wd, v2b);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A forward ended by ssm_forward_abort: its ticket is stale at commit and at
 * a later layer's verify; every slot of it is fresh; idle slots are
 * untouched; the rows can be verified again with a fresh ticket. */
START_TEST(test_stale_after_abort)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows[2] = {sa[0], sa[1]};
    ssm_batch ba = {2, T, rows, NULL};
    test_io *v1 = ios_make(&wd, 2 * T);
    ssm_ticket t1 = SSM_TICKET_INIT;
    test_snapshot idle_before, idle_after, aborted[2];
    EXPECT(test_snapshot_take(a, sa[2], &idle_before), SSM_OK);

    verify_layers(a, &wd, &ba, v1, &t1, 0, wd.m.layers - 1);
    EXPECT(ssm_forward_abort(a, &t1, NULL), SSM_OK);
    test_io *probe = ios_clone(&wd, v1, 2 * T);
    ios_sentinel(&wd, probe, 2 * T);
    int32_t last = wd.m.layers - 1;
    ssm_ticket copy = t1;
    EXPECT(ssm_verify(a, last, &ba, &wd.w[last].w, &probe[last].io, &copy, NULL),
           SSM_ERR_TICKET_STALE);
    ios_assert_sentinel(&wd, probe, 2 * T, "verify with an aborted forward's ticket");
    int32_t acc[2] = {1, T};
    EXPECT(ssm_commit(a, &t1, acc, NULL), SSM_ERR_TICKET_STALE);
    EXPECT(ssm_forward_abort(a, &t1, NULL), SSM_ERR_TICKET_STALE);

    /* Both slots of the forward are fresh and no longer pending; the idle
     * one is as it was. */
    for (int i = 0; i < 2; i++) {
        EXPECT(test_snapshot_take(a, sa[i], &aborted[i]), SSM_OK);
        ck_assert_msg(snap_is_zero(&aborted[i]), "slot %d of an aborted forward is not fresh", i);
        test_snapshot_free(&aborted[i]);
    }
    EXPECT(test_snapshot_take(a, sa[2], &idle_after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&idle_before, &idle_after), "an idle slot changed");

    /* A new forward over one of the rows opens and commits; twin b resets
     * its slot without the verify and does the same. */
    EXPECT(ssm_slot_reset(b, sb[0], NULL), SSM_OK);
    int32_t T2 = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t one_a[1] = {sa[0]}, one_b[1] = {sb[0]};
    ssm_batch oa = {1, T2, one_a, NULL}, ob = {1, T2, one_b, NULL};
    test_io *v2 = ios_make(&wd, T2), *v2b = ios_clone(&wd, v2, T2);
    ssm_ticket t2 = SSM_TICKET_INIT, t2b = SSM_TICKET_INIT;
    verify_all(a, &wd, &oa, v2, &t2);
    verify_all(b, &wd, &ob, v2b, &t2b);
    ck_assert_msg(t2.forward != t1.forward, "a new forward reused the aborted one's number");
    int32_t acc2 = random_accepted(&wd, T2);
    EXPECT(ssm_commit(a, &t2, &acc2, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &t2b, &acc2, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v2, v2b, T2, "verify after the abort");
    assert_slot_same(a, sa[0], b, sb[0], "aborted slot, verified again");
    assert_slot_same(a, sa[2], b, sb[2], "idle slot");
    EXPECT(ssm_commit(a, &t1, acc, NULL), SSM_ERR_TICKET_STALE);

    test_snapshot_free(&idle_before);
    test_snapshot_free(&idle_after);
    ios_free(&wd, v1);
    ios_free(&wd, probe);
    ios_free(&wd, v2);
    ios_free(&wd, v2b);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Reset (_i & 2: release) of a slot inside an open forward is refused with
 * SSM_ERR_VERIFY_PENDING and changes nothing: the forward still commits,
 * and every slot then equals a twin that never saw the refused call. */
START_TEST(test_reset_refused_in_open_forward)
{
    int by_release = (_i & 2) != 0;
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[3] = {sa[0], sa[1], sa[2]}, rows_b[3] = {sb[0], sb[1], sb[2]};
    ssm_batch ba = {3, T, rows_a, NULL}, bb = {3, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 3 * T), *vb = ios_clone(&wd, v, 3 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &ba, v, &t);
    verify_all(b, &wd, &bb, vb, &tb);
    if (by_release)
        EXPECT(ssm_slot_release(a, sa[0]), SSM_ERR_VERIFY_PENDING);
    else
        EXPECT(ssm_slot_reset(a, sa[0], NULL), SSM_ERR_VERIFY_PENDING);
    int32_t acc[3];
    for (int i = 0; i < 3; i++)
        acc[i] = random_accepted(&wd, T);
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    for (int i = 0; i < 3; i++)
        assert_slot_same(a, sa[i], b, sb[i], "slot of a forward whose reset was refused");
    /* Committed, then reset: the ticket is stale, and says so. */
    EXPECT(ssm_slot_reset(a, sa[1], NULL), SSM_OK);
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_ERR_TICKET_STALE);
    ck_assert_msg(strstr(ssm_last_error(), "already committed, and its rows were reset or "
                                           "released since") != NULL,
                  "%s", ssm_last_error());
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ repeated */

START_TEST(test_repeated)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[3] = {sa[0], -1, sa[1]}, rows_b[3] = {sb[0], -1, sb[1]};
    ssm_batch ba = {3, T, rows_a, NULL}, bb = {3, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 3 * T), *vb = ios_clone(&wd, v, 3 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &ba, v, &t);
    verify_all(b, &wd, &bb, vb, &tb);
    int32_t acc[3] = {random_accepted(&wd, T), 0, random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);

    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    /* The same ticket, a copy of it, other accepted lengths. */
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_ERR_TICKET_REPEATED);
    ssm_ticket copy = t;
    int32_t other[3] = {1, 1, 1};
    EXPECT(ssm_commit(a, &copy, other, NULL), SSM_ERR_TICKET_REPEATED);
    /* An engine that forgot to zero the ticket before the next forward. */
    test_io *probe = ios_clone(&wd, v, 3 * T);
    ios_sentinel(&wd, probe, 3 * T);
    EXPECT(ssm_verify(a, 0, &ba, &wd.w[0].w, &probe[0].io, &copy, NULL),
           SSM_ERR_TICKET_REPEATED);
    ck_assert_msg(memcmp(&copy, &t, sizeof t) == 0, "a rejected verify changed the ticket");
    ios_assert_sentinel(&wd, probe, 3 * T, "verify with a committed ticket");
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "repeated commit");
    /* Not pending: the rows open a new forward. */
    ssm_ticket fresh = SSM_TICKET_INIT, freshb = SSM_TICKET_INIT;
    verify_all(a, &wd, &ba, v, &fresh);
    verify_all(b, &wd, &bb, vb, &freshb);
    EXPECT(ssm_commit(a, &fresh, other, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &freshb, other, NULL), SSM_OK);
    assert_twins_and_working(&wd, a, sa, b, sb);

    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A committed ticket presented after more forwards than the context
 * remembers: its slots left the ring with it, so it is stale (with the count
 * in the message), and nothing changes. */
START_TEST(test_too_old_is_stale)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t rows[1] = {sa[0]}, other_rows[1] = {sa[1]};
    ssm_batch b = {1, 1, rows, NULL}, other = {1, 1, other_rows, NULL};
    test_io *v = ios_make(&wd, 1);
    ssm_ticket t = SSM_TICKET_INIT;
    int32_t one[1] = {1};
    verify_all(a, &wd, &b, v, &t);
    EXPECT(ssm_commit(a, &t, one, NULL), SSM_OK);
    for (int i = 0; i < 256; i++) {
        ssm_ticket u = SSM_TICKET_INIT;
        verify_all(a, &wd, &other, v, &u);
        EXPECT(ssm_commit(a, &u, one, NULL), SSM_OK);
    }
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    EXPECT(ssm_commit(a, &t, one, NULL), SSM_ERR_TICKET_STALE);
    ck_assert_msg(strstr(ssm_last_error(), "256 forwards have run since, more than the 256") != NULL,
                  "%s", ssm_last_error());
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "too old a ticket");
    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, v);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* A commit with live rows and no accepted lengths is refused and leaves the
 * forward open: the same ticket commits afterwards. */
START_TEST(test_commit_without_lengths)
{
    world wd;
    world_init(&wd, _i, 2, SALT(__LINE__));
    int32_t sa[2];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t rows[2] = {sa[0], sa[1]}, acc[2] = {1, 1};
    ssm_batch b = {2, 1, rows, NULL};
    test_io *v = ios_make(&wd, 2);
    ssm_ticket t = SSM_TICKET_INIT;
    verify_all(a, &wd, &b, v, &t);
    EXPECT(ssm_commit(a, &t, NULL, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "no accepted lengths") != NULL, "%s", ssm_last_error());
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    ios_free(&wd, v);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* The bounds of the ticket book, with padding-only forwards (they open and
 * commit like any other): at most 64 open at once, and a forward still open
 * when 256 newer ones have run blocks the next verify (its ring entry would
 * be overwritten) until it is committed. */
START_TEST(test_open_forward_bounds)
{
    world wd;
    world_init(&wd, _i, 1, SALT(__LINE__));
    int32_t sa[1];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t pad[1] = {-1};
    ssm_batch b = {1, 1, pad, NULL};
    test_io *v = ios_make(&wd, 1);
    enum { OPEN = 64 };
    ssm_ticket open[OPEN + 1];
    for (int i = 0; i < OPEN; i++) {
        open[i] = (ssm_ticket)SSM_TICKET_INIT;
        verify_all(a, &wd, &b, v, &open[i]);
    }
    open[OPEN] = (ssm_ticket)SSM_TICKET_INIT;
    EXPECT(ssm_verify(a, 0, &b, &wd.w[0].w, &v[0].io, &open[OPEN], NULL),
           SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "64 forwards are open") != NULL, "%s",
                  ssm_last_error());
    for (int i = 1; i < OPEN; i++)
        EXPECT(ssm_commit(a, &open[i], NULL, NULL), SSM_OK);
    /* open[0] is forward 1; forwards 2..64 are committed. 192 more make
     * 256 forwards since it opened: the next one would take its ring entry. */
    for (int i = 0; i < 192; i++) {
        ssm_ticket u = SSM_TICKET_INIT;
        verify_all(a, &wd, &b, v, &u);
        EXPECT(ssm_commit(a, &u, NULL, NULL), SSM_OK);
    }
    ssm_ticket next = SSM_TICKET_INIT;
    EXPECT(ssm_verify(a, 0, &b, &wd.w[0].w, &v[0].io, &next, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "is still open after 256 newer ones") != NULL, "%s",
                  ssm_last_error());
    EXPECT(ssm_commit(a, &open[0], NULL, NULL), SSM_OK);
    next = (ssm_ticket)SSM_TICKET_INIT;
    verify_all(a, &wd, &b, v, &next);
    EXPECT(ssm_commit(a, &next, NULL, NULL), SSM_OK);
    ios_free(&wd, v);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* ============================================================ foreign */

/* Tickets of two contexts whose forwards have the same number and shape:
 * each is foreign to the other context, at commit and at verify. */
START_TEST(test_foreign_context)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3], sc[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb), *c = world_ctx(&wd, sc);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]}, rows_c[2] = {sc[0], sc[1]};
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL}, bc = {2, T, rows_c, NULL};
    test_io *v = ios_make(&wd, 2 * T), *vb = ios_clone(&wd, v, 2 * T),
            *vc = ios_clone(&wd, v, 2 * T);
    ssm_ticket ta = SSM_TICKET_INIT, tb = SSM_TICKET_INIT, tc = SSM_TICKET_INIT;
    verify_layers(a, &wd, &ba, v, &ta, 0, wd.m.layers - 1);
    verify_all(b, &wd, &bb, vb, &tb);
    verify_all(c, &wd, &bc, vc, &tc);
    ck_assert_msg(ta.forward == tc.forward && ta.rows == tc.rows && ta.tokens == tc.tokens,
                  "setup: the two contexts should issue look-alike tickets");
    ck_assert_msg(ta.context_id != tc.context_id, "two contexts share a context id");

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);
    int32_t last = wd.m.layers - 1;
    test_io *probe = ios_clone(&wd, v, 2 * T);
    ios_sentinel(&wd, probe, 2 * T);
    ssm_ticket foreign = tc;
    EXPECT(ssm_verify(a, last, &ba, &wd.w[last].w, &probe[last].io, &foreign, NULL),
           SSM_ERR_TICKET_FOREIGN);
    ios_assert_sentinel(&wd, probe, 2 * T, "verify with a foreign ticket");
    verify_layers(a, &wd, &ba, v, &ta, last, wd.m.layers);
    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &tc, acc, NULL), SSM_ERR_TICKET_FOREIGN);
    EXPECT(ssm_commit(c, &ta, acc, NULL), SSM_ERR_TICKET_FOREIGN);
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a foreign commit changed an idle slot");

    EXPECT(ssm_commit(a, &ta, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(c, &tc, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 2 * T, "verify outputs");
    ios_assert_out_equal(&wd, vc, vb, 2 * T, "the other context's verify outputs");
    for (int32_t i = 0; i < 3; i++)
        assert_slot_same(c, sc[i], b, sb[i], "the other context after its commit");
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, vc);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    ssm_ctx_destroy(c);
    world_free(&wd);
}
END_TEST

/* Forged forward numbers and altered rows or tokens are foreign. */
START_TEST(test_forged_and_altered)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 2, T_MAX);
    int32_t rows_a[3] = {sa[0], -1, sa[1]}, rows_b[3] = {sb[0], -1, sb[1]};
    ssm_batch ba = {3, T, rows_a, NULL}, bb = {3, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 3 * T), *vb = ios_clone(&wd, v, 3 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_layers(a, &wd, &ba, v, &t, 0, wd.m.layers - 1);
    verify_all(b, &wd, &bb, vb, &tb);

    ssm_ticket bad[10];
    for (int k = 0; k < 10; k++)
        bad[k] = t;
    bad[0].forward = t.forward + 1;       /* never issued */
    bad[1].forward = t.forward + 1000;
    bad[2].forward = UINT64_MAX;
    bad[3].forward = 0;                   /* with this context's id */
    bad[4].context_id = 0;                /* zero id, issued forward */
    bad[5].context_id ^= 0x100;           /* altered id */
    bad[6].rows = t.rows - 1;             /* altered rows */
    bad[7].rows = t.rows + 1;
    bad[8].tokens = t.tokens - 1;         /* altered tokens */
    bad[9].tokens = t.tokens + 1 <= T_MAX ? t.tokens + 1 : 1;

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);
    int32_t acc[3] = {random_accepted(&wd, T), 1, random_accepted(&wd, T)};
    int32_t last = wd.m.layers - 1;
    test_io *probe = ios_clone(&wd, v, 3 * T);
    ios_sentinel(&wd, probe, 3 * T);
    for (int k = 0; k < 10; k++) {
        ssm_ticket copy = bad[k];
        ssm_status st = ssm_commit(a, &bad[k], acc, NULL);
        ck_assert_msg(st == SSM_ERR_TICKET_FOREIGN, "commit of forged ticket %d: %s (%s)", k,
                      ssm_status_name(st), ssm_last_error());
        st = ssm_verify(a, last, &ba, &wd.w[last].w, &probe[last].io, &copy, NULL);
        ck_assert_msg(st == SSM_ERR_TICKET_FOREIGN, "verify with forged ticket %d: %s (%s)", k,
                      ssm_status_name(st), ssm_last_error());
        ck_assert_msg(memcmp(&copy, &bad[k], sizeof copy) == 0,
                      "a rejected verify changed forged ticket %d", k);
    }
    ios_assert_sentinel(&wd, probe, 3 * T, "verify with forged tickets");
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a forged commit changed an idle slot");

    verify_layers(a, &wd, &ba, v, &t, last, wd.m.layers);
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 3 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A commit of an empty ticket (no verify filled it) says so; a forward
 * whose rows are all padding commits without accepted lengths (CPU). */
START_TEST(test_empty_ticket_and_padding_commit)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t acc[2] = {1, 1};
    ssm_ticket empty = SSM_TICKET_INIT;
    EXPECT(ssm_commit(a, &empty, acc, NULL), SSM_ERR_TICKET_FOREIGN);
    ck_assert_msg(strstr(ssm_last_error(), "empty ticket") != NULL, "%s", ssm_last_error());

    int32_t pads[2] = {-1, -1};
    ssm_batch pb = {2, 2, pads, NULL};
    test_io *v = ios_make(&wd, 2 * 2);
    ssm_ticket t = SSM_TICKET_INIT;
    verify_all(a, &wd, &pb, v, &t);
    EXPECT(ssm_commit(a, &t, NULL, NULL), SSM_OK);
    EXPECT(ssm_commit(a, &t, NULL, NULL), SSM_ERR_TICKET_REPEATED);
    ios_free(&wd, v);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* ============================================================ accepted */

START_TEST(test_accepted_range)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[4] = {sa[0], -1, sa[1], -1}, rows_b[4] = {sb[0], -1, sb[1], -1};
    ssm_batch ba = {4, T, rows_a, NULL}, bb = {4, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 4 * T), *vb = ios_clone(&wd, v, 4 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &ba, v, &t);
    verify_all(b, &wd, &bb, vb, &tb);

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);
    int32_t good0 = random_accepted(&wd, T), good2 = random_accepted(&wd, T);
    const int32_t bad_values[] = {0, T + 1, -1, INT32_MIN, INT32_MAX, T + 1000};
    for (size_t k = 0; k < sizeof bad_values / sizeof *bad_values; k++) {
        int32_t first[4] = {bad_values[k], 1, good2, 1};
        int32_t second[4] = {good0, 1, bad_values[k], 1};
        EXPECT(ssm_commit(a, &t, first, NULL), SSM_ERR_ACCEPTED_RANGE);
        EXPECT(ssm_commit(a, &t, second, NULL), SSM_ERR_ACCEPTED_RANGE);
    }
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a rejected commit changed an idle slot");
    /* The forward is still open and commits; padding rows' values are
     * ignored (twin b passes 1 there). */
    int32_t acc_a[4] = {good0, 0, good2, -5}, acc_b[4] = {good0, 1, good2, 1};
    if (test_rng_int(&wd.rng, 0, 1)) {
        acc_a[1] = T + 1;
        acc_a[3] = INT32_MIN;
    }
    EXPECT(ssm_commit(a, &t, acc_a, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc_b, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 4 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ incomplete */

START_TEST(test_incomplete)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t L = wd.m.layers;
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[1], sa[0]}, rows_b[2] = {sb[1], sb[0]};
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 2 * T), *vb = ios_clone(&wd, v, 2 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);

    /* Layers verified from the last one down; the commit is incomplete until
     * layer 0 is in, whatever the accepted lengths say. */
    for (int32_t l = L - 1; l >= 1; l--) {
        verify_layers(a, &wd, &ba, v, &t, l, l + 1);
        EXPECT(ssm_commit(a, &t, acc, NULL), SSM_ERR_TICKET_INCOMPLETE);
        int32_t zero[2] = {0, 0};
        ssm_status st = ssm_commit(a, &t, zero, NULL);
        ck_assert_msg(st == SSM_ERR_TICKET_INCOMPLETE || st == SSM_ERR_ACCEPTED_RANGE,
                      "incomplete commit with bad lengths: %s", ssm_status_name(st));
    }
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "an incomplete commit changed an idle slot");
    verify_layers(a, &wd, &ba, v, &t, 0, 1);
    verify_all(b, &wd, &bb, vb, &tb);
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 2 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ pending */

/* A second verify with a fresh ticket over rows that include a slot of an
 * open forward is VERIFY_PENDING, fills no ticket, writes nothing and marks
 * nothing pending. */
START_TEST(test_second_verify_pending)
{
    world wd;
    world_init(&wd, _i, 4, SALT(__LINE__));
    int32_t sa[4], sb[4];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]};
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 2 * T), *vb = ios_clone(&wd, v, 2 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    int32_t open_layers = test_rng_int(&wd.rng, 1, wd.m.layers);
    verify_layers(a, &wd, &ba, v, &t, 0, open_layers);
    verify_all(b, &wd, &bb, vb, &tb);

    test_snapshot before[2], after[2];
    int32_t idle[2] = {sa[2], sa[3]};
    snaps_take(a, 2, idle, before);
    int32_t T2 = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t overlap[4][3] = {{sa[2], sa[1], sa[3]}, {sa[0], -1, -1},
                             {-1, sa[3], sa[0]}, {sa[1], sa[0], sa[2]}};
    test_io *probe = ios_make(&wd, 3 * T2);
    ios_sentinel(&wd, probe, 3 * T2);
    for (int k = 0; k < 4; k++) {
        ssm_batch o = {3, T2, overlap[k], NULL};
        for (int32_t l = 0; l < wd.m.layers; l++) {
            ssm_ticket fresh = SSM_TICKET_INIT;
            EXPECT(ssm_verify(a, l, &o, &wd.w[l].w, &probe[l].io, &fresh, NULL),
                   SSM_ERR_VERIFY_PENDING);
            ck_assert_msg(ticket_is_zero(&fresh), "a rejected verify filled the ticket");
        }
    }
    ios_assert_sentinel(&wd, probe, 3 * T2, "rejected second verify");
    snaps_take(a, 2, idle, after);
    snaps_assert_equal(2, before, after, "idle slots after a rejected verify");

    /* The idle slots were not marked pending: they open their own forward,
     * with the other still open, and it commits. */
    int32_t rows2_a[2] = {sa[3], sa[2]}, rows2_b[2] = {sb[3], sb[2]};
    ssm_batch b2a = {2, T2, rows2_a, NULL}, b2b = {2, T2, rows2_b, NULL};
    test_io *w2 = ios_make(&wd, 2 * T2), *w2b = ios_clone(&wd, w2, 2 * T2);
    ssm_ticket t2 = SSM_TICKET_INIT, t2b = SSM_TICKET_INIT;
    verify_all(a, &wd, &b2a, w2, &t2);
    verify_all(b, &wd, &b2b, w2b, &t2b);
    int32_t acc2[2] = {random_accepted(&wd, T2), random_accepted(&wd, T2)};
    EXPECT(ssm_commit(a, &t2, acc2, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &t2b, acc2, NULL), SSM_OK);

    verify_layers(a, &wd, &ba, v, &t, open_layers, wd.m.layers);
    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 2 * T, "verify outputs");
    ios_assert_out_equal(&wd, w2, w2b, 2 * T2, "second forward's outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    snaps_free(2, before);
    snaps_free(2, after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, w2);
    ios_free(&wd, w2b);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* The same layer verified twice in one forward: VERIFY_PENDING, before and
 * after the other layers are in. */
START_TEST(test_layer_twice)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[3] = {sa[2], -1, sa[0]}, rows_b[3] = {sb[2], -1, sb[0]};
    ssm_batch ba = {3, T, rows_a, NULL}, bb = {3, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 3 * T), *vb = ios_clone(&wd, v, 3 * T);
    test_io *probe = ios_clone(&wd, v, 3 * T);
    ios_sentinel(&wd, probe, 3 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    int32_t L = wd.m.layers, twice = test_rng_int(&wd.rng, 0, L - 1);
    verify_layers(a, &wd, &ba, v, &t, twice, twice + 1);
    ssm_ticket saved = t;
    EXPECT(ssm_verify(a, twice, &ba, &wd.w[twice].w, &probe[twice].io, &t, NULL),
           SSM_ERR_VERIFY_PENDING);
    ck_assert_msg(memcmp(&saved, &t, sizeof t) == 0, "a rejected verify changed the ticket");
    for (int32_t l = 0; l < L; l++)
        if (l != twice)
            verify_layers(a, &wd, &ba, v, &t, l, l + 1);
    for (int32_t l = 0; l < L; l++)
        EXPECT(ssm_verify(a, l, &ba, &wd.w[l].w, &probe[l].io, &t, NULL), SSM_ERR_VERIFY_PENDING);
    ios_assert_sentinel(&wd, probe, 3 * T, "a layer verified twice");
    ck_assert_msg(memcmp(&saved, &t, sizeof t) == 0, "later layers changed the ticket");

    verify_all(b, &wd, &bb, vb, &tb);
    int32_t acc[3] = {random_accepted(&wd, T), 0, random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 3 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Decode and prefill over a pending slot: VERIFY_PENDING, nothing written
 * (the batch's other, idle slot included). */
START_TEST(test_decode_prefill_pending)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]};
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 2 * T), *vb = ios_clone(&wd, v, 2 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &ba, v, &t);
    verify_all(b, &wd, &bb, vb, &tb);

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);
    test_io *probe = ios_make(&wd, 8);
    ios_sentinel(&wd, probe, 8);
    int32_t dec[3][2] = {{sa[2], sa[1]}, {sa[0], -1}, {-1, sa[0]}};
    for (int k = 0; k < 3; k++) {
        ssm_batch d = {2, 1, dec[k], NULL};
        for (int32_t l = 0; l < wd.m.layers; l++)
            EXPECT(ssm_decode(a, l, &d, &wd.w[l].w, &probe[l].io, NULL), SSM_ERR_VERIFY_PENDING);
    }
    int32_t pre_slots[2] = {sa[2], sa[0]}, pre_offsets[3] = {0, 3, 8};
    ssm_prefill_batch pb = {2, pre_slots, pre_offsets, 5, NULL, NULL};
    int32_t one[1] = {sa[1]}, one_offsets[2] = {0, 4};
    ssm_prefill_batch pb1 = {1, one, one_offsets, 4, NULL, NULL};
    for (int32_t l = 0; l < wd.m.layers; l++) {
        EXPECT(ssm_prefill(a, l, &pb, &wd.w[l].w, &probe[l].io, NULL), SSM_ERR_VERIFY_PENDING);
        EXPECT(ssm_prefill(a, l, &pb1, &wd.w[l].w, &probe[l].io, NULL), SSM_ERR_VERIFY_PENDING);
    }
    ios_assert_sentinel(&wd, probe, 8, "decode/prefill on a pending slot");
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a rejected step changed an idle slot");
    /* Exporting a pending slot is refused too (a page holds the canonical
     * form, which exists only with nothing pending). */
    test_snapshot pending;
    EXPECT(test_snapshot_take(a, sa[0], &pending), SSM_ERR_VERIFY_PENDING);
    test_snapshot_free(&pending);

    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 2 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ rows */

/* A later layer's verify must present the forward's rows: another slot
 * buffer, other rows, another T, or the buffer's contents changed are
 * INVALID_ARGUMENT, and nothing is written. */
START_TEST(test_later_layer_other_rows)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]};
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 2 * T), *vb = ios_clone(&wd, v, 2 * T);
    test_io *probe = ios_make(&wd, 3 * T_MAX);
    ios_sentinel(&wd, probe, 3 * T_MAX);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_layers(a, &wd, &ba, v, &t, 0, 1);
    ssm_ticket saved = t;

    test_snapshot before, after;
    EXPECT(test_snapshot_take(a, sa[2], &before), SSM_OK);
    int32_t other_slots[2] = {sa[0], sa[2]};
    int32_t more_slots[3] = {sa[0], sa[1], -1};
    int32_t other_T = T < T_MAX ? T + 1 : T - 1;
    ssm_batch bad[4] = {
        {2, T, other_slots, NULL},   /* another slot */
        {1, T, rows_a, NULL},        /* fewer rows, same buffer */
        {3, T, more_slots, NULL},    /* an extra padding row */
        {2, other_T, rows_a, NULL},  /* another T */
    };
    for (int32_t l = 1; l < wd.m.layers; l++) {
        for (int k = 0; k < 4; k++) {
            ssm_status st = ssm_verify(a, l, &bad[k], &wd.w[l].w, &probe[l].io, &t, NULL);
            ck_assert_msg(st == SSM_ERR_INVALID_ARGUMENT,
                          "layer %d, mismatch %d: got %s (%s)", l, k, ssm_status_name(st),
                          ssm_last_error());
        }
        /* The forward's own buffer with a row pointing at another slot. */
        int32_t saved_row = rows_a[1];
        rows_a[1] = sa[2];
        EXPECT(ssm_verify(a, l, &ba, &wd.w[l].w, &probe[l].io, &t, NULL),
               SSM_ERR_INVALID_ARGUMENT);
        rows_a[1] = -1;
        EXPECT(ssm_verify(a, l, &ba, &wd.w[l].w, &probe[l].io, &t, NULL),
               SSM_ERR_INVALID_ARGUMENT);
        rows_a[1] = saved_row;
        ck_assert_msg(memcmp(&saved, &t, sizeof t) == 0, "a rejected verify changed the ticket");
    }
    ios_assert_sentinel(&wd, probe, 3 * T_MAX, "verify with other rows");
    EXPECT(test_snapshot_take(a, sa[2], &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a rejected verify changed an idle slot");

    /* The rejected layers are not marked: they verify now and commit. */
    verify_layers(a, &wd, &ba, v, &t, 1, wd.m.layers);
    verify_all(b, &wd, &bb, vb, &tb);
    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 2 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    test_snapshot_free(&before);
    test_snapshot_free(&after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* The forward's own slot buffer with its two rows swapped between layers:
 * the rows no longer name the slots the forward was opened with. */
START_TEST(test_later_layer_rows_permuted)
{
    world wd;
    world_init(&wd, _i, 2, SALT(__LINE__));
    int32_t sa[2];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t rows_a[2] = {sa[0], sa[1]};
    ssm_batch ba = {2, T, rows_a, NULL};
    test_io *v = ios_make(&wd, 2 * T);
    test_io *probe = ios_clone(&wd, v, 2 * T);
    ios_sentinel(&wd, probe, 2 * T);
    ssm_ticket t = SSM_TICKET_INIT;
    verify_layers(a, &wd, &ba, v, &t, 0, 1);
    rows_a[0] = sa[1];
    rows_a[1] = sa[0];
    EXPECT(ssm_verify(a, 1, &ba, &wd.w[1].w, &probe[1].io, &t, NULL), SSM_ERR_INVALID_ARGUMENT);
    ios_assert_sentinel(&wd, probe, 2 * T, "verify with permuted rows");
    ios_free(&wd, v);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* T = 0, negative, or above 1 + max_draft: INVALID_ARGUMENT, for an opening
 * verify and for a later layer's. */
START_TEST(test_verify_tokens_range)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    int32_t rows_a[2] = {sa[0], sa[2]}, rows_b[2] = {sb[0], sb[2]};
    const int32_t bad_T[] = {0, -1, T_MAX + 1, T_MAX + 7, INT32_MIN};
    test_io *probe = ios_make(&wd, 2 * (T_MAX + 7));
    ios_sentinel(&wd, probe, 2 * (T_MAX + 7));
    for (size_t k = 0; k < sizeof bad_T / sizeof *bad_T; k++) {
        ssm_batch bad = {2, bad_T[k], rows_a, NULL};
        for (int32_t l = 0; l < wd.m.layers; l++) {
            ssm_ticket fresh = SSM_TICKET_INIT;
            EXPECT(ssm_verify(a, l, &bad, &wd.w[l].w, &probe[l].io, &fresh, NULL),
                   SSM_ERR_INVALID_ARGUMENT);
            ck_assert_msg(ticket_is_zero(&fresh), "a rejected verify filled the ticket");
        }
    }
    ios_assert_sentinel(&wd, probe, 2 * (T_MAX + 7), "verify with a bad T");
    /* Nothing pending: every slot still exports, unchanged. */
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "verify with a bad T");

    /* A forward opened with a good T refuses a bad one at a later layer. */
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 2 * T), *vb = ios_clone(&wd, v, 2 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_layers(a, &wd, &ba, v, &t, 0, 1);
    for (size_t k = 0; k < sizeof bad_T / sizeof *bad_T; k++) {
        ssm_batch bad = {2, bad_T[k], rows_a, NULL};
        EXPECT(ssm_verify(a, 1, &bad, &wd.w[1].w, &probe[1].io, &t, NULL),
               SSM_ERR_INVALID_ARGUMENT);
    }
    ios_assert_sentinel(&wd, probe, 2 * (T_MAX + 7), "later verify with a bad T");
    verify_layers(a, &wd, &ba, v, &t, 1, wd.m.layers);
    verify_all(b, &wd, &bb, vb, &tb);
    int32_t acc[2] = {random_accepted(&wd, T), random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 2 * T, "verify outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ concurrency */

/* Two forwards over disjoint slots, verified layer by layer interleaved,
 * commit in either order (_i & 2: the second first) to what a twin gets
 * running them one after the other. */
START_TEST(test_two_forwards)
{
    int second_first = (_i & 2) != 0;
    world wd;
    world_init(&wd, _i, 5, SALT(__LINE__));
    int32_t sa[5], sb[5];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t T1 = test_rng_int(&wd.rng, 1, T_MAX), T2 = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t r1a[3] = {sa[3], -1, sa[0]}, r1b[3] = {sb[3], -1, sb[0]};
    int32_t r2a[2] = {sa[1], sa[4]}, r2b[2] = {sb[1], sb[4]};
    ssm_batch f1a = {3, T1, r1a, NULL}, f1b = {3, T1, r1b, NULL}, f2a = {2, T2, r2a, NULL}, f2b = {2, T2, r2b, NULL};
    test_io *v1 = ios_make(&wd, 3 * T1), *v1b = ios_clone(&wd, v1, 3 * T1);
    test_io *v2 = ios_make(&wd, 2 * T2), *v2b = ios_clone(&wd, v2, 2 * T2);
    ssm_ticket t1 = SSM_TICKET_INIT, t2 = SSM_TICKET_INIT;
    ssm_ticket t1b = SSM_TICKET_INIT, t2b = SSM_TICKET_INIT;
    int32_t acc1[3] = {random_accepted(&wd, T1), 0, random_accepted(&wd, T1)};
    int32_t acc2[2] = {random_accepted(&wd, T2), random_accepted(&wd, T2)};

    for (int32_t l = 0; l < wd.m.layers; l++) {
        if (l % 2) {
            verify_layers(a, &wd, &f2a, v2, &t2, l, l + 1);
            verify_layers(a, &wd, &f1a, v1, &t1, l, l + 1);
        } else {
            verify_layers(a, &wd, &f1a, v1, &t1, l, l + 1);
            verify_layers(a, &wd, &f2a, v2, &t2, l, l + 1);
        }
    }
    ck_assert_msg(t1.forward != t2.forward, "two open forwards share a number");
    if (second_first) {
        EXPECT(ssm_commit(a, &t2, acc2, NULL), SSM_OK);
        EXPECT(ssm_commit(a, &t1, acc1, NULL), SSM_OK);
    } else {
        EXPECT(ssm_commit(a, &t1, acc1, NULL), SSM_OK);
        EXPECT(ssm_commit(a, &t2, acc2, NULL), SSM_OK);
    }
    EXPECT(ssm_commit(a, &t1, acc1, NULL), SSM_ERR_TICKET_REPEATED);
    EXPECT(ssm_commit(a, &t2, acc2, NULL), SSM_ERR_TICKET_REPEATED);

    verify_all(b, &wd, &f1b, v1b, &t1b);
    EXPECT(ssm_commit(b, &t1b, acc1, NULL), SSM_OK);
    verify_all(b, &wd, &f2b, v2b, &t2b);
    EXPECT(ssm_commit(b, &t2b, acc2, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v1, v1b, 3 * T1, "first forward's outputs");
    ios_assert_out_equal(&wd, v2, v2b, 2 * T2, "second forward's outputs");
    assert_twins_and_working(&wd, a, sa, b, sb);

    ios_free(&wd, v1);
    ios_free(&wd, v1b);
    ios_free(&wd, v2);
    ios_free(&wd, v2b);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ decode */

/* Decode needs no ticket and commits at once: the slots can be decoded
 * again, verified and exported right after; and it equals a verify of T = 1
 * with a commit of 1, outputs and state, bit for bit. */
START_TEST(test_decode_commits_implicitly)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t rows_a[3] = {sa[2], -1, sa[0]}, rows_b[3] = {sb[2], -1, sb[0]};
    int steps = test_rng_int(&wd.rng, 2, 4);
    for (int s = 0; s < steps; s++) {
        ssm_batch da = {3, 1, rows_a, NULL}, vbb = {3, 1, rows_b, NULL};
        test_io *d = ios_make(&wd, 3), *db = ios_clone(&wd, d, 3);
        decode_all(a, &wd, &da, d);
        /* Not pending: exportable right away. */
        test_snapshot snap;
        EXPECT(test_snapshot_take(a, sa[0], &snap), SSM_OK);
        test_snapshot_free(&snap);
        ssm_ticket t = SSM_TICKET_INIT;
        verify_all(b, &wd, &vbb, db, &t);
        int32_t acc[3] = {1, 0, 1};
        EXPECT(ssm_commit(b, &t, acc, NULL), SSM_OK);
        ios_assert_out_equal(&wd, d, db, 3, "decode vs verify T=1 + commit 1");
        for (int32_t i = 0; i < 3; i++)
            assert_slot_same(a, sa[i], b, sb[i], "decode vs verify T=1 + commit 1");
        ios_free(&wd, d);
        ios_free(&wd, db);
    }
    /* A verify opens over freshly decoded slots. */
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    ssm_batch va = {3, T, rows_a, NULL}, vb2 = {3, T, rows_b, NULL};
    test_io *v = ios_make(&wd, 3 * T), *vb = ios_clone(&wd, v, 3 * T);
    ssm_ticket ta = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &va, v, &ta);
    verify_all(b, &wd, &vb2, vb, &tb);
    int32_t acc[3] = {random_accepted(&wd, T), 7, random_accepted(&wd, T)};
    EXPECT(ssm_commit(a, &ta, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vb, 3 * T, "verify after decodes");
    /* Decoded over since, the committed forward's ticket is stale, not
     * repeated (a decode is a verify and commit of one token). */
    EXPECT(ssm_commit(a, &ta, acc, NULL), SSM_ERR_TICKET_REPEATED);
    ck_assert_msg(strstr(ssm_last_error(), "was already committed") != NULL, "%s",
                  ssm_last_error());
    ssm_batch again = {3, 1, rows_a, NULL}, again_b = {3, 1, rows_b, NULL};
    test_io *d2 = ios_make(&wd, 3), *d2b = ios_clone(&wd, d2, 3);
    decode_all(a, &wd, &again, d2);
    decode_all(b, &wd, &again_b, d2b);
    EXPECT(ssm_commit(a, &ta, acc, NULL), SSM_ERR_TICKET_STALE);
    /* The message says what happened: decoded, not verified again. */
    ck_assert_msg(strstr(ssm_last_error(), "already committed, and its rows were decoded since") !=
                      NULL,
                  "%s", ssm_last_error());
    /* A later reset does not rewrite what overtook the rows first. */
    EXPECT(ssm_slot_reset(a, sa[0], NULL), SSM_OK);
    EXPECT(ssm_slot_reset(b, sb[0], NULL), SSM_OK);
    EXPECT(ssm_commit(a, &ta, acc, NULL), SSM_ERR_TICKET_STALE);
    ck_assert_msg(strstr(ssm_last_error(), "rows were decoded since") != NULL, "%s",
                  ssm_last_error());
    assert_twins_and_working(&wd, a, sa, b, sb);

    ios_free(&wd, d2);
    ios_free(&wd, d2b);
    ios_free(&wd, v);
    ios_free(&wd, vb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Rollback exactness. Context a: a first verify round of random T0 with
 * random accepted lengths (so the current snapshot moves off 0), then a
 * verify of T = 1 + max_draft where row r commits a_r, the a_r covering
 * every length 1..T. Context b decodes exactly the accepted tokens one by
 * one. Outputs of accepted tokens and states are bit-identical, and so is
 * the next decode. */
START_TEST(test_rollback_exact)
{
    world wd;
    const int32_t T = T_MAX;
    world_init(&wd, _i, T, SALT(__LINE__));
    int32_t sa[T_MAX], sb[T_MAX];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);

    for (int round = 0; round < 2; round++) {
        int32_t Tr = round == 0 ? test_rng_int(&wd.rng, 1, T) : T;
        int32_t rows = T + 1; /* one padding row in a random place */
        int32_t pad = test_rng_int(&wd.rng, 0, rows - 1);
        int32_t slot_a[T_MAX + 1], slot_b[T_MAX + 1], acc[T_MAX + 1], which[T_MAX + 1];
        /* Row -> slot index, a random permutation. */
        int32_t perm[T_MAX];
        for (int32_t i = 0; i < T; i++)
            perm[i] = i;
        for (int32_t i = T - 1; i > 0; i--) {
            int32_t j = test_rng_int(&wd.rng, 0, i), x = perm[i];
            perm[i] = perm[j];
            perm[j] = x;
        }
        for (int32_t r = 0, i = 0; r < rows; r++) {
            if (r == pad) {
                slot_a[r] = slot_b[r] = -1;
                which[r] = -1;
                acc[r] = 0;
                continue;
            }
            which[r] = perm[i++];
            slot_a[r] = sa[which[r]];
            slot_b[r] = sb[which[r]];
            /* round 1: slot index i accepts i + 1, so every length occurs */
            acc[r] = round == 0 ? random_accepted(&wd, Tr) : which[r] + 1;
        }
        ssm_batch vbatch = {rows, Tr, slot_a, NULL};
        test_io *v = ios_make(&wd, (int64_t)rows * Tr);
        ssm_ticket t = SSM_TICKET_INIT;
        verify_all(a, &wd, &vbatch, v, &t);
        EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);

        /* b: decode step s runs the rows that accepted more than s tokens. */
        for (int32_t s = 0; s < Tr; s++) {
            int32_t dslots[T_MAX + 1];
            test_io *d = ios_make(&wd, rows);
            for (int32_t r = 0; r < rows; r++) {
                dslots[r] = (slot_b[r] >= 0 && acc[r] > s) ? slot_b[r] : -1;
                ios_copy_token(&wd, d, r, v, (int64_t)r * Tr + s);
            }
            ssm_batch dbatch = {rows, 1, dslots, NULL};
            decode_all(b, &wd, &dbatch, d);
            size_t ob = out_bytes(&wd, 1);
            for (int32_t l = 0; l < wd.m.layers; l++)
                for (int32_t r = 0; r < rows; r++)
                    if (dslots[r] >= 0)
                        ck_assert_msg(memcmp((char *)d[l].out + r * ob,
                                             (char *)v[l].out + ((int64_t)r * Tr + s) * ob,
                                             ob) == 0,
                                      "round %d, layer %d, row %d (accepted %d of %d): output "
                                      "of token %d differs from decode's",
                                      round, l, r, acc[r], Tr, s);
            ios_free(&wd, d);
        }
        for (int32_t r = 0; r < rows; r++)
            if (which[r] >= 0) {
                test_snapshot x, y;
                EXPECT(test_snapshot_take(a, slot_a[r], &x), SSM_OK);
                EXPECT(test_snapshot_take(b, slot_b[r], &y), SSM_OK);
                ck_assert_msg(test_snapshot_equal(&x, &y),
                              "round %d: verify %d + commit %d differs from %d decodes "
                              "(slot %d)",
                              round, Tr, acc[r], acc[r], slot_a[r]);
                test_snapshot_free(&x);
                test_snapshot_free(&y);
            }
        ios_free(&wd, v);
    }
    assert_twins_and_working(&wd, a, sa, b, sb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

Suite *make_suite(void)
{
    (void)test_seed(); /* one seed for every forked test, printed once */
    Suite *s = suite_create("tickets");

    TCase *stale = tcase_create("stale");
    tcase_add_loop_test(stale, test_stale_after_reverify, 0, 4);
    tcase_add_loop_test(stale, test_stale_after_partial_reverify, 0, 4);
    tcase_add_loop_test(stale, test_stale_after_abort, 0, 8);
    tcase_add_loop_test(stale, test_reset_refused_in_open_forward, 0, 4);
    suite_add_tcase(s, stale);

    TCase *repeated = tcase_create("repeated");
    tcase_add_loop_test(repeated, test_repeated, 0, 4);
    tcase_add_loop_test(repeated, test_too_old_is_stale, 0, 3);
    tcase_add_loop_test(repeated, test_commit_without_lengths, 0, 3);
    tcase_add_loop_test(repeated, test_open_forward_bounds, 0, 3);
    suite_add_tcase(s, repeated);

    TCase *foreign = tcase_create("foreign");
    tcase_add_loop_test(foreign, test_foreign_context, 0, 4);
    tcase_add_loop_test(foreign, test_forged_and_altered, 0, 4);
    tcase_add_loop_test(foreign, test_empty_ticket_and_padding_commit, 0, 4);
    suite_add_tcase(s, foreign);

    TCase *accepted = tcase_create("accepted");
    tcase_add_loop_test(accepted, test_accepted_range, 0, 4);
    suite_add_tcase(s, accepted);

    TCase *incomplete = tcase_create("incomplete");
    tcase_add_loop_test(incomplete, test_incomplete, 0, 4);
    suite_add_tcase(s, incomplete);

    TCase *pending = tcase_create("pending");
    tcase_add_loop_test(pending, test_second_verify_pending, 0, 4);
    tcase_add_loop_test(pending, test_layer_twice, 0, 4);
    tcase_add_loop_test(pending, test_decode_prefill_pending, 0, 4);
    suite_add_tcase(s, pending);

    TCase *rows = tcase_create("rows");
    tcase_add_loop_test(rows, test_later_layer_other_rows, 0, 4);
    tcase_add_loop_test(rows, test_later_layer_rows_permuted, 0, 2);
    tcase_add_loop_test(rows, test_verify_tokens_range, 0, 4);
    suite_add_tcase(s, rows);

    TCase *concurrent = tcase_create("concurrent");
    tcase_add_loop_test(concurrent, test_two_forwards, 0, 8);
    suite_add_tcase(s, concurrent);

    TCase *decode = tcase_create("decode");
    tcase_set_timeout(decode, 60);
    tcase_add_loop_test(decode, test_decode_commits_implicitly, 0, 4);
    tcase_add_loop_test(decode, test_rollback_exact, 0, 8);
    suite_add_tcase(s, decode);
    return s;
}
