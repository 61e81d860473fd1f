/* Device pages (docs/pages.md, "Device pages") where CI runs, without a GPU:
 *
 * - the host checks of ssm_slots_export_pages_device and
 *   ssm_slots_import_pages_device on CPU contexts of every mode: every bad
 *   argument gets its own status and message, and arguments that would do
 *   on a CUDA context get SSM_ERR_UNSUPPORTED naming it; no slot changes and
 *   the status array is not written;
 * - the device's judgement of a page, run here on host pages (it is one
 *   function, core/pages/format.h's ssm_page_check, compiled for both): each
 *   way a page can be wrong gets its ssm_page_status, a good page and a
 *   whole page for a tensor-parallel rank pass;
 * - the header the seal kernel writes: the context's header with the
 *   payload's CRC, sealed, is byte for byte the host page's header;
 * - the views a rank's import reads a whole page by (ssm_page_view_v1, as
 *   the check kernel builds them): gathering the rank's canonical form by
 *   their rules gives the payload of ssm_page_slice of that page. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/pages/device_memory.h"
#include "core/internal.h"
#include "tests/runner.h"
#include "tests/testutil.h"

static const char *const modes[] = {"native", "compact", "replay"};

#define SLOTS 3
#define SENTINEL 0x5A5A5A5A

/* GDN with GVA (group 2), or KDA with a lower bound. */
static ssm_model_dims dims(int kda)
{
    ssm_model_dims m = {kda ? SSM_MODEL_KDA : SSM_MODEL_GDN, 2, 2, 4, 16, 8, 4, kda,
                        kda ? -5.0f : 0.0f};
    return m;
}

typedef struct side {
    ssm_ctx *ctx;
    ssm_model_dims m; /* the context's own dims (a rank's) */
    int32_t slots[SLOTS];
} side;

/* A CPU context of `mode` holding value heads [first, first + per) of m
 * (per 0: all of them), SLOTS slots acquired and filled, one free. */
static void open_side(side *s, const ssm_model_dims *m, const char *mode, ssm_dtype state,
                      int32_t first, int32_t per, test_rng *r)
{
    ssm_config c;
    s->m = *m;
    if (per) {
        int32_t group = m->value_heads / m->heads;
        s->m.value_heads = per;
        s->m.heads = per / group;
    }
    test_config(&c, &s->m, mode, state, SSM_DTYPE_BF16, SLOTS + 1, 3);
    if (per)
        c.head_slice = (ssm_head_slice){m->heads, m->value_heads, first};
    ck_assert_msg(ssm_ctx_create(&c, &s->ctx) == SSM_OK, "%s", ssm_last_error());
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_int_eq(ssm_slot_acquire(s->ctx, &s->slots[k]), SSM_OK);
    ck_assert_msg(test_prefill_prompts(s->ctx, s->slots, SLOTS, &s->m, r) == SSM_OK, "%s",
                  ssm_last_error());
}

static unsigned char *page_of(const side *s, int32_t k)
{
    size_t n = ssm_page_bytes(s->ctx);
    unsigned char *page = malloc(n);
    ck_assert_ptr_nonnull(page);
    ck_assert_int_eq(ssm_slot_export_page(s->ctx, s->slots[k], page, n), SSM_OK);
    return page;
}

/* ------------------------------------------------------------ host checks */

/* A call of either form on `count` slots: the import (with `status`) or
 * the export. */
static ssm_status call(int import, ssm_ctx *ctx, int32_t count, const int32_t *slots,
                       void *pages, size_t stride, int32_t *status)
{
    return import ? ssm_slots_import_pages_device(ctx, count, slots, pages, stride, status, NULL)
                  : ssm_slots_export_pages_device(ctx, count, slots, pages, stride, NULL);
}

#define EXPECT_CALL(got, want, needle)                                                         \
    do {                                                                                       \
        ssm_status got_ = (got);                                                               \
        ck_assert_msg(got_ == (want), "%s (%s): got %s, want %s (%s)", #got,                  \
                      import ? "import" : "export", ssm_status_name(got_),                     \
                      ssm_status_name(want), ssm_last_error());                                \
        ck_assert_msg(strstr(ssm_last_error(), (needle)), "%s: message '%s' lacks '%s'", #got, \
                      ssm_last_error(), (needle));                                             \
    } while (0)

/* _i: the mode (GDN or KDA alternately). Export and import take the same
 * checks; the import also wants its status array. */
