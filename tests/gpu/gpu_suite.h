/* What the Check suites on the GPU (the page suites) share: their main (SKIP,
 * exit 77, without a CUDA device, else the seed printed once, device 0
 * current and the suite run without fork: CUDA is initialized) and a
 * tensor-parallel rank's context. */
#ifndef SSM_TESTS_GPU_SUITE_H
#define SSM_TESTS_GPU_SUITE_H

#include <check.h>

#include "tests/gpu/gpu_world.h"

/* A CUDA context of `mode` holding value heads [h0, h0 + per) of the
 * world's model (a tensor-parallel rank), room for `capacity` requests,
 * with `count` slots acquired into slots[]; the test fails on any error. */
ssm_ctx *gpu_open_rank(const world *w, const char *mode, int32_t h0, int32_t per,
                       int32_t capacity, int32_t *slots, int32_t count);

/* Builds the suite with make() and runs it; the process's exit status:
 * 77 no device, 0 every test passed, 1 otherwise. */
int gpu_suite_main(Suite *(*make)(void));

#endif
