/* The native plugin on the CPU against the reference kernels run directly:
 * prefill, decode, and verify/commit with every accepted length must give
 * the same outputs and states, bit for bit (same device, same op order). */
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "tests/runner.h"
#include "tests/testutil.h"

/* The reference's view of one request: its window and state per layer. */
typedef struct shadow {
    int32_t layers;
    void **window, **state;
    size_t window_bytes, state_bytes;
} shadow;

static void shadow_init(shadow *s, const ssm_config *c)
{
    s->layers = c->model.layers;
    s->window_bytes = (size_t)ssm_ref_window_elems(&c->model) * ssm_dtype_size(c->activation_dtype);
    s->state_bytes = (size_t)ssm_ref_state_elems(&c->model) * ssm_dtype_size(c->state_dtype);
    s->window = calloc((size_t)s->layers, sizeof(void *));
    s->state = calloc((size_t)s->layers, sizeof(void *));
    for (int32_t l = 0; l < s->layers; l++) {
        s->window[l] = calloc(1, s->window_bytes + 1);
        s->state[l] = calloc(1, s->state_bytes);
    }
}

static void shadow_copy(shadow *dst, const shadow *src)
{
    for (int32_t l = 0; l < src->layers; l++) {
        memcpy(dst->window[l], src->window[l], src->window_bytes);
        memcpy(dst->state[l], src->state[l], src->state_bytes);
    }
}

static void shadow_free(shadow *s)
{
    for (int32_t l = 0; l < s->layers; l++) {
        free(s->window[l]);
        free(s->state[l]);
    }
    free(s->window);
    free(s->state);
}

/* io shifted to token `first`. */
static ssm_step_io io_at(const ssm_config *c, const ssm_step_io *io, int64_t first)
{
    size_t es = ssm_dtype_size(c->activation_dtype);
    const ssm_model_dims *m = &c->model;
    ssm_step_io r = {(const char *)io->x + first * ssm_conv_channels(m) * es,
                     (const char *)io->gate + first * ssm_gate_width(m) * es,
                     (const char *)io->beta + first * m->value_heads * es,
                     (char *)io->out + first * m->value_heads * m->value_dim * es};
    return r;
}

/* Runs n tokens of io (from token `first`) through the shadow's layer l and
 * checks the outputs equal `got` (the library's, same token offsets): a
 * prefill's through the chunked form, every other step's token by token. */
static void shadow_run(const ssm_config *c, shadow *s, int32_t l, const ssm_layer_weights *w,
                       const ssm_step_io *io, int64_t first, int64_t n, int prefill)
{
    const ssm_model_dims *m = &c->model;
    size_t out_bytes = (size_t)n * m->value_heads * m->value_dim * ssm_dtype_size(c->activation_dtype);
    float *scratch = malloc(sizeof(float) * (size_t)(prefill ? ssm_chunk_sequence_scratch_floats(m)
                                                               : ssm_ref_sequence_scratch_floats(m)));
    void *expected = malloc(out_bytes + 1);
    ssm_step_io in = io_at(c, io, first);
    const void *got = in.out;
    in.out = expected;
    (prefill ? ssm_chunk_sequence : ssm_ref_sequence)(m, c->state_dtype, c->activation_dtype, w,
                                                      s->window[l], s->state[l], &in, n, scratch);
    ck_assert_msg(memcmp(expected, got, out_bytes) == 0,
                  "layer %d: outputs of %lld tokens from %lld differ from the reference", l,
                  (long long)n, (long long)first);
    free(expected);
    free(scratch);
}

static void assert_slot_matches(ssm_ctx *ctx, int32_t slot, const shadow *s)
{
    test_snapshot snap;
    ck_assert_int_eq(test_snapshot_take(ctx, slot, &snap), SSM_OK);
    for (int32_t l = 0; l < s->layers; l++) {
        ck_assert_msg(memcmp(snap.conv[l], s->window[l], s->window_bytes) == 0,
                      "slot %d layer %d: conv window differs", slot, l);
        ck_assert_msg(memcmp(snap.state[l], s->state[l], s->state_bytes) == 0,
                      "slot %d layer %d: state differs", slot, l);
    }
    test_snapshot_free(&snap);
}

typedef struct fixture {
    test_rng rng;
    ssm_config config;
    ssm_ctx *ctx;
    test_weights *weights; /* per layer */
} fixture;

