/* The native mode on the GPU (docs/modes.md): verify writes the state after token
 * t into snapshot t, commit moves the device-side current index, decode and
 * prefill update the current snapshot in place. */
#include "plugins/common/cuda/launch.cuh"
#include "kernels/cuda/pages.cuh"
#include "plugins/common/cuda/tune.cuh"

extern "C" {
#include "plugins/native/native.h"
}

using namespace ssm;

struct native_gpu {
    gpu_common common;
    gpu_tune tune; /* tuning: candidates, and scratch while tuning */
};

static gpu_common &G(native_mode *n) { return n->gpu->common; }

extern "C" size_t native_cuda_scratch_bytes(const ssm_mode_params_v2 *p)
{
    return gpu_scratch_bytes(p);
}

extern "C" size_t native_cuda_shared_bytes(const ssm_mode_params_v2 *p)
{
    return gpu_shared_bytes(p);
}

extern "C" ssm_status native_cuda_create(native_mode *n)
{
    const ssm_services_v1 *s = n->base.services;
    n->gpu = (native_gpu *)s->alloc_host(s->core, sizeof(native_gpu));
    if (!n->gpu)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_status st = gpu_common_create(G(n), &n->base.params, s);
    gpu_tune_init(n->gpu->tune, G(n), tune_profile{true, false});
    return st;
}

extern "C" void native_cuda_destroy(native_mode *n)
{
    if (!n->gpu)
        return;
    gpu_tune_end(n->gpu->tune);
    gpu_common_destroy(G(n), n->base.services);
    n->base.services->release_host(n->base.services->core, n->gpu);
    n->gpu = NULL;
}

/* Prefill and decode: the current snapshot in place, the window advanced. */
static ssm_status run_in_place(native_mode *n, const ssm_step_v1 *step)
{
    return launch_in_place(G(n), step, n->conv, n->states, n->snapshots, n->current,
                           n->base.services);
}

static ssm_status cuda_prefill(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = (native_mode *)instance;
    return run_in_place(n, step);
}

static ssm_status cuda_decode(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = (native_mode *)instance;
    return run_in_place(n, step);
}

static ssm_status cuda_verify(void *instance, const ssm_step_v1 *step)
{
    native_mode *n = (native_mode *)instance;
    gpu_common &g = G(n);
    tile_args ta = tile_for(g, step->rows, step->slots, step->layer, n->states, n->snapshots);
    ta.current = n->current;
    tile_step_tokens(ta, step);
    ta.store = STORE_EACH;
    ta.layout = step_layout(step); /* the forward's (ssm_ticket.layout) */
    if (step_in_one_launch(g, step))
        return launch_step(g, ta, step_inputs_for(g, step, n->conv, true), step->stream,
                           n->base.services);
    ssm_status st =
        launch_prep(g, prep_for(g, step, n->conv, true), step->stream, n->base.services);
    ta.after_prep = true;
    return st != SSM_OK ? st : launch_tile(g, ta, step->stream, n->base.services);
}

static ssm_status cuda_commit(void *instance, const ssm_commit_v1 *c)
{
    native_mode *n = (native_mode *)instance;
    gpu_common &g = G(n);
    commit_args a = commit_for(g, c->rows, c->tokens, c->slots, c->accepted, n->conv);
    a.current = n->current;
    return launch_commit(g, a, 0, g.layers, c->stream, n->base.services);
}

static ssm_status cuda_reset(void *instance, int32_t slot, void *stream)
{
    native_mode *n = (native_mode *)instance;
    gpu_common &g = G(n);
    size_t state = (size_t)g.state_elems * g.state_size;
    size_t conv = (size_t)g.conv_rows * g.d.D * g.act_size;
    const ssm_services_v1 *s = n->base.services;
    ssm_status st = gpu_zero((uint8_t *)n->states + (size_t)slot * g.layers * n->snapshots * state,
                             (size_t)g.layers * n->snapshots * state, stream, s);
    if (st == SSM_OK)
        st = gpu_zero((uint8_t *)n->conv + (size_t)slot * g.layers * conv, g.layers * conv, stream,
                      s);
    if (st == SSM_OK)
        st = gpu_zero(n->current + slot, sizeof(int32_t), stream, s);
    return st != SSM_OK ? st : gpu_reset_arrivals(g, slot, stream, s);
}

