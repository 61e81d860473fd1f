/* Allocation faults in the page transfers and slot calls (check_faults.c):
 * four slots with different states and their pages; for every fault of an
 * export, an import (one page, a batch, a whole-model page into a rank's
 * context), ssm_slot_copy, ssm_ctx_status and ssm_page_merge, every slot
 * still exports the page it did, and the context decodes as it did. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/faults/faults.h"

#define SLOTS 4

typedef struct pages_walk {
    ssm_ctx *ctx, *rank;
    int32_t slots[SLOTS], reversed[SLOTS], rank_slot;
    size_t bytes, stride, rank_bytes;
    unsigned char *pages;     /* the slots' pages, at stride */
    unsigned char *buf;       /* SLOTS pages of scratch */
    unsigned char *rank_page; /* the rank slot's page */
    unsigned char *halves[2]; /* page 0 sliced to value heads [0, 2) and [2, 4) */
    size_t half_bytes[2];
    faults_probe probe;
    unsigned char *expected, *got;
    const char *mode;
} pages_walk;

/* Prompts of 3 + 9 k tokens into slot k, every layer. */
static void fill(pages_walk *pw, const ssm_model_dims *m)
{
    test_rng r;
    test_rng_init(&r, 0xfa017 + (uint64_t)m->kind);
    ck_assert_msg(test_prefill_prompts(pw->ctx, pw->slots, SLOTS, m, &r) == SSM_OK, "%s",
                  ssm_last_error());
}

/* Whether `slot` of ctx exports exactly `page` (bytes long). */
static int slot_is(ssm_ctx *ctx, int32_t slot, const unsigned char *page, size_t bytes)
{
    unsigned char *now = malloc(bytes);
    ck_assert_ptr_nonnull(now);
    ck_assert_msg(ssm_slot_export_page(ctx, slot, now, bytes) == SSM_OK, "%s", ssm_last_error());
    int same = !memcmp(now, page, bytes);
    free(now);
    return same;
}

/* Every slot holds its page and the context decodes as it did. */
static void unchanged(pages_walk *pw, const char *after)
{
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_msg(slot_is(pw->ctx, pw->slots[k], pw->pages + k * pw->stride, pw->bytes),
                      "%s %s changed slot %d", pw->mode, after, (int)pw->slots[k]);
    ck_assert_msg(slot_is(pw->rank, pw->rank_slot, pw->rank_page, pw->rank_bytes),
                  "%s %s changed the rank's slot", pw->mode, after);
    faults_probe_run(&pw->probe, pw->ctx, pw->got);
    ck_assert_msg(!memcmp(pw->got, pw->expected, FAULTS_LAYERS * pw->probe.out_bytes),
                  "%s %s changed what the context decodes", pw->mode, after);
}

/* Puts every slot's page back. */
static void restore(pages_walk *pw)
{
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_msg(ssm_slot_import_page(pw->ctx, pw->slots[k], pw->pages + k * pw->stride,
                                           pw->bytes) == SSM_OK,
                      "%s", ssm_last_error());
    ck_assert_msg(ssm_slot_import_page(pw->rank, pw->rank_slot, pw->rank_page, pw->rank_bytes) ==
                      SSM_OK,
                  "%s", ssm_last_error());
}

static ssm_status export_page_run(void *arg)
{
    pages_walk *pw = arg;
    return ssm_slot_export_page(pw->ctx, pw->slots[0], pw->buf, pw->stride);
}

static void export_page_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    unchanged(pw, "ssm_slot_export_page");
    if (status == SSM_OK)
        ck_assert(!memcmp(pw->buf, pw->pages, pw->bytes));
}

static ssm_status export_pages_run(void *arg)
{
    pages_walk *pw = arg;
    return ssm_slots_export_pages(pw->ctx, SLOTS, pw->slots, pw->buf, pw->stride);
}

static void export_pages_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    unchanged(pw, "ssm_slots_export_pages");
    for (int32_t k = 0; k < SLOTS && status == SSM_OK; k++)
        ck_assert(!memcmp(pw->buf + k * pw->stride, pw->pages + k * pw->stride, pw->bytes));
}

static ssm_status import_page_run(void *arg)
{
    pages_walk *pw = arg;
    return ssm_slot_import_page(pw->ctx, pw->slots[1], pw->pages, pw->bytes);
}

