/* State pages: a slot's canonical form behind a self-describing, checksummed
 * header. docs/pages.md gives the layout byte by byte; this file writes and
 * reads it, and holds the page to the context before anything is loaded (slices
 * and merges: core/pages/slice.c). Host-memory pages, of CPU contexts and of
 * CUDA contexts: those go through a device staging buffer
 * (core/pages/staging.c), a batch at once through the device pages' kernels
 * (core/pages/device_memory.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/context.h"
#include "core/pages/device_memory.h"
#include "core/internal.h"
#include "core/pages/staging.h"
#include "core/pages/format.h"
#include "core/pages/private.h"

enum { PAGE_HEADER_BYTES = SSM_PAGE_HEADER_BYTES };

/* ------------------------------------------------------------ CRC32C */

/* CRC32C (kernels/crc32c.h). With SSE 4.2 (x86-64, checked at run time) the
 * processor's crc32 instruction, eight bytes at a time; elsewhere the eight
 * tables of the slice-by-8 form (the device's form too). Both go a byte at a
 * time up to an 8-byte boundary and after the last whole word. docs/pages.md
 * says why this checksum. */
static uint32_t crc32c_tables[8][256];
static uint32_t (*crc32c_update)(uint32_t c, const unsigned char *p, size_t bytes);
static pthread_once_t crc32c_once = PTHREAD_ONCE_INIT; /* threads may export at once */

