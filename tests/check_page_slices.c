/* Tensor-parallel head slices of pages (docs/pages.md): a context of the
 * whole model and `tp` rank contexts, each holding value heads [h0, h1)
 * (ssm_config.head_slice) with the rank's channels of every tensor.
 *
 * - A whole page imports into every rank: each takes its heads, and its own
 *   export equals ssm_page_slice of the whole page, byte for byte.
 * - The ranks then run on with their channels of the same inputs (decodes
 *   and a continued prefill), in other modes than the whole context: their
 *   outputs are the whole context's heads [h0, h1), bit for bit (every
 *   value head's recurrence reads only its own channels).
 * - The ranks' pages, merged in any order, equal the whole context's page.
 * - A change of degree (2 to 1, 1 to 2, 4 to 2, 2 to 4): the old ranks'
 *   pages, merged or sliced to the new ranks' heads, carry on in other
 *   modes with the whole context's outputs, bit for bit.
 * - Refused with the slot untouched: another rank's page; merging
 *   overlapping pages, pages with a gap, pages of another model; slices off
 *   a key-head group; contexts whose slice is not whole groups. */
#include <stdlib.h>
#include <string.h>

#include "tests/runner.h"
#include "tests/testutil.h"

static const char *const modes[] = {"native", "compact", "replay"};

#define MAX_TP 4

typedef struct rank {
    ssm_model_dims m;
    int32_t h0, h1, k0, k1; /* value and key heads held */
    ssm_ctx *ctx;
    int32_t slot;
    float *conv_weight, *conv_bias, *a_log, *dt_bias; /* per layer, the rank's rows */
} rank;

typedef struct world {
    test_rng rng;
    ssm_model_dims m;
    ssm_dtype state, act;
    int32_t tp, group;
    ssm_ctx *whole;
    int32_t slot;
    test_weights *w; /* per layer */
    rank ranks[MAX_TP];
    int32_t mode;
} world;

/* The channels of x a rank reads, in its own order: q and k of its key
 * heads, v of its value heads. Writes the whole-model index of each of the
 * rank's D_r channels. */
static void rank_channels(const world *w, const rank *r, int64_t *index)
{
    int64_t K = w->m.key_dim, V = w->m.value_dim, H = w->m.heads, n = 0;
    for (int64_t c = r->k0 * K; c < r->k1 * K; c++)
        index[n++] = c;
    for (int64_t c = r->k0 * K; c < r->k1 * K; c++)
        index[n++] = H * K + c;
    for (int64_t c = r->h0 * V; c < r->h1 * V; c++)
        index[n++] = 2 * H * K + c;
}

/* Element `i` of a buffer of dtype t, copied to element `j` of another. */
static void copy_element(void *dst, int64_t j, const void *src, int64_t i, ssm_dtype t)
{
    size_t es = ssm_dtype_size(t);
    memcpy((char *)dst + j * (int64_t)es, (const char *)src + i * (int64_t)es, es);
}

/* `tp` rank contexts of the world's model, rank i in mode
 * modes[(first_mode + i) % 3], with the rank's rows of the weights. */
static void open_ranks(world *w, int32_t tp, int first_mode)
{
    w->tp = tp;
    int32_t HV = w->m.value_heads, per = HV / tp, K = w->m.key_dim, W = w->m.conv_width;
    for (int32_t i = 0; i < tp; i++) {
        rank *r = &w->ranks[i];
        r->h0 = i * per;
        r->h1 = r->h0 + per;
        r->k0 = r->h0 / w->group;
        r->k1 = r->h1 / w->group;
        r->m = w->m;
        r->m.value_heads = per;
        r->m.heads = per / w->group;
        ssm_config rc;
        test_config(&rc, &r->m, modes[(first_mode + i) % 3], w->state, w->act, 2, 3);
        rc.head_slice = (ssm_head_slice){w->m.heads, HV, r->h0};
        ck_assert_msg(ssm_ctx_create(&rc, &r->ctx) == SSM_OK, "%s", ssm_last_error());
        ck_assert_int_eq(ssm_slot_acquire(r->ctx, &r->slot), SSM_OK);
        int64_t D = ssm_conv_channels(&r->m), gate = ssm_gate_width(&r->m) / r->m.value_heads;
        int64_t *index = malloc(sizeof(int64_t) * (size_t)D);
        r->conv_weight = malloc(sizeof(float) * (size_t)(w->m.layers * D * W));
        r->conv_bias = malloc(sizeof(float) * (size_t)(w->m.layers * D));
        r->a_log = malloc(sizeof(float) * (size_t)(w->m.layers * per));
        r->dt_bias = malloc(sizeof(float) * (size_t)(w->m.layers * per * K));
        ck_assert(index && r->conv_weight && r->conv_bias && r->a_log && r->dt_bias);
        rank_channels(w, r, index);
        for (int32_t l = 0; l < w->m.layers; l++) {
            const test_weights *tw = &w->w[l];
            for (int64_t d = 0; d < D; d++) {
                memcpy(r->conv_weight + (l * D + d) * W, tw->conv_weight + index[d] * W,
                       sizeof(float) * (size_t)W);
                r->conv_bias[l * D + d] = tw->conv_bias[index[d]];
            }
            memcpy(r->a_log + l * per, tw->a_log + r->h0, sizeof(float) * (size_t)per);
            memcpy(r->dt_bias + l * per * gate, tw->dt_bias + r->h0 * gate,
                   sizeof(float) * (size_t)(per * gate));
        }
        free(index);
    }
}

