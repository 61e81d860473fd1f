/* The main of a Check suite on the GPU (the page suites): SKIP (exit 77)
 * without a CUDA device, else the seed printed once, device 0 current and
 * the suite run without fork (CUDA is initialized). */
#ifndef SSM_TESTS_GPU_SUITE_H
#define SSM_TESTS_GPU_SUITE_H

#include <check.h>

/* Builds the suite with make() and runs it; the process's exit status:
 * 77 no device, 0 every test passed, 1 otherwise. */
int gpu_suite_main(Suite *(*make)(void));

#endif
