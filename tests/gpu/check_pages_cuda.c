/* Host pages of CUDA contexts (docs/pages.md): export and
 * import of one slot and of batches, every mode, against CPU contexts. On
 * fresh random inputs, GDN (GVA, 3 layers) and KDA (with the gate's lower
 * bound), fp32 and bf16 state; for each, the mode A of the CUDA context
 * under test is native, compact and replay (history pending: decodes keep
 * the ring). The CUDA context runs in a tests/gpu/gpu_world.h world beside a
 * CPU native context fed the same steps (prefill, decode, verify rounds).
 *
 * 1. round trip: a CUDA page's payload is the slot's canonical export, and
 *    in compact and replay it equals CUDA native's page byte for byte. Page
 *    P of the CUDA context imported into a CPU context of every mode B and
 *    exported again gives P; that page imported into a CUDA context of every
 *    mode C and exported again gives P. The CPU context's page goes the
 *    other way (CUDA of every C, then CPU of every B) unchanged too.
 * 2. export keeps the slot: of two CUDA contexts of A fed the same steps,
 *    one exports every slot's page (single and batched) between steps; its
 *    pages equal the twin's, and the next decode and verify give bit for bit
 *    the twin's outputs and exports.
 * 3. rejections on a CUDA context: bad magic, a flipped payload byte, a
 *    truncated page, pages of other dims and of another state dtype, and a
 *    batch with one corrupt page: SSM_ERR_PAGE_INVALID with its message, and
 *    every slot exports the same page as before. A good page then loads.
 * 4. batches: ssm_slots_export_pages of 3 slots (stride past the page)
 *    equals 3 single exports byte for byte; ssm_slots_import_pages of them
 *    into a CUDA context of every mode C, slots in another order, leaves
 *    each slot with the page 3 single imports give another context.
 * 5. ranks: two CUDA contexts holding half the value heads each (other
 *    modes) import the CUDA page and export exactly its slices; merged,
 *    their pages give the page back byte for byte. Whole pages imported
 *    into a rank as one batch leave each slot with the page's slice.
 *
 * Controls, so that no comparison passes vacuously: the pages of two lanes
 * differ, a payload is not all zero, a decode changes the page, a good
 * import changes the slot's page.
 *
 * A Check suite run without fork (a CUDA context does not survive one)
 * through tests/gpu/pages_cuda.gpu; exit 77 when no CUDA device is visible,
 * checked before anything else. SSM_TEST_SEED replays a run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/expect.h"
#include "tests/gpu/gpu_suite.h"
#include "tests/gpu/gpu_world.h"

#define HEADER 96 /* docs/pages.md: the payload starts here */
#define BATCH 3

/* ------------------------------------------------------------ helpers */

/* The page of one slot, in a new buffer. */
static unsigned char *page_of(ssm_ctx *ctx, int32_t slot)
{
    size_t bytes = ssm_page_bytes(ctx);
    unsigned char *page = malloc(bytes);
    ck_assert_ptr_nonnull(page);
    memset(page, 0x5A, bytes);
    EXPECT(ssm_slot_export_page(ctx, slot, page, bytes), SSM_OK);
    return page;
}

/* The controls: pages of different slots differ in their payloads, and a
 * payload is not all zero. */
static void assert_differ(const unsigned char *a, const unsigned char *b, size_t n,
                          const char *what)
{
    gpu_assert_payloads_differ(a, b, n, what);
    size_t k = HEADER;
    while (k < n && a[k] == 0)
        k++;
    ck_assert_msg(k < n, "control: %s: an all-zero payload", what);
}

/* The page's payload is the slot's canonical export, layer by layer: the
 * conv window, then the state. */
static void assert_canonical(world *w, int s, int32_t lane, const unsigned char *page)
{
    test_snapshot snap;
    memset(&snap, 0, sizeof snap);
    WORLD_OK(w, world_snapshot(w, s, w->side[s].slot[lane], &snap));
    const unsigned char *p = page + HEADER;
    for (int32_t l = 0; l < snap.layers; l++) {
        gpu_assert_same(p, snap.conv[l], snap.conv_bytes, "page vs canonical conv window", lane);
        p += snap.conv_bytes;
        gpu_assert_same(p, snap.state[l], snap.state_bytes, "page vs canonical state", lane);
        p += snap.state_bytes;
    }
    test_snapshot_free(&snap);
}