static void close_ranks(world *w)
{
    for (int32_t i = 0; i < w->tp; i++) {
        rank *r = &w->ranks[i];
        ssm_ctx_destroy(r->ctx);
        free(r->conv_weight);
        free(r->conv_bias);
        free(r->a_log);
        free(r->dt_bias);
    }
    w->tp = 0;
}

/* The whole context (in modes[mode]) and its weights, with `group` value
 * heads per key head (4 x group value heads), no ranks yet. */
static void open_whole(world *w, uint64_t salt, int32_t group, ssm_model_kind kind,
                       ssm_dtype state, int mode)
{
    memset(w, 0, sizeof *w);
    test_rng_init(&w->rng, test_seed() ^ salt * 0x9e3779b97f4a7c15ull);
    w->group = group;
    w->m = (ssm_model_dims){kind, 2, 4, 4 * group, 16, 8, 4, 0, 0.0f};
    w->state = state;
    w->act = SSM_DTYPE_BF16;
    w->mode = mode;
    ssm_config c;
    test_config(&c, &w->m, modes[mode], state, w->act, 2, 3);
    ck_assert_msg(ssm_ctx_create(&c, &w->whole) == SSM_OK, "%s", ssm_last_error());
    ck_assert_int_eq(ssm_slot_acquire(w->whole, &w->slot), SSM_OK);
    w->w = calloc((size_t)w->m.layers, sizeof *w->w);
    for (int32_t l = 0; l < w->m.layers; l++)
        test_weights_make(&w->rng, &w->m, 1, &w->w[l]);
}

/* variant: group 1 or 2, tp 2 or 4, GDN or KDA, fp32 or bf16 state. */
static void open_world(world *w, int variant)
{
    open_whole(w, (uint64_t)(variant + 5), 1 + variant % 2,
               variant / 4 % 2 ? SSM_MODEL_KDA : SSM_MODEL_GDN,
               variant / 8 % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, variant % 3);
    open_ranks(w, variant / 2 % 2 ? 4 : 2, w->mode + 1);
}

static ssm_layer_weights rank_weights(const world *w, const rank *r, int32_t l)
{
    int64_t D = ssm_conv_channels(&r->m), per = r->m.value_heads;
    int64_t gate = ssm_gate_width(&r->m) / per;
    ssm_layer_weights lw = {r->conv_weight + l * D * w->m.conv_width, r->conv_bias + l * D,
                            r->a_log + l * per, r->dt_bias + l * per * gate};
    return lw;
}

static void close_world(world *w)
{
    close_ranks(w);
    for (int32_t l = 0; l < w->m.layers; l++)
        test_weights_free(&w->w[l]);
    free(w->w);
    ssm_ctx_destroy(w->whole);
}

