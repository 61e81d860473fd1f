/* The one-token update of the recurrence on the GPU, and the kernel every
 * mode runs it through.
 *
 * Layout. SSM_ROW_LANES (8) lanes share one value row: lane `sub` of the
 * row holds the E = K / 8 key channels lane_channel(sub, j), chunks of four
 * consecutive channels 32 apart, so each load of a chunk is 8 x 16 bytes
 * of one row (fp32) and a warp's load covers four rows. A warp runs four
 * rows at once, RPL times over (rows per lane); a block is SSM_TILE_WARPS
 * warps, a tile of tile_rows(RPL) rows of one value head of one (slot,
 * layer). The dot products of a row accumulate in each lane (two fmaf
 * chains, even and odd elements) and then over the row's 8 lanes by a
 * butterfly (group_sum), so a row costs three shuffles per sum and the
 * order of every sum is fixed by the row layout alone: RPL and the tile
 * size change how rows are spread over warps, never a bit of a result.
 *
 * Per token: decay, recall, delta, output from the fp32 state, then
 * rounding to the state dtype. The products accumulate through fmaf: one
 * rounding per term (the CPU reference rounds twice; the numerics contract compares CPU
 * and GPU by tolerance for that reason). Native's verify and decode,
 * compact's verify and commit, replay's folds and its exact outputs all
 * call tile_token() with this layout, so they produce the same bits.
 *
 * tile_kernel is one kernel for every such job, told by tile_args where the
 * state comes from, which records are applied first (a replay history),
 * which tokens follow, and where state and outputs go. */
#ifndef SSM_KERNELS_CUDA_TILE_CUH
#define SSM_KERNELS_CUDA_TILE_CUH

#include "kernels/cuda/prep.cuh"

namespace ssm {

#define SSM_TILE_WARPS 4
#define SSM_TILE_RPL 2 /* rows per lane of tile_kernel */
#define SSM_ROW_LANES 8                      /* lanes sharing one value row */
#define SSM_WARP_ROWS (32 / SSM_ROW_LANES)   /* rows a warp runs at once */

/* Rows of one tile (one block) at RPL rows per lane. */
__host__ __device__ constexpr int32_t tile_rows(int32_t rpl)
{
    return SSM_TILE_WARPS * SSM_WARP_ROWS * rpl;
}

/* Key channel of element j of the lane `sub` of its row. */
__device__ __forceinline__ int32_t lane_channel(int32_t sub, int32_t j)
{
    return (j >> 2) * 32 + sub * 4 + (j & 3);
}

/* Sum over the SSM_ROW_LANES lanes of a row; each of them gets the same bits.
 * `reversed` is the test-only update layout 1 (docs/tuning.md): the same
 * butterfly with its stages in the other order (1, 2, 4 lanes apart instead
 * of 4, 2, 1), another association of the eight partial sums, so other
 * rounding. Every lane still gets the same bits. */
__device__ __forceinline__ float group_sum(float v, bool reversed = false)
{
    const int first = reversed ? 1 : SSM_ROW_LANES / 2, last = reversed ? SSM_ROW_LANES / 2 : 1;
    v += __shfl_xor_sync(0xffffffffu, v, first);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    v += __shfl_xor_sync(0xffffffffu, v, last);
    return v;
}
static_assert(SSM_ROW_LANES == 8, "group_sum is written for rows of 8 lanes");

/* This lane's E channels of a length-K vector (a state row, k, q, a decay). */
template <int E, class T>
__device__ __forceinline__ void load_lane(const T *row, int32_t sub, float (&s)[E])
{
#pragma unroll
    for (int c = 0; c < E / 4; c++)
        load4(row + c * 32 + sub * 4, s + c * 4);
}

template <int E, class T>
__device__ __forceinline__ void store_lane(T *row, int32_t sub, const float (&s)[E])
{
#pragma unroll
    for (int c = 0; c < E / 4; c++)
        store4(row + c * 32 + sub * 4, s + c * 4);
}

/* ------------------------------------------------------------- the tile */

template <int E, int RPL, class State> struct head_tile {
    float s[RPL][E];
    int32_t row0; /* this lane's first value row; the others follow SSM_WARP_ROWS apart */
    int32_t sub;  /* this lane's place in its row */
};

/* The tile of this thread: rows of tile `tile` of a head, RPL per lane. */
template <int E, int RPL, class State>
__device__ __forceinline__ void tile_place(head_tile<E, RPL, State> &t, int32_t tile)
{
    int32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    t.sub = lane % SSM_ROW_LANES;
    t.row0 = tile * tile_rows(RPL) + warp * SSM_WARP_ROWS * RPL + lane / SSM_ROW_LANES;
}

template <int E, int RPL, class State>
__device__ __forceinline__ int32_t tile_row(const head_tile<E, RPL, State> &t, int i)
{
    return t.row0 + i * SSM_WARP_ROWS;
}

/* head points at [V][K] of one value head; rows past V read as zero. */
template <int E, int RPL, class State>
__device__ __forceinline__ void tile_load(head_tile<E, RPL, State> &t, const dims &d,
                                          const State *head)
{
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        int32_t row = tile_row(t, i);
        if (row < d.V)
            load_lane<E>(head + (int64_t)row * d.K, t.sub, t.s[i]);
        else
#pragma unroll
            for (int j = 0; j < E; j++)
                t.s[i][j] = 0.0f;
    }
}

