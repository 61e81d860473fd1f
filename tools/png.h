/* A self-contained PNG encoder for the plots of `ssmstate serve`: an 8-bit
 * palette image in one IDAT chunk whose zlib stream is one deflate block
 * with the fixed Huffman codes (RFC 1951 3.2.6) and a greedy LZ77 matcher
 * that tries two distances, 1 (runs of one colour) and one scanline (rows
 * that repeat the row above), so no compression library is needed
 * (docs/serve.md says why). CRC-32 of the chunks and Adler-32 of the zlib
 * stream are computed here. */
#ifndef SSM_TOOLS_PNG_H
#define SSM_TOOLS_PNG_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32 (ISO 3309, the one PNG and zlib's crc32() use) of `len` bytes,
 * continuing from `crc` (0 to start): png_crc32(0, "123456789", 9) is
 * 0xcbf43926, and png_crc32(png_crc32(0, a, n), b, m) is the CRC of a then b. */
uint32_t png_crc32(uint32_t crc, const void *data, size_t len);

/* Adler-32 (RFC 1950) of `len` bytes, continuing from `adler` (1 to start):
 * png_adler32(1, "Wikipedia", 9) is 0x11e60398. */
uint32_t png_adler32(uint32_t adler, const void *data, size_t len);

/* An image of palette indices, row by row. */
typedef struct png_image {
    int32_t width, height;        /* 1 .. 65535 */
    const uint8_t *pixels;        /* [height][width] indices into palette */
    const uint8_t (*palette)[3];  /* [colors] RGB */
    int32_t colors;               /* 1 .. 256; every pixel < colors */
} png_image;

/* Encodes the image into a malloc'ed buffer (*out, *out_len; the caller
 * frees it). Returns 0, or -1 for a bad image or when out of memory (*out
 * untouched). */
int png_encode(const png_image *image, uint8_t **out, size_t *out_len);

/* png_encode into a file. Returns 0, or -1 with the reason in error. */
int png_write_file(const char *path, const png_image *image, char *error, size_t len);

#endif
