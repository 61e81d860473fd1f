/* State pages (core/pages/page.c, docs/pages.md) and slot copies on CPU contexts:
 * a copy equals its source and leaves it alone; a page exported
 * in any mode (replay with history pending) imports into any other and the
 * two slots then agree bit for bit, in their exports and in the next
 * decode's outputs; exporting never changes the slot; every rejection (magic, version, header or payload
 * corruption, truncation, bytes after the payload, a resealed header whose
 * field describes no page, another model or dtype) gives
 * SSM_ERR_PAGE_INVALID with a message naming it and leaves the slot as it
 * was; ssm_page_inspect refuses the same pages in the same words. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/pages/format.h"
#include "kernels/crc32c.h"
#include "tests/runner.h"
#include "tests/testutil.h"

static const char *const modes[] = {"native", "compact", "replay"};
#define MODES 3

/* A CPU context of `mode` and the weights its steps use (one seed: the
 * same weights in every context of a test). */
typedef struct page_ctx {
    ssm_ctx *ctx;
    ssm_model_dims m;
    ssm_dtype state, act;
    test_weights tw[2];
    int32_t slot;
} page_ctx;

static void open_ctx_act(page_ctx *p, const ssm_model_dims *m, const char *mode, ssm_dtype state,
                         ssm_dtype act, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->m = *m;
    p->state = state;
    p->act = act;
    ssm_config c;
    test_config(&c, m, mode, state, p->act, 4, 3);
    ck_assert_int_eq(ssm_ctx_create(&c, &p->ctx), SSM_OK);
    test_rng r;
    test_rng_init(&r, seed);
    for (int32_t l = 0; l < m->layers; l++)
        test_weights_make(&r, m, 1, &p->tw[l]);
    ck_assert_int_eq(ssm_slot_acquire(p->ctx, &p->slot), SSM_OK);
}

static void open_ctx(page_ctx *p, const ssm_model_dims *m, const char *mode, ssm_dtype state,
                     uint64_t seed)
{
    open_ctx_act(p, m, mode, state, SSM_DTYPE_F32, seed);
}

static void close_ctx(page_ctx *p)
{
    for (int32_t l = 0; l < p->m.layers; l++)
        test_weights_free(&p->tw[l]);
    ssm_ctx_destroy(p->ctx);
}

/* A prefill of n tokens (n > 0) or one decode (n == 0) of every layer of
 * p's slot, inputs from seed; outputs of the last layer into *out when not
 * NULL (owned by the caller). */
static void run(page_ctx *p, int32_t n, uint64_t seed, void **out, size_t *out_bytes)
{
    test_rng r;
    test_rng_init(&r, seed);
    int32_t tokens = n > 0 ? n : 1, offsets[2] = {0, tokens};
    for (int32_t l = 0; l < p->m.layers; l++) {
        test_io io;
        test_io_make(&r, &p->m, p->act, tokens, &io);
        if (n > 0) {
            ssm_prefill_batch b = {1, &p->slot, offsets, tokens, NULL, NULL};
            ck_assert_int_eq(ssm_prefill(p->ctx, l, &b, &p->tw[l].w, &io.io, NULL), SSM_OK);
        } else {
            ssm_batch b = {0};
            b.rows = 1;
            b.tokens = 1;
            b.slots = &p->slot;
            ck_assert_int_eq(ssm_decode(p->ctx, l, &b, &p->tw[l].w, &io.io, NULL), SSM_OK);
        }
        if (out && l == p->m.layers - 1) {
            *out_bytes = (size_t)tokens * (size_t)p->m.value_heads * (size_t)p->m.value_dim *
                         ssm_dtype_size(p->act);
            *out = malloc(*out_bytes);
            memcpy(*out, io.out, *out_bytes);
        }
        test_io_free(&io);
    }
}

/* One MTP round of every layer (T = 4) committing `accepted` tokens: in
 * replay the committed records stay in the ring as history. */