template <int E, int RPL, class State>
__device__ __forceinline__ void tile_store(const head_tile<E, RPL, State> &t, const dims &d,
                                           State *head)
{
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        int32_t row = tile_row(t, i);
        if (row < d.V)
            store_lane<E>(head + (int64_t)row * d.K, t.sub, t.s[i]);
    }
}

/* Staging of a tile's state through shared memory (cp.async): a block
 * asks for the next tile while it updates the current one, and the bytes in
 * flight hold no registers. Each thread stages and reads back only its own
 * chunks, so a wait_group is all the synchronization it needs; chunk m of
 * thread i sits at (m * threads + i) * 4 elements, so a warp's reads of one
 * chunk are 32 consecutive pieces (no bank conflicts). */
#define SSM_TILE_STAGES 2

template <int E, int RPL, class State> struct __align__(16) tile_stage { /* cp.async 16 */
    State chunk[RPL * E / 4][32 * SSM_TILE_WARPS][4];
};

/* Asks for tile `tile` of head into stage (this thread's chunks). */
template <int E, int RPL, class State>
__device__ __forceinline__ void tile_stage_async(tile_stage<E, RPL, State> &stage,
                                                 const dims &d, const State *head, int32_t tile)
{
    head_tile<E, RPL, State> t;
    tile_place(t, tile);
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        int32_t row = tile_row(t, i);
        bool valid = row < d.V;
        const State *source = head + (valid ? (int64_t)row * d.K : 0);
#pragma unroll
        for (int c = 0; c < E / 4; c++)
            copy_chunk_async(stage.chunk[i * (E / 4) + c][threadIdx.x],
                             source + c * 32 + t.sub * 4, valid);
    }
}

/* The staged tile into t's registers (after copy_async_wait). */
template <int E, int RPL, class State>
__device__ __forceinline__ void tile_from_stage(head_tile<E, RPL, State> &t,
                                                const tile_stage<E, RPL, State> &stage)
{
#pragma unroll
    for (int i = 0; i < RPL; i++)
#pragma unroll
        for (int c = 0; c < E / 4; c++)
            load4(stage.chunk[i * (E / 4) + c][threadIdx.x], t.s[i] + c * 4);
}

/* What one token gives a value head: this lane's key channels of the
 * normalized k, the decay per channel (KDA) or one decay (GDN, in
 * decay[0]), beta, and this lane's rows of v. */
template <int E, int RPL, bool KDA> struct token_regs {
    float k[E], decay[KDA ? E : 1];
    float beta;
    float v[RPL];
};

/* Token inputs for value head h from a record, as the prologue prepared
 * them (k normalized, the decay e^g). A compact record's k comes back as
 * the prologue normalized it: the conv's value times the head's 1/norm. */
template <int E, int RPL, bool KDA, class State, class Act>
__device__ __forceinline__ void token_load(token_regs<E, RPL, KDA> &tk, const dims &d,
                                           const record_layout &lay, const uint8_t *record,
                                           int32_t h, const head_tile<E, RPL, State> &t)
{
    int32_t key_head = h / d.group;
    if (lay.k_scale > 0) {
        load_lane<E>((const Act *)(record + lay.k) + (int64_t)key_head * d.K, t.sub, tk.k);
        float inv = ((const float *)(record + lay.k_scale))[key_head];
#pragma unroll
        for (int j = 0; j < E; j++)
            tk.k[j] = normalized_k(tk.k[j], inv);
    } else {
        load_lane<E>((const float *)(record + lay.k) + (int64_t)key_head * d.K, t.sub, tk.k);
    }
    const float *decay = (const float *)(record + lay.decay);
    if constexpr (KDA)
        load_lane<E>(decay + (int64_t)h * d.K, t.sub, tk.decay);
    else
        tk.decay[0] = decay[h];
    tk.beta = ((const float *)(record + lay.beta))[h];
    const Act *v = (const Act *)(record + lay.v) + (int64_t)h * d.V;
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        int32_t row = tile_row(t, i);
        tk.v[i] = row < d.V ? load(v + row) : 0.0f;
    }
}

