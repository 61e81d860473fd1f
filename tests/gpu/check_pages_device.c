/* Pages in device memory (docs/pages.md, "Device pages"):
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
 * 7. export in a CUDA graph: the call captured on the world's stream
 *    (thread-local mode, as check_gpu_modes' graph case) returns SSM_OK and
 *    the capture holds (no host synchronization, no allocation); launched
 *    twice with a verify round between, the graph's pages are the same
 *    call's without a graph and the host pages, byte for byte, and differ
 *    from one launch to the next.
 * 8. import in a CUDA graph: the call captured likewise and launched four
 *    times over rewritten device pages (good, good, one spoiled, good): the
 *    statuses, slots and flags are a twin's that makes the same calls
 *    without a graph, and what the pages say they must be.
 *
 * A Check suite run without fork through tests/gpu/pages_device.gpu; exit
 * 77 when no CUDA device is visible, checked before anything else.
 * SSM_TEST_SEED replays a run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pages/format.h" /* header fields, to spoil pages (inline only) */
#include "tests/expect.h"
#include "tests/gpu/gpu_suite.h"
#include "tests/gpu/gpu_world.h"

#define HEADER SSM_PAGE_HEADER_BYTES
#define BATCH 3
#define FILL 0x5A
#define LARGE 70 /* past one launch of SSM_PAGE_LAUNCH_SLOTS (64) pages */

#define CUDA_OK(call) ck_assert_msg(gpu_ok((call), #call), "%s failed", #call)

/* ------------------------------------------------------------ helpers */

/* A stride for pages of n bytes: a multiple of 8, `extra` bytes past. */
static size_t stride_for(size_t n, size_t extra)
{
    return (n + extra + 7) / 8 * 8;
}

/* Side s's slots of the lanes in a shuffled order: lanes 1 3 0 2 4. */
static void shuffled(const world *w, int s, int32_t *order)
{
    for (int32_t k = 0; k < w->lanes; k++)
        order[k] = w->side[s].slot[(k * 2 + 1) % w->lanes];
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

/* `bytes` of device memory in a new host buffer (a synchronous copy). */
static unsigned char *fetch(const void *dev, size_t bytes)
{
    unsigned char *host = malloc(bytes);
    ck_assert_ptr_nonnull(host);
    CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
    return host;
}

/* The device pages of slots[k] (one call on the stream), copied back. */
static unsigned char *device_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                   size_t stride, cudaStream_t stream)
{
    size_t bytes = (size_t)count * stride;
    void *dev = NULL;
    ck_assert(gpu_alloc(&dev, bytes, NULL, FILL));
    EXPECT(ssm_slots_export_pages_device(ctx, count, slots, dev, stride, stream), SSM_OK);
    CUDA_OK(cudaStreamSynchronize(stream));
    unsigned char *pages = fetch(dev, bytes);
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
    CUDA_OK(cudaStreamSynchronize(stream));
    int32_t *status = (int32_t *)fetch(status_dev, sizeof(int32_t) * (size_t)count);
    gpu_free(dev);
    gpu_free(status_dev);
    return status;
}

/* Pages k of two batches (strides sa, sb) equal for k < count. */
static void assert_pages(const unsigned char *got, size_t sa, const unsigned char *want,
                         size_t sb, int32_t count, size_t n, const char *what)
{
    for (int32_t k = 0; k < count; k++)
        gpu_assert_same(got + (size_t)k * sa, want + (size_t)k * sb, n, what, k);
}

/* Nothing between the pages of a batch (past page k's n bytes, up to the
 * next stride) was written: every such byte is still FILL. */
