/* The PNG checker of the tests (see png_validate.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/png_validate.h"

uint32_t png_validate_crc32(const uint8_t *data, size_t len)
{
    uint32_t table[256];
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[n] = c;
    }
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < len; i++)
        crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
    return crc ^ 0xffffffffu;
}

uint32_t png_validate_adler32(const uint8_t *data, size_t len)
{
    uint64_t a = 1, b = 0;
    for (size_t i = 0; i < len; i++) {
        a += data[i];
        b += a;
        if ((i & 0xfff) == 0xfff) { /* keep the sums small */
            a %= 65521;
            b %= 65521;
        }
    }
    return (uint32_t)((b % 65521) << 16 | (a % 65521));
}

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int fail(char *why, size_t len, const char *message)
{
    snprintf(why, len, "%s", message);
    return -1;
}

/* ------------------------------------------------------------- inflate */

/* A zlib stream being inflated: its deflate data read a bit at a time,
 * least significant first (RFC 1951 3.1.1), never past `end`; the output
 * grown as needed, never past `limit` bytes. */
typedef struct inflater {
    const uint8_t *z;
    size_t end, bit;          /* bytes of deflate data (Adler-32 excluded), bits read */
    uint8_t *out;
    size_t size, room, limit; /* bytes out, allocated, allowed */
    char *why;
    size_t why_len;
} inflater;

/* The next n (<= 16) bits as a number, the first read lowest. */
static int take_bits(inflater *f, int n, uint32_t *value)
{
    if (8 * f->end - f->bit < (size_t)n)
        return fail(f->why, f->why_len, "deflate data ends inside a block");
    uint32_t v = 0;
    for (int i = 0; i < n; i++, f->bit++)
        v |= (uint32_t)(f->z[f->bit >> 3] >> (f->bit & 7) & 1) << i;
    *value = v;
    return 0;
}

/* Appends a byte to the output, never past its limit. */
static int put_byte(inflater *f, uint8_t byte)
{
    if (f->size == f->limit)
        return fail(f->why, f->why_len,
                    "inflated data is longer than height * (1 + width * bpp) bytes");
    if (f->size == f->room) {
        size_t room = f->room ? 2 * f->room : 4096;
        room = room < f->limit ? room : f->limit;
        uint8_t *grown = realloc(f->out, room);
        if (!grown)
            return fail(f->why, f->why_len, "out of memory");
        f->out = grown;
        f->room = room;
    }
    f->out[f->size++] = byte;
    return 0;
}

/* A stored block (BTYPE 00) after its 3 header bits. */
static int inflate_stored(inflater *f)
{
    size_t at = (f->bit + 7) / 8; /* LEN starts on a byte boundary */
    if (f->end - at < 4)
        return fail(f->why, f->why_len, "truncated stored block header");
    uint32_t block = f->z[at] | (uint32_t)f->z[at + 1] << 8;
    uint32_t complement = f->z[at + 2] | (uint32_t)f->z[at + 3] << 8;
    if ((block ^ 0xffff) != complement)
        return fail(f->why, f->why_len, "stored block LEN and NLEN disagree");
    at += 4;
    if (f->end - at < block)
        return fail(f->why, f->why_len, "stored block runs past the stream");
    for (uint32_t i = 0; i < block; i++)
        if (put_byte(f, f->z[at + i]))
            return -1;
    f->bit = 8 * (at + block);
    return 0;
}

/* One symbol of the fixed literal/length code (RFC 1951 3.2.6), the code
 * read most significant bit first: 7 bits 0000000 .. 0010111 are 256 .. 279,
 * 8 bits 00110000 .. 10111111 are 0 .. 143 and 11000000 .. 11000111 are
 * 280 .. 287, 9 bits 110010000 .. 111111111 are 144 .. 255. */
static int fixed_symbol(inflater *f, uint32_t *symbol)
{
    uint32_t code = 0, bit;
    for (int n = 1; n <= 9; n++) {
        if (take_bits(f, 1, &bit))
            return -1;
        code = code << 1 | bit;
        if (n == 7 && code <= 0x17)
            *symbol = 256 + code;
        else if (n == 8 && code >= 0x30 && code <= 0xbf)
            *symbol = code - 0x30;
        else if (n == 8 && code >= 0xc0 && code <= 0xc7)
            *symbol = 280 + (code - 0xc0);
        else if (n == 9 && code >= 0x190)
            *symbol = 144 + (code - 0x190);
        else
            continue;
        return 0;
    }
    return fail(f->why, f->why_len, "no fixed literal/length code matches"); /* unreachable */
}

