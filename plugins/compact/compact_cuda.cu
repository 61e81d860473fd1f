/* The compact mode on the GPU (docs/modes.md): verify writes records and
 * outputs from the state; commit moves the windows and marks the accepted
 * records pending (kernels/cuda/pending.cuh), and the next step of each
 * (slot, layer) applies them through tile_token like native's update before
 * its own tokens, writing the committed state back: the state crosses
 * memory twice a round instead of three times. Every other reader of a
 * slot's state applies them first: export and copy into their copy,
 * prefill and page moves in place (a flush). */
#define SSM_STEP_PENDING 1 /* steps apply the commit before them (launch.cuh) */
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
    uint8_t *codes;   /* [capacity][layers][HV][tiles]: the pending commits */
    uint8_t *written; /* [capacity][layers]: the record set each latest verify wrote */
    record_layout records; /* one token's record: both sets and v (make_compact_layout) */
};

static gpu_common &G(compact_mode *c) { return c->gpu->common; }

/* Pending codes of one slot: one a tile of every head of every layer. */
static size_t codes_per_slot(const ssm_mode_params_v2 *p)
{
    return (size_t)p->model.layers * p->model.value_heads *
           tiles_per_head(p->model.value_dim, SSM_TILE_RPL);
}

extern "C" size_t compact_cuda_scratch_bytes(const ssm_mode_params_v2 *p)
{
    return gpu_scratch_bytes(p) + codes_per_slot(p) + (size_t)p->model.layers;
}

extern "C" size_t compact_cuda_shared_bytes(const ssm_mode_params_v2 *p)
{
    return gpu_shared_bytes(p);
}

extern "C" size_t compact_cuda_record_bytes(const ssm_mode_params_v2 *p)
{
    return (size_t)make_compact_layout(p->model, ssm_dtype_size(p->activation_dtype)).bytes;
}

extern "C" ssm_status compact_cuda_create(compact_mode *c)
{
    const ssm_services_v1 *s = c->base.services;
    const ssm_mode_params_v2 *p = &c->base.params;
    c->gpu = (compact_gpu *)s->alloc_host(s->core, sizeof(compact_gpu));
    if (!c->gpu)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    c->gpu->codes = NULL;
    c->gpu->written = NULL;
    c->gpu->records = make_compact_layout(p->model, ssm_dtype_size(p->activation_dtype));
    ssm_status st = gpu_common_create(G(c), p, s);
    gpu_tune_init(c->gpu->tune, G(c), tune_profile{false, false});
    if (st != SSM_OK)
        return st;
    size_t codes = (size_t)p->capacity * codes_per_slot(p),
           written = (size_t)p->capacity * p->model.layers;
    c->gpu->codes = (uint8_t *)s->alloc(s->core, codes);
    c->gpu->written = (uint8_t *)s->alloc(s->core, written);
    if (!c->gpu->codes || !c->gpu->written)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of device memory for scratch");
    cudaError_t e = cudaMemset(c->gpu->codes, 0, codes);
    if (e == cudaSuccess)
        e = cudaMemset(c->gpu->written, 0, written);
    if (e != cudaSuccess)
        return s->error(s->core, SSM_ERR_DEVICE, "create: %s", cudaGetErrorString(e));
    return SSM_OK;
}

extern "C" void compact_cuda_destroy(compact_mode *c)
{
    if (!c->gpu)
        return;
    gpu_tune_end(c->gpu->tune);
    gpu_common_destroy(G(c), c->base.services);
    c->base.services->release(c->base.services->core, c->gpu->codes);
    c->base.services->release(c->base.services->core, c->gpu->written);
    c->base.services->release_host(c->base.services->core, c->gpu);
    c->gpu = NULL;
}

/* The records: [slot][layer][T_max], each holding both sets. */
static int64_t records_layer_stride(compact_mode *c)
{
    return (int64_t)G(c).max_tokens * c->gpu->records.bytes;
}

static int64_t records_slot_stride(compact_mode *c)
{
    return records_layer_stride(c) * G(c).layers;
}

/* The pending commits and where their records are. */
static pending_args pending_of(compact_mode *c)
{
    pending_args p = {};
    p.codes = c->gpu->codes;
    p.written = c->gpu->written;
    p.records = c->records;
    p.slot_stride = records_slot_stride(c);
    p.layer_stride = records_layer_stride(c);
    p.layout = c->gpu->records;
    return p;
}

/* Applies the pending commits of the step's rows (its layer, or all) in place. */
static ssm_status flush_rows(compact_mode *c, int32_t rows, const int32_t *slots, int32_t layer,
                             void *stream)
{
    return launch_pending_flush(G(c), pending_of(c), rows, slots, layer, c->states, stream,
                                c->base.services);
}

static ssm_status flush_slot(compact_mode *c, int32_t slot, void *stream)
{
    return flush_rows(c, 1, G(c).slot_table + slot, -1, stream);
}

/* Slot src's committed state of layer l into dst (its pending commit
 * applied in the copy; the slot keeps it pending). */
static ssm_status committed_into(compact_mode *c, int32_t src, int32_t l, void *dst,
                                 void *stream)
{
    gpu_common &g = G(c);
    tile_args a = tile_for(g, 1, g.slot_table + src, l, c->states, 1);
    a.tokens = 0;
    a.tok = NULL;
    a.q = NULL;
    a.store = STORE_DST;
    a.dst = dst;
    a.pending = pending_of(c);
    a.pending.keep = true;
    return launch_tile(g, a, stream, c->base.services);
}

