#include "tests/gpu/gpu_suite.h"

#include <stdio.h>
#include <stdlib.h>

#include "tests/gpu/gpu_util.h"
#include "tests/testutil.h"

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
