/* The state page's format, version 1 (docs/pages.md gives it byte by byte):
 * the header's offsets, its fields, the payload's layout and what makes a
 * page valid for a context. One definition, compiled both into the host
 * (core/pages/page.c, which writes, reads and slices pages) and into the device
 * (core/pages/device_memory_kernels.cu, which seals and checks pages in device
 * memory), so the two can never disagree about a byte. Everything here is
 * inline, with no table and no allocation. */
#ifndef SSM_CORE_PAGE_FORMAT_H
#define SSM_CORE_PAGE_FORMAT_H

#include <stdint.h>

#include "core/config/limits.h"
#include "kernels/crc32c.h"
#include "kernels/hostdevice.h"
#include "kernels/math.h"
#include "ssmstate/ssmstate.h"

/* Byte offsets of the header's fields, all little-endian. */
enum {
    SSM_PAGE_AT_MAGIC = 0, /* 8 bytes, "SSMPAGE\0" */
    SSM_PAGE_AT_VERSION = 8,
    SSM_PAGE_AT_HEADER_BYTES = 12,
    SSM_PAGE_AT_LIBRARY = 16,
    SSM_PAGE_AT_KIND = 20,
    SSM_PAGE_AT_LAYERS = 24,
    SSM_PAGE_AT_HEADS = 28,
    SSM_PAGE_AT_VALUE_HEADS = 32,
    SSM_PAGE_AT_KEY_DIM = 36,
    SSM_PAGE_AT_VALUE_DIM = 40,
    SSM_PAGE_AT_CONV_WIDTH = 44,
    SSM_PAGE_AT_HAS_LOWER_BOUND = 48,
    SSM_PAGE_AT_LOWER_BOUND = 52,
    SSM_PAGE_AT_STATE_DTYPE = 56,
    SSM_PAGE_AT_ACT_DTYPE = 60,
    SSM_PAGE_AT_HEAD_FIRST = 64,
    SSM_PAGE_AT_HEAD_END = 68,
    SSM_PAGE_AT_PAYLOAD_BYTES = 72, /* 8 bytes */
    SSM_PAGE_AT_PAYLOAD_CRC = 80,
    /* 84: 8 reserved bytes, zero */
    SSM_PAGE_AT_HEADER_CRC = 92, /* the header's own checksum covers [0, 92) */
    SSM_PAGE_HEADER_BYTES = 96
};

/* Byte i (0..7) of the magic. */
SSM_HD unsigned char ssm_page_magic(int i)
{
    return (unsigned char)"SSMPAGE"[i];
}

SSM_HD uint32_t ssm_page_get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

SSM_HD uint64_t ssm_page_get64(const unsigned char *p)
{
    return (uint64_t)ssm_page_get32(p) | (uint64_t)ssm_page_get32(p + 4) << 32;
}

SSM_HD void ssm_page_put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

SSM_HD void ssm_page_put64(unsigned char *p, uint64_t v)
{
    ssm_page_put32(p, (uint32_t)v);
    ssm_page_put32(p + 4, (uint32_t)(v >> 32));
}

/* ssm_dtype_size, for device code too. */
SSM_HD uint64_t ssm_page_dtype_size(ssm_dtype t)
{
    return t == SSM_DTYPE_F32 ? 4 : (t == SSM_DTYPE_BF16 || t == SSM_DTYPE_F16) ? 2 : 0;
}

/* The header's fields (page_bytes from them; the magic, the header length
 * and the checksum of the header are the caller's to check). */
SSM_HD void ssm_page_info_read(const unsigned char *h, ssm_page_info *i)
{
    i->format_version = ssm_page_get32(h + SSM_PAGE_AT_VERSION);
    i->library_version = ssm_page_get32(h + SSM_PAGE_AT_LIBRARY);
    i->model.kind = (ssm_model_kind)ssm_page_get32(h + SSM_PAGE_AT_KIND);
    i->model.layers = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_LAYERS);
    i->model.heads = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_HEADS);
    i->model.value_heads = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_VALUE_HEADS);
    i->model.key_dim = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_KEY_DIM);
    i->model.value_dim = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_VALUE_DIM);
    i->model.conv_width = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_CONV_WIDTH);
    i->model.has_lower_bound = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_HAS_LOWER_BOUND);
    i->model.lower_bound = ssm_f32_from_bits(ssm_page_get32(h + SSM_PAGE_AT_LOWER_BOUND));
    i->state_dtype = (ssm_dtype)ssm_page_get32(h + SSM_PAGE_AT_STATE_DTYPE);
    i->activation_dtype = (ssm_dtype)ssm_page_get32(h + SSM_PAGE_AT_ACT_DTYPE);
    i->head_first = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_HEAD_FIRST);
    i->head_end = (int32_t)ssm_page_get32(h + SSM_PAGE_AT_HEAD_END);
    i->payload_bytes = ssm_page_get64(h + SSM_PAGE_AT_PAYLOAD_BYTES);
    i->payload_crc = ssm_page_get32(h + SSM_PAGE_AT_PAYLOAD_CRC);
    i->page_bytes = SSM_PAGE_HEADER_BYTES + i->payload_bytes;
}