/* The update on this lane's rows: decay, recall, delta; the output
 * o[i] = S_i . q from the fp32 state when q (the token's normalized, scaled
 * q of this key head) is not NULL; then the state rounded to the state
 * dtype. The one update every mode runs. q is read only after the update,
 * so k and q are never live together (fewer registers, more warps).
 * `layout` is the update layout (tile_args.layout): 0 the built-in sums,
 * bit 0 the test-only reversed row sums (group_sum). */
template <int E, int RPL, bool KDA, class State>
__device__ __forceinline__ void tile_token(head_tile<E, RPL, State> &t,
                                           const token_regs<E, RPL, KDA> &tk, const float *q,
                                           float (&o)[RPL], uint32_t layout = 0)
{
    const bool reversed = (layout & 1u) != 0;
    float acc[RPL][2];
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        acc[i][0] = acc[i][1] = 0.0f;
#pragma unroll
        for (int j = 0; j < E; j++) {
            t.s[i][j] *= tk.decay[KDA ? j : 0];
            acc[i][j & 1] = fmaf(t.s[i][j], tk.k[j], acc[i][j & 1]);
        }
    }
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        float u = tk.beta * (tk.v[i] - group_sum(acc[i][0] + acc[i][1], reversed));
#pragma unroll
        for (int j = 0; j < E; j++)
            t.s[i][j] = fmaf(u, tk.k[j], t.s[i][j]);
    }
    if (q) {
#pragma unroll
        for (int i = 0; i < RPL; i++)
            acc[i][0] = acc[i][1] = 0.0f;
#pragma unroll
        for (int c = 0; c < E / 4; c++) {
            float q4[4];
            load4(q + c * 32 + t.sub * 4, q4);
#pragma unroll
            for (int i = 0; i < RPL; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j & 1] = fmaf(t.s[i][c * 4 + j], q4[j], acc[i][j & 1]);
        }
#pragma unroll
        for (int i = 0; i < RPL; i++)
            o[i] = group_sum(acc[i][0] + acc[i][1], reversed);
    }
#pragma unroll
    for (int i = 0; i < RPL; i++)
#pragma unroll
        for (int j = 0; j < E; j++)
            t.s[i][j] = round_to((const State *)0, t.s[i][j]);
}

/* Writes this lane's rows of outputs of value head h (the first lane of each row). */
template <int E, int RPL, class State, class Act>
__device__ __forceinline__ void store_outputs(Act *out_head, const dims &d,
                                              const head_tile<E, RPL, State> &t,
                                              const float (&o)[RPL])
{
    if (t.sub != 0)
        return;
#pragma unroll
    for (int i = 0; i < RPL; i++) {
        int32_t row = tile_row(t, i);
        if (row < d.V)
            store(out_head + row, o[i]);
    }
}

/* ------------------------------------------------------------- the job */

enum history_mode {
    HISTORY_NONE = 0,
    /* Replay step: apply the n committed records; if the ring would overflow
     * (ring_folds) store the result into the checkpoint first (the fold). */
    HISTORY_STEP,
    /* Apply all n committed records (materialize, export, prefill). */
    HISTORY_ALL,
    /* Replay decode that folds every step: apply the n records the
     * prologue took out of the ring (fold_taken) and the step's token (from
     * the token scratch), and store the checkpoint. */
    HISTORY_THROUGH,
    /* Replay identity step (identity.cuh) whose folds are not done inside
     * the identity kernel (fold_inside false): a row whose ring would
     * overflow before the step's tokens (ring_folds) applies its n
     * committed records and stores the checkpoint; every other row returns
     * at once. No tokens run, and the cursors stay for the commit. */
    HISTORY_FOLD
};

enum store_mode {
    STORE_NONE = 0, /* output-only */
    STORE_EACH,     /* native verify: state after token t into snapshot t */
    STORE_FINAL,    /* back where it came from */
    STORE_DST       /* to `dst` ([HV][V][K] of one slot and layer) */
};

/* Compact's commit, applied by the next job that holds the tiles anyway
 * (docs/modes.md): the commit leaves one code a tile saying how many of
 * the verify's records to apply, from which of the slot's two record sets
 * and with which update layout; the next decode or verify applies them
 * with tile_token before its own tokens (the committed state stays
 * native's bits) and clears the code. Every reader of the state outside a
 * step applies them first (a flush in place, or into the copy). */
#define SSM_PENDING_COUNT 0x1fu  /* accepted records, 1 .. 31 */
#define SSM_PENDING_SET 0x20u    /* the records are in set 1 (else 0) */
#define SSM_PENDING_LAYOUT 0x40u /* update layout 1 (test-only) */

