/* State pages (SPEC 5, issue 6): a slot's canonical form behind a
 * self-describing, checksummed header. docs/pages.md gives the layout byte
 * by byte; this file writes and reads it, and holds the page to the context
 * before anything is loaded. Host-memory pages of CPU contexts so far. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/config_limits.h"
#include "core/context.h"
#include "core/internal.h"
#include "kernels/math.h" /* the fp32 bit casts */

enum {
    PAGE_HEADER_BYTES = 96,
    PAGE_HEADER_CRC_AT = 92 /* the header's own checksum covers [0, 92) */
};

static const unsigned char page_magic[8] = {'S', 'S', 'M', 'P', 'A', 'G', 'E', 0};

/* ------------------------------------------------------------ CRC32C */

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), a byte at a time.
 * docs/pages.md says why this checksum. */
static uint32_t crc32c_table[256];
static int crc32c_ready;

static void crc32c_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[i] = c;
    }
    crc32c_ready = 1; /* idempotent: a racing second fill writes the same values */
}

uint32_t ssm_crc32c(const void *data, size_t bytes)
{
    if (!crc32c_ready)
        crc32c_init();
    const unsigned char *p = data;
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < bytes; i++)
        c = crc32c_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------ little endian */

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The library version as 0x00MMmmpp, from "M.m.p". */
static uint32_t library_version(void)
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

static uint64_t conv_bytes(const ssm_model_dims *m, ssm_dtype act)
{
    return (uint64_t)(m->conv_width - 1) * (uint64_t)ssm_conv_channels(m) * ssm_dtype_size(act);
}

static uint64_t state_bytes(const ssm_model_dims *m, ssm_dtype state, int32_t heads)
{
    return (uint64_t)heads * m->value_dim * m->key_dim * ssm_dtype_size(state);
}

static uint64_t payload_bytes(const ssm_page_info *i)
{
    int32_t heads = i->head_end - i->head_first;
    return (uint64_t)i->model.layers *
           (conv_bytes(&i->model, i->activation_dtype) +
            state_bytes(&i->model, i->state_dtype, heads));
}