START_TEST(host_checks)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 600 + (uint64_t)_i);
    ssm_model_dims m = dims(_i % 2);
    side s;
    open_side(&s, &m, modes[_i], SSM_DTYPE_F32, 0, 0, &r);
    ssm_ctx *ctx = s.ctx;
    size_t n = ssm_page_bytes(ctx), stride = (n + 7) / 8 * 8;
    uint64_t *buffer = calloc(SLOTS * stride / 8 + 1, sizeof *buffer);
    ck_assert_ptr_nonnull(buffer);
    unsigned char *pages = (unsigned char *)buffer;
    int32_t status[SLOTS];
    for (int k = 0; k < SLOTS; k++)
        status[k] = SENTINEL;
    test_snapshot before[SLOTS];
    for (int k = 0; k < SLOTS; k++)
        ck_assert_int_eq(test_snapshot_take(ctx, s.slots[k], &before[k]), SSM_OK);
    int32_t spare = -1; /* the pool's last slot, free between the cases */
    ck_assert_int_eq(ssm_slot_acquire(ctx, &spare), SSM_OK);
    ck_assert_int_eq(ssm_slot_release(ctx, spare), SSM_OK);
    const int32_t *slots = s.slots;
    int32_t twice[2] = {s.slots[1], s.slots[1]}, outside[2] = {s.slots[0], 99},
            released[2] = {s.slots[0], spare}, busy[2] = {s.slots[0], spare};
    test_weights w;
    test_weights_make(&r, &s.m, 1, &w);

    for (int import = 0; import < 2; import++) {
        const char *name = import ? "ssm_slots_import_pages_device"
                                  : "ssm_slots_export_pages_device";
        EXPECT_CALL(call(import, NULL, SLOTS, slots, pages, stride, status),
                    SSM_ERR_INVALID_ARGUMENT, name);
        EXPECT_CALL(call(import, ctx, SLOTS, NULL, pages, stride, status),
                    SSM_ERR_INVALID_ARGUMENT, name);
        EXPECT_CALL(call(import, ctx, SLOTS, slots, NULL, stride, status),
                    SSM_ERR_INVALID_ARGUMENT, name);
        EXPECT_CALL(call(import, ctx, 0, slots, pages, stride, status), SSM_ERR_INVALID_ARGUMENT,
                    "count 0");
        EXPECT_CALL(call(import, ctx, SLOTS + 2, slots, pages, stride, status),
                    SSM_ERR_INVALID_ARGUMENT, "count 5");
        EXPECT_CALL(call(import, ctx, SLOTS, slots, pages, n - 8, status),
                    SSM_ERR_INVALID_ARGUMENT, "less than a page");
        EXPECT_CALL(call(import, ctx, 2, twice, pages, stride, status), SSM_ERR_INVALID_ARGUMENT,
                    "appears twice");
        EXPECT_CALL(call(import, ctx, 2, outside, pages, stride, status), SSM_ERR_SLOT_RANGE,
                    "outside the pool");
        EXPECT_CALL(call(import, ctx, 2, released, pages, stride, status),
                    SSM_ERR_SLOT_NOT_ACQUIRED, "not acquired");
        if (import)
            EXPECT_CALL(call(import, ctx, SLOTS, slots, pages, stride, NULL),
                        SSM_ERR_INVALID_ARGUMENT, "NULL status array");
        EXPECT_CALL(call(import, ctx, SLOTS, slots, pages + 4, stride, status),
                    SSM_ERR_INVALID_ARGUMENT, "multiples of 8 bytes");
        EXPECT_CALL(call(import, ctx, SLOTS, slots, pages, stride + 4, status),
                    SSM_ERR_INVALID_ARGUMENT, "multiples of 8 bytes");
        /* a slot in an open forward */
        ck_assert_int_eq(ssm_slot_acquire(ctx, &spare), SSM_OK);
        test_io io;
        test_io_make(&r, &s.m, SSM_DTYPE_BF16, 2, &io);
        ssm_batch b = {1, 2, &spare, NULL};
        ssm_ticket ticket = SSM_TICKET_INIT;
        ck_assert_int_eq(ssm_verify(ctx, 0, &b, &w.w, &io.io, &ticket, NULL), SSM_OK);
        EXPECT_CALL(call(import, ctx, 2, busy, pages, stride, status), SSM_ERR_VERIFY_PENDING,
                    "uncommitted verify");
        ck_assert_int_eq(ssm_forward_abort(ctx, &ticket, NULL), SSM_OK);
        ck_assert_int_eq(ssm_slot_release(ctx, spare), SSM_OK);
        test_io_free(&io);
        /* good arguments: this is no CUDA context */
        EXPECT_CALL(call(import, ctx, SLOTS, slots, pages, stride, status), SSM_ERR_UNSUPPORTED,
                    "need a CUDA context");
    }
    test_weights_free(&w);
    for (int k = 0; k < SLOTS; k++) {
        test_snapshot after;
        ck_assert_int_eq(test_snapshot_take(ctx, s.slots[k], &after), SSM_OK);
        ck_assert_msg(test_snapshot_equal(&before[k], &after), "slot %d changed", k);
        test_snapshot_free(&after);
        test_snapshot_free(&before[k]);
        ck_assert_int_eq(status[k], SENTINEL);
    }
    for (size_t i = 0; i < SLOTS * stride; i++)
        ck_assert_msg(pages[i] == 0, "byte %zu of the pages was written", i);
    free(buffer);
    ssm_ctx_destroy(ctx);
}
END_TEST

