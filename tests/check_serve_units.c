/* Units of `ssmstate serve` (issue 8, item 3):
 * - tools/png.c: CRC-32 and Adler-32 of known strings, continued sums, and
 *   encoded images (one stored block and several) accepted by the tests'
 *   own checker (tests/png_validate.h), a corrupted one refused, bad images
 *   refused by the encoder;
 * - tools/chart.c and tools/plot.c: tick steps, tick labels, a line's pixels;
 * - tools/serve_workload.c: determinism (same seed, same numbers, whatever
 *   the order of the questions), Poisson arrivals (mean gap 1 / rate, counts
 *   with mean and variance rate * time), the acceptance model's distribution
 *   P(a = k) = p^(k-1) (1 - p) for k < T and p^(T-1) for k = T, and the
 *   prompt and output length distributions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/png_validate.h"
#include "tests/runner.h"
#include "tools/chart.h"
#include "tools/plot.h"
#include "tools/png.h"
#include "tools/serve_workload.h"

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
    encode_and_validate(3, 2);     /* one stored block */
    encode_and_validate(300, 300); /* 90300 bytes: two stored blocks */
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

/* ---------------------------------------------------------- plot, chart */

START_TEST(chart_ticks_and_labels)
{
    char label[32];
    ck_assert_double_eq_tol(chart_nice_step(12345.0, 5), 5000.0, 1e-9);
    ck_assert_double_eq_tol(chart_nice_step(10.0, 5), 2.0, 1e-12);
    ck_assert_double_eq_tol(chart_nice_step(0.9, 3), 0.5, 1e-12);
    chart_format_number(512, label, sizeof label);
    ck_assert_str_eq(label, "512");
    chart_format_number(25000, label, sizeof label);
    ck_assert_str_eq(label, "25000");
    chart_format_number(250000, label, sizeof label);
    ck_assert_str_eq(label, "250k");
    chart_format_number(1500000, label, sizeof label);
    ck_assert_str_eq(label, "1.5M");
    chart_format_number(0.25, label, sizeof label);
    ck_assert_str_eq(label, "0.25");
}
END_TEST

START_TEST(plot_draws_clipped)
{
    plot_canvas c;
    ck_assert_int_eq(plot_canvas_create(&c, 10, 5, 0), 0);
    plot_line(&c, -3, 2, 20, 2, 7, 1); /* clipped to the canvas */
    int set = 0;
    for (int i = 0; i < 50; i++)
        set += c.pixels[i] == 7;
    ck_assert_int_eq(set, 10);
    for (int x = 0; x < 10; x++)
        ck_assert_uint_eq(c.pixels[2 * 10 + x], 7);
    plot_text(&c, 0, 0, "|", 9, 1); /* the bar: column 2, rows 0..6 (clipped at 4) */
    ck_assert_uint_eq(c.pixels[0 * 10 + 2], 9);
    ck_assert_uint_eq(c.pixels[4 * 10 + 2], 9);
    ck_assert_uint_eq(c.pixels[0 * 10 + 1], 0);
    ck_assert_int_eq(plot_text_width("ab", 2), 22);
    plot_canvas_destroy(&c);
}
END_TEST

/* ------------------------------------------------------------ workload */

static serve_workload workload(uint64_t seed)
{
    serve_workload w = {seed, 2.5, 64, 4096, 64, 512, 0.7, 4};
    return w;
}

START_TEST(workload_is_deterministic)
{
    serve_workload a = workload(7), b = workload(7), c = workload(8);
    int differ = 0;
    /* Asked backwards here, forwards there: the same numbers. */
    for (int64_t i = 999; i >= 0; i--) {
        int64_t j = 999 - i;
        ck_assert_int_eq(serve_prompt_length(&a, j), serve_prompt_length(&b, j));
        ck_assert_int_eq(serve_output_length(&a, i), serve_output_length(&b, i));
        ck_assert_int_eq(serve_accepted_length(&a, i, (int32_t)(i % 5)),
                         serve_accepted_length(&b, i, (int32_t)(i % 5)));
        ck_assert_double_eq(serve_unit_gap(7, i), serve_unit_gap(7, i));
        differ += serve_prompt_length(&a, i) != serve_prompt_length(&c, i);
    }
    ck_assert_int_gt(differ, 900);
    serve_arrivals x, y;
    serve_arrivals_init(&x, &a);
    serve_arrivals_init(&y, &b);
    for (int t = 0; t < 100; t++)
        ck_assert_int_eq(serve_arrivals_until(&x, t), serve_arrivals_until(&y, t));
}
END_TEST