static void fixture_open(fixture *f, int variant, int32_t capacity, int32_t max_draft)
{
    test_rng_init(&f->rng, test_seed() + (uint64_t)variant * 7919);
    ssm_model_dims m;
    test_random_dims(&f->rng, variant & 1 ? SSM_MODEL_KDA : SSM_MODEL_GDN, variant & 2, &m);
    ssm_dtype state = variant & 4 ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    ssm_dtype act = variant & 8 ? SSM_DTYPE_F32 : SSM_DTYPE_BF16;
    test_config(&f->config, &m, "native", state, act, capacity, max_draft);
    ck_assert_msg(ssm_ctx_create(&f->config, &f->ctx) == SSM_OK, "%s", ssm_last_error());
    f->weights = calloc((size_t)m.layers, sizeof *f->weights);
    for (int32_t l = 0; l < m.layers; l++)
        test_weights_make(&f->rng, &m, l % 2 == 0, &f->weights[l]);
}

static void fixture_close(fixture *f)
{
    for (int32_t l = 0; l < f->config.model.layers; l++)
        test_weights_free(&f->weights[l]);
    free(f->weights);
    ssm_ctx_destroy(f->ctx);
}

/* Prefill in two varlen chunks (with a padding row and rows shorter than the
 * conv window), then decode steps with rows in another order. */
START_TEST(test_prefill_then_decode)
{
    fixture f;
    fixture_open(&f, _i, 3, 2);
    int32_t a, b;
    ck_assert_int_eq(ssm_slot_acquire(f.ctx, &a), SSM_OK);
    ck_assert_int_eq(ssm_slot_acquire(f.ctx, &b), SSM_OK);
    shadow sa, sb;
    shadow_init(&sa, &f.config);
    shadow_init(&sb, &f.config);
    for (int chunk = 0; chunk < 2; chunk++) {
        int32_t la = test_rng_int(&f.rng, 0, 9), lb = test_rng_int(&f.rng, 1, 2);
        int32_t slots[3] = {a, -1, b};
        int32_t offsets[4] = {0, la, la + 3, la + 3 + lb};
        ssm_prefill_batch batch = {3, slots, offsets, 9, NULL, NULL};
        for (int32_t l = 0; l < f.config.model.layers; l++) {
            test_io io;
            test_io_make(&f.rng, &f.config.model, f.config.activation_dtype, offsets[3], &io);
            ck_assert_msg(ssm_prefill(f.ctx, l, &batch, &f.weights[l].w, &io.io, NULL) == SSM_OK,
                          "%s", ssm_last_error());
            if (la > 0)
                shadow_run(&f.config, &sa, l, &f.weights[l].w, &io.io, 0, la, 1);
            shadow_run(&f.config, &sb, l, &f.weights[l].w, &io.io, la + 3, lb, 1);
            test_io_free(&io);
        }
    }
    for (int step = 0; step < 4; step++) {
        int32_t slots[2] = {b, a};
        ssm_batch batch = {2, 1, slots, NULL};
        for (int32_t l = 0; l < f.config.model.layers; l++) {
            test_io io;
            test_io_make(&f.rng, &f.config.model, f.config.activation_dtype, 2, &io);
            ck_assert_msg(ssm_decode(f.ctx, l, &batch, &f.weights[l].w, &io.io, NULL) == SSM_OK,
                          "%s", ssm_last_error());
            shadow_run(&f.config, &sb, l, &f.weights[l].w, &io.io, 0, 1, 0);
            shadow_run(&f.config, &sa, l, &f.weights[l].w, &io.io, 1, 1, 0);
            test_io_free(&io);
        }
    }
    assert_slot_matches(f.ctx, a, &sa);
    assert_slot_matches(f.ctx, b, &sb);
    shadow_free(&sa);
    shadow_free(&sb);
    fixture_close(&f);
}
END_TEST

/* Rounds of verify (all layers) + commit with random accepted lengths; every
 * verified output matches the reference from the committed state, and after
 * each commit the slot equals the reference advanced by the accepted tokens. */
