/* The slot pool and batch validation (docs/reliability.md) on CPU contexts of
 * mode "native": pool accounting, exhaustion, release and reset errors,
 * NULL arguments to the pool calls, fresh slots on reuse and reset, slot
 * errors inside step batches, padding rows, non-finite inputs, prefill
 * offsets, layer range, negative row counts, and missing weights or step
 * tensors.
 *
 * Every rejected call is checked for its exact status, for nothing written
 * (snapshots of the slots involved, output buffers filled with a sentinel)
 * and for the context still working afterwards (compared with a twin context
 * that never saw the bad call). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/runner.h"
#include "tests/testutil.h"

#include "tests/world.h"

/* The end of every error test: slots sa[0..n) of a and sb[0..n) of twin b
 * hold the same state, and both still decode one more token over those
 * slots to the same outputs and states. */
static void assert_twins_and_working(world *wd, ssm_ctx *a, int32_t n, const int32_t *sa,
                                     ssm_ctx *b, const int32_t *sb)
{
    for (int32_t i = 0; i < n; i++)
        assert_slot_same(a, sa[i], b, sb[i], "before the check decode");
    test_io *ia = ios_make(wd, n);
    test_io *ib = ios_clone(wd, ia, n);
    ssm_batch ba = {n, 1, sa, NULL}, bb = {n, 1, sb, NULL};
    decode_all(a, wd, &ba, ia);
    decode_all(b, wd, &bb, ib);
    ios_assert_out_equal(wd, ia, ib, n, "check decode");
    for (int32_t i = 0; i < n; i++)
        assert_slot_same(a, sa[i], b, sb[i], "check decode");
    ios_free(wd, ia);
    ios_free(wd, ib);
}

static int ticket_is_zero(const ssm_ticket *t)
{
    return t->context_id == 0 && t->forward == 0 && t->rows == 0 && t->tokens == 0;
}

static void prefill_all(ssm_ctx *ctx, const world *wd, const ssm_prefill_batch *b, test_io *ios)
{
    for (int32_t l = 0; l < wd->m.layers; l++)
        EXPECT(ssm_prefill(ctx, l, b, &wd->w[l].w, &ios[l].io, NULL), SSM_OK);
}

static void assert_pool(const ssm_ctx *ctx, int32_t cap, int32_t used, const char *what)
{
    ssm_pool_stats st = {-1, -1, -1};
    EXPECT(ssm_pool_query(ctx, &st), SSM_OK);
    ck_assert_msg(st.capacity == cap && st.used == used && st.free == cap - used &&
                      st.used + st.free == st.capacity,
                  "%s: pool says capacity %d, used %d, free %d; want %d, %d, %d", what,
                  st.capacity, st.used, st.free, cap, used, cap - used);
}

/* Releases one of the n slots of both twins, a random one, k: the others
 * go to held_a and held_b in order. Returns k. */
static int32_t release_one(world *wd, ssm_ctx *a, ssm_ctx *b, int32_t n, const int32_t *sa,
                           const int32_t *sb, int32_t *held_a, int32_t *held_b)
{
    int32_t k = test_rng_int(&wd->rng, 0, n - 1);
    for (int32_t i = 0, j = 0; i < n; i++)
        if (i != k) {
            held_a[j] = sa[i];
            held_b[j++] = sb[i];
        }
    EXPECT(ssm_slot_release(a, sa[k]), SSM_OK);
    EXPECT(ssm_slot_release(b, sb[k]), SSM_OK);
    return k;
}

static void assert_no_flags(const ssm_ctx *ctx, const char *what)
{
    ssm_ctx_report rep = {0xdead, 99, 99};
    EXPECT(ssm_ctx_status(ctx, &rep), SSM_OK);
    ck_assert_msg(rep.flags == 0 && rep.flagged_slots == 0 && rep.first_flagged == -1,
                  "%s: status reports flags %#x on %d slots, first %d", what, rep.flags,
                  rep.flagged_slots, rep.first_flagged);
}

static uint32_t slot_flags(const ssm_ctx *ctx, int32_t slot)
{
    uint32_t f = 0xdeadbeef;
    EXPECT(ssm_slot_flags(ctx, slot, &f), SSM_OK);
    return f;
}

#define SALT(n) ((uint64_t)(n) * 1000003u + (uint64_t)_i)

/* ============================================================ pool */

/* A random walk of acquire / release / reset (good and bad): the pool's
 * accounting matches the slots held after every operation. */
START_TEST(test_pool_accounting)
{
    world wd;
    world_init(&wd, _i, 1 + (int32_t)((test_seed() >> 8) % 8), SALT(__LINE__));
    int32_t cap = wd.cap;
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(&wd.cfg, &ctx), SSM_OK);
    uint8_t *held = calloc((size_t)cap, 1);
    int32_t count = 0;
    assert_pool(ctx, cap, 0, "new context");
    for (int op = 0; op < 300; op++) {
        int32_t s = test_rng_int(&wd.rng, 0, cap - 1);
        switch (test_rng_int(&wd.rng, 0, 3)) {
        case 0:
        case 1: {
            int32_t got = -12345;
            if (count == cap) {
                EXPECT(ssm_slot_acquire(ctx, &got), SSM_ERR_POOL_EXHAUSTED);
                ck_assert_int_eq(got, -12345);
            } else {
                EXPECT(ssm_slot_acquire(ctx, &got), SSM_OK);
                ck_assert_msg(got >= 0 && got < cap, "acquired slot %d of %d", got, cap);
                ck_assert_msg(!held[got], "slot %d handed out twice", got);
                held[got] = 1;
                count++;
            }
            break;
        }
        case 2:
            EXPECT(ssm_slot_release(ctx, s), held[s] ? SSM_OK : SSM_ERR_SLOT_NOT_ACQUIRED);
            if (held[s]) {
                held[s] = 0;
                count--;
            }
            break;
        default:
            EXPECT(ssm_slot_reset(ctx, s, NULL), held[s] ? SSM_OK : SSM_ERR_SLOT_NOT_ACQUIRED);
            break;
        }
        assert_pool(ctx, cap, count, "random walk");
    }
    free(held);
    ssm_ctx_destroy(ctx);
    world_free(&wd);
}
END_TEST

/* Acquire until exhausted: POOL_EXHAUSTED, nothing changed, and the context
 * keeps working (steps, release, acquire again). */
