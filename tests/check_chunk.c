/* The chunked recurrence (kernels/chunk.c) against the token-by-token
 * recurrence: an fp64 one without rounding (the numerics contract's
 * chunked-prefill bound, relative RMS <= 5e-3, on outputs and final state), and
 * the fp32 reference kernel (the algebra: the two differ only by fp32
 * rounding). Lengths around the chunk size, GDN and KDA with and without the
 * lower bound, fp32 and bf16 state, runs continued over several calls. The
 * replay identity (kernels/replay.c, docs/modes.md), the recurrence in its
 * other form, against the same fp64 recurrence over a long history. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/math.h"
#include "kernels/reference.h"
#include "kernels/replay.h"
#include "tests/runner.h"
#include "tests/testutil.h"

/* Gate forms. */
enum { GATE_GDN, GATE_KDA, GATE_KDA_BOUND, GATES };

/* One value head's inputs and the state it starts from. */
typedef struct head_run {
    int32_t K, V, gk;
    int64_t n;
    float *q, *k, *v, *g, *beta; /* [n][K], [n][K], [n][V], [n][gk], [n] */
    float *S0;                   /* [V][K] */
} head_run;

static float *floats(int64_t n)
{
    float *p = calloc((size_t)n, sizeof(float));
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Normalized keys and queries (q scaled by K^-0.5 as the prologue does),
 * normal values, realistic decays and betas, and a nonzero starting state
 * (a continued prompt). */
static head_run make_run(test_rng *r, int gate, int64_t n)
{
    head_run h;
    h.K = 16 << test_rng_int(r, 0, 1);
    h.V = 8 << test_rng_int(r, 0, 1);
    h.gk = gate == GATE_GDN ? 1 : h.K;
    h.n = n;
    h.q = floats(n * h.K);
    h.k = floats(n * h.K);
    h.v = floats(n * h.V);
    h.g = floats(n * h.gk);
    h.beta = floats(n);
    h.S0 = floats((int64_t)h.V * h.K);
    for (int64_t t = 0; t < n; t++) {
        for (int32_t j = 0; j < h.K; j++) {
            h.q[t * h.K + j] = (float)test_rng_normal(r);
            h.k[t * h.K + j] = (float)test_rng_normal(r);
        }
        ssm_ref_l2_normalize(h.K, h.q + t * h.K, ssm_query_scale(h.K));
        ssm_ref_l2_normalize(h.K, h.k + t * h.K, 1.0f);
        for (int32_t e = 0; e < h.V; e++)
            h.v[t * h.V + e] = (float)test_rng_normal(r);
        for (int32_t j = 0; j < h.gk; j++) {
            float x = (float)test_rng_normal(r);
            h.g[t * h.gk + j] = gate == GATE_KDA_BOUND
                                    ? ssm_kda_gate(0.0f, x, 0.0f, 1, -5.0f)
                                    : ssm_gdn_gate(-1.0f, x, -2.0f);
        }
        h.beta[t] = ssm_sigmoid((float)test_rng_normal(r));
    }
    for (int64_t e = 0; e < (int64_t)h.V * h.K; e++)
        h.S0[e] = (float)(0.1 * test_rng_normal(r));
    return h;
}

static void free_run(head_run *h)
{
    free(h->q);
    free(h->k);
    free(h->v);
    free(h->g);
    free(h->beta);
    free(h->S0);
}

static ssm_chunk_tokens tokens_of(const head_run *h, int64_t first)
{
    ssm_chunk_tokens x = {h->q + first * h->K, h->k + first * h->K, h->v + first * h->V,
                          h->g + first * h->gk, h->beta + first, h->K, h->V, h->gk, 1};
    return x;
}

/* The recurrence (decay, delta rule, output) token by token in fp64, no
 * rounding anywhere. */
static void run_fp64(const head_run *h, double *S, double *o)
{
    int32_t K = h->K, V = h->V;
    for (int64_t e = 0; e < (int64_t)V * K; e++)
        S[e] = h->S0[e];
    for (int64_t t = 0; t < h->n; t++) {
        const float *q = h->q + t * K, *k = h->k + t * K, *g = h->g + t * h->gk;
        for (int32_t e = 0; e < V; e++) {
            double *row = S + (int64_t)e * K, recalled = 0, out = 0;
            for (int32_t j = 0; j < K; j++) {
                row[j] *= exp((double)g[h->gk == 1 ? 0 : j]);
                recalled += row[j] * k[j];
            }
            double u = h->beta[t] * (h->v[t * V + e] - recalled);
            for (int32_t j = 0; j < K; j++) {
                row[j] += u * k[j];
                out += row[j] * q[j];
            }
            o[t * V + e] = out;
        }
    }
}

/* The fp32 reference kernel token by token, rounding to state_dtype. */
static void run_sequential(const head_run *h, ssm_dtype sd, float *S, float *o)
{
    memcpy(S, h->S0, sizeof(float) * (size_t)h->V * h->K);
    for (int64_t t = 0; t < h->n; t++)
        ssm_ref_head_update(h->K, h->V, h->gk != 1, h->q + t * h->K, h->k + t * h->K,
                            h->v + t * h->V, h->g + t * h->gk, h->beta[t], sd, S, o + t * h->V);
}

/* The chunked form over [first, first + n), continuing from S. */
static void run_chunked(const head_run *h, int64_t first, int64_t n, int32_t chunk, ssm_dtype sd,
                        float *S, float *o)
{
    float *scratch = floats(ssm_chunk_scratch_floats(h->K, h->V, chunk));
    ssm_chunk_tokens x = tokens_of(h, first);
    ssm_chunk_head(h->K, h->V, h->gk != 1, chunk, &x, n, sd, S, o + first * h->V, h->V, scratch);
    free(scratch);
}

/* The whole run through the chunked form and the fp32 sequence from S0:
 * the relative RMS of the outputs and of the final state between them. */
static void chunked_against_sequential(const head_run *h, double *out_err, double *state_err)
{
    int64_t n = h->n, state = (int64_t)h->V * h->K;
    float *S_seq = floats(state), *o_seq = floats(n * h->V);
    float *S = floats(state), *o = floats(n * h->V);
    run_sequential(h, SSM_DTYPE_F32, S_seq, o_seq);
    memcpy(S, h->S0, sizeof(float) * (size_t)state);
    run_chunked(h, 0, n, SSM_CHUNK_TOKENS, SSM_DTYPE_F32, S, o);
    *out_err = test_rel_rms(o, SSM_DTYPE_F32, o_seq, SSM_DTYPE_F32, n * h->V);
    *state_err = test_rel_rms(S, SSM_DTYPE_F32, S_seq, SSM_DTYPE_F32, state);
    free(S_seq);
    free(o_seq);
    free(S);
    free(o);
}

static const int64_t lengths[] = {1, 63, 64, 65, 300, 4096};
#define LENGTHS ((int)(sizeof lengths / sizeof lengths[0]))

/* _i: length, gate form, state dtype. */
START_TEST(chunked_matches_fp64)
{
    int64_t n = lengths[_i % LENGTHS];
    int gate = (_i / LENGTHS) % GATES;
    ssm_dtype sd = _i / (LENGTHS * GATES) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 1) * 0x9e3779b97f4a7c15ull);
    head_run h = make_run(&r, gate, n);
    int64_t state = (int64_t)h.V * h.K;
    double *S64 = calloc((size_t)state, sizeof(double)), *o64 = calloc((size_t)(n * h.V), sizeof(double));
    float *S = floats(state), *o = floats(n * h.V);
    run_fp64(&h, S64, o64);
    memcpy(S, h.S0, sizeof(float) * (size_t)state);
    /* S0 itself is in the state dtype, as a slot's state is. */
    for (int64_t e = 0; e < state; e++)
        S[e] = ssm_ref_round(sd, S[e]);
    run_chunked(&h, 0, n, SSM_CHUNK_TOKENS, sd, S, o);
    double out_err = test_rel_rms_f64(o, SSM_DTYPE_F32, o64, n * h.V);
    double state_err = test_rel_rms_f64(S, SSM_DTYPE_F32, S64, state);
    ck_assert_msg(out_err <= 5e-3 && state_err <= 5e-3,
                  "n=%lld gate=%d state=%s K=%d V=%d: relative RMS outputs %.3g, state %.3g "
                  "(bound 5e-3)",
                  (long long)n, gate, ssm_dtype_name(sd), h.K, h.V, out_err, state_err);
    free(S64);
    free(o64);
    free(S);
    free(o);
    free_run(&h);
}
END_TEST

