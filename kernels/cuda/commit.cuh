/* The commit of a forward on the GPU, every layer in one launch: the conv
 * buffer keeps the first a staged inputs (its window becomes the last W-1
 * rows of [window; staged[0..a)], as plugins/common/conv_buffer.h does on the CPU),
 * and the mode's per-slot index moves: native's current snapshot becomes
 * a-1, replay's cursor advances by a (after a fold, which the step did when
 * ring_folds() said so, the ring restarts after the folded records). Accepted lengths
 * live in device memory and are checked here: a row outside [1, T] is
 * skipped and its slot flagged SSM_FLAG_BAD_ACCEPTED (native's slot is then
 * undefined until reset; compact's and replay's stay at their state before
 * the verify). accepted == NULL
 * means 1 for every row (a decode's implicit commit). */
#ifndef SSM_KERNELS_CUDA_COMMIT_CUH
#define SSM_KERNELS_CUDA_COMMIT_CUH

#include "kernels/cuda/prep.cuh"

namespace ssm {

struct commit_args {
    dims d;
    int32_t rows, layers, layer_first, capacity, tokens, max_tokens;
    const int32_t *slots;
    const int32_t *accepted;
    void *conv;
    int32_t conv_rows;
    int32_t *current;              /* native; NULL otherwise */
    int32_t *ring_n, *ring_start;  /* replay; NULL otherwise */
    int32_t ring_mask, history;
    uint32_t *flags;
};

/* grid (ceil(D / 4 / SSM_PREP_THREADS), rows, layers committed),
 * SSM_PREP_THREADS threads; each thread moves four channels. WIDTH >= the
 * conv width: the kept rows are all loaded before any is stored, so their
 * latencies overlap and no row is overwritten before it is read. */
template <int WIDTH, class Act>
__global__ void __launch_bounds__(SSM_PREP_THREADS) commit_kernel(commit_args a)
{
    typedef typename conv4<Act>::bits bits;
    int32_t r = blockIdx.y;
    int32_t layer = a.layer_first + blockIdx.z;
    int32_t slot = a.slots[r];
    int32_t e = blockIdx.x * blockDim.x + threadIdx.x, c = 4 * e;
    bool reporter = e == 0 && blockIdx.z == 0;
    if (!slot_is_live(slot, a.capacity, a.flags, reporter))
        return;
    int32_t accepted = a.accepted ? a.accepted[r] : 1;
    if (accepted < 1 || accepted > a.tokens) {
        if (reporter)
            raise_flag(a.flags, a.capacity, slot, SSM_FLAG_BAD_ACCEPTED);
        /* A replay step that folded has already stored the checkpoint: drop
         * the folded records, so the slot stays at its state before the
         * verify instead of applying them twice later. */
        if (e == 0 && a.ring_n) {
            int64_t cell = (int64_t)slot * a.layers + layer;
            int32_t used = a.ring_n[cell];
            if (ring_folds(used, a.tokens, a.max_tokens, a.history)) {
                a.ring_start[cell] = (a.ring_start[cell] + used) & a.ring_mask;
                a.ring_n[cell] = 0;
            }
        }
        return;
    }
    if (c < a.d.D) {
        /* The window becomes rows [accepted, accepted + W - 1) of the buffer. */
        Act *buffer = (Act *)a.conv + ((int64_t)slot * a.layers + layer) * a.conv_rows * a.d.D;
        bits kept[WIDTH];
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            if (i < a.d.W - 1)
                kept[i] = *(const bits *)(buffer + (int64_t)(accepted + i) * a.d.D + c);
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            if (i < a.d.W - 1)
                *(bits *)(buffer + (int64_t)i * a.d.D + c) = kept[i];
    }
    if (e != 0)
        return;
    if (a.current && blockIdx.z == 0)
        a.current[slot] = accepted - 1;
    if (a.ring_n) {
        int64_t cell = (int64_t)slot * a.layers + layer;
        int32_t used = a.ring_n[cell];
        if (ring_folds(used, a.tokens, a.max_tokens, a.history)) {
            a.ring_start[cell] = (a.ring_start[cell] + used) & a.ring_mask;
            a.ring_n[cell] = accepted;
        } else {
            a.ring_n[cell] = used + accepted;
        }
    }
}

/* Replay after a fold outside a step (materialize, prefill): the ring is
 * empty. grid (1, rows, layers), 32 threads. */
__global__ void ring_clear_kernel(const int32_t *slots, int32_t capacity, int32_t layers,
                                  int32_t layer_first, int32_t *ring_n)
{
    int32_t slot = slots[blockIdx.y];
    if (threadIdx.x != 0 || slot < 0 || slot >= capacity)
        return;
    ring_n[(int64_t)slot * layers + layer_first + blockIdx.z] = 0;
}

} /* namespace ssm */
#endif
