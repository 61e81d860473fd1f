/* State pages in a session: a slot's page moved to another slot of the same
 * context or of the peer (another mode), one at a time or batched, and pages
 * saved as checkpoints and restored later. Every page is checked to be the
 * slot's canonical export byte for byte, and a page re-exported after its
 * import to be the same bytes (pages are mode-independent, bit for bit). */
#include <stdlib.h>
#include <string.h>

#include "tests/stress/stress.h"

#define HEADER_BYTES 96 /* docs/pages.md, format version 1 */

/* The page's payload is the slot's canonical form, layer after layer. */
static void check_payload(st_session *s, int ci, int32_t slot, const unsigned char *page)
{
    ssm_page_info info;
    ST_EXPECT(s, ssm_page_inspect(page, s->page_bytes, &info), SSM_OK);
    if (info.page_bytes != s->page_bytes || info.head_first != 0 ||
        info.head_end != s->m.value_heads)
        st_fail(s, "%s slot %d: page of %llu bytes, heads [%d, %d); want %zu, [0, %d)",
                s->c[ci].mode, slot, (unsigned long long)info.page_bytes, info.head_first,
                info.head_end, s->page_bytes, s->m.value_heads);
    test_snapshot snap;
    ST_EXPECT(s, test_snapshot_take(s->c[ci].ctx, slot, &snap), SSM_OK);
    const unsigned char *p = page + HEADER_BYTES;
    for (int32_t l = 0; l < s->m.layers; l++) {
        if (memcmp(p, snap.conv[l], s->window_bytes) ||
            memcmp(p + s->window_bytes, snap.state[l], s->state_bytes))
            st_fail(s, "%s slot %d: the page's layer %d is not the slot's canonical export",
                    s->c[ci].mode, slot, l);
        p += s->window_bytes + s->state_bytes;
    }
    test_snapshot_free(&snap);
}

/* Re-exports `slot` after an import of `page` and wants the same bytes. */
static void check_roundtrip(st_session *s, int ci, int32_t slot, const unsigned char *page)
{
    unsigned char *again = malloc(s->page_bytes);
    ST_EXPECT(s, ssm_slot_export_page(s->c[ci].ctx, slot, again, s->page_bytes), SSM_OK);
    if (memcmp(again, page, s->page_bytes) != 0)
        st_fail(s, "%s slot %d: the page exported after importing one differs from it",
                s->c[ci].mode, slot);
    free(again);
}

/* An idle slot of ci other than `not` (-1: any), acquiring one when there
 * is none; -1 when the pool has none to give. */
static int32_t idle_or_acquire(st_session *s, int ci, int32_t not)
{
    for (int tries = 0; tries < 8; tries++) {
        int32_t slot = st_pick_idle(s, ci);
        if (slot >= 0 && slot != not)
            return slot;
    }
    if (st_pick_free(s, ci) < 0)
        return -1;
    op_acquire(s, ci);
    for (int32_t i = 0; i < s->cap; i++)
        if (s->c[ci].acquired[i] && st_busy_in(s, ci, i) < 0 && i != not)
            return i;
    return -1;
}

int op_page_move(st_session *s)
{
    int a = test_rng_int(&s->rng, 0, 1), b = test_rng_int(&s->rng, 0, 1);
    int32_t src = idle_or_acquire(s, a, -1);
    int32_t dst = src < 0 ? -1 : idle_or_acquire(s, b, a == b ? src : -1);
    s->op_name = a == b ? "page move (same context)" : "page move (other mode)";
    if (src < 0 || dst < 0)
        return 0;
    size_t slack = (size_t)test_rng_int(&s->rng, 0, 64);
    unsigned char *page = malloc(s->page_bytes + slack);
    ST_EXPECT(s, ssm_slot_export_page(s->c[a].ctx, src, page, s->page_bytes + slack), SSM_OK);
    check_payload(s, a, src, page);
    ST_EXPECT(s, ssm_slot_import_page(s->c[b].ctx, dst, page, s->page_bytes), SSM_OK);
    st_model_save(s, a, src, s->lane_scratch);
    st_model_load(s, b, dst, s->lane_scratch);
    check_roundtrip(s, b, dst, page);
    free(page);
    s->count->page_moves++;
    return 1;
}

int op_pages_batch(st_session *s)
{
    s->op_name = "pages (batched)";
    int a = test_rng_int(&s->rng, 0, 1), b = 1 - a;
    int idle_a[ST_MAX_CAP], idle_b[ST_MAX_CAP];
    int32_t na = st_idle_slots(s, a, idle_a), nb = st_idle_slots(s, b, idle_b);
    int32_t most = na < nb ? na : nb;
    if (most == 0)
        return 0;
    int32_t count = test_rng_int(&s->rng, 1, most), from[ST_MAX_CAP], to[ST_MAX_CAP];
    test_pick_rows(&s->rng, idle_a, s->cap, count, 0, count, from);
    test_pick_rows(&s->rng, idle_b, s->cap, count, 0, count, to);
    size_t stride = s->page_bytes + (size_t)test_rng_int(&s->rng, 0, 3) * 8;
    unsigned char *pages = calloc((size_t)count, stride);
    ST_EXPECT(s, ssm_slots_export_pages(s->c[a].ctx, count, from, pages, stride), SSM_OK);
    for (int32_t k = 0; k < count; k++)
        check_payload(s, a, from[k], pages + (size_t)k * stride);
    ST_EXPECT(s, ssm_slots_import_pages(s->c[b].ctx, count, to, pages, stride), SSM_OK);
    for (int32_t k = 0; k < count; k++) {
        st_model_save(s, a, from[k], s->lane_scratch);
        st_model_load(s, b, to[k], s->lane_scratch);
        check_roundtrip(s, b, to[k], pages + (size_t)k * stride);
    }
    free(pages);
    s->count->page_moves += count;
    return 1;
}

int op_page_save(st_session *s)
{
    s->op_name = "page save";
    int ci = test_rng_int(&s->rng, 0, 1);
    int32_t slot = st_pick_idle(s, ci);
    if (slot < 0)
        return 0;
    st_page *p = &s->pages[test_rng_int(&s->rng, 0, ST_PAGES - 1)];
    if (!p->used) {
        p->page = malloc(s->page_bytes);
        p->lane = malloc(st_model_lane_bytes(s));
        p->used = 1;
    }
    ST_EXPECT(s, ssm_slot_export_page(s->c[ci].ctx, slot, p->page, s->page_bytes), SSM_OK);
    check_payload(s, ci, slot, p->page);
    st_model_save(s, ci, slot, p->lane);
    return 1;
}

int op_page_restore(st_session *s)
{
    s->op_name = "page restore";
    st_page *p = &s->pages[test_rng_int(&s->rng, 0, ST_PAGES - 1)];
    int ci = test_rng_int(&s->rng, 0, 1);
    int32_t slot = st_pick_idle(s, ci);
    if (!p->used || slot < 0)
        return 0;
    ST_EXPECT(s, ssm_slot_import_page(s->c[ci].ctx, slot, p->page, s->page_bytes), SSM_OK);
    st_model_load(s, ci, slot, p->lane);
    check_roundtrip(s, ci, slot, p->page);
    s->count->page_moves++;
    return 1;
}

void st_pages_free(st_session *s)
{
    for (int i = 0; i < ST_PAGES; i++) {
        free(s->pages[i].page);
        free(s->pages[i].lane);
        memset(&s->pages[i], 0, sizeof s->pages[i]);
    }
}