/* A length (symbol 257 .. 285) or a distance (code 0 .. 29) with its extra
 * bits (RFC 1951 3.2.5): the first `plain` codes stand for one value each
 * from `first`; after them, the extra bits grow by one every `step` codes. */
static int code_value(inflater *f, uint32_t code, uint32_t first, uint32_t plain,
                      uint32_t step, uint32_t *value)
{
    uint32_t base = first, extra = 0;
    for (uint32_t c = 0; c < code; c++) {
        extra = c < plain ? 0 : (c - plain + step) / step;
        base += 1u << extra;
    }
    extra = code < plain ? 0 : (code - plain + step) / step;
    uint32_t more;
    if (take_bits(f, (int)extra, &more))
        return -1;
    *value = base + more;
    return 0;
}

/* A fixed-Huffman block (BTYPE 01) after its 3 header bits. */
static int inflate_fixed(inflater *f)
{
    for (;;) {
        uint32_t symbol, length, code, distance;
        if (fixed_symbol(f, &symbol))
            return -1;
        if (symbol < 256) {
            if (put_byte(f, (uint8_t)symbol))
                return -1;
            continue;
        }
        if (symbol == 256)
            return 0;
        if (symbol > 285)
            return fail(f->why, f->why_len, "length symbol 286 or 287 (not in deflate)");
        if (symbol == 285)
            length = 258;
        else if (code_value(f, symbol - 257, 3, 8, 4, &length))
            return -1;
        if (take_bits(f, 5, &code)) /* 5-bit distance code, most significant bit first */
            return -1;
        code = (code & 1) << 4 | (code & 2) << 2 | (code & 4) | (code & 8) >> 2 | (code & 16) >> 4;
        if (code > 29)
            return fail(f->why, f->why_len, "distance code 30 or 31 (not in deflate)");
        if (code_value(f, code, 1, 4, 2, &distance))
            return -1;
        if (distance > f->size)
            return fail(f->why, f->why_len, "a distance points before the start of the output");
        for (uint32_t i = 0; i < length; i++)
            if (put_byte(f, f->out[f->size - distance]))
                return -1;
    }
}

/* Inflates a zlib stream (stored and fixed-Huffman deflate blocks, any
 * number, up to the one marked final) into a malloc'ed buffer of at most
 * `limit` bytes, and checks its Adler-32. */
static int inflate_zlib(const uint8_t *z, size_t n, size_t limit, uint8_t **out, size_t *out_len,
                        char *why, size_t len)
{
    if (n < 6)
        return fail(why, len, "zlib stream too short");
    if ((z[0] & 0x0f) != 8 || (z[0] >> 4) > 7 || ((unsigned)z[0] << 8 | z[1]) % 31 != 0)
        return fail(why, len, "bad zlib header");
    if (z[1] & 0x20)
        return fail(why, len, "zlib preset dictionary");
    inflater f = {z + 2, n - 6, 0, NULL, 0, 0, limit, why, len};
    int status = 0;
    for (uint32_t final = 0, header = 0; status == 0 && !final;) {
        if (8 * f.end - f.bit < 3) {
            status = fail(why, len, "deflate stream ends without a final block");
            break;
        }
        take_bits(&f, 3, &header);
        final = header & 1;
        if (header >> 1 == 0)
            status = inflate_stored(&f);
        else if (header >> 1 == 1)
            status = inflate_fixed(&f);
        else if (header >> 1 == 2)
            status = fail(why, len, "dynamic Huffman block (BTYPE 10): this checker inflates "
                                    "stored and fixed-Huffman blocks only");
        else
            status = fail(why, len, "deflate block of the reserved type BTYPE 11");
    }
    if (status == 0 && (f.bit + 7) / 8 != f.end)
        status = fail(why, len, "bytes between the final deflate block and the Adler-32");
    if (status == 0 && be32(z + n - 4) != png_validate_adler32(f.out, f.size))
        status = fail(why, len, "Adler-32 of the zlib stream does not match");
    if (status != 0) {
        free(f.out);
        return -1;
    }
    *out = f.out;
    *out_len = f.size;
    return 0;
}

/* ----------------------------------------------------------------- PNG */

static size_t channels_of(uint8_t color_type)
{
    return color_type == 0 ? 1 : color_type == 2 ? 3 : color_type == 3 ? 1 : 0;
}

/* height * (1 + width * bytes per pixel): what the image data inflates to. */
static size_t expected_bytes(const png_facts *f)
{
    /* Width and height below 2^31: at most 2^31 * (1 + 3 * 2^31) < 2^64. */
    const uint64_t bytes = (1 + (uint64_t)f->width * channels_of(f->color_type)) * f->height;
    return bytes < SIZE_MAX ? (size_t)bytes : SIZE_MAX;
}

