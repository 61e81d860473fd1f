/* The PNG encoder of `ssmstate serve --plot` (tools/png.c, issue 8):
 * - CRC-32 and Adler-32 of known strings, continued sums; encoded images
 *   accepted by the tests' own checker (tests/png_validate.h), a corrupted
 *   one refused, bad images refused by the encoder;
 * - deflate: the checker inflates fixed-Huffman PNGs made by real zlib;
 *   random, plot-like and chart images (widths 1 .. 40000, 1 + width ==
 *   32768 among them) come back pixel for pixel through the checker; a flat
 *   1280 x 840 image takes under 2% of its scanlines; the checker refuses a
 *   distance before the start, output past the image, a truncated block, a
 *   missing final block, dynamic and reserved block types. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/png_validate.h"
#include "tests/runner.h"
#include "tools/chart.h"
#include "tools/plot.h"
#include "tools/png.h"

/* ------------------------------------------------------------------ png */

START_TEST(crc32_known_values)
{
    const char *fox = "The quick brown fox jumps over the lazy dog";
    ck_assert_uint_eq(png_crc32(0, "", 0), 0);
    ck_assert_uint_eq(png_crc32(0, "123456789", 9), 0xcbf43926u);
    ck_assert_uint_eq(png_crc32(0, fox, strlen(fox)), 0x414fa339u);
    ck_assert_uint_eq(png_crc32(0, "IEND", 4), 0xae426082u); /* every PNG's last four bytes */
    ck_assert_uint_eq(png_crc32(png_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
    ck_assert_uint_eq(png_validate_crc32((const uint8_t *)fox, strlen(fox)), 0x414fa339u);
}
END_TEST

START_TEST(adler32_known_values)
{
    ck_assert_uint_eq(png_adler32(1, "", 0), 1);
    ck_assert_uint_eq(png_adler32(1, "Wikipedia", 9), 0x11e60398u);
    ck_assert_uint_eq(png_adler32(1, "abc", 3), 0x024d0127u);
    ck_assert_uint_eq(png_adler32(png_adler32(1, "Wiki", 4), "pedia", 5), 0x11e60398u);
    /* Past the modulus many times over: both implementations agree. */
    enum { N = 100000 };
    uint8_t *bytes = malloc(N);
    ck_assert_ptr_nonnull(bytes);
    for (int i = 0; i < N; i++)
        bytes[i] = (uint8_t)(255 - i % 7);
    ck_assert_uint_eq(png_adler32(1, bytes, N), png_validate_adler32(bytes, N));
    free(bytes);
}
END_TEST

static const uint8_t test_palette[3][3] = {{255, 255, 255}, {0, 0, 0}, {255, 0, 0}};

/* Encodes a width x height image of a pattern and validates it. */
static void encode_and_validate(int32_t width, int32_t height)
{
    uint8_t *pixels = malloc((size_t)width * (size_t)height);
    ck_assert_ptr_nonnull(pixels);
    for (int32_t i = 0; i < width * height; i++)
        pixels[i] = (uint8_t)(i % 3);
    const png_image image = {width, height, pixels, test_palette, 3};
    uint8_t *bytes = NULL;
    size_t len = 0;
    ck_assert_int_eq(png_encode(&image, &bytes, &len), 0);
    png_facts facts;
    char why[256] = "";
    ck_assert_msg(png_validate(bytes, len, &facts, why, sizeof why) == 0, "%s", why);
    ck_assert_uint_eq(facts.width, (uint32_t)width);
    ck_assert_uint_eq(facts.height, (uint32_t)height);
    ck_assert_uint_eq(facts.color_type, 3);
    ck_assert_uint_eq(facts.palette_colors, 3);
    ck_assert_uint_eq(facts.pixel_bytes, (size_t)(width + 1) * (size_t)height);
    /* A flipped pixel byte breaks the IDAT chunk's CRC. */
    bytes[len - 12 - 10] ^= 1;
    ck_assert_int_ne(png_validate(bytes, len, &facts, why, sizeof why), 0);
    ck_assert_ptr_nonnull(strstr(why, "CRC"));
    free(bytes);
    free(pixels);
}

START_TEST(encoded_images_validate)
{
    encode_and_validate(3, 2);     /* a match one scanline up */
    encode_and_validate(300, 300); /* past 65535 bytes, once a stored block's most */
    encode_and_validate(1, 1);
}
END_TEST

START_TEST(bad_images_refused)
{
    uint8_t pixels[4] = {0, 1, 2, 3}; /* 3 is past a 3-color palette */
    uint8_t *bytes = NULL;
    size_t len = 0;
    png_image image = {2, 2, pixels, test_palette, 3};
    ck_assert_int_eq(png_encode(&image, &bytes, &len), -1);
    image.colors = 4;
    image.width = 0;
    ck_assert_int_eq(png_encode(&image, &bytes, &len), -1);
    ck_assert_ptr_null(bytes);
}
END_TEST

/* -------------------------------------------- deflate: encoder, checker */

/* Two PNGs made by real zlib, with fixed Huffman codes (BTYPE 01), to show
 * that the checker's inflater reads what zlib writes. Made with python3:
 *   raw = b''.join(b'\0' + bytes(row) for row in rows)  # filter 0 per row
 *   c = zlib.compressobj(9, zlib.DEFLATED, 15, 9, zlib.Z_FIXED)
 *   idat = c.compress(raw) + c.flush()
 * wrapped in signature, IHDR, PLTE (the first), IDAT and IEND, each chunk's
 * CRC from zlib.crc32. The rows are those of zlib_palette_pixel and
 * zlib_gray_pixel below. The first (40 x 20, a 4-colour palette) holds
 * literals, lengths with extra bits up to 258 and distances 1, 3, 4 and 42
 * (one scanline plus one); the second (16 x 5, 8-bit grayscale) the 9-bit
 * literal codes (values 144 .. 255) and distance 17. */
static const uint8_t zlib_palette_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d,
    0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x28, 0x00, 0x00, 0x00, 0x14,
    0x08, 0x03, 0x00, 0x00, 0x00, 0xc8, 0x98, 0x8f, 0x89, 0x00, 0x00, 0x00,
    0x0c, 0x50, 0x4c, 0x54, 0x45, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x1f,
    0x77, 0xb4, 0xff, 0x7f, 0x0e, 0x22, 0x69, 0x2b, 0xc2, 0x00, 0x00, 0x00,
    0x1f, 0x49, 0x44, 0x41, 0x54, 0x78, 0x01, 0x63, 0x60, 0x18, 0x38, 0xc0,
    0xcc, 0xc4, 0x48, 0x14, 0x26, 0x45, 0xe5, 0x20, 0x00, 0x8c, 0x4c, 0xcc,
    0x10, 0xc4, 0x30, 0x0a, 0x86, 0x25, 0x00, 0x00, 0x58, 0x6f, 0x00, 0x8b,
    0xb9, 0x14, 0x3f, 0xc1, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44,
    0xae, 0x42, 0x60, 0x82,
};
static const uint8_t zlib_gray_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d,
    0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x05,
    0x08, 0x00, 0x00, 0x00, 0x00, 0x69, 0x83, 0x33, 0x95, 0x00, 0x00, 0x00,
    0x33, 0x49, 0x44, 0x41, 0x54, 0x78, 0x01, 0x63, 0x60, 0x50, 0xf5, 0xca,
    0x9f, 0xb2, 0xf3, 0x1e, 0xb3, 0x86, 0x6f, 0xd1, 0xf4, 0x3d, 0x0f, 0xd9,
    0xb4, 0x19, 0xb8, 0x0d, 0x42, 0xab, 0xe6, 0x1f, 0x79, 0xc9, 0x67, 0x1c,
    0x51, 0xbb, 0xe8, 0xf8, 0x1b, 0x41, 0x33, 0x86, 0xfe, 0x09, 0xff, 0x51,
    0x30, 0x61, 0x01, 0x00, 0x10, 0x5f, 0x26, 0xc9, 0x11, 0x64, 0x26, 0x68,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
};