/* A rank's channels of n tokens of the whole model's inputs; out zeroed. */
static test_io rank_io(world *w, const rank *r, const test_io *io, int64_t n)
{
    test_io o;
    test_io_make(&w->rng, &r->m, w->act, n, &o);
    int64_t D = ssm_conv_channels(&r->m), Dw = ssm_conv_channels(&w->m);
    int64_t G = ssm_gate_width(&r->m), Gw = ssm_gate_width(&w->m), gate = G / r->m.value_heads;
    int64_t *index = malloc(sizeof(int64_t) * (size_t)D);
    ck_assert_ptr_nonnull(index);
    rank_channels(w, r, index);
    for (int64_t t = 0; t < n; t++) {
        for (int64_t d = 0; d < D; d++)
            copy_element(o.x, t * D + d, io->x, t * Dw + index[d], w->act);
        for (int64_t g = 0; g < G; g++)
            copy_element(o.gate, t * G + g, io->gate, t * Gw + r->h0 * gate + g, w->act);
        for (int64_t h = 0; h < r->m.value_heads; h++)
            copy_element(o.beta, t * r->m.value_heads + h, io->beta,
                         t * w->m.value_heads + r->h0 + h, w->act);
    }
    memset(o.out, 0, (size_t)(n * r->m.value_heads * r->m.value_dim) * ssm_dtype_size(w->act));
    free(index);
    return o;
}

/* One step (prefill of n tokens, or a decode) of the whole context and, with
 * `ranks`, of every rank, on the same inputs; each rank's outputs must be the
 * whole context's heads [h0, h1) bit for bit. */
static void step_all(world *w, int prefill, int64_t n, int ranks)
{
    size_t es = ssm_dtype_size(w->act);
    int64_t V = w->m.value_dim, HV = w->m.value_heads;
    for (int32_t l = 0; l < w->m.layers; l++) {
        test_io io;
        test_io_make(&w->rng, &w->m, w->act, n, &io);
        int32_t offsets[2] = {0, (int32_t)n};
        ssm_prefill_batch pb = {1, &w->slot, offsets, (int32_t)n, NULL, NULL};
        ssm_batch db = {1, 1, &w->slot, NULL};
        ck_assert_msg((prefill ? ssm_prefill(w->whole, l, &pb, &w->w[l].w, &io.io, NULL)
                               : ssm_decode(w->whole, l, &db, &w->w[l].w, &io.io, NULL)) == SSM_OK,
                      "%s", ssm_last_error());
        for (int32_t i = 0; ranks && i < w->tp; i++) {
            rank *r = &w->ranks[i];
            test_io ro = rank_io(w, r, &io, n);
            ssm_layer_weights lw = rank_weights(w, r, l);
            ssm_prefill_batch rpb = {1, &r->slot, offsets, (int32_t)n, NULL, NULL};
            ssm_batch rdb = {1, 1, &r->slot, NULL};
            ck_assert_msg((prefill ? ssm_prefill(r->ctx, l, &rpb, &lw, &ro.io, NULL)
                                   : ssm_decode(r->ctx, l, &rdb, &lw, &ro.io, NULL)) == SSM_OK,
                          "%s", ssm_last_error());
            int64_t per = r->m.value_heads;
            for (int64_t t = 0; t < n; t++)
                ck_assert_msg(memcmp((char *)ro.out + t * per * V * (int64_t)es,
                                     (char *)io.out + (t * HV + r->h0) * V * (int64_t)es,
                                     (size_t)(per * V) * es) == 0,
                              "%s, layer %d token %lld: rank %d's outputs (heads [%d, %d)) "
                              "differ from the whole model's",
                              prefill ? "prefill" : "decode", l, (long long)t, i, r->h0, r->h1);
            test_io_free(&ro);
        }
        test_io_free(&io);
    }
}

/* A context's page, allocated. */
static unsigned char *page_of(ssm_ctx *ctx, int32_t slot, size_t *bytes)
{
    *bytes = ssm_page_bytes(ctx);
    unsigned char *p = malloc(*bytes);
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(ssm_slot_export_page(ctx, slot, p, *bytes) == SSM_OK, "%s", ssm_last_error());
    return p;
}