/* Checks the inflated scanlines: size and filter bytes. */
static int check_pixels(const png_facts *f, const uint8_t *data, size_t n, char *why, size_t len)
{
    const size_t row = 1 + (size_t)f->width * channels_of(f->color_type);
    if (n != expected_bytes(f))
        return fail(why, len, "inflated image data is not height * (1 + width * bpp) bytes");
    for (uint32_t y = 0; y < f->height; y++)
        if (data[(size_t)y * row] > 4)
            return fail(why, len, "a scanline has a filter type above 4");
    return 0;
}

int png_validate(const uint8_t *bytes, size_t len, png_facts *facts, char *why, size_t why_len)
{
    return png_validate_data(bytes, len, facts, NULL, why, why_len);
}

int png_validate_data(const uint8_t *bytes, size_t len, png_facts *facts, uint8_t **data_out,
                      char *why, size_t why_len)
{
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    png_facts f;
    memset(&f, 0, sizeof f);
    if (len < 8 || memcmp(bytes, signature, 8) != 0)
        return fail(why, why_len, "not a PNG signature");
    size_t at = 8, idat_len = 0;
    uint8_t *idat = NULL;
    int chunks = 0, seen_end = 0, idat_done = 0, status = 0;
    while (!seen_end && status == 0) {
        if (at + 12 > len) {
            status = fail(why, why_len, "file ends before IEND");
            break;
        }
        uint32_t n = be32(bytes + at);
        const uint8_t *type = bytes + at + 4, *data = bytes + at + 8;
        if (n > 0x7fffffffu || at + 12 + (size_t)n > len) {
            status = fail(why, why_len, "a chunk runs past the end of the file");
            break;
        }
        if (be32(data + n) != png_validate_crc32(type, 4 + (size_t)n)) {
            snprintf(why, why_len, "CRC of chunk %.4s does not match", (const char *)type);
            status = -1;
            break;
        }
        int is_idat = !memcmp(type, "IDAT", 4);
        if (chunks == 0 && (memcmp(type, "IHDR", 4) != 0 || n != 13))
            status = fail(why, why_len, "the first chunk is not a 13-byte IHDR");
        else if (chunks == 0) {
            f.width = be32(data);
            f.height = be32(data + 4);
            f.color_type = data[9];
            if (f.width == 0 || f.height == 0 || data[8] != 8 || !channels_of(f.color_type) ||
                data[10] || data[11] || data[12])
                status = fail(why, why_len, "IHDR: zero size, or a format this checker lacks");
            else if (f.width > 0x7fffffffu || f.height > 0x7fffffffu)
                status = fail(why, why_len, "IHDR: width or height above 2^31 - 1");
        } else if (!memcmp(type, "PLTE", 4)) {
            if (n % 3 || n == 0 || n > 768 || idat_len)
                status = fail(why, why_len, "bad PLTE");
            f.palette_colors = n / 3;
        } else if (is_idat) {
            if (idat_done)
                status = fail(why, why_len, "IDAT chunks are not consecutive");
            uint8_t *grown = status ? NULL : realloc(idat, idat_len + n + 1);
            if (!status && !grown)
                status = fail(why, why_len, "out of memory");
            if (!status) {
                idat = grown;
                memcpy(idat + idat_len, data, n);
                idat_len += n;
            }
        } else if (!memcmp(type, "IEND", 4)) {
            seen_end = 1;
            if (n != 0 || at + 12 != len)
                status = fail(why, why_len, "IEND is not empty, or not the last bytes");
        }
        if (!is_idat && idat_len)
            idat_done = 1;
        chunks++;
        at += 12 + (size_t)n;
    }
    if (status == 0 && !idat_len)
        status = fail(why, why_len, "no IDAT chunk");
    if (status == 0 && f.color_type == 3 && f.palette_colors == 0)
        status = fail(why, why_len, "a palette image without PLTE");
    uint8_t *pixels = NULL;
    if (status == 0)
        status = inflate_zlib(idat, idat_len, expected_bytes(&f), &pixels, &f.pixel_bytes, why,
                              why_len);
    if (status == 0)
        status = check_pixels(&f, pixels, f.pixel_bytes, why, why_len);
    if (status == 0 && f.color_type == 3) {
        const size_t row = 1 + (size_t)f.width;
        for (size_t i = 0; status == 0 && i < f.pixel_bytes; i++)
            if (i % row && pixels[i] >= f.palette_colors)
                status = fail(why, why_len, "a pixel indexes past the palette");
    }
    free(idat);
    if (status == 0 && data_out)
        *data_out = pixels;
    else
        free(pixels);
    if (status == 0)
        *facts = f;
    return status;
}