/* Writes the checksum of header bytes [0, 92) at byte 92. */
SSM_HD void ssm_page_header_seal(unsigned char *h)
{
    ssm_page_put32(h + SSM_PAGE_AT_HEADER_CRC, ssm_crc32c_bitwise(h, SSM_PAGE_AT_HEADER_CRC));
}

/* Writes i's fields into the header h (all 96 bytes: the reserved ones
 * zero) and seals it with the checksum of [0, 92). */
SSM_HD void ssm_page_header_write(unsigned char *h, const ssm_page_info *i)
{
    for (int k = 0; k < SSM_PAGE_HEADER_BYTES; k++)
        h[k] = k < 8 ? ssm_page_magic(k) : 0;
    ssm_page_put32(h + SSM_PAGE_AT_VERSION, i->format_version);
    ssm_page_put32(h + SSM_PAGE_AT_HEADER_BYTES, SSM_PAGE_HEADER_BYTES);
    ssm_page_put32(h + SSM_PAGE_AT_LIBRARY, i->library_version);
    ssm_page_put32(h + SSM_PAGE_AT_KIND, (uint32_t)i->model.kind);
    ssm_page_put32(h + SSM_PAGE_AT_LAYERS, (uint32_t)i->model.layers);
    ssm_page_put32(h + SSM_PAGE_AT_HEADS, (uint32_t)i->model.heads);
    ssm_page_put32(h + SSM_PAGE_AT_VALUE_HEADS, (uint32_t)i->model.value_heads);
    ssm_page_put32(h + SSM_PAGE_AT_KEY_DIM, (uint32_t)i->model.key_dim);
    ssm_page_put32(h + SSM_PAGE_AT_VALUE_DIM, (uint32_t)i->model.value_dim);
    ssm_page_put32(h + SSM_PAGE_AT_CONV_WIDTH, (uint32_t)i->model.conv_width);
    ssm_page_put32(h + SSM_PAGE_AT_HAS_LOWER_BOUND, (uint32_t)i->model.has_lower_bound);
    ssm_page_put32(h + SSM_PAGE_AT_LOWER_BOUND, ssm_f32_bits(i->model.lower_bound));
    ssm_page_put32(h + SSM_PAGE_AT_STATE_DTYPE, (uint32_t)i->state_dtype);
    ssm_page_put32(h + SSM_PAGE_AT_ACT_DTYPE, (uint32_t)i->activation_dtype);
    ssm_page_put32(h + SSM_PAGE_AT_HEAD_FIRST, (uint32_t)i->head_first);
    ssm_page_put32(h + SSM_PAGE_AT_HEAD_END, (uint32_t)i->head_end);
    ssm_page_put64(h + SSM_PAGE_AT_PAYLOAD_BYTES, i->payload_bytes);
    ssm_page_put32(h + SSM_PAGE_AT_PAYLOAD_CRC, i->payload_crc);
    ssm_page_header_seal(h);
}

/* ------------------------------------------------------------ the payload */

/* Value heads per key head of the page's model. */
SSM_HD int32_t ssm_page_group(const ssm_page_info *i)
{
    return i->model.value_heads / i->model.heads;
}

/* Conv channels of a window row: q and k of the key heads the page holds,
 * v of its value heads [head_first, head_end). */
SSM_HD int64_t ssm_page_row_channels(const ssm_page_info *i)
{
    int64_t held = i->head_end - i->head_first, keys = held / ssm_page_group(i);
    return 2 * keys * i->model.key_dim + held * i->model.value_dim;
}

/* One layer's conv window [W-1][row channels] and state [held][V][K]. */
SSM_HD uint64_t ssm_page_conv_bytes(const ssm_page_info *i)
{
    return (uint64_t)(i->model.conv_width - 1) * (uint64_t)ssm_page_row_channels(i) *
           ssm_page_dtype_size(i->activation_dtype);
}

SSM_HD uint64_t ssm_page_state_bytes(const ssm_page_info *i)
{
    return (uint64_t)(i->head_end - i->head_first) * (uint64_t)i->model.value_dim *
           (uint64_t)i->model.key_dim * ssm_page_dtype_size(i->state_dtype);
}