static void assert_gaps(const unsigned char *pages, int32_t count, size_t stride, size_t n)
{
    for (size_t at = 0; at < (size_t)count * stride; at++)
        if (at % stride >= n)
            ck_assert_msg(pages[at] == FILL, "byte %zu past page %zu was written", at % stride,
                          at / stride);
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
    gpu_page_world(&w, _i, 100 + (uint64_t)_i, "device = host", "device pages", &g);
    ssm_ctx *ctx = w.side[g].ctx;
    size_t n = ssm_page_bytes(ctx), stride = stride_for(n, 40);
    int32_t order[MAX_LANES];
    shuffled(&w, g, order);
    unsigned char *dev = device_pages(ctx, w.lanes, order, stride, w.stream);
    unsigned char *host = host_pages(ctx, w.lanes, order, stride);
    assert_pages(dev, stride, host, stride, w.lanes, n, "device page vs host page");
    assert_gaps(dev, w.lanes, stride, n);
    gpu_assert_payloads_differ(dev, dev + stride, n, "pages of two lanes");
    if (g != 1) { /* compact and replay: CUDA native's bytes */
        int32_t native[MAX_LANES];
        shuffled(&w, 1, native);
        unsigned char *other = device_pages(w.side[1].ctx, w.lanes, native, stride, w.stream);
        assert_pages(dev, stride, other, stride, w.lanes, n, "device page vs CUDA native's");
        free(other);
    }
    /* one slot alone, packed */
    unsigned char *one = device_pages(ctx, 1, &order[2], stride_for(n, 0), w.stream);
    gpu_assert_same(one, host + 2 * stride, n, "a single device page vs its host page", 2);
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
    const setup *su = &gpu_setups[_i / MODES];
    int replay = _i % MODES == 2;
    /* identity outputs (fp32 state only) show a folded ring in their bits */
    variant v = {.mode = gpu_modes[_i % MODES], .identity = replay && su->sd == SSM_DTYPE_F32};
    int ok = world_open_graph(&w, su, v, 200 + (uint64_t)_i, "export keeps the slot") &&
             gpu_prefill_lanes(&w, 1);
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
        ok = gpu_step_lanes(&w, kinds[k], 1) && world_compare_exports(&w);
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
    gpu_page_world(&w, _i, 300 + (uint64_t)_i, "round trip", "device pages", &g);
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 16);
    unsigned char *source = host_pages(w.side[g].ctx, w.lanes, w.side[g].slot, stride);
    unsigned char *dev = device_pages(w.side[g].ctx, w.lanes, w.side[g].slot, stride, w.stream);
    assert_pages(dev, stride, source, stride, w.lanes, n, "device page vs host page");
    for (int c = 0; c < MODES; c++) {
        int32_t slots[CAPACITY], into[MAX_LANES];
        ssm_ctx *ctx = gpu_open_ctx(&w, gpu_modes[c], 1, CAPACITY, w.lanes, slots);
        /* something to overwrite, then the pages in another slot order */
        int32_t *status = device_import(ctx, w.lanes, slots, source, stride, w.stream);
        free(status);
        for (int32_t k = 0; k < w.lanes; k++)
            into[k] = slots[w.lanes - 1 - k];
        status = device_import(ctx, w.lanes, into, dev, stride, w.stream);
        for (int32_t k = 0; k < w.lanes; k++)
            ck_assert_msg(status[k] == SSM_PAGE_ACCEPTED, "mode %s: page %d: status %d",
                          gpu_modes[c], (int)k, (int)status[k]);
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
        other = gpu_foreign_page(&m, w->sd, w->ad, &other_n);
        break;
    }
    case SPOIL_DTYPE:
        other = gpu_foreign_page(&w->m, w->sd == SSM_DTYPE_F32 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32,
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
    gpu_page_world(&w, _i, 400 + (uint64_t)_i, "rejections", "device pages", &g);
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
    gpu_assert_payloads_differ(good, before, n, "a slot's page and the page for it");
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
    gpu_page_world(&w, _i, 500 + (uint64_t)_i, "ranks", "device pages", &g);
    int32_t per = w.m.value_heads / 2, slot[2][2];
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 0);
    unsigned char *whole = device_pages(w.side[g].ctx, 2, w.side[g].slot, stride, w.stream);
    ssm_ctx *rank[2];
    unsigned char *own[2];
    size_t rn[2], rstride[2];
    for (int k = 0; k < 2; k++) {
        rank[k] = gpu_open_rank(&w, gpu_modes[(_i + 1 + k) % MODES], k * per, per, 4, slot[k], 2);
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
            gpu_assert_same(got + (size_t)lane * rstride[k], want, rn[k],
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
    gpu_page_world(&w, _i, 600 + (uint64_t)_i, "large batch", "device pages", &g);
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 8);
    unsigned char *lanes = host_pages(w.side[g].ctx, w.lanes, w.side[g].slot, stride);
    unsigned char *pages = malloc(LARGE * stride);
    ck_assert_ptr_nonnull(pages);
    for (int32_t k = 0; k < LARGE; k++)
        memcpy(pages + (size_t)k * stride, lanes + (size_t)(k % w.lanes) * stride, stride);
    int32_t slots[LARGE], order[LARGE];
    ssm_ctx *ctx = gpu_open_ctx(&w, gpu_modes[(_i + 1) % MODES], 1, LARGE, LARGE, slots);
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

/* ------------------------------------------------------------ 7, 8. CUDA graphs */

/* The graph of case 7 or 8, instantiated by capture_end. The case destroys
 * it; when an assertion ends the case early, graph_teardown, the graph
 * cases' checked teardown, does (Check runs it after a failed case too,
 * without fork). */
static cudaGraphExec_t graph_exec;

static void graph_teardown(void)
{
    if (graph_exec)
        (void)cudaGraphExecDestroy(graph_exec);
    graph_exec = NULL;
}

/* Begins capturing the world's stream as tests/gpu/check_gpu_modes.c's
 * graph case does: thread-local mode, the world's created stream. The
 * device is idle first, so nothing queued before is pending. Nothing may
 * assert between this and capture_end: the stream must not stay captured. */
static void capture_begin(world *w)
{
    w->op = "capture";
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaStreamBeginCapture(w->stream, cudaStreamCaptureModeThreadLocal));
}

