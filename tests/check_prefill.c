/* Prefill through the public API in every mode (CPU contexts):
 *
 * - lengths 1, 63, 64, 65, 300 and 4096, GDN and KDA with and without the
 *   gate's lower bound, GVA, fp32 and bf16 state: the state and outputs against
 *   the token-by-token reference with an fp32 state (within 1e-4 of fp64 at
 *   these lengths), by the numerics contract's chunked bound (5e-3) where a
 *   bf16 state or bf16 outputs are involved and 1e-4 otherwise (one-token
 *   prompts eight at a time, taken as one tensor);
 * - a prompt continued over 2 to 5 calls against the same prompt in one call:
 *   bit for bit when every split falls on a 64-token chunk boundary (the same
 *   chunks computed), else within rounding (1e-4 with an fp32 state, 1e-2 with
 *   a bf16 state, which is rounded at every call's end);
 * - the same prompt in native, compact and replay: the same bits, under
 *   prefill_precision = high and fast alike (a CPU prefill is fp32). */
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "tests/runner.h"
#include "tests/testutil.h"

static const char *const modes[] = {"native", "compact", "replay"};

/* A one-layer context of `mode` with the prefill precision `precision`, one
 * slot acquired. */
static ssm_ctx *open_ctx_at(const ssm_model_dims *m, const char *mode, ssm_dtype state,
                            ssm_dtype act, ssm_prefill_precision precision, int32_t *slot)
{
    ssm_config c;
    test_config(&c, m, mode, state, act, 2, 3);
    c.prefill_precision = precision;
    ssm_ctx *ctx = NULL;
    ck_assert_msg(ssm_ctx_create(&c, &ctx) == SSM_OK, "%s", ssm_last_error());
    ck_assert_int_eq(ssm_slot_acquire(ctx, slot), SSM_OK);
    return ctx;
}

/* The same with the default precision. */
static ssm_ctx *open_ctx(const ssm_model_dims *m, const char *mode, ssm_dtype state,
                         ssm_dtype act, int32_t *slot)
{
    ssm_config c;
    ssm_config_defaults(&c);
    return open_ctx_at(m, mode, state, act, c.prefill_precision, slot);
}

/* Prefills tokens [from, to) of io into slot in one call. */
static void prefill(ssm_ctx *ctx, int32_t slot, const ssm_model_dims *m, ssm_dtype act,
                    const test_weights *w, const test_io *io, int64_t from, int64_t to)
{
    size_t es = ssm_dtype_size(act);
    ssm_step_io at = {(const char *)io->x + from * ssm_conv_channels(m) * (int64_t)es,
                      (const char *)io->gate + from * ssm_gate_width(m) * (int64_t)es,
                      (const char *)io->beta + from * m->value_heads * (int64_t)es,
                      (char *)io->out + from * m->value_heads * m->value_dim * (int64_t)es};
    int32_t offsets[2] = {0, (int32_t)(to - from)};
    ssm_prefill_batch batch = {1, &slot, offsets, offsets[1], NULL, NULL};
    ck_assert_msg(ssm_prefill(ctx, 0, &batch, &w->w, &at, NULL) == SSM_OK, "%s",
                  ssm_last_error());
}

/* A shape of the given gate form: 0 GDN, 1 KDA, 2 KDA with the lower bound. */
static void make_dims(test_rng *r, int gate, ssm_model_dims *m)
{
    test_random_dims(r, gate ? SSM_MODEL_KDA : SSM_MODEL_GDN, test_rng_int(r, 0, 1), m);
    m->layers = 1;
    m->has_lower_bound = gate == 2;
    m->lower_bound = gate == 2 ? -5.0f : 0.0f;
}

static const int64_t lengths[] = {1, 63, 64, 65, 300, 4096};
#define LENGTHS ((int)(sizeof lengths / sizeof lengths[0]))

/* Prefills n fresh tokens into a fresh slot of `mode` and adds the state's
 * and outputs' errors against the token-by-token reference (fp32 state, from
 * zero) to the sums; the conv window must match the reference's exactly. */