static void import_page_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    if (status == SSM_OK) {
        ck_assert(slot_is(pw->ctx, pw->slots[1], pw->pages, pw->bytes));
        restore(pw);
    }
    unchanged(pw, "a failed ssm_slot_import_page");
}

static ssm_status import_slice_run(void *arg)
{
    pages_walk *pw = arg;
    return ssm_slot_import_page(pw->rank, pw->rank_slot, pw->pages, pw->bytes);
}

static void import_slice_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    if (status == SSM_OK) {
        ck_assert(slot_is(pw->rank, pw->rank_slot, pw->halves[1], pw->half_bytes[1]));
        restore(pw);
    }
    unchanged(pw, "a failed import of a whole page into a rank");
}

static ssm_status import_pages_run(void *arg)
{
    pages_walk *pw = arg;
    return ssm_slots_import_pages(pw->ctx, SLOTS, pw->reversed, pw->pages, pw->stride);
}

static void import_pages_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    if (status == SSM_OK) {
        for (int32_t k = 0; k < SLOTS; k++)
            ck_assert(slot_is(pw->ctx, pw->reversed[k], pw->pages + k * pw->stride, pw->bytes));
        restore(pw);
    }
    unchanged(pw, "a failed ssm_slots_import_pages");
}

static ssm_status copy_run(void *arg)
{
    pages_walk *pw = arg;
    return ssm_slot_copy(pw->ctx, pw->slots[0], pw->slots[3], NULL);
}

static void copy_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    if (status == SSM_OK) {
        ck_assert(slot_is(pw->ctx, pw->slots[3], pw->pages, pw->bytes));
        restore(pw);
    }
    unchanged(pw, "a failed ssm_slot_copy");
}

static ssm_status status_run(void *arg)
{
    pages_walk *pw = arg;
    ssm_ctx_report report;
    return ssm_ctx_status(pw->ctx, &report);
}

static ssm_status merge_run(void *arg)
{
    pages_walk *pw = arg;
    const void *halves[2] = {pw->halves[0], pw->halves[1]};
    return ssm_page_merge(halves, pw->half_bytes, 2, pw->buf, pw->stride, NULL);
}

static void merge_check(void *arg, ssm_status status)
{
    pages_walk *pw = arg;
    if (status == SSM_OK)
        ck_assert(!memcmp(pw->buf, pw->pages, pw->bytes));
    unchanged(pw, "ssm_page_merge");
}

static void unchanged_check(void *arg, ssm_status status)
{
    (void)status;
    unchanged(arg, "ssm_ctx_status");
}

static ssm_status list_run(void *arg)
{
    (void)arg;
    ssm_plugin_info infos[16];
    int32_t count = 0;
    return ssm_plugins_list(NULL, infos, 16, &count);
}

static void list_check(void *arg, ssm_status status)
{
    (void)arg, (void)status;
}

