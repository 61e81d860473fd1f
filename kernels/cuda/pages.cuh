/* A mode's batched page moves on the GPU (plugin ABI export_slots /
 * import_slots, docs/pages.md): every slot's window and state between the
 * mode's storage and page payloads in device memory, in one launch per
 * SSM_MOVE_SLOTS pages, the slots travelling by value in the launch's
 * parameters and each page's place read from the core's views
 * (ssm_page_view_v1, indexed by slot).
 *
 * page_move_kernel copies bytes (8 at a time: every offset of a page and of
 * a mode's storage is a multiple of 8): export reads the slot's window
 * rows [0, W-1) and its current state into the page; import, unless the
 * batch's refusal word is set, writes them into the slot and zeroes what
 * the mode's reset zeroes (the window's tail rows, the other snapshots,
 * per-slot regions such as a replay ring and its cursors), so the slot ends
 * exactly as a reset followed by the one-slot import leaves it.
 * page_fold_kernel is replay's export: the same window blocks beside tile
 * blocks that apply the committed history to a copy of the checkpoint with
 * tile.cuh's own update (the bits of tile_kernel's HISTORY_ALL fold) and
 * store it into the page; the slot is never written. */
#ifndef SSM_KERNELS_CUDA_PAGES_CUH
#define SSM_KERNELS_CUDA_PAGES_CUH

#include "kernels/cuda/tile.cuh"
#include "ssmstate/plugin.h"