static void prefill_against_reference(test_rng *r, const ssm_model_dims *m, const char *mode,
                                      ssm_dtype state, ssm_dtype act, int64_t n,
                                      test_rms_sum *state_err, test_rms_sum *out_err)
{
    test_weights w;
    test_weights_make(r, m, 1, &w);
    test_io io;
    test_io_make(r, m, act, n, &io);
    int32_t slot;
    ssm_ctx *ctx = open_ctx(m, mode, state, act, &slot);
    prefill(ctx, slot, m, act, &w, &io, 0, n);
    test_snapshot snap;
    ck_assert_int_eq(test_snapshot_take(ctx, slot, &snap), SSM_OK);

    int64_t state_elems = ssm_ref_state_elems(m), out_elems = n * m->value_heads * m->value_dim;
    float *ref_state = calloc((size_t)state_elems, sizeof(float));
    void *ref_window = calloc((size_t)ssm_ref_window_elems(m), ssm_dtype_size(act));
    void *ref_out = calloc((size_t)out_elems, ssm_dtype_size(act));
    float *scratch = calloc((size_t)ssm_ref_sequence_scratch_floats(m), sizeof(float));
    ck_assert(ref_state && ref_window && ref_out && scratch);
    ssm_step_io ref_io = io.io;
    ref_io.out = ref_out;
    ssm_ref_sequence(m, SSM_DTYPE_F32, act, &w.w, ref_window, ref_state, &ref_io, n, scratch);

    test_rms_sum_add(state_err, snap.state[0], state, ref_state, SSM_DTYPE_F32, state_elems);
    test_rms_sum_add(out_err, io.out, act, ref_out, act, out_elems);
    ck_assert_msg(test_bitwise_equal(snap.conv[0], ref_window, act, ssm_ref_window_elems(m)),
                  "the conv window after the prefill differs from the reference's");
    test_snapshot_free(&snap);
    free(ref_state);
    free(ref_window);
    free(ref_out);
    free(scratch);
    test_io_free(&io);
    test_weights_free(&w);
    ssm_ctx_destroy(ctx);
}

/* _i: length, gate form, state dtype, activation dtype; the mode rotates.
 * One token from a zero state has the outputs (q . k) beta v: on a shape
 * with one key head every output is that one dot product times v, and one
 * prompt's relative RMS measures how far the product cancels (fp32 sums in
 * two orders), not the code. Eight one-token prompts are taken as one
 * tensor, as the reference's own tests take several runs. */
START_TEST(prefill_matches_reference)
{
    int64_t n = lengths[_i % LENGTHS];
    int gate = (_i / LENGTHS) % 3;
    ssm_dtype state = (_i / (LENGTHS * 3)) % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    ssm_dtype act = (_i / (LENGTHS * 6)) % 2 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    const char *mode = modes[(_i + _i / LENGTHS) % 3]; /* every length meets every mode */
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 1) * 0x9e3779b97f4a7c15ull);
    ssm_model_dims m;
    make_dims(&r, gate, &m);
    test_rms_sum state_sum = {0, 0}, out_sum = {0, 0};
    for (int prompt = 0; prompt < (n == 1 ? 8 : 1); prompt++)
        prefill_against_reference(&r, &m, mode, state, act, n, &state_sum, &out_sum);

    double bound = state == SSM_DTYPE_BF16 || act == SSM_DTYPE_BF16 ? 5e-3 : 1e-4;
    double state_err = test_rms_sum_value(&state_sum), out_err = test_rms_sum_value(&out_sum);
    ck_assert_msg(state_err <= (state == SSM_DTYPE_BF16 ? 5e-3 : 1e-4) && out_err <= bound,
                  "%s %s%s n=%lld state=%s act=%s H=%d HV=%d K=%d V=%d: relative RMS state %.3g, "
                  "outputs %.3g (bound %g)",
                  mode, ssm_model_kind_name(m.kind), gate == 2 ? " lower-bound" : "", (long long)n,
                  ssm_dtype_name(state), ssm_dtype_name(act), m.heads, m.value_heads, m.key_dim,
                  m.value_dim, state_err, out_err, bound);
}
END_TEST