/* The context, its slots and pages, the rank's context and the slices. */
static void setup(pages_walk *pw, const char *mode, int kda)
{
    ssm_model_dims m = faults_dims(kda), rm = faults_rank_dims(kda);
    ssm_config c;
    test_config(&c, &m, mode, SSM_DTYPE_F32, SSM_DTYPE_BF16, SLOTS + 1, 3);
    ck_assert_msg(ssm_ctx_create(&c, &pw->ctx) == SSM_OK, "%s", ssm_last_error());
    test_config(&c, &rm, mode, SSM_DTYPE_F32, SSM_DTYPE_BF16, 2, 3);
    c.head_slice = (ssm_head_slice){m.heads, m.value_heads, 2};
    ck_assert_msg(ssm_ctx_create(&c, &pw->rank) == SSM_OK, "%s", ssm_last_error());
    for (int32_t k = 0; k < SLOTS; k++)
        ck_assert_int_eq(ssm_slot_acquire(pw->ctx, &pw->slots[k]), SSM_OK);
    for (int32_t k = 0; k < SLOTS; k++)
        pw->reversed[k] = pw->slots[SLOTS - 1 - k];
    ck_assert_int_eq(ssm_slot_acquire(pw->rank, &pw->rank_slot), SSM_OK);
    fill(pw, &m);
    pw->mode = mode;
    pw->bytes = ssm_page_bytes(pw->ctx);
    pw->stride = pw->bytes + 24;
    pw->rank_bytes = ssm_page_bytes(pw->rank);
    pw->pages = calloc(SLOTS, pw->stride);
    pw->buf = calloc(SLOTS, pw->stride);
    pw->rank_page = calloc(1, pw->rank_bytes);
    for (int h = 0; h < 2; h++)
        pw->halves[h] = calloc(1, pw->bytes);
    ck_assert(pw->pages && pw->buf && pw->rank_page && pw->halves[0] && pw->halves[1]);
    ck_assert_msg(ssm_slots_export_pages(pw->ctx, SLOTS, pw->slots, pw->pages, pw->stride) ==
                      SSM_OK,
                  "%s", ssm_last_error());
    /* the rank holds page 1's heads; the walk imports page 0 */
    ck_assert_int_eq(ssm_page_slice(pw->pages + pw->stride, pw->bytes, 2, 4, pw->rank_page,
                                    pw->rank_bytes, NULL),
                     SSM_OK);
    ck_assert_int_eq(
        ssm_slot_import_page(pw->rank, pw->rank_slot, pw->rank_page, pw->rank_bytes), SSM_OK);
    for (int h = 0; h < 2; h++)
        ck_assert_int_eq(ssm_page_slice(pw->pages, pw->bytes, 2 * h, 2 * h + 2, pw->halves[h],
                                        pw->bytes, &pw->half_bytes[h]),
                         SSM_OK);
    ck_assert_uint_eq(pw->half_bytes[1], pw->rank_bytes);
    faults_probe_make(&pw->probe, &m);
    pw->expected = malloc(FAULTS_LAYERS * pw->probe.out_bytes);
    pw->got = malloc(FAULTS_LAYERS * pw->probe.out_bytes);
    ck_assert(pw->expected && pw->got);
    faults_probe_run(&pw->probe, pw->ctx, pw->expected);
}

/* faults_walk for an operation that allocates: a walk that reaches no
 * allocation means the operation no longer allocates through the core's
 * counting allocator (core/faults.h), and would test nothing. */
static void walk_some(fault_op op, const char *what, ssm_status (*run)(void *arg),
                      void (*check)(void *arg, ssm_status status), void *arg)
{
    ck_assert_msg(faults_walk(op, what, run, check, arg) > 0,
                  "%s: no allocation failed; is it still allocating through core/faults.h?",
                  what);
}

void faults_pages_run(const char *mode, int kda)
{
    pages_walk pw = {0};
    int64_t start = ssm_fault_live();
    setup(&pw, mode, kda);
    printf("# pages of %s %s:\n", mode, kda ? "kda" : "gdn");
    int64_t live = ssm_fault_live();
    walk_some(OP_EXPORT_PAGE, "ssm_slot_export_page", export_page_run, export_page_check, &pw);
    walk_some(OP_EXPORT_PAGES, "ssm_slots_export_pages", export_pages_run, export_pages_check,
              &pw);
    walk_some(OP_IMPORT_PAGE, "ssm_slot_import_page", import_page_run, import_page_check, &pw);
    walk_some(OP_IMPORT_SLICE, "ssm_slot_import_page (slice)", import_slice_run,
              import_slice_check, &pw);
    walk_some(OP_IMPORT_PAGES, "ssm_slots_import_pages", import_pages_run, import_pages_check,
              &pw);
    /* the CPU modes' copy allocates nothing: the walk checks it succeeds */
    faults_walk(OP_SLOT_COPY, "ssm_slot_copy", copy_run, copy_check, &pw);
    walk_some(OP_CTX_STATUS, "ssm_ctx_status", status_run, unchanged_check, &pw);
    walk_some(OP_PAGE_MERGE, "ssm_page_merge", merge_run, merge_check, &pw);
    if (!strcmp(mode, "native") && !kda)
        walk_some(OP_PLUGINS_LIST, "ssm_plugins_list", list_run, list_check, &pw);
    ck_assert_int_eq(ssm_fault_live(), live);
    ssm_ctx_destroy(pw.ctx);
    ssm_ctx_destroy(pw.rank);
    ck_assert_int_eq(ssm_fault_live(), start); /* everything made is given back */
    faults_probe_free(&pw.probe);
    free(pw.pages);
    free(pw.buf);
    free(pw.rank_page);
    free(pw.halves[0]);
    free(pw.halves[1]);
    free(pw.expected);
    free(pw.got);
}