/* Ends the capture, whatever the call under capture returned (`during`),
 * and instantiates graph_exec; then the call must have returned SSM_OK and
 * the capture must have held. A call that synchronized with the host or
 * allocated under capture fails there, or invalidates the capture
 * (cudaStreamEndCapture's error is printed as a "# ..." line). */
static void capture_end(world *w, ssm_status during, const char *call)
{
    char message[512];
    snprintf(message, sizeof message, "%s", during == SSM_OK ? "" : ssm_last_error());
    cudaGraph_t graph = NULL;
    int ended = gpu_ok(cudaStreamEndCapture(w->stream, &graph), "cudaStreamEndCapture");
    int made = ended && graph &&
               gpu_ok(cudaGraphInstantiateWithFlags(&graph_exec, graph, 0),
                      "cudaGraphInstantiateWithFlags");
    if (graph)
        (void)cudaGraphDestroy(graph);
    ck_assert_msg(during == SSM_OK, "%s under capture: got %s (%s)", call, ssm_status_name(during),
                  message);
    ck_assert_msg(ended, "%s: the capture did not hold (see the # line above)", call);
    ck_assert_msg(made, "%s: the captured graph did not instantiate", call);
}

/* Launches graph_exec on the world's stream and waits for it. */
static void graph_launch(world *w)
{
    w->op = "graph launch";
    CUDA_OK(cudaGraphLaunch(graph_exec, w->stream));
    CUDA_OK(cudaStreamSynchronize(w->stream));
}

/* 7. The export of the lanes (shuffled, a stride past the page) captured
 * once and launched twice, a verify round of every lane between the
 * launches: each launch's pages are the pages the same call gives without
 * a graph at that point, and the host pages, byte for byte; nothing between
 * the pages is written; capture itself wrote nothing; the two launches'
 * pages differ (the graph reads the slots as they are at launch). */