struct pending_args {
    uint8_t *codes;   /* [capacity][layers][HV][tiles_per_head]; NULL: nothing pending */
    uint8_t *written; /* [capacity][layers]: the record set the latest verify wrote */
    /* Record t: records + slot * slot_stride + layer * layer_stride +
     * t * layout.bytes; set s's parts at record_set(layout, s). */
    const uint8_t *records;
    int64_t slot_stride, layer_stride;
    record_layout layout;
    bool keep; /* apply without clearing the codes (into a copy: export, copy) */
    bool only; /* a flush: tiles with nothing pending return at once */
};

__host__ __device__ inline uint8_t pending_code(int32_t accepted, int32_t set, uint32_t layout)
{
    return (uint8_t)(((uint32_t)accepted & SSM_PENDING_COUNT) | (set ? SSM_PENDING_SET : 0u) |
                     ((layout & 1u) ? SSM_PENDING_LAYOUT : 0u));
}

/* The set a verify writes its records to: the one a pending commit does
 * not read. */
__host__ __device__ inline int32_t pending_write_set(uint32_t code)
{
    return code != 0 && !(code & SSM_PENDING_SET) ? 1 : 0;
}

struct tile_args {
    dims d;
    int32_t rows, layers, capacity, max_tokens, tokens;
    int32_t layer; /* -1: every layer, grid.z = rows * layers */
    const int32_t *slots;
    uint32_t *flags;
    /* State: state + ((slot * layers + layer) * snapshots + snapshot) * HV*V*K,
     * snapshot = current[slot] (native) or 0. */
    void *state;
    int32_t snapshots;
    const int32_t *current;
    /* Replay history (a ring of `history` records per (slot, layer)). */
    history_mode history_mode;
    const uint8_t *ring;
    int64_t ring_slot_stride, ring_layer_stride;
    record_layout ring_layout;
    const int32_t *ring_n, *ring_start;
    int32_t ring_mask, history;
    const int32_t *fold_taken; /* HISTORY_THROUGH: [capacity][layers] (start, n) */
    /* Tokens: record of token t at tok + slot * tok_slot_stride + layer *
     * tok_layer_stride + t * tok_layout.bytes, or in the ring after the
     * history (tok_in_ring). Count: `tokens`, the prefill row's length
     * (token_offsets, piece), or accepted[r] (a commit, checked in [1, T]). */
    const uint8_t *tok;
    int64_t tok_slot_stride, tok_layer_stride;
    record_layout tok_layout;
    bool tok_in_ring;
    /* The identity kernel folds the rows that need it in its own blocks
     * (identity_fold) instead of after a HISTORY_FOLD job; fold_early: before
     * it waits for the step's prologue, beside it. */
    bool fold_inside, fold_early;
    /* identity_fold's records: staged in shared memory once a block
     * (fold_stage_records) where the kernel has room for them, or each
     * read from the ring by its update. The same bits. */
    bool fold_staged;
    /* identity.cuh's kernel: the products of S0 with the tokens' k and q
     * on tensor cores (3xTF32) where its block stages 128 rows of up to
     * four tokens, or on CUDA cores. Read on the host, which launches the
     * kernel of that form. Outputs within the identity's bound. */
    bool identity_tensor;
    /* A replay decode through the identity kernel that commits itself:
     * [capacity][layers] counts of the blocks of a (slot, layer) that have
     * read its ring's cursors, zero between steps; the last block moves
     * the cursor past the step's token (identity_commit_arrive). NULL: a
     * commit launch follows the step. */
    int32_t *cell_arrivals;
    const float *q; /* [capacity][max_tokens][H][K] normalized, scaled; NULL: no outputs */
    const int32_t *token_offsets;
    int32_t piece;
    const int32_t *accepted;
    int32_t passes; /* tiles of a head each block runs (>= 1), launch_tile sets it */
    int32_t decode_stages; /* tiles a one-token block stages at once: SSM_TILE_STAGES or 3 */
    /* Host only: the launch directly follows this step's prologue in the
     * stream, so it may overlap it (griddep_wait in the kernel). Before the
     * wait the kernel reads only slots, token_offsets, accepted, `current`
     * and the state, none of which a prologue writes. */
    bool after_prep;
    int32_t multi_token_blocks; /* budget of larger multi-token jobs: 6 or 1, launch_tile sets it */
    /* The update layout of every token this job runs (tile_token): what can
     * change rounding, so a verify and the commit that replays its tokens
     * must run the same one (ssm_ticket.layout, docs/tuning.md). 0: the
     * built-in layout; the only other value is the test-only 1. */
    uint32_t layout;
    void *out; /* token-major [.][HV][V] act */
    store_mode store;
    void *dst;
    /* A commit (accepted != NULL) may move the conv windows in the same
     * launch: the first window_x columns of the grid (all of blockIdx.y)
     * are then window_blocks(D) blocks per job for the windows of conv
     * ([capacity][layers][conv_rows][D] act), the tile blocks follow. NULL
     * (or no accepted): no such blocks (window_x 0). */
    void *conv;
    int32_t conv_rows, window_x;
    pending_args pending; /* compact's commit not yet applied (codes NULL: none) */
};