static uint8_t zlib_palette_pixel(int x, int y)
{
    static const uint8_t pattern[9] = {1, 2, 3, 1, 2, 3, 1, 2, 3};
    if (y == 3 || y == 4)
        return (uint8_t)((x * 7 + y) % 4);
    if (y == 8 && x >= 10 && x < 19)
        return pattern[x - 10];
    return 0;
}

static uint8_t zlib_gray_pixel(int x, int y)
{
    static const uint8_t repeat[4] = {143, 144, 255, 0};
    return y < 2 ? (uint8_t)((x * 37 + y * 11) % 256) : repeat[x % 4];
}

/* Validates a PNG and returns its inflated scanlines (the caller frees). */
static uint8_t *validated_data(const uint8_t *png, size_t len, png_facts *facts)
{
    uint8_t *data = NULL;
    char why[256] = "";
    ck_assert_msg(png_validate_data(png, len, facts, &data, why, sizeof why) == 0, "%s", why);
    ck_assert_ptr_nonnull(data);
    return data;
}

START_TEST(checker_inflates_zlib_fixed_huffman)
{
    png_facts facts;
    uint8_t *data = validated_data(zlib_palette_png, sizeof zlib_palette_png, &facts);
    ck_assert_uint_eq(facts.width, 40);
    ck_assert_uint_eq(facts.height, 20);
    ck_assert_uint_eq(facts.palette_colors, 4);
    ck_assert_uint_eq(facts.pixel_bytes, 41 * 20);
    for (int y = 0; y < 20; y++) {
        ck_assert_uint_eq(data[y * 41], 0);
        for (int x = 0; x < 40; x++)
            ck_assert_msg(data[y * 41 + 1 + x] == zlib_palette_pixel(x, y), "(%d, %d)", x, y);
    }
    free(data);

    data = validated_data(zlib_gray_png, sizeof zlib_gray_png, &facts);
    ck_assert_uint_eq(facts.color_type, 0);
    ck_assert_uint_eq(facts.pixel_bytes, 17 * 5);
    for (int y = 0; y < 5; y++)
        for (int x = 0; x < 16; x++)
            ck_assert_msg(data[y * 17 + 1 + x] == zlib_gray_pixel(x, y), "(%d, %d)", x, y);
    free(data);
}
END_TEST