/* Imports `page` into ctx's slot and returns the page ctx then exports. */
static unsigned char *through(ssm_ctx *ctx, int32_t slot, const unsigned char *page, size_t n)
{
    EXPECT(ssm_slot_import_page(ctx, slot, page, n), SSM_OK);
    return page_of(ctx, slot);
}

/* ------------------------------------------------------------ 1. round trip */

START_TEST(round_trip)
{
    world w;
    int g;
    gpu_page_world(&w, _i, 100 + (uint64_t)_i, "round trip", "pages", &g);
    ssm_ctx *cpu[MODES], *gpu[MODES];
    int32_t cpu_slots[MODES][MAX_LANES], gpu_slots[MODES][MAX_LANES];
    for (int k = 0; k < MODES; k++) {
        cpu[k] = gpu_open_ctx(&w, gpu_modes[k], 0, CAPACITY, w.lanes, cpu_slots[k]);
        gpu[k] = gpu_open_ctx(&w, gpu_modes[k], 1, CAPACITY, w.lanes, gpu_slots[k]);
    }
    size_t n = ssm_page_bytes(w.side[g].ctx);
    ck_assert_uint_eq(n, ssm_page_bytes(w.side[0].ctx));
    unsigned char *previous = NULL;
    for (int32_t lane = 0; lane < w.lanes; lane++) {
        unsigned char *p = page_of(w.side[g].ctx, w.side[g].slot[lane]);
        assert_canonical(&w, g, lane, p);
        if (g != 1) { /* compact and replay: the same bytes as native's on the GPU */
            unsigned char *native = page_of(w.side[1].ctx, w.side[1].slot[lane]);
            gpu_assert_same(p, native, n, "CUDA page vs CUDA native's", lane);
            free(native);
        }
        if (previous)
            assert_differ(p, previous, n, "pages of two lanes");
        /* CUDA -> CPU of every B -> CUDA of every C */
        for (int b = 0; b < MODES; b++) {
            unsigned char *q = through(cpu[b], cpu_slots[b][lane], p, n);
            gpu_assert_same(q, p, n, "CUDA page through a CPU context", lane);
            for (int c = 0; c < MODES; c++) {
                unsigned char *r = through(gpu[c], gpu_slots[c][lane], q, n);
                gpu_assert_same(r, p, n, "CUDA page through CPU and CUDA contexts", lane);
                free(r);
            }
            free(q);
        }
        /* the CPU's page: CUDA of every C -> CPU of every B */
        unsigned char *pc = page_of(w.side[0].ctx, w.side[0].slot[lane]);
        assert_canonical(&w, 0, lane, pc);
        for (int c = 0; c < MODES; c++) {
            unsigned char *q = through(gpu[c], gpu_slots[c][lane], pc, n);
            gpu_assert_same(q, pc, n, "CPU page through a CUDA context", lane);
            assert_canonical(&w, 0, lane, q);
            for (int b = 0; b < MODES; b++) {
                unsigned char *r = through(cpu[b], cpu_slots[b][lane], q, n);
                gpu_assert_same(r, pc, n, "CPU page through CUDA and CPU contexts", lane);
                free(r);
            }
            free(q);
        }
        free(pc);
        free(previous);
        previous = p;
    }
    free(previous);
    for (int k = 0; k < MODES; k++) {
        ssm_ctx_destroy(cpu[k]);
        ssm_ctx_destroy(gpu[k]);
    }
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 2. export keeps the slot */

/* Side 0 exports every lane's page, one by one and then in one batch: the
 * pages equal side 1's (the twin, which exports nothing) byte for byte. */
static void export_side_0(world *w)
{
    size_t n = ssm_page_bytes(w->side[0].ctx);
    unsigned char *batch = calloc((size_t)w->lanes, n);
    ck_assert_ptr_nonnull(batch);
    EXPECT(ssm_slots_export_pages(w->side[0].ctx, w->lanes, w->side[0].slot, batch, n), SSM_OK);
    for (int32_t lane = 0; lane < w->lanes; lane++) {
        unsigned char *mine = page_of(w->side[0].ctx, w->side[0].slot[lane]);
        assert_canonical(w, 1, lane, mine); /* the twin's canonical export */
        gpu_assert_same(batch + (size_t)lane * n, mine, n, "batched vs single export", lane);
        free(mine);
    }
    free(batch);
}

START_TEST(export_keeps_slot)
{
    world w;
    variant v = {.mode = gpu_modes[_i % MODES]};
    int ok = world_open_graph(&w, &gpu_setups[_i / MODES], v, 200 + (uint64_t)_i,
                              "export keeps") &&
             gpu_prefill_lanes(&w, 1);
    /* A verify round and a decode, exporting between steps: replay's ring
     * holds the round as history when it is exported. */
    step_kind kinds[4] = {STEP_VERIFY, STEP_DECODE, STEP_VERIFY, STEP_DECODE};
    unsigned char *before = NULL;
    for (int k = 0; k < 4 && ok; k++) {
        w.op = "exports";
        export_side_0(&w);
        unsigned char *now = page_of(w.side[0].ctx, w.side[0].slot[0]);
        if (before)
            assert_differ(now, before, ssm_page_bytes(w.side[0].ctx),
                          "a page before and after a step");
        free(before);
        before = now;
        ok = gpu_step_lanes(&w, kinds[k], 1) && world_compare_exports(&w);
        w.step++;
    }
    free(before);
    WORLD_OK(&w, ok);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 3. rejections */

/* Imports a bad page into the slot of lane 0: refused with `message`, and
 * the slot exports `before` still. */
static void refuse(world *w, int g, const unsigned char *page, size_t n, const char *message,
                   const unsigned char *before)
{
    ssm_ctx *ctx = w->side[g].ctx;
    int32_t slot = w->side[g].slot[0];
    EXPECT(ssm_slot_import_page(ctx, slot, page, n), SSM_ERR_PAGE_INVALID);
    ck_assert_msg(strstr(ssm_last_error(), message), "message \"%s\" lacks \"%s\"",
                  ssm_last_error(), message);
    unsigned char *after = page_of(ctx, slot);
    gpu_assert_same(after, before, ssm_page_bytes(ctx), message, 0);
    free(after);
}

START_TEST(rejections)
{
    world w;
    int g;
    gpu_page_world(&w, _i, 300 + (uint64_t)_i, "rejections", "pages", &g);
    ssm_ctx *ctx = w.side[g].ctx;
    size_t n = ssm_page_bytes(ctx);
    unsigned char *before = page_of(ctx, w.side[g].slot[0]);
    unsigned char *good = page_of(ctx, w.side[g].slot[1]); /* another lane's */
    assert_differ(good, before, n, "pages of two lanes");
    unsigned char *bad = malloc(n);
    ck_assert_ptr_nonnull(bad);

    memcpy(bad, good, n);
    bad[0] ^= 1;
    refuse(&w, g, bad, n, "bad magic", before);
    memcpy(bad, good, n);
    bad[HEADER + (n - HEADER) / 2] ^= 0x10;
    refuse(&w, g, bad, n, "payload checksum mismatch", before);
    refuse(&w, g, good, n - 1, "truncated page", before);

    ssm_model_dims other = w.m;
    other.value_dim += 16;
    size_t other_n;
    unsigned char *foreign = gpu_foreign_page(&other, w.sd, w.ad, &other_n);
    refuse(&w, g, foreign, other_n, "value_dim", before);
    free(foreign);
    ssm_dtype sd = w.sd == SSM_DTYPE_F32 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    foreign = gpu_foreign_page(&w.m, sd, w.ad, &other_n);
    refuse(&w, g, foreign, other_n, "state dtype", before);
    free(foreign);

    /* a batch of three, the slots' pages rotated (each would change its
     * slot), page 1 corrupt: no slot changes */
    unsigned char *olds[BATCH], *batch = malloc(BATCH * n);
    ck_assert_ptr_nonnull(batch);
    for (int k = 0; k < BATCH; k++)
        olds[k] = page_of(ctx, w.side[g].slot[k]);
    for (int k = 0; k < BATCH; k++)
        memcpy(batch + (size_t)k * n, olds[(k + 1) % BATCH], n);
    batch[n + HEADER + 7] ^= 0x01;
    EXPECT(ssm_slots_import_pages(ctx, BATCH, w.side[g].slot, batch, n), SSM_ERR_PAGE_INVALID);
    ck_assert_msg(strstr(ssm_last_error(), "page 1"), "%s", ssm_last_error());
    for (int k = 0; k < BATCH; k++) {
        unsigned char *after = page_of(ctx, w.side[g].slot[k]);
        gpu_assert_same(after, olds[k], n, "a slot after a refused batch", k);
        free(after);
        free(olds[k]);
    }
    free(batch);

    /* the control: the good page loads and the slot's page becomes it */
    EXPECT(ssm_slot_import_page(ctx, w.side[g].slot[0], good, n), SSM_OK);
    unsigned char *after = page_of(ctx, w.side[g].slot[0]);
    gpu_assert_same(after, good, n, "the slot after a good import", 0);
    assert_differ(after, before, n, "the slot before and after a good import");
    free(after);
    free(bad);
    free(good);
    free(before);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 4. batches */

START_TEST(batches)
{
    world w;
    int g;
    gpu_page_world(&w, _i, 400 + (uint64_t)_i, "batches", "pages", &g);
    ssm_ctx *ctx = w.side[g].ctx;
    size_t n = ssm_page_bytes(ctx), stride = n + 40; /* pages need not be packed */
    int32_t from[BATCH] = {w.side[g].slot[3], w.side[g].slot[0], w.side[g].slot[2]};
    unsigned char *batch = malloc(BATCH * stride), *single[BATCH];
    ck_assert_ptr_nonnull(batch);
    memset(batch, 0x5A, BATCH * stride);
    EXPECT(ssm_slots_export_pages(ctx, BATCH, from, batch, stride), SSM_OK);
    for (int k = 0; k < BATCH; k++) {
        single[k] = page_of(ctx, from[k]);
        gpu_assert_same(batch + (size_t)k * stride, single[k], n, "batched vs single export", k);
        ck_assert_msg(batch[(size_t)k * stride + n] == 0x5A, "the batch wrote past page %d", k);
    }
    assert_differ(single[0], single[1], n, "pages of two lanes");

    for (int c = 0; c < MODES; c++) {
        int32_t bs[MAX_LANES], ss[MAX_LANES];
        ssm_ctx *by_batch = gpu_open_ctx(&w, gpu_modes[c], 1, CAPACITY, w.lanes, bs);
        ssm_ctx *by_single = gpu_open_ctx(&w, gpu_modes[c], 1, CAPACITY, w.lanes, ss);
        int32_t into[BATCH] = {bs[1], bs[4], bs[0]};
        EXPECT(ssm_slots_import_pages(by_batch, BATCH, into, batch, stride), SSM_OK);
        for (int k = 0; k < BATCH; k++)
            EXPECT(ssm_slot_import_page(by_single, ss[k], single[k], n), SSM_OK);
        for (int k = 0; k < BATCH; k++) {
            unsigned char *a = page_of(by_batch, into[k]), *b = page_of(by_single, ss[k]);
            gpu_assert_same(a, b, n, "batched vs single import", k);
            gpu_assert_same(a, single[k], n, "batched import vs the source page", k);
            free(a);
            free(b);
        }
        ssm_ctx_destroy(by_batch);
        ssm_ctx_destroy(by_single);
    }
    for (int k = 0; k < BATCH; k++)
        free(single[k]);
    free(batch);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 5. ranks */

START_TEST(rank_pages)
{
    world w;
    int g;
    gpu_page_world(&w, _i, 500 + (uint64_t)_i, "ranks", "pages", &g);
    int32_t per = w.m.value_heads / 2, slot[2], spare[2][2];
    ssm_ctx *rank[2];
    for (int k = 0; k < 2; k++) {
        rank[k] = gpu_open_rank(&w, gpu_modes[(_i + 1 + k) % MODES], k * per, per, 3, spare[k],
                                2);
        slot[k] = spare[k][0];
    }
    size_t n = ssm_page_bytes(w.side[g].ctx);
    unsigned char *merged = malloc(n);
    ck_assert_ptr_nonnull(merged);
    for (int32_t lane = 0; lane < 2; lane++) {
        unsigned char *p = page_of(w.side[g].ctx, w.side[g].slot[lane]), *part[2];
        size_t bytes[2];
        for (int k = 0; k < 2; k++) {
            bytes[k] = ssm_page_bytes(rank[k]);
            unsigned char *want = malloc(bytes[k]);
            size_t written = 0;
            ck_assert_ptr_nonnull(want);
            EXPECT(ssm_page_slice(p, n, k * per, (k + 1) * per, want, bytes[k], &written),
                   SSM_OK);
            ck_assert_uint_eq(written, bytes[k]);
            part[k] = through(rank[k], slot[k], p, n); /* the rank takes its heads */
            gpu_assert_same(part[k], want, bytes[k], "a rank's page vs the slice of the whole", k);
            free(want);
        }
        size_t written = 0;
        const void *parts[2] = {part[1], part[0]};
        size_t part_bytes[2] = {bytes[1], bytes[0]};
        EXPECT(ssm_page_merge(parts, part_bytes, 2, merged, n, &written), SSM_OK);
        ck_assert_uint_eq(written, n);
        gpu_assert_same(merged, p, n, "the ranks' pages merged vs the whole page", lane);
        for (int k = 0; k < 2; k++)
            free(part[k]);
        free(p);
    }
    free(merged);

    /* Whole pages into ranks as one batch (stride past the page, slots in
     * the other order): each slot holds the rank's slice of its page. */
    size_t stride = n + 24;
    unsigned char *batch = malloc(2 * stride);
    ck_assert_ptr_nonnull(batch);
    int32_t from[2] = {w.side[g].slot[1], w.side[g].slot[0]};
    EXPECT(ssm_slots_export_pages(w.side[g].ctx, 2, from, batch, stride), SSM_OK);
    for (int k = 0; k < 2; k++) {
        int32_t into[2] = {spare[k][1], spare[k][0]};
        EXPECT(ssm_slots_import_pages(rank[k], 2, into, batch, stride), SSM_OK);
        size_t bytes = ssm_page_bytes(rank[k]), written = 0;
        unsigned char *want = malloc(bytes);
        ck_assert_ptr_nonnull(want);
        for (int b = 0; b < 2; b++) {
            EXPECT(ssm_page_slice(batch + (size_t)b * stride, n, k * per, (k + 1) * per, want,
                                  bytes, &written),
                   SSM_OK);
            unsigned char *got = page_of(rank[k], into[b]);
            gpu_assert_same(got, want, bytes, "a rank's batch import vs the slice", b);
            free(got);
        }
        free(want);
    }
    free(batch);
    for (int k = 0; k < 2; k++)
        ssm_ctx_destroy(rank[k]);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ the suite */

static Suite *make_suite(void)
{
    Suite *s = suite_create("pages of CUDA contexts");
    TCase *tc = tcase_create("pages");
    int n = SETUPS * MODES;
    tcase_add_loop_test(tc, round_trip, 0, n);
    tcase_add_loop_test(tc, export_keeps_slot, 0, n);
    tcase_add_loop_test(tc, rejections, 0, n);
    tcase_add_loop_test(tc, batches, 0, n);
    tcase_add_loop_test(tc, rank_pages, 0, n);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return gpu_suite_main(make_suite); }