static uint32_t crc32c_bytes(uint32_t c, const unsigned char *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        c = crc32c_tables[0][(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c;
}

/* The register `c` (not inverted) continued over `bytes` bytes at p, with
 * the tables. */
static uint32_t crc32c_update_tables(uint32_t c, const unsigned char *p, size_t bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    /* The words are read as little-endian integers, as the tables assume. */
    size_t head = (size_t)(-(uintptr_t)p & 7);
    head = head < bytes ? head : bytes;
    c = crc32c_bytes(c, p, head);
    p += head;
    bytes -= head;
    for (; bytes >= 8; p += 8, bytes -= 8) {
        uint64_t word;
        memcpy(&word, p, sizeof word);
        c = ssm_crc32c_slice8((const uint32_t(*)[256])crc32c_tables, c, &word, 1);
    }
#endif
    return crc32c_bytes(c, p, bytes);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same with SSE 4.2's crc32, whose register is this one (reflected
 * Castagnoli polynomial, not inverted between calls). */
__attribute__((target("sse4.2"))) static uint32_t crc32c_update_sse42(uint32_t c,
                                                                      const unsigned char *p,
                                                                      size_t bytes)
{
    for (; bytes > 0 && ((uintptr_t)p & 7) != 0; p++, bytes--)
        c = __builtin_ia32_crc32qi(c, *p);
    for (; bytes >= 8; p += 8, bytes -= 8) {
        uint64_t word;
        memcpy(&word, p, sizeof word);
        c = (uint32_t)__builtin_ia32_crc32di(c, word);
    }
    for (; bytes > 0; p++, bytes--)
        c = __builtin_ia32_crc32qi(c, *p);
    return c;
}
#endif

static void crc32c_init(void)
{
    for (int k = 0; k < 8; k++)
        for (uint32_t b = 0; b < 256; b++)
            crc32c_tables[k][b] = ssm_crc32c_slice_entry(k, b);
    crc32c_update = crc32c_update_tables;
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2"))
        crc32c_update = crc32c_update_sse42;
#endif
}

uint32_t ssm_crc32c(const void *data, size_t bytes)
{
    pthread_once(&crc32c_once, crc32c_init);
    return crc32c_update(SSM_CRC32C_PRESET, data, bytes) ^ SSM_CRC32C_PRESET;
}

uint32_t ssm_crc32c_portable(const void *data, size_t bytes)
{
    pthread_once(&crc32c_once, crc32c_init);
    return crc32c_update_tables(SSM_CRC32C_PRESET, data, bytes) ^ SSM_CRC32C_PRESET;
}

uint32_t ssm_page_library_version(void)
{
    unsigned major = 0, minor = 0, patch = 0;
    const char *v = PACKAGE_VERSION;
    major = (unsigned)strtoul(v, (char **)&v, 10);
    if (*v == '.')
        minor = (unsigned)strtoul(v + 1, (char **)&v, 10);
    if (*v == '.')
        patch = (unsigned)strtoul(v + 1, (char **)&v, 10);
    return (major & 0xFF) << 16 | (minor & 0xFF) << 8 | (patch & 0xFF);
}

/* ---------------------------------------------------------- the layout */

void ssm_page_copy_slice(const ssm_page_info *big, unsigned char *big_payload,
                         const ssm_page_info *small, unsigned char *small_payload, int into_big)
{
    ssm_page_cut cut;
    ssm_page_cut_of(big, small, &cut);
    const uint64_t a = ssm_page_dtype_size(big->activation_dtype);
    for (int32_t l = 0; l < big->model.layers; l++) {
        unsigned char *b = big_payload + (uint64_t)l * cut.big_layer;
        unsigned char *s = small_payload + (uint64_t)l * cut.small_layer;
        for (int32_t row = 0; row < big->model.conv_width - 1; row++)
            for (int p = 0; p < 3; p++) {
                unsigned char *in_big = b + (uint64_t)(row * cut.big_row + cut.part_big[p]) * a;
                unsigned char *in_small =
                    s + (uint64_t)(row * cut.small_row + cut.part_small[p]) * a;
                memcpy(into_big ? in_big : in_small, into_big ? in_small : in_big,
                       (size_t)((uint64_t)cut.part_channels[p] * a));
            }
        unsigned char *big_state = b + cut.big_state_at, *small_state = s + cut.small_state_at;
        memcpy(into_big ? big_state : small_state, into_big ? small_state : big_state,
               (size_t)ssm_page_state_bytes(small));
    }
}

static void info_of_context(const ssm_ctx *ctx, ssm_page_info *i)
{
    memset(i, 0, sizeof *i);
    i->format_version = SSM_PAGE_FORMAT_VERSION;
    i->library_version = ssm_page_library_version();
    const ssm_head_slice *h = &ctx->config->head_slice;
    i->model = ctx->config->model;
    /* A set lower bound is 1 on the page whatever non-zero value the config
     * holds; an unset one carries no value. */
    i->model.has_lower_bound = ctx->config->model.has_lower_bound != 0;
    if (!i->model.has_lower_bound)
        i->model.lower_bound = 0.0f;
    i->state_dtype = ctx->config->state_dtype;
    i->activation_dtype = ctx->config->activation_dtype;
    i->head_first = h->value_heads ? h->first : 0;
    i->head_end = i->head_first + ctx->config->model.value_heads;
    if (h->value_heads) { /* a tensor-parallel rank: the header names the whole model */
        i->model.heads = h->heads;
        i->model.value_heads = h->value_heads;
    }
    i->payload_bytes = ssm_page_payload_bytes(i);
    i->page_bytes = PAGE_HEADER_BYTES + i->payload_bytes;
}

size_t ssm_page_bytes(const ssm_ctx *ctx)
{
    if (!ctx)
        return 0;
    ssm_page_info i;
    info_of_context(ctx, &i);
    return (size_t)i.page_bytes;
}

void ssm_page_context_header(const ssm_ctx *ctx, ssm_page_info *info,
                             unsigned char header[SSM_PAGE_HEADER_BYTES])
{
    info_of_context(ctx, info);
    ssm_page_header_write(header, info); /* payload checksum 0 */
}

/* Why a header's field describes no page, naming the field and its value. */
static ssm_status field_fault(ssm_page_fault fault, const ssm_page_info *i,
                              const unsigned char *h)
{
    const ssm_model_dims *m = &i->model;
    char why[256];
    switch (fault) {
    case SSM_PAGE_FAULT_KIND:
        snprintf(why, sizeof why, "model kind %u (allowed: %d gdn, %d kda)", (unsigned)m->kind,
                 (int)SSM_MODEL_GDN, (int)SSM_MODEL_KDA);
        break;
    case SSM_PAGE_FAULT_LAYERS:
        snprintf(why, sizeof why, "layers %d (allowed: 1..%d)", (int)m->layers, SSM_MAX_LAYERS);
        break;
    case SSM_PAGE_FAULT_HEADS:
        snprintf(why, sizeof why, "heads %d (allowed: 1..%d)", (int)m->heads, SSM_MAX_HEADS);
        break;
    case SSM_PAGE_FAULT_VALUE_HEADS:
        snprintf(why, sizeof why, "value_heads %d (allowed: 1..%d)", (int)m->value_heads,
                 SSM_MAX_HEADS);
        break;
    case SSM_PAGE_FAULT_GROUP:
        snprintf(why, sizeof why, "value_heads %d is not a multiple of heads %d",
                 (int)m->value_heads, (int)m->heads);
        break;
    case SSM_PAGE_FAULT_KEY_DIM:
        snprintf(why, sizeof why, "key_dim %d (allowed: 1..%d)", (int)m->key_dim,
                 SSM_MAX_HEAD_DIM);
        break;
    case SSM_PAGE_FAULT_VALUE_DIM:
        snprintf(why, sizeof why, "value_dim %d (allowed: 1..%d)", (int)m->value_dim,
                 SSM_MAX_HEAD_DIM);
        break;
    case SSM_PAGE_FAULT_CONV_WIDTH:
        snprintf(why, sizeof why, "conv_width %d (allowed: 1..%d)", (int)m->conv_width,
                 SSM_MAX_CONV_WIDTH);
        break;
    case SSM_PAGE_FAULT_HAS_LOWER_BOUND:
        if (m->has_lower_bound == 1)
            snprintf(why, sizeof why, "has_lower_bound 1 on a %s model (a lower bound is kda's "
                                      "only)",
                     m->kind == SSM_MODEL_KDA ? "kda" : "gdn");
        else
            snprintf(why, sizeof why, "has_lower_bound %u (allowed: 0, 1)",
                     (unsigned)m->has_lower_bound);
        break;
    case SSM_PAGE_FAULT_LOWER_BOUND:
        snprintf(why, sizeof why, "lower_bound %g (a set bound is finite and below 0)",
                 (double)m->lower_bound);
        break;
    case SSM_PAGE_FAULT_STATE_DTYPE:
        snprintf(why, sizeof why, "state dtype %u (allowed: %d f32, %d bf16)",
                 (unsigned)i->state_dtype, (int)SSM_DTYPE_F32, (int)SSM_DTYPE_BF16);
        break;
    case SSM_PAGE_FAULT_ACT_DTYPE:
        snprintf(why, sizeof why, "activation dtype %u (allowed: %d f32, %d bf16)",
                 (unsigned)i->activation_dtype, (int)SSM_DTYPE_F32, (int)SSM_DTYPE_BF16);
        break;
    case SSM_PAGE_FAULT_HEAD_FIRST:
        snprintf(why, sizeof why, "head_first %d (a multiple of %d below value_heads %d)",
                 (int)i->head_first, (int)(m->value_heads / m->heads), (int)m->value_heads);
        break;
    case SSM_PAGE_FAULT_HEAD_END:
        snprintf(why, sizeof why,
                 "head_end %d (a multiple of %d above head_first %d, at most value_heads %d)",
                 (int)i->head_end, (int)(m->value_heads / m->heads), (int)i->head_first,
                 (int)m->value_heads);
        break;
    case SSM_PAGE_FAULT_PAYLOAD_BYTES:
        snprintf(why, sizeof why, "payload_bytes %llu; its dims and dtypes give %llu",
                 (unsigned long long)i->payload_bytes,
                 (unsigned long long)ssm_page_payload_bytes(i));
        break;
    case SSM_PAGE_FAULT_RESERVED: {
        int at = SSM_PAGE_AT_PAYLOAD_CRC + 4;
        while (at < SSM_PAGE_AT_HEADER_CRC - 1 && h[at] == 0)
            at++;
        snprintf(why, sizeof why, "reserved byte %d is 0x%02x (bytes %d..%d are zero)", at,
                 (unsigned)h[at], SSM_PAGE_AT_PAYLOAD_CRC + 4, SSM_PAGE_AT_HEADER_CRC - 1);
        break;
    }
    default:
        snprintf(why, sizeof why, "field %d", (int)fault);
        break;
    }
    return ssm_error_set(SSM_ERR_PAGE_INVALID, "page header describes no valid page: %s", why);
}

/* The one validator of a page's header (ssm_page_read_header): magic,
 * version, header length and checksum, then every field (named when it
 * describes no page), the reserved bytes and the payload length. Needs the
 * whole header; fills *out only when every check passes. */
static ssm_status header_validate(const unsigned char *h, size_t bytes, ssm_page_info *out)
{
    if (bytes < 12)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "not a state page: %zu bytes", bytes);
    for (int k = 0; k < 8; k++)
        if (h[SSM_PAGE_AT_MAGIC + k] != ssm_page_magic(k))
            return ssm_error_set(SSM_ERR_PAGE_INVALID, "not a state page: bad magic");
    uint32_t version = ssm_page_get32(h + SSM_PAGE_AT_VERSION);
    if (version != SSM_PAGE_FORMAT_VERSION)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "page format version %u; ssmstate %s reads version %d",
                             (unsigned)version, PACKAGE_VERSION, SSM_PAGE_FORMAT_VERSION);
    if (bytes < PAGE_HEADER_BYTES)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "truncated page: %zu bytes, its header alone is %d", bytes,
                             PAGE_HEADER_BYTES);
    uint32_t header_bytes = ssm_page_get32(h + SSM_PAGE_AT_HEADER_BYTES);
    if (header_bytes != PAGE_HEADER_BYTES)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page header of %u bytes; version %d has %d",
                             (unsigned)header_bytes, SSM_PAGE_FORMAT_VERSION,
                             PAGE_HEADER_BYTES);
    if (ssm_crc32c(h, SSM_PAGE_AT_HEADER_CRC) != ssm_page_get32(h + SSM_PAGE_AT_HEADER_CRC))
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page header checksum mismatch (corrupt header)");
    ssm_page_info i;
    memset(&i, 0, sizeof i);
    ssm_page_info_read(h, &i);
    /* A header that checksums but describes an impossible page was written
     * by something else: refuse it, naming the field, before sizes are
     * computed from it. */
    ssm_page_fault fault = ssm_page_fields_fault(&i);
    if (fault == SSM_PAGE_FAULT_NONE && i.payload_bytes != ssm_page_payload_bytes(&i))
        fault = SSM_PAGE_FAULT_PAYLOAD_BYTES;
    if (fault == SSM_PAGE_FAULT_NONE && !ssm_page_reserved_clear(h))
        fault = SSM_PAGE_FAULT_RESERVED;
    if (fault != SSM_PAGE_FAULT_NONE)
        return field_fault(fault, &i, h);
    *out = i;
    return SSM_OK;
}