/* Verifies 4 tokens of p's slot on layers [0, layers) under *ticket. */
static void verify_layers(page_ctx *p, int32_t layers, uint64_t seed, ssm_ticket *ticket)
{
    test_rng r;
    test_rng_init(&r, seed);
    ssm_batch b = {0};
    b.rows = 1;
    b.tokens = 4;
    b.slots = &p->slot;
    for (int32_t l = 0; l < layers; l++) {
        test_io io;
        test_io_make(&r, &p->m, p->act, 4, &io);
        ck_assert_int_eq(ssm_verify(p->ctx, l, &b, &p->tw[l].w, &io.io, ticket, NULL), SSM_OK);
        test_io_free(&io);
    }
}

static void round_of(page_ctx *p, int32_t accepted, uint64_t seed)
{
    ssm_ticket ticket = SSM_TICKET_INIT;
    verify_layers(p, p->m.layers, seed, &ticket);
    ck_assert_int_eq(ssm_commit(p->ctx, &ticket, &accepted, NULL), SSM_OK);
}

static void *export_page(page_ctx *p, size_t *bytes)
{
    *bytes = ssm_page_bytes(p->ctx);
    void *page = malloc(*bytes);
    ck_assert_ptr_nonnull(page);
    ck_assert_int_eq(ssm_slot_export_page(p->ctx, p->slot, page, *bytes), SSM_OK);
    return page;
}

static ssm_model_dims dims_of(test_rng *r, int kda)
{
    ssm_model_dims m;
    test_random_dims(r, kda ? SSM_MODEL_KDA : SSM_MODEL_GDN, 1, &m);
    m.layers = 2;
    return m;
}

START_TEST(crc32c_known_answer)
{
    ck_assert_uint_eq(ssm_crc32c("123456789", 9), 0xE3069283u);
    ck_assert_uint_eq(ssm_crc32c("", 0), 0u);
    ck_assert_uint_eq(ssm_crc32c_bitwise((const unsigned char *)"123456789", 9), 0xE3069283u);
}
END_TEST

/* The device's forms of the checksum (kernels/crc32c.h, run here on the
 * host): eight bytes at a time with the eight tables, and CRCs of pieces
 * combined by the shift rule, equal the byte-at-a-time CRC of random data
 * at every split, including empty pieces and odd lengths. */
START_TEST(crc32c_pieces_combine)
{
    static uint32_t tables[8][256];
    for (int k = 0; k < 8; k++)
        for (uint32_t b = 0; b < 256; b++)
            tables[k][b] = ssm_crc32c_slice_entry(k, b);
    test_rng r;
    test_rng_init(&r, test_seed() + 300);
    enum { N = 4096 };
    uint64_t words[N / 8];
    unsigned char *data = (unsigned char *)words;
    for (int i = 0; i < N; i++)
        data[i] = (unsigned char)test_rng_next(&r);
    for (int trial = 0; trial < 200; trial++) {
        size_t n = (size_t)test_rng_int(&r, 0, N);
        uint32_t want = ssm_crc32c_bitwise(data, n);
        size_t whole = n / 8 * 8;
        uint32_t c = ssm_crc32c_slice8((const uint32_t(*)[256])tables, SSM_CRC32C_PRESET, words,
                                       whole / 8);
        for (size_t i = whole; i < n; i++)
            c = (c >> 8) ^ tables[0][(c ^ data[i]) & 0xFF];
        ck_assert_uint_eq(c ^ SSM_CRC32C_PRESET, want);
        /* three pieces, any of them empty */
        size_t a = (size_t)test_rng_int(&r, 0, (int32_t)n);
        size_t b = (size_t)test_rng_int(&r, (int32_t)a, (int32_t)n);
        uint32_t left = ssm_crc32c(data, a), mid = ssm_crc32c(data + a, b - a),
                 right = ssm_crc32c(data + b, n - b);
        uint32_t got = ssm_crc32c_combine(ssm_crc32c_combine(left, mid, b - a), right, n - b);
        ck_assert_msg(got == want, "n %zu split at %zu and %zu: 0x%08x, want 0x%08x", n, a, b,
                      got, want);
    }
    /* an empty second piece changes nothing; shifts past 32 bits of length
     * compose: x^(8 (a + b)) = x^(8 a) x^(8 b) */
    ck_assert_uint_eq(ssm_crc32c_combine(0xE3069283u, 0, 0), 0xE3069283u);
    uint64_t big = 3ull << 33, part = 5ull << 31;
    ck_assert_uint_eq(ssm_crc32c_shift(big + part),
                      ssm_crc32c_multiply(ssm_crc32c_shift(big), ssm_crc32c_shift(part)));
}
END_TEST