/* fp32 state: chunked and token-by-token fp32 differ by rounding only. A
 * wrong term in the chunked algebra shows as an O(1) difference. */
START_TEST(chunked_matches_sequential_fp32)
{
    int64_t n = lengths[_i % LENGTHS];
    int gate = (_i / LENGTHS) % GATES;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 101) * 0x9e3779b97f4a7c15ull);
    head_run h = make_run(&r, gate, n);
    double out_err, state_err;
    chunked_against_sequential(&h, &out_err, &state_err);
    ck_assert_msg(out_err <= 1e-4 && state_err <= 1e-4,
                  "n=%lld gate=%d K=%d V=%d: relative RMS to the fp32 sequence: outputs %.3g, "
                  "state %.3g (bound 1e-4)",
                  (long long)n, gate, h.K, h.V, out_err, state_err);
    free_run(&h);
}
END_TEST

/* A prompt of 300 tokens in 2 to 5 calls, the state carried between them,
 * against one call: within 1e-4 for any split, and bit for bit when every
 * split falls on a chunk boundary (the same chunks are computed). _i: gate. */
START_TEST(continued_runs_match_one_run)
{
    int gate = _i % GATES;
    int aligned = _i / GATES;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 201) * 0x9e3779b97f4a7c15ull);
    int64_t n = aligned ? 5 * SSM_CHUNK_TOKENS : 300;
    head_run h = make_run(&r, gate, n);
    int64_t state = (int64_t)h.V * h.K;
    float *S_one = floats(state), *o_one = floats(n * h.V);
    float *S = floats(state), *o = floats(n * h.V);
    memcpy(S_one, h.S0, sizeof(float) * (size_t)state);
    run_chunked(&h, 0, n, SSM_CHUNK_TOKENS, SSM_DTYPE_F32, S_one, o_one);
    memcpy(S, h.S0, sizeof(float) * (size_t)state);
    int pieces = test_rng_int(&r, 2, 5);
    int64_t done = 0;
    for (int p = 0; p < pieces; p++) {
        int64_t left = n - done, take = left;
        if (p < pieces - 1) {
            take = aligned ? SSM_CHUNK_TOKENS * test_rng_int(&r, 0, (int)(left / SSM_CHUNK_TOKENS))
                           : test_rng_int(&r, 0, (int)left);
        }
        run_chunked(&h, done, take, SSM_CHUNK_TOKENS, SSM_DTYPE_F32, S, o);
        done += take;
    }
    if (aligned) {
        ck_assert_msg(test_bitwise_equal(S, S_one, SSM_DTYPE_F32, state) &&
                          test_bitwise_equal(o, o_one, SSM_DTYPE_F32, n * h.V),
                      "gate=%d: %d calls split at chunk boundaries differ from one call", gate,
                      pieces);
    } else {
        double out_err = test_rel_rms(o, SSM_DTYPE_F32, o_one, SSM_DTYPE_F32, n * h.V);
        double state_err = test_rel_rms(S, SSM_DTYPE_F32, S_one, SSM_DTYPE_F32, state);
        ck_assert_msg(out_err <= 1e-4 && state_err <= 1e-4,
                      "gate=%d, %d calls: relative RMS to one call: outputs %.3g, state %.3g",
                      gate, pieces, out_err, state_err);
    }
    free(S_one);
    free(o_one);
    free(S);
    free(o);
    free_run(&h);
}
END_TEST