static void info_of_context(const ssm_ctx *ctx, ssm_page_info *i)
{
    memset(i, 0, sizeof *i);
    i->format_version = SSM_PAGE_FORMAT_VERSION;
    i->library_version = library_version();
    i->model = ctx->config->model;
    i->state_dtype = ctx->config->state_dtype;
    i->activation_dtype = ctx->config->activation_dtype;
    i->head_first = 0;
    i->head_end = ctx->config->model.value_heads;
    i->payload_bytes = payload_bytes(i);
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

/* The header of docs/pages.md for i, with both checksums. */
static void header_write(unsigned char *h, const ssm_page_info *i)
{
    memset(h, 0, PAGE_HEADER_BYTES);
    memcpy(h, page_magic, sizeof page_magic);
    put32(h + 8, i->format_version);
    put32(h + 12, PAGE_HEADER_BYTES);
    put32(h + 16, i->library_version);
    put32(h + 20, (uint32_t)i->model.kind);
    put32(h + 24, (uint32_t)i->model.layers);
    put32(h + 28, (uint32_t)i->model.heads);
    put32(h + 32, (uint32_t)i->model.value_heads);
    put32(h + 36, (uint32_t)i->model.key_dim);
    put32(h + 40, (uint32_t)i->model.value_dim);
    put32(h + 44, (uint32_t)i->model.conv_width);
    put32(h + 48, (uint32_t)i->model.has_lower_bound);
    put32(h + 52, ssm_f32_bits(i->model.lower_bound));
    put32(h + 56, (uint32_t)i->state_dtype);
    put32(h + 60, (uint32_t)i->activation_dtype);
    put32(h + 64, (uint32_t)i->head_first);
    put32(h + 68, (uint32_t)i->head_end);
    put64(h + 72, i->payload_bytes);
    put32(h + 80, i->payload_crc);
    put32(h + PAGE_HEADER_CRC_AT, ssm_crc32c(h, PAGE_HEADER_CRC_AT));
}

static int in_range(int32_t v, int32_t max) { return v >= 1 && v <= max; }

ssm_status ssm_page_inspect(const void *page, size_t bytes, ssm_page_info *info)
{
    if (!page || !info)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_page_inspect: NULL argument");
    const unsigned char *h = page;
    if (bytes < 12)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "not a state page: %zu bytes", bytes);
    if (memcmp(h, page_magic, sizeof page_magic) != 0)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "not a state page: bad magic");
    ssm_page_info i;
    memset(&i, 0, sizeof i);
    i.format_version = get32(h + 8);
    if (i.format_version != SSM_PAGE_FORMAT_VERSION)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "page format version %u; ssmstate %s reads version %d",
                             (unsigned)i.format_version, PACKAGE_VERSION, SSM_PAGE_FORMAT_VERSION);
    if (bytes < PAGE_HEADER_BYTES)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "truncated page: %zu bytes, its header alone is %d", bytes,
                             PAGE_HEADER_BYTES);
    if (get32(h + 12) != PAGE_HEADER_BYTES)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page header of %u bytes; version %d has %d",
                             (unsigned)get32(h + 12), SSM_PAGE_FORMAT_VERSION,
                             PAGE_HEADER_BYTES);
    uint32_t header_crc = get32(h + PAGE_HEADER_CRC_AT);
    if (ssm_crc32c(h, PAGE_HEADER_CRC_AT) != header_crc)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page header checksum mismatch (corrupt header)");
    i.library_version = get32(h + 16);
    i.model.kind = (ssm_model_kind)get32(h + 20);
    i.model.layers = (int32_t)get32(h + 24);
    i.model.heads = (int32_t)get32(h + 28);
    i.model.value_heads = (int32_t)get32(h + 32);
    i.model.key_dim = (int32_t)get32(h + 36);
    i.model.value_dim = (int32_t)get32(h + 40);
    i.model.conv_width = (int32_t)get32(h + 44);
    i.model.has_lower_bound = (int32_t)get32(h + 48);
    i.model.lower_bound = ssm_f32_from_bits(get32(h + 52));
    i.state_dtype = (ssm_dtype)get32(h + 56);
    i.activation_dtype = (ssm_dtype)get32(h + 60);
    i.head_first = (int32_t)get32(h + 64);
    i.head_end = (int32_t)get32(h + 68);
    i.payload_bytes = get64(h + 72);
    i.payload_crc = get32(h + 80);
    /* A header that checksums but describes an impossible page was written
     * by something else: refuse it before sizes are computed from it. */
    const ssm_model_dims *m = &i.model; /* within the config's limits: no size overflows */
    int dims_ok = (m->kind == SSM_MODEL_GDN || m->kind == SSM_MODEL_KDA) &&
                  in_range(m->layers, SSM_MAX_LAYERS) && in_range(m->heads, SSM_MAX_HEADS) &&
                  in_range(m->value_heads, SSM_MAX_HEADS) && m->value_heads % m->heads == 0 &&
                  in_range(m->key_dim, SSM_MAX_HEAD_DIM) &&
                  in_range(m->value_dim, SSM_MAX_HEAD_DIM) &&
                  in_range(m->conv_width, SSM_MAX_CONV_WIDTH) &&
                  (i.state_dtype == SSM_DTYPE_F32 || i.state_dtype == SSM_DTYPE_BF16) &&
                  (i.activation_dtype == SSM_DTYPE_F32 || i.activation_dtype == SSM_DTYPE_BF16) &&
                  i.head_first >= 0 && i.head_first < i.head_end &&
                  i.head_end <= i.model.value_heads;
    if (!dims_ok || i.payload_bytes != payload_bytes(&i))
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "page header describes no valid page (dims, dtypes, head slice or "
                             "payload size)");
    i.page_bytes = PAGE_HEADER_BYTES + i.payload_bytes;
    if ((uint64_t)bytes < i.page_bytes)
        return ssm_error_set(SSM_ERR_PAGE_INVALID,
                             "truncated page: %zu bytes, its header says %llu", bytes,
                             (unsigned long long)i.page_bytes);
    if (ssm_crc32c(h + PAGE_HEADER_BYTES, (size_t)i.payload_bytes) != i.payload_crc)
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page payload checksum mismatch (corrupt state)");
    *info = i;
    return SSM_OK;
}