START_TEST(test_pool_exhausted)
{
    world wd;
    world_init(&wd, _i, 1 + (int32_t)((test_seed() >> 16) % 6), SALT(__LINE__));
    int32_t cap = wd.cap;
    int32_t *sa = calloc((size_t)cap, sizeof *sa), *sb = calloc((size_t)cap, sizeof *sb);
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    for (int32_t i = 0; i < cap; i++)
        for (int32_t j = 0; j < i; j++)
            ck_assert_msg(sa[i] != sa[j], "slot %d handed out twice", sa[i]);
    assert_pool(a, cap, cap, "all acquired");
    test_snapshot *before = calloc((size_t)cap, sizeof *before);
    test_snapshot *after = calloc((size_t)cap, sizeof *after);
    snaps_take(a, cap, sa, before);
    for (int k = 0; k < 3; k++) {
        int32_t got = -12345;
        EXPECT(ssm_slot_acquire(a, &got), SSM_ERR_POOL_EXHAUSTED);
        ck_assert_msg(got == -12345, "a failed acquire wrote slot %d", got);
        assert_pool(a, cap, cap, "after a failed acquire");
    }
    snaps_take(a, cap, sa, after);
    snaps_assert_equal(cap, before, after, "failed acquire");
    assert_twins_and_working(&wd, a, cap, sa, b, sb);

    int32_t k = test_rng_int(&wd.rng, 0, cap - 1), got = -1;
    EXPECT(ssm_slot_release(a, sa[k]), SSM_OK);
    assert_pool(a, cap, cap - 1, "after a release");
    EXPECT(ssm_slot_acquire(a, &got), SSM_OK);
    ck_assert_int_eq(got, sa[k]);
    assert_pool(a, cap, cap, "reacquired");
    EXPECT(ssm_slot_acquire(a, &got), SSM_ERR_POOL_EXHAUSTED);
    EXPECT(ssm_slot_reset(b, sb[k], NULL), SSM_OK);
    assert_twins_and_working(&wd, a, cap, sa, b, sb);

    snaps_free(cap, before);
    snaps_free(cap, after);
    free(before);
    free(after);
    free(sa);
    free(sb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Release twice, reset of a released slot: SLOT_NOT_ACQUIRED, pool and the
 * other slots unchanged. */
START_TEST(test_release_twice)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t rest_a[2], rest_b[2];
    int32_t k = release_one(&wd, a, b, 3, sa, sb, rest_a, rest_b);
    assert_pool(a, 3, 2, "after a release");
    test_snapshot before[2], after[2];
    snaps_take(a, 2, rest_a, before);
    EXPECT(ssm_slot_release(a, sa[k]), SSM_ERR_SLOT_NOT_ACQUIRED);
    assert_pool(a, 3, 2, "after a second release");
    EXPECT(ssm_slot_release(a, sa[k]), SSM_ERR_SLOT_NOT_ACQUIRED);
    EXPECT(ssm_slot_reset(a, sa[k], NULL), SSM_ERR_SLOT_NOT_ACQUIRED);
    test_snapshot freed;
    EXPECT(test_snapshot_take(a, sa[k], &freed), SSM_ERR_SLOT_NOT_ACQUIRED);
    test_snapshot_free(&freed);
    assert_pool(a, 3, 2, "after a reset of a free slot");
    snaps_take(a, 2, rest_a, after);
    snaps_assert_equal(2, before, after, "failed release");
    assert_twins_and_working(&wd, a, 2, rest_a, b, rest_b);
    /* The freed slot comes back once, fresh. */
    int32_t got = -1;
    EXPECT(ssm_slot_acquire(a, &got), SSM_OK);
    ck_assert_int_eq(got, sa[k]);
    EXPECT(ssm_slot_acquire(a, &got), SSM_ERR_POOL_EXHAUSTED);
    snaps_free(2, before);
    snaps_free(2, after);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Release, reset and flags of a slot outside the pool: SLOT_RANGE. */
START_TEST(test_slot_calls_out_of_range)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    const int32_t bad[] = {3, 4, 1000, -1, -2, INT32_MIN, INT32_MAX};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        EXPECT(ssm_slot_release(a, bad[i]), SSM_ERR_SLOT_RANGE);
        EXPECT(ssm_slot_reset(a, bad[i], NULL), SSM_ERR_SLOT_RANGE);
        uint32_t f = 77;
        EXPECT(ssm_slot_flags(a, bad[i], &f), SSM_ERR_SLOT_RANGE);
        ck_assert_int_eq(f, 77);
        assert_pool(a, 3, 3, "after an out-of-range call");
    }
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "out-of-range slot calls");
    assert_no_flags(a, "out-of-range slot calls");
    assert_twins_and_working(&wd, a, 3, sa, b, sb);
    snaps_free(3, before);
    snaps_free(3, after);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* NULL where the pool calls need a pointer: INVALID_ARGUMENT, the pool's
 * accounting, the slots and their flags unchanged, nothing handed out. */