/* A NaN in one token's value reaches the outputs from there on and the
 * comparison fails: the chunked form cannot hide a non-finite input. */
START_TEST(nan_input_is_not_hidden)
{
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x5151);
    head_run h = make_run(&r, _i, 100);
    h.v[70 * h.V] = NAN;
    int64_t state = (int64_t)h.V * h.K;
    float *S = floats(state), *o = floats(100 * h.V);
    double *S64 = calloc((size_t)state, sizeof(double)), *o64 = calloc((size_t)(100 * h.V), sizeof(double));
    run_fp64(&h, S64, o64);
    memcpy(S, h.S0, sizeof(float) * (size_t)state);
    run_chunked(&h, 0, 100, SSM_CHUNK_TOKENS, SSM_DTYPE_F32, S, o);
    ck_assert(isnan(o[70 * h.V]));
    ck_assert(!(test_rel_rms_f64(o, SSM_DTYPE_F32, o64, 100 * h.V) <= 5e-3));
    free(S);
    free(o);
    free(S64);
    free(o64);
    free_run(&h);
}
END_TEST

/* A gate input so large that the gate overflows (e^a_log softplus(x) past
 * fp32): the gate functions floor it at SSM_GATE_FLOOR, so the chunk's
 * running sums stay finite; the chunked form then resets the state there
 * as the token-by-token update does (outputs and state finite and within
 * 1e-4 of it), instead of G_t - G_i = -inf - -inf = NaN. _i: gate. */