/* The whole page: its header (header_validate), its length and its
 * payload's checksum. `exact`: bytes is the page's own length, so bytes
 * past its payload are refused; else bytes is the room it lies in (a batch's
 * stride) and may run past it. */
static ssm_status page_validate(const void *page, size_t bytes, int exact, ssm_page_info *out)
{
    const unsigned char *h = page;
    ssm_page_info i;
    ssm_status status = header_validate(h, bytes, &i);
    if (status != SSM_OK)
        return status;
    if ((uint64_t)bytes < i.page_bytes)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "truncated page: %zu bytes, its header says %llu", bytes,
                             (unsigned long long)i.page_bytes);
    if (exact && (uint64_t)bytes > i.page_bytes)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "%llu bytes after the page's payload: its header says %llu bytes, "
                             "%zu were given",
                             (unsigned long long)((uint64_t)bytes - i.page_bytes),
                             (unsigned long long)i.page_bytes, bytes);
    if (ssm_crc32c(h + PAGE_HEADER_BYTES, (size_t)i.payload_bytes) != i.payload_crc)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page payload checksum mismatch (corrupt state)");
    *out = i;
    return SSM_OK;
}

ssm_status ssm_page_read_header(const void *header, size_t bytes, ssm_page_info *info)
{
    if (!header || !info)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_page_read_header: NULL argument");
    return header_validate(header, bytes, info);
}