namespace ssm {

#define SSM_MOVE_SLOTS 64    /* pages per launch */
#define SSM_MOVE_THREADS 256 /* threads of a page_move_kernel block */
#define SSM_MOVE_ZEROS 3     /* per-slot regions an import zeroes */

struct move_slots {
    int32_t count;
    int32_t slot[SSM_MOVE_SLOTS];
};

/* A mode's slot storage as the moves see it. */
struct move_store {
    dims d;
    int32_t layers;
    int32_t act_size, state_size;
    uint8_t *state;         /* [capacity][layers][snapshots][HV][V][K] state dtype */
    int32_t snapshots;
    const int32_t *current; /* export: the snapshot to read, per slot (native); NULL: 0 */
    uint8_t *conv;          /* [capacity][layers][conv_rows][D] activation dtype */
    int32_t conv_rows;
    /* import: zero[i] + slot * zero_bytes[i], zero_bytes[i] bytes (a
     * multiple of 4), is zeroed; NULL: none */
    uint8_t *zero[SSM_MOVE_ZEROS];
    int64_t zero_bytes[SSM_MOVE_ZEROS];
};

/* One layer of one slot's state, [HV][V][K]. */
__device__ __forceinline__ uint8_t *move_state(const move_store &s, int32_t slot, int32_t layer,
                                               int32_t snapshot)
{
    int64_t bytes = (int64_t)s.d.HV * s.d.V * s.d.K * s.state_size;
    return s.state + (((int64_t)slot * s.layers + layer) * s.snapshots + snapshot) * bytes;
}

__device__ __forceinline__ uint8_t *move_conv(const move_store &s, int32_t slot, int32_t layer)
{
    return s.conv + ((int64_t)slot * s.layers + layer) * s.conv_rows * s.d.D * s.act_size;
}

/* Window rows [0, W-1) of (slot, layer) and page layer `page`, 8 bytes per
 * step from unit `first` by `step`: into the page (export) or the slot. A
 * unit never straddles q, k and v (their borders are multiples of 32
 * channels, a unit is 2 or 4 channels). */
template <bool IMPORT>
__device__ void move_window(const move_store &s, const ssm_page_view_v1 &view, uint8_t *page,
                            uint8_t *conv, int64_t first, int64_t step)
{
    const dims &d = s.d;
    const int64_t row_units = (int64_t)d.D * s.act_size / 8, per_unit = 8 / s.act_size;
    const int64_t hk = (int64_t)d.H * d.K;
    for (int64_t u = first; u < (int64_t)(d.W - 1) * row_units; u += step) {
        int64_t r = u / row_units, c = u % row_units * per_unit;
        int p = c < hk ? 0 : c < 2 * hk ? 1 : 2;
        int64_t at = view.part_at[p] + c - (int64_t)p * hk;
        uint64_t *in_page = (uint64_t *)(page + (r * view.row_channels + at) * s.act_size);
        uint64_t *in_slot = (uint64_t *)(conv + (r * d.D + c) * s.act_size);
        if (IMPORT)
            *in_slot = *in_page;
        else
            *in_page = *in_slot;
    }
}

__device__ inline void move_zero(uint8_t *p, int64_t units8, int64_t first, int64_t step)
{
    for (int64_t u = first; u < units8; u += step)
        ((uint64_t *)p)[u] = 0;
}

struct move_args {
    move_store s;
    move_slots slots;
    const ssm_page_view_v1 *views;
    const uint32_t *refused; /* import: load nothing when it holds a nonzero word */
    int32_t blocks_per_job;  /* a job is (page, layer) */
};

/* grid (pages * layers * blocks_per_job), SSM_MOVE_THREADS threads. */
template <bool IMPORT> __global__ void __launch_bounds__(SSM_MOVE_THREADS) page_move_kernel(move_args a)
{
    if (IMPORT && a.refused && *a.refused)
        return;
    const move_store &s = a.s;
    int64_t job = blockIdx.x / a.blocks_per_job;
    int64_t first = (int64_t)(blockIdx.x % a.blocks_per_job) * blockDim.x + threadIdx.x;
    int64_t step = (int64_t)a.blocks_per_job * blockDim.x;
    int32_t k = (int32_t)(job / s.layers), layer = (int32_t)(job % s.layers);
    int32_t slot = a.slots.slot[k];
    ssm_page_view_v1 view = a.views[slot];
    uint8_t *page = view.payload + (uint64_t)layer * view.layer_bytes;
    uint8_t *conv = move_conv(s, slot, layer);
    move_window<IMPORT>(s, view, page, conv, first, step);
    int64_t state_units = (int64_t)s.d.HV * s.d.V * s.d.K * s.state_size / 8;
    int32_t snapshot = !IMPORT && s.current ? s.current[slot] : 0;
    uint64_t *in_slot = (uint64_t *)move_state(s, slot, layer, snapshot);
    uint64_t *in_page = (uint64_t *)(page + view.state_at);
    for (int64_t u = first; u < state_units; u += step) {
        if (IMPORT)
            in_slot[u] = in_page[u];
        else
            in_page[u] = in_slot[u];
    }
    if (!IMPORT)
        return;
    /* what the mode's reset zeroes and the page does not fill */
    int64_t row_units = (int64_t)s.d.D * s.act_size / 8;
    move_zero(conv + (int64_t)(s.d.W - 1) * row_units * 8,
              (int64_t)(s.conv_rows - (s.d.W - 1)) * row_units, first, step);
    for (int32_t other = 1; other < s.snapshots; other++)
        move_zero(move_state(s, slot, layer, other), state_units, first, step);
    /* the per-slot regions, a share per layer's job */
    for (int i = 0; i < SSM_MOVE_ZEROS; i++) {
        if (!s.zero[i])
            continue;
        int64_t words = s.zero_bytes[i] / 4, share = (words + s.layers - 1) / s.layers;
        int64_t end = (int64_t)(layer + 1) * share < words ? (int64_t)(layer + 1) * share : words;
        uint32_t *region = (uint32_t *)(s.zero[i] + (int64_t)slot * s.zero_bytes[i]);
        for (int64_t u = (int64_t)layer * share + first; u < end; u += step)
            region[u] = 0;
    }
}

/* The largest part of a job, in 8-byte units: blocks enough for ~8 units a thread. */
inline int32_t move_blocks_per_job(const move_store &s, bool import)
{
    int64_t row_units = (int64_t)s.d.D * s.act_size / 8;
    int64_t units = (int64_t)s.d.HV * s.d.V * s.d.K * s.state_size / 8;
    if (import)
        units *= s.snapshots;
    int64_t window = (int64_t)(import ? s.conv_rows : s.d.W - 1) * row_units;
    if (window > units)
        units = window;
    int64_t blocks = (units + 8 * SSM_MOVE_THREADS - 1) / (8 * SSM_MOVE_THREADS);
    return blocks < 1 ? 1 : blocks > 1024 ? 1024 : (int32_t)blocks;
}

/* Export (refused NULL, IMPORT false) or import of `count` slots: one
 * launch per SSM_MOVE_SLOTS of them. */
template <bool IMPORT>
inline ssm_status launch_page_moves(const move_store &s, int32_t count, const int32_t *slots,
                                    const ssm_page_view_v1 *views, const uint32_t *refused,
                                    void *stream, const ssm_services_v1 *svc)
{
    move_args a = {};
    a.s = s;
    a.views = views;
    a.refused = refused;
    a.blocks_per_job = move_blocks_per_job(s, IMPORT);
    for (int32_t done = 0; done < count; done += SSM_MOVE_SLOTS) {
        a.slots.count = count - done < SSM_MOVE_SLOTS ? count - done : SSM_MOVE_SLOTS;
        for (int32_t k = 0; k < a.slots.count; k++)
            a.slots.slot[k] = slots[done + k];
        int64_t blocks = (int64_t)a.slots.count * s.layers * a.blocks_per_job;
        if (blocks > 0x7fffffff)
            return svc->error(svc->core, SSM_ERR_INVALID_ARGUMENT,
                              "%d pages of %d layers are more than one launch takes",
                              (int)a.slots.count, (int)s.layers);
        page_move_kernel<IMPORT>
            <<<(unsigned)blocks, SSM_MOVE_THREADS, 0, (cudaStream_t)stream>>>(a);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return svc->error(svc->core, SSM_ERR_DEVICE, "page %s kernel: %s",
                              IMPORT ? "import" : "export", cudaGetErrorString(e));
    }
    return SSM_OK;
}

/* ------------------------------------------------------------ replay's fold */

/* This lane's E channels of a value row, stored 8 bytes at a time (a page's
 * state is only 8-byte aligned): the bits store_lane writes. */
template <int E>
__device__ __forceinline__ void store_lane_8(float *row, int32_t sub, const float (&s)[E])
{
#pragma unroll
    for (int c = 0; c < E / 4; c++) {
        float *p = row + c * 32 + sub * 4;
        *(float2 *)p = make_float2(s[c * 4], s[c * 4 + 1]);
        *(float2 *)(p + 2) = make_float2(s[c * 4 + 2], s[c * 4 + 3]);
    }
}

template <int E>
__device__ __forceinline__ void store_lane_8(bf16 *row, int32_t sub, const float (&s)[E])
{
    store_lane<E>(row, sub, s); /* four bf16: 8 bytes */
}

struct fold_args {
    move_store s;
    move_slots slots;
    const ssm_page_view_v1 *views;
    const uint8_t *ring; /* [capacity][layers][history] records */
    int64_t ring_slot_stride, ring_layer_stride;
    record_layout ring_layout;
    const int32_t *ring_n, *ring_start; /* [capacity][layers] */
    int32_t ring_mask;
    int32_t window_x;      /* grid columns of window blocks (all of grid.y) */
    int32_t window_blocks; /* window blocks per job */
};

/* grid (window_x + jobs * tiles_per_head(V, SSM_TILE_RPL), HV), jobs =
 * pages * layers, 32 * SSM_TILE_WARPS threads. */
template <int E, bool KDA, class State, class Act>
__global__ void __launch_bounds__(32 * SSM_TILE_WARPS) page_fold_kernel(fold_args a)
{
    constexpr int RPL = SSM_TILE_RPL;
    const move_store &s = a.s;
    const dims &d = s.d;
    if ((int32_t)blockIdx.x < a.window_x) {
        int64_t block = (int64_t)blockIdx.x * gridDim.y + blockIdx.y;
        int64_t job = block / a.window_blocks;
        if (job >= (int64_t)a.slots.count * s.layers)
            return;
        int32_t k = (int32_t)(job / s.layers), layer = (int32_t)(job % s.layers);
        int32_t slot = a.slots.slot[k];
        ssm_page_view_v1 view = a.views[slot];
        int64_t first = (block % a.window_blocks) * blockDim.x + threadIdx.x;
        move_window<false>(s, view, view.payload + (uint64_t)layer * view.layer_bytes,
                           move_conv(s, slot, layer), first, (int64_t)a.window_blocks * blockDim.x);
        return;
    }
    int32_t tiles = tiles_per_head(d.V, RPL);
    int32_t x = (int32_t)blockIdx.x - a.window_x, h = (int32_t)blockIdx.y;
    int32_t job = x / tiles, tile = x % tiles;
    int32_t k = job / s.layers, layer = job % s.layers;
    int32_t slot = a.slots.slot[k];
    int64_t cell = (int64_t)slot * s.layers + layer;
    int64_t head = (int64_t)d.V * d.K;
    const State *source = (const State *)move_state(s, slot, layer, 0) + h * head;
    head_tile<E, RPL, State> t;
    tile_place(t, tile);
    tile_load(t, d, source);
    const uint8_t *ring = a.ring + (int64_t)slot * a.ring_slot_stride +
                          (int64_t)layer * a.ring_layer_stride;
    apply_records<E, RPL, KDA, State, Act, false>(t, d, ring, a.ring_layout, a.ring_start[cell],
                                                  a.ring_n[cell], a.ring_mask, h);
    ssm_page_view_v1 view = a.views[slot];
    State *into = (State *)(view.payload + (uint64_t)layer * view.layer_bytes + view.state_at) +
                  h * head;
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        int32_t row = tile_row(t, i);
        if (row < d.V)
            store_lane_8<E>(into + (int64_t)row * d.K, t.sub, t.s[i]);
    }
}