/* _i: split on chunk boundaries or anywhere, gate form, state dtype. The
 * prompt goes to one slot in one call in each mode, and in 2 to 5 calls. */
START_TEST(continued_prompt_matches_one_call)
{
    int aligned = _i % 2, gate = (_i / 2) % 3;
    ssm_dtype state = _i / 6 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, act = SSM_DTYPE_BF16;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 77) * 0x9e3779b97f4a7c15ull);
    ssm_model_dims m;
    make_dims(&r, gate, &m);
    test_weights w;
    test_weights_make(&r, &m, 0, &w);
    int64_t n = aligned ? 64 * test_rng_int(&r, 2, 5) : test_rng_int(&r, 70, 320);
    test_io once, split;
    test_io_make(&r, &m, act, n, &once);
    test_io_make(&r, &m, act, n, &split);
    size_t es = ssm_dtype_size(act);
    memcpy(split.x, once.x, (size_t)(n * ssm_conv_channels(&m)) * es);
    memcpy(split.gate, once.gate, (size_t)(n * ssm_gate_width(&m)) * es);
    memcpy(split.beta, once.beta, (size_t)(n * m.value_heads) * es);
    int64_t out_elems = n * m.value_heads * m.value_dim;

    test_snapshot first;
    void *first_out = malloc((size_t)out_elems * es);
    ck_assert_ptr_nonnull(first_out);
    for (int k = 0; k < 3; k++) {
        int32_t slot;
        ssm_ctx *ctx = open_ctx(&m, modes[k], state, act, &slot);
        memset(once.out, 0, (size_t)out_elems * es);
        prefill(ctx, slot, &m, act, &w, &once, 0, n);
        test_snapshot snap;
        ck_assert_int_eq(test_snapshot_take(ctx, slot, &snap), SSM_OK);
        if (k == 0) {
            first = snap;
            memcpy(first_out, once.out, (size_t)out_elems * es);
        } else {
            ck_assert_msg(test_snapshot_equal(&snap, &first) &&
                              test_bitwise_equal(once.out, first_out, act, out_elems),
                          "%s's prefill differs from native's", modes[k]);
            test_snapshot_free(&snap);
        }
        ssm_ctx_destroy(ctx);
    }

    int32_t calls = test_rng_int(&r, 2, aligned ? (int32_t)(n / 64 < 5 ? n / 64 : 5) : 5), slot;
    int64_t cut[6] = {0};
    for (int32_t c = 1; c < calls; c++) { /* increasing cut points, at least one token apart */
        int64_t lo = cut[c - 1] + 1, hi = n - (calls - c);
        cut[c] = aligned ? 64 * ((lo + 63) / 64) : lo + test_rng_int(&r, 0, (int32_t)(hi - lo));
        if (cut[c] > hi)
            cut[c] = hi;
    }
    cut[calls] = n;
    ssm_ctx *ctx = open_ctx(&m, modes[_i % 3], state, act, &slot);
    for (int32_t c = 0; c < calls; c++)
        if (cut[c + 1] > cut[c])
            prefill(ctx, slot, &m, act, &w, &split, cut[c], cut[c + 1]);
    test_snapshot snap;
    ck_assert_int_eq(test_snapshot_take(ctx, slot, &snap), SSM_OK);
    int on_boundaries = 1;
    for (int32_t c = 1; c < calls; c++)
        on_boundaries &= cut[c] % 64 == 0 || cut[c] == n;
    ck_assert_msg(on_boundaries || !aligned, "an aligned case cut off a chunk boundary");
    int64_t state_elems = ssm_ref_state_elems(&m);
    if (on_boundaries) {
        ck_assert_msg(test_snapshot_equal(&snap, &first) &&
                          test_bitwise_equal(split.out, first_out, act, out_elems),
                      "%d calls split on chunk boundaries differ from one call", calls);
    } else {
        /* A bf16 state is rounded at every call's end, so each cut adds a
         * rounding the single call does not make. The numerics contract holds
         * each side within 5e-3 of the fp64 state (chunked prefill), so the two
         * may be 1e-2 apart; measured up to 4.3e-3 at 5 calls (SSM_TEST_SEED=
         * 17347024830188261290, case 10), past the 4e-3 this once used. With
         * an fp32 state each side is held within 1e-4 of the token-by-token
         * reference above, so 1e-4 apart is the bound (1.17e-5 measured at 5
         * calls, SSM_TEST_SEED=299 case 0, past the 1e-5 this once used). An
         * error in the algorithm is O(1). */
        double bound = state == SSM_DTYPE_BF16 ? 2 * 5e-3 : 1e-4;
        double state_err = test_rel_rms(snap.state[0], state, first.state[0], state, state_elems);
        /* outputs in bf16: a rounding flip is 2^-8, so a bf16 bound */
        double out_err = test_rel_rms(split.out, act, first_out, act, out_elems);
        ck_assert_msg(state_err <= bound && out_err <= 4e-3,
                      "%d calls (n=%lld) against one: relative RMS state %.3g (bound %g), "
                      "outputs %.3g (bound 4e-3)",
                      calls, (long long)n, state_err, bound, out_err);
        ck_assert_msg(test_bitwise_equal(snap.conv[0], first.conv[0], act,
                                         ssm_ref_window_elems(&m)),
                      "the conv window after %d calls differs from one call's", calls);
    }
    test_snapshot_free(&snap);
    test_snapshot_free(&first);
    free(first_out);
    test_io_free(&once);
    test_io_free(&split);
    test_weights_free(&w);
    ssm_ctx_destroy(ctx);
}
END_TEST