ssm_status ssm_page_inspect(const void *page, size_t bytes, ssm_page_info *info)
{
    if (!page || !info)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_page_inspect: NULL argument");
    return page_validate(page, bytes, 1, info);
}

/* The first difference between a page and the context, as an error. */
static ssm_status page_matches(const ssm_ctx *ctx, const ssm_page_info *page)
{
    static const char *const names[] = {
        [SSM_PAGE_FIELD_KIND] = "model kind",
        [SSM_PAGE_FIELD_LAYERS] = "layers",
        [SSM_PAGE_FIELD_HEADS] = "heads",
        [SSM_PAGE_FIELD_VALUE_HEADS] = "value_heads",
        [SSM_PAGE_FIELD_KEY_DIM] = "key_dim",
        [SSM_PAGE_FIELD_VALUE_DIM] = "value_dim",
        [SSM_PAGE_FIELD_CONV_WIDTH] = "conv_width",
        [SSM_PAGE_FIELD_HAS_LOWER_BOUND] = "has_lower_bound",
        [SSM_PAGE_FIELD_STATE_DTYPE] = "state dtype",
        [SSM_PAGE_FIELD_ACT_DTYPE] = "activation dtype",
    };
    ssm_page_info want;
    info_of_context(ctx, &want);
    int64_t got, expected;
    ssm_page_field field = ssm_page_mismatch(page, &want, &got, &expected);
    switch (field) {
    case SSM_PAGE_FIELD_NONE:
        return SSM_OK;
    case SSM_PAGE_FIELD_HEAD_SLICE:
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "page holds value heads [%d, %d), the context [%d, %d)",
                             (int)page->head_first, (int)page->head_end, (int)want.head_first,
                             (int)want.head_end);
    case SSM_PAGE_FIELD_LOWER_BOUND:
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page has lower_bound %g, the context %g",
                             (double)page->model.lower_bound, (double)want.model.lower_bound);
    default:
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page has %s %lld, the context %lld",
                             names[field], (long long)got, (long long)expected);
    }
}

