/* PNG encoder (see png.h): signature, IHDR, PLTE, one IDAT with a zlib
 * stream of stored deflate blocks, IEND. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "png.h"

enum {
    STORED_MAX = 65535, /* bytes in one stored deflate block */
    CHUNK_OVERHEAD = 12 /* length, type, CRC */
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

/* The filtered scanlines (filter 0 before each row) wrapped in a zlib
 * stream of stored blocks, written at p. Returns the end. */
static uint8_t *put_zlib(uint8_t *p, const png_image *im)
{
    const size_t row = 1 + (size_t)im->width, raw = row * (size_t)im->height;
    size_t done = 0, in_block = 0, block_left = 0;
    uint32_t adler = 1;
    *p++ = 0x78; /* deflate, 32 KiB window */
    *p++ = 0x01; /* no dictionary, fastest; 0x7801 % 31 == 0 */
    for (int32_t y = 0; y < im->height; y++) {
        for (size_t x = 0; x < row; x++, done++) {
            if (block_left == 0) {
                block_left = raw - done < STORED_MAX ? raw - done : STORED_MAX;
                *p++ = done + block_left == raw; /* BFINAL, BTYPE 00 */
                *p++ = (uint8_t)block_left;
                *p++ = (uint8_t)(block_left >> 8);
                *p++ = (uint8_t)~block_left;
                *p++ = (uint8_t)(~block_left >> 8);
                in_block = 0;
            }
            uint8_t byte = x == 0 ? 0 : im->pixels[(size_t)y * (size_t)im->width + x - 1];
            adler = png_adler32(adler, &byte, 1);
            p[in_block++] = byte;
            block_left--;
            if (block_left == 0)
                p += in_block;
        }
    }
    return put32(p, adler);
}

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

int png_encode(const png_image *im, uint8_t **out, size_t *out_len)
{
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (!image_ok(im) || !out || !out_len)
        return -1;
    const size_t raw = (1 + (size_t)im->width) * (size_t)im->height;
    const size_t blocks = (raw + STORED_MAX - 1) / STORED_MAX;
    const size_t zlib = 2 + raw + 5 * blocks + 4;
    const size_t total = sizeof signature + (CHUNK_OVERHEAD + 13) +
                         (CHUNK_OVERHEAD + 3 * (size_t)im->colors) + (CHUNK_OVERHEAD + zlib) +
                         CHUNK_OVERHEAD;
    uint8_t *buf = malloc(total);
    if (!buf)
        return -1;
    uint8_t *p = buf;
    memcpy(p, signature, sizeof signature);
    p += sizeof signature;

    uint8_t *data = p + 8; /* IHDR */
    data = put32(data, (uint32_t)im->width);
    data = put32(data, (uint32_t)im->height);
    data[0] = 8; /* bit depth */
    data[1] = 3; /* color type: palette */
    data[2] = data[3] = data[4] = 0; /* deflate, adaptive filtering, no interlace */
    p = seal_chunk(p, "IHDR", 13);

    memcpy(p + 8, im->palette, 3 * (size_t)im->colors);
    p = seal_chunk(p, "PLTE", 3 * (size_t)im->colors);

    uint8_t *end = put_zlib(p + 8, im);
    p = seal_chunk(p, "IDAT", (size_t)(end - (p + 8)));

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