static void run_rounds(fixture *f, int rounds, int32_t forced_accept)
{
    int32_t T = 1 + f->config.max_draft_tokens;
    int32_t slots[3] = {-1, -1, -1};
    shadow sh[2];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(ssm_slot_acquire(f->ctx, &slots[i == 0 ? 0 : 2]), SSM_OK);
        shadow_init(&sh[i], &f->config);
    }
    shadow trial;
    shadow_init(&trial, &f->config);
    int32_t layers = f->config.model.layers;
    test_io *io = calloc((size_t)layers, sizeof *io);
    for (int round = 0; round < rounds; round++) {
        ssm_batch batch = {3, T, slots, NULL};
        ssm_ticket ticket = SSM_TICKET_INIT;
        for (int32_t l = 0; l < layers; l++) {
            test_io_make(&f->rng, &f->config.model, f->config.activation_dtype, 3 * T, &io[l]);
            ck_assert_msg(ssm_verify(f->ctx, l, &batch, &f->weights[l].w, &io[l].io, &ticket,
                                     NULL) == SSM_OK,
                          "%s", ssm_last_error());
        }
        int32_t accepted[3];
        for (int i = 0; i < 3; i++)
            accepted[i] = forced_accept ? forced_accept : test_rng_int(&f->rng, 1, T);
        accepted[1] = 0; /* the padding row's value is ignored */
        ck_assert_msg(ssm_commit(f->ctx, &ticket, accepted, NULL) == SSM_OK, "%s",
                      ssm_last_error());
        for (int i = 0; i < 2; i++) {
            int32_t row = i == 0 ? 0 : 2;
            shadow_copy(&trial, &sh[i]);
            for (int32_t l = 0; l < layers; l++) {
                shadow_run(&f->config, &trial, l, &f->weights[l].w, &io[l].io, (int64_t)row * T, T, 0);
                shadow_run(&f->config, &sh[i], l, &f->weights[l].w, &io[l].io, (int64_t)row * T,
                           accepted[row], 0);
            }
            assert_slot_matches(f->ctx, slots[row], &sh[i]);
        }
        for (int32_t l = 0; l < layers; l++)
            test_io_free(&io[l]);
    }
    free(io);
    shadow_free(&trial);
    shadow_free(&sh[0]);
    shadow_free(&sh[1]);
}

START_TEST(test_verify_commit_random)
{
    fixture f;
    fixture_open(&f, _i, 2, 3);
    run_rounds(&f, 5, 0);
    fixture_close(&f);
}
END_TEST

/* Rollback by every accepted length, from a state that is not zero. */
START_TEST(test_verify_commit_each_length)
{
    for (int32_t a = 1; a <= 4; a++) {
        fixture f;
        fixture_open(&f, _i, 2, 3);
        run_rounds(&f, 3, a);
        fixture_close(&f);
    }
}
END_TEST

/* Decode between verifies, and verifies of fewer tokens than the maximum. */
START_TEST(test_mixed_decode_and_short_verify)
{
    fixture f;
    fixture_open(&f, _i, 1, 3);
    int32_t slot;
    ck_assert_int_eq(ssm_slot_acquire(f.ctx, &slot), SSM_OK);
    shadow s;
    shadow_init(&s, &f.config);
    int32_t layers = f.config.model.layers;
    for (int round = 0; round < 6; round++) {
        int32_t T = round % 3 == 2 ? 1 : test_rng_int(&f.rng, 1, 4);
        ssm_batch batch = {1, T, &slot, NULL};
        ssm_ticket ticket = SSM_TICKET_INIT;
        int32_t accepted = test_rng_int(&f.rng, 1, T);
        for (int32_t l = 0; l < layers; l++) {
            test_io io;
            test_io_make(&f.rng, &f.config.model, f.config.activation_dtype, T, &io);
            ssm_status st = round % 3 == 2
                                ? ssm_decode(f.ctx, l, &batch, &f.weights[l].w, &io.io, NULL)
                                : ssm_verify(f.ctx, l, &batch, &f.weights[l].w, &io.io, &ticket, NULL);
            ck_assert_msg(st == SSM_OK, "%s", ssm_last_error());
            shadow_run(&f.config, &s, l, &f.weights[l].w, &io.io, 0,
                       round % 3 == 2 ? 1 : accepted, 0);
            test_io_free(&io);
        }
        if (round % 3 != 2)
            ck_assert_msg(ssm_commit(f.ctx, &ticket, &accepted, NULL) == SSM_OK, "%s",
                          ssm_last_error());
        assert_slot_matches(f.ctx, slot, &s);
    }
    shadow_free(&s);
    fixture_close(&f);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("native");
    /* Loop index bits: 1 KDA, 2 GVA, 4 bf16 state, 8 f32 activations. */
    TCase *prefill = tcase_create("prefill_decode");
    tcase_add_loop_test(prefill, test_prefill_then_decode, 0, 16);
    suite_add_tcase(s, prefill);
    TCase *verify = tcase_create("verify_commit");
    tcase_set_timeout(verify, 60);
    tcase_add_loop_test(verify, test_verify_commit_random, 0, 16);
    tcase_add_loop_test(verify, test_verify_commit_each_length, 0, 16);
    tcase_add_loop_test(verify, test_mixed_decode_and_short_verify, 0, 16);
    suite_add_tcase(s, verify);
    return s;
}