/* Arrays of a pointer per layer, for payload_point. */
static int pointers_alloc(const ssm_page_info *i, void ***conv, void ***state)
{
    *conv = ssm_malloc(sizeof(void *) * (size_t)i->model.layers);
    *state = ssm_malloc(sizeof(void *) * (size_t)i->model.layers);
    if (*conv && *state)
        return 1;
    ssm_free(*conv);
    ssm_free(*state);
    *conv = *state = NULL;
    return 0;
}

/* Points conv[l] and state[l] at layer l's conv window and state in a
 * payload of layout i, in host or device memory alike. */
static void payload_point(const ssm_page_info *i, unsigned char *payload, void **conv,
                          void **state)
{
    uint64_t c = ssm_page_conv_bytes(i), s = ssm_page_state_bytes(i);
    for (int32_t l = 0; l < i->model.layers; l++) {
        conv[l] = payload + (uint64_t)l * (c + s);
        state[l] = payload + (uint64_t)l * (c + s) + c;
    }
}

/* Whether the context's canonical forms live in device memory (CUDA). */
static int on_device(const ssm_ctx *ctx)
{
    return ctx->config->device.type != SSM_DEVICE_CPU;
}

/* What export and import ask of the slot and the context. */
static ssm_status page_slot_checks(ssm_ctx *ctx, int32_t slot, const char *what)
{
    ssm_status status = ssm_validate_slot(ctx, slot);
    if (status != SSM_OK)
        return status;
    if (ssm_tickets_pending(&ctx->tickets, slot))
        return ssm_error_set(SSM_ERR_VERIFY_PENDING,
                             "slot %d has an uncommitted verify; commit before %s", slot, what);
    if (!ctx->mode->export_slot || !ctx->mode->import_slot)
        return ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' cannot move slots",
                             ctx->mode->name);
    return SSM_OK;
}

/* A CPU context's export of `slot` into `out`, a host page of layout i
 * (checked: room for i->page_bytes): the mode's export into the payload,
 * then the checksums and the header. */
static ssm_status export_into(ssm_ctx *ctx, int32_t slot, ssm_page_info *i, unsigned char *out)
{
    void **conv, **state;
    if (!pointers_alloc(i, &conv, &state))
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    unsigned char *payload = out + PAGE_HEADER_BYTES;
    payload_point(i, payload, conv, state);
    ssm_canonical_v1 dst = {sizeof dst, conv, state};
    ssm_status status = ctx->mode->export_slot(ctx->instance, slot, &dst, NULL);
    ssm_free(conv);
    ssm_free(state);
    if (status != SSM_OK)
        return status;
    i->payload_crc = ssm_crc32c(payload, (size_t)i->payload_bytes);
    ssm_page_header_write(out, i);
    return SSM_OK;
}

/* Room for one of a CUDA context's pages in its staging buffer: the page
 * rounded up to the 8 bytes the device-page kernels move at a time. */
