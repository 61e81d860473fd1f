/* The replay mode on the GPU (docs/modes.md). Per (slot, layer): the checkpoint,
 * a ring of L records with a start and a count n (both on the device, so a
 * step never asks the host), and the conv buffer every mode keeps.
 *
 * A step appends its T records after the history (prep.cuh) and computes the
 * outputs without writing the checkpoint: by re-running the history through
 * native's update (outputs = exact, tile_kernel) or through the replay
 * identity (identity.cuh). When n + T + T_max > L (ring_folds; the rule
 * n + 2T > L at full width) the step folds first, in its tile job (exact),
 * or for the identity in a fold job just before it (tile_kernel's
 * HISTORY_FOLD) or, if asked, in the identity kernel's own blocks
 * (identity_fold): it applies the n committed records and stores the
 * checkpoint, and the
 * commit then starts the ring after them. The decision is made on the
 * device from n, the same way in prep, step and commit, so it needs no host
 * sync and survives graph replay.
 *
 * A decode of at most [replay] fold_rows rows instead folds every step
 * (decode_folding): at small batch sizes a step costs latency, not bytes,
 * and that decode is native's own: one launch (step_kernel's HISTORY
 * variant: each tile applies the ring before the token, and the cell's
 * last block empties the ring) or, where native's decode takes two, its
 * prologue and a tile job that applies the ring. The choice is the host's,
 * from the row count alone. A larger decode through the identity can
 * commit itself (decode_identity, SSMSTATE_CUDA_REPLAY_COMMIT=self): its
 * prologue advances the window in place and the identity kernel moves the
 * cursor, so it takes no commit launch. */
#define SSM_STEP_HISTORY 1
#include "plugins/common/cuda/launch.cuh"
#include "kernels/cuda/pages.cuh"
#include "plugins/common/cuda/tune.cuh"

extern "C" {
#include "plugins/replay/replay.h"
}

using namespace ssm;

struct replay_gpu {
    gpu_common common;
    gpu_tune tune; /* tuning: candidates, and scratch while tuning */
    record_layout ring;  /* one replay record */
    int32_t *ring_start; /* [capacity][layers] */
    int32_t *fold_taken; /* [capacity][layers][2]: the (start, n) a folding decode took */
    int32_t *cell_arrivals; /* [capacity][layers]: the count of a decode that commits itself */
};

static gpu_common &G(replay_mode *r) { return r->gpu->common; }

extern "C" size_t replay_cuda_scratch_bytes(const ssm_mode_params_v2 *p)
{
    /* + start, taken (2) and the folding decode's count */
    return gpu_scratch_bytes(p) + 4 * (size_t)p->model.layers * sizeof(int32_t);
}

extern "C" size_t replay_cuda_shared_bytes(const ssm_mode_params_v2 *p)
{
    return gpu_shared_bytes(p);
}

extern "C" size_t replay_cuda_record_bytes(const ssm_mode_params_v2 *p)
{
    return (size_t)make_record_layout(p->model, ssm_dtype_size(p->activation_dtype), true).bytes;
}

/* The identity kernel stages a whole history's weights in shared memory:
 * refuse, at create, a history this device cannot hold that way, when
 * [replay] outputs asked for the identity; the default form falls back to
 * exact instead (replay.h, outputs_set). */
static ssm_status check_identity_fits(replay_mode *r)
{
    if (r->options.outputs == REPLAY_OUTPUTS_EXACT)
        return SSM_OK;
    int device = 0, limit = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
            cudaSuccess)
        return r->base.services->error(r->base.services->core, SSM_ERR_DEVICE,
                                  "cannot read the device's shared memory size");
    const ssm_model_dims &m = r->base.params.model;
    int32_t T = r->base.params.max_tokens;
    size_t need = identity_shared_bytes(r->options.history + T, T, make_dims(m),
                                        SSM_IDENTITY_THREADS);
    if (need <= (size_t)limit)
        return SSM_OK;
    if (!r->options.outputs_set) {
        r->options.outputs = REPLAY_OUTPUTS_EXACT;
        r->base.services->log(r->base.services->core, 2,
                         "replay: outputs = exact: the default identity with history %d needs "
                         "%zu bytes of shared memory per block, cuda:%d has %d",
                         (int)r->options.history, need, device, limit);
        return SSM_OK;
    }
    return r->base.services->error(r->base.services->core, SSM_ERR_UNSUPPORTED,
                              "outputs = identity with history %d needs %zu bytes of shared "
                              "memory per block; cuda:%d has %d: use a shorter history or "
                              "outputs = exact",
                              (int)r->options.history, need, device, limit);
}

