#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/world.h"

void world_init(world *wd, int kind_index, int32_t cap, uint64_t salt)
{
    memset(wd, 0, sizeof *wd);
    test_rng_init(&wd->rng, test_seed() ^ (salt * 0x9e3779b97f4a7c15ull));
    ssm_model_kind kind = (kind_index & 1) ? SSM_MODEL_KDA : SSM_MODEL_GDN;
    test_random_dims(&wd->rng, kind, test_rng_int(&wd->rng, 0, 1), &wd->m);
    wd->m.layers = test_rng_int(&wd->rng, 2, 3);
    wd->sd = test_rng_int(&wd->rng, 0, 1) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    wd->ad = test_rng_int(&wd->rng, 0, 1) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    wd->cap = cap;
    test_config(&wd->cfg, &wd->m, "native", wd->sd, wd->ad, cap, MAX_DRAFT);
    wd->w = calloc((size_t)wd->m.layers, sizeof *wd->w);
    for (int32_t l = 0; l < wd->m.layers; l++)
        test_weights_make(&wd->rng, &wd->m, test_rng_int(&wd->rng, 0, 1), &wd->w[l]);
    wd->pre_offsets = calloc((size_t)cap + 1, sizeof *wd->pre_offsets);
    for (int32_t r = 0; r < cap; r++) {
        int32_t n = test_rng_int(&wd->rng, 1, 6);
        wd->pre_offsets[r + 1] = wd->pre_offsets[r] + n;
        if (n > wd->pre_max)
            wd->pre_max = n;
    }
    wd->pre_io = calloc((size_t)wd->m.layers, sizeof *wd->pre_io);
    for (int32_t l = 0; l < wd->m.layers; l++)
        test_io_make(&wd->rng, &wd->m, wd->ad, wd->pre_offsets[cap], &wd->pre_io[l]);
}

void world_free(world *wd)
{
    for (int32_t l = 0; l < wd->m.layers; l++) {
        test_weights_free(&wd->w[l]);
        test_io_free(&wd->pre_io[l]);
    }
    free(wd->w);
    free(wd->pre_io);
    free(wd->pre_offsets);
}

/* A context of the world with every slot acquired (numbers in slots[]) and
 * the prehistory prefilled on every layer. */
ssm_ctx *world_ctx(const world *wd, int32_t *slots)
{
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(&wd->cfg, &ctx), SSM_OK);
    for (int32_t i = 0; i < wd->cap; i++)
        EXPECT(ssm_slot_acquire(ctx, &slots[i]), SSM_OK);
    ssm_prefill_batch pb = {wd->cap, slots, wd->pre_offsets, wd->pre_max, NULL, NULL};
    for (int32_t l = 0; l < wd->m.layers; l++)
        EXPECT(ssm_prefill(ctx, l, &pb, &wd->w[l].w, &wd->pre_io[l].io, NULL), SSM_OK);
    return ctx;
}

/* ------------------------------------------------------------ step data */

size_t x_bytes(const world *wd, int64_t n)
{
    return (size_t)(n * ssm_conv_channels(&wd->m)) * ssm_dtype_size(wd->ad);
}
size_t gate_bytes(const world *wd, int64_t n)
{
    return (size_t)(n * ssm_gate_width(&wd->m)) * ssm_dtype_size(wd->ad);
}
size_t beta_bytes(const world *wd, int64_t n)
{
    return (size_t)(n * wd->m.value_heads) * ssm_dtype_size(wd->ad);
}
size_t out_bytes(const world *wd, int64_t n)
{
    return (size_t)(n * wd->m.value_heads * wd->m.value_dim) * ssm_dtype_size(wd->ad);
}

/* Fresh random inputs of n tokens for every layer. */
test_io *ios_make(world *wd, int64_t n)
{
    test_io *ios = calloc((size_t)wd->m.layers, sizeof *ios);
    for (int32_t l = 0; l < wd->m.layers; l++)
        test_io_make(&wd->rng, &wd->m, wd->ad, n, &ios[l]);
    return ios;
}

/* The same inputs with separate (zeroed) outputs, for a twin context. */
test_io *ios_clone(const world *wd, const test_io *src, int64_t n)
{
    test_io *ios = calloc((size_t)wd->m.layers, sizeof *ios);
    int64_t nn = n > 0 ? n : 1;
    for (int32_t l = 0; l < wd->m.layers; l++) {
        test_io *d = &ios[l];
        d->tokens = n;
        d->x = malloc(x_bytes(wd, nn));
        d->gate = malloc(gate_bytes(wd, nn));
        d->beta = malloc(beta_bytes(wd, nn));
        d->out = calloc(1, out_bytes(wd, nn));
        memcpy(d->x, src[l].x, x_bytes(wd, n));
        memcpy(d->gate, src[l].gate, gate_bytes(wd, n));
        memcpy(d->beta, src[l].beta, beta_bytes(wd, n));
        d->io.x = d->x;
        d->io.gate = d->gate;
        d->io.beta = d->beta;
        d->io.out = d->out;
    }
    return ios;
}