/* Blocks that move one (slot, layer)'s window: four channels a thread. */
__host__ __device__ inline int32_t window_blocks(int32_t D)
{
    return (D / 4 + 32 * SSM_TILE_WARPS - 1) / (32 * SSM_TILE_WARPS);
}

/* The window of (slot, layer) becomes rows [accepted, accepted + W - 1) of
 * its conv buffer, as commit.cuh's commit_kernel does; these blocks run
 * beside the commit's tile blocks instead of in a launch of their own. A bad
 * slot or accepted length is skipped here and reported by the tile blocks. */
template <class Act>
__device__ void window_block(const tile_args &a)
{
    typedef typename conv4<Act>::bits bits;
    const dims &d = a.d;
    int32_t per_job = window_blocks(d.D);
    int64_t block = (int64_t)blockIdx.x * gridDim.y + blockIdx.y;
    int64_t jobs = a.layer < 0 ? (int64_t)a.rows * a.layers : a.rows;
    if (block >= jobs * per_job)
        return;
    int32_t job = (int32_t)(block / per_job), part = (int32_t)(block % per_job);
    int32_t r = a.layer < 0 ? job / a.layers : job;
    int32_t layer = a.layer < 0 ? job % a.layers : a.layer;
    int32_t slot = a.slots[r];
    if (slot < 0 || slot >= a.capacity)
        return;
    int32_t accepted = a.accepted[r];
    int32_t c = 4 * (part * (int32_t)blockDim.x + (int32_t)threadIdx.x);
    if (accepted < 1 || accepted > a.tokens || c >= d.D)
        return;
    Act *buffer = (Act *)a.conv + ((int64_t)slot * a.layers + layer) * a.conv_rows * d.D + c;
    bits kept[SSM_MAX_WIDTH - 1];
#pragma unroll
    for (int i = 0; i < SSM_MAX_WIDTH - 1; i++)
        if (i < d.W - 1)
            kept[i] = *(const bits *)(buffer + (int64_t)(accepted + i) * d.D);
#pragma unroll
    for (int i = 0; i < SSM_MAX_WIDTH - 1; i++)
        if (i < d.W - 1)
            *(bits *)(buffer + (int64_t)i * d.D) = kept[i];
}

template <class State>
__device__ __forceinline__ State *state_head(const tile_args &a, int32_t slot, int32_t layer,
                                             int32_t snapshot, int32_t h)
{
    int64_t head = (int64_t)a.d.V * a.d.K;
    int64_t index = ((int64_t)slot * a.layers + layer) * a.snapshots + snapshot;
    return (State *)a.state + (index * a.d.HV + h) * head;
}

/* Asks L1 for this lane's k (and KDA decay) of `count` records from
 * `first` on, before a loop reads them one by one: their latencies overlap
 * instead of adding up token after token (no registers held). Pays where a
 * block's records are its latency (few rows, or the identity kernel's fold);
 * at large batches it cost more issue slots than it saved (docs/bench.md). */
template <int E, bool KDA, class Act>
__device__ __forceinline__ void token_prefetch(const dims &d, const record_layout &lay,
                                               const uint8_t *base, int32_t first,
                                               int32_t count, int32_t mask, int32_t h,
                                               int32_t sub)
{
    const int64_t k_size = lay.k_scale > 0 ? (int64_t)sizeof(Act) : 4;
    int64_t k = lay.k + ((int64_t)(h / d.group) * d.K + sub * 4) * k_size;
    int64_t decay = lay.decay + ((int64_t)h * d.K + sub * 4) * 4;
    for (int32_t i = 0; i < count; i++) {
        const uint8_t *record = base + (int64_t)((first + i) & mask) * lay.bytes;
#pragma unroll
        for (int c = 0; c < E / 4; c++) {
            asm volatile("prefetch.global.L1 [%0];" ::"l"(record + k + c * 32 * k_size));
            if (KDA)
                asm volatile("prefetch.global.L1 [%0];" ::"l"(record + decay + c * 128));
        }
    }
}

/* Applies `count` records from first (ring index, masked) without outputs. */
template <int E, int RPL, bool KDA, class State, class Act, bool PREFETCH>
__device__ void apply_records(head_tile<E, RPL, State> &t, const dims &d, const uint8_t *base,
                              const record_layout &lay, int32_t first, int32_t count,
                              int32_t mask, int32_t h, uint32_t layout = 0)
{
    token_regs<E, RPL, KDA> tk;
    float unused[RPL];
    if (PREFETCH)
        token_prefetch<E, KDA, Act>(d, lay, base, first + 1, count - 1, mask, h, t.sub);
    for (int32_t i = 0; i < count; i++) {
        const uint8_t *record = base + (int64_t)((first + i) & mask) * lay.bytes;
        token_load<E, RPL, KDA, State, Act>(tk, d, lay, record, h, t);
        tile_token<E, RPL, KDA, State>(t, tk, (const float *)0, unused, layout);
    }
}