SSM_HD uint64_t ssm_page_payload_bytes(const ssm_page_info *i)
{
    return (uint64_t)i->model.layers * (ssm_page_conv_bytes(i) + ssm_page_state_bytes(i));
}

SSM_HD int ssm_page_in_range(int32_t v, int32_t max)
{
    return v >= 1 && v <= max;
}

/* The first field of a header that describes no page, in header order
 * (SSM_PAGE_FAULT_NONE: every field is one a page may have). Host and
 * device refuse the same headers; the host names the field
 * (core/pages/page.c). */
typedef enum ssm_page_fault {
    SSM_PAGE_FAULT_NONE = 0,
    SSM_PAGE_FAULT_KIND,            /* neither gdn nor kda */
    SSM_PAGE_FAULT_LAYERS,          /* outside 1..SSM_MAX_LAYERS */
    SSM_PAGE_FAULT_HEADS,           /* outside 1..SSM_MAX_HEADS */
    SSM_PAGE_FAULT_VALUE_HEADS,     /* outside 1..SSM_MAX_HEADS */
    SSM_PAGE_FAULT_GROUP,           /* value_heads not a multiple of heads */
    SSM_PAGE_FAULT_KEY_DIM,         /* outside 1..SSM_MAX_HEAD_DIM */
    SSM_PAGE_FAULT_VALUE_DIM,       /* outside 1..SSM_MAX_HEAD_DIM */
    SSM_PAGE_FAULT_CONV_WIDTH,      /* outside 1..SSM_MAX_CONV_WIDTH */
    SSM_PAGE_FAULT_HAS_LOWER_BOUND, /* neither 0 nor 1, or 1 on a model that is not kda */
    SSM_PAGE_FAULT_LOWER_BOUND,     /* set, and not a finite negative number */
    SSM_PAGE_FAULT_STATE_DTYPE,     /* neither f32 nor bf16 */
    SSM_PAGE_FAULT_ACT_DTYPE,       /* neither f32 nor bf16 */
    SSM_PAGE_FAULT_HEAD_FIRST,      /* negative, past the value heads, or off the group */
    SSM_PAGE_FAULT_HEAD_END,        /* not past head_first, past the value heads, or off the group */
    SSM_PAGE_FAULT_PAYLOAD_BYTES,   /* not the payload the fields above give */
    SSM_PAGE_FAULT_RESERVED         /* a reserved byte (84..91) that is not zero */
} ssm_page_fault;

/* Whether a header's fields describe a page (within the config's limits,
 * so no size computed from them overflows), the reserved bytes of h aside:
 * the first field that does not (ssm_page_fault). */
SSM_HD ssm_page_fault ssm_page_fields_fault(const ssm_page_info *i)
{
    const ssm_model_dims *m = &i->model;
    if (m->kind != SSM_MODEL_GDN && m->kind != SSM_MODEL_KDA)
        return SSM_PAGE_FAULT_KIND;
    if (!ssm_page_in_range(m->layers, SSM_MAX_LAYERS))
        return SSM_PAGE_FAULT_LAYERS;
    if (!ssm_page_in_range(m->heads, SSM_MAX_HEADS))
        return SSM_PAGE_FAULT_HEADS;
    if (!ssm_page_in_range(m->value_heads, SSM_MAX_HEADS))
        return SSM_PAGE_FAULT_VALUE_HEADS;
    if (m->value_heads % m->heads != 0)
        return SSM_PAGE_FAULT_GROUP;
    if (!ssm_page_in_range(m->key_dim, SSM_MAX_HEAD_DIM))
        return SSM_PAGE_FAULT_KEY_DIM;
    if (!ssm_page_in_range(m->value_dim, SSM_MAX_HEAD_DIM))
        return SSM_PAGE_FAULT_VALUE_DIM;
    if (!ssm_page_in_range(m->conv_width, SSM_MAX_CONV_WIDTH))
        return SSM_PAGE_FAULT_CONV_WIDTH;
    if (m->has_lower_bound != 0 && (m->has_lower_bound != 1 || m->kind != SSM_MODEL_KDA))
        return SSM_PAGE_FAULT_HAS_LOWER_BOUND;
    /* set: finite (exponent bits not all ones) and below zero */
    if (m->has_lower_bound &&
        ((ssm_f32_bits(m->lower_bound) & 0x7f800000u) == 0x7f800000u || !(m->lower_bound < 0.0f)))
        return SSM_PAGE_FAULT_LOWER_BOUND;
    if (i->state_dtype != SSM_DTYPE_F32 && i->state_dtype != SSM_DTYPE_BF16)
        return SSM_PAGE_FAULT_STATE_DTYPE;
    if (i->activation_dtype != SSM_DTYPE_F32 && i->activation_dtype != SSM_DTYPE_BF16)
        return SSM_PAGE_FAULT_ACT_DTYPE;
    const int32_t group = m->value_heads / m->heads;
    if (i->head_first < 0 || i->head_first >= m->value_heads || i->head_first % group != 0)
        return SSM_PAGE_FAULT_HEAD_FIRST;
    if (i->head_end <= i->head_first || i->head_end > m->value_heads || i->head_end % group != 0)
        return SSM_PAGE_FAULT_HEAD_END;
    return SSM_PAGE_FAULT_NONE;
}

