/* The compact mode on the GPU (docs/modes.md): verify writes records and outputs
 * from the state without writing it; commit applies the accepted records of
 * every layer in one launch, through tile_token like native's update, and
 * the conv windows move in blocks of that same launch (tile.cuh). */
#include "plugins/common/cuda/launch.cuh"
#include "kernels/cuda/pages.cuh"
#include "plugins/common/cuda/tune.cuh"

extern "C" {
#include "plugins/compact/compact.h"
}

using namespace ssm;

struct compact_gpu {
    gpu_common common;
    gpu_tune tune; /* tuning: candidates, and scratch while tuning */
};

static gpu_common &G(compact_mode *c) { return c->gpu->common; }

extern "C" size_t compact_cuda_scratch_bytes(const ssm_mode_params_v1 *p)
{
    return gpu_scratch_bytes(p);
}

extern "C" size_t compact_cuda_record_bytes(const ssm_mode_params_v1 *p)
{
    return (size_t)make_record_layout(p->model, ssm_dtype_size(p->activation_dtype), false).bytes;
}

extern "C" ssm_status compact_cuda_create(compact_mode *c)
{
    const ssm_services_v1 *s = c->base.services;
    c->gpu = (compact_gpu *)s->alloc_host(s->core, sizeof(compact_gpu));
    if (!c->gpu)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_status st = gpu_common_create(G(c), &c->base.params, s);
    gpu_tune_init(c->gpu->tune, G(c), tune_profile{false, true});
    return st;
}

extern "C" void compact_cuda_destroy(compact_mode *c)
{
    if (!c->gpu)
        return;
    gpu_tune_end(c->gpu->tune);
    gpu_common_destroy(G(c), c->base.services);
    c->base.services->release_host(c->base.services->core, c->gpu);
    c->gpu = NULL;
}

/* The verify records: [slot][layer][T_max]. */
static void point_at_records(compact_mode *c, const gpu_common &g, uint8_t *&base,
                             int64_t &slot_stride, int64_t &layer_stride)
{
    base = c->records;
    layer_stride = (int64_t)g.max_tokens * g.raw.bytes;
    slot_stride = layer_stride * g.layers;
}

/* Prefill and decode: the state in place, the window advanced. */
static ssm_status run_in_place(compact_mode *c, const ssm_step_v1 *step)
{
    return launch_in_place(G(c), step, c->conv, c->states, 1, NULL, c->base.services);
}

static ssm_status cuda_prefill(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = (compact_mode *)instance;
    return run_in_place(c, step);
}

static ssm_status cuda_decode(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = (compact_mode *)instance;
    return run_in_place(c, step);
}

static ssm_status cuda_verify(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = (compact_mode *)instance;
    gpu_common &g = G(c);
    tile_args ta = tile_for(g, step->rows, step->slots, step->layer, c->states, 1);
    tile_step_tokens(ta, step);
    ta.store = STORE_NONE;
    ta.layout = step_layout(step); /* the forward's (ssm_ticket.layout) */
    if (step_in_one_launch(g, step)) {
        step_inputs in = step_inputs_for(g, step, c->conv, true);
        point_at_records(c, g, in.records, in.slot_stride, in.layer_stride);
        in.layout = g.raw;
        return launch_step(g, ta, in, step->stream, c->base.services);
    }
    prep_args pa = prep_for(g, step, c->conv, true);
    point_at_records(c, g, pa.records, pa.slot_stride, pa.layer_stride);
    ssm_status st = launch_prep(g, pa, step->stream, c->base.services);
    uint8_t *records;
    point_at_records(c, g, records, ta.tok_slot_stride, ta.tok_layer_stride);
    ta.tok = records;
    ta.after_prep = true;
    return st != SSM_OK ? st : launch_tile(g, ta, step->stream, c->base.services);
}