void ios_free(const world *wd, test_io *ios)
{
    for (int32_t l = 0; l < wd->m.layers; l++)
        test_io_free(&ios[l]);
    free(ios);
}

/* Copies token src_t of every layer's inputs to token dst_t of dst. */
void ios_copy_token(const world *wd, test_io *dst, int64_t dst_t, const test_io *src,
                           int64_t src_t)
{
    for (int32_t l = 0; l < wd->m.layers; l++) {
        memcpy((char *)dst[l].x + x_bytes(wd, dst_t), (const char *)src[l].x + x_bytes(wd, src_t),
               x_bytes(wd, 1));
        memcpy((char *)dst[l].gate + gate_bytes(wd, dst_t),
               (const char *)src[l].gate + gate_bytes(wd, src_t), gate_bytes(wd, 1));
        memcpy((char *)dst[l].beta + beta_bytes(wd, dst_t),
               (const char *)src[l].beta + beta_bytes(wd, src_t), beta_bytes(wd, 1));
    }
}

/* Fills every layer's outputs with a sentinel byte pattern. */
void ios_sentinel(const world *wd, test_io *ios, int64_t n)
{
    for (int32_t l = 0; l < wd->m.layers; l++)
        memset(ios[l].out, 0xA5, out_bytes(wd, n));
}

void ios_assert_sentinel(const world *wd, const test_io *ios, int64_t n, const char *what)
{
    size_t bytes = out_bytes(wd, n);
    for (int32_t l = 0; l < wd->m.layers; l++)
        for (size_t i = 0; i < bytes; i++)
            ck_assert_msg(((const unsigned char *)ios[l].out)[i] == 0xA5,
                          "%s: layer %d output byte %zu was written", what, l, i);
}

void ios_assert_out_equal(const world *wd, const test_io *a, const test_io *b, int64_t n,
                                 const char *what)
{
    for (int32_t l = 0; l < wd->m.layers; l++)
        ck_assert_msg(memcmp(a[l].out, b[l].out, out_bytes(wd, n)) == 0,
                      "%s: layer %d outputs differ from the twin context's", what, l);
}

/* ------------------------------------------------------------ step calls */

void verify_layers(ssm_ctx *ctx, const world *wd, const ssm_batch *b, test_io *ios,
                          ssm_ticket *t, int32_t l0, int32_t l1)
{
    for (int32_t l = l0; l < l1; l++)
        EXPECT(ssm_verify(ctx, l, b, &wd->w[l].w, &ios[l].io, t, NULL), SSM_OK);
}

void verify_all(ssm_ctx *ctx, const world *wd, const ssm_batch *b, test_io *ios,
                       ssm_ticket *t)
{
    verify_layers(ctx, wd, b, ios, t, 0, wd->m.layers);
}

void decode_all(ssm_ctx *ctx, const world *wd, const ssm_batch *b, test_io *ios)
{
    for (int32_t l = 0; l < wd->m.layers; l++)
        EXPECT(ssm_decode(ctx, l, b, &wd->w[l].w, &ios[l].io, NULL), SSM_OK);
}

/* ------------------------------------------------------------ snapshots */

void snaps_take(ssm_ctx *ctx, int32_t n, const int32_t *slots, test_snapshot *out)
{
    for (int32_t i = 0; i < n; i++)
        EXPECT(test_snapshot_take(ctx, slots[i], &out[i]), SSM_OK);
}

void snaps_free(int32_t n, test_snapshot *s)
{
    for (int32_t i = 0; i < n; i++)
        test_snapshot_free(&s[i]);
}

void snaps_assert_equal(int32_t n, const test_snapshot *a, const test_snapshot *b,
                               const char *what)
{
    for (int32_t i = 0; i < n; i++)
        ck_assert_msg(test_snapshot_equal(&a[i], &b[i]), "%s: snapshot %d differs", what, i);
}

int snap_is_zero(const test_snapshot *s)
{
    for (int32_t l = 0; l < s->layers; l++) {
        for (size_t i = 0; i < s->conv_bytes; i++)
            if (((const unsigned char *)s->conv[l])[i])
                return 0;
        for (size_t i = 0; i < s->state_bytes; i++)
            if (((const unsigned char *)s->state[l])[i])
                return 0;
    }
    return 1;
}

/* Slots a and b of two contexts hold the same state. */
void assert_slot_same(ssm_ctx *a, int32_t sa, ssm_ctx *b, int32_t sb, const char *what)
{
    test_snapshot x, y;
    EXPECT(test_snapshot_take(a, sa, &x), SSM_OK);
    EXPECT(test_snapshot_take(b, sb, &y), SSM_OK);
    ck_assert_msg(test_snapshot_equal(&x, &y), "%s: slot %d differs from the twin's slot %d", what,
                  sa, sb);
    test_snapshot_free(&x);
    test_snapshot_free(&y);
}