static const uint8_t (*gray_palette(void))[3]
{
    static uint8_t palette[256][3];
    for (int i = 0; i < 256; i++)
        palette[i][0] = palette[i][1] = palette[i][2] = (uint8_t)i;
    return (const uint8_t (*)[3])palette;
}

/* Encodes the image, inflates it with the checker and compares every pixel;
 * returns the PNG's size. */
static size_t round_trip(int32_t width, int32_t height, const uint8_t *pixels, int32_t colors)
{
    const png_image image = {width, height, pixels, gray_palette(), colors};
    uint8_t *bytes = NULL;
    size_t len = 0;
    ck_assert_int_eq(png_encode(&image, &bytes, &len), 0);
    png_facts facts;
    uint8_t *data = validated_data(bytes, len, &facts);
    free(bytes);
    ck_assert_uint_eq(facts.width, (uint32_t)width);
    ck_assert_uint_eq(facts.height, (uint32_t)height);
    ck_assert_uint_eq(facts.palette_colors, (uint32_t)colors);
    const size_t row = 1 + (size_t)width;
    ck_assert_uint_eq(facts.pixel_bytes, row * (size_t)height);
    for (size_t y = 0; y < (size_t)height; y++) {
        ck_assert_uint_eq(data[y * row], 0);
        ck_assert_msg(memcmp(data + y * row + 1, pixels + y * (size_t)width, (size_t)width) == 0,
                      "%dx%d: row %zu differs", width, height, y);
    }
    free(data);
    return len;
}

