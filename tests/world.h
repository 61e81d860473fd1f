/* A test world shared by the protocol suites (check_tickets, check_slots):
 * random dims and weights, contexts with prefilled slots, batch tensors with
 * sentinels, and snapshot comparisons between twin contexts. */
#ifndef SSM_TESTS_WORLD_H
#define SSM_TESTS_WORLD_H

#include <check.h>
#include <stdint.h>

#include "tests/expect.h"
#include "tests/testutil.h"

#define MAX_DRAFT 3
#define T_MAX (1 + MAX_DRAFT)

/* ------------------------------------------------------------ the world */

/* A random small model, its per-layer weights, and a prefill "prehistory"
 * every context made from it runs first, so slots hold non-zero state. */
typedef struct world {
    test_rng rng;
    ssm_model_dims m;
    ssm_config cfg;
    int32_t cap;
    ssm_dtype sd, ad;
    test_weights *w;      /* [layers] */
    int32_t *pre_offsets; /* [cap + 1] */
    int32_t pre_max;
    test_io *pre_io;      /* [layers] */
} world;

void world_init(world *wd, int kind_index, int32_t cap, uint64_t salt);
void world_free(world *wd);
ssm_ctx *world_ctx(const world *wd, int32_t *slots);
size_t x_bytes(const world *wd, int64_t n);
size_t gate_bytes(const world *wd, int64_t n);
size_t beta_bytes(const world *wd, int64_t n);
size_t out_bytes(const world *wd, int64_t n);
test_io *ios_make(world *wd, int64_t n);
test_io *ios_clone(const world *wd, const test_io *src, int64_t n);
void ios_free(const world *wd, test_io *ios);
void ios_copy_token(const world *wd, test_io *dst, int64_t dst_t, const test_io *src,
                    int64_t src_t);
void ios_sentinel(const world *wd, test_io *ios, int64_t n);
void ios_assert_sentinel(const world *wd, const test_io *ios, int64_t n, const char *what);
void ios_assert_out_equal(const world *wd, const test_io *a, const test_io *b, int64_t n,
                          const char *what);
void verify_layers(ssm_ctx *ctx, const world *wd, const ssm_batch *b, test_io *ios,
                   ssm_ticket *t, int32_t l0, int32_t l1);
void verify_all(ssm_ctx *ctx, const world *wd, const ssm_batch *b, test_io *ios,
                ssm_ticket *t);
void decode_all(ssm_ctx *ctx, const world *wd, const ssm_batch *b, test_io *ios);
void snaps_take(ssm_ctx *ctx, int32_t n, const int32_t *slots, test_snapshot *out);
void snaps_free(int32_t n, test_snapshot *s);
void snaps_assert_equal(int32_t n, const test_snapshot *a, const test_snapshot *b,
                               const char *what);
int snap_is_zero(const test_snapshot *s);
void assert_slot_same(ssm_ctx *a, int32_t sa, ssm_ctx *b, int32_t sb, const char *what);

#endif