static size_t staged_room(const ssm_ctx *ctx)
{
    return ((size_t)ssm_page_bytes(ctx) + 7) & ~(size_t)7;
}

/* A CUDA context's export of a checked batch: the device pages' export of
 * every slot into one staging buffer (one launch per SSM_PAGE_LAUNCH_SLOTS
 * pages, on the legacy default stream where the staging copies run), then
 * each page to the host. Device pages are byte for byte host pages
 * (docs/pages.md), so these are the pages export_into would write. */
static ssm_status export_pages_staged(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                      unsigned char *pages, size_t stride)
{
    const size_t bytes = (size_t)ssm_page_bytes(ctx), room = staged_room(ctx);
    ssm_page_staging staging;
    ssm_status status = ssm_page_staging_open(ctx, room * (size_t)count, &staging);
    if (status != SSM_OK)
        return status;
    status = ssm_device_pages_export_checked(ctx, count, slots, staging.device, room, NULL);
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        status = ssm_page_staging_read(&staging, (size_t)k * room, pages + (size_t)k * stride,
                                       bytes);
    ssm_page_staging_close(&staging);
    return status;
}

/* Exports slots[k] into the page at pages + k * stride, the slots and room
 * already checked: a CPU context's one by one into the pages themselves, a
 * CUDA context's as one batch through staging. */
static ssm_status export_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                               unsigned char *pages, size_t stride)
{
    if (on_device(ctx))
        return export_pages_staged(ctx, count, slots, pages, stride);
    ssm_page_info i;
    info_of_context(ctx, &i);
    ssm_status status = SSM_OK;
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        status = export_into(ctx, slots[k], &i, pages + (size_t)k * stride);
    return status;
}

ssm_status ssm_slot_export_page(ssm_ctx *ctx, int32_t slot, void *page, size_t capacity)
{
    if (!ctx || !page)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_export_page: NULL argument");
    ssm_status status = page_slot_checks(ctx, slot, "exporting a page");
    if (status != SSM_OK)
        return status;
    if ((uint64_t)capacity < ssm_page_bytes(ctx))
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "a page of this context takes %zu bytes; the buffer has %zu",
                             ssm_page_bytes(ctx), capacity);
    return export_pages(ctx, 1, &slot, page, capacity);
}

/* A page checked against the context, ready to load: the page's length
 * (header and payload), its payload of the context's heads (in the page, or
 * in `taken`, the context's heads copied out of a page that holds more) and
 * the pointer arrays to load it by. A context that loads batches on the
 * device (import_stageable) needs neither copy nor pointers. */
typedef struct prepared_import {
    uint64_t page_bytes;
    const unsigned char *payload;
    unsigned char *taken;
    void **conv, **state;
} prepared_import;

/* Whether a context's imports load as one device batch: a CUDA context
 * whose mode has import_slots. A page that holds more heads than the
 * context's goes to the device whole; the check kernel finds the
 * context's heads in it (docs/pages.md, "Ranks"). */
static int import_stageable(const ssm_ctx *ctx)
{
    return on_device(ctx) && ctx->mode->import_slots;
}

static void import_release(prepared_import *p)
{
    ssm_free(p->conv);
    ssm_free(p->state);
    ssm_free(p->taken);
    memset(p, 0, sizeof *p);
}

/* Every check of an import, and the host allocations it needs: after this,
 * only staging (on a CUDA context) and the mode's own import are left.
 * `exact` as page_validate's (one page: its length; a batch: its stride).
 * Nothing is touched on an error. */