/* Register budget of a tile job, as blocks per SM: a one-token job without
 * history keeps its tile in 128 registers (4 blocks) while the next tile
 * arrives in shared memory (tile_stream); a job that runs several tokens or
 * records runs 6 blocks in 80 registers, more warps to hide each token's
 * latency; at SSM_LATENCY_ROWS rows or fewer such a job is bound by latency
 * alone and takes the variant with no register limit (1). Measured on the
 * H200, docs/bench.md. Like rows per lane, it never changes a bit of a
 * result. */
#define SSM_LATENCY_ROWS 8
__host__ __device__ inline bool tile_one_token(const tile_args &a)
{
    return a.history_mode == HISTORY_NONE && a.tokens == 1 && !a.token_offsets && !a.accepted &&
           !a.tok_in_ring;
}

__host__ __device__ inline int32_t tile_min_blocks(const tile_args &a)
{
    if (tile_one_token(a))
        return 4;
    return a.rows <= SSM_LATENCY_ROWS ? 1 : a.multi_token_blocks;
}

/* Value-row tiles of one head at RPL rows per lane. */
__host__ __device__ inline int32_t tiles_per_head(int32_t V, int32_t rpl)
{
    return (V + tile_rows(rpl) - 1) / tile_rows(rpl);
}

/* Blocks per head when each block runs `passes` consecutive tiles of it. */
__host__ __device__ inline int32_t tile_blocks_per_head(int32_t V, int32_t passes)
{
    int32_t tiles = tiles_per_head(V, SSM_TILE_RPL);
    return (tiles + passes - 1) / passes;
}

/* Where one block's tiles are: the job's row, slot, layer and value head,
 * its token count, its state head, and its ring. */
struct tile_job {
    int32_t r, slot, layer, h, n_tokens;
    int64_t cell;
    const uint8_t *ring;
};

/* The pending code of tile `tile` of job j's head (0: none). */
__device__ __forceinline__ uint32_t pending_at(const tile_args &a, const tile_job &j,
                                               int32_t tile)
{
    if (!a.pending.codes)
        return 0;
    int64_t head = j.cell * a.d.HV + j.h;
    return a.pending.codes[head * tiles_per_head(a.d.V, SSM_TILE_RPL) + tile];
}

/* Applies the commit `code` describes to a tile (pending_args). */
template <int E, int RPL, bool KDA, class State, class Act>
__device__ __forceinline__ void tile_apply_pending(head_tile<E, RPL, State> &t,
                                                   const tile_args &a, const tile_job &j,
                                                   uint32_t code)
{
    const pending_args &p = a.pending;
    const uint8_t *records =
        p.records + (int64_t)j.slot * p.slot_stride + (int64_t)j.layer * p.layer_stride;
    const record_layout lay = record_set(p.layout, (code & SSM_PENDING_SET) ? 1 : 0);
    apply_records<E, RPL, KDA, State, Act, false>(t, a.d, records, lay, 0,
                                                  (int32_t)(code & SSM_PENDING_COUNT),
                                                  0x7fffffff, j.h,
                                                  (code & SSM_PENDING_LAYOUT) ? 1u : 0u);
}

/* Clears the codes of tiles [first, last) of job j's head; every thread
 * of the block must have read them before (a barrier in between). */
__device__ __forceinline__ void pending_clear_read(const tile_args &a, const tile_job &j,
                                                   int32_t first, int32_t last)
{
    int32_t tile = first + (int32_t)threadIdx.x;
    if (tile < last) {
        int64_t head = j.cell * a.d.HV + j.h;
        uint8_t *code = a.pending.codes + head * tiles_per_head(a.d.V, SSM_TILE_RPL) + tile;
        if (*code)
            *code = 0;
    }
}

/* The same after a barrier of its own: every thread calls it. */
__device__ __forceinline__ void pending_clear(const tile_args &a, const tile_job &j,
                                              int32_t first, int32_t last)
{
    __syncthreads();
    pending_clear_read(a, j, first, last);
}

/* The history (unless HISTORY is false: a job without one), tokens and
 * stores of one loaded tile of job j; PREFETCH: records are asked of L1
 * before the loops read them (token_prefetch). */