/* The host's checksum, in both its forms (the processor's crc32 where it has
 * one, and the tables), equals the bit-by-bit CRC at every start offset and
 * length: the head up to an 8-byte boundary, no whole word, a long middle. */
START_TEST(crc32c_host_any_alignment)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 301);
    enum { N = 1 << 16 };
    unsigned char *data = malloc(N + 8);
    ck_assert_ptr_nonnull(data);
    for (int i = 0; i < N + 8; i++)
        data[i] = (unsigned char)test_rng_next(&r);
    for (int offset = 0; offset < 8; offset++)
        for (size_t n = 0; n <= 40; n++) {
            uint32_t want = ssm_crc32c_bitwise(data + offset, n);
            ck_assert_uint_eq(ssm_crc32c(data + offset, n), want);
            ck_assert_uint_eq(ssm_crc32c_portable(data + offset, n), want);
        }
    for (int trial = 0; trial < 20; trial++) {
        int offset = test_rng_int(&r, 0, 7);
        size_t n = (size_t)test_rng_int(&r, 0, N);
        uint32_t want = ssm_crc32c_bitwise(data + offset, n);
        ck_assert_msg(ssm_crc32c(data + offset, n) == want, "offset %d, %zu bytes", offset, n);
        ck_assert_msg(ssm_crc32c_portable(data + offset, n) == want, "tables: offset %d, %zu bytes",
                      offset, n);
    }
    free(data);
}
END_TEST

/* _i: source mode, target mode, model kind, state dtype. */
START_TEST(round_trip_across_modes)
{
    const char *from = modes[_i % MODES], *to = modes[(_i / MODES) % MODES];
    int kda = (_i / (MODES * MODES)) % 2;
    ssm_dtype state = (_i / (MODES * MODES * 2)) % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    test_rng r;
    test_rng_init(&r, test_seed() + (uint64_t)_i);
    ssm_model_dims m = dims_of(&r, kda);
    uint64_t weights = test_rng_next(&r);
    page_ctx a, b;
    open_ctx(&a, &m, from, state, weights);
    open_ctx(&b, &m, to, state, weights);
    run(&a, 5, 1, NULL, NULL);
    run(&a, 0, 2, NULL, NULL);
    round_of(&a, 2, 3); /* replay: history pending at the export */
    test_snapshot before, after, imported;
    ck_assert_int_eq(test_snapshot_take(a.ctx, a.slot, &before), SSM_OK);
    size_t bytes;
    void *page = export_page(&a, &bytes);
    ck_assert_int_eq(test_snapshot_take(a.ctx, a.slot, &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "export changed the %s slot", from);

    ssm_page_info info;
    ck_assert_int_eq(ssm_page_inspect(page, bytes, &info), SSM_OK);
    ck_assert_uint_eq(info.format_version, SSM_PAGE_FORMAT_VERSION);
    ck_assert_int_eq(info.model.layers, m.layers);
    ck_assert_int_eq(info.head_first, 0);
    ck_assert_int_eq(info.head_end, m.value_heads);
    ck_assert_uint_eq(info.page_bytes, bytes);

    run(&b, 3, 9, NULL, NULL); /* something to replace */
    ck_assert_int_eq(ssm_slot_import_page(b.ctx, b.slot, page, bytes), SSM_OK);
    ck_assert_int_eq(test_snapshot_take(b.ctx, b.slot, &imported), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &imported), "%s -> %s: the import differs", from,
                  to);
    void *out_a, *out_b;
    size_t out_bytes;
    run(&a, 0, 4, &out_a, &out_bytes);
    run(&b, 0, 4, &out_b, &out_bytes);
    ck_assert_msg(memcmp(out_a, out_b, out_bytes) == 0,
                  "%s -> %s: the next decode's outputs differ", from, to);
    free(out_a);
    free(out_b);
    free(page);
    test_snapshot_free(&before);
    test_snapshot_free(&after);
    test_snapshot_free(&imported);
    close_ctx(&a);
    close_ctx(&b);
}
END_TEST

