/* Units of `ssmstate serve`: its seeded workload (bench/serve/serve_workload.c):
 * determinism (same seed, same numbers, whatever the order of the
 * questions), Poisson arrivals (mean gap 1 / rate, counts with mean and
 * variance rate * time), the acceptance model's distribution
 * P(a = k) = p^(k-1) (1 - p) for k < T and p^(T-1) for k = T, and the
 * prompt and output length distributions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/runner.h"
#include "bench/serve/serve_workload.h"

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
    TCase *work = tcase_create("workload");
    tcase_add_test(work, workload_is_deterministic);
    tcase_add_test(work, arrivals_are_poisson);
    tcase_add_test(work, acceptance_model);
    tcase_add_test(work, length_distributions);
    suite_add_tcase(s, work);
    return s;
}