/* 1 when the header's reserved bytes [84, 92) are all zero. */
SSM_HD int ssm_page_reserved_clear(const unsigned char *h)
{
    for (int k = SSM_PAGE_AT_PAYLOAD_CRC + 4; k < SSM_PAGE_AT_HEADER_CRC; k++)
        if (h[k] != 0)
            return 0;
    return 1;
}

/* Where a slice's heads lie in the payload of a page holding them: `big`
 * holds value heads [big.first, big.end), `small` a whole-group slice
 * inside them (the same model and dtypes). Channels count elements of the
 * activation dtype. */
typedef struct ssm_page_cut {
    int64_t big_row, small_row;  /* channels of a window row of each */
    int64_t part_big[3];         /* q, k, v of the slice: their first channel in a big row */
    int64_t part_small[3];       /* ... and in a small row */
    int64_t part_channels[3];    /* ... and how many there are */
    uint64_t big_layer, small_layer; /* bytes of a layer (window and state) of each */
    uint64_t big_state_at;       /* the slice's state in a big layer, bytes from its start */
    uint64_t small_state_at;     /* the state in a small layer */
} ssm_page_cut;

SSM_HD void ssm_page_cut_of(const ssm_page_info *big, const ssm_page_info *small, ssm_page_cut *c)
{
    const int64_t K = big->model.key_dim, V = big->model.value_dim, g = ssm_page_group(big);
    const int64_t big_keys = (big->head_end - big->head_first) / g;
    const int64_t heads = small->head_first - big->head_first, keys = heads / g;
    const int64_t small_heads = small->head_end - small->head_first, small_keys = small_heads / g;
    c->big_row = ssm_page_row_channels(big);
    c->small_row = ssm_page_row_channels(small);
    c->part_big[0] = keys * K;
    c->part_big[1] = (big_keys + keys) * K;
    c->part_big[2] = 2 * big_keys * K + heads * V;
    c->part_small[0] = 0;
    c->part_small[1] = small_keys * K;
    c->part_small[2] = 2 * small_keys * K;
    c->part_channels[0] = c->part_channels[1] = small_keys * K;
    c->part_channels[2] = small_heads * V;
    c->big_layer = ssm_page_conv_bytes(big) + ssm_page_state_bytes(big);
    c->small_layer = ssm_page_conv_bytes(small) + ssm_page_state_bytes(small);
    c->big_state_at = ssm_page_conv_bytes(big) +
                      (uint64_t)heads * (uint64_t)(V * K) * ssm_page_dtype_size(big->state_dtype);
    c->small_state_at = ssm_page_conv_bytes(small);
}

/* ------------------------------------------------------------ against a context */

/* The header fields a page must share with the context that loads it, in
 * the order they are compared. */
typedef enum ssm_page_field {
    SSM_PAGE_FIELD_NONE = 0,
    SSM_PAGE_FIELD_KIND,
    SSM_PAGE_FIELD_LAYERS,
    SSM_PAGE_FIELD_HEADS,
    SSM_PAGE_FIELD_VALUE_HEADS,
    SSM_PAGE_FIELD_KEY_DIM,
    SSM_PAGE_FIELD_VALUE_DIM,
    SSM_PAGE_FIELD_CONV_WIDTH,
    SSM_PAGE_FIELD_HAS_LOWER_BOUND,
    SSM_PAGE_FIELD_STATE_DTYPE,
    SSM_PAGE_FIELD_ACT_DTYPE,
    SSM_PAGE_FIELD_HEAD_SLICE, /* the page lacks some of the context's value heads */
    SSM_PAGE_FIELD_LOWER_BOUND
} ssm_page_field;

/* The first field where a valid page disagrees with the page `want` the
 * context would write, with both values in *got and *expected (the head
 * slice's: none; the lower bound's: its fp32 bits). A page may hold more
 * value heads than the context: it takes its own. */