START_TEST(test_pool_null_arguments)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t rest_a[2], rest_b[2];
    int32_t k = release_one(&wd, a, b, 3, sa, sb, rest_a, rest_b);
    test_snapshot before[2], after[2];
    snaps_take(a, 2, rest_a, before);
    int32_t got = -12345;
    EXPECT(ssm_slot_acquire(a, NULL), SSM_ERR_INVALID_ARGUMENT);
    assert_pool(a, 3, 2, "after an acquire without an out pointer");
    EXPECT(ssm_slot_acquire(NULL, &got), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(got, -12345);
    EXPECT(ssm_slot_release(NULL, rest_a[0]), SSM_ERR_INVALID_ARGUMENT);
    EXPECT(ssm_slot_reset(NULL, rest_a[0], NULL), SSM_ERR_INVALID_ARGUMENT);
    EXPECT(ssm_ctx_status(a, NULL), SSM_ERR_INVALID_ARGUMENT);
    ssm_ctx_report rep = {77, 77, 77};
    EXPECT(ssm_ctx_status(NULL, &rep), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(rep.flags == 77 && rep.flagged_slots == 77 && rep.first_flagged == 77,
                  "a rejected status query wrote its report");
    EXPECT(ssm_slot_flags(a, rest_a[0], NULL), SSM_ERR_INVALID_ARGUMENT);
    uint32_t f = 77;
    EXPECT(ssm_slot_flags(NULL, rest_a[0], &f), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(f, 77);
    ssm_pool_stats st = {77, 77, 77};
    EXPECT(ssm_pool_query(NULL, &st), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(st.capacity == 77 && st.used == 77 && st.free == 77,
                  "a rejected pool query wrote its stats");
    EXPECT(ssm_pool_query(a, NULL), SSM_ERR_INVALID_ARGUMENT);
    assert_pool(a, 3, 2, "after NULL arguments");
    snaps_take(a, 2, rest_a, after);
    snaps_assert_equal(2, before, after, "NULL arguments");
    assert_no_flags(a, "NULL arguments");
    assert_twins_and_working(&wd, a, 2, rest_a, b, rest_b);
    /* The free slot is still there, once. */
    EXPECT(ssm_slot_acquire(a, &got), SSM_OK);
    ck_assert_int_eq(got, sa[k]);
    EXPECT(ssm_slot_acquire(a, &got), SSM_ERR_POOL_EXHAUSTED);
    snaps_free(2, before);
    snaps_free(2, after);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* ============================================================ fresh */

/* A copy of a flagged slot is flagged too (it holds the same non-finite
 * state), and a copy of a clean slot over a flagged one clears it. */
START_TEST(test_copy_carries_flags)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t bad = sa[0], copy = sa[1], clean = sa[2];
    int32_t one[1] = {bad};
    test_io *d = ios_make(&wd, 1);
    ssm_ref_store(d[0].x, wd.ad, 0, NAN);
    ssm_batch db = {1, 1, one, NULL};
    decode_all(a, &wd, &db, d);
    ck_assert_uint_eq(slot_flags(a, bad), SSM_FLAG_NONFINITE_INPUT);
    ck_assert_uint_eq(slot_flags(a, copy), 0);
    EXPECT(ssm_slot_copy(a, bad, copy, NULL), SSM_OK);
    ck_assert_uint_eq(slot_flags(a, copy), SSM_FLAG_NONFINITE_INPUT);
    ck_assert_uint_eq(slot_flags(a, bad), SSM_FLAG_NONFINITE_INPUT);
    EXPECT(ssm_slot_copy(a, clean, copy, NULL), SSM_OK);
    ck_assert_uint_eq(slot_flags(a, copy), 0);
    ck_assert_uint_eq(slot_flags(a, clean), 0);
    ios_free(&wd, d);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* A slot with state, a flag and (_i & 2) an open forward is released (the
 * open forward refuses the release until it is aborted); when its number
 * comes back it is all zeros, unflagged, and decodes exactly as a fresh
 * context's first slot. */
START_TEST(test_reuse_after_release)
{
    int with_forward = (_i & 2) != 0;
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t k = test_rng_int(&wd.rng, 0, 2), s = sa[k];
    int32_t one[1] = {s};
    /* A non-finite decode flags it. */
    test_io *d = ios_make(&wd, 1);
    ssm_ref_store(d[0].x, wd.ad, 0, NAN);
    ssm_batch db = {1, 1, one, NULL};
    decode_all(a, &wd, &db, d);
    ck_assert_uint_eq(slot_flags(a, s), SSM_FLAG_NONFINITE_INPUT);
    ssm_ticket t = SSM_TICKET_INIT;
    test_io *v = ios_make(&wd, T_MAX);
    if (with_forward) {
        ssm_batch vb = {1, T_MAX, one, NULL};
        verify_all(a, &wd, &vb, v, &t);
        EXPECT(ssm_slot_release(a, s), SSM_ERR_VERIFY_PENDING);
        EXPECT(ssm_forward_abort(a, &t, NULL), SSM_OK);
    }
    EXPECT(ssm_slot_release(a, s), SSM_OK);
    assert_no_flags(a, "after the release");
    /* Release another slot too, then acquire until s comes back. */
    int32_t other = sa[(k + 1) % 3];
    EXPECT(ssm_slot_release(a, other), SSM_OK);
    int32_t got = -1, tries = 0;
    do {
        EXPECT(ssm_slot_acquire(a, &got), SSM_OK);
        tries++;
    } while (got != s && tries < 2);
    ck_assert_int_eq(got, s);
    ck_assert_uint_eq(slot_flags(a, s), 0);
    test_snapshot snap;
    EXPECT(test_snapshot_take(a, s, &snap), SSM_OK);
    ck_assert_msg(snap_is_zero(&snap), "a reused slot inherited state");
    test_snapshot_free(&snap);
    if (with_forward) {
        int32_t acc = 1;
        EXPECT(ssm_commit(a, &t, &acc, NULL), SSM_ERR_TICKET_STALE);
    }

    /* Its decode equals a fresh context's. */
    ssm_ctx *f = NULL;
    int32_t fs = -1;
    EXPECT(ssm_ctx_create(&wd.cfg, &f), SSM_OK);
    EXPECT(ssm_slot_acquire(f, &fs), SSM_OK);
    for (int step = 0; step < 2; step++) {
        test_io *x = ios_make(&wd, 1), *y = ios_clone(&wd, x, 1);
        int32_t fone[1] = {fs};
        ssm_batch xa = {1, 1, one, NULL}, xb = {1, 1, fone, NULL};
        decode_all(a, &wd, &xa, x);
        decode_all(f, &wd, &xb, y);
        ios_assert_out_equal(&wd, x, y, 1, "decode of a reused slot vs a fresh context");
        assert_slot_same(a, s, f, fs, "decode of a reused slot vs a fresh context");
        ios_free(&wd, x);
        ios_free(&wd, y);
    }
    ios_free(&wd, d);
    ios_free(&wd, v);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(f);
    world_free(&wd);
}
END_TEST

/* Reset makes a slot fresh (after a verify round moved its current
 * snapshot), clears its flags and leaves every other slot bit-identical. */
START_TEST(test_reset_fresh)
{
    world wd;
    world_init(&wd, _i, 4, SALT(__LINE__));
    int32_t sa[4];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t T = T_MAX;
    ssm_batch vb = {4, T, sa, NULL};
    test_io *v = ios_make(&wd, 4 * T);
    int32_t k = test_rng_int(&wd.rng, 0, 3);
    /* The reset slot also gets a flag. */
    ssm_ref_store(v[0].beta, wd.ad, (int64_t)k * T * wd.m.value_heads, NAN);
    ssm_ticket t = SSM_TICKET_INIT;
    verify_all(a, &wd, &vb, v, &t);
    int32_t acc[4];
    for (int i = 0; i < 4; i++)
        acc[i] = test_rng_int(&wd.rng, 2, T);
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    ck_assert_uint_eq(slot_flags(a, sa[k]), SSM_FLAG_NONFINITE_INPUT);

    test_snapshot before[4], after[4];
    snaps_take(a, 4, sa, before);
    EXPECT(ssm_slot_reset(a, sa[k], NULL), SSM_OK);
    snaps_take(a, 4, sa, after);
    for (int32_t i = 0; i < 4; i++) {
        if (i == k)
            ck_assert_msg(snap_is_zero(&after[i]), "the reset slot is not all zeros");
        else
            ck_assert_msg(test_snapshot_equal(&before[i], &after[i]),
                          "resetting slot %d changed slot %d", sa[k], sa[i]);
    }
    assert_no_flags(a, "after the reset");
    assert_pool(a, 4, 4, "after the reset");

    ssm_ctx *f = NULL;
    int32_t fs = -1;
    EXPECT(ssm_ctx_create(&wd.cfg, &f), SSM_OK);
    EXPECT(ssm_slot_acquire(f, &fs), SSM_OK);
    int32_t one[1] = {sa[k]}, fone[1] = {fs};
    int32_t T2 = test_rng_int(&wd.rng, 1, T_MAX);
    ssm_batch xa = {1, T2, one, NULL}, xb = {1, T2, fone, NULL};
    test_io *x = ios_make(&wd, T2), *y = ios_clone(&wd, x, T2);
    ssm_ticket ta = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &xa, x, &ta);
    verify_all(f, &wd, &xb, y, &tb);
    int32_t acc2 = test_rng_int(&wd.rng, 1, T2);
    EXPECT(ssm_commit(a, &ta, &acc2, NULL), SSM_OK);
    EXPECT(ssm_commit(f, &tb, &acc2, NULL), SSM_OK);
    ios_assert_out_equal(&wd, x, y, T2, "verify of a reset slot vs a fresh context");
    assert_slot_same(a, sa[k], f, fs, "reset slot vs a fresh context");

    snaps_free(4, before);
    snaps_free(4, after);
    ios_free(&wd, v);
    ios_free(&wd, x);
    ios_free(&wd, y);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(f);
    world_free(&wd);
}
END_TEST

/* ============================================================ batches */

/* Runs one bad batch (rows/slots) through decode, verify (every layer) and
 * prefill and expects `want` from each, with outputs, the ticket, the
 * slots' states and the flags unchanged. */
static void expect_bad_batch(world *wd, ssm_ctx *a, int32_t rows, const int32_t *slots,
                             int32_t nslots, const int32_t *live, ssm_status want)
{
    int32_t T = test_rng_int(&wd->rng, 1, T_MAX);
    int64_t tokens = (int64_t)rows * T_MAX;
    test_snapshot *before = calloc((size_t)nslots, sizeof *before);
    test_snapshot *after = calloc((size_t)nslots, sizeof *after);
    snaps_take(a, nslots, live, before);
    test_io *probe = ios_make(wd, tokens);
    ios_sentinel(wd, probe, tokens);
    int32_t *offsets = calloc((size_t)rows + 1, sizeof *offsets);
    for (int32_t r = 0; r < rows; r++)
        offsets[r + 1] = offsets[r] + test_rng_int(&wd->rng, 1, T_MAX);
    ssm_batch db = {rows, 1, slots, NULL}, vb = {rows, T, slots, NULL};
    ssm_prefill_batch pb = {rows, slots, offsets, T_MAX, NULL, NULL};
    for (int32_t l = 0; l < wd->m.layers; l++) {
        const ssm_layer_weights *w = &wd->w[l].w;
        ssm_ticket t = SSM_TICKET_INIT;
        EXPECT(ssm_decode(a, l, &db, w, &probe[l].io, NULL), want);
        EXPECT(ssm_verify(a, l, &vb, w, &probe[l].io, &t, NULL), want);
        ck_assert_msg(ticket_is_zero(&t), "a rejected verify filled the ticket");
        EXPECT(ssm_prefill(a, l, &pb, w, &probe[l].io, NULL), want);
    }
    ios_assert_sentinel(wd, probe, tokens, "bad batch");
    snaps_take(a, nslots, live, after);
    snaps_assert_equal(nslots, before, after, "bad batch");
    assert_no_flags(a, "bad batch");
    snaps_free(nslots, before);
    snaps_free(nslots, after);
    free(before);
    free(after);
    free(offsets);
    ios_free(wd, probe);
}

/* Slots outside the pool (other than -1) anywhere in a batch. */
/* A batch without a slot array is refused with its own message on every
 * step call, and offsets that would overflow a length are refused as
 * decreasing (the length is formed only after that check). */
START_TEST(test_batch_without_slots)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3];
    ssm_ctx *a = world_ctx(&wd, sa);
    test_io *d = ios_make(&wd, 4);
    ssm_ticket t = SSM_TICKET_INIT;
    ssm_batch no_slots = {1, 1, NULL, NULL};
    EXPECT(ssm_decode(a, 0, &no_slots, &wd.w[0].w, &d[0].io, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "no slot array") != NULL, "%s", ssm_last_error());
    EXPECT(ssm_verify(a, 0, &no_slots, &wd.w[0].w, &d[0].io, &t, NULL),
           SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "no slot array") != NULL, "%s", ssm_last_error());
    int32_t offsets[3] = {0, 1, 1};
    ssm_prefill_batch pb = {1, NULL, offsets, 1, NULL, NULL};
    EXPECT(ssm_prefill(a, 0, &pb, &wd.w[0].w, &d[0].io, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "no slot array") != NULL, "%s", ssm_last_error());
    int32_t two[2] = {sa[0], sa[1]}, wild[3] = {0, 10, INT32_MIN};
    ssm_prefill_batch wb = {2, two, wild, 16, NULL, NULL};
    EXPECT(ssm_prefill(a, 0, &wb, &wd.w[0].w, &d[0].io, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(ssm_last_error(), "token_offsets decrease at row 1") != NULL, "%s", ssm_last_error());
    ios_free(&wd, d);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

START_TEST(test_batch_slot_range)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    const int32_t bad[] = {3, 4, 1 << 20, INT32_MAX, -2, -3, INT32_MIN};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t last[3] = {sa[0], sa[1], bad[i]};
        int32_t mid[4] = {sa[2], -1, bad[i], sa[0]};
        int32_t first[2] = {bad[i], sa[1]};
        int32_t alone[1] = {bad[i]};
        expect_bad_batch(&wd, a, 3, last, 3, sa, SSM_ERR_SLOT_RANGE);
        expect_bad_batch(&wd, a, 4, mid, 3, sa, SSM_ERR_SLOT_RANGE);
        expect_bad_batch(&wd, a, 2, first, 3, sa, SSM_ERR_SLOT_RANGE);
        expect_bad_batch(&wd, a, 1, alone, 3, sa, SSM_ERR_SLOT_RANGE);
    }
    assert_twins_and_working(&wd, a, 3, sa, b, sb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A free slot in a batch: SLOT_NOT_ACQUIRED. */
START_TEST(test_batch_not_acquired)
{
    world wd;
    world_init(&wd, _i, 4, SALT(__LINE__));
    int32_t sa[4], sb[4];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t held_a[3], held_b[3];
    int32_t k = release_one(&wd, a, b, 4, sa, sb, held_a, held_b);
    int32_t last[3] = {held_a[0], held_a[2], sa[k]};
    int32_t mid[4] = {held_a[1], -1, sa[k], held_a[0]};
    int32_t alone[1] = {sa[k]};
    expect_bad_batch(&wd, a, 3, last, 3, held_a, SSM_ERR_SLOT_NOT_ACQUIRED);
    expect_bad_batch(&wd, a, 4, mid, 3, held_a, SSM_ERR_SLOT_NOT_ACQUIRED);
    expect_bad_batch(&wd, a, 1, alone, 3, held_a, SSM_ERR_SLOT_NOT_ACQUIRED);
    assert_pool(a, 4, 3, "after batches with a free slot");
    assert_twins_and_working(&wd, a, 3, held_a, b, held_b);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* The same slot twice in one batch: INVALID_ARGUMENT. */
START_TEST(test_batch_duplicate)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t adjacent[3] = {sa[1], sa[1], sa[0]};
    int32_t apart[4] = {sa[0], sa[2], -1, sa[0]};
    int32_t around_pad[3] = {sa[2], -1, sa[2]};
    expect_bad_batch(&wd, a, 3, adjacent, 3, sa, SSM_ERR_INVALID_ARGUMENT);
    expect_bad_batch(&wd, a, 4, apart, 3, sa, SSM_ERR_INVALID_ARGUMENT);
    expect_bad_batch(&wd, a, 3, around_pad, 3, sa, SSM_ERR_INVALID_ARGUMENT);
    /* Several padding rows are fine (-1 is not a slot). */
    int32_t pads[4] = {-1, sa[0], -1, -1};
    test_io *d = ios_make(&wd, 4), *db = ios_clone(&wd, d, 4);
    int32_t pads_b[4] = {-1, sb[0], -1, -1};
    ssm_batch pa = {4, 1, pads, NULL}, pb = {4, 1, pads_b, NULL};
    decode_all(a, &wd, &pa, d);
    decode_all(b, &wd, &pb, db);
    assert_twins_and_working(&wd, a, 3, sa, b, sb);
    ios_free(&wd, d);
    ios_free(&wd, db);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Padding rows (slot -1) in decode, verify and prefill: their outputs stay
 * as filled (a sentinel), no slot is written or flagged for them even when
 * their inputs are NaN, and every live row equals running that row alone. */
START_TEST(test_padding_rows)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    enum { ROWS = 6 };
    int32_t which[ROWS] = {0, 1, 2, -1, -1, -1};
    for (int32_t i = ROWS - 1; i > 0; i--) {
        int32_t j = test_rng_int(&wd.rng, 0, i), x = which[i];
        which[i] = which[j];
        which[j] = x;
    }
    int32_t rows_a[ROWS];
    for (int32_t r = 0; r < ROWS; r++)
        rows_a[r] = which[r] < 0 ? -1 : sa[which[r]];
    size_t ob = out_bytes(&wd, 1);
    int32_t L = wd.m.layers;

    for (int phase = 0; phase < 3; phase++) {
        /* Token ranges per row: decode 1, verify T, prefill random (0..5). */
        int32_t T = phase == 1 ? test_rng_int(&wd.rng, 1, T_MAX) : 1;
        int32_t offsets[ROWS + 1] = {0}, max_row = 0;
        for (int32_t r = 0; r < ROWS; r++) {
            int32_t n = phase == 2 ? test_rng_int(&wd.rng, 0, 5) : T;
            if (phase == 2 && which[r] < 0 && n == 0)
                n = 2; /* padding rows with tokens */
            offsets[r + 1] = offsets[r] + n;
            if (n > max_row)
                max_row = n;
        }
        int64_t total = offsets[ROWS];
        test_io *io = ios_make(&wd, total);
        ios_sentinel(&wd, io, total);
        for (int32_t r = 0; r < ROWS; r++)
            if (which[r] < 0 && offsets[r + 1] > offsets[r]) {
                int32_t l = test_rng_int(&wd.rng, 0, L - 1);
                ssm_ref_store(io[l].x, wd.ad, offsets[r] * ssm_conv_channels(&wd.m), NAN);
                ssm_ref_store(io[l].beta, wd.ad, offsets[r] * wd.m.value_heads, INFINITY);
            }
        int32_t acc[ROWS];
        for (int32_t r = 0; r < ROWS; r++)
            acc[r] = which[r] < 0 ? test_rng_int(&wd.rng, -3, 9) : test_rng_int(&wd.rng, 1, T);
        if (phase == 0) {
            ssm_batch bt = {ROWS, 1, rows_a, NULL};
            decode_all(a, &wd, &bt, io);
        } else if (phase == 1) {
            ssm_batch bt = {ROWS, T, rows_a, NULL};
            ssm_ticket t = SSM_TICKET_INIT;
            verify_all(a, &wd, &bt, io, &t);
            EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
        } else {
            ssm_prefill_batch bt = {ROWS, rows_a, offsets, max_row, NULL, NULL};
            prefill_all(a, &wd, &bt, io);
        }
        assert_no_flags(a, "NaN in padding rows");
        for (int32_t r = 0; r < ROWS; r++) {
            int32_t n = offsets[r + 1] - offsets[r];
            if (which[r] < 0) {
                for (int32_t l = 0; l < L; l++)
                    for (size_t i = 0; i < n * ob; i++)
                        ck_assert_msg(((unsigned char *)io[l].out)[offsets[r] * ob + i] == 0xA5,
                                      "phase %d: padding row %d's output was written", phase, r);
                continue;
            }
            /* The row alone in twin b. */
            test_io *one = ios_make(&wd, n > 0 ? n : 1);
            for (int32_t t = 0; t < n; t++)
                ios_copy_token(&wd, one, t, io, offsets[r] + t);
            int32_t slot_b[1] = {sb[which[r]]};
            if (phase == 0) {
                ssm_batch bt = {1, 1, slot_b, NULL};
                decode_all(b, &wd, &bt, one);
            } else if (phase == 1) {
                ssm_batch bt = {1, T, slot_b, NULL};
                ssm_ticket t = SSM_TICKET_INIT;
                verify_all(b, &wd, &bt, one, &t);
                EXPECT(ssm_commit(b, &t, &acc[r], NULL), SSM_OK);
            } else {
                int32_t off[2] = {0, n};
                ssm_prefill_batch bt = {1, slot_b, off, n, NULL, NULL};
                prefill_all(b, &wd, &bt, one);
            }
            for (int32_t l = 0; l < L; l++)
                ck_assert_msg(memcmp((char *)io[l].out + offsets[r] * ob, one[l].out, n * ob) == 0,
                              "phase %d, layer %d: row %d differs from running it alone", phase,
                              l, r);
            assert_slot_same(a, rows_a[r], b, slot_b[0], "batch with padding vs row alone");
            ios_free(&wd, one);
        }
        ios_free(&wd, io);
    }
    assert_twins_and_working(&wd, a, 3, sa, b, sb);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Non-finite inputs in one row (_i >> 1: NaN in x, Inf in gate, NaN in
 * beta), in decode, verify and prefill: only that slot is flagged; the
 * other slot equals a run without the bad row; reset and release clear the
 * flag. */
START_TEST(test_nonfinite)
{
    int what = _i >> 1;
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t L = wd.m.layers;
    int32_t br = test_rng_int(&wd.rng, 0, 1); /* the bad row */
    int32_t rows_a[2] = {sa[0], sa[1]}, rows_b[2] = {sb[0], sb[1]};
    int32_t bad = rows_a[br], good = rows_a[1 - br], good_b = rows_b[1 - br];
    rows_b[br] = -1;

    for (int phase = 0; phase < 3; phase++) {
        int32_t T = phase == 1 ? test_rng_int(&wd.rng, 1, T_MAX) : 1;
        int32_t offsets[3] = {0, T, 2 * T};
        if (phase == 2) {
            offsets[1] = test_rng_int(&wd.rng, 1, 5);
            offsets[2] = offsets[1] + test_rng_int(&wd.rng, 1, 5);
        }
        int64_t total = offsets[2];
        test_io *io = ios_make(&wd, total), *iob = NULL;
        /* Poison one token of the bad row in one layer. */
        int32_t l = test_rng_int(&wd.rng, 0, L - 1);
        int64_t tok = offsets[br] + test_rng_int(&wd.rng, 0, offsets[br + 1] - offsets[br] - 1);
        float inf = test_rng_int(&wd.rng, 0, 1) ? INFINITY : -INFINITY;
        if (what == 0)
            ssm_ref_store(io[l].x, wd.ad,
                          tok * ssm_conv_channels(&wd.m) +
                              test_rng_int(&wd.rng, 0, (int32_t)ssm_conv_channels(&wd.m) - 1),
                          NAN);
        else if (what == 1)
            ssm_ref_store(io[l].gate, wd.ad,
                          tok * ssm_gate_width(&wd.m) +
                              test_rng_int(&wd.rng, 0, (int32_t)ssm_gate_width(&wd.m) - 1),
                          inf);
        else
            ssm_ref_store(io[l].beta, wd.ad,
                          tok * wd.m.value_heads + test_rng_int(&wd.rng, 0, wd.m.value_heads - 1),
                          NAN);
        iob = ios_clone(&wd, io, total);
        if (phase == 0) {
            ssm_batch ba = {2, 1, rows_a, NULL}, bb = {2, 1, rows_b, NULL};
            decode_all(a, &wd, &ba, io);
            decode_all(b, &wd, &bb, iob);
        } else if (phase == 1) {
            ssm_batch ba = {2, T, rows_a, NULL}, bb = {2, T, rows_b, NULL};
            ssm_ticket ta = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
            verify_all(a, &wd, &ba, io, &ta);
            verify_all(b, &wd, &bb, iob, &tb);
            int32_t acc[2];
            acc[0] = test_rng_int(&wd.rng, 1, T);
            acc[1] = test_rng_int(&wd.rng, 1, T);
            EXPECT(ssm_commit(a, &ta, acc, NULL), SSM_OK);
            EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
        } else {
            int32_t max_row = offsets[1] > offsets[2] - offsets[1] ? offsets[1]
                                                                   : offsets[2] - offsets[1];
            ssm_prefill_batch ba = {2, rows_a, offsets, max_row, NULL, NULL}, bb = {2, rows_b, offsets, max_row, NULL, NULL};
            prefill_all(a, &wd, &ba, io);
            prefill_all(b, &wd, &bb, iob);
        }
        ck_assert_msg(slot_flags(a, bad) == SSM_FLAG_NONFINITE_INPUT,
                      "phase %d: the bad slot's flags are %#x", phase, slot_flags(a, bad));
        ck_assert_msg(slot_flags(a, good) == 0, "phase %d: the good slot was flagged", phase);
        ck_assert_msg(slot_flags(a, sa[2]) == 0, "phase %d: an idle slot was flagged", phase);
        ssm_ctx_report rep = {0, 0, -5};
        EXPECT(ssm_ctx_status(a, &rep), SSM_OK);
        ck_assert_msg(rep.flags == SSM_FLAG_NONFINITE_INPUT && rep.flagged_slots == 1 &&
                          rep.first_flagged == bad,
                      "phase %d: status flags %#x on %d slots, first %d; want slot %d", phase,
                      rep.flags, rep.flagged_slots, rep.first_flagged, bad);
        /* The good row is as if the bad one was not there. */
        size_t ob = out_bytes(&wd, 1);
        int32_t gr = 1 - br;
        int64_t n = offsets[gr + 1] - offsets[gr];
        for (int32_t k = 0; k < L; k++)
            ck_assert_msg(memcmp((char *)io[k].out + offsets[gr] * ob,
                                 (char *)iob[k].out + offsets[gr] * ob, n * ob) == 0,
                          "phase %d, layer %d: the good row's outputs changed", phase, k);
        assert_slot_same(a, good, b, good_b, "the good slot");
        assert_slot_same(a, sa[2], b, sb[2], "the idle slot");
        assert_no_flags(b, "twin without the bad row");

        /* Reset (phase 0, 2) or release + acquire (phase 1) clears it. */
        if (phase == 1) {
            int32_t again = -1;
            EXPECT(ssm_slot_release(a, bad), SSM_OK);
            assert_no_flags(a, "after the release");
            EXPECT(ssm_slot_acquire(a, &again), SSM_OK);
            ck_assert_int_eq(again, bad);
        } else {
            EXPECT(ssm_slot_reset(a, bad, NULL), SSM_OK);
        }
        ck_assert_uint_eq(slot_flags(a, bad), 0);
        assert_no_flags(a, "after the reset");
        ios_free(&wd, io);
        ios_free(&wd, iob);
    }
    int32_t keep_a[2] = {good, sa[2]}, keep_b[2] = {good_b, sb[2]};
    assert_twins_and_working(&wd, a, 2, keep_a, b, keep_b);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* Two slots flagged by one batch whose rows run from the higher slot to
 * the lower: the status counts both and names the lowest first; clearing
 * them one by one updates it. */
START_TEST(test_nonfinite_two_slots)
{
    world wd;
    world_init(&wd, _i, 4, SALT(__LINE__));
    int32_t sa[4];
    ssm_ctx *a = world_ctx(&wd, sa);
    int32_t lo = sa[1] < sa[3] ? sa[1] : sa[3], hi = sa[1] < sa[3] ? sa[3] : sa[1];
    int32_t rows[3] = {hi, sa[0], lo};
    ssm_batch db = {3, 1, rows, NULL};
    test_io *d = ios_make(&wd, 3);
    int32_t l = test_rng_int(&wd.rng, 0, wd.m.layers - 1);
    ssm_ref_store(d[l].x, wd.ad, 0, NAN);
    ssm_ref_store(d[l].gate, wd.ad, 2 * ssm_gate_width(&wd.m), -INFINITY);
    decode_all(a, &wd, &db, d);
    ssm_ctx_report rep = {0, 0, -5};
    EXPECT(ssm_ctx_status(a, &rep), SSM_OK);
    ck_assert_msg(rep.flags == SSM_FLAG_NONFINITE_INPUT && rep.flagged_slots == 2 &&
                      rep.first_flagged == lo,
                  "status flags %#x on %d slots, first %d; want 2 slots, first %d", rep.flags,
                  rep.flagged_slots, rep.first_flagged, lo);
    ck_assert_uint_eq(slot_flags(a, sa[0]), 0);
    ck_assert_uint_eq(slot_flags(a, sa[2]), 0);
    EXPECT(ssm_slot_reset(a, lo, NULL), SSM_OK);
    EXPECT(ssm_ctx_status(a, &rep), SSM_OK);
    ck_assert_msg(rep.flags == SSM_FLAG_NONFINITE_INPUT && rep.flagged_slots == 1 &&
                      rep.first_flagged == hi,
                  "after one reset: flags %#x on %d slots, first %d; want 1 slot, first %d",
                  rep.flags, rep.flagged_slots, rep.first_flagged, hi);
    EXPECT(ssm_slot_release(a, hi), SSM_OK);
    assert_no_flags(a, "after the reset and the release");
    ios_free(&wd, d);
    ssm_ctx_destroy(a);
    world_free(&wd);
}
END_TEST

/* Prefill token_offsets that do not start at 0, decrease, or give a row
 * more than max_row_tokens: INVALID_ARGUMENT, nothing written. */
START_TEST(test_prefill_offsets)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t rows[3] = {sa[0], -1, sa[2]};
    struct {
        int32_t offsets[4];
        int32_t max_row;
    } bad[] = {
        {{1, 3, 5, 6}, 5},   /* not starting at 0 */
        {{-1, 3, 5, 6}, 5},
        {{0, 4, 2, 6}, 5},   /* decreasing */
        {{0, 2, 5, 3}, 5},   /* decreasing at the end */
        {{0, 5, 6, 7}, 4},   /* first row too long */
        {{0, 2, 4, 9}, 4},   /* last row too long */
        {{0, 1, 7, 8}, 4},   /* the padding row too long */
        {{0, 0, 0, 0}, -1},  /* negative bound */
    };
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    test_io *probe = ios_make(&wd, 16);
    ios_sentinel(&wd, probe, 16);
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        ssm_prefill_batch pb = {3, rows, bad[k].offsets, bad[k].max_row, NULL, NULL};
        for (int32_t l = 0; l < wd.m.layers; l++) {
            ssm_status st = ssm_prefill(a, l, &pb, &wd.w[l].w, &probe[l].io, NULL);
            ck_assert_msg(st == SSM_ERR_INVALID_ARGUMENT, "offsets case %zu, layer %d: got %s",
                          k, l, ssm_status_name(st));
        }
    }
    ios_assert_sentinel(&wd, probe, 16, "bad prefill offsets");
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "bad prefill offsets");
    assert_no_flags(a, "bad prefill offsets");

    /* A good prefill of the same rows works and matches the twin. */
    int32_t good[4] = {0, 3, 3, 8}, rows_b[3] = {sb[0], -1, sb[2]};
    ssm_prefill_batch pa = {3, rows, good, 5, NULL, NULL}, pb = {3, rows_b, good, 5, NULL, NULL};
    test_io *io = ios_make(&wd, 8), *iob = ios_clone(&wd, io, 8);
    prefill_all(a, &wd, &pa, io);
    prefill_all(b, &wd, &pb, iob);
    ios_assert_out_equal(&wd, io, iob, 8, "prefill after bad offsets");
    assert_twins_and_working(&wd, a, 3, sa, b, sb);

    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, probe);
    ios_free(&wd, io);
    ios_free(&wd, iob);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A layer outside [0, layers): INVALID_ARGUMENT from every step call,
 * nothing written, nothing left pending. */
START_TEST(test_layer_range)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    int32_t L = wd.m.layers;
    const int32_t bad[] = {-1, L, L + 5, INT32_MIN, INT32_MAX};
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    test_io *probe = ios_make(&wd, 3 * T_MAX);
    ios_sentinel(&wd, probe, 3 * T_MAX);
    int32_t offsets[4] = {0, 2, 2, 5};
    ssm_batch db = {3, 1, sa, NULL}, vb = {3, T, sa, NULL};
    ssm_prefill_batch pb = {3, sa, offsets, 3, NULL, NULL};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        ssm_ticket t = SSM_TICKET_INIT;
        EXPECT(ssm_decode(a, bad[k], &db, &wd.w[0].w, &probe[0].io, NULL),
               SSM_ERR_INVALID_ARGUMENT);
        EXPECT(ssm_verify(a, bad[k], &vb, &wd.w[0].w, &probe[0].io, &t, NULL),
               SSM_ERR_INVALID_ARGUMENT);
        ck_assert_msg(ticket_is_zero(&t), "a rejected verify filled the ticket");
        EXPECT(ssm_prefill(a, bad[k], &pb, &wd.w[0].w, &probe[0].io, NULL),
               SSM_ERR_INVALID_ARGUMENT);
    }
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "bad layer");
    assert_no_flags(a, "bad layer");
    /* A later layer's verify with a bad layer, in an open forward. */
    test_io *v = ios_make(&wd, 3 * T), *vbio = ios_clone(&wd, v, 3 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_layers(a, &wd, &vb, v, &t, 0, 1);
    ssm_ticket saved = t;
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        EXPECT(ssm_verify(a, bad[k], &vb, &wd.w[0].w, &probe[0].io, &t, NULL),
               SSM_ERR_INVALID_ARGUMENT);
    ck_assert_msg(memcmp(&saved, &t, sizeof t) == 0, "a rejected verify changed the ticket");
    ios_assert_sentinel(&wd, probe, 3 * T_MAX, "bad layer");
    verify_layers(a, &wd, &vb, v, &t, 1, L);
    int32_t acc[3] = {test_rng_int(&wd.rng, 1, T), test_rng_int(&wd.rng, 1, T), 1};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    ssm_batch vbb = {3, T, sb, NULL};
    verify_all(b, &wd, &vbb, vbio, &tb);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vbio, 3 * T, "verify after bad layers");
    assert_twins_and_working(&wd, a, 3, sa, b, sb);

    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, probe);
    ios_free(&wd, v);
    ios_free(&wd, vbio);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A negative row count: INVALID_ARGUMENT from every step call (-1 too,
 * which is the padding slot, not a row count), nothing written, no ticket
 * filled, no forward left open. */