/* Uniform bytes below `colors` from a fixed seed (xorshift). */
static uint8_t *random_pixels(size_t n, int32_t colors, uint32_t seed)
{
    uint8_t *pixels = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(pixels);
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13;
        seed ^= seed >> 17;
        seed ^= seed << 5;
        pixels[i] = (uint8_t)(seed % (uint32_t)colors);
    }
    return pixels;
}

/* A plot-like canvas: paper, grid lines, a frame, two thick lines, text. */
static plot_canvas plot_like(int32_t width, int32_t height)
{
    plot_canvas c;
    ck_assert_int_eq(plot_canvas_create(&c, width, height, 0), 0);
    for (int32_t y = height / 5; y < height; y += height / 5 + 1)
        plot_line(&c, 0, y, width - 1, y, 2, 1);
    plot_fill(&c, width / 10, 0, width / 10, height - 1, 1);
    plot_line(&c, 0, height - 1, width - 1, height / 3, 3, 2);
    plot_line(&c, 0, height / 2, width - 1, height / 2 + height / 7, 4, 3);
    plot_text(&c, width / 8, 2, "tokens/s 12345", 1, 2);
    return c;
}

START_TEST(round_trips)
{
    static const int32_t sizes[][2] = {{1, 1}, {1, 9}, {2, 3}, {5, 40}, {64, 64}, {257, 31},
                                       {1000, 7}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        const int32_t w = sizes[i][0], h = sizes[i][1];
        uint8_t *pixels = random_pixels((size_t)w * (size_t)h, 256, 7 + (uint32_t)i);
        round_trip(w, h, pixels, 256);
        free(pixels);
        pixels = random_pixels((size_t)w * (size_t)h, 2, 99 + (uint32_t)i); /* short runs */
        round_trip(w, h, pixels, 2);
        free(pixels);
        plot_canvas c = plot_like(w, h);
        round_trip(w, h, c.pixels, 5);
        plot_canvas_destroy(&c);
    }
    /* A chart as `ssmstate serve --plot` draws one. */
    static const double x[4] = {16, 64, 256, 512}, y1[4] = {8700, 9500, 10700, 10750},
                        y2[4] = {9200, 10000, 12300, 12250};
    const chart_series series[2] = {{"native", 4, x, y1, 3}, {"replay", 4, x, y2, 4}};
    const chart ch = {"a chart", "concurrent requests", "tokens/s", 1, series, 2};
    plot_canvas c;
    ck_assert_int_eq(plot_canvas_create(&c, 640, 420, CHART_PAPER), 0);
    chart_draw(&c, 0, 0, 640, 420, &ch);
    size_t len = round_trip(640, 420, c.pixels, 5);
    ck_assert_uint_lt(len, 641 * 420 / 10); /* a tenth of the scanlines at most */
    plot_canvas_destroy(&c);
}
END_TEST

/* Rows of random bytes, each repeating the first: only a match one scanline
 * up compresses them. */
static uint8_t *repeated_rows(int32_t width, int32_t height)
{
    uint8_t *pixels = random_pixels((size_t)width * (size_t)height, 256, 12345);
    for (int32_t y = 1; y < height; y++)
        memcpy(pixels + (size_t)y * (size_t)width, pixels, (size_t)width);
    return pixels;
}

START_TEST(round_trips_wide_rows)
{
    /* 1 + width == 32768: the farthest deflate distance, one scanline up. */
    uint8_t *pixels = repeated_rows(32767, 4);
    size_t len = round_trip(32767, 4, pixels, 256);
    ck_assert_uint_lt(len, 32768 * 4 / 3); /* rows 2 .. 4 nearly free */
    free(pixels);
    /* One more: a scanline is out of reach, only distance-1 matches. */
    pixels = repeated_rows(32768, 4);
    len = round_trip(32768, 4, pixels, 256);
    ck_assert_uint_gt(len, 32769 * 4); /* random bytes: > 8 bits each */
    free(pixels);
    pixels = repeated_rows(40000, 3);
    round_trip(40000, 3, pixels, 256);
    free(pixels);
    plot_canvas c = plot_like(40000, 3);
    round_trip(40000, 3, c.pixels, 5);
    plot_canvas_destroy(&c);
}
END_TEST