static ssm_status import_prepare(ssm_ctx *ctx, int32_t slot, const void *page, size_t bytes,
                                 int exact, prepared_import *p)
{
    memset(p, 0, sizeof *p);
    ssm_status status = page_slot_checks(ctx, slot, "importing a page");
    ssm_page_info i, want;
    if (status == SSM_OK)
        status = page_validate(page, bytes, exact, &i);
    if (status == SSM_OK)
        status = page_matches(ctx, &i);
    if (status != SSM_OK)
        return status;
    p->page_bytes = i.page_bytes;
    p->payload = (const unsigned char *)page + PAGE_HEADER_BYTES;
    if (import_stageable(ctx))
        return SSM_OK;
    info_of_context(ctx, &want);
    if (i.head_first != want.head_first || i.head_end != want.head_end) {
        p->taken = ssm_malloc((size_t)want.payload_bytes);
        if (!p->taken)
            return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
        ssm_page_copy_slice(&i, (unsigned char *)p->payload, &want, p->taken, 0);
        p->payload = p->taken;
    }
    if (!pointers_alloc(&want, &p->conv, &p->state)) {
        import_release(p);
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    return SSM_OK;
}

/* The mode's import of a payload p's pointers point at. */
static ssm_status import_load(ssm_ctx *ctx, int32_t slot, const prepared_import *p)
{
    ssm_canonical_v1 src = {sizeof src, p->conv, p->state};
    ssm_status status = ctx->mode->import_slot(ctx->instance, slot, &src, NULL);
    if (status == SSM_OK) {
        ctx->slot_flags[slot] = 0; /* the page's state replaces whatever was flagged */
        ssm_device_flags_clear(ctx, slot, NULL);
    }
    return status;
}

/* Loads prepared pages into slots[k], one mode import per slot (a CPU
 * context, or a CUDA context import_stageable refuses: an ABI 0.1 plugin).
 * A CUDA context copies every payload into one staging buffer (count
 * payloads) before any import, so a failed
 * allocation or copy leaves every slot as it was; then the modes' imports
 * run from it and are waited for. */
static ssm_status import_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                               prepared_import *p)
{
    ssm_page_info i;
    info_of_context(ctx, &i);
    const size_t bytes = (size_t)i.payload_bytes;
    ssm_page_staging staging;
    ssm_status status =
        on_device(ctx) ? ssm_page_staging_open(ctx, bytes * (size_t)count, &staging) : SSM_OK;
    for (int32_t k = 0; k < count && status == SSM_OK; k++) {
        unsigned char *payload = (unsigned char *)p[k].payload;
        if (on_device(ctx)) {
            status = ssm_page_staging_write(&staging, (size_t)k * bytes, payload, bytes);
            payload = staging.device + (size_t)k * bytes;
        }
        payload_point(&i, payload, p[k].conv, p[k].state);
    }
    /* Every payload in place: the loads that are left are the modes' own copies. */
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        status = import_load(ctx, slots[k], &p[k]);
    if (on_device(ctx)) {
        if (status == SSM_OK)
            status = ssm_page_staging_wait(&staging);
        ssm_page_staging_close(&staging);
    }
    return status;
}

/* A CUDA context's import of a batch the host has checked whole
 * (import_prepare, import_stageable): every page, whole, and a status word
 * each into one staging buffer (room for the longest page of the batch a
 * page: a rank's context may be given pages of more heads), then the
 * device pages' import, which checks the pages again, takes the context's
 * heads out of each and loads all or none (one launch per
 * SSM_PAGE_LAUNCH_SLOTS pages), waited for. A page the device refuses
 * after the host's checks passed is SSM_ERR_INTERNAL, and no slot changed. */
static ssm_status import_pages_staged(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                      const unsigned char *pages, size_t stride,
                                      const prepared_import *p)
{
    size_t room = staged_room(ctx);
    for (int32_t k = 0; k < count; k++)
        if ((size_t)p[k].page_bytes > room)
            room = ((size_t)p[k].page_bytes + 7) & ~(size_t)7;
    const size_t statuses_at = room * (size_t)count;
    int32_t *statuses = ssm_calloc((size_t)count, sizeof *statuses);
    if (!statuses)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_page_staging staging;
    ssm_status status =
        ssm_page_staging_open(ctx, statuses_at + sizeof *statuses * (size_t)count, &staging);
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        status = ssm_page_staging_write(&staging, (size_t)k * room, pages + (size_t)k * stride,
                                        (size_t)p[k].page_bytes);
    if (status == SSM_OK)
        status = ssm_device_pages_import_checked(ctx, count, slots, staging.device, room,
                                                 (int32_t *)(staging.device + statuses_at),
                                                 NULL);
    if (status == SSM_OK) {
        status = ssm_page_staging_read(&staging, statuses_at, statuses,
                                       sizeof *statuses * (size_t)count);
        if (status != SSM_OK) { /* a device error after the loads were queued */
            char why[256];      /* the message is rewritten below: copy it first */
            snprintf(why, sizeof why, "%s", ssm_last_error());
            ssm_error_set(status, "%s; the import had been launched, so the slots may have "
                                  "changed",
                          why);
        }
    }
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        if (statuses[k] != SSM_PAGE_ACCEPTED)
            status = ssm_error_set(SSM_ERR_INTERNAL,
                                   "page %d (slot %d): the device refused it (page status %d) "
                                   "after the host's checks passed; no slot was changed",
                                   (int)k, (int)slots[k], (int)statuses[k]);
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        ctx->slot_flags[slots[k]] = 0; /* the pages' states replace whatever was flagged */
    ssm_page_staging_close(&staging);
    ssm_free(statuses);
    return status;
}