/* Copies the current snapshot of src (every layer) to dst[l]: the index is
 * on the device, so a tile job reads it there. */
static ssm_status copy_current(native_mode *n, int32_t src, void *const *dst, void *stream)
{
    gpu_common &g = G(n);
    for (int32_t l = 0; l < g.layers; l++) {
        tile_args ta = tile_for(g, 1, g.slot_table + src, l, n->states, n->snapshots);
        ta.current = n->current;
        ta.store = STORE_DST;
        ta.dst = dst[l];
        ssm_status st = launch_tile(g, ta, stream, n->base.services);
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

static ssm_status cuda_export(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream)
{
    native_mode *n = (native_mode *)instance;
    ssm_status st = copy_current(n, slot, dst->state, stream);
    return st != SSM_OK ? st
                        : gpu_copy_windows(G(n), n->conv, slot, dst->conv, NULL, stream,
                                           n->base.services);
}

/* After a reset, snapshot 0 is current. */
static ssm_status cuda_import(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                              void *stream)
{
    native_mode *n = (native_mode *)instance;
    gpu_common &g = G(n);
    ssm_status st = cuda_reset(n, slot, stream);
    size_t state = (size_t)g.state_elems * g.state_size;
    for (int32_t l = 0; l < g.layers && st == SSM_OK; l++)
        st = gpu_copy(native_state(n, slot, l, 0), src->state[l], state, stream, n->base.services);
    return st != SSM_OK ? st
                        : gpu_copy_windows(g, n->conv, slot, NULL, src->conv, stream,
                                           n->base.services);
}

/* dst is reset first, so its current snapshot is 0. */
static ssm_status cuda_copy(void *instance, int32_t src, int32_t dst, void *stream)
{
    native_mode *n = (native_mode *)instance;
    gpu_common &g = G(n);
    ssm_status st = cuda_reset(n, dst, stream);
    size_t window = (size_t)(g.d.W - 1) * g.d.D * g.act_size;
    for (int32_t l = 0; l < g.layers && st == SSM_OK; l++) {
        tile_args ta = tile_for(g, 1, g.slot_table + src, l, n->states, n->snapshots);
        ta.current = n->current;
        ta.store = STORE_DST;
        ta.dst = native_state(n, dst, l, 0);
        st = launch_tile(g, ta, stream, n->base.services);
        if (st == SSM_OK && window > 0)
            st = gpu_copy(native_conv(n, dst, l), native_conv(n, src, l), window, stream,
                          n->base.services);
    }
    return st;
}

/* The slots as the page moves see them: the current snapshot is read on
 * export; an import writes snapshot 0 and zeroes the others, the window's
 * tail and the current index, as native_cuda_reset and then
 * native_cuda_import leave a slot. */
static move_store page_store(native_mode *n)
{
    gpu_common &g = G(n);
    move_store s = {};
    s.d = g.d;
    s.layers = g.layers;
    s.act_size = (int32_t)g.act_size;
    s.state_size = (int32_t)g.state_size;
    s.state = n->states;
    s.snapshots = n->snapshots;
    s.current = n->current;
    s.conv = n->conv;
    s.conv_rows = g.conv_rows;
    s.zero[0] = (uint8_t *)n->current;
    s.zero_bytes[0] = sizeof(int32_t);
    return s;
}

static ssm_status cuda_export_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, void *stream)
{
    native_mode *n = (native_mode *)instance;
    return launch_page_moves<false>(page_store(n), count, slots, views, NULL, stream,
                                    n->base.services);
}

static ssm_status cuda_import_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, const uint32_t *refused,
                                    void *stream)
{
    native_mode *n = (native_mode *)instance;
    return launch_page_moves<true>(page_store(n), count, slots, views, refused, stream,
                                   n->base.services);
}

/* ---------------------------------------------------------------- tuning */

SSM_TUNE_CUDA_ENTRIES(native, native_mode)

/* ------------------------------------------------------------- the table */

/* The GPU methods above as the mode's table (nothing is ever pending to
 * materialize). */
extern "C" const ssm_mode_ops native_cuda_ops = SSM_MODE_GPU_OPS(NULL);