START_TEST(flat_image_compresses)
{
    enum { W = 1280, H = 840 };
    uint8_t *pixels = calloc((size_t)W * H, 1);
    ck_assert_ptr_nonnull(pixels);
    size_t len = round_trip(W, H, pixels, 3);
    ck_assert_uint_lt(len, (W + 1) * H / 50); /* under 2% of the scanlines */
    free(pixels);
}
END_TEST

/* Deflate bits by hand: values least significant bit first, Huffman codes
 * most significant bit first (RFC 1951 3.1.1). */
typedef struct hand_bits {
    uint8_t bytes[64];
    size_t count;
} hand_bits;

static void hand_value(hand_bits *h, uint32_t value, int n)
{
    for (int i = 0; i < n; i++, h->count++)
        h->bytes[h->count / 8] |= (uint8_t)((value >> i & 1) << (h->count % 8));
}

static void hand_code(hand_bits *h, uint32_t code, int n)
{
    for (int i = n - 1; i >= 0; i--)
        hand_value(h, code >> i & 1, 1);
}

/* A final fixed-Huffman block: literal 0 (code 00110000), length 3 (symbol
 * 257, 0000001), distance code `distance_code` (5 bits), end (0000000). */
static hand_bits literal_then_match(uint32_t distance_code)
{
    hand_bits h = {{0}, 0};
    hand_value(&h, 1, 1); /* BFINAL */
    hand_value(&h, 1, 2); /* BTYPE 01 */
    hand_code(&h, 0x30, 8);
    hand_code(&h, 1, 7);
    hand_code(&h, distance_code, 5);
    hand_code(&h, 0, 7);
    return h;
}

/* A PNG of a width x height image (4 colours) around `deflate` (bytes), with a
 * zlib header and the given Adler-32, CRCs right; returns its length. */
