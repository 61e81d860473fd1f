/* Fuzzing the page reader: ssm_page_inspect on arbitrary bytes,
 * ssm_slot_import_page into small CPU contexts of several models and modes,
 * ssm_page_slice and ssm_page_merge.
 *
 * Input: a flags byte (bit 0: rewrite both checksums first, so mutations of
 * the header get past them), then the page; bytes after the page (its header
 * says where it ends: ssm_page_read_header) choose the slice and may hold a
 * second page to merge. Every reader is given the page alone; given the
 * bytes after it too, ssm_page_inspect refuses them.
 * Invariants: a rejected import leaves the slot's exported page unchanged;
 * an accepted one re-exports to a valid page holding the same payload (or
 * the slice of it the context holds); slice and merge succeed exactly when
 * documented, and slicing a page in three and merging the parts back gives
 * the page's payload bit for bit. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tests/fuzz/fuzz_common.h"

enum { HEADER = 96 };

typedef struct page_ctx {
    ssm_ctx *ctx;
    int32_t slot;
    int32_t head_first, head_end; /* the value heads the context holds */
    uint8_t *reset_page;          /* the slot's export after a reset */
    int dirty;                    /* an import was accepted since the last reset */
} page_ctx;

enum { CONTEXTS = 5 };
static page_ctx contexts[CONTEXTS];

static uint8_t *export_copy(const page_ctx *c);

/* The contexts: tests/make_page.py's model in every mode, a tensor-parallel
 * rank of a bf16 model (value heads [2, 4) of 4), a bounded KDA in bf16. */
static void setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    ssm_model_dims gdn = {SSM_MODEL_GDN, 2, 1, 2, 8, 8, 4, 0, 0.0f};
    ssm_model_dims rank = {SSM_MODEL_GDN, 1, 1, 2, 4, 4, 3, 0, 0.0f};
    ssm_model_dims kda = {SSM_MODEL_KDA, 1, 1, 2, 4, 4, 2, 1, -5.0f};
    ssm_head_slice slice = {2, 4, 2};
    for (int i = 0; i < 3; i++)
        contexts[i] = (page_ctx){
            .ctx = fuzz_ctx(&gdn, fuzz_modes[i], SSM_DTYPE_F32, SSM_DTYPE_F32, 2, 1, NULL),
            .head_first = 0,
            .head_end = 2,
        };
    contexts[3] = (page_ctx){
        .ctx = fuzz_ctx(&rank, "native", SSM_DTYPE_BF16, SSM_DTYPE_F32, 2, 1, &slice),
        .head_first = 2,
        .head_end = 4,
    };
    contexts[4] = (page_ctx){
        .ctx = fuzz_ctx(&kda, "replay", SSM_DTYPE_BF16, SSM_DTYPE_BF16, 2, 1, NULL),
        .head_first = 0,
        .head_end = 2,
    };
    for (int i = 0; i < CONTEXTS; i++) {
        FUZZ_CHECK(ssm_slot_acquire(contexts[i].ctx, &contexts[i].slot) == SSM_OK);
        FUZZ_CHECK(ssm_slot_reset(contexts[i].ctx, contexts[i].slot, NULL) == SSM_OK);
        contexts[i].reset_page = export_copy(&contexts[i]);
    }
}

/* Little-endian fields of a page header. */
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Rewrites the payload checksum (when the declared payload is there) and
 * the header's (docs/pages.md: offsets 80 and 92). */
static void fix_checksums(uint8_t *page, size_t n)
{
    if (n < HEADER)
        return;
    uint64_t payload = get32(page + 72) | (uint64_t)get32(page + 76) << 32;
    if (payload <= n - HEADER)
        put32(page + 80, ssm_crc32c(page + HEADER, (size_t)payload));
    put32(page + 92, ssm_crc32c(page, 92));
}

/* An exported page of ctx's slot in a new buffer of exactly its size. */
static uint8_t *export_copy(const page_ctx *c)
{
    size_t bytes = ssm_page_bytes(c->ctx);
    uint8_t *page = malloc(bytes);
    FUZZ_CHECK(page != NULL);
    FUZZ_CHECK(ssm_slot_export_page(c->ctx, c->slot, page, bytes) == SSM_OK);
    return page;
}

/* `page` (valid) sliced to [first, end) in a new buffer of exactly its
 * size, or NULL when the slice is refused; *bytes gets the size. */