/* Loads checked pages (pages + k * stride, prepared in p) into slots[k]:
 * as one device batch where import_stageable allows, else import_pages. */
static ssm_status import_checked(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                 const unsigned char *pages, size_t stride, prepared_import *p)
{
    if (import_stageable(ctx))
        return import_pages_staged(ctx, count, slots, pages, stride, p);
    return import_pages(ctx, count, slots, p);
}

ssm_status ssm_slot_import_page(ssm_ctx *ctx, int32_t slot, const void *page, size_t bytes)
{
    if (!ctx || !page)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_import_page: NULL argument");
    prepared_import p;
    ssm_status status = import_prepare(ctx, slot, page, bytes, 1, &p);
    if (status == SSM_OK)
        status = import_checked(ctx, 1, &slot, page, bytes, &p);
    import_release(&p);
    return status;
}

/* ---------------------------------------------------- batched forms */

/* The slots of a batch: non-NULL, count in range, no slot twice. */
static ssm_status batch_slots_ok(const ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                 const void *pages, size_t stride, const char *what)
{
    if (!ctx || !slots || !pages || count < 1 || count > ctx->capacity)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "%s: NULL argument or count %d (1 to the pool's %d slots)", what,
                             (int)count, ctx ? (int)ctx->capacity : 0);
    if ((uint64_t)stride < ssm_page_bytes(ctx))
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "%s: stride %zu is less than a page of this context (%zu bytes)",
                             what, stride, ssm_page_bytes(ctx));
    for (int32_t a = 0; a < count; a++)
        for (int32_t b = a + 1; b < count; b++)
            if (slots[a] == slots[b])
                return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                     "%s: slot %d appears twice (entries %d and %d)", what,
                                     (int)slots[a], (int)a, (int)b);
    return SSM_OK;
}

ssm_status ssm_page_batch_checks(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                 const void *pages, size_t stride, const char *what)
{
    ssm_status status = batch_slots_ok(ctx, count, slots, pages, stride, what);
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        status = page_slot_checks(ctx, slots[k], "moving a page");
    return status;
}

ssm_status ssm_slots_export_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots, void *pages,
                                  size_t stride)
{
    ssm_status status = batch_slots_ok(ctx, count, slots, pages, stride,
                                       "ssm_slots_export_pages");
    for (int32_t k = 0; k < count && status == SSM_OK; k++)
        status = page_slot_checks(ctx, slots[k], "exporting a page");
    return status != SSM_OK ? status : export_pages(ctx, count, slots, pages, stride);
}

ssm_status ssm_slots_import_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                  const void *pages, size_t stride)
{
    ssm_status status = batch_slots_ok(ctx, count, slots, pages, stride,
                                       "ssm_slots_import_pages");
    if (status != SSM_OK)
        return status;
    prepared_import *prepared = ssm_calloc((size_t)count, sizeof *prepared);
    if (!prepared)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    int32_t ready = 0;
    for (; ready < count && status == SSM_OK; ready++) {
        status = import_prepare(ctx, slots[ready],
                                (const unsigned char *)pages + (size_t)ready * stride, stride, 0,
                                &prepared[ready]);
        if (status != SSM_OK) {
            char why[256]; /* the message is rewritten below: copy it first */
            snprintf(why, sizeof why, "%s", ssm_last_error());
            status = ssm_error_set(status, "page %d (slot %d): %s; no slot was changed",
                                   (int)ready, (int)slots[ready], why);
        }
    }
    /* Every page checked: what is left are staging and the modes' own copies. */
    if (status == SSM_OK)
        status = import_checked(ctx, count, slots, pages, stride, prepared);
    for (int32_t k = 0; k < count; k++)
        import_release(&prepared[k]);
    ssm_free(prepared);
    return status;
}