extern "C" ssm_status replay_cuda_create(replay_mode *r)
{
    const ssm_services_v1 *s = r->base.services;
    r->gpu = (replay_gpu *)s->alloc_host(s->core, sizeof(replay_gpu));
    if (!r->gpu)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_status st = gpu_common_create(G(r), &r->base.params, s);
    /* Replay's verify is timed as an output-only job of the same kernel
     * variants; its identity kernel is not tuned (docs/tuning.md). */
    gpu_tune_init(r->gpu->tune, G(r), tune_profile{false, false});
    if (st != SSM_OK)
        return st;
    r->gpu->ring = make_record_layout(r->base.params.model, G(r).act_size, true);
    size_t cells = (size_t)r->base.params.capacity * r->base.params.model.layers;
    r->gpu->ring_start = (int32_t *)s->alloc(s->core, cells * sizeof(int32_t));
    r->gpu->fold_taken = (int32_t *)s->alloc(s->core, 2 * cells * sizeof(int32_t));
    r->gpu->cell_arrivals = (int32_t *)s->alloc(s->core, cells * sizeof(int32_t));
    if (!r->gpu->ring_start || !r->gpu->fold_taken || !r->gpu->cell_arrivals)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of device memory for ring cursors");
    if (cudaMemset(r->gpu->cell_arrivals, 0, cells * sizeof(int32_t)) != cudaSuccess)
        return s->error(s->core, SSM_ERR_DEVICE, "cannot clear the ring counters");
    return check_identity_fits(r);
}

extern "C" void replay_cuda_destroy(replay_mode *r)
{
    if (!r->gpu)
        return;
    gpu_tune_end(r->gpu->tune);
    gpu_common_destroy(G(r), r->base.services);
    r->base.services->release(r->base.services->core, r->gpu->ring_start);
    r->base.services->release(r->base.services->core, r->gpu->fold_taken);
    r->base.services->release(r->base.services->core, r->gpu->cell_arrivals);
    r->base.services->release_host(r->base.services->core, r->gpu);
    r->gpu = NULL;
}

/* Tile arguments over the checkpoints with the ring attached. */
static tile_args ring_tile(replay_mode *r, int32_t rows, const int32_t *slots, int32_t layer)
{
    gpu_common &g = G(r);
    tile_args a = tile_for(g, rows, slots, layer, r->checkpoints, 1);
    a.ring = r->records;
    a.ring_layer_stride = (int64_t)r->options.history * r->gpu->ring.bytes;
    a.ring_slot_stride = a.ring_layer_stride * g.layers;
    a.ring_layout = r->gpu->ring;
    a.ring_n = r->cursors;
    a.ring_start = r->gpu->ring_start;
    a.ring_mask = r->options.history - 1;
    a.history = r->options.history;
    return a;
}

/* Folds every layer of the rows into their checkpoints and empties the rings. */
static ssm_status fold_rows(replay_mode *r, int32_t rows, const int32_t *slots, void *stream)
{
    gpu_common &g = G(r);
    tile_args a = ring_tile(r, rows, slots, -1);
    a.history_mode = HISTORY_ALL;
    a.store = STORE_FINAL;
    ssm_status st = launch_tile(g, a, stream, r->base.services);
    if (st != SSM_OK || rows == 0)
        return st;
    ring_clear_kernel<<<dim3(1, rows, g.layers), 32, 0, (cudaStream_t)stream>>>(
        slots, g.capacity, g.layers, 0, r->cursors);
    return launch_status(r->base.services, "ring clear kernel");
}

/* Prefill: the rows' histories folded, then every mode's in-place prefill
 * on the checkpoint. */
