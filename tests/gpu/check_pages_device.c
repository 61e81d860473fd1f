/* Pages in device memory (issue 6 item 2; docs/pages.md, "Device pages"):
 * ssm_slots_export_pages_device and ssm_slots_import_pages_device on CUDA
 * contexts of every mode, GDN (GVA, 3 layers) and KDA (lower bound), fp32
 * and bf16 state, on fresh random inputs. Each case opens a
 * tests/gpu/gpu_world.h world (CPU native, CUDA native, CUDA mode A; replay
 * with history pending: decodes keep the ring) and runs a prefill, a decode
 * and two verify rounds first.
 *
 * 1. device = host: the device pages of every lane, one batch in a shuffled
 *    order with a stride past the page, are byte for byte the host pages of
 *    the same slots (and the CUDA native side's), and nothing between the
 *    pages is written.
 * 2. export keeps the slot: a CUDA context exports device pages between
 *    steps, a twin does not; the pages equal the twin's host pages and every
 *    later output and export is bit for bit the twin's (replay with fp32
 *    state runs outputs = identity, whose bits show whether the ring was
 *    folded).
 * 3. round trips: the device pages imported (device) into CUDA contexts of
 *    every mode C, slots in another order: every status 0, no flag, and the
 *    host pages and device pages of C's slots are the source pages again, as
 *    a host round trip gives.
 * 4. rejections: a batch of three pages, each of which would change its
 *    slot, one spoiled: bad magic, another version, a flipped header byte, a
 *    cut payload length (resealed), a flipped payload byte, a page of other
 *    dims, of another state dtype, of other value heads. The spoiled page
 *    gets its status, the others SSM_PAGE_NOT_LOADED, the three slots
 *    SSM_FLAG_PAGE_REFUSED (ssm_slot_flags, ssm_ctx_status) and their host
 *    pages are as before. The good batch then loads and clears the flags.
 * 5. ranks: two CUDA contexts holding half the value heads each (other
 *    modes) import the whole device pages: their host pages are
 *    ssm_page_slice of the whole ones; their device pages equal their host
 *    pages; each imports its own device pages back and refuses the other's.
 * 6. a batch past one launch: 70 slots of a CUDA context of mode A import
 *    70 device pages (the lanes' pages over and over) and export them back
 *    byte for byte.
 *
 * A Check suite run without fork through tests/gpu/pages_device.gpu; exit
 * 77 when no CUDA device is visible, checked before anything else.
 * SSM_TEST_SEED replays a run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/page_format.h" /* header fields, to spoil pages (inline only) */
#include "tests/expect.h"
#include "tests/gpu/gpu_suite.h"
#include "tests/gpu/gpu_world.h"

#define HEADER SSM_PAGE_HEADER_BYTES
#define BATCH 3
#define FILL 0x5A
#define LARGE 70 /* past one launch of SSM_PAGE_LAUNCH_SLOTS (64) pages */

static const char *const modes[] = {"native", "compact", "replay"};
#define MODES 3

#define DIMS(kind_, layers_, h_, hv_, k_, v_, lb_)                                                 \
    {                                                                                              \
        .kind = (kind_), .layers = (layers_), .heads = (h_), .value_heads = (hv_),                 \
        .key_dim = (k_), .value_dim = (v_), .conv_width = 4, .has_lower_bound = (lb_),             \
        .lower_bound = (lb_) ? -5.0f : 0.0f                                                        \
    }

static const setup setups[] = {
    {DIMS(SSM_MODEL_GDN, 3, 2, 4, 32, 48, 0), SSM_DTYPE_F32, SSM_DTYPE_F32},
    {DIMS(SSM_MODEL_GDN, 3, 2, 4, 32, 48, 0), SSM_DTYPE_BF16, SSM_DTYPE_BF16},
    {DIMS(SSM_MODEL_KDA, 2, 2, 2, 64, 32, 1), SSM_DTYPE_F32, SSM_DTYPE_F32},
    {DIMS(SSM_MODEL_KDA, 2, 2, 2, 64, 32, 1), SSM_DTYPE_BF16, SSM_DTYPE_BF16},
};
#define SETUPS 4