/* _i: group 1 or 2, tp 2 or 4, GDN or KDA, fp32 or bf16 state. */
START_TEST(ranks_follow_the_whole_model)
{
    world w;
    open_world(&w, _i);
    /* a prompt into the whole context only: the ranks get it from its page */
    step_all(&w, 1, 5 + 60 * (_i % 2), 0);
    size_t whole_bytes;
    unsigned char *whole = page_of(w.whole, w.slot, &whole_bytes);
    for (int32_t i = 0; i < w.tp; i++) {
        rank *r = &w.ranks[i];
        ck_assert_msg(ssm_slot_import_page(r->ctx, r->slot, whole, whole_bytes) == SSM_OK, "%s",
                      ssm_last_error());

        size_t bytes, sliced_bytes = 0;
        unsigned char *mine = page_of(r->ctx, r->slot, &bytes);
        unsigned char *sliced = malloc(bytes);
        ck_assert_ptr_nonnull(sliced);
        ck_assert_msg(ssm_page_slice(whole, whole_bytes, r->h0, r->h1, sliced, bytes,
                                     &sliced_bytes) == SSM_OK,
                      "%s", ssm_last_error());
        ck_assert_msg(sliced_bytes == bytes && memcmp(mine, sliced, bytes) == 0,
                      "rank %d's page after importing the whole page is not its slice", i);
        free(mine);
        free(sliced);
    }
    free(whole);
    for (int k = 0; k < 3; k++)
        step_all(&w, 0, 1, 1);
    step_all(&w, 1, 20, 1);
    step_all(&w, 0, 1, 1);

    /* The ranks' pages, merged from the last rank to the first. */
    whole = page_of(w.whole, w.slot, &whole_bytes);
    const void *pages[MAX_TP];
    size_t sizes[MAX_TP];
    for (int32_t i = 0; i < w.tp; i++)
        pages[w.tp - 1 - i] = page_of(w.ranks[i].ctx, w.ranks[i].slot, &sizes[w.tp - 1 - i]);
    unsigned char *merged = malloc(whole_bytes);
    size_t merged_bytes = 0;
    ck_assert_ptr_nonnull(merged);
    ck_assert_msg(ssm_page_merge(pages, sizes, w.tp, merged, whole_bytes, &merged_bytes) ==
                      SSM_OK,
                  "%s", ssm_last_error());
    ck_assert_msg(merged_bytes == whole_bytes && memcmp(merged, whole, whole_bytes) == 0,
                  "the merged ranks' pages differ from the whole context's page");
    /* overlap: rank 0 twice; a gap: without the second rank */
    const void *twice[2] = {pages[w.tp - 1], pages[w.tp - 1]};
    size_t twice_bytes[2] = {sizes[w.tp - 1], sizes[w.tp - 1]};
    ck_assert_int_eq(ssm_page_merge(twice, twice_bytes, 2, merged, whole_bytes, NULL),
                     SSM_ERR_PAGE_INVALID);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "overlap"));
    if (w.tp == 4) { /* ranks 0 and 2 */
        const void *gap[2] = {pages[3], pages[1]};
        size_t gap_bytes[2] = {sizes[3], sizes[1]};
        ck_assert_int_eq(ssm_page_merge(gap, gap_bytes, 2, merged, whole_bytes, NULL),
                         SSM_ERR_PAGE_INVALID);
        ck_assert_ptr_nonnull(strstr(ssm_last_error(), "gap"));
    }
    /* another rank's page into rank 0: refused, the slot unchanged */
    test_snapshot before, after;
    ck_assert_int_eq(test_snapshot_take(w.ranks[0].ctx, w.ranks[0].slot, &before), SSM_OK);
    ck_assert_int_eq(ssm_slot_import_page(w.ranks[0].ctx, w.ranks[0].slot, pages[0], sizes[0]),
                     SSM_ERR_PAGE_INVALID);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "value heads"));
    ck_assert_int_eq(test_snapshot_take(w.ranks[0].ctx, w.ranks[0].slot, &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a refused import changed the slot");
    test_snapshot_free(&before);
    test_snapshot_free(&after);
    /* rank 0's page (heads [0, per)) into the whole context: refused, the
     * slot unchanged */
    ck_assert_int_eq(test_snapshot_take(w.whole, w.slot, &before), SSM_OK);
    ck_assert_int_eq(ssm_slot_import_page(w.whole, w.slot, pages[w.tp - 1], sizes[w.tp - 1]),
                     SSM_ERR_PAGE_INVALID);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "value heads"));
    ck_assert_int_eq(test_snapshot_take(w.whole, w.slot, &after), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&before, &after), "a refused import changed the slot");
    test_snapshot_free(&before);
    test_snapshot_free(&after);
    /* slices off the key-head groups: both ends, the first, the end */
    if (w.group == 2) {
        ck_assert_int_eq(ssm_page_slice(whole, whole_bytes, 1, 3, merged, whole_bytes, NULL),
                         SSM_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(ssm_page_slice(whole, whole_bytes, 1, 4, merged, whole_bytes, NULL),
                         SSM_ERR_INVALID_ARGUMENT);
        ck_assert_int_eq(ssm_page_slice(whole, whole_bytes, 0, 3, merged, whole_bytes, NULL),
                         SSM_ERR_INVALID_ARGUMENT);
    }
    ck_assert_int_eq(ssm_page_slice(whole, whole_bytes, 0, w.m.value_heads + w.group, merged,
                                    whole_bytes, NULL),
                     SSM_ERR_INVALID_ARGUMENT);
    for (int32_t i = 0; i < w.tp; i++)
        free((void *)pages[i]);
    free(merged);
    free(whole);
    close_world(&w);
}
END_TEST