static ssm_status cuda_prefill(void *instance, const ssm_step_v1 *step)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    if (step->rows > 65535) /* before the fold, so a refused call changes nothing */
        return r->base.services->error(r->base.services->core, SSM_ERR_INVALID_ARGUMENT,
                                  "a batch of %d rows: the CUDA kernels take at most 65535",
                                  step->rows);
    tile_args fold = ring_tile(r, step->rows, step->slots, step->layer);
    fold.history_mode = HISTORY_ALL;
    fold.store = STORE_FINAL;
    ssm_status st = launch_tile(g, fold, step->stream, r->base.services);
    if (st != SSM_OK)
        return st;
    ring_clear_kernel<<<dim3(1, step->rows, 1), 32, 0, (cudaStream_t)step->stream>>>(
        step->slots, g.capacity, g.layers, step->layer, r->cursors);
    st = launch_status(r->base.services, "ring clear kernel");
    return st != SSM_OK ? st
                        : launch_in_place(g, step, r->conv, r->checkpoints, 1, NULL,
                                          r->base.services);
}

/* A step's prologue: records appended to the ring after the history, and
 * the inputs staged in the conv buffer for the commit (stage) or the window
 * advanced in place (a decode that commits itself). */
static ssm_status ring_prep(replay_mode *r, const ssm_step_v1 *step, const tile_args &ta,
                            bool stage)
{
    gpu_common &g = G(r);
    prep_args pa = prep_for(g, step, r->conv, stage);
    pa.records = r->records;
    pa.slot_stride = ta.ring_slot_stride;
    pa.layer_stride = ta.ring_layer_stride;
    pa.layout = r->gpu->ring;
    pa.ring_n = r->cursors;
    pa.ring_start = r->gpu->ring_start;
    pa.ring_mask = ta.ring_mask;
    pa.history = ta.history;
    return launch_prep(g, pa, step->stream, r->base.services);
}

/* A step's prologue (ring_prep), and into ta the arguments of the kernel
 * that follows it: the step's tokens read from the ring after the history. */
static ssm_status ring_step(replay_mode *r, const ssm_step_v1 *step, bool stage, tile_args &ta)
{
    ta = ring_tile(r, step->rows, step->slots, step->layer);
    ssm_status st = ring_prep(r, step, ta, stage);
    if (st != SSM_OK)
        return st;
    tile_step_tokens(ta, step);
    ta.tok_in_ring = true;
    ta.after_prep = true;
    return SSM_OK;
}

static ssm_status cuda_verify(void *instance, const ssm_step_v1 *step)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    tile_args ta;
    ssm_status st = ring_step(r, step, true, ta);
    if (st != SSM_OK)
        return st;
    if (r->options.outputs == REPLAY_OUTPUTS_EXACT) {
        ta.history_mode = HISTORY_STEP;
        ta.store = STORE_NONE;
        return launch_tile(g, ta, step->stream, r->base.services);
    }
    return launch_identity(g, ta, step->stream, r->base.services);
}

/* A decode that folds: the ring's history and the token applied to the
 * checkpoint, the outputs written (native's bits) and the ring emptied, in
 * native's one launch where native's decode takes one (step_in_one_launch).
 * Otherwise native's prologue (the window advances in place, the token's
 * record goes to the token scratch), then one tile job does it. No commit. */
static ssm_status decode_folding(replay_mode *r, const ssm_step_v1 *step)
{
    gpu_common &g = G(r);
    if (step_in_one_launch(g, step)) {
        tile_args ta = ring_tile(r, step->rows, step->slots, step->layer);
        tile_step_tokens(ta, step);
        ta.layout = step_layout(step);
        ta.store = STORE_FINAL;
        step_inputs in = step_inputs_for(g, step, r->conv, false);
        in.cell_arrivals = r->gpu->cell_arrivals;
        return launch_step(g, ta, in, step->stream, r->base.services);
    }
    prep_args pa = prep_for(g, step, r->conv, false);
    pa.fold_taken = r->gpu->fold_taken;
    pa.fold_n = r->cursors;
    pa.fold_start = r->gpu->ring_start;
    pa.fold_mask = r->options.history - 1;
    ssm_status st = launch_prep(g, pa, step->stream, r->base.services);
    if (st != SSM_OK)
        return st;
    tile_args ta = ring_tile(r, step->rows, step->slots, step->layer);
    tile_step_tokens(ta, step);
    ta.history_mode = HISTORY_THROUGH;
    ta.fold_taken = r->gpu->fold_taken;
    ta.store = STORE_FINAL;
    ta.after_prep = true;
    return launch_tile(g, ta, step->stream, r->base.services);
}

