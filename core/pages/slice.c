/* Tensor-parallel pages (docs/pages.md, "Tensor-parallel
 * slices"): a page cut down to a whole-group slice of its value heads, and
 * ranks' pages merged back into one, each checked whole before a byte is
 * written. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/pages/format.h"
#include "core/pages/private.h"

enum { PAGE_HEADER_BYTES = SSM_PAGE_HEADER_BYTES };

/* Whether [a, a + an) and [b, b + bn) share a byte. */
static int overlaps(const void *a, uint64_t an, const void *b, uint64_t bn)
{
    const unsigned char *x = a, *y = b;
    return x < y + bn && y < x + an;
}

/* Finishes a page whose header fields and payload are in place. */
static void page_seal(unsigned char *out, ssm_page_info *i)
{
    i->library_version = ssm_page_library_version();
    i->payload_bytes = ssm_page_payload_bytes(i);
    i->page_bytes = PAGE_HEADER_BYTES + i->payload_bytes;
    i->payload_crc = ssm_crc32c(out + PAGE_HEADER_BYTES, (size_t)i->payload_bytes);
    ssm_page_header_write(out, i);
}

ssm_status ssm_page_slice(const void *page, size_t bytes, int32_t first, int32_t end, void *out,
                          size_t capacity, size_t *written)
{
    if (!page || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_page_slice: NULL argument");
    ssm_page_info i;
    ssm_status status = ssm_page_inspect(page, bytes, &i);
    if (status != SSM_OK)
        return status;
    int32_t group = i.model.value_heads / i.model.heads;
    if (first < i.head_first || end > i.head_end || first >= end || first % group != 0 ||
        end % group != 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_page_slice: value heads [%d, %d) are not whole key-head groups "
                             "(of %d) within the page's [%d, %d)",
                             (int)first, (int)end, (int)group, (int)i.head_first,
                             (int)i.head_end);
    ssm_page_info o = i;
    o.head_first = first;
    o.head_end = end;
    uint64_t need = PAGE_HEADER_BYTES + ssm_page_payload_bytes(&o);
    if ((uint64_t)capacity < need)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_page_slice: the slice takes %llu bytes; the buffer has %zu",
                             (unsigned long long)need, capacity);
    if (overlaps(out, need, page, i.page_bytes))
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_page_slice: the output overlaps the page");
    ssm_page_copy_slice(&i, (unsigned char *)page + PAGE_HEADER_BYTES, &o,
               (unsigned char *)out + PAGE_HEADER_BYTES, 0);
    page_seal(out, &o);
    if (written)
        *written = (size_t)o.page_bytes;
    return SSM_OK;
}

/* Whether two pages are of one model and dtypes (their slices aside). */
static int same_model(const ssm_page_info *a, const ssm_page_info *b)
{
    const ssm_model_dims *x = &a->model, *y = &b->model;
    return x->kind == y->kind && x->layers == y->layers && x->heads == y->heads &&
           x->value_heads == y->value_heads && x->key_dim == y->key_dim &&
           x->value_dim == y->value_dim && x->conv_width == y->conv_width &&
           x->has_lower_bound == y->has_lower_bound &&
           ssm_f32_bits(x->lower_bound) == ssm_f32_bits(y->lower_bound) &&
           a->state_dtype == b->state_dtype && a->activation_dtype == b->activation_dtype;
}

/* ssm_page_merge's work, with room for `count` infos and an order. */
static ssm_status merge_pages(const void *const *pages, const size_t *bytes, int32_t count,
                              void *out, size_t capacity, size_t *written, ssm_page_info *info,
                              int32_t *order)
{
    for (int32_t p = 0; p < count; p++) {
        if (!pages[p])
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_page_merge: page %d is NULL",
                                 (int)p);
        ssm_status status = ssm_page_inspect(pages[p], bytes[p], &info[p]);
        if (status != SSM_OK) {
            char why[256]; /* the message is rewritten below: copy it first */
            snprintf(why, sizeof why, "%s", ssm_last_error());
            return ssm_error_set(status, "page %d: %s", (int)p, why);
        }
        if (!same_model(&info[p], &info[0]))
            return ssm_error_set(SSM_ERR_PAGE_INVALID,
                                 "page %d is of another model or dtype than page 0", (int)p);
        int32_t at = p; /* insertion by first head */
        while (at > 0 && info[order[at - 1]].head_first > info[p].head_first) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = p;
    }
    for (int32_t k = 1; k < count; k++) {
        const ssm_page_info *prev = &info[order[k - 1]], *next = &info[order[k]];
        if (prev->head_end != next->head_first)
            return ssm_error_set(SSM_ERR_PAGE_INVALID,
                                 "pages %d [%d, %d) and %d [%d, %d) %s", (int)order[k - 1],
                                 (int)prev->head_first, (int)prev->head_end, (int)order[k],
                                 (int)next->head_first, (int)next->head_end,
                                 prev->head_end > next->head_first ? "overlap" : "leave a gap");
    }
    ssm_page_info o = info[order[0]];
    o.head_end = info[order[count - 1]].head_end;
    uint64_t need = PAGE_HEADER_BYTES + ssm_page_payload_bytes(&o);
    if ((uint64_t)capacity < need)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_page_merge: the merged page takes %llu bytes; the buffer has "
                             "%zu",
                             (unsigned long long)need, capacity);
    for (int32_t p = 0; p < count; p++)
        if (overlaps(out, need, pages[p], info[p].page_bytes))
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                 "ssm_page_merge: the output overlaps page %d", (int)p);
    for (int32_t p = 0; p < count; p++)
        ssm_page_copy_slice(&o, (unsigned char *)out + PAGE_HEADER_BYTES, &info[p],
                   (unsigned char *)pages[p] + PAGE_HEADER_BYTES, 1);
    page_seal(out, &o);
    if (written)
        *written = (size_t)o.page_bytes;
    return SSM_OK;
}

ssm_status ssm_page_merge(const void *const *pages, const size_t *bytes, int32_t count,
                          void *out, size_t capacity, size_t *written)
{
    if (!pages || !bytes || !out || count < 1 || count > SSM_MAX_HEADS)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_page_merge: NULL argument or count %d (1 to %d)", (int)count,
                             SSM_MAX_HEADS);
    ssm_page_info *info = ssm_malloc(sizeof *info * (size_t)count);
    int32_t *order = ssm_malloc(sizeof *order * (size_t)count);
    ssm_status status = info && order ? merge_pages(pages, bytes, count, out, capacity, written,
                                                    info, order)
                                      : ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_free(info);
    ssm_free(order);
    return status;
}