START_TEST(overflowing_gate_resets_like_the_update)
{
    ck_assert(ssm_gdn_gate(1.0f, 1e38f, 0.0f) == SSM_GATE_FLOOR);
    ck_assert(isnan(ssm_gdn_gate(1.0f, NAN, 0.0f)));
    ck_assert(ssm_gdn_gate(-1.0f, 3.0f, -2.0f) > SSM_GATE_FLOOR); /* a real gate is untouched */
    test_rng r;
    test_rng_init(&r, test_seed() ^ 0x6a7e);
    head_run h = make_run(&r, _i, 100);
    for (int64_t t = 3; t <= 4; t++)
        for (int32_t j = 0; j < h.gk; j++)
            h.g[t * h.gk + j] = _i == GATE_KDA_BOUND ? ssm_kda_gate(0.0f, 1e38f, 0.0f, 0, -5.0f)
                                                     : ssm_gdn_gate(1.0f, 1e38f, 0.0f);
    double out_err, state_err; /* NaN (a non-finite result) fails the bound */
    chunked_against_sequential(&h, &out_err, &state_err);
    ck_assert_msg(out_err <= 1e-4 && state_err <= 1e-4, "outputs %.3g, state %.3g (bound 1e-4)",
                  out_err, state_err);
    free_run(&h);
}
END_TEST

/* A whole layer (ssm_chunk_sequence) against the reference's token-by-token
 * run (ssm_ref_sequence) on the same prepared inputs: every value head, GVA,
 * the outputs' placement, the state and the window. fp32 state, so the two
 * differ by rounding only; the window is bit-identical (the same conv).
 * _i: length, kind, activation dtype. */
static const int64_t layer_lengths[] = {1, 64, 130};
#define LAYER_LENGTHS ((int)(sizeof layer_lengths / sizeof layer_lengths[0]))

