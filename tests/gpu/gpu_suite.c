#include "tests/gpu/gpu_suite.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/expect.h"
#include "tests/gpu/gpu_util.h"
#include "tests/testutil.h"

ssm_ctx *gpu_open_rank(const world *w, const char *mode, int32_t h0, int32_t per,
                       int32_t capacity, int32_t *slots, int32_t count)
{
    int32_t group = w->m.value_heads / w->m.heads;
    ssm_model_dims m = w->m;
    m.value_heads = per;
    m.heads = per / group;
    ssm_config c;
    ssm_ctx *ctx = NULL;
    test_config(&c, &m, mode, w->sd, w->ad, capacity, T_MAX - 1);
    c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
    c.head_slice = (ssm_head_slice){w->m.heads, w->m.value_heads, h0};
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    for (int32_t k = 0; k < count; k++)
        EXPECT(ssm_slot_acquire(ctx, &slots[k]), SSM_OK);
    return ctx;
}

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
