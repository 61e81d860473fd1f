/* What the Check suites on the GPU (the page suites) share: their main (SKIP,
 * exit 77, without a CUDA device, else the seed printed once, device 0
 * current and the suite run without fork: CUDA is initialized), the cases
 * they loop over (setups and modes), their world (a CPU native context, CUDA
 * native and CUDA of the mode, after a prefill, a decode and two verify
 * rounds), the contexts they open beside it (another mode, a
 * tensor-parallel rank, a CPU context of other dims) and how they compare
 * pages. The step helpers record a failure in the world, as gpu_world.h's
 * do; the others fail the test (Check's assertions). */
#ifndef SSM_TESTS_GPU_SUITE_H
#define SSM_TESTS_GPU_SUITE_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/gpu/gpu_world.h"

/* ------------------------------------------------------------ cases */

/* The modes, and the setups: GDN (GVA, 3 layers) and KDA (with the gate's
 * lower bound), fp32 and bf16 state (activations alike). A loop test runs
 * i in [0, SETUPS * MODES): setup i / MODES, mode i % MODES. */
#define MODES 3
#define SETUPS 4
extern const char *const gpu_modes[MODES];
extern const setup gpu_setups[SETUPS];

/* Fails the test unless the world holds no failure (its "# ..." lines say
 * what failed). */
#define WORLD_OK(w, ok) ck_assert_msg((ok) && !(w)->failed, "%s: see the # lines above", (w)->desc)

/* ------------------------------------------------------------ worlds and steps */

/* A prefill of every clean lane (5 to 40 tokens each) with `pads` padding
 * rows, on every side; 1 when it ran and matched (world_fail otherwise). */
int gpu_prefill_lanes(world *w, int32_t pads);

/* A decode (one token) or a verify round (the world's t_max tokens, then the commit)
 * of every clean lane with `pads` padding rows, on every side; 1 when it
 * ran and matched. */
int gpu_step_lanes(world *w, step_kind kind, int32_t pads);

/* The world of loop test i (setup i / MODES, mode A = gpu_modes[i % MODES];
 * world_open_modes: sides 0 CPU native, 1 CUDA native, 2 CUDA A when A is
 * not native) after a prefill of every lane, a decode and two verify
 * rounds, exports compared; *g gets the side of A, w->op becomes `op`. */
void gpu_page_world(world *w, int i, uint64_t salt, const char *what, const char *op, int *g);

/* ------------------------------------------------------------ contexts */

/* A context of `mode` beside the world's (its model and dtypes, default
 * mode options) on CUDA device 0, or on the CPU when !cuda; `capacity`
 * slots, `count` of them acquired into slots[]. */
ssm_ctx *gpu_open_ctx(const world *w, const char *mode, int cuda, int32_t capacity,
                      int32_t count, int32_t *slots);

/* A CUDA context of `mode` holding value heads [h0, h0 + per) of the
 * world's model (a tensor-parallel rank), room for `capacity` requests,
 * with `count` slots acquired into slots[]. */
ssm_ctx *gpu_open_rank(const world *w, const char *mode, int32_t h0, int32_t per,
                       int32_t capacity, int32_t *slots, int32_t count);

/* The page (malloc'd, *n bytes) of a fresh slot of a new CPU native
 * context of dims m, state dtype sd and activation dtype ad. */
unsigned char *gpu_foreign_page(const ssm_model_dims *m, ssm_dtype sd, ssm_dtype ad, size_t *n);

/* ------------------------------------------------------------ comparisons */

/* Index of the first byte where two buffers of n bytes differ, or -1. */
long gpu_first_difference(const unsigned char *a, const unsigned char *b, size_t n);

/* Fails the test, naming `what` and k (a lane or a page of a batch) and the
 * first differing byte, unless got and want are equal. */
void gpu_assert_same(const unsigned char *got, const unsigned char *want, size_t n,
                     const char *what, int k);

/* A control: fails the test when the payloads of two pages of n bytes are
 * equal. */
void gpu_assert_payloads_differ(const unsigned char *a, const unsigned char *b, size_t n,
                                const char *what);

/* ------------------------------------------------------------ main */

/* Builds the suite with make() and runs it; the process's exit status:
 * 77 no device, 0 every test passed, 1 otherwise. */
int gpu_suite_main(Suite *(*make)(void));

#endif