START_TEST(arrivals_are_poisson)
{
    enum { N = 200000, WINDOWS = 20000 };
    double sum = 0.0;
    for (int64_t i = 0; i < N; i++) {
        double gap = serve_unit_gap(3, i);
        ck_assert(gap > 0.0 && isfinite(gap));
        sum += gap;
    }
    ck_assert_double_eq_tol(sum / N, 1.0, 0.015); /* 1/sqrt(N) = 0.0022 */

    /* Counts per unit of time: mean and variance both `rate`. */
    serve_workload w = workload(3);
    serve_arrivals a;
    serve_arrivals_init(&a, &w);
    double mean = 0.0, square = 0.0;
    int64_t before = 0;
    for (int t = 1; t <= WINDOWS; t++) {
        int64_t now = serve_arrivals_until(&a, t);
        double count = (double)(now - before);
        before = now;
        mean += count;
        square += count * count;
    }
    mean /= WINDOWS;
    double variance = square / WINDOWS - mean * mean;
    ck_assert_double_eq_tol(mean, w.rate, 0.05);
    ck_assert_double_eq_tol(variance / mean, 1.0, 0.1);
}
END_TEST

START_TEST(acceptance_model)
{
    enum { N = 200000 };
    serve_workload w = workload(11);
    int64_t counts[5] = {0};
    for (int64_t i = 0; i < N; i++) {
        int32_t a = serve_accepted_length(&w, i / 16, (int32_t)(i % 16));
        ck_assert(a >= 1 && a <= 4);
        counts[a]++;
    }
    const double p = w.accept;
    const double want[5] = {0, 1 - p, p * (1 - p), p * p * (1 - p), p * p * p};
    for (int k = 1; k <= 4; k++)
        ck_assert_double_eq_tol((double)counts[k] / N, want[k], 0.005);
    w.accept = 0.0;
    ck_assert_int_eq(serve_accepted_length(&w, 1, 1), 1);
    w.accept = 1.0;
    ck_assert_int_eq(serve_accepted_length(&w, 1, 1), 4);
}
END_TEST

START_TEST(length_distributions)
{
    enum { N = 100000 };
    serve_workload w = workload(5);
    int64_t below = 0;
    double output_sum = 0.0;
    for (int64_t i = 0; i < N; i++) {
        int32_t prompt = serve_prompt_length(&w, i), output = serve_output_length(&w, i);
        ck_assert(prompt >= w.prompt_min && prompt <= w.prompt_max);
        ck_assert(output >= w.output_min && output <= w.output_max);
        below += prompt < 512; /* sqrt(64 * 4096): the log-uniform median */
        output_sum += output;
    }
    ck_assert_double_eq_tol((double)below / N, 0.5, 0.01);
    ck_assert_double_eq_tol(output_sum / N, (w.output_min + w.output_max) / 2.0, 2.0);
    w.prompt_min = w.prompt_max = 100;
    w.output_min = w.output_max = 7;
    ck_assert_int_eq(serve_prompt_length(&w, 3), 100);
    ck_assert_int_eq(serve_output_length(&w, 3), 7);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("serve_units");
    TCase *png = tcase_create("png");
    tcase_add_test(png, crc32_known_values);
    tcase_add_test(png, adler32_known_values);
    tcase_add_test(png, encoded_images_validate);
    tcase_add_test(png, bad_images_refused);
    suite_add_tcase(s, png);
    TCase *plot = tcase_create("plot");
    tcase_add_test(plot, chart_ticks_and_labels);
    tcase_add_test(plot, plot_draws_clipped);
    suite_add_tcase(s, plot);
    TCase *work = tcase_create("workload");
    tcase_add_test(work, workload_is_deterministic);
    tcase_add_test(work, arrivals_are_poisson);
    tcase_add_test(work, acceptance_model);
    tcase_add_test(work, length_distributions);
    suite_add_tcase(s, work);
    return s;
}