/* A decode through the identity that commits itself: its prologue
 * advances the window in place, as native's does, and the identity
 * kernel's last block of each (slot, layer) moves the ring's cursor past
 * the token (identity_commit_arrive), so no commit launch follows. The
 * same window, cursor and records as a verify of one token and its commit. */
static ssm_status decode_identity(replay_mode *r, const ssm_step_v1 *step)
{
    gpu_common &g = G(r);
    tile_args ta;
    ssm_status st = ring_step(r, step, false, ta);
    if (st != SSM_OK)
        return st;
    ta.cell_arrivals = r->gpu->cell_arrivals;
    return launch_identity(g, ta, step->stream, r->base.services);
}

static ssm_status cuda_decode(void *instance, const ssm_step_v1 *step)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    if (step->rows <= r->options.fold_rows)
        return decode_folding(r, step);
    if (r->options.outputs != REPLAY_OUTPUTS_EXACT && g.replay_self_commit)
        return decode_identity(r, step);
    ssm_status st = cuda_verify(r, step);
    if (st != SSM_OK)
        return st;
    commit_args a = commit_for(g, step->rows, 1, step->slots, NULL, r->conv);
    a.ring_n = r->cursors;
    a.ring_start = r->gpu->ring_start;
    a.ring_mask = r->options.history - 1;
    a.history = r->options.history;
    return launch_commit(g, a, step->layer, 1, step->stream, r->base.services);
}

static ssm_status cuda_commit(void *instance, const ssm_commit_v1 *c)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    commit_args a = commit_for(g, c->rows, c->tokens, c->slots, c->accepted, r->conv);
    a.ring_n = r->cursors;
    a.ring_start = r->gpu->ring_start;
    a.ring_mask = r->options.history - 1;
    a.history = r->options.history;
    return launch_commit(g, a, 0, g.layers, c->stream, r->base.services);
}

static ssm_status cuda_reset(void *instance, int32_t slot, void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    size_t layers = (size_t)r->base.params.model.layers;
    size_t ring = (size_t)r->options.history * r->gpu->ring.bytes;
    const ssm_services_v1 *s = r->base.services;
    ssm_status st = gpu_zero(replay_checkpoint(r, slot, 0), layers * r->state_bytes, stream, s);
    if (st == SSM_OK)
        st = gpu_zero(replay_conv(r, slot, 0), layers * r->conv_bytes, stream, s);
    if (st == SSM_OK)
        st = gpu_zero(replay_records(r, slot, 0), layers * ring, stream, s);
    if (st == SSM_OK)
        st = gpu_zero(replay_cursor(r, slot, 0), layers * sizeof(int32_t), stream, s);
    if (st == SSM_OK)
        st = gpu_zero(r->gpu->ring_start + (size_t)slot * layers, layers * sizeof(int32_t), stream,
                      s);
    if (st == SSM_OK)
        st = gpu_zero(r->gpu->cell_arrivals + (size_t)slot * layers, layers * sizeof(int32_t),
                      stream, s);
    return st != SSM_OK ? st : gpu_reset_arrivals(G(r), slot, stream, s);
}

