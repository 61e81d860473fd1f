#include "tests/gpu/gpu_suite.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/expect.h"
#include "tests/gpu/gpu_util.h"
#include "tests/testutil.h"

#define PAYLOAD_AT 96 /* docs/pages.md: the payload starts after the header */

/* ------------------------------------------------------------ cases */

const char *const gpu_modes[MODES] = {"native", "compact", "replay"};

#define DIMS(kind_, layers_, h_, hv_, k_, v_, lb_)                                                 \
    {                                                                                              \
        .kind = (kind_), .layers = (layers_), .heads = (h_), .value_heads = (hv_),                 \
        .key_dim = (k_), .value_dim = (v_), .conv_width = 4, .has_lower_bound = (lb_),             \
        .lower_bound = (lb_) ? -5.0f : 0.0f                                                        \
    }

const setup gpu_setups[SETUPS] = {
    {DIMS(SSM_MODEL_GDN, 3, 2, 4, 32, 48, 0), SSM_DTYPE_F32, SSM_DTYPE_F32},
    {DIMS(SSM_MODEL_GDN, 3, 2, 4, 32, 48, 0), SSM_DTYPE_BF16, SSM_DTYPE_BF16},
    {DIMS(SSM_MODEL_KDA, 2, 2, 2, 64, 32, 1), SSM_DTYPE_F32, SSM_DTYPE_F32},
    {DIMS(SSM_MODEL_KDA, 2, 2, 2, 64, 32, 1), SSM_DTYPE_BF16, SSM_DTYPE_BF16},
};

/* ------------------------------------------------------------ worlds and steps */

int gpu_prefill_lanes(world *w, int32_t pads)
{
    int32_t lanes[MAX_ROWS], lengths[MAX_ROWS];
    w->op = "prefill";
    int32_t rows = world_pick_rows(w, w->lanes, pads, lanes);
    for (int32_t r = 0; r < rows; r++)
        lengths[r] = test_rng_int(&w->rng, 5, 40);
    return step_finish(w, step_make(w, STEP_PREFILL, 0, rows, lanes, lengths));
}

int gpu_step_lanes(world *w, step_kind kind, int32_t pads)
{
    int32_t lanes[MAX_ROWS];
    w->op = step_kind_name(kind);
    int32_t rows = world_pick_rows(w, w->lanes, pads, lanes);
    return step_finish(
        w, step_make(w, kind, kind == STEP_DECODE ? 1 : w->t_max, rows, lanes, NULL));
}

void gpu_page_world(world *w, int i, uint64_t salt, const char *what, const char *op, int *g)
{
    variant v = {.mode = gpu_modes[i % MODES]};
    int ok = world_open_modes(w, &gpu_setups[i / MODES], v, salt, what);
    *g = w->sides - 1;
    ok = ok && gpu_prefill_lanes(w, 0);
    step_kind kinds[3] = {STEP_DECODE, STEP_VERIFY, STEP_VERIFY};
    for (int k = 0; k < 3 && ok; k++)
        ok = gpu_step_lanes(w, kinds[k], 0);
    WORLD_OK(w, ok && world_compare_exports(w));
    w->op = op;
}

/* ------------------------------------------------------------ contexts */

/* The context of config c with `count` slots acquired into slots[]. */
static ssm_ctx *open_config(const ssm_config *c, int32_t count, int32_t *slots)
{
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(c, &ctx), SSM_OK);
    for (int32_t k = 0; k < count; k++)
        EXPECT(ssm_slot_acquire(ctx, &slots[k]), SSM_OK);
    return ctx;
}

ssm_ctx *gpu_open_ctx(const world *w, const char *mode, int cuda, int32_t capacity,
                      int32_t count, int32_t *slots)
{
    ssm_config c;
    test_config(&c, &w->m, mode, w->sd, w->ad, capacity, w->t_max - 1);
    if (cuda)
        c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
    return open_config(&c, count, slots);
}

ssm_ctx *gpu_open_rank(const world *w, const char *mode, int32_t h0, int32_t per,
                       int32_t capacity, int32_t *slots, int32_t count)
{
    int32_t group = w->m.value_heads / w->m.heads;
    ssm_model_dims m = w->m;
    m.value_heads = per;
    m.heads = per / group;
    ssm_config c;
    test_config(&c, &m, mode, w->sd, w->ad, capacity, w->t_max - 1);
    c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
    c.head_slice = (ssm_head_slice){w->m.heads, w->m.value_heads, h0};
    return open_config(&c, count, slots);
}

unsigned char *gpu_foreign_page(const ssm_model_dims *m, ssm_dtype sd, ssm_dtype ad, size_t *n)
{
    ssm_config c;
    int32_t slot;
    test_config(&c, m, "native", sd, ad, 1, T_MAX - 1);
    ssm_ctx *ctx = open_config(&c, 1, &slot);
    *n = ssm_page_bytes(ctx);
    unsigned char *page = malloc(*n);
    ck_assert_ptr_nonnull(page);
    EXPECT(ssm_slot_export_page(ctx, slot, page, *n), SSM_OK);
    ssm_ctx_destroy(ctx);
    return page;
}

/* ------------------------------------------------------------ comparisons */

long gpu_first_difference(const unsigned char *a, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

void gpu_assert_same(const unsigned char *got, const unsigned char *want, size_t n,
                     const char *what, int k)
{
    long at = gpu_first_difference(got, want, n);
    ck_assert_msg(at < 0, "%s (#%d): byte %ld of %zu differs (0x%02x, want 0x%02x)", what, k, at,
                  n, at < 0 ? 0 : got[at], at < 0 ? 0 : want[at]);
}

void gpu_assert_payloads_differ(const unsigned char *a, const unsigned char *b, size_t n,
                                const char *what)
{
    ck_assert_msg(gpu_first_difference(a + PAYLOAD_AT, b + PAYLOAD_AT, n - PAYLOAD_AT) >= 0,
                  "control: %s: the payloads are equal", what);
}

/* ------------------------------------------------------------ main */

int gpu_suite_main(Suite *(*make)(void))
{
    if (gpu_device_count() == 0) {
        printf("1..0 # SKIP no CUDA device\n");
        return 77;
    }
    test_seed(); /* printed once */
    if (!gpu_ok(cudaSetDevice(0), "cudaSetDevice"))
        return EXIT_FAILURE;
    SRunner *runner = srunner_create(make());
    srunner_set_fork_status(runner, CK_NOFORK); /* CUDA is initialized: no fork */
    srunner_run_all(runner, CK_ENV);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