static ssm_status cuda_prefill(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = flush_rows(c, step->rows, step->slots, step->layer, step->stream);
    return st != SSM_OK ? st
                        : launch_in_place(G(c), step, c->conv, c->states, 1, NULL,
                                          c->base.services);
}

static ssm_status cuda_decode(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = (compact_mode *)instance;
    pending_args pending = pending_of(c);
    return launch_in_place(G(c), step, c->conv, c->states, 1, NULL, c->base.services, &pending);
}

static ssm_status cuda_verify(void *instance, const ssm_step_v1 *step)
{
    compact_mode *c = (compact_mode *)instance;
    gpu_common &g = G(c);
    tile_args ta = tile_for(g, step->rows, step->slots, step->layer, c->states, 1);
    tile_step_tokens(ta, step);
    ta.store = STORE_NONE;
    ta.layout = step_layout(step); /* the forward's (ssm_ticket.layout) */
    ta.pending = pending_of(c);
    if (step_in_one_launch(g, step)) {
        step_inputs in = step_inputs_for(g, step, c->conv, true);
        in.records = c->records; /* the set: pending_write_set in the kernel */
        in.slot_stride = records_slot_stride(c);
        in.layer_stride = records_layer_stride(c);
        in.layout = c->gpu->records;
        return launch_step(g, ta, in, step->stream, c->base.services);
    }
    /* Two launches: the prologue writes set 0, so the commits go first. */
    ssm_status st = flush_rows(c, step->rows, step->slots, step->layer, step->stream);
    prep_args pa = prep_for(g, step, c->conv, true);
    pa.records = c->records;
    pa.slot_stride = records_slot_stride(c);
    pa.layer_stride = records_layer_stride(c);
    pa.layout = c->gpu->records;
    if (st == SSM_OK)
        st = launch_prep(g, pa, step->stream, c->base.services);
    ta.tok = c->records;
    ta.tok_slot_stride = pa.slot_stride;
    ta.tok_layer_stride = pa.layer_stride;
    ta.tok_layout = pa.layout;
    ta.pending.codes = NULL; /* flushed; the tile job records set 0 for the commit */
    ta.after_prep = true;
    return st != SSM_OK ? st : launch_tile(g, ta, step->stream, c->base.services);
}

static ssm_status cuda_commit(void *instance, const ssm_commit_v1 *commit)
{
    compact_mode *c = (compact_mode *)instance;
    return launch_pending_commit(G(c), pending_of(c), commit, c->conv, c->base.services);
}

static ssm_status cuda_reset(void *instance, int32_t slot, void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    int32_t layers = c->base.params.model.layers;
    size_t codes = codes_per_slot(&c->base.params);
    ssm_status st = gpu_zero(compact_state(c, slot, 0), (size_t)layers * c->state_bytes, stream,
                             c->base.services);
    if (st == SSM_OK)
        st = gpu_zero(compact_conv(c, slot, 0), (size_t)layers * c->conv_bytes, stream,
                      c->base.services);
    if (st == SSM_OK)
        st = gpu_zero(c->gpu->codes + (size_t)slot * codes, codes, stream, c->base.services);
    return st != SSM_OK ? st : gpu_reset_arrivals(G(c), slot, stream, c->base.services);
}

static ssm_status cuda_export(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = SSM_OK;
    for (int32_t l = 0; l < c->base.params.model.layers && st == SSM_OK; l++)
        st = committed_into(c, slot, l, dst->state[l], stream);
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
        st = committed_into(c, src, l, compact_state(c, dst, l), stream);
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

/* The page moves copy states as they lie: the slots' pending commits go
 * in first (an import then replaces the state, or, refused, keeps it). */
static ssm_status flush_slots(compact_mode *c, int32_t count, const int32_t *slots, void *stream)
{
    ssm_status st = SSM_OK;
    for (int32_t k = 0; k < count && st == SSM_OK; k++)
        if (slots[k] >= 0 && slots[k] < G(c).capacity)
            st = flush_slot(c, slots[k], stream);
    return st;
}

/* The slots' pending commits into their states. */
static ssm_status cuda_materialize(void *instance, const int32_t *slots, int32_t count,
                                   void *stream)
{
    return flush_slots((compact_mode *)instance, count, slots, stream);
}

static ssm_status cuda_export_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = flush_slots(c, count, slots, stream);
    return st != SSM_OK ? st
                        : launch_page_moves<false>(page_store(c), count, slots, views, NULL,
                                                   stream, c->base.services);
}

static ssm_status cuda_import_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, const uint32_t *refused,
                                    void *stream)
{
    compact_mode *c = (compact_mode *)instance;
    ssm_status st = flush_slots(c, count, slots, stream);
    return st != SSM_OK ? st
                        : launch_page_moves<true>(page_store(c), count, slots, views, refused,
                                                  stream, c->base.services);
}

/* ---------------------------------------------------------------- tuning */

SSM_TUNE_CUDA_ENTRIES(compact, compact_mode)

/* ------------------------------------------------------------- the table */

/* The GPU methods above as the mode's table. */
extern "C" const ssm_mode_ops compact_cuda_ops = SSM_MODE_GPU_OPS(cuda_materialize);
