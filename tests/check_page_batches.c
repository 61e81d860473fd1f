/* Batched page transfers (docs/pages.md): ssm_slots_export_pages and
 * ssm_slots_import_pages on CPU contexts.
 *
 * - Four slots with different states, exported in one call from every mode
 *   and imported in one call into every mode, in another slot order: each
 *   target slot equals its source bit for bit.
 * - One corrupt page among four: the import names it and changes no slot.
 * - A slot named twice, a short stride, a slot not acquired: refused, no
 *   slot changed. */
#include <stdlib.h>
#include <string.h>

#include "tests/runner.h"
#include "tests/testutil.h"

static const char *const modes[] = {"native", "compact", "replay"};

#define SLOTS 4

typedef struct side {
    ssm_ctx *ctx;
    int32_t slots[SLOTS];
} side;

static ssm_model_dims dims(int kda)
{
    ssm_model_dims m = {kda ? SSM_MODEL_KDA : SSM_MODEL_GDN, 2, 2, 4, 16, 8, 4, 0, 0.0f};
    return m;
}

static void open_side(side *s, const ssm_model_dims *m, const char *mode, ssm_dtype state)
{
    ssm_config c;
    test_config(&c, m, mode, state, SSM_DTYPE_BF16, SLOTS + 1, 3);
    ck_assert_msg(ssm_ctx_create(&c, &s->ctx) == SSM_OK, "%s", ssm_last_error());
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_int_eq(ssm_slot_acquire(s->ctx, &s->slots[k]), SSM_OK);
}

/* A prompt of 3 + 9 k tokens into slot k, every layer. */
static void fill(side *s, const ssm_model_dims *m, test_rng *r)
{
    ck_assert_msg(test_prefill_prompts(s->ctx, s->slots, SLOTS, m, r) == SSM_OK, "%s",
                  ssm_last_error());
}

static void snapshots(const side *s, test_snapshot *out)
{
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_int_eq(test_snapshot_take(s->ctx, s->slots[k], &out[k]), SSM_OK);
}

static void free_snapshots(test_snapshot *s)
{
    for (int32_t k = 0; k < SLOTS; k++)
        test_snapshot_free(&s[k]);
}

/* _i: source mode, target mode, GDN or KDA, fp32 or bf16 state. */
START_TEST(batches_move_every_slot)
{
    const char *from = modes[_i % 3], *to = modes[_i / 3 % 3];
    ssm_model_dims m = dims(_i / 9 % 2);
    ssm_dtype state = _i / 18 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 11) * 0x9e3779b97f4a7c15ull);
    side a, b;
    open_side(&a, &m, from, state);
    open_side(&b, &m, to, state);
    fill(&a, &m, &r);
    fill(&b, &m, &r); /* something to overwrite */
    size_t stride = ssm_page_bytes(a.ctx) + 40; /* pages need not be packed */
    unsigned char *pages = calloc(SLOTS, stride);
    ck_assert_ptr_nonnull(pages);
    ck_assert_msg(ssm_slots_export_pages(a.ctx, SLOTS, a.slots, pages, stride) == SSM_OK, "%s",
                  ssm_last_error());
    test_snapshot src[SLOTS], dst[SLOTS], before[SLOTS], after[SLOTS];
    snapshots(&a, src);

    /* refusals first: none may change a slot of b */
    snapshots(&b, before);
    int32_t reversed[SLOTS], twice[SLOTS];
    for (int32_t k = 0; k < SLOTS; k++) {
        reversed[k] = b.slots[SLOTS - 1 - k];
        twice[k] = b.slots[k == SLOTS - 1 ? 0 : k];
    }
    ck_assert_int_eq(ssm_slots_import_pages(b.ctx, SLOTS, twice, pages, stride),
                     SSM_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "appears twice"));
    ck_assert_int_eq(ssm_slots_import_pages(b.ctx, SLOTS, reversed, pages, 16),
                     SSM_ERR_INVALID_ARGUMENT);
    unsigned char *corrupt = malloc(SLOTS * stride);
    ck_assert_ptr_nonnull(corrupt);
    memcpy(corrupt, pages, SLOTS * stride);
    corrupt[2 * stride + 200] ^= 0x10; /* a payload byte of page 2 */
    ck_assert_int_eq(ssm_slots_import_pages(b.ctx, SLOTS, reversed, corrupt, stride),
                     SSM_ERR_PAGE_INVALID);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "page 2"));
    int32_t released = reversed[3];
    ck_assert_int_eq(ssm_slot_release(b.ctx, released), SSM_OK);
    ck_assert_int_eq(ssm_slots_import_pages(b.ctx, SLOTS, reversed, pages, stride),
                     SSM_ERR_SLOT_NOT_ACQUIRED);
    ck_assert_int_eq(ssm_slot_acquire(b.ctx, &reversed[3]), SSM_OK); /* any free slot */
    ck_assert_int_eq(test_snapshot_take(b.ctx, reversed[3], &after[3]), SSM_OK);
    for (int32_t k = 0; k < SLOTS - 1; k++) {
        ck_assert_int_eq(test_snapshot_take(b.ctx, reversed[k], &after[k]), SSM_OK);
        ck_assert_msg(test_snapshot_equal(&after[k], &before[SLOTS - 1 - k]),
                      "a refused batch changed slot %d", (int)reversed[k]);
    }
    free_snapshots(before);
    free_snapshots(after);

    ck_assert_msg(ssm_slots_import_pages(b.ctx, SLOTS, reversed, pages, stride) == SSM_OK, "%s",
                  ssm_last_error());
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_int_eq(test_snapshot_take(b.ctx, reversed[k], &dst[k]), SSM_OK);
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_msg(test_snapshot_equal(&dst[k], &src[k]),
                      "%s -> %s: slot %d of the target differs from slot %d of the source", from,
                      to, (int)reversed[k], (int)a.slots[k]);
    free_snapshots(src);
    free_snapshots(dst);
    free(corrupt);
    free(pages);
    ssm_ctx_destroy(a.ctx);
    ssm_ctx_destroy(b.ctx);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("page batches");
    TCase *tc = tcase_create("batches");
    tcase_add_loop_test(tc, batches_move_every_slot, 0, 36);
    suite_add_tcase(s, tc);
    return s;
}