/* ------------------------------------------------------------ the judgement */

/* What the check kernel decides about `page` (its room `room` bytes) for a
 * context whose own page is `want`. */
static int32_t judge(const unsigned char *page, uint64_t room, const ssm_page_info *want)
{
    ssm_page_info got;
    uint64_t said = ssm_page_get64(page + SSM_PAGE_AT_PAYLOAD_BYTES);
    uint32_t crc = said <= room - SSM_PAGE_HEADER_BYTES
                       ? ssm_crc32c(page + SSM_PAGE_HEADER_BYTES, (size_t)said)
                       : 0;
    return ssm_page_check(page, want, room, crc, &got);
}

/* Rewrites a 32-bit header field and seals the header again. */
static void reseal(unsigned char *page, int at, uint32_t value)
{
    ssm_page_put32(page + at, value);
    ssm_page_header_seal(page);
}

/* The page of a fresh CPU context of other dims or dtype. */
static unsigned char *other_page(const ssm_model_dims *m, ssm_dtype state, size_t *n)
{
    test_rng r;
    test_rng_init(&r, 7);
    side s;
    open_side(&s, m, "native", state, 0, 0, &r);
    *n = ssm_page_bytes(s.ctx);
    unsigned char *page = page_of(&s, 0);
    ssm_ctx_destroy(s.ctx);
    return page;
}