/* A hand-off between tensor-parallel degrees: ranks at degree p run a
 * prompt and decodes, export their pages and go; ranks at degree q, in
 * other modes, import what the pages give their heads (merged where a new
 * rank holds several old ones' heads, sliced where it holds part of one)
 * and run on. _i: (p, q) in (2, 1), (1, 2), (4, 2), (2, 4); group 1 or 2;
 * GDN or KDA; fp32 or bf16 state. */
START_TEST(degree_change_keeps_outputs)
{
    static const int32_t degrees[4][2] = {{2, 1}, {1, 2}, {4, 2}, {2, 4}};
    const int32_t p = degrees[_i % 4][0], q = degrees[_i % 4][1];
    world w;
    open_whole(&w, (uint64_t)(_i + 101), 1 + _i / 4 % 2,
               _i / 8 % 2 ? SSM_MODEL_KDA : SSM_MODEL_GDN,
               _i / 16 % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, _i % 3);
    open_ranks(&w, p, _i % 3 + 1);
    step_all(&w, 1, 9 + 60 * (_i % 2), 1);
    step_all(&w, 0, 1, 1);
    step_all(&w, 0, 1, 1);

    const void *pages[MAX_TP];
    size_t sizes[MAX_TP];
    int32_t first[MAX_TP], end[MAX_TP];
    for (int32_t i = 0; i < p; i++) {
        pages[i] = page_of(w.ranks[i].ctx, w.ranks[i].slot, &sizes[i]);
        first[i] = w.ranks[i].h0;
        end[i] = w.ranks[i].h1;
    }
    close_ranks(&w);
    open_ranks(&w, q, _i % 3 + 2);
    for (int32_t j = 0; j < q; j++) {
        rank *r = &w.ranks[j];
        size_t bytes = ssm_page_bytes(r->ctx), written = 0;
        unsigned char *mine = malloc(bytes);
        ck_assert_ptr_nonnull(mine);
        const void *parts[MAX_TP];
        size_t part_sizes[MAX_TP];
        int32_t count = 0, holder = -1;
        for (int32_t i = 0; i < p; i++) {
            if (first[i] >= r->h0 && end[i] <= r->h1) {
                parts[count] = pages[i];
                part_sizes[count++] = sizes[i];
            }
            if (first[i] <= r->h0 && end[i] >= r->h1)
                holder = i;
        }
        if (count > 1)
            ck_assert_msg(ssm_page_merge(parts, part_sizes, count, mine, bytes, &written) ==
                              SSM_OK,
                          "%s", ssm_last_error());
        else
            ck_assert_msg(ssm_page_slice(pages[holder], sizes[holder], r->h0, r->h1, mine, bytes,
                                         &written) == SSM_OK,
                          "%s", ssm_last_error());
        ck_assert_int_eq(written, bytes);
        ck_assert_msg(ssm_slot_import_page(r->ctx, r->slot, mine, bytes) == SSM_OK, "%s",
                      ssm_last_error());
        free(mine);
    }
    for (int32_t i = 0; i < p; i++)
        free((void *)pages[i]);
    step_all(&w, 0, 1, 1);
    step_all(&w, 1, 20, 1);
    step_all(&w, 0, 1, 1);

    /* the new ranks' pages, merged, are the whole context's page */
    size_t whole_bytes, merged_bytes = 0;
    unsigned char *whole = page_of(w.whole, w.slot, &whole_bytes);
    unsigned char *merged = malloc(whole_bytes);
    ck_assert_ptr_nonnull(merged);
    for (int32_t j = 0; j < q; j++)
        pages[j] = page_of(w.ranks[j].ctx, w.ranks[j].slot, &sizes[j]);
    ck_assert_msg(ssm_page_merge(pages, sizes, q, merged, whole_bytes, &merged_bytes) == SSM_OK,
                  "%s", ssm_last_error());
    ck_assert_msg(merged_bytes == whole_bytes && memcmp(merged, whole, whole_bytes) == 0,
                  "degree %d to %d: the new ranks' pages differ from the whole context's", p, q);
    for (int32_t j = 0; j < q; j++)
        free((void *)pages[j]);
    free(merged);
    free(whole);
    close_world(&w);
}
END_TEST