/* _i: gate form and state dtype. A CPU prefill is fp32 throughout, so
 * prefill_precision = fast and high leave the same bits in every mode. */
START_TEST(cpu_prefill_ignores_the_precision)
{
    int gate = _i % 3;
    ssm_dtype state = _i / 3 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32, act = SSM_DTYPE_BF16;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 501) * 0x9e3779b97f4a7c15ull);
    ssm_model_dims m;
    make_dims(&r, gate, &m);
    test_weights w;
    test_weights_make(&r, &m, 1, &w);
    int64_t n = test_rng_int(&r, 1, 200), out_elems = n * m.value_heads * m.value_dim;
    test_io io;
    test_io_make(&r, &m, act, n, &io);
    size_t bytes = (size_t)out_elems * ssm_dtype_size(act);
    void *first_out = malloc(bytes);
    ck_assert_ptr_nonnull(first_out);
    test_snapshot first;
    for (int k = 0; k < 6; k++) {
        int32_t slot;
        ssm_ctx *ctx = open_ctx_at(&m, modes[k % 3], state, act,
                                   k < 3 ? SSM_PREFILL_PRECISION_HIGH : SSM_PREFILL_PRECISION_FAST,
                                   &slot);
        memset(io.out, 0, bytes);
        prefill(ctx, slot, &m, act, &w, &io, 0, n);
        test_snapshot snap;
        ck_assert_int_eq(test_snapshot_take(ctx, slot, &snap), SSM_OK);
        if (k == 0) {
            first = snap;
            memcpy(first_out, io.out, bytes);
        } else {
            ck_assert_msg(test_snapshot_equal(&snap, &first) &&
                              test_bitwise_equal(io.out, first_out, act, out_elems),
                          "%s with prefill_precision = %s differs from native's with high",
                          modes[k % 3], k < 3 ? "high" : "fast");
            test_snapshot_free(&snap);
        }
        ssm_ctx_destroy(ctx);
    }
    test_snapshot_free(&first);
    free(first_out);
    test_io_free(&io);
    test_weights_free(&w);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("prefill");
    TCase *tc = tcase_create("api");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, prefill_matches_reference, 0, LENGTHS * 3 * 2 * 2);
    tcase_add_loop_test(tc, continued_prompt_matches_one_call, 0, 12);
    tcase_add_loop_test(tc, cpu_prefill_ignores_the_precision, 0, 6);
    suite_add_tcase(s, tc);
    return s;
}