START_TEST(test_batch_negative_rows)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    test_io *probe = ios_make(&wd, 3 * T_MAX);
    ios_sentinel(&wd, probe, 3 * T_MAX);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    int32_t offsets[4] = {0, 1, 2, 3};
    const int32_t bad[] = {-1, -2, -3, INT32_MIN};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        for (int32_t l = 0; l < wd.m.layers; l++) {
            const ssm_layer_weights *w = &wd.w[l].w;
            ssm_batch db = {bad[k], 1, sa, NULL}, vb = {bad[k], T, sa, NULL};
            ssm_prefill_batch pb = {bad[k], sa, offsets, T_MAX, NULL, NULL};
            ssm_ticket t = SSM_TICKET_INIT;
            EXPECT(ssm_decode(a, l, &db, w, &probe[l].io, NULL), SSM_ERR_INVALID_ARGUMENT);
            EXPECT(ssm_verify(a, l, &vb, w, &probe[l].io, &t, NULL), SSM_ERR_INVALID_ARGUMENT);
            ck_assert_msg(ticket_is_zero(&t), "rows %d: a rejected verify filled the ticket",
                          bad[k]);
            EXPECT(ssm_prefill(a, l, &pb, w, &probe[l].io, NULL), SSM_ERR_INVALID_ARGUMENT);
        }
    ios_assert_sentinel(&wd, probe, 3 * T_MAX, "negative rows");
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "negative rows");
    assert_no_flags(a, "negative rows");
    /* Nothing was left open: a verify and commit over the slots works. */
    ssm_batch vb = {3, T, sa, NULL}, vbb = {3, T, sb, NULL};
    test_io *v = ios_make(&wd, 3 * T), *vbio = ios_clone(&wd, v, 3 * T);
    ssm_ticket t = SSM_TICKET_INIT, tb = SSM_TICKET_INIT;
    verify_all(a, &wd, &vb, v, &t);
    verify_all(b, &wd, &vbb, vbio, &tb);
    int32_t acc[3] = {T, 1, test_rng_int(&wd.rng, 1, T)};
    EXPECT(ssm_commit(a, &t, acc, NULL), SSM_OK);
    EXPECT(ssm_commit(b, &tb, acc, NULL), SSM_OK);
    ios_assert_out_equal(&wd, v, vbio, 3 * T, "verify after negative rows");
    assert_twins_and_working(&wd, a, 3, sa, b, sb);
    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, probe);
    ios_free(&wd, v);
    ios_free(&wd, vbio);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