/* Pages of different models or dtypes do not merge: _i picks what differs
 * (value_dim, KDA's lower_bound, the state dtype). */
START_TEST(merge_refuses_another_model)
{
    ssm_model_dims a = {SSM_MODEL_GDN, 1, 2, 2, 16, 8, 4, 0, 0.0f}, b;
    ssm_dtype sb = _i == 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    if (_i == 1)
        a = (ssm_model_dims){SSM_MODEL_KDA, 1, 2, 2, 16, 8, 4, 1, -5.0f};
    b = a;
    if (_i == 0)
        b.value_dim = 16;
    else if (_i == 1)
        b.lower_bound = -3.0f;
    ssm_config ca, cb;
    test_config(&ca, &a, "native", SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 0);
    test_config(&cb, &b, "native", sb, SSM_DTYPE_F32, 1, 0);
    ca.head_slice = (ssm_head_slice){4, 4, 0};
    cb.head_slice = (ssm_head_slice){4, 4, 2};
    ssm_ctx *x, *y;
    int32_t sx, sy;
    ck_assert_msg(ssm_ctx_create(&ca, &x) == SSM_OK, "%s", ssm_last_error());
    ck_assert_msg(ssm_ctx_create(&cb, &y) == SSM_OK, "%s", ssm_last_error());
    ck_assert_int_eq(ssm_slot_acquire(x, &sx), SSM_OK);
    ck_assert_int_eq(ssm_slot_acquire(y, &sy), SSM_OK);
    size_t bx, by;
    unsigned char *px = page_of(x, sx, &bx), *py = page_of(y, sy, &by);
    const void *pages[2] = {px, py};
    size_t sizes[2] = {bx, by};
    unsigned char out[1 << 12];
    ck_assert_int_eq(ssm_page_merge(pages, sizes, 2, out, sizeof out, NULL),
                     SSM_ERR_PAGE_INVALID);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "another model"));
    free(px);
    free(py);
    ssm_ctx_destroy(x);
    ssm_ctx_destroy(y);
}
END_TEST

/* A context's slice must be whole key-head groups inside the model. */
START_TEST(config_refuses_bad_slices)
{
    ssm_model_dims m = {SSM_MODEL_GDN, 1, 1, 2, 16, 8, 4, 0, 0.0f}; /* group 2 */
    const struct {
        ssm_head_slice slice;
        const char *message;
    } bad[] = {
        {{2, 4, 1}, "head slice"},  /* off the group */
        {{2, 4, 4}, "head slice"},  /* past the model */
        {{4, 4, 0}, "head slice"},  /* the model's group is 1, the context's 2 */
        {{0, 4, 0}, "head slice"},  /* no key heads */
        {{2, 4, -2}, "first_value_head = -2 is out of range"},
        {{2, 4, 2147483646}, "first_value_head = 2147483646 is out of range"},
        {{2048, 4096, 0}, "model_heads = 2048 is out of range"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ssm_config c;
        test_config(&c, &m, "native", SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 0);
        c.head_slice = bad[k].slice;
        ssm_ctx *ctx = NULL;
        ck_assert_msg(ssm_ctx_create(&c, &ctx) == SSM_ERR_CONFIG,
                      "slice {%d, %d, %d} was accepted", bad[k].slice.heads,
                      bad[k].slice.value_heads, bad[k].slice.first);
        ck_assert_ptr_null(ctx);
        ck_assert_msg(strstr(ssm_last_error(), bad[k].message) != NULL, "'%s' does not say '%s'",
                      ssm_last_error(), bad[k].message);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("page slices");
    TCase *tc = tcase_create("tensor parallel");
    tcase_add_loop_test(tc, ranks_follow_the_whole_model, 0, 16);
    tcase_add_loop_test(tc, degree_change_keeps_outputs, 0, 32);
    tcase_add_loop_test(tc, merge_refuses_another_model, 0, 3);
    tcase_add_test(tc, config_refuses_bad_slices);
    suite_add_tcase(s, tc);
    return s;
}