START_TEST(export_graph)
{
    world w;
    int g;
    gpu_page_world(&w, _i, 700 + (uint64_t)_i, "export in a graph", "device pages", &g);
    ssm_ctx *ctx = w.side[g].ctx;
    size_t n = ssm_page_bytes(ctx), stride = stride_for(n, 24);
    size_t bytes = (size_t)w.lanes * stride;
    int32_t order[MAX_LANES];
    shuffled(&w, g, order);
    void *dev = NULL;
    ck_assert(gpu_alloc(&dev, bytes, NULL, FILL));

    capture_begin(&w);
    ssm_status during = ssm_slots_export_pages_device(ctx, w.lanes, order, dev, stride, w.stream);
    capture_end(&w, during, "ssm_slots_export_pages_device");
    unsigned char *got = fetch(dev, bytes);
    for (size_t at = 0; at < bytes; at++)
        ck_assert_msg(got[at] == FILL, "byte %zu of the pages was written by the capture", at);
    free(got);

    unsigned char *first = NULL;
    for (int launch = 0; launch < 2; launch++) {
        if (launch > 0) { /* the slots change */
            WORLD_OK(&w, gpu_step_lanes(&w, STEP_VERIFY, 0) && world_compare_exports(&w));
            w.step++;
        }
        graph_launch(&w);
        got = fetch(dev, bytes);
        w.op = "device pages";
        unsigned char *plain = device_pages(ctx, w.lanes, order, stride, w.stream);
        unsigned char *host = host_pages(ctx, w.lanes, order, stride);
        assert_pages(got, stride, plain, stride, w.lanes, n,
                     "page from the graph vs the same call without one");
        assert_pages(got, stride, host, stride, w.lanes, n, "page from the graph vs host page");
        assert_gaps(got, w.lanes, stride, n);
        free(plain);
        free(host);
        if (!first) {
            first = got;
            continue;
        }
        gpu_assert_payloads_differ(first, got, n,
                                   "a page from the graph before and after a verify round");
        free(first);
        free(got);
    }
    graph_teardown();
    gpu_free(dev);
    world_close(&w);
}
END_TEST

/* 8. The import of a batch into the lanes' slots of a CUDA context of
 * another mode (slots in reverse order) captured once and launched four
 * times, the device pages rewritten before each launch (stream-ordered,
 * with the status array): P (the lanes' pages), R (P rotated by one, so
 * each page changes its slot), S (P with page 1's payload spoiled) and P
 * again. A twin context makes the same imports without a graph. After each
 * launch: the statuses (all SSM_PAGE_ACCEPTED; for S, page 1
 * SSM_PAGE_PAYLOAD_CHECKSUM and the others SSM_PAGE_NOT_LOADED) are the
 * twin's; the slots' host pages are the batch's (for S, still R's) and the
 * twin's, byte for byte; the flags are the twin's (SSM_FLAG_PAGE_REFUSED on
 * every slot after S, none after the last P: the graph zeroes the refusal
 * word at every launch). Capture itself wrote no status and changed no
 * slot. */