#define WORLD_OK(w, ok) ck_assert_msg((ok) && !(w)->failed, "%s: see the # lines above", (w)->desc)
#define CUDA_OK(call) ck_assert_msg(gpu_ok((call), #call), "%s failed", #call)

/* ------------------------------------------------------------ helpers */

/* Test _i's world (setup _i / MODES, mode A = modes[_i % MODES]), its
 * lanes after a prefill, a decode and two verify rounds; *g is A's side. */
static void open_world(world *w, int i, uint64_t salt, const char *what, int *g)
{
    variant v = {modes[i % MODES], 0, 0};
    int ok = world_open_modes(w, &setups[i / MODES], v, salt, what);
    *g = w->sides - 1;
    int32_t lanes[MAX_ROWS], lengths[MAX_ROWS];
    w->op = "prefill";
    int32_t rows = ok ? world_pick_rows(w, w->lanes, 0, lanes) : 0;
    for (int32_t r = 0; r < rows; r++)
        lengths[r] = test_rng_int(&w->rng, 5, 40);
    ok = ok && step_finish(w, step_make(w, STEP_PREFILL, 0, rows, lanes, lengths));
    step_kind kinds[3] = {STEP_DECODE, STEP_VERIFY, STEP_VERIFY};
    for (int k = 0; k < 3 && ok; k++) {
        w->op = step_kind_name(kinds[k]);
        rows = world_pick_rows(w, w->lanes, 0, lanes);
        ok = step_finish(w, step_make(w, kinds[k], kinds[k] == STEP_DECODE ? 1 : T_MAX, rows,
                                      lanes, NULL));
    }
    WORLD_OK(w, ok && world_compare_exports(w));
    w->op = "device pages";
}

/* A CUDA context of `mode` beside the world's, `capacity` slots, `count`
 * of them acquired into slots. */
static ssm_ctx *open_ctx(const world *w, const char *mode, int32_t capacity, int32_t count,
                         int32_t *slots)
{
    ssm_config c;
    ssm_ctx *ctx = NULL;
    test_config(&c, &w->m, mode, w->sd, w->ad, capacity, T_MAX - 1);
    c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    for (int32_t k = 0; k < count; k++)
        EXPECT(ssm_slot_acquire(ctx, &slots[k]), SSM_OK);
    return ctx;
}

/* A stride for pages of n bytes: a multiple of 8, `extra` bytes past. */
static size_t stride_for(size_t n, size_t extra)
{
    return (n + extra + 7) / 8 * 8;
}

/* The host pages of slots[k] at k * stride (FILL between them). */
static unsigned char *host_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                 size_t stride)
{
    unsigned char *pages = malloc((size_t)count * stride);
    ck_assert_ptr_nonnull(pages);
    memset(pages, FILL, (size_t)count * stride);
    size_t n = ssm_page_bytes(ctx);
    for (int32_t k = 0; k < count; k++)
        EXPECT(ssm_slot_export_page(ctx, slots[k], pages + (size_t)k * stride, n), SSM_OK);
    return pages;
}

/* The device pages of slots[k] (one call on the stream), copied back. */
static unsigned char *device_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                   size_t stride, cudaStream_t stream)
{
    size_t bytes = (size_t)count * stride;
    void *dev = NULL;
    ck_assert(gpu_alloc(&dev, bytes, NULL, FILL));
    EXPECT(ssm_slots_export_pages_device(ctx, count, slots, dev, stride, stream), SSM_OK);
    unsigned char *pages = malloc(bytes);
    ck_assert_ptr_nonnull(pages);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(pages, dev, bytes, cudaMemcpyDeviceToHost));
    gpu_free(dev);
    return pages;
}

/* Imports host `pages` through device memory (one call on the stream) and
 * returns the statuses, [count], after the stream. */