#define JUDGE(page, room, want, reason)                                                        \
    do {                                                                                       \
        int32_t got_ = judge((page), (room), (want));                                          \
        ck_assert_msg(got_ == (reason), "%s: status %d, want %d (%s)", #reason, (int)got_,     \
                      (int)(reason), #page);                                                   \
    } while (0)

/* _i: GDN or KDA. */
START_TEST(page_judgement)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 700 + (uint64_t)_i);
    ssm_model_dims m = dims(_i);
    side whole;
    open_side(&whole, &m, "replay", SSM_DTYPE_F32, 0, 0, &r);
    size_t n = ssm_page_bytes(whole.ctx);
    ssm_page_info want;
    unsigned char header[SSM_PAGE_HEADER_BYTES];
    ssm_page_context_header(whole.ctx, &want, header);
    unsigned char *good = page_of(&whole, 1), *bad = malloc(n + 64);
    ck_assert_ptr_nonnull(bad);
    JUDGE(good, n, &want, SSM_PAGE_ACCEPTED);
    JUDGE(good, n + 64, &want, SSM_PAGE_ACCEPTED); /* a page shorter than its room */

    memcpy(bad, good, n);
    bad[3] ^= 0x20;
    JUDGE(bad, n, &want, SSM_PAGE_BAD_MAGIC);
    memcpy(bad, good, n);
    reseal(bad, SSM_PAGE_AT_VERSION, 2);
    JUDGE(bad, n, &want, SSM_PAGE_BAD_VERSION);
    memcpy(bad, good, n);
    reseal(bad, SSM_PAGE_AT_HEADER_BYTES, 128);
    JUDGE(bad, n, &want, SSM_PAGE_BAD_VERSION);
    for (int at = 16; at < SSM_PAGE_HEADER_BYTES; at += 13) { /* a flipped header byte */
        memcpy(bad, good, n);
        bad[at] ^= 0x04;
        JUDGE(bad, n, &want, SSM_PAGE_HEADER_CHECKSUM);
    }
    memcpy(bad, good, n);
    reseal(bad, SSM_PAGE_AT_LAYERS, 0);
    JUDGE(bad, n, &want, SSM_PAGE_MALFORMED);
    memcpy(bad, good, n);
    reseal(bad, SSM_PAGE_AT_STATE_DTYPE, 9);
    JUDGE(bad, n, &want, SSM_PAGE_MALFORMED);
    memcpy(bad, good, n);
    reseal(bad, SSM_PAGE_AT_HEAD_END, 3); /* not a whole key-head group */
    JUDGE(bad, n, &want, SSM_PAGE_MALFORMED);
    memcpy(bad, good, n);
    ssm_page_put64(bad + SSM_PAGE_AT_PAYLOAD_BYTES, want.payload_bytes - 8);
    ssm_page_header_seal(bad);
    JUDGE(bad, n, &want, SSM_PAGE_BAD_LENGTH);
    JUDGE(good, n - 8, &want, SSM_PAGE_BAD_LENGTH); /* does not fit its room */
    memcpy(bad, good, n);
    bad[SSM_PAGE_HEADER_BYTES + (n - SSM_PAGE_HEADER_BYTES) / 2] ^= 0x10;
    JUDGE(bad, n, &want, SSM_PAGE_PAYLOAD_CHECKSUM);
    memcpy(bad, good, n);
    bad[n - 1] ^= 0x80;
    JUDGE(bad, n, &want, SSM_PAGE_PAYLOAD_CHECKSUM);
    if (m.has_lower_bound) {
        memcpy(bad, good, n);
        reseal(bad, SSM_PAGE_AT_LOWER_BOUND, ssm_f32_bits(-4.0f));
        JUDGE(bad, n, &want, SSM_PAGE_BAD_MODEL);
    }

    ssm_model_dims other = m;
    other.value_dim += 8;
    size_t other_n;
    unsigned char *foreign = other_page(&other, SSM_DTYPE_F32, &other_n);
    JUDGE(foreign, other_n, &want, SSM_PAGE_BAD_MODEL);
    JUDGE(foreign, n, &want, SSM_PAGE_BAD_MODEL); /* judged before its size */
    free(foreign);
    foreign = other_page(&m, SSM_DTYPE_BF16, &other_n);
    JUDGE(foreign, other_n, &want, SSM_PAGE_BAD_DTYPE);
    free(foreign);

    /* ranks: each takes its heads from the whole page, and its own page;
     * neither takes the other's, nor the whole context a rank's */
    side rank[2];
    ssm_page_info rank_want[2];
    unsigned char *rank_page[2];
    for (int k = 0; k < 2; k++) {
        open_side(&rank[k], &m, modes[k], SSM_DTYPE_F32, 2 * k, 2, &r);
        ssm_page_context_header(rank[k].ctx, &rank_want[k], header);
        rank_page[k] = page_of(&rank[k], 0);
        JUDGE(good, n, &rank_want[k], SSM_PAGE_ACCEPTED);
        JUDGE(rank_page[k], ssm_page_bytes(rank[k].ctx), &rank_want[k], SSM_PAGE_ACCEPTED);
        JUDGE(rank_page[k], ssm_page_bytes(rank[k].ctx), &want, SSM_PAGE_BAD_HEADS);
    }
    JUDGE(rank_page[0], ssm_page_bytes(rank[0].ctx), &rank_want[1], SSM_PAGE_BAD_HEADS);
    JUDGE(good, ssm_page_bytes(rank[0].ctx), &rank_want[0], SSM_PAGE_BAD_LENGTH);
    for (int k = 0; k < 2; k++) {
        free(rank_page[k]);
        ssm_ctx_destroy(rank[k].ctx);
    }
    free(bad);
    free(good);
    ssm_ctx_destroy(whole.ctx);
}
END_TEST

/* The seal kernel's header: the context's, payload checksum filled in,
 * sealed, is the host page's header byte for byte. _i: mode. */
START_TEST(sealed_header)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 800 + (uint64_t)_i);
    ssm_model_dims m = dims(_i % 2);
    for (int slice = 0; slice < 2; slice++) {
        side s;
        open_side(&s, &m, modes[_i], _i % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, 2 * slice,
                  2 * slice, &r);
        unsigned char *page = page_of(&s, 2), header[SSM_PAGE_HEADER_BYTES];
        ssm_page_info info;
        ssm_page_context_header(s.ctx, &info, header);
        ck_assert_uint_eq(info.page_bytes, ssm_page_bytes(s.ctx));
        ssm_page_put32(header + SSM_PAGE_AT_PAYLOAD_CRC,
                       ssm_crc32c(page + SSM_PAGE_HEADER_BYTES, (size_t)info.payload_bytes));
        ssm_page_header_seal(header);
        ck_assert_msg(memcmp(header, page, SSM_PAGE_HEADER_BYTES) == 0,
                      "the sealed header differs from the host page's");
        free(page);
        ssm_ctx_destroy(s.ctx);
    }
}
END_TEST

/* ------------------------------------------------------------ views */