template <int E, int RPL, bool KDA, class State, class Act, bool HISTORY, bool PREFETCH>
__device__ __forceinline__ void tile_run(head_tile<E, RPL, State> &t, const tile_args &a,
                                         const tile_job &j, State *source)
{
    const dims &d = a.d;
    int32_t used = 0, start = 0;
    if (!HISTORY) {
    } else if (a.history_mode == HISTORY_THROUGH) {
        start = a.fold_taken[2 * j.cell];
        used = a.fold_taken[2 * j.cell + 1];
    } else if (a.history_mode != HISTORY_NONE) {
        used = a.ring_n[j.cell];
        start = a.ring_start[j.cell];
    }
    if (HISTORY && a.history_mode != HISTORY_NONE) {
        apply_records<E, RPL, KDA, State, Act, PREFETCH>(t, d, j.ring, a.ring_layout, start,
                                                         used, a.ring_mask, j.h, a.layout);
        bool folding = a.history_mode == HISTORY_STEP || a.history_mode == HISTORY_FOLD;
        if (folding && ring_folds(used, a.tokens, a.max_tokens, a.history))
            tile_store(t, d, source);
    }

    const uint8_t *tok_base;
    int32_t tok_first = 0, tok_mask = 0x7fffffff;
    if (a.tok_in_ring) {
        tok_base = j.ring;
        tok_first = start + used;
        tok_mask = a.ring_mask;
    } else {
        tok_base = a.tok ? a.tok + (int64_t)j.slot * a.tok_slot_stride +
                               (int64_t)j.layer * a.tok_layer_stride
                         : NULL;
    }
    const record_layout &lay = a.tok_in_ring ? a.ring_layout : a.tok_layout;
    token_regs<E, RPL, KDA> tk;
    float o[RPL];
    if (PREFETCH)
        token_prefetch<E, KDA, Act>(d, lay, tok_base, tok_first + 1, j.n_tokens - 1, tok_mask, j.h,
                               t.sub);
    for (int32_t i = 0; i < j.n_tokens; i++) {
        const uint8_t *record = tok_base + (int64_t)((tok_first + i) & tok_mask) * lay.bytes;
        const float *q = a.out ? a.q + ((int64_t)j.slot * a.max_tokens + i) * d.H * d.K +
                                     (int64_t)(j.h / d.group) * d.K
                               : (const float *)0;
        token_load<E, RPL, KDA, State, Act>(tk, d, lay, record, j.h, t);
        tile_token<E, RPL, KDA, State>(t, tk, q, o, a.layout);
        if (a.out) {
            int64_t token = a.token_offsets ? (int64_t)a.token_offsets[j.r] + a.piece + i
                                            : (int64_t)j.r * a.tokens + i;
            store_outputs((Act *)a.out + (token * d.HV + j.h) * d.V, d, t, o);
        }
        if (a.store == STORE_EACH)
            tile_store(t, d, state_head<State>(a, j.slot, j.layer, i, j.h));
    }
    if (a.store == STORE_FINAL)
        tile_store(t, d, source);
    else if (a.store == STORE_DST)
        tile_store(t, d, (State *)a.dst + (int64_t)j.h * d.V * d.K);
}

/* A verify whose prologue wrote set 0 (two launches: its commits were
 * flushed before it) says so for its commit, whichever tile path runs it.
 * After the wait on the prologue, as every read or write of the step's
 * records. */
__device__ __forceinline__ void verify_mark_set0(const tile_args &a, const tile_job &j,
                                                 int32_t first)
{
    if (a.pending.written && !a.pending.codes && first == 0 && j.h == 0 && threadIdx.x == 0)
        a.pending.written[j.cell] = 0;
}

/* Tiles [first, last) of job j's head, a one-token job without history:
 * tiles i + 1 .. i + STAGES - 1 are staged (tile_stage_async) while tile
 * i is updated, so the block's state loads overlap its arithmetic and
 * stores. A slot is staged again only after its tile went to registers,
 * and each thread reads back only its own chunks, so no barrier. */
template <int E, int RPL, bool KDA, class State, class Act, int STAGES>
__device__ __forceinline__ void tile_stream(const tile_args &a, const tile_job &j, State *source,
                                            int32_t first, int32_t last)
{
    __shared__ tile_stage<E, RPL, State> stage[STAGES];
#pragma unroll
    for (int32_t k = 0; k < STAGES - 1; k++) {
        if (first + k < last)
            tile_stage_async(stage[k], a.d, source, first + k);
        copy_async_commit(); /* possibly empty: keeps one group per tile */
    }
    griddep_wait(); /* tokens and q come from the prologue */
    verify_mark_set0(a, j, first);
    bool pending = false;
    for (int32_t tile = first; tile < last; tile++) {
        int32_t k = tile - first;
        if (tile + STAGES - 1 < last)
            tile_stage_async(stage[(k + STAGES - 1) % STAGES], a.d, source, tile + STAGES - 1);
        copy_async_commit();
        copy_async_wait<STAGES - 1>();
        head_tile<E, RPL, State> t;
        tile_place(t, tile);
        tile_from_stage(t, stage[k % STAGES]);
        uint32_t code = pending_at(a, j, tile);
        if (code)
            tile_apply_pending<E, RPL, KDA, State, Act>(t, a, j, code);
        pending |= code != 0;
        tile_run<E, RPL, KDA, State, Act, false, false>(t, a, j, source);
    }
    if (pending && !a.pending.keep) /* the same codes in every thread */
        pending_clear(a, j, first, last);
}