static int32_t *device_import(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                              const unsigned char *pages, size_t stride, cudaStream_t stream)
{
    void *dev = NULL, *status_dev = NULL;
    ck_assert(gpu_alloc(&dev, (size_t)count * stride, pages, 0));
    ck_assert(gpu_alloc(&status_dev, sizeof(int32_t) * (size_t)count, NULL, 0x7F));
    EXPECT(ssm_slots_import_pages_device(ctx, count, slots, dev, stride, status_dev, stream),
           SSM_OK);
    int32_t *status = malloc(sizeof *status * (size_t)count);
    ck_assert_ptr_nonnull(status);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(status, status_dev, sizeof *status * (size_t)count,
                       cudaMemcpyDeviceToHost));
    gpu_free(dev);
    gpu_free(status_dev);
    return status;
}

static long first_difference(const unsigned char *a, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

static void assert_same(const unsigned char *got, const unsigned char *want, size_t n,
                        const char *what, int k)
{
    long at = first_difference(got, want, n);
    ck_assert_msg(at < 0, "%s (page %d): byte %ld of %zu differs (0x%02x, want 0x%02x)", what, k,
                  at, n, at < 0 ? 0 : got[at], at < 0 ? 0 : want[at]);
}

/* Pages k of two batches (strides sa, sb) equal for k < count. */
static void assert_pages(const unsigned char *got, size_t sa, const unsigned char *want,
                         size_t sb, int32_t count, size_t n, const char *what)
{
    for (int32_t k = 0; k < count; k++)
        assert_same(got + (size_t)k * sa, want + (size_t)k * sb, n, what, k);
}

/* The control: two pages differ in their payloads. */
static void assert_differ(const unsigned char *a, const unsigned char *b, size_t n,
                          const char *what)
{
    ck_assert_msg(first_difference(a + HEADER, b + HEADER, n - HEADER) >= 0,
                  "control: %s: the payloads are equal", what);
}

/* The context's flags: `expect` on each of slots[0..count) and on no other
 * slot, through ssm_slot_flags and ssm_ctx_status. */
static void assert_flags(ssm_ctx *ctx, int32_t count, const int32_t *slots, uint32_t expect)
{
    for (int32_t k = 0; k < count; k++) {
        uint32_t flags = 0;
        EXPECT(ssm_slot_flags(ctx, slots[k], &flags), SSM_OK);
        ck_assert_msg(flags == expect, "slot %d has flags 0x%x, want 0x%x", (int)slots[k],
                      (unsigned)flags, (unsigned)expect);
    }
    ssm_ctx_report report;
    EXPECT(ssm_ctx_status(ctx, &report), SSM_OK);
    ck_assert_msg(report.flags == expect && report.flagged_slots == (expect ? count : 0),
                  "ssm_ctx_status: flags 0x%x on %d slots, want 0x%x on %d",
                  (unsigned)report.flags, (int)report.flagged_slots, (unsigned)expect,
                  expect ? (int)count : 0);
}

/* ------------------------------------------------------------ 1. device = host */

START_TEST(device_equals_host)
{
    world w;
    int g;
    open_world(&w, _i, 100 + (uint64_t)_i, "device = host", &g);
    ssm_ctx *ctx = w.side[g].ctx;
    size_t n = ssm_page_bytes(ctx), stride = stride_for(n, 40);
    int32_t order[MAX_LANES];
    for (int32_t k = 0; k < w.lanes; k++)
        order[k] = w.side[g].slot[(k * 2 + 1) % w.lanes]; /* 1 3 0 2 4 */
    unsigned char *dev = device_pages(ctx, w.lanes, order, stride, w.stream);
    unsigned char *host = host_pages(ctx, w.lanes, order, stride);
    assert_pages(dev, stride, host, stride, w.lanes, n, "device page vs host page");
    for (size_t at = 0; at < (size_t)w.lanes * stride; at++)
        if (at % stride >= n)
            ck_assert_msg(dev[at] == FILL, "byte %zu past page %zu was written", at % stride,
                          at / stride);
    assert_differ(dev, dev + stride, n, "pages of two lanes");
    if (g != 1) { /* compact and replay: CUDA native's bytes */
        int32_t native[MAX_LANES];
        for (int32_t k = 0; k < w.lanes; k++)
            native[k] = w.side[1].slot[(k * 2 + 1) % w.lanes];
        unsigned char *other = device_pages(w.side[1].ctx, w.lanes, native, stride, w.stream);
        assert_pages(dev, stride, other, stride, w.lanes, n, "device page vs CUDA native's");
        free(other);
    }
    /* one slot alone, packed */
    unsigned char *one = device_pages(ctx, 1, &order[2], stride_for(n, 0), w.stream);
    assert_same(one, host + 2 * stride, n, "a single device page vs its host page", 2);
    free(one);
    free(host);
    free(dev);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 2. export keeps the slot */

START_TEST(export_keeps_slot)
{
    world w;
    const setup *su = &setups[_i / MODES];
    int replay = _i % MODES == 2;
    /* identity outputs (fp32 state only) show a folded ring in their bits */
    variant v = {modes[_i % MODES], replay && su->sd == SSM_DTYPE_F32, 0};
    int ok = world_open_graph(&w, su, v, 200 + (uint64_t)_i, "export keeps the slot");
    int32_t lanes[MAX_ROWS], lengths[MAX_ROWS];
    w.op = "prefill";
    int32_t rows = ok ? world_pick_rows(&w, w.lanes, 1, lanes) : 0;
    for (int32_t r = 0; r < rows; r++)
        lengths[r] = test_rng_int(&w.rng, 5, 40);
    ok = ok && step_finish(&w, step_make(&w, STEP_PREFILL, 0, rows, lanes, lengths));
    size_t n = ssm_page_bytes(w.side[0].ctx), stride = stride_for(n, 8);
    step_kind kinds[4] = {STEP_VERIFY, STEP_DECODE, STEP_VERIFY, STEP_DECODE};
    for (int k = 0; k < 4 && ok; k++) {
        w.op = "device exports";
        unsigned char *mine = device_pages(w.side[0].ctx, w.lanes, w.side[0].slot, stride,
                                           w.stream);
        unsigned char *twin = host_pages(w.side[1].ctx, w.lanes, w.side[1].slot, stride);
        assert_pages(mine, stride, twin, stride, w.lanes, n, "device page vs the twin's");
        free(mine);
        free(twin);
        w.op = step_kind_name(kinds[k]);
        rows = world_pick_rows(&w, w.lanes, 1, lanes);
        ok = step_finish(&w, step_make(&w, kinds[k], kinds[k] == STEP_DECODE ? 1 : T_MAX, rows,
                                       lanes, NULL)) &&
             world_compare_exports(&w);
        w.step++;
    }
    WORLD_OK(&w, ok);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 3. round trips */

START_TEST(round_trip)
{
    world w;
    int g;
    open_world(&w, _i, 300 + (uint64_t)_i, "round trip", &g);
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 16);
    unsigned char *source = host_pages(w.side[g].ctx, w.lanes, w.side[g].slot, stride);
    unsigned char *dev = device_pages(w.side[g].ctx, w.lanes, w.side[g].slot, stride, w.stream);
    assert_pages(dev, stride, source, stride, w.lanes, n, "device page vs host page");
    for (int c = 0; c < MODES; c++) {
        int32_t slots[CAPACITY], into[MAX_LANES];
        ssm_ctx *ctx = open_ctx(&w, modes[c], CAPACITY, w.lanes, slots);
        /* something to overwrite, then the pages in another slot order */
        int32_t *status = device_import(ctx, w.lanes, slots, source, stride, w.stream);
        free(status);
        for (int32_t k = 0; k < w.lanes; k++)
            into[k] = slots[w.lanes - 1 - k];
        status = device_import(ctx, w.lanes, into, dev, stride, w.stream);
        for (int32_t k = 0; k < w.lanes; k++)
            ck_assert_msg(status[k] == SSM_PAGE_ACCEPTED, "mode %s: page %d: status %d",
                          modes[c], (int)k, (int)status[k]);
        free(status);
        assert_flags(ctx, w.lanes, into, 0);
        unsigned char *back = host_pages(ctx, w.lanes, into, stride);
        assert_pages(back, stride, source, stride, w.lanes, n, "host page after a device import");
        free(back);
        back = device_pages(ctx, w.lanes, into, stride, w.stream);
        assert_pages(back, stride, source, stride, w.lanes, n,
                     "device page after a device import");
        free(back);
        /* the host round trip gives the same bytes */
        for (int32_t k = 0; k < w.lanes; k++)
            EXPECT(ssm_slot_import_page(ctx, slots[k], source + (size_t)k * stride, n), SSM_OK);
        back = host_pages(ctx, w.lanes, slots, stride);
        assert_pages(back, stride, source, stride, w.lanes, n, "host page after a host import");
        free(back);
        ssm_ctx_destroy(ctx);
    }
    free(dev);
    free(source);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 4. rejections */

/* The page of a fresh CPU context of dims m and state dtype sd. */
static unsigned char *foreign_page(const ssm_model_dims *m, ssm_dtype sd, ssm_dtype ad, size_t *n)
{
    ssm_config c;
    ssm_ctx *ctx = NULL;
    int32_t slot;
    test_config(&c, m, "native", sd, ad, 1, T_MAX - 1);
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    EXPECT(ssm_slot_acquire(ctx, &slot), SSM_OK);
    *n = ssm_page_bytes(ctx);
    unsigned char *page = malloc(*n);
    ck_assert_ptr_nonnull(page);
    EXPECT(ssm_slot_export_page(ctx, slot, page, *n), SSM_OK);
    ssm_ctx_destroy(ctx);
    return page;
}

enum spoil {
    SPOIL_MAGIC,
    SPOIL_VERSION,
    SPOIL_HEADER_BYTE,
    SPOIL_LENGTH,
    SPOIL_PAYLOAD_BYTE,
    SPOIL_DIMS,
    SPOIL_DTYPE,
    SPOIL_HEADS,
    SPOILS
};

/* Page 1 of `batch` spoiled; returns the status it must get. */
static int32_t spoil(const world *w, unsigned char *page, size_t n, size_t stride, int how)
{
    size_t other_n = 0;
    unsigned char *other = NULL;
    switch (how) {
    case SPOIL_MAGIC:
        page[0] ^= 1;
        return SSM_PAGE_BAD_MAGIC;
    case SPOIL_VERSION:
        ssm_page_put32(page + SSM_PAGE_AT_VERSION, 2);
        ssm_page_header_seal(page);
        return SSM_PAGE_BAD_VERSION;
    case SPOIL_HEADER_BYTE:
        page[SSM_PAGE_AT_VALUE_DIM] ^= 0x04;
        return SSM_PAGE_HEADER_CHECKSUM;
    case SPOIL_LENGTH:
        ssm_page_put64(page + SSM_PAGE_AT_PAYLOAD_BYTES,
                       ssm_page_get64(page + SSM_PAGE_AT_PAYLOAD_BYTES) - 8);
        ssm_page_header_seal(page);
        return SSM_PAGE_BAD_LENGTH;
    case SPOIL_PAYLOAD_BYTE:
        page[HEADER + (n - HEADER) / 2] ^= 0x10;
        return SSM_PAGE_PAYLOAD_CHECKSUM;
    case SPOIL_DIMS: {
        ssm_model_dims m = w->m;
        m.value_dim += 16;
        other = foreign_page(&m, w->sd, w->ad, &other_n);
        break;
    }
    case SPOIL_DTYPE:
        other = foreign_page(&w->m, w->sd == SSM_DTYPE_F32 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32,
                             w->ad, &other_n);
        break;
    default: { /* the first half of the value heads */
        other_n = n;
        other = malloc(n);
        ck_assert_ptr_nonnull(other);
        unsigned char *whole = malloc(n);
        ck_assert_ptr_nonnull(whole);
        memcpy(whole, page, n);
        EXPECT(ssm_page_slice(whole, n, 0, w->m.value_heads / 2, other, n, &other_n), SSM_OK);
        free(whole);
        break;
    }
    }
    ck_assert_uint_le(other_n, stride);
    memcpy(page, other, other_n);
    free(other);
    return how == SPOIL_DIMS ? SSM_PAGE_BAD_MODEL
           : how == SPOIL_DTYPE ? SSM_PAGE_BAD_DTYPE
                                : SSM_PAGE_BAD_HEADS;
}

START_TEST(rejections)
{
    world w;
    int g;
    open_world(&w, _i, 400 + (uint64_t)_i, "rejections", &g);
    ssm_ctx *ctx = w.side[g].ctx;
    size_t n = ssm_page_bytes(ctx);
    /* room for a page of other dims (value_dim + 16) or of fp32 state */
    size_t stride = stride_for(2 * n, 0);
    int32_t *slots = w.side[g].slot; /* lanes 0, 1, 2 */
    unsigned char *before = host_pages(ctx, BATCH, slots, stride);
    unsigned char *good = malloc(BATCH * stride);
    ck_assert_ptr_nonnull(good);
    memset(good, FILL, BATCH * stride);
    for (int k = 0; k < BATCH; k++) /* each page would change its slot */
        memcpy(good + (size_t)k * stride, before + (size_t)((k + 1) % BATCH) * stride, n);
    assert_differ(good, before, n, "a slot's page and the page for it");
    unsigned char *batch = malloc(BATCH * stride);
    ck_assert_ptr_nonnull(batch);
    for (int how = 0; how < SPOILS; how++) {
        memcpy(batch, good, BATCH * stride);
        int32_t want = spoil(&w, batch + stride, n, stride, how);
        int32_t *status = device_import(ctx, BATCH, slots, batch, stride, w.stream);
        for (int k = 0; k < BATCH; k++) {
            int32_t expected = k == 1 ? want : SSM_PAGE_NOT_LOADED;
            ck_assert_msg(status[k] == expected, "spoil %d: page %d: status %d, want %d", how, k,
                          (int)status[k], (int)expected);
        }
        free(status);
        assert_flags(ctx, BATCH, slots, SSM_FLAG_PAGE_REFUSED);
        unsigned char *after = host_pages(ctx, w.lanes, slots, stride);
        assert_pages(after, stride, before, stride, BATCH, n, "a slot after a refused batch");
        free(after);
    }
    /* the control: the good batch loads and clears the flags */
    int32_t *status = device_import(ctx, BATCH, slots, good, stride, w.stream);
    for (int k = 0; k < BATCH; k++)
        ck_assert_int_eq(status[k], SSM_PAGE_ACCEPTED);
    free(status);
    assert_flags(ctx, BATCH, slots, 0);
    unsigned char *after = host_pages(ctx, BATCH, slots, stride);
    assert_pages(after, stride, good, stride, BATCH, n, "a slot after a good batch");
    free(after);
    free(batch);
    free(good);
    free(before);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 5. ranks */

START_TEST(ranks)
{
    world w;
    int g;
    open_world(&w, _i, 500 + (uint64_t)_i, "ranks", &g);
    int32_t per = w.m.value_heads / 2, slot[2][2];
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 0);
    unsigned char *whole = device_pages(w.side[g].ctx, 2, w.side[g].slot, stride, w.stream);
    ssm_ctx *rank[2];
    unsigned char *own[2];
    size_t rn[2], rstride[2];
    for (int k = 0; k < 2; k++) {
        rank[k] = gpu_open_rank(&w, modes[(_i + 1 + k) % MODES], k * per, per, 4, slot[k], 2);
        rn[k] = ssm_page_bytes(rank[k]);
        rstride[k] = stride_for(rn[k], 0);
        int32_t *status = device_import(rank[k], 2, slot[k], whole, stride, w.stream);
        ck_assert_msg(status[0] == SSM_PAGE_ACCEPTED && status[1] == SSM_PAGE_ACCEPTED,
                      "rank %d: statuses %d %d", k, (int)status[0], (int)status[1]);
        free(status);
        unsigned char *got = host_pages(rank[k], 2, slot[k], rstride[k]);
        for (int lane = 0; lane < 2; lane++) {
            unsigned char *want = malloc(rn[k]);
            size_t written = 0;
            ck_assert_ptr_nonnull(want);
            EXPECT(ssm_page_slice(whole + (size_t)lane * stride, n, k * per, (k + 1) * per, want,
                                  rn[k], &written),
                   SSM_OK);
            assert_same(got + (size_t)lane * rstride[k], want, rn[k],
                        "a rank's page vs the slice of the whole", lane);
            free(want);
        }
        own[k] = device_pages(rank[k], 2, slot[k], rstride[k], w.stream);
        assert_pages(own[k], rstride[k], got, rstride[k], 2, rn[k], "a rank's device page");
        free(got);
    }
    for (int k = 0; k < 2; k++) {
        /* its own pages, into the other slots: accepted */
        int32_t swapped[2] = {slot[k][1], slot[k][0]};
        int32_t *status = device_import(rank[k], 2, swapped, own[k], rstride[k], w.stream);
        ck_assert_msg(status[0] == SSM_PAGE_ACCEPTED && status[1] == SSM_PAGE_ACCEPTED,
                      "rank %d, its own pages: statuses %d %d", k, (int)status[0],
                      (int)status[1]);
        free(status);
        unsigned char *got = host_pages(rank[k], 2, swapped, rstride[k]);
        assert_pages(got, rstride[k], own[k], rstride[k], 2, rn[k], "a rank's own page back");
        free(got);
        /* the other rank's: other heads */
        status = device_import(rank[k], 2, slot[k], own[1 - k], rstride[k], w.stream);
        ck_assert_msg(status[0] == SSM_PAGE_BAD_HEADS && status[1] == SSM_PAGE_BAD_HEADS,
                      "rank %d, the other's pages: statuses %d %d", k, (int)status[0],
                      (int)status[1]);
        free(status);
        assert_flags(rank[k], 2, slot[k], SSM_FLAG_PAGE_REFUSED);
    }
    for (int k = 0; k < 2; k++) {
        free(own[k]);
        ssm_ctx_destroy(rank[k]);
    }
    free(whole);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ 6. a large batch */

START_TEST(large_batch)
{
    world w;
    int g;
    open_world(&w, _i, 600 + (uint64_t)_i, "large batch", &g);
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 8);
    unsigned char *lanes = host_pages(w.side[g].ctx, w.lanes, w.side[g].slot, stride);
    unsigned char *pages = malloc(LARGE * stride);
    ck_assert_ptr_nonnull(pages);
    for (int32_t k = 0; k < LARGE; k++)
        memcpy(pages + (size_t)k * stride, lanes + (size_t)(k % w.lanes) * stride, stride);
    int32_t slots[LARGE], order[LARGE];
    ssm_ctx *ctx = open_ctx(&w, modes[(_i + 1) % MODES], LARGE, LARGE, slots);
    for (int32_t k = 0; k < LARGE; k++)
        order[k] = slots[(k * 3) % LARGE]; /* 3 and 70 are coprime: a permutation */
    int32_t *status = device_import(ctx, LARGE, order, pages, stride, w.stream);
    for (int32_t k = 0; k < LARGE; k++)
        ck_assert_msg(status[k] == SSM_PAGE_ACCEPTED, "page %d: status %d", (int)k,
                      (int)status[k]);
    free(status);
    unsigned char *back = device_pages(ctx, LARGE, order, stride, w.stream);
    assert_pages(back, stride, pages, stride, LARGE, n, "a page of a large batch, back");
    free(back);
    back = host_pages(ctx, LARGE, order, stride);
    assert_pages(back, stride, pages, stride, LARGE, n, "a host page of a large batch");
    free(back);
    ssm_ctx_destroy(ctx);
    free(pages);
    free(lanes);
    world_close(&w);
}
END_TEST

/* ------------------------------------------------------------ the suite */

static Suite *make_suite(void)
{
    Suite *s = suite_create("device pages");
    TCase *tc = tcase_create("device pages");
    int n = SETUPS * MODES;
    tcase_add_loop_test(tc, device_equals_host, 0, n);
    tcase_add_loop_test(tc, export_keeps_slot, 0, n);
    tcase_add_loop_test(tc, round_trip, 0, n);
    tcase_add_loop_test(tc, rejections, 0, n);
    tcase_add_loop_test(tc, ranks, 0, n);
    tcase_add_loop_test(tc, large_batch, 0, n);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return gpu_suite_main(make_suite); }