/* The materialized state of src's layers into dst[l]; src is not touched. */
static ssm_status fold_into(replay_mode *r, int32_t src, void *const *dst, void *stream)
{
    gpu_common &g = G(r);
    for (int32_t l = 0; l < g.layers; l++) {
        tile_args a = ring_tile(r, 1, g.slot_table + src, l);
        a.history_mode = HISTORY_ALL;
        a.store = STORE_DST;
        a.dst = dst[l];
        ssm_status st = launch_tile(g, a, stream, r->base.services);
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

static ssm_status cuda_export(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    ssm_status st = fold_into(r, slot, dst->state, stream);
    return st != SSM_OK ? st
                        : gpu_copy_windows(G(r), r->conv, slot, dst->conv, NULL, stream,
                                           r->base.services);
}

static ssm_status cuda_import(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                              void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    ssm_status st = cuda_reset(r, slot, stream);
    for (int32_t l = 0; l < r->base.params.model.layers && st == SSM_OK; l++)
        st = gpu_copy(replay_checkpoint(r, slot, l), src->state[l], r->state_bytes, stream,
                      r->base.services);
    return st != SSM_OK ? st
                        : gpu_copy_windows(G(r), r->conv, slot, NULL, src->conv, stream,
                                           r->base.services);
}

static ssm_status cuda_copy(void *instance, int32_t src, int32_t dst, void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    ssm_status st = cuda_reset(r, dst, stream);
    size_t window = (size_t)(g.d.W - 1) * g.d.D * g.act_size;
    for (int32_t l = 0; l < g.layers && st == SSM_OK; l++) {
        tile_args a = ring_tile(r, 1, g.slot_table + src, l);
        a.history_mode = HISTORY_ALL;
        a.store = STORE_DST;
        a.dst = replay_checkpoint(r, dst, l);
        st = launch_tile(g, a, stream, r->base.services);
        if (st == SSM_OK && window > 0)
            st = gpu_copy(replay_conv(r, dst, l), replay_conv(r, src, l), window, stream,
                          r->base.services);
    }
    return st;
}

static ssm_status cuda_materialize(void *instance, const int32_t *slots, int32_t count,
                                   void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    for (int32_t i = 0; i < count; i++) {
        if (slots[i] < 0)
            continue;
        ssm_status st = fold_rows(r, 1, g.slot_table + slots[i], stream);
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

/* The slots as the page moves see them: the checkpoint; an import zeroes
 * the window's tail, the ring, its cursor and its start, as
 * replay_cuda_reset and then replay_cuda_import leave a slot. */
static move_store page_store(replay_mode *r)
{
    gpu_common &g = G(r);
    move_store s = {};
    s.d = g.d;
    s.layers = g.layers;
    s.act_size = (int32_t)g.act_size;
    s.state_size = (int32_t)g.state_size;
    s.state = r->checkpoints;
    s.snapshots = 1;
    s.conv = r->conv;
    s.conv_rows = g.conv_rows;
    s.zero[0] = r->records;
    s.zero_bytes[0] = (int64_t)g.layers * r->options.history * r->gpu->ring.bytes;
    s.zero[1] = (uint8_t *)r->cursors;
    s.zero_bytes[1] = (int64_t)g.layers * (int64_t)sizeof(int32_t);
    s.zero[2] = (uint8_t *)r->gpu->ring_start;
    s.zero_bytes[2] = (int64_t)g.layers * (int64_t)sizeof(int32_t);
    return s;
}

/* The committed history is applied to a copy of each checkpoint on its way
 * into the page (fold_into's bits), never to the slot. */
static ssm_status cuda_export_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    gpu_common &g = G(r);
    fold_args a = {};
    a.s = page_store(r);
    a.views = views;
    a.ring = r->records;
    a.ring_layer_stride = (int64_t)r->options.history * r->gpu->ring.bytes;
    a.ring_slot_stride = a.ring_layer_stride * g.layers;
    a.ring_layout = r->gpu->ring;
    a.ring_n = r->cursors;
    a.ring_start = r->gpu->ring_start;
    a.ring_mask = r->options.history - 1;
    return launch_page_folds(a, count, slots, g.state_dtype, g.act_dtype, stream, r->base.services);
}

static ssm_status cuda_import_slots(void *instance, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, const uint32_t *refused,
                                    void *stream)
{
    replay_mode *r = (replay_mode *)instance;
    return launch_page_moves<true>(page_store(r), count, slots, views, refused, stream,
                                   r->base.services);
}

/* ---------------------------------------------------------------- tuning */

SSM_TUNE_CUDA_ENTRIES(replay, replay_mode)

/* ------------------------------------------------------------- the table */

/* The GPU methods above as the mode's table (replay's alone materializes). */
extern "C" const ssm_mode_ops replay_cuda_ops = SSM_MODE_GPU_OPS(cuda_materialize);
