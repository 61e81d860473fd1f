/* Layers that share one weight set (loop-structured models run the same
 * weights as several logical layers): every logical layer keeps its own state
 * and window, in every mode. One context drives L layers, each step handing
 * every layer the very same ssm_layer_weights object and different inputs;
 * the CPU reference runs each layer on its own state with those weights.
 * Each layer's exported state and window must equal its own reference bit for
 * bit (the CPU modes run the reference's functions), and no two layers end up
 * alike. A state indexed by the weight object instead of the logical layer
 * would leave every layer holding the last one's state. */
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "tests/runner.h"
#include "tests/testutil.h"

enum { LAYERS = 3, PROMPT = 7, DECODES = 4, DRAFT = 2 };

/* The reference of one logical layer of one slot. */
typedef struct layer_ref {
    void *window, *state;
} layer_ref;

static void run_mode(const char *mode, ssm_model_kind kind)
{
    test_rng rng;
    test_rng_init(&rng, test_seed() ^ (uint64_t)kind * 0x9e3779b97f4a7c15ull);
    ssm_model_dims m;
    test_random_dims(&rng, kind, 1, &m);
    m.layers = LAYERS;
    const ssm_dtype sd = SSM_DTYPE_F32, ad = SSM_DTYPE_F32;
    ssm_config cfg;
    test_config(&cfg, &m, mode, sd, ad, 2, DRAFT);
    ssm_ctx *ctx = NULL;
    ck_assert_int_eq(ssm_ctx_create(&cfg, &ctx), SSM_OK);
    int32_t slot = -1;
    ck_assert_int_eq(ssm_slot_acquire(ctx, &slot), SSM_OK);

    test_weights shared;
    test_weights_make(&rng, &m, 1, &shared);
    layer_ref ref[LAYERS];
    size_t window_bytes = (size_t)ssm_ref_window_elems(&m) * ssm_dtype_size(ad);
    size_t state_bytes = (size_t)ssm_ref_state_elems(&m) * ssm_dtype_size(sd);
    int64_t sequential = ssm_ref_sequence_scratch_floats(&m),
            chunked = ssm_chunk_sequence_scratch_floats(&m);
    float *scratch = malloc(sizeof(float) * (size_t)(sequential > chunked ? sequential : chunked));
    for (int l = 0; l < LAYERS; l++) {
        ref[l].window = calloc(1, window_bytes);
        ref[l].state = calloc(1, state_bytes);
    }

    /* A prefill, decodes and one verify + commit, each layer its own inputs. */
    int32_t offsets[2] = {0, PROMPT};
    ssm_prefill_batch pre = {1, &slot, offsets, PROMPT, NULL, NULL};
    for (int l = 0; l < LAYERS; l++) {
        test_io io;
        test_io_make(&rng, &m, ad, PROMPT, &io);
        ck_assert_int_eq(ssm_prefill(ctx, l, &pre, &shared.w, &io.io, NULL), SSM_OK);
        /* Prefill runs the chunked form in every mode. */
        ssm_chunk_sequence(&m, sd, ad, &shared.w, ref[l].window, ref[l].state, &io.io, PROMPT,
                           scratch);
        test_io_free(&io);
    }
    ssm_batch one = {1, 1, &slot, NULL};
    for (int d = 0; d < DECODES; d++)
        for (int l = 0; l < LAYERS; l++) {
            test_io io;
            test_io_make(&rng, &m, ad, 1, &io);
            ck_assert_int_eq(ssm_decode(ctx, l, &one, &shared.w, &io.io, NULL), SSM_OK);
            ssm_ref_sequence(&m, sd, ad, &shared.w, ref[l].window, ref[l].state, &io.io, 1,
                             scratch);
            test_io_free(&io);
        }
    const int32_t T = 1 + DRAFT, accepted = 2;
    ssm_batch verify = {1, T, &slot, NULL};
    ssm_ticket ticket = SSM_TICKET_INIT;
    test_io kept[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        test_io_make(&rng, &m, ad, T, &kept[l]);
        ck_assert_int_eq(ssm_verify(ctx, l, &verify, &shared.w, &kept[l].io, &ticket, NULL),
                         SSM_OK);
    }
    ck_assert_int_eq(ssm_commit(ctx, &ticket, &accepted, NULL), SSM_OK);
    for (int l = 0; l < LAYERS; l++) {
        ssm_ref_sequence(&m, sd, ad, &shared.w, ref[l].window, ref[l].state, &kept[l].io,
                         accepted, scratch);
        test_io_free(&kept[l]);
    }

    test_snapshot snap;
    ck_assert_int_eq(test_snapshot_take(ctx, slot, &snap), SSM_OK);
    for (int l = 0; l < LAYERS; l++) {
        ck_assert_msg(test_bitwise_equal(snap.state[l], ref[l].state, sd,
                                         ssm_ref_state_elems(&m)),
                      "%s: layer %d's state is not its own (first difference at %lld)", mode,
                      l,
                      (long long)test_first_difference(snap.state[l], ref[l].state, sd,
                                                       ssm_ref_state_elems(&m)));
        ck_assert_msg(test_bitwise_equal(snap.conv[l], ref[l].window, ad,
                                         ssm_ref_window_elems(&m)),
                      "%s: layer %d's conv window is not its own", mode, l);
        for (int o = 0; o < l; o++)
            ck_assert_msg(!test_bitwise_equal(snap.state[l], snap.state[o], sd,
                                              ssm_ref_state_elems(&m)),
                          "%s: layers %d and %d hold the same state", mode, o, l);
    }
    test_snapshot_free(&snap);
    for (int l = 0; l < LAYERS; l++) {
        free(ref[l].window);
        free(ref[l].state);
    }
    free(scratch);
    test_weights_free(&shared);
    ssm_ctx_destroy(ctx);
}

static const char *const modes[] = {"native", "compact", "replay"};

START_TEST(test_shared_weights_gdn)
{
    run_mode(modes[_i], SSM_MODEL_GDN);
}
END_TEST

START_TEST(test_shared_weights_kda)
{
    run_mode(modes[_i], SSM_MODEL_KDA);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("shared_weights");
    TCase *tc = tcase_create("layers");
    tcase_add_loop_test(tc, test_shared_weights_gdn, 0, 3);
    tcase_add_loop_test(tc, test_shared_weights_kda, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}