START_TEST(import_graph)
{
    world w;
    int g;
    gpu_page_world(&w, _i, 800 + (uint64_t)_i, "import in a graph", "device pages", &g);
    int32_t count = w.lanes;
    size_t n = ssm_page_bytes(w.side[g].ctx), stride = stride_for(n, 8);
    size_t bytes = (size_t)count * stride, status_bytes = sizeof(int32_t) * (size_t)count;
    unsigned char *p = host_pages(w.side[g].ctx, count, w.side[g].slot, stride);
    unsigned char *r = malloc(bytes), *spoilt = malloc(bytes);
    ck_assert(r && spoilt);
    for (int32_t k = 0; k < count; k++)
        memcpy(r + (size_t)k * stride, p + (size_t)((k + 1) % count) * stride, stride);
    gpu_assert_payloads_differ(p, r, n, "a slot's page in P and in R");
    memcpy(spoilt, p, bytes);
    int32_t bad = spoil(&w, spoilt + stride, n, stride, SPOIL_PAYLOAD_BYTE);
    const unsigned char *batch[4] = {p, r, spoilt, p}, *held[4] = {p, r, r, p};

    const char *mode = gpu_modes[(_i + 1) % MODES];
    int32_t slots[CAPACITY], twin_slots[CAPACITY], into[MAX_LANES], twin_into[MAX_LANES];
    ssm_ctx *ctx = gpu_open_ctx(&w, mode, 1, CAPACITY, count, slots);
    ssm_ctx *twin = gpu_open_ctx(&w, mode, 1, CAPACITY, count, twin_slots);
    for (int32_t k = 0; k < count; k++) {
        into[k] = slots[count - 1 - k];
        twin_into[k] = twin_slots[count - 1 - k];
    }
    void *dev = NULL, *status_dev = NULL;
    ck_assert(gpu_alloc(&dev, bytes, p, 0));
    ck_assert(gpu_alloc(&status_dev, status_bytes, NULL, 0x7F));

    capture_begin(&w);
    ssm_status during = ssm_slots_import_pages_device(ctx, count, into, dev, stride, status_dev,
                                                      w.stream);
    capture_end(&w, during, "ssm_slots_import_pages_device");
    int32_t *status = (int32_t *)fetch(status_dev, status_bytes);
    for (int32_t k = 0; k < count; k++)
        ck_assert_msg(status[k] == 0x7F7F7F7F, "status %d was written by the capture (%d)", (int)k,
                      (int)status[k]);
    free(status);
    unsigned char *mine = host_pages(ctx, count, into, stride);
    unsigned char *theirs = host_pages(twin, count, twin_into, stride);
    assert_pages(mine, stride, theirs, stride, count, n, "a slot after the capture vs the twin's");
    free(mine);
    free(theirs);

    for (int launch = 0; launch < 4; launch++) {
        int refused = batch[launch] == spoilt;
        CUDA_OK(cudaMemcpyAsync(dev, batch[launch], bytes, cudaMemcpyHostToDevice, w.stream));
        CUDA_OK(cudaMemsetAsync(status_dev, 0x7F, status_bytes, w.stream));
        graph_launch(&w);
        status = (int32_t *)fetch(status_dev, status_bytes);
        w.op = "device pages";
        int32_t *want = device_import(twin, count, twin_into, batch[launch], stride, w.stream);
        for (int32_t k = 0; k < count; k++) {
            int32_t expected = !refused ? SSM_PAGE_ACCEPTED : k == 1 ? bad : SSM_PAGE_NOT_LOADED;
            ck_assert_msg(status[k] == expected && want[k] == expected,
                          "launch %d: page %d: status %d from the graph, %d without, want %d",
                          launch, (int)k, (int)status[k], (int)want[k], (int)expected);
        }
        free(status);
        free(want);
        uint32_t flags = refused ? SSM_FLAG_PAGE_REFUSED : 0;
        assert_flags(ctx, count, into, flags);
        assert_flags(twin, count, twin_into, flags);
        mine = host_pages(ctx, count, into, stride);
        theirs = host_pages(twin, count, twin_into, stride);
        assert_pages(mine, stride, held[launch], stride, count, n,
                     "a slot after a graph launch vs the page it must hold");
        assert_pages(mine, stride, theirs, stride, count, n,
                     "a slot after a graph launch vs the twin's");
        free(mine);
        free(theirs);
    }
    graph_teardown();
    gpu_free(dev);
    gpu_free(status_dev);
    ssm_ctx_destroy(ctx);
    ssm_ctx_destroy(twin);
    free(spoilt);
    free(r);
    free(p);
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
    TCase *graphs = tcase_create("device pages in CUDA graphs");
    tcase_add_checked_fixture(graphs, NULL, graph_teardown);
    tcase_add_loop_test(graphs, export_graph, 0, n);
    tcase_add_loop_test(graphs, import_graph, 0, n);
    suite_add_tcase(s, graphs);
    return s;
}

int main(void) { return gpu_suite_main(make_suite); }