/* One way to spoil a page, the words its message must hold, and whether
 * the page itself is refused (ssm_page_inspect, with the same message) or
 * only its import into a context of another model. */
typedef struct spoil {
    const char *name;
    const char *message;
    int page_refused;
} spoil;

static const spoil spoils[] = {
    {"bad magic", "bad magic", 1},
    {"another format version", "format version 2", 1},
    {"a flipped header byte", "header checksum", 1},
    {"a flipped payload byte", "payload checksum", 1},
    {"truncated payload", "truncated", 1},
    {"truncated header", "truncated", 1},
    /* resealed headers whose fields describe no page, and a page that runs on */
    {"bytes after the payload", "8 bytes after the page's payload", 1},
    {"a reserved byte", "reserved byte 86 is 0x01", 1},
    {"a lower bound on gdn", "has_lower_bound 1 on a gdn model", 1},
    {"no layers", "layers 0 (allowed: 1..", 1},
    {"a payload length the dims do not give", "payload_bytes", 1},
    {"a head slice past the model", "head_end", 1},
    {"another layer count", "layers", 0},
    {"another state dtype", "state dtype", 0},
    /* one model field or dtype of the target differs, the rest as the page */
    {"another value_dim", "value_dim", 0},
    {"another model kind", "model kind", 0},
    {"another activation dtype", "activation dtype", 0},
    {"another lower_bound", "page has lower_bound", 0},
    {"another head count", "page has heads", 0},
    {"another key_dim", "key_dim", 0},
    {"another conv_width", "conv_width", 0},
};
#define SPOILS ((int)(sizeof spoils / sizeof spoils[0]))