static size_t wrap_png(uint8_t *out, uint32_t width, uint32_t height, const uint8_t *deflate,
                       size_t n, uint32_t adler)
{
    static const uint8_t head[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    static const uint8_t palette[12] = {255, 255, 255, 0, 0, 0, 255, 0, 0, 0, 0, 255};
    uint8_t ihdr[13] = {0, 0, 0, 0, 0, 0, 0, 0, 8, 3, 0, 0, 0}, z[128] = {0x78, 0x01};
    ck_assert_uint_le(n, sizeof z - 6);
    for (int i = 0; i < 4; i++) {
        ihdr[i] = (uint8_t)(width >> (24 - 8 * i));
        ihdr[4 + i] = (uint8_t)(height >> (24 - 8 * i));
        z[2 + n + i] = (uint8_t)(adler >> (24 - 8 * i));
    }
    memcpy(z + 2, deflate, n);
    struct { const char *type; const uint8_t *data; size_t len; } chunks[4] = {
        {"IHDR", ihdr, 13}, {"PLTE", palette, 12}, {"IDAT", z, n + 6}, {"IEND", NULL, 0}};
    size_t at = 8;
    memcpy(out, head, 8);
    for (int c = 0; c < 4; c++) {
        const size_t len = chunks[c].len;
        for (int i = 0; i < 4; i++)
            out[at + i] = (uint8_t)(len >> (24 - 8 * i));
        memcpy(out + at + 4, chunks[c].type, 4);
        if (len)
            memcpy(out + at + 8, chunks[c].data, len);
        const uint32_t crc = png_validate_crc32(out + at + 4, 4 + len);
        for (int i = 0; i < 4; i++)
            out[at + 8 + len + i] = (uint8_t)(crc >> (24 - 8 * i));
        at += 12 + len;
    }
    return at;
}

/* Validates a hand-made image; returns 0, or -1 with why. */
static int check_hand(uint32_t width, uint32_t height, const uint8_t *deflate, size_t n,
                      uint32_t adler, char *why, size_t why_len)
{
    uint8_t png[256];
    png_facts facts;
    size_t len = wrap_png(png, width, height, deflate, n, adler);
    return png_validate(png, len, &facts, why, why_len);
}

START_TEST(checker_refuses_bad_deflate)
{
    static const uint8_t four_zeros[4] = {0, 0, 0, 0};
    const uint32_t adler = png_validate_adler32(four_zeros, 4);
    char why[256] = "";
    /* The control: literal 0, then 3 bytes from 1 back: a 3 x 1 image. */
    hand_bits h = literal_then_match(0);
    ck_assert_msg(check_hand(3, 1, h.bytes, (h.count + 7) / 8, adler, why, sizeof why) == 0,
                  "%s", why);
    /* The same 4 bytes are one too many for a 2 x 1 image. */
    ck_assert_int_ne(check_hand(2, 1, h.bytes, (h.count + 7) / 8, adler, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "longer than") != NULL, "%s", why);
    /* Distance code 1 is 2 back, with 1 byte out. */
    h = literal_then_match(1);
    ck_assert_int_ne(check_hand(3, 1, h.bytes, (h.count + 7) / 8, adler, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "distance points before the start") != NULL, "%s", why);

    /* zlib's fixed block cut short: the end code never comes. */
    const uint8_t *idat = zlib_palette_png + 8 + 25 + 24 + 8; /* after IHDR, PLTE */
    ck_assert_int_eq(memcmp(idat - 4, "IDAT", 4), 0);
    ck_assert_msg(check_hand(40, 20, idat + 2, 31 - 6, 0x586f008b, why, sizeof why) == 0, "%s",
                  why);
    ck_assert_int_ne(check_hand(40, 20, idat + 2, 12, 0x586f008b, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "ends inside a block") != NULL, "%s", why);

    /* A stored block not marked final, then nothing. */
    const uint8_t stored[9] = {0x00, 4, 0, 0xfb, 0xff, 0, 0, 0, 0};
    ck_assert_int_ne(check_hand(3, 1, stored, 9, adler, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "without a final block") != NULL, "%s", why);

    /* Blocks in sequence: that stored block, then a final fixed one with
     * only the end code (BFINAL 1, BTYPE 01, 0000000: 10 bits). */
    const uint8_t two[11] = {0x00, 4, 0, 0xfb, 0xff, 0, 0, 0, 0, 0x03, 0x00};
    ck_assert_msg(check_hand(3, 1, two, 11, adler, why, sizeof why) == 0, "%s", why);

    /* Dynamic Huffman codes (BTYPE 10) and the reserved type (11). */
    const uint8_t dynamic[4] = {0x05, 0, 0, 0}, reserved[4] = {0x07, 0, 0, 0};
    ck_assert_int_ne(check_hand(3, 1, dynamic, 4, adler, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "dynamic Huffman block (BTYPE 10)") != NULL, "%s", why);
    ck_assert_int_ne(check_hand(3, 1, reserved, 4, adler, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "BTYPE 11") != NULL, "%s", why);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("png");
    TCase *png = tcase_create("png");
    tcase_add_test(png, crc32_known_values);
    tcase_add_test(png, adler32_known_values);
    tcase_add_test(png, encoded_images_validate);
    tcase_add_test(png, bad_images_refused);
    tcase_add_test(png, checker_inflates_zlib_fixed_huffman);
    tcase_add_test(png, round_trips);
    tcase_add_test(png, round_trips_wide_rows);
    tcase_add_test(png, flat_image_compresses);
    tcase_add_test(png, checker_refuses_bad_deflate);
    suite_add_tcase(s, png);
    return s;
}