/* The first difference between a page and the context, as an error. */
static ssm_status page_matches(const ssm_ctx *ctx, const ssm_page_info *page)
{
    ssm_page_info want;
    info_of_context(ctx, &want);
    const ssm_model_dims *a = &page->model, *b = &want.model;
#define SSM_PAGE_FIELD(name, got, expected)                                                     \
    if ((got) != (expected))                                                                   \
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page has %s %lld, the context %lld", name, \
                             (long long)(got), (long long)(expected));
    SSM_PAGE_FIELD("model kind", a->kind, b->kind)
    SSM_PAGE_FIELD("layers", a->layers, b->layers)
    SSM_PAGE_FIELD("heads", a->heads, b->heads)
    SSM_PAGE_FIELD("value_heads", a->value_heads, b->value_heads)
    SSM_PAGE_FIELD("key_dim", a->key_dim, b->key_dim)
    SSM_PAGE_FIELD("value_dim", a->value_dim, b->value_dim)
    SSM_PAGE_FIELD("conv_width", a->conv_width, b->conv_width)
    SSM_PAGE_FIELD("has_lower_bound", a->has_lower_bound, b->has_lower_bound)
    SSM_PAGE_FIELD("state dtype", page->state_dtype, want.state_dtype)
    SSM_PAGE_FIELD("activation dtype", page->activation_dtype, want.activation_dtype)
    SSM_PAGE_FIELD("first value head", page->head_first, want.head_first)
    SSM_PAGE_FIELD("value head end", page->head_end, want.head_end)
#undef SSM_PAGE_FIELD
    if (a->has_lower_bound && ssm_f32_bits(a->lower_bound) != ssm_f32_bits(b->lower_bound))
        return ssm_error_set(SSM_ERR_PAGE_INVALID, "page has lower_bound %g, the context %g",
                             (double)a->lower_bound, (double)b->lower_bound);
    return SSM_OK;
}

/* Pointers to each layer's conv window and state inside a page's payload. */
static int payload_pointers(const ssm_page_info *i, unsigned char *payload, void ***conv,
                            void ***state)
{
    int32_t layers = i->model.layers;
    *conv = malloc(sizeof(void *) * (size_t)layers);
    *state = malloc(sizeof(void *) * (size_t)layers);
    if (!*conv || !*state) {
        free(*conv);
        free(*state);
        return 0;
    }
    uint64_t c = conv_bytes(&i->model, i->activation_dtype);
    uint64_t s = state_bytes(&i->model, i->state_dtype, i->head_end - i->head_first);
    for (int32_t l = 0; l < layers; l++) {
        (*conv)[l] = payload + (uint64_t)l * (c + s);
        (*state)[l] = payload + (uint64_t)l * (c + s) + c;
    }
    return 1;
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
    if (ctx->config->device.type != SSM_DEVICE_CPU)
        return ssm_error_set(SSM_ERR_UNSUPPORTED,
                             "%s: host pages of a CUDA context are not implemented yet", what);
    if (!ctx->mode->export_slot || !ctx->mode->import_slot)
        return ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' cannot move slots",
                             ctx->mode->name);
    return SSM_OK;
}

ssm_status ssm_slot_export_page(ssm_ctx *ctx, int32_t slot, void *page, size_t capacity)
{
    if (!ctx || !page)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_export_page: NULL argument");
    ssm_status status = page_slot_checks(ctx, slot, "exporting a page");
    if (status != SSM_OK)
        return status;
    ssm_page_info i;
    info_of_context(ctx, &i);
    if ((uint64_t)capacity < i.page_bytes)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "a page of this context takes %llu bytes; the buffer has %zu",
                             (unsigned long long)i.page_bytes, capacity);
    unsigned char *bytes = page;
    void **conv, **state;
    if (!payload_pointers(&i, bytes + PAGE_HEADER_BYTES, &conv, &state))
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_canonical_v1 dst = {sizeof dst, conv, state};
    status = ctx->mode->export_slot(ctx->instance, slot, &dst, NULL);
    free(conv);
    free(state);
    if (status != SSM_OK)
        return status;
    i.payload_crc = ssm_crc32c(bytes + PAGE_HEADER_BYTES, (size_t)i.payload_bytes);
    header_write(bytes, &i);
    return SSM_OK;
}

ssm_status ssm_slot_import_page(ssm_ctx *ctx, int32_t slot, const void *page, size_t bytes)
{
    if (!ctx || !page)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_slot_import_page: NULL argument");
    ssm_status status = page_slot_checks(ctx, slot, "importing a page");
    ssm_page_info i;
    if (status == SSM_OK)
        status = ssm_page_inspect(page, bytes, &i);
    if (status == SSM_OK)
        status = page_matches(ctx, &i);
    if (status != SSM_OK)
        return status; /* nothing was touched */
    void **conv, **state;
    if (!payload_pointers(&i, (unsigned char *)page + PAGE_HEADER_BYTES, &conv, &state))
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_canonical_v1 src = {sizeof src, conv, state};
    status = ctx->mode->import_slot(ctx->instance, slot, &src, NULL);
    free(conv);
    free(state);
    if (status == SSM_OK)
        ctx->slot_flags[slot] = 0; /* the page's state replaces whatever was flagged */
    return status;
}
