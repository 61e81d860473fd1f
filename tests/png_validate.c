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

/* Inflates a zlib stream of stored deflate blocks into a malloc'ed buffer. */
static int inflate_stored(const uint8_t *z, size_t n, uint8_t **out, size_t *out_len, char *why,
                          size_t len)
{
    if (n < 6)
        return fail(why, len, "zlib stream too short");
    if ((z[0] & 0x0f) != 8 || (z[0] >> 4) > 7 || ((unsigned)z[0] << 8 | z[1]) % 31 != 0)
        return fail(why, len, "bad zlib header");
    if (z[1] & 0x20)
        return fail(why, len, "zlib preset dictionary");
    size_t at = 2, size = 0;
    uint8_t *data = NULL;
    for (int final = 0; !final;) {
        if (at >= n - 4) {
            free(data);
            return fail(why, len, "deflate stream ends without a final block");
        }
        final = z[at] & 1;
        if ((z[at] >> 1 & 3) != 0) {
            free(data);
            return fail(why, len, "compressed deflate block (only stored blocks are checked)");
        }
        if (at + 5 > n - 4) {
            free(data);
            return fail(why, len, "truncated stored block header");
        }
        uint32_t block = z[at + 1] | (uint32_t)z[at + 2] << 8;
        uint32_t complement = z[at + 3] | (uint32_t)z[at + 4] << 8;
        if ((block ^ 0xffff) != complement) {
            free(data);
            return fail(why, len, "stored block LEN and NLEN disagree");
        }
        at += 5;
        if (at + block > n - 4) {
            free(data);
            return fail(why, len, "stored block runs past the stream");
        }
        uint8_t *grown = realloc(data, size + block + 1);
        if (!grown) {
            free(data);
            return fail(why, len, "out of memory");
        }
        data = grown;
        memcpy(data + size, z + at, block);
        size += block;
        at += block;
    }
    if (at + 4 != n) {
        free(data);
        return fail(why, len, "bytes after the zlib stream's checksum");
    }
    if (be32(z + at) != png_validate_adler32(data, size)) {
        free(data);
        return fail(why, len, "Adler-32 of the zlib stream does not match");
    }
    *out = data;
    *out_len = size;
    return 0;
}

static size_t channels_of(uint8_t color_type)
{
    return color_type == 0 ? 1 : color_type == 2 ? 3 : color_type == 3 ? 1 : 0;
}

/* Checks the inflated scanlines: size and filter bytes. */
static int check_pixels(const png_facts *f, const uint8_t *data, size_t n, char *why, size_t len)
{
    const size_t row = 1 + (size_t)f->width * channels_of(f->color_type);
    if (n != row * f->height)
        return fail(why, len, "inflated image data is not height * (1 + width * bpp) bytes");
    for (uint32_t y = 0; y < f->height; y++)
        if (data[(size_t)y * row] > 4)
            return fail(why, len, "a scanline has a filter type above 4");
    return 0;
}

int png_validate(const uint8_t *bytes, size_t len, png_facts *facts, char *why, size_t why_len)
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
        status = inflate_stored(idat, idat_len, &pixels, &f.pixel_bytes, why, why_len);
    if (status == 0)
        status = check_pixels(&f, pixels, f.pixel_bytes, why, why_len);
    if (status == 0 && f.color_type == 3) {
        const size_t row = 1 + (size_t)f.width;
        for (size_t i = 0; status == 0 && i < f.pixel_bytes; i++)
            if (i % row && pixels[i] >= f.palette_colors)
                status = fail(why, why_len, "a pixel indexes past the palette");
    }
    free(pixels);
    free(idat);
    if (status == 0)
        *facts = f;
    return status;
}
