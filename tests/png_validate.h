/* A PNG checker for the tests, written apart from tools/png.c (its own
 * table-driven CRC-32 and Adler-32, its own inflater): the signature, every
 * chunk's length and CRC, IHDR first (13 bytes, a size, 8-bit palette,
 * grayscale or RGB, no interlace), PLTE before the image data of a palette
 * image, IDAT chunks in one run, IEND last; the zlib stream's header and
 * Adler-32, its deflate blocks inflated (stored and fixed-Huffman blocks, any
 * sequence up to the final one; a dynamic-Huffman or reserved block is
 * refused), every read within the stream, every distance within the output
 * so far, the output never longer than height * (1 + width * bytes per
 * pixel) and in the end exactly that, with a valid filter byte per row. */
#ifndef SSM_TESTS_PNG_VALIDATE_H
#define SSM_TESTS_PNG_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

typedef struct png_facts {
    uint32_t width, height;
    uint8_t color_type;
    uint32_t palette_colors; /* PLTE entries, 0 without */
    size_t pixel_bytes;      /* inflated image data, filter bytes included */
} png_facts;

/* Validates `len` bytes of a PNG file. Returns 0 and fills *facts, or -1
 * with the first problem in why. */
int png_validate(const uint8_t *bytes, size_t len, png_facts *facts, char *why, size_t why_len);

/* png_validate, and on success the inflated image data (facts->pixel_bytes
 * bytes, each row's filter byte first) in a malloc'ed *data the caller
 * frees; *data is untouched on failure. */
int png_validate_data(const uint8_t *bytes, size_t len, png_facts *facts, uint8_t **data,
                      char *why, size_t why_len);

/* CRC-32 of PNG and zlib, and Adler-32, computed independently of tools/png.c. */
uint32_t png_validate_crc32(const uint8_t *data, size_t len);
uint32_t png_validate_adler32(const uint8_t *data, size_t len);

#endif