/* A required weight or step tensor missing (NULL), one at a time:
 * INVALID_ARGUMENT from every step call, before the plugin reads anything:
 * no output written, no slot changed or flagged, no ticket filled. */
START_TEST(test_step_tensors_missing)
{
    world wd;
    world_init(&wd, _i, 3, SALT(__LINE__));
    int32_t sa[3], sb[3];
    ssm_ctx *a = world_ctx(&wd, sa), *b = world_ctx(&wd, sb);
    test_snapshot before[3], after[3];
    snaps_take(a, 3, sa, before);
    int32_t T = test_rng_int(&wd.rng, 1, T_MAX);
    test_io *probe = ios_make(&wd, 3 * T_MAX);
    ios_sentinel(&wd, probe, 3 * T_MAX);
    int32_t offsets[4] = {0, 2, 3, 5};
    ssm_batch db = {3, 1, sa, NULL}, vb = {3, T, sa, NULL};
    ssm_prefill_batch pb = {3, sa, offsets, 2, NULL, NULL};
    enum { CASES = 9 };
    for (int c = 0; c < CASES; c++)
        for (int32_t l = 0; l < wd.m.layers; l++) {
            ssm_layer_weights w = wd.w[l].w;
            ssm_step_io io = probe[l].io;
            const ssm_layer_weights *wp = &w;
            const ssm_step_io *iop = &io;
            switch (c) {
            case 0: wp = NULL; break;
            case 1: w.conv_weight = NULL; break;
            case 2: w.a_log = NULL; break;
            case 3: w.dt_bias = NULL; break;
            case 4: iop = NULL; break;
            case 5: io.x = NULL; break;
            case 6: io.gate = NULL; break;
            case 7: io.beta = NULL; break;
            default: io.out = NULL; break;
            }
            ssm_ticket t = SSM_TICKET_INIT;
            EXPECT(ssm_decode(a, l, &db, wp, iop, NULL), SSM_ERR_INVALID_ARGUMENT);
            ck_assert_msg(strstr(ssm_last_error(), "missing") != NULL, "case %d: %s", c,
                          ssm_last_error());
            EXPECT(ssm_verify(a, l, &vb, wp, iop, &t, NULL), SSM_ERR_INVALID_ARGUMENT);
            ck_assert_msg(ticket_is_zero(&t), "case %d: a rejected verify filled the ticket", c);
            EXPECT(ssm_prefill(a, l, &pb, wp, iop, NULL), SSM_ERR_INVALID_ARGUMENT);
        }
    ios_assert_sentinel(&wd, probe, 3 * T_MAX, "missing tensors");
    snaps_take(a, 3, sa, after);
    snaps_assert_equal(3, before, after, "missing tensors");
    assert_no_flags(a, "missing tensors");
    assert_twins_and_working(&wd, a, 3, sa, b, sb);
    snaps_free(3, before);
    snaps_free(3, after);
    ios_free(&wd, probe);
    ssm_ctx_destroy(a);
    ssm_ctx_destroy(b);
    world_free(&wd);
}
END_TEST

