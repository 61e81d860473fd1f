/* The benchmark's byte model (bench/bench_bytes.c) against docs/bench.md:
 * its formulas on the Qwen3-Next shape, the table "What the model allows",
 * and replay's folding decodes at B <= fold_rows. */
#include <math.h>

#include "kernels/record.h"
#include "kernels/replay.h"
#include "tests/runner.h"
#include "bench/bench.h"

/* Qwen3-Next, fp32 state, bf16 activations, T = 4, L = 16. */
static bench_shape qwen3_next(bench_replay_reads reads, int32_t fold_rows)
{
    bench_shape s = {{0}, SSM_DTYPE_F32, SSM_DTYPE_BF16, 4, 16, reads, fold_rows, 0};
    s.model.kind = SSM_MODEL_GDN;
    s.model.layers = 36;
    s.model.heads = 16;
    s.model.value_heads = 32;
    s.model.key_dim = 128;
    s.model.value_dim = 128;
    s.model.conv_width = 4;
    return s;
}

/* Bytes per request and layer in units of S. */
static double in_states(const bench_shape *s, const char *mode, bench_op op, int32_t batch,
                        int32_t accepted)
{
    return (double)bench_floor_bytes(s, mode, op, batch, 1, accepted) / batch /
           (double)bench_state_bytes(s);
}

START_TEST(native_and_compact_formulas)
{
    bench_shape s = qwen3_next(BENCH_REPLAY_RAW, 0);
    double S = (double)bench_state_bytes(&s);
    double R = (double)ssm_record_bytes(&s.model, s.activation_dtype);
    ck_assert_double_eq(S, 2.0 * 1024 * 1024);
    ck_assert_double_eq_tol(in_states(&s, "native", BENCH_OP_DECODE, 64, 0), 2.0, 1e-9);
    ck_assert_double_eq_tol(in_states(&s, "native", BENCH_OP_ROUND, 64, 3), 5.0, 1e-9);
    ck_assert_double_eq_tol(in_states(&s, "compact", BENCH_OP_DECODE, 64, 0), 2.0, 1e-9);
    ck_assert_double_eq_tol(in_states(&s, "compact", BENCH_OP_ROUND, 64, 3),
                            3.0 + (4 + 3) * R / S, 1e-6);
    s.commit_in_step = 1; /* the GPU: the next step applies the commit */
    ck_assert_double_eq_tol(in_states(&s, "compact", BENCH_OP_ROUND, 64, 3),
                            2.0 + (4 + 3) * R / S, 1e-6);
    ck_assert_double_eq_tol(in_states(&s, "compact", BENCH_OP_DECODE, 64, 0), 2.0, 1e-9);
    s.commit_in_step = 0;
    ck_assert_double_eq_tol(in_states(&s, "copy", BENCH_OP_COPY, 64, 0), 2.0, 1e-9);
    /* Batch and layers multiply. */
    ck_assert_uint_eq(bench_floor_bytes(&s, "native", BENCH_OP_DECODE, 8, 36, 0),
                      (uint64_t)(2 * S * 8 * 36));
}
END_TEST

/* docs/bench.md, "What the model allows": replay in units of S, L = 16. */
START_TEST(replay_matches_the_documented_table)
{
    bench_shape raw = qwen3_next(BENCH_REPLAY_RAW, 0);
    bench_shape identity = qwen3_next(BENCH_REPLAY_IDENTITY, 0);
    ck_assert_double_eq_tol(in_states(&raw, "replay", BENCH_OP_DECODE, 64, 0), 1.187, 5e-4);
    ck_assert_double_eq_tol(in_states(&identity, "replay", BENCH_OP_DECODE, 64, 0), 1.222, 5e-4);
    ck_assert_double_eq_tol(in_states(&raw, "replay", BENCH_OP_ROUND, 64, 3), 1.726, 5e-4);
    ck_assert_double_eq_tol(in_states(&identity, "replay", BENCH_OP_ROUND, 64, 3), 1.770, 5e-4);
    ck_assert_double_eq_tol(in_states(&raw, "compact", BENCH_OP_ROUND, 64, 3), 3.042, 5e-4);
}
END_TEST

/* At B <= fold_rows every replay decode reads and writes the checkpoint and
 * writes its record (2S + R); above it, the ring's model applies. Rounds
 * are not affected. */
START_TEST(replay_folding_decodes)
{
    bench_shape s = qwen3_next(BENCH_REPLAY_RAW, 8);
    double S = (double)bench_state_bytes(&s);
    double R = (double)ssm_record_bytes(&s.model, s.activation_dtype);
    ck_assert_double_eq_tol(in_states(&s, "replay", BENCH_OP_DECODE, 1, 0), 2.0 + R / S, 1e-6);
    ck_assert_double_eq_tol(in_states(&s, "replay", BENCH_OP_DECODE, 8, 0), 2.0 + R / S, 1e-6);
    ck_assert_double_eq_tol(in_states(&s, "replay", BENCH_OP_DECODE, 9, 0), 1.187, 5e-4);
    ck_assert_double_eq_tol(in_states(&s, "replay", BENCH_OP_ROUND, 1, 3), 1.726, 5e-4);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("bench bytes");
    TCase *tc = tcase_create("byte model");
    tcase_add_test(tc, native_and_compact_formulas);
    tcase_add_test(tc, replay_matches_the_documented_table);
    tcase_add_test(tc, replay_folding_decodes);
    suite_add_tcase(s, tc);
    return s;
}