START_TEST(layer_matches_reference)
{
    int64_t n = layer_lengths[_i % LAYER_LENGTHS];
    ssm_model_kind kind = (_i / LAYER_LENGTHS) % 2 ? SSM_MODEL_KDA : SSM_MODEL_GDN;
    ssm_dtype act = _i / (2 * LAYER_LENGTHS) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 301) * 0x9e3779b97f4a7c15ull);
    ssm_model_dims m;
    test_random_dims(&r, kind, test_rng_int(&r, 0, 1), &m);
    test_weights tw;
    test_weights_make(&r, &m, 1, &tw);
    test_io ref_io, chunk_io;
    test_io_make(&r, &m, act, n, &ref_io);
    test_io_make(&r, &m, act, n, &chunk_io);
    size_t act_size = ssm_dtype_size(act);
    int64_t out_elems = n * m.value_heads * m.value_dim;
    memcpy(chunk_io.x, ref_io.x, (size_t)(n * ssm_conv_channels(&m)) * act_size);
    memcpy(chunk_io.gate, ref_io.gate, (size_t)(n * ssm_gate_width(&m)) * act_size);
    memcpy(chunk_io.beta, ref_io.beta, (size_t)(n * m.value_heads) * act_size);
    int64_t state_elems = ssm_ref_state_elems(&m), window_elems = ssm_ref_window_elems(&m);
    float *state_ref = floats(state_elems), *state = floats(state_elems);
    void *window_ref = calloc((size_t)window_elems, act_size), *window = calloc((size_t)window_elems, act_size);
    ck_assert_ptr_nonnull(window_ref);
    ck_assert_ptr_nonnull(window);
    /* A continued prompt: a nonzero state and window to start from. */
    test_fill_normal(&r, state_ref, SSM_DTYPE_F32, state_elems, 0.0, 0.1);
    memcpy(state, state_ref, sizeof(float) * (size_t)state_elems);
    test_fill_normal(&r, window_ref, act, window_elems, 0.0, 1.0);
    memcpy(window, window_ref, (size_t)window_elems * act_size);
    float *ref_scratch = floats(ssm_ref_sequence_scratch_floats(&m));
    float *chunk_scratch = floats(ssm_chunk_sequence_scratch_floats(&m));
    ssm_ref_sequence(&m, SSM_DTYPE_F32, act, &tw.w, window_ref, state_ref, &ref_io.io, n,
                     ref_scratch);
    ssm_chunk_sequence(&m, SSM_DTYPE_F32, act, &tw.w, window, state, &chunk_io.io, n,
                       chunk_scratch);
    double out_err = test_rel_rms(chunk_io.out, act, ref_io.out, act, out_elems);
    double state_err = test_rel_rms(state, SSM_DTYPE_F32, state_ref, SSM_DTYPE_F32, state_elems);
    /* bf16 outputs: each differs from the reference by at most a rounding
     * flip (about 2^-8 relative), so the bound is bf16's, not fp32's. */
    double out_bound = act == SSM_DTYPE_BF16 ? 4e-3 : 1e-4;
    ck_assert_msg(out_err <= out_bound && state_err <= 1e-4,
                  "%s n=%lld act=%s H=%d HV=%d K=%d V=%d: relative RMS outputs %.3g (bound %g), "
                  "state %.3g (bound 1e-4)",
                  ssm_model_kind_name(kind), (long long)n, ssm_dtype_name(act), m.heads,
                  m.value_heads, m.key_dim, m.value_dim, out_err, out_bound, state_err);
    ck_assert_msg(test_bitwise_equal(window, window_ref, act, window_elems),
                  "the window after the run differs from the reference's");
    free(state_ref);
    free(state);
    free(window_ref);
    free(window);
    free(ref_scratch);
    free(chunk_scratch);
    test_io_free(&ref_io);
    test_io_free(&chunk_io);
    test_weights_free(&tw);
}
END_TEST

/* ------------------------------------------------ the replay identity */

/* A history as long as replay's ring may hold: the gate sums reach |G| in
 * the hundreds (KDA with the lower bound: thousands). */
#define REPLAY_HISTORY 1024
#define REPLAY_MAX_TOKENS 4
/* Floats past the output scratch that must stay as they were. */
#define REPLAY_GUARD 256
static const float replay_guard_value = 12345.0f;

/* Token p of h as replay's verify hands it over: a prepared token, and a
 * conv output whose k and v parts the record keeps (q is not recorded). */
static void replay_token(const head_run *h, int64_t p, float *c, ssm_ref_token *tok)
{
    memcpy(c, h->q + p * h->K, sizeof(float) * (size_t)h->K);
    memcpy(c + h->K, h->k + p * h->K, sizeof(float) * (size_t)h->K);
    memcpy(c + 2 * h->K, h->v + p * h->V, sizeof(float) * (size_t)h->V);
    memcpy(tok->q, h->q + p * h->K, sizeof(float) * (size_t)h->K);
    memcpy(tok->k, h->k + p * h->K, sizeof(float) * (size_t)h->K);
    memcpy(tok->v, h->v + p * h->V, sizeof(float) * (size_t)h->V);
    memcpy(tok->g, h->g + p * h->gk, sizeof(float) * (size_t)h->gk);
    tok->beta[0] = h->beta[p];
}

