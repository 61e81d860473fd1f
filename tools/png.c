/* PNG encoder (see png.h): signature, IHDR, PLTE, one IDAT, IEND. The IDAT
 * holds a zlib stream of one deflate block with the fixed Huffman codes
 * (RFC 1951 3.2.6) and a greedy LZ77 matcher that looks back one byte (a
 * run of one colour) and one scanline (a row repeating the row above). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "png.h"

enum {
    CHUNK_OVERHEAD = 12, /* length, type, CRC */
    MATCH_MIN = 3,       /* deflate's shortest and longest match */
    MATCH_MAX = 258,
    WINDOW = 32768       /* deflate's farthest distance */
};

uint32_t png_crc32(uint32_t crc, const void *data, size_t len)
{
    const uint8_t *p = data;
    crc = ~crc;
    for (size_t i = 0; i < len; i++) {
        crc ^= p[i];
        for (int bit = 0; bit < 8; bit++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

uint32_t png_adler32(uint32_t adler, const void *data, size_t len)
{
    const uint8_t *p = data;
    uint32_t a = adler & 0xffff, b = adler >> 16;
    for (size_t i = 0; i < len; i++) {
        a = (a + p[i]) % 65521u;
        b = (b + a) % 65521u;
    }
    return (b << 16) | a;
}

/* Writes v big-endian at p; returns p + 4. */
static uint8_t *put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

/* Writes a chunk of `len` data bytes already at p + 8 (the caller put them
 * there): length, type, then the CRC of type and data. Returns the end. */
static uint8_t *seal_chunk(uint8_t *p, const char *type, size_t len)
{
    put32(p, (uint32_t)len);
    memcpy(p + 4, type, 4);
    return put32(p + 8 + len, png_crc32(0, p + 4, 4 + len));
}

/* ------------------------------------------------------------- deflate */

/* Bits go out least significant first, as RFC 1951 3.1.1 packs them. */
typedef struct bit_writer {
    uint8_t *p;    /* the next whole byte */
    uint32_t bits; /* pending bits, the oldest lowest */
    int count;     /* how many pending: 0 .. 7 between calls */
} bit_writer;

/* The low n (<= 24) bits of value, lowest first: header fields, extra bits. */
static void put_bits(bit_writer *w, uint32_t value, int n)
{
    w->bits |= value << w->count;
    w->count += n;
    for (; w->count >= 8; w->count -= 8, w->bits >>= 8)
        *w->p++ = (uint8_t)w->bits;
}

/* An n-bit Huffman code, its most significant bit first (RFC 1951 3.1.1). */
static void put_code(bit_writer *w, uint32_t code, int n)
{
    uint32_t reversed = 0;
    for (int i = 0; i < n; i++)
        reversed |= (code >> i & 1u) << (n - 1 - i);
    put_bits(w, reversed, n);
}

/* Flushes the last partial byte (zero padded); returns the end. */
static uint8_t *flush_bits(bit_writer *w)
{
    if (w->count > 0)
        put_bits(w, 0, 8 - w->count);
    return w->p;
}

/* A literal/length symbol (0 .. 285) in the fixed code (RFC 1951 3.2.6). */
static void put_symbol(bit_writer *w, int sym)
{
    if (sym < 144)
        put_code(w, 0x30u + (uint32_t)sym, 8);
    else if (sym < 256)
        put_code(w, 0x190u + (uint32_t)(sym - 144), 9);
    else if (sym < 280)
        put_code(w, (uint32_t)(sym - 256), 7);
    else
        put_code(w, 0xc0u + (uint32_t)(sym - 280), 8);
}

/* A byte as itself: symbols 0 .. 255 of the literal/length code. */
static void put_literal(bit_writer *w, uint8_t byte)
{
    put_symbol(w, byte);
}

/* The length codes 257 .. 285 and distance codes 0 .. 29 of RFC 1951 3.2.5:
 * the smallest value each stands for and its extra bits. */
static const uint16_t length_base[29] = {3,  4,  5,  6,  7,  8,  9,  10,  11,  13,
                                         15, 17, 19, 23, 27, 31, 35, 43,  51,  59,
                                         67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t length_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                         2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t distance_base[30] = {
    1,   2,   3,   4,   5,   7,    9,    13,   17,   25,   33,   49,   65,    97,    129,
    193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t distance_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                           6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

/* A match: `length` (3 .. 258) bytes copied from `distance` (1 .. 32768)
 * back. The fixed distance codes are 5 bits, the code itself. */
static void put_match(bit_writer *w, size_t length, size_t distance)
{
    int l = 28, d = 29;
    while (length_base[l] > length)
        l--;
    while (distance_base[d] > distance)
        d--;
    put_symbol(w, 257 + l);
    put_bits(w, (uint32_t)(length - length_base[l]), length_extra[l]);
    put_code(w, (uint32_t)d, 5);
    put_bits(w, (uint32_t)(distance - distance_base[d]), distance_extra[d]);
}

/* How many bytes from `at` on equal those `distance` back (at most
 * MATCH_MAX, none before the start). */
static size_t match_length(const uint8_t *data, size_t n, size_t at, size_t distance)
{
    if (distance == 0 || distance > at)
        return 0;
    size_t limit = n - at < MATCH_MAX ? n - at : MATCH_MAX, k = 0;
    while (k < limit && data[at + k] == data[at + k - distance])
        k++;
    return k;
}

/* Bytes of deflate data for n bytes, at most: every byte a 9-bit literal,
 * the 3 header bits, the 7-bit end code, up to 7 bits of padding. A match
 * never costs more than 9 bits a byte: 3 .. 10 bytes take a 7-bit length
 * code and no extra bits, then at most 5 + 13 for the distance (25 <= 27);
 * longer ones at most 8 + 5 + 5 + 13 = 31 bits (<= 99). */
static size_t deflate_bound(size_t n)
{
    return (3 + 9 * n + 7 + 7) / 8;
}

/* `data` (n bytes, `row` a scanline) as one final fixed-Huffman block at p.
 * Greedy: at each byte, the longer match at distance 1 or one row up (the
 * shorter distance on a tie), else a literal. Returns the end. */
static uint8_t *put_deflate(uint8_t *p, const uint8_t *data, size_t n, size_t row)
{
    bit_writer w = {p, 0, 0};
    put_bits(&w, 1, 1); /* BFINAL */
    put_bits(&w, 1, 2); /* BTYPE 01: fixed Huffman codes */
    for (size_t at = 0; at < n;) {
        size_t length = match_length(data, n, at, 1), distance = 1;
        if (row <= WINDOW) {
            size_t up = match_length(data, n, at, row);
            if (up > length) {
                length = up;
                distance = row;
            }
        }
        if (length >= MATCH_MIN) {
            put_match(&w, length, distance);
            at += length;
        } else {
            put_literal(&w, data[at++]);
        }
    }
    put_symbol(&w, 256); /* end of block */
    return flush_bits(&w);
}

/* ---------------------------------------------------------------- PNG */

/* 1 when the image can be encoded: sizes, palette, every index in it. */
static int image_ok(const png_image *im)
{
    if (!im || !im->pixels || !im->palette || im->width < 1 || im->height < 1 ||
        im->width > 65535 || im->height > 65535 || im->colors < 1 || im->colors > 256)
        return 0;
    for (size_t i = 0; i < (size_t)im->width * (size_t)im->height; i++)
        if (im->pixels[i] >= im->colors)
            return 0;
    return 1;
}

/* The filtered scanlines: filter 0 (none) before each row. NULL when out of
 * memory. */
static uint8_t *scanlines(const png_image *im, size_t row, size_t raw)
{
    uint8_t *data = malloc(raw);
    if (!data)
        return NULL;
    for (size_t y = 0; y < (size_t)im->height; y++) {
        data[y * row] = 0;
        memcpy(data + y * row + 1, im->pixels + y * (size_t)im->width, (size_t)im->width);
    }
    return data;
}

int png_encode(const png_image *im, uint8_t **out, size_t *out_len)
{
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (!image_ok(im) || !out || !out_len)
        return -1;
    const size_t row = 1 + (size_t)im->width, raw = row * (size_t)im->height;
    if (raw > SIZE_MAX / 16) /* keeps the bound below from overflowing */
        return -1;
    const size_t zlib = 2 + deflate_bound(raw) + 4;
    const size_t total = sizeof signature + (CHUNK_OVERHEAD + 13) +
                         (CHUNK_OVERHEAD + 3 * (size_t)im->colors) + (CHUNK_OVERHEAD + zlib) +
                         CHUNK_OVERHEAD;
    uint8_t *data = scanlines(im, row, raw);
    uint8_t *buf = data ? malloc(total) : NULL;
    if (!buf) {
        free(data);
        return -1;
    }
    uint8_t *p = buf;
    memcpy(p, signature, sizeof signature);
    p += sizeof signature;

    uint8_t *ihdr = p + 8;
    ihdr = put32(ihdr, (uint32_t)im->width);
    ihdr = put32(ihdr, (uint32_t)im->height);
    ihdr[0] = 8; /* bit depth */
    ihdr[1] = 3; /* color type: palette */
    ihdr[2] = ihdr[3] = ihdr[4] = 0; /* deflate, adaptive filtering, no interlace */
    p = seal_chunk(p, "IHDR", 13);

    memcpy(p + 8, im->palette, 3 * (size_t)im->colors);
    p = seal_chunk(p, "PLTE", 3 * (size_t)im->colors);

    uint8_t *z = p + 8;
    z[0] = 0x78; /* deflate, 32 KiB window */
    z[1] = 0x01; /* no dictionary, "fastest" (advisory); 0x7801 % 31 == 0 */
    uint8_t *end = put32(put_deflate(z + 2, data, raw, row), png_adler32(1, data, raw));
    p = seal_chunk(p, "IDAT", (size_t)(end - z));
    free(data);

    p = seal_chunk(p, "IEND", 0);
    *out = buf;
    *out_len = (size_t)(p - buf);
    return 0;
}

int png_write_file(const char *path, const png_image *image, char *error, size_t len)
{
    uint8_t *bytes = NULL;
    size_t size = 0;
    if (png_encode(image, &bytes, &size) != 0) {
        snprintf(error, len, "%s: cannot encode the image (bad size or out of memory)", path);
        return -1;
    }
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(bytes, 1, size, f) == size;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok)
        snprintf(error, len, "%s: cannot write: %s", path, strerror(errno));
    free(bytes);
    return ok ? 0 : -1;
}