template <int E, class State, class Act>
inline void launch_fold_kind(const fold_args &a, dim3 grid, cudaStream_t st)
{
    if (a.s.d.kda)
        page_fold_kernel<E, true, State, Act><<<grid, 32 * SSM_TILE_WARPS, 0, st>>>(a);
    else
        page_fold_kernel<E, false, State, Act><<<grid, 32 * SSM_TILE_WARPS, 0, st>>>(a);
}

template <class State, class Act>
inline void launch_fold_typed(const fold_args &a, dim3 grid, cudaStream_t st)
{
    switch (a.s.d.K) {
    case 32: launch_fold_kind<4, State, Act>(a, grid, st); break;
    case 64: launch_fold_kind<8, State, Act>(a, grid, st); break;
    default: launch_fold_kind<16, State, Act>(a, grid, st); break;
    }
}

/* Replay's export of `count` slots (fold_args' store, ring and views set by
 * the caller): one launch per SSM_MOVE_SLOTS pages. */
inline ssm_status launch_page_folds(fold_args a, int32_t count, const int32_t *slots,
                                    ssm_dtype state_dtype, ssm_dtype act_dtype, void *stream,
                                    const ssm_services_v1 *svc)
{
    const dims &d = a.s.d;
    int64_t row_units = (int64_t)d.D * a.s.act_size / 8;
    int64_t window_units = (int64_t)(d.W - 1) * row_units;
    a.window_blocks = (int32_t)((window_units + 8 * 32 * SSM_TILE_WARPS - 1) /
                                (8 * 32 * SSM_TILE_WARPS));
    if (a.window_blocks < 1)
        a.window_blocks = 1;
    cudaStream_t st = (cudaStream_t)stream;
    for (int32_t done = 0; done < count; done += SSM_MOVE_SLOTS) {
        a.slots.count = count - done < SSM_MOVE_SLOTS ? count - done : SSM_MOVE_SLOTS;
        for (int32_t k = 0; k < a.slots.count; k++)
            a.slots.slot[k] = slots[done + k];
        int64_t jobs = (int64_t)a.slots.count * a.s.layers;
        int64_t window = window_units > 0 ? jobs * a.window_blocks : 0;
        a.window_x = (int32_t)((window + d.HV - 1) / d.HV);
        int64_t x = a.window_x + jobs * tiles_per_head(d.V, SSM_TILE_RPL);
        if (x > 0x7fffffff)
            return svc->error(svc->core, SSM_ERR_INVALID_ARGUMENT,
                              "%d pages of %d layers are more than one launch takes",
                              (int)a.slots.count, (int)a.s.layers);
        dim3 grid((unsigned)x, (unsigned)d.HV);
        bool bf16_state = state_dtype == SSM_DTYPE_BF16, bf16_act = act_dtype == SSM_DTYPE_BF16;
        if (bf16_state && bf16_act)
            launch_fold_typed<bf16, bf16>(a, grid, st);
        else if (bf16_state)
            launch_fold_typed<bf16, float>(a, grid, st);
        else if (bf16_act)
            launch_fold_typed<float, bf16>(a, grid, st);
        else
            launch_fold_typed<float, float>(a, grid, st);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess)
            return svc->error(svc->core, SSM_ERR_DEVICE, "page fold kernel: %s",
                              cudaGetErrorString(e));
    }
    return SSM_OK;
}

} /* namespace ssm */
#endif