/* The canonical form of a context of dims `d` gathered from a page payload
 * by a view's rules (plugin_v1.h), into `out` laid out as the context's
 * own payload. */
static void gather(const ssm_model_dims *d, ssm_dtype sd, ssm_dtype ad,
                   const ssm_page_view_v1 *view, unsigned char *out)
{
    const int64_t a = (int64_t)ssm_dtype_size(ad), s = (int64_t)ssm_dtype_size(sd);
    const int64_t D = ssm_conv_channels(d), hk = (int64_t)d->heads * d->key_dim;
    const int64_t conv = (int64_t)(d->conv_width - 1) * D * a;
    const int64_t state = (int64_t)d->value_heads * d->value_dim * d->key_dim * s;
    for (int32_t l = 0; l < d->layers; l++) {
        const unsigned char *layer = view->payload + (uint64_t)l * view->layer_bytes;
        unsigned char *o = out + l * (conv + state);
        for (int32_t r = 0; r < d->conv_width - 1; r++)
            for (int64_t c = 0; c < D; c++) {
                int p = c < hk ? 0 : c < 2 * hk ? 1 : 2;
                int64_t at = view->part_at[p] + c - p * hk;
                memcpy(o + (r * D + c) * a, layer + (r * view->row_channels + at) * a,
                       (size_t)a);
            }
        memcpy(o + conv, layer + view->state_at, (size_t)state);
    }
}

static ssm_page_view_v1 view_of(const ssm_page_info *page, const ssm_page_info *want,
                                unsigned char *payload)
{
    ssm_page_cut cut;
    ssm_page_cut_of(page, want, &cut);
    ssm_page_view_v1 v = {payload, cut.big_layer, cut.big_state_at, cut.big_row,
                          {cut.part_big[0], cut.part_big[1], cut.part_big[2]}};
    return v;
}

/* _i: GDN or KDA, state dtype. */
START_TEST(views_take_heads)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 900 + (uint64_t)_i);
    ssm_model_dims m = dims(_i % 2);
    ssm_dtype sd = _i / 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    side whole;
    open_side(&whole, &m, "native", sd, 0, 0, &r);
    size_t n = ssm_page_bytes(whole.ctx);
    unsigned char *page = page_of(&whole, 1), header[SSM_PAGE_HEADER_BYTES];
    ssm_page_info page_info, want;
    ck_assert_int_eq(ssm_page_inspect(page, n, &page_info), SSM_OK);
    /* a page of the context's own heads: the view is the identity */
    ssm_page_context_header(whole.ctx, &want, header);
    unsigned char *got = malloc(n);
    ck_assert_ptr_nonnull(got);
    ssm_page_view_v1 v = view_of(&page_info, &want, page + SSM_PAGE_HEADER_BYTES);
    gather(&m, sd, SSM_DTYPE_BF16, &v, got);
    ck_assert(memcmp(got, page + SSM_PAGE_HEADER_BYTES, n - SSM_PAGE_HEADER_BYTES) == 0);
    /* ranks of 2 value heads each: their views of the whole page */
    for (int32_t first = 0; first < m.value_heads; first += 2) {
        side rank;
        open_side(&rank, &m, "compact", sd, first, 2, &r);
        size_t rn = ssm_page_bytes(rank.ctx), written = 0;
        unsigned char *slice = malloc(rn);
        ck_assert_ptr_nonnull(slice);
        ck_assert_int_eq(ssm_page_slice(page, n, first, first + 2, slice, rn, &written), SSM_OK);
        ck_assert_uint_eq(written, rn);
        ssm_page_context_header(rank.ctx, &want, header);
        v = view_of(&page_info, &want, page + SSM_PAGE_HEADER_BYTES);
        memset(got, 0, n);
        gather(&rank.m, sd, SSM_DTYPE_BF16, &v, got);
        ck_assert_msg(memcmp(got, slice + SSM_PAGE_HEADER_BYTES, rn - SSM_PAGE_HEADER_BYTES) == 0,
                      "the view of heads [%d, %d) gathers another payload than the slice's",
                      (int)first, (int)first + 2);
        free(slice);
        ssm_ctx_destroy(rank.ctx);
    }
    free(got);
    free(page);
    ssm_ctx_destroy(whole.ctx);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("device pages (host side)");
    TCase *tc = tcase_create("device pages");
    tcase_add_loop_test(tc, host_checks, 0, 3);
    tcase_add_loop_test(tc, page_judgement, 0, 2);
    tcase_add_loop_test(tc, sealed_header, 0, 3);
    tcase_add_loop_test(tc, views_take_heads, 0, 4);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
