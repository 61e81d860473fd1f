/* Compact's commit on the GPU when its records are applied later
 * (pending_args in tile.cuh, docs/modes.md): one launch moves every
 * layer's conv window, as the commit always has (window_block), and marks
 * each tile of each (row, layer) with the records the next step applies
 * first. It reads no state and writes none: a round of compact moves the
 * state twice (the verify reads it, applies the commit before it and
 * writes it back), not three times. A row whose accepted length is outside
 * [1, T] is flagged SSM_FLAG_BAD_ACCEPTED and left as the verify found it
 * (nothing marked, the window unmoved). */
#ifndef SSM_KERNELS_CUDA_PENDING_CUH
#define SSM_KERNELS_CUDA_PENDING_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

/* grid (a.window_x + rows * layers), 32 * SSM_TILE_WARPS threads: the
 * window blocks of window_block (blockIdx.y 0 of a one-row grid), then one
 * block per (row, layer) writing its HV x tiles codes. a.layer is -1 and
 * a.accepted, a.tokens, a.conv, a.pending.codes and .written are set. */
template <class Act> __global__ void __launch_bounds__(32 * SSM_TILE_WARPS) pending_commit_kernel(tile_args a)
{
    if ((int32_t)blockIdx.x < a.window_x) {
        window_block<Act>(a);
        return;
    }
    int32_t job = (int32_t)blockIdx.x - a.window_x;
    int32_t r = job / a.layers, layer = job % a.layers;
    int32_t slot = a.slots[r];
    bool reporter = layer == 0 && threadIdx.x == 0;
    if (!slot_is_live(slot, a.capacity, a.flags, reporter))
        return;
    int32_t accepted = a.accepted[r];
    if (accepted < 1 || accepted > a.tokens) {
        if (reporter)
            raise_flag(a.flags, a.capacity, slot, SSM_FLAG_BAD_ACCEPTED);
        return;
    }
    int64_t cell = (int64_t)slot * a.layers + layer;
    uint8_t code = pending_code(accepted, a.pending.written[cell], a.layout);
    int32_t codes = a.d.HV * tiles_per_head(a.d.V, SSM_TILE_RPL);
    uint8_t *at = a.pending.codes + cell * codes;
    for (int32_t i = (int32_t)threadIdx.x; i < codes; i += (int32_t)blockDim.x)
        at[i] = code;
}

} /* namespace ssm */
#endif