/* _i: the spoil, then the target mode. */
START_TEST(rejections_leave_the_slot)
{
    const spoil *s = &spoils[_i % SPOILS];
    const char *mode = modes[(_i / SPOILS) % MODES];
    test_rng r;
    test_rng_init(&r, test_seed() + 100 + (uint64_t)_i);
    ssm_model_dims m = dims_of(&r, test_rng_int(&r, 0, 1));
    if (!strcmp(s->name, "another model kind"))
        m.has_lower_bound = 0; /* GDN has none */
    if (!strcmp(s->name, "a lower bound on gdn")) {
        m.kind = SSM_MODEL_GDN;
        m.has_lower_bound = 0;
    }
    if (!strcmp(s->name, "another lower_bound")) {
        m.kind = SSM_MODEL_KDA;
        m.has_lower_bound = 1;
        m.lower_bound = -5.0f;
    }
    uint64_t weights = test_rng_next(&r);
    page_ctx a, b;
    open_ctx(&a, &m, "native", SSM_DTYPE_F32, weights);
    run(&a, 4, 1, NULL, NULL);
    size_t bytes;
    unsigned char *page = export_page(&a, &bytes);
    page = realloc(page, bytes + 8); /* room to run on */
    ck_assert_ptr_nonnull(page);
    memset(page + bytes, 0, 8);
    ssm_model_dims target = m;
    ssm_dtype target_state = SSM_DTYPE_F32, target_act = SSM_DTYPE_F32;
    size_t given = bytes;
    if (!strcmp(s->name, "bad magic")) {
        page[0] ^= 0x20;
    } else if (!strcmp(s->name, "another format version")) {
        page[8] = 2;
    } else if (!strcmp(s->name, "a flipped header byte")) {
        page[24] ^= 1; /* the layer count, under the header's checksum */
    } else if (!strcmp(s->name, "a flipped payload byte")) {
        page[bytes - 1 - (size_t)test_rng_int(&r, 0, (int32_t)(bytes - 97))] ^= 0x10;
    } else if (!strcmp(s->name, "truncated payload")) {
        given = bytes - 1;
    } else if (!strcmp(s->name, "truncated header")) {
        given = 40;
    } else if (!strcmp(s->name, "bytes after the payload")) {
        given = bytes + 8;
    } else if (!strcmp(s->name, "a reserved byte")) {
        page[86] = 1;
        ssm_page_header_seal(page);
    } else if (!strcmp(s->name, "a lower bound on gdn")) {
        ssm_page_put32(page + SSM_PAGE_AT_HAS_LOWER_BOUND, 1);
        ssm_page_put32(page + SSM_PAGE_AT_LOWER_BOUND, ssm_f32_bits(-5.0f));
        ssm_page_header_seal(page);
    } else if (!strcmp(s->name, "no layers")) {
        ssm_page_put32(page + SSM_PAGE_AT_LAYERS, 0);
        ssm_page_header_seal(page);
    } else if (!strcmp(s->name, "a payload length the dims do not give")) {
        ssm_page_put64(page + SSM_PAGE_AT_PAYLOAD_BYTES, bytes - 96 + 8);
        ssm_page_header_seal(page);
        given = bytes + 8;
    } else if (!strcmp(s->name, "a head slice past the model")) {
        ssm_page_put32(page + SSM_PAGE_AT_HEAD_END, (uint32_t)m.value_heads + 1);
        ssm_page_header_seal(page);
    } else if (!strcmp(s->name, "another layer count")) {
        target.layers = 1;
    } else if (!strcmp(s->name, "another state dtype")) {
        target_state = SSM_DTYPE_BF16;
    } else if (!strcmp(s->name, "another value_dim")) {
        target.value_dim = m.value_dim == 8 ? 16 : 8;
    } else if (!strcmp(s->name, "another model kind")) {
        target.kind = m.kind == SSM_MODEL_KDA ? SSM_MODEL_GDN : SSM_MODEL_KDA;
    } else if (!strcmp(s->name, "another activation dtype")) {
        target_act = SSM_DTYPE_BF16;
    } else if (!strcmp(s->name, "another lower_bound")) {
        target.lower_bound = -3.0f;
    } else if (!strcmp(s->name, "another head count")) {
        target.heads = m.heads == 1 ? m.value_heads : 1; /* both divide value_heads */
    } else if (!strcmp(s->name, "another key_dim")) {
        target.key_dim = m.key_dim == 8 ? 16 : 8;
    } else {
        target.conv_width = m.conv_width == 2 ? 3 : 2;
    }
    open_ctx_act(&b, &target, mode, target_state, target_act, weights);
    run(&b, 3, 2, NULL, NULL);
    test_snapshot before, after;
    ck_assert_int_eq(test_snapshot_take(b.ctx, b.slot, &before), SSM_OK);
    ck_assert_int_eq(ssm_slot_import_page(b.ctx, b.slot, page, given), SSM_ERR_PAGE_INVALID);
    ck_assert_msg(strstr(ssm_last_error(), s->message) != NULL, "%s: message '%s'", s->name,
                  ssm_last_error());
    /* Inspect and import share one validator: the page itself refused by
     * both in the same words, or passed by inspect. */
    ssm_page_info info;
    if (s->page_refused) {
        ck_assert_int_eq(ssm_page_inspect(page, given, &info), SSM_ERR_PAGE_INVALID);
        ck_assert_msg(strstr(ssm_last_error(), s->message) != NULL,
                      "%s: inspect's message '%s'", s->name, ssm_last_error());
    } else {
        ck_assert_msg(ssm_page_inspect(page, given, &info) == SSM_OK, "%s: inspect: %s",
                      s->name, ssm_last_error());
    }
    ck_assert_int_eq(test_snapshot_take(b.ctx, b.slot, &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "%s changed the %s slot", s->name, mode);
    free(page);
    test_snapshot_free(&before);
    test_snapshot_free(&after);
    close_ctx(&a);
    close_ctx(&b);
}
END_TEST

/* _i: mode, model kind. */
START_TEST(slot_copy_matches)
{
    const char *mode = modes[_i % MODES];
    test_rng r;
    test_rng_init(&r, test_seed() + 300 + (uint64_t)_i);
    ssm_model_dims m = dims_of(&r, (_i / MODES) % 2);
    page_ctx a;
    open_ctx(&a, &m, mode, SSM_DTYPE_F32, test_rng_next(&r));
    run(&a, 6, 1, NULL, NULL);
    round_of(&a, 3, 2); /* replay: the copy folds this history, the source keeps it */
    int32_t src = a.slot, dst;
    ck_assert_int_eq(ssm_slot_acquire(a.ctx, &dst), SSM_OK);
    test_snapshot before, after, copy;
    ck_assert_int_eq(test_snapshot_take(a.ctx, src, &before), SSM_OK);
    ck_assert_int_eq(ssm_slot_copy(a.ctx, src, dst, NULL), SSM_OK);
    ck_assert_int_eq(ssm_slot_copy(a.ctx, src, src, NULL), SSM_OK);
    ck_assert_int_eq(test_snapshot_take(a.ctx, src, &after), SSM_OK);
    ck_assert_int_eq(test_snapshot_take(a.ctx, dst, &copy), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "%s: the copy changed its source", mode);
    ck_assert_msg(test_snapshot_equal(&before, &copy), "%s: the copy differs", mode);
    void *out_src, *out_dst;
    size_t out_bytes;
    run(&a, 0, 5, &out_src, &out_bytes);
    a.slot = dst;
    run(&a, 0, 5, &out_dst, &out_bytes);
    ck_assert_msg(memcmp(out_src, out_dst, out_bytes) == 0,
                  "%s: the next decode's outputs differ", mode);
    free(out_src);
    free(out_dst);
    test_snapshot_free(&before);
    test_snapshot_free(&after);
    test_snapshot_free(&copy);
    close_ctx(&a);
}
END_TEST

/* A copy refused for a pending verify or a free slot leaves the target. */
START_TEST(slot_copy_refusals)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 400);
    ssm_model_dims m = dims_of(&r, 0);
    page_ctx a;
    open_ctx(&a, &m, "compact", SSM_DTYPE_F32, 1);
    int32_t src = a.slot, dst, free_slot;
    ck_assert_int_eq(ssm_slot_acquire(a.ctx, &dst), SSM_OK);
    ck_assert_int_eq(ssm_slot_acquire(a.ctx, &free_slot), SSM_OK);
    ck_assert_int_eq(ssm_slot_release(a.ctx, free_slot), SSM_OK);
    run(&a, 4, 1, NULL, NULL);
    a.slot = dst;
    run(&a, 3, 2, NULL, NULL);
    test_snapshot before, after;
    ck_assert_int_eq(test_snapshot_take(a.ctx, dst, &before), SSM_OK);
    ck_assert_int_eq(ssm_slot_copy(a.ctx, free_slot, dst, NULL), SSM_ERR_SLOT_NOT_ACQUIRED);
    ck_assert_int_eq(ssm_slot_copy(a.ctx, src, 99, NULL), SSM_ERR_SLOT_RANGE);
    ck_assert_int_eq(ssm_slot_copy(NULL, src, dst, NULL), SSM_ERR_INVALID_ARGUMENT);
    /* a verify open over src */
    ssm_ticket ticket = SSM_TICKET_INIT;
    a.slot = src;
    verify_layers(&a, 1, 3, &ticket);
    ck_assert_int_eq(ssm_slot_copy(a.ctx, src, dst, NULL), SSM_ERR_VERIFY_PENDING);
    ck_assert_int_eq(ssm_slot_copy(a.ctx, dst, src, NULL), SSM_ERR_VERIFY_PENDING);
    ck_assert_int_eq(ssm_forward_abort(a.ctx, &ticket, NULL), SSM_OK);
    ck_assert_int_eq(test_snapshot_take(a.ctx, dst, &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a refused copy changed its target");
    test_snapshot_free(&before);
    test_snapshot_free(&after);
    close_ctx(&a);
}
END_TEST

/* _i: target mode. An import replaces a flagged slot's state and clears its
 * flags (docs/pages.md): a NaN input flags the slot, a clean page's import
 * leaves it and the context unflagged. */
START_TEST(import_clears_flags)
{
    const char *mode = modes[_i % MODES];
    test_rng r;
    test_rng_init(&r, test_seed() + 500 + (uint64_t)_i);
    ssm_model_dims m = dims_of(&r, _i % 2);
    uint64_t weights = test_rng_next(&r);
    page_ctx a, b;
    open_ctx(&a, &m, "native", SSM_DTYPE_F32, weights);
    open_ctx(&b, &m, mode, SSM_DTYPE_F32, weights);
    run(&a, 4, 1, NULL, NULL);
    size_t bytes;
    void *page = export_page(&a, &bytes);
    test_io io;
    test_io_make(&r, &m, b.act, 3, &io);
    ((float *)io.x)[test_rng_int(&r, 0, 2)] = NAN;
    int32_t offsets[2] = {0, 3};
    ssm_prefill_batch pb = {1, &b.slot, offsets, 3, NULL, NULL};
    ck_assert_int_eq(ssm_prefill(b.ctx, 0, &pb, &b.tw[0].w, &io.io, NULL), SSM_OK);
    test_io_free(&io);
    uint32_t flags = 0;
    ssm_ctx_report rep = {0, 0, 0};
    ck_assert_int_eq(ssm_slot_flags(b.ctx, b.slot, &flags), SSM_OK);
    ck_assert_msg(flags & SSM_FLAG_NONFINITE_INPUT, "%s: the NaN did not flag the slot", mode);
    ck_assert_int_eq(ssm_slot_import_page(b.ctx, b.slot, page, bytes), SSM_OK);
    ck_assert_int_eq(ssm_slot_flags(b.ctx, b.slot, &flags), SSM_OK);
    ck_assert_msg(flags == 0, "%s: the import left flags %#x", mode, flags);
    ck_assert_int_eq(ssm_ctx_status(b.ctx, &rep), SSM_OK);
    ck_assert_msg(rep.flags == 0 && rep.flagged_slots == 0 && rep.first_flagged == -1,
                  "%s: status flags %#x on %d slots after the import", mode, rep.flags,
                  rep.flagged_slots);
    free(page);
    close_ctx(&a);
    close_ctx(&b);
}
END_TEST

START_TEST(bad_calls)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 200);
    ssm_model_dims m = dims_of(&r, 0);
    page_ctx a;
    open_ctx(&a, &m, "native", SSM_DTYPE_F32, 1);
    size_t bytes = ssm_page_bytes(a.ctx);
    void *page = malloc(bytes);
    ck_assert_int_eq(ssm_slot_export_page(a.ctx, a.slot, page, bytes - 1),
                     SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_slot_export_page(a.ctx, 99, page, bytes), SSM_ERR_SLOT_RANGE);
    ck_assert_int_eq(ssm_slot_export_page(NULL, a.slot, page, bytes), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_page_inspect(NULL, bytes, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_page_read_header(NULL, bytes, NULL), SSM_ERR_INVALID_ARGUMENT);
    /* the header alone tells a reader how long the page is */
    ck_assert_int_eq(ssm_slot_export_page(a.ctx, a.slot, page, bytes), SSM_OK);
    ssm_page_info info;
    ck_assert_int_eq(ssm_page_read_header(page, 96, &info), SSM_OK);
    ck_assert_uint_eq(info.page_bytes, bytes);
    ck_assert_int_eq(ssm_page_read_header(page, 95, &info), SSM_ERR_PAGE_INVALID);
    ck_assert_int_eq(ssm_page_inspect(page, 96, &info), SSM_ERR_PAGE_INVALID);
    ck_assert_uint_eq(ssm_page_bytes(NULL), 0);
    int32_t other;
    ck_assert_int_eq(ssm_slot_acquire(a.ctx, &other), SSM_OK);
    ck_assert_int_eq(ssm_slot_export_page(a.ctx, a.slot, page, bytes), SSM_OK);
    ck_assert_int_eq(ssm_slot_release(a.ctx, other), SSM_OK);
    ck_assert_int_eq(ssm_slot_import_page(a.ctx, other, page, bytes), SSM_ERR_SLOT_NOT_ACQUIRED);
    free(page);
    close_ctx(&a);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("pages");
    TCase *tc = tcase_create("format");
    tcase_add_test(tc, crc32c_known_answer);
    tcase_add_test(tc, crc32c_pieces_combine);
    tcase_add_test(tc, crc32c_host_any_alignment);
    tcase_add_test(tc, bad_calls);
    suite_add_tcase(s, tc);

    tc = tcase_create("round trips");
    tcase_add_loop_test(tc, round_trip_across_modes, 0, MODES * MODES * 2 * 2);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("slot copy");
    tcase_add_loop_test(tc, slot_copy_matches, 0, MODES * 2);
    tcase_add_test(tc, slot_copy_refusals);
    tcase_add_loop_test(tc, import_clears_flags, 0, MODES * 2);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("rejections");
    tcase_add_loop_test(tc, rejections_leave_the_slot, 0, SPOILS * MODES);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