/* grid (tile_blocks_per_head(V, a.passes) * jobs, HV) with jobs = rows, or
 * rows * layers when a.layer < 0 (x carries both, so no 65535 limit on
 * jobs); 32 * SSM_TILE_WARPS threads; at least MIN_BLOCKS blocks per SM
 * (tile_min_blocks() picks it per job). A block runs a.passes consecutive
 * tiles of its head, paying the job's index loads once; in the one-token
 * variant (MIN_BLOCKS 4, jobs without history: tile_one_token) the next
 * STAGES - 1 tiles' states are staged while the block updates the current
 * one (tile_stream). */
template <int E, int MIN_BLOCKS, bool KDA, class State, class Act, int STAGES = SSM_TILE_STAGES>
__global__ void __launch_bounds__(32 * SSM_TILE_WARPS, MIN_BLOCKS) tile_kernel(tile_args a)
{
    constexpr int RPL = SSM_TILE_RPL;
    constexpr bool PIPELINE = MIN_BLOCKS == 4;
    if ((int32_t)blockIdx.x < a.window_x) {
        window_block<Act>(a);
        return;
    }
    const dims &d = a.d;
    int32_t tiles = tiles_per_head(d.V, RPL);
    int32_t per_head = tile_blocks_per_head(d.V, a.passes);
    int32_t x = (int32_t)blockIdx.x - a.window_x;
    int32_t job = x / per_head, first = (x % per_head) * a.passes;
    int32_t last = first + a.passes < tiles ? first + a.passes : tiles;
    tile_job j;
    j.r = a.layer < 0 ? job / a.layers : job;
    j.layer = a.layer < 0 ? job % a.layers : a.layer;
    j.h = blockIdx.y;
    j.slot = a.slots[j.r];
    /* One thread per row reports (the first layer's, in an all-layer job). */
    bool reporter =
        first == 0 && j.h == 0 && threadIdx.x == 0 && (a.layer >= 0 || j.layer == 0);
    if (!slot_is_live(j.slot, a.capacity, a.flags, reporter))
        return;
    j.n_tokens = a.tokens;
    if (a.token_offsets) {
        int32_t left = a.token_offsets[j.r + 1] - a.token_offsets[j.r] - a.piece;
        j.n_tokens = left < 0 ? 0 : (left < a.tokens ? left : a.tokens);
    } else if (a.accepted) {
        j.n_tokens = a.accepted[j.r];
        if (j.n_tokens < 1 || j.n_tokens > a.tokens) {
            if (reporter)
                raise_flag(a.flags, a.capacity, j.slot, SSM_FLAG_BAD_ACCEPTED);
            return;
        }
    }
    j.cell = (int64_t)j.slot * a.layers + j.layer;
    if (a.history_mode == HISTORY_FOLD) {
        griddep_wait(); /* before the cursors, as every history job */
        if (!ring_folds(a.ring_n[j.cell], a.tokens, a.max_tokens, a.history))
            return;
        j.n_tokens = 0;
    }
    j.ring = a.ring ? a.ring + (int64_t)j.slot * a.ring_slot_stride +
                          (int64_t)j.layer * a.ring_layer_stride
                    : NULL;
    State *source = state_head<State>(a, j.slot, j.layer, a.current ? a.current[j.slot] : 0, j.h);
    if constexpr (PIPELINE)
        tile_stream<E, RPL, KDA, State, Act, STAGES>(a, j, source, first, last);
    else {
        /* one tile: tile_passes() gives jobs with history or several tokens one */
        /* Records, q and cursors may come from the prologue. (Waiting after
         * the state loads instead measured the same on the H200.) */
        griddep_wait();
        uint32_t code = pending_at(a, j, first);
        if (a.pending.only && !code)
            return;
        verify_mark_set0(a, j, first);
        head_tile<E, RPL, State> t;
        tile_place(t, first);
        tile_load(t, d, source);
        if (code) {
            tile_apply_pending<E, RPL, KDA, State, Act>(t, a, j, code);
            if (a.store == STORE_NONE) /* output-only: the committed state goes back */
                tile_store(t, d, source);
        }
        tile_run<E, RPL, KDA, State, Act, true, MIN_BLOCKS == 1>(t, a, j, source);
        if (code && !a.pending.keep)
            pending_clear(a, j, first, first + 1);
    }
}

} /* namespace ssm */
#endif