SSM_HD ssm_page_field ssm_page_mismatch(const ssm_page_info *page, const ssm_page_info *want,
                                        int64_t *got, int64_t *expected)
{
    const ssm_model_dims *a = &page->model, *b = &want->model;
    const int64_t pairs[10][2] = {
        {a->kind, b->kind},
        {a->layers, b->layers},
        {a->heads, b->heads},
        {a->value_heads, b->value_heads},
        {a->key_dim, b->key_dim},
        {a->value_dim, b->value_dim},
        {a->conv_width, b->conv_width},
        {a->has_lower_bound, b->has_lower_bound},
        {page->state_dtype, want->state_dtype},
        {page->activation_dtype, want->activation_dtype},
    };
    *got = *expected = 0;
    for (int f = 0; f < 10; f++)
        if (pairs[f][0] != pairs[f][1]) {
            *got = pairs[f][0];
            *expected = pairs[f][1];
            return (ssm_page_field)(SSM_PAGE_FIELD_KIND + f);
        }
    if (page->head_first > want->head_first || page->head_end < want->head_end)
        return SSM_PAGE_FIELD_HEAD_SLICE;
    if (a->has_lower_bound && ssm_f32_bits(a->lower_bound) != ssm_f32_bits(b->lower_bound)) {
        *got = ssm_f32_bits(a->lower_bound);
        *expected = ssm_f32_bits(b->lower_bound);
        return SSM_PAGE_FIELD_LOWER_BOUND;
    }
    return SSM_PAGE_FIELD_NONE;
}

/* Why the page with header h, of at most `room` bytes (header included),
 * cannot be loaded into a context whose own page is `want`: an
 * ssm_page_status, SSM_PAGE_ACCEPTED when the header passes every check
 * (the payload's checksum is left to the caller, who compares it with
 * page->payload_crc). Fills *page with the header's fields. The checks run
 * in the order of the codes, save the room (SSM_PAGE_BAD_LENGTH), checked
 * after the fields and heads. */
SSM_HD int32_t ssm_page_check_header(const unsigned char *h, const ssm_page_info *want,
                                     uint64_t room, ssm_page_info *page)
{
    for (int k = 0; k < 8; k++)
        if (h[SSM_PAGE_AT_MAGIC + k] != ssm_page_magic(k))
            return SSM_PAGE_BAD_MAGIC;
    ssm_page_info_read(h, page);
    if (page->format_version != SSM_PAGE_FORMAT_VERSION ||
        ssm_page_get32(h + SSM_PAGE_AT_HEADER_BYTES) != SSM_PAGE_HEADER_BYTES)
        return SSM_PAGE_BAD_VERSION;
    if (ssm_crc32c_bitwise(h, SSM_PAGE_AT_HEADER_CRC) !=
        ssm_page_get32(h + SSM_PAGE_AT_HEADER_CRC))
        return SSM_PAGE_HEADER_CHECKSUM;
    if (!ssm_page_reserved_clear(h) || ssm_page_fields_fault(page) != SSM_PAGE_FAULT_NONE)
        return SSM_PAGE_MALFORMED;
    if (page->payload_bytes != ssm_page_payload_bytes(page))
        return SSM_PAGE_BAD_LENGTH;
    int64_t got, expected;
    ssm_page_field field = ssm_page_mismatch(page, want, &got, &expected);
    if (field == SSM_PAGE_FIELD_STATE_DTYPE || field == SSM_PAGE_FIELD_ACT_DTYPE)
        return SSM_PAGE_BAD_DTYPE;
    if (field == SSM_PAGE_FIELD_HEAD_SLICE)
        return SSM_PAGE_BAD_HEADS;
    if (field != SSM_PAGE_FIELD_NONE)
        return SSM_PAGE_BAD_MODEL;
    if (page->page_bytes > room)
        return SSM_PAGE_BAD_LENGTH;
    return SSM_PAGE_ACCEPTED;
}

/* The whole verdict on a page: ssm_page_check_header, then the payload's
 * checksum, `payload_crc` being the CRC32C of the page's payload (computed
 * by the caller, who read page->payload_bytes bytes of it). */
SSM_HD int32_t ssm_page_check(const unsigned char *h, const ssm_page_info *want, uint64_t room,
                              uint32_t payload_crc, ssm_page_info *page)
{
    int32_t reason = ssm_page_check_header(h, want, room, page);
    if (reason == SSM_PAGE_ACCEPTED && payload_crc != page->payload_crc)
        reason = SSM_PAGE_PAYLOAD_CHECKSUM;
    return reason;
}

#endif