Suite *make_suite(void)
{
    (void)test_seed(); /* one seed for every forked test, printed once */
    Suite *s = suite_create("slots");

    TCase *pool = tcase_create("pool");
    tcase_add_loop_test(pool, test_pool_accounting, 0, 4);
    tcase_add_loop_test(pool, test_pool_exhausted, 0, 2);
    tcase_add_loop_test(pool, test_release_twice, 0, 2);
    tcase_add_loop_test(pool, test_slot_calls_out_of_range, 0, 2);
    tcase_add_loop_test(pool, test_pool_null_arguments, 0, 2);
    suite_add_tcase(s, pool);

    TCase *fresh = tcase_create("fresh");
    tcase_add_loop_test(fresh, test_reuse_after_release, 0, 4);
    tcase_add_loop_test(fresh, test_copy_carries_flags, 0, 4);
    tcase_add_loop_test(fresh, test_reset_fresh, 0, 4);
    suite_add_tcase(s, fresh);

    TCase *batches = tcase_create("batches");
    tcase_set_timeout(batches, 60);
    tcase_add_loop_test(batches, test_batch_slot_range, 0, 4);
    tcase_add_loop_test(batches, test_batch_without_slots, 0, 4);
    tcase_add_loop_test(batches, test_batch_not_acquired, 0, 4);
    tcase_add_loop_test(batches, test_batch_duplicate, 0, 4);
    tcase_add_loop_test(batches, test_padding_rows, 0, 8);
    tcase_add_loop_test(batches, test_layer_range, 0, 4);
    tcase_add_loop_test(batches, test_batch_negative_rows, 0, 2);
    tcase_add_loop_test(batches, test_step_tensors_missing, 0, 2);
    suite_add_tcase(s, batches);

    TCase *nonfinite = tcase_create("nonfinite");
    tcase_add_loop_test(nonfinite, test_nonfinite, 0, 6);
    tcase_add_loop_test(nonfinite, test_nonfinite_two_slots, 0, 2);
    suite_add_tcase(s, nonfinite);

    TCase *offsets = tcase_create("prefill_offsets");
    tcase_add_loop_test(offsets, test_prefill_offsets, 0, 4);
    suite_add_tcase(s, offsets);
    return s;
}