static ssm_status cuda_commit(void *instance, const ssm_commit_v1 *commit)
{
    compact_mode *c = (compact_mode *)instance;
    gpu_common &g = G(c);
    tile_args ta = tile_for(g, commit->rows, commit->slots, -1, c->states, 1);
    uint8_t *records;
    point_at_records(c, g, records, ta.tok_slot_stride, ta.tok_layer_stride);
    ta.tok = records;
    ta.tokens = commit->tokens;
    ta.accepted = commit->accepted;
    ta.q = NULL;
    ta.store = STORE_FINAL;
    /* The verify's layout, from its ticket: the records are replayed with
     * the very sums the verify ran, whatever is chosen for this bucket now. */
    ta.layout = commit_layout(commit);
    ta.conv = c->conv; /* the windows move in the same launch */
    ta.conv_rows = g.conv_rows;
    return launch_tile(g, ta, commit->stream, c->base.services);
}

static ssm_status cuda_reset(void *instance, int32_t slot, void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    int32_t layers = c->base.params.model.layers;
    ssm_status st = gpu_zero(compact_state(c, slot, 0), (size_t)layers * c->state_bytes, stream,
                             c->base.services);
    if (st == SSM_OK)
        st = gpu_zero(compact_conv(c, slot, 0), (size_t)layers * c->conv_bytes, stream,
                      c->base.services);
    return st != SSM_OK ? st : gpu_reset_arrivals(G(c), slot, stream, c->base.services);
}

static ssm_status cuda_export(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = SSM_OK;
    for (int32_t l = 0; l < c->base.params.model.layers && st == SSM_OK; l++)
        st = gpu_copy(dst->state[l], compact_state(c, slot, l), c->state_bytes, stream,
                      c->base.services);
    return st != SSM_OK ? st
                        : gpu_copy_windows(G(c), c->conv, slot, dst->conv, NULL, stream,
                                           c->base.services);
}

static ssm_status cuda_import(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                              void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = cuda_reset(c, slot, stream);
    for (int32_t l = 0; l < c->base.params.model.layers && st == SSM_OK; l++)
        st = gpu_copy(compact_state(c, slot, l), src->state[l], c->state_bytes, stream,
                      c->base.services);
    return st != SSM_OK ? st
                        : gpu_copy_windows(G(c), c->conv, slot, NULL, src->conv, stream,
                                           c->base.services);
}

static ssm_status cuda_copy(void *instance, int32_t src, int32_t dst, void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = cuda_reset(c, dst, stream);
    size_t window = (size_t)(c->base.params.model.conv_width - 1) * G(c).d.D * G(c).act_size;
    for (int32_t l = 0; l < c->base.params.model.layers && st == SSM_OK; l++) {
        st = gpu_copy(compact_state(c, dst, l), compact_state(c, src, l), c->state_bytes, stream,
                      c->base.services);
        if (st == SSM_OK && window > 0)
            st = gpu_copy(compact_conv(c, dst, l), compact_conv(c, src, l), window, stream,
                          c->base.services);
    }
    return st;
}

/* The slots as the page moves see them: one state each; an import zeroes
 * the window's tail, as compact_cuda_reset and then compact_cuda_import
 * leave a slot (the records are not touched there either). */
static move_store page_store(compact_mode *c)
{
    gpu_common &g = G(c);
    move_store s = {};
    s.d = g.d;
    s.layers = g.layers;
    s.act_size = (int32_t)g.act_size;
    s.state_size = (int32_t)g.state_size;
    s.state = c->states;
    s.snapshots = 1;
    s.conv = c->conv;
    s.conv_rows = g.conv_rows;
    return s;
}

static ssm_status cuda_export_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    return launch_page_moves<false>(page_store(c), count, slots, views, NULL, stream,
                                    c->base.services);
}

static ssm_status cuda_import_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, const uint32_t *refused,
                                    void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    return launch_page_moves<true>(page_store(c), count, slots, views, refused, stream,
                                   c->base.services);
}

/* ---------------------------------------------------------------- tuning */

SSM_TUNE_CUDA_ENTRIES(compact, compact_mode)

/* ------------------------------------------------------------- the table */

/* The GPU methods above as the mode's table (nothing is ever pending to
 * materialize). */
extern "C" const ssm_mode_ops compact_cuda_ops = SSM_MODE_GPU_OPS(NULL);