/* All h->n tokens through the replay kernels from the checkpoint h->S0 (in
 * state dtype sd), in calls of splits[c] tokens (the rows of successive
 * verifies, each appending after the last): the outputs o [n][V], fp32.
 * The records live in memory that held other records before (every byte
 * 0x3c), so nothing may be read that the appends did not write; the output
 * scratch is exactly ssm_replay_outputs_scratch_floats for the history and
 * the widest call, and the floats after it must stay untouched. */
static void run_replay(const head_run *h, ssm_model_kind kind, ssm_dtype sd,
                       ssm_replay_form form, const int32_t *splits, float *o)
{
    ssm_model_dims m = {.kind = kind, .layers = 1, .heads = 1, .value_heads = 1,
                        .key_dim = h->K, .value_dim = h->V, .conv_width = 4};
    ck_assert_int_eq(ssm_gate_width(&m), h->gk);
    int64_t state = (int64_t)h->V * h->K, n = h->n;
    void *checkpoint = malloc((size_t)state * ssm_dtype_size(sd));
    for (int64_t e = 0; e < state; e++)
        ssm_ref_store(checkpoint, sd, e, h->S0[e]);
    size_t record_bytes = ssm_replay_record_bytes(&m, SSM_DTYPE_F32);
    uint8_t *records = malloc((size_t)n * record_bytes);
    float *keys = malloc(sizeof(float) * (size_t)(n * h->K));
    memset(records, 0x3c, (size_t)n * record_bytes);
    memset(keys, 0x3c, sizeof(float) * (size_t)(n * h->K));
    ssm_replay_history history = {checkpoint, records, keys};
    int64_t scratch_floats = ssm_replay_outputs_scratch_floats(&m, (int32_t)n, REPLAY_MAX_TOKENS);
    float *scratch = floats(scratch_floats + REPLAY_GUARD);
    for (int32_t i = 0; i < REPLAY_GUARD; i++)
        scratch[scratch_floats + i] = replay_guard_value;
    int64_t token_floats = ssm_ref_token_floats(&m);
    float *token_scratch = floats(REPLAY_MAX_TOKENS * token_floats);
    float *c = floats(ssm_conv_channels(&m));
    ssm_ref_token tok[REPLAY_MAX_TOKENS];
    for (int32_t t = 0; t < REPLAY_MAX_TOKENS; t++)
        ssm_ref_token_bind(&m, token_scratch + t * token_floats, &tok[t]);
    for (int64_t first = 0, call = 0; first < n; first += splits[call++]) {
        int32_t T = splits[call];
        for (int32_t t = 0; t < T; t++) {
            replay_token(h, first + t, c, &tok[t]);
            ssm_replay_append(&m, SSM_DTYPE_F32, &history, (int32_t)(first + t), c, &tok[t]);
        }
        ssm_replay_outputs(&m, sd, SSM_DTYPE_F32, form, &history, (int32_t)first, T, tok,
                           o + first * h->V, scratch);
        int32_t written = 0;
        while (written < REPLAY_GUARD && scratch[scratch_floats + written] == replay_guard_value)
            written++;
        ck_assert_msg(written == REPLAY_GUARD,
                      "the replay outputs of tokens %lld..%lld wrote float %d past the %lld "
                      "floats ssm_replay_outputs_scratch_floats asks for",
                      (long long)first, (long long)(first + T - 1), written,
                      (long long)scratch_floats);
    }
    free(checkpoint);
    free(records);
    free(keys);
    free(scratch);
    free(token_scratch);
    free(c);
}

/* The identity over a history of 1024 tokens against the recurrence in fp64
 * from the same checkpoint (in the state dtype: replay reads it widened), in
 * calls of 1 to 4 tokens. Nothing is rounded between the checkpoint and the
 * outputs, so only fp32 arithmetic separates them: at most 1.4e-7 relative
 * RMS over 180 seeded runs. The decays come from differences G_p - G_i of
 * running sums that reach |G| in the hundreds, where one fp32 rounding of
 * the sum is 2^-24 |G|; the rounding errors the records carry (replay.h)
 * keep the differences exact; without them the outputs measured at least
 * 5e-6 off. Hence the bound, 1e-6. For GDN the recurrent and matrix forms
 * give the same bits (replay.h). _i: gate form, checkpoint dtype. */