static uint8_t *slice_copy(const uint8_t *page, size_t n, int32_t first, int32_t end,
                           size_t *bytes)
{
    ssm_page_info info;
    FUZZ_CHECK(ssm_page_inspect(page, n, &info) == SSM_OK);
    uint8_t *out = malloc((size_t)info.page_bytes); /* a slice is never larger */
    FUZZ_CHECK(out != NULL);
    ssm_status status = ssm_page_slice(page, n, first, end, out, (size_t)info.page_bytes, bytes);
    FUZZ_CHECK(status == SSM_OK || status == SSM_ERR_INVALID_ARGUMENT);
    if (status != SSM_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* Imports the page into every context and checks what the slot then holds.
 * Each import starts from a reset slot, whose page is the same every time:
 * it is exported once (setup) and the slot is reset again only after an
 * import was accepted; a rejected import must leave exactly that page. */
static void check_imports(const uint8_t *page, size_t n, int page_ok, const ssm_page_info *info)
{
    for (int k = 0; k < CONTEXTS; k++) {
        page_ctx *c = &contexts[k];
        if (c->dirty) {
            FUZZ_CHECK(ssm_slot_reset(c->ctx, c->slot, NULL) == SSM_OK);
            c->dirty = 0;
        }
        ssm_status status = ssm_slot_import_page(c->ctx, c->slot, page, n);
        FUZZ_CHECK(status == SSM_OK || status == SSM_ERR_PAGE_INVALID);
        FUZZ_CHECK(page_ok || status != SSM_OK);
        uint8_t *after = export_copy(c);
        size_t bytes = ssm_page_bytes(c->ctx);
        if (status != SSM_OK) {
            FUZZ_CHECK(!memcmp(c->reset_page, after, bytes));
        } else {
            c->dirty = 1;
            ssm_page_info again;
            FUZZ_CHECK(ssm_page_inspect(after, bytes, &again) == SSM_OK);
            FUZZ_CHECK(info->head_first <= c->head_first && info->head_end >= c->head_end);
            size_t sliced_bytes = 0;
            uint8_t *sliced = slice_copy(page, n, c->head_first, c->head_end, &sliced_bytes);
            FUZZ_CHECK(sliced != NULL && sliced_bytes == bytes);
            FUZZ_CHECK(!memcmp(sliced + HEADER, after + HEADER, bytes - HEADER));
            free(sliced);
        }
        free(after);
    }
}

/* Merges `count` pages into a buffer of exactly the merged size; NULL when
 * refused, *status says why. */
static uint8_t *merge_copy(const uint8_t *const *pages, const size_t *sizes, int32_t count,
                           size_t capacity, ssm_status *status, size_t *bytes)
{
    uint8_t *out = malloc(capacity ? capacity : 1);
    FUZZ_CHECK(out != NULL);
    *status = ssm_page_merge((const void *const *)pages, sizes, count, out, capacity, bytes);
    if (*status != SSM_OK) {
        free(out);
        return NULL;
    }
    return out;
}

/* Slices the valid page at [first, end) as the trailer says and merges the
 * three parts back in the trailer's order. */
static void check_slice_merge(const uint8_t *page, size_t n, const ssm_page_info *info,
                              fuzz_in *trailer)
{
    int32_t hv = info->model.value_heads, group = hv / info->model.heads;
    uint8_t how = fuzz_u8(trailer);
    int32_t first = (int32_t)(fuzz_u8(trailer) % (hv + 2)) - 1;
    int32_t end = (int32_t)(fuzz_u8(trailer) % (hv + 2)) - 1;
    if (how & 1) {
        first = (int32_t)fuzz_u32(trailer);
        end = (int32_t)fuzz_u32(trailer);
    }
    int valid = first >= info->head_first && end <= info->head_end && first < end &&
                first % group == 0 && end % group == 0;
    size_t bytes[3] = {0, 0, 0};
    uint8_t *parts[3] = {NULL, NULL, NULL};
    parts[1] = slice_copy(page, n, first, end, &bytes[1]);
    FUZZ_CHECK((parts[1] != NULL) == valid);
    if (!valid)
        return;
    ssm_page_info mid;
    FUZZ_CHECK(ssm_page_inspect(parts[1], bytes[1], &mid) == SSM_OK);
    FUZZ_CHECK(mid.head_first == first && mid.head_end == end && mid.page_bytes == bytes[1]);
    if (how & 2) { /* a buffer one byte short is refused */
        uint8_t *small = malloc(bytes[1] - 1);
        FUZZ_CHECK(small != NULL);
        FUZZ_CHECK(ssm_page_slice(page, n, first, end, small, bytes[1] - 1, NULL) ==
                   SSM_ERR_INVALID_ARGUMENT);
        free(small);
    }
    int32_t count = 0;
    const uint8_t *order[3];
    size_t sizes[3];
    if (first > info->head_first)
        parts[0] = slice_copy(page, n, info->head_first, first, &bytes[0]);
    if (end < info->head_end)
        parts[2] = slice_copy(page, n, end, info->head_end, &bytes[2]);
    FUZZ_CHECK((first > info->head_first) == (parts[0] != NULL));
    FUZZ_CHECK((end < info->head_end) == (parts[2] != NULL));
    int rotate = fuzz_u8(trailer) % 3;
    for (int i = 0; i < 3; i++) {
        int p = (i + rotate) % 3;
        if (parts[p]) {
            order[count] = parts[p];
            sizes[count++] = bytes[p];
        }
    }
    ssm_status status;
    size_t merged_bytes = 0;
    size_t capacity = (size_t)info->page_bytes - ((how & 4) ? 1 : 0);
    uint8_t *merged = merge_copy(order, sizes, count, capacity, &status, &merged_bytes);
    if (how & 4) {
        FUZZ_CHECK(status == SSM_ERR_INVALID_ARGUMENT);
    } else {
        FUZZ_CHECK(status == SSM_OK && merged_bytes == info->page_bytes);
        FUZZ_CHECK(!memcmp(merged + HEADER, page + HEADER, merged_bytes - HEADER));
        ssm_page_info whole;
        FUZZ_CHECK(ssm_page_inspect(merged, merged_bytes, &whole) == SSM_OK);
        FUZZ_CHECK(whole.head_first == info->head_first && whole.head_end == info->head_end);
    }
    free(merged);
    /* A page merged with itself overlaps. */
    if (count >= 1) {
        const uint8_t *twice[2] = {order[0], order[0]};
        size_t twice_sizes[2] = {sizes[0], sizes[0]};
        merged = merge_copy(twice, twice_sizes, 2, (size_t)info->page_bytes, &status,
                            &merged_bytes);
        FUZZ_CHECK(status == SSM_ERR_PAGE_INVALID && merged == NULL);
    }
    for (int i = 0; i < 3; i++)
        free(parts[i]);
}

/* Two pages merged in either order: the same answer. */
static void check_pair(const uint8_t *a, size_t an, const uint8_t *b, size_t bn)
{
    const uint8_t *ab[2] = {a, b}, *ba[2] = {b, a};
    size_t abn[2] = {an, bn}, ban[2] = {bn, an};
    size_t capacity = an + bn, x_bytes = 0, y_bytes = 0;
    ssm_status xs, ys;
    uint8_t *x = merge_copy(ab, abn, 2, capacity, &xs, &x_bytes);
    uint8_t *y = merge_copy(ba, ban, 2, capacity, &ys, &y_bytes);
    FUZZ_CHECK(xs == ys && xs != SSM_ERR_INTERNAL);
    if (x) {
        FUZZ_CHECK(x_bytes == y_bytes && !memcmp(x, y, x_bytes));
        ssm_page_info info;
        FUZZ_CHECK(ssm_page_inspect(x, x_bytes, &info) == SSM_OK);
    }
    free(x);
    free(y);
}

/* One input: inspect, import everywhere, then slice, merge and pair. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1)
        return 0;
    size_t n = size - 1;
    uint8_t *page = malloc(n ? n : 1); /* exactly the input: ASan sees any overread */
    FUZZ_CHECK(page != NULL);
    memcpy(page, data + 1, n);
    if (data[0] & 1)
        fix_checksums(page, n);
    ssm_page_info info;
    memset(&info, 0, sizeof info);
    /* The page ends where its header says; a reader that is given the bytes
     * after it too refuses them. */
    size_t used = n;
    ssm_page_info head;
    if (ssm_page_read_header(page, n, &head) == SSM_OK && head.page_bytes < n) {
        used = (size_t)head.page_bytes;
        FUZZ_CHECK(ssm_page_inspect(page, n, &info) == SSM_ERR_PAGE_INVALID);
    }
    ssm_status status = ssm_page_inspect(page, used, &info);
    FUZZ_CHECK(status == SSM_OK || status == SSM_ERR_PAGE_INVALID);
    if (status == SSM_OK) {
        FUZZ_CHECK(info.page_bytes == HEADER + info.payload_bytes && info.page_bytes == used);
        FUZZ_CHECK(info.head_first >= 0 && info.head_first < info.head_end &&
                   info.head_end <= info.model.value_heads);
        FUZZ_CHECK(ssm_page_inspect(page, used - 1, &info) == SSM_ERR_PAGE_INVALID);
        FUZZ_CHECK(ssm_page_inspect(page, used, &info) == SSM_OK);
    }
    check_imports(page, used, status == SSM_OK, &info);
    if (status == SSM_OK) {
        fuzz_in trailer = {page + used, n - used};
        check_slice_merge(page, used, &info, &trailer);
        /* The rest of the trailer may be a second page. */
        ssm_page_info other;
        if (trailer.n && ssm_page_inspect(trailer.p, trailer.n, &other) == SSM_OK) {
            uint8_t *second = malloc(trailer.n);
            FUZZ_CHECK(second != NULL);
            memcpy(second, trailer.p, trailer.n);
            check_pair(page, used, second, trailer.n);
            free(second);
        }
    }
    free(page);
    return 0;
}