START_TEST(replay_identity_matches_fp64)
{
    int gate = _i % GATES;
    ssm_dtype sd = _i / GATES ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    ssm_model_kind kind = gate == GATE_GDN ? SSM_MODEL_GDN : SSM_MODEL_KDA;
    test_rng r;
    test_rng_init(&r, test_seed() ^ (uint64_t)(_i + 401) * 0x9e3779b97f4a7c15ull);
    int64_t n = REPLAY_HISTORY;
    head_run h = make_run(&r, gate, n);
    /* Heads that forget faster than make_run's (about -0.4 a token): |G|
     * reaches about 400 over the history. */
    if (gate != GATE_KDA_BOUND)
        for (int64_t e = 0; e < n * h.gk; e++)
            h.g[e] = ssm_gdn_gate(0.0f, (float)test_rng_normal(&r), -1.0f);
    int64_t state = (int64_t)h.V * h.K;
    /* The checkpoint as the slot holds it, in the state dtype. */
    for (int64_t e = 0; e < state; e++)
        h.S0[e] = ssm_ref_round(sd, h.S0[e]);
    int32_t splits[REPLAY_HISTORY];
    for (int64_t done = 0, call = 0; done < n; done += splits[call++]) {
        int32_t most = n - done < REPLAY_MAX_TOKENS ? (int32_t)(n - done) : REPLAY_MAX_TOKENS;
        splits[call] = test_rng_int(&r, 1, most);
    }
    double *S64 = calloc((size_t)state, sizeof(double)), *o64 = calloc((size_t)(n * h.V), sizeof(double));
    float *o = floats(n * h.V);
    run_fp64(&h, S64, o64);
    run_replay(&h, kind, sd, SSM_REPLAY_RECURRENT, splits, o);
    double err = test_rel_rms_f64(o, SSM_DTYPE_F32, o64, n * h.V);
    ck_assert_msg(err <= 1e-6,
                  "%s%s checkpoint=%s K=%d V=%d, %lld tokens: replay's outputs (recurrent form) "
                  "are %.3g relative RMS from fp64 (bound 1e-6)",
                  ssm_model_kind_name(kind), gate == GATE_KDA_BOUND ? " lower-bound" : "",
                  ssm_dtype_name(sd), h.K, h.V, (long long)n, err);
    if (kind == SSM_MODEL_GDN) {
        float *om = floats(n * h.V);
        run_replay(&h, kind, sd, SSM_REPLAY_MATRIX, splits, om);
        int64_t at = test_first_difference(om, o, SSM_DTYPE_F32, n * h.V);
        ck_assert_msg(at < 0,
                      "gdn checkpoint=%s K=%d V=%d: the matrix form's output %lld (%.9g) differs "
                      "from the recurrent form's (%.9g)",
                      ssm_dtype_name(sd), h.K, h.V, (long long)at, at < 0 ? 0.0 : om[at],
                      at < 0 ? 0.0 : o[at]);
        free(om);
    }
    free(S64);
    free(o64);
    free(o);
    free_run(&h);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("chunk");
    TCase *tc = tcase_create("against fp64");
    tcase_add_loop_test(tc, chunked_matches_fp64, 0, LENGTHS * GATES * 2);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("against the fp32 sequence");
    tcase_add_loop_test(tc, chunked_matches_sequential_fp32, 0, LENGTHS * GATES);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("continued runs");
    tcase_add_loop_test(tc, continued_runs_match_one_run, 0, 2 * GATES);
    tcase_add_loop_test(tc, nan_input_is_not_hidden, 0, GATES);
    tcase_add_loop_test(tc, overflowing_gate_resets_like_the_update, 0, GATES);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);

    tc = tcase_create("a whole layer");
    tcase_add_loop_test(tc, layer_matches_reference, 0, LAYER_LENGTHS * 2 * 2);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);

    tc = tcase_create("replay identity");
    tcase_add_loop_test(tc, replay_identity_matches_fp64, 0, GATES * 2);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}
