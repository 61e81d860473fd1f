/* The one-token update of SPEC 2.2 step 4 on the GPU, and the kernel every
 * mode runs it through.
 *
 * A block owns a tile of TILE_ROWS value rows of one value head of one
 * (slot, layer): 4 warps of ROWS_PER_WARP rows; lane l holds key channels
 * [l * KPL, (l + 1) * KPL) of each row in registers (K = 32 * KPL). A warp
 * issues all its rows' loads at once (4 x 512 bytes for an fp32 head of
 * K = 128). The kernel is bound by instruction issue and latency, not yet by
 * bytes: see bench/results/2026-11-29-gpu-h200.md. Per token: decay, recall (warp sum), delta, output (warp
 * sum) from the fp32 state, then rounding to the state dtype. The products
 * accumulate through fmaf: one rounding per term, the same on every mode's
 * path (the CPU reference rounds twice; SPEC 3.5 compares CPU and GPU by
 * tolerance for that reason). Native's verify and decode,
 * compact's verify and commit, replay's folds and its exact outputs all call
 * tile_token() with this layout, so they produce the same bits (SPEC 3.5).
 *
 * tile_kernel is one kernel for every such job, told by tile_args where the
 * state comes from, which records are applied first (a replay history),
 * which tokens follow, and where state and outputs go. */
#ifndef SSM_KERNELS_CUDA_TILE_CUH
#define SSM_KERNELS_CUDA_TILE_CUH

#include "kernels/cuda/prep.cuh"

namespace ssm {

#define SSM_TILE_WARPS 4
#define SSM_ROWS_PER_WARP 4
#define SSM_TILE_ROWS (SSM_TILE_WARPS * SSM_ROWS_PER_WARP)

/* --------------------------------------------------------- row load/store */

template <int KPL> __device__ __forceinline__ void load_row(const float *p, float (&s)[KPL])
{
    if constexpr (KPL == 4) {
        float4 v = *(const float4 *)p;
        s[0] = v.x, s[1] = v.y, s[2] = v.z, s[3] = v.w;
    } else if constexpr (KPL == 2) {
        float2 v = *(const float2 *)p;
        s[0] = v.x, s[1] = v.y;
    } else {
        s[0] = *p;
    }
}

template <int KPL> __device__ __forceinline__ void store_row(float *p, const float (&s)[KPL])
{
    if constexpr (KPL == 4)
        *(float4 *)p = make_float4(s[0], s[1], s[2], s[3]);
    else if constexpr (KPL == 2)
        *(float2 *)p = make_float2(s[0], s[1]);
    else
        *p = s[0];
}

template <int KPL> __device__ __forceinline__ void load_row(const bf16 *p, float (&s)[KPL])
{
    if constexpr (KPL == 4) {
        uint2 v = *(const uint2 *)p;
        s[0] = ssm_f32_from_bits(v.x << 16), s[1] = ssm_f32_from_bits(v.x & 0xffff0000u);
        s[2] = ssm_f32_from_bits(v.y << 16), s[3] = ssm_f32_from_bits(v.y & 0xffff0000u);
    } else if constexpr (KPL == 2) {
        uint32_t v = *(const uint32_t *)p;
        s[0] = ssm_f32_from_bits(v << 16), s[1] = ssm_f32_from_bits(v & 0xffff0000u);
    } else {
        s[0] = load(p);
    }
}

template <int KPL> __device__ __forceinline__ void store_row(bf16 *p, const float (&s)[KPL])
{
    if constexpr (KPL == 4) {
        uint2 v;
        v.x = ssm_f32_to_bf16(s[0]) | ((uint32_t)ssm_f32_to_bf16(s[1]) << 16);
        v.y = ssm_f32_to_bf16(s[2]) | ((uint32_t)ssm_f32_to_bf16(s[3]) << 16);
        *(uint2 *)p = v;
    } else if constexpr (KPL == 2) {
        *(uint32_t *)p = ssm_f32_to_bf16(s[0]) | ((uint32_t)ssm_f32_to_bf16(s[1]) << 16);
    } else {
        store(p, s[0]);
    }
}

/* ------------------------------------------------------------- the tile */

template <int KPL, class State> struct head_tile {
    float s[SSM_ROWS_PER_WARP][KPL];
    int32_t row0; /* first value row of this warp */
    int32_t lane;
};

/* Rows of this warp that exist (V need not be a multiple of the tile). */
template <int KPL, class State>
__device__ __forceinline__ bool tile_row_valid(const head_tile<KPL, State> &t, const dims &d,
                                               int i)
{
    return t.row0 + i < d.V;
}

/* head points at [V][K] of one value head. */
template <int KPL, class State>
__device__ void tile_load(head_tile<KPL, State> &t, const dims &d, const State *head)
{
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++) {
        if (tile_row_valid(t, d, i))
            load_row<KPL>(head + (int64_t)(t.row0 + i) * d.K + t.lane * KPL, t.s[i]);
        else
#pragma unroll
            for (int j = 0; j < KPL; j++)
                t.s[i][j] = 0.0f;
    }
}

template <int KPL, class State>
__device__ void tile_store(const head_tile<KPL, State> &t, const dims &d, State *head)
{
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++)
        if (tile_row_valid(t, d, i))
            store_row<KPL>(head + (int64_t)(t.row0 + i) * d.K + t.lane * KPL, t.s[i]);
}

/* What one token gives a value head: this lane's key channels of the
 * normalized k (and scaled q), the decay per channel (KDA) or one decay
 * (GDN, in decay[0]), beta, and this warp's rows of v. */
template <int KPL> struct token_regs {
    float k[KPL], q[KPL], decay[KPL];
    float beta;
    float v[SSM_ROWS_PER_WARP];
};

/* Token inputs for value head h from a record, as the prologue prepared
 * them (k normalized, the decay e^g), and the normalized, scaled q from the
 * q buffer when the token has an output (q_head == NULL skips it). */
template <int KPL, class Act>
__device__ __forceinline__ void token_load(token_regs<KPL> &tk, const dims &d,
                                           const record_layout &lay, const uint8_t *record,
                                           const float *q_head, int32_t h, int32_t row0, int lane)
{
    int32_t key_head = h / d.group;
    load_row<KPL>((const float *)(record + lay.k) + (int64_t)key_head * d.K + lane * KPL, tk.k);
    if (q_head)
        load_row<KPL>(q_head + (int64_t)key_head * d.K + lane * KPL, tk.q);
    const float *decay = (const float *)(record + lay.decay);
    if (d.kda)
        load_row<KPL>(decay + (int64_t)h * d.K + lane * KPL, tk.decay);
    else
        tk.decay[0] = decay[h];
    tk.beta = ((const float *)(record + lay.beta))[h];
    const Act *v = (const Act *)(record + lay.v) + (int64_t)h * d.V;
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++)
        tk.v[i] = row0 + i < d.V ? load(v + row0 + i) : 0.0f;
}

/* SPEC 2.2 step 4 on this warp's rows: decay, recall, delta; the output
 * o[i] = S_i . q from the fp32 state when `out`; then the state rounded to
 * the state dtype. The one update every mode runs. */
template <int KPL, class State>
__device__ __forceinline__ void tile_token(head_tile<KPL, State> &t, const dims &d,
                                           const token_regs<KPL> &tk, bool out,
                                           float (&o)[SSM_ROWS_PER_WARP])
{
    float acc[SSM_ROWS_PER_WARP];
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++) {
        acc[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < KPL; j++) {
            t.s[i][j] *= d.kda ? tk.decay[j] : tk.decay[0];
            acc[i] = fmaf(t.s[i][j], tk.k[j], acc[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++) {
        float u = tk.beta * (tk.v[i] - warp_sum(acc[i]));
        acc[i] = 0.0f;
        if (out) {
#pragma unroll
            for (int j = 0; j < KPL; j++) {
                t.s[i][j] = fmaf(u, tk.k[j], t.s[i][j]);
                acc[i] = fmaf(t.s[i][j], tk.q[j], acc[i]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < KPL; j++)
                t.s[i][j] = fmaf(u, tk.k[j], t.s[i][j]);
        }
    }
    if (out) {
#pragma unroll
        for (int i = 0; i < SSM_ROWS_PER_WARP; i++)
            o[i] = warp_sum(acc[i]);
    }
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++)
#pragma unroll
        for (int j = 0; j < KPL; j++)
            t.s[i][j] = round_to((const State *)0, t.s[i][j]);
}

/* Writes this warp's outputs of value head h: lane i stores row i. */
template <class Act>
__device__ __forceinline__ void store_outputs(Act *out_head, const dims &d, int32_t row0,
                                              int lane, const float (&o)[SSM_ROWS_PER_WARP])
{
#pragma unroll
    for (int i = 0; i < SSM_ROWS_PER_WARP; i++)
        if (lane == i && row0 + i < d.V)
            store(out_head + row0 + i, o[i]);
}

/* ------------------------------------------------------------- the job */

enum history_mode {
    HISTORY_NONE = 0,
    /* Replay step: apply the n committed records; if the ring would overflow
     * (ring_folds) store the result into the checkpoint first (the fold). */
    HISTORY_STEP,
    /* Apply all n committed records (materialize, export, prefill). */
    HISTORY_ALL
};

enum store_mode {
    STORE_NONE = 0, /* output-only */
    STORE_EACH,     /* native verify: state after token t into snapshot t */
    STORE_FINAL,    /* back where it came from */
    STORE_DST       /* to `dst` ([HV][V][K] of one slot and layer) */
};

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
    /* Tokens: record of token t at tok + slot * tok_slot_stride + layer *
     * tok_layer_stride + t * tok_layout.bytes, or in the ring after the
     * history (tok_in_ring). Count: `tokens`, the prefill row's length
     * (token_offsets, piece), or accepted[r] (a commit, checked in [1, T]). */
    const uint8_t *tok;
    int64_t tok_slot_stride, tok_layer_stride;
    record_layout tok_layout;
    bool tok_in_ring;
    const float *q; /* [capacity][max_tokens][H][K] normalized, scaled; NULL: no outputs */
    const int32_t *token_offsets;
    int32_t piece;
    const int32_t *accepted;
    void *out; /* token-major [.][HV][V] act */
    store_mode store;
    void *dst;
};

template <class State>
__device__ __forceinline__ State *state_head(const tile_args &a, int32_t slot, int32_t layer,
                                             int32_t snapshot, int32_t h)
{
    int64_t head = (int64_t)a.d.V * a.d.K;
    int64_t index = ((int64_t)slot * a.layers + layer) * a.snapshots + snapshot;
    return (State *)a.state + (index * a.d.HV + h) * head;
}

template <int KPL, class State, class Act>
__device__ void apply_records(head_tile<KPL, State> &t, const tile_args &a, const uint8_t *base,
                              const record_layout &lay, int32_t first, int32_t count, int32_t mask,
                              int32_t h)
{
    token_regs<KPL> tk;
    float unused[SSM_ROWS_PER_WARP];
#pragma unroll
    for (int j = 0; j < KPL; j++)
        tk.q[j] = 0.0f;
    for (int32_t i = 0; i < count; i++) {
        const uint8_t *record = base + (int64_t)((first + i) & mask) * lay.bytes;
        token_load<KPL, Act>(tk, a.d, lay, record, (const float *)0, h, t.row0, t.lane);
        tile_token<KPL, State>(t, a.d, tk, false, unused);
    }
}

/* Value-row tiles of one head. */
__host__ __device__ inline int32_t tiles_per_head(int32_t V)
{
    return (V + SSM_TILE_ROWS - 1) / SSM_TILE_ROWS;
}

/* grid (tiles_per_head(V) * jobs, HV) with jobs = rows, or rows * layers
 * when a.layer < 0 (x carries both, so no 65535 limit on jobs);
 * 32 * SSM_TILE_WARPS threads. */
template <int KPL, class State, class Act>
__global__ void __launch_bounds__(32 * SSM_TILE_WARPS, 5) tile_kernel(tile_args a)
{
    const dims &d = a.d;
    int32_t tiles = tiles_per_head(d.V);
    int32_t job = blockIdx.x / tiles, tile = blockIdx.x % tiles;
    int32_t r = a.layer < 0 ? job / a.layers : job;
    int32_t layer = a.layer < 0 ? job % a.layers : a.layer;
    int32_t h = blockIdx.y;
    int32_t slot = a.slots[r];
    /* One thread per row reports (the first layer's, in an all-layer job). */
    bool reporter = tile == 0 && h == 0 && threadIdx.x == 0 && (a.layer >= 0 || layer == 0);
    if (!slot_is_live(slot, a.capacity, a.flags, reporter))
        return;
    int32_t n_tokens = a.tokens;
    if (a.token_offsets) {
        int32_t left = a.token_offsets[r + 1] - a.token_offsets[r] - a.piece;
        n_tokens = left < 0 ? 0 : (left < a.tokens ? left : a.tokens);
    } else if (a.accepted) {
        n_tokens = a.accepted[r];
        if (n_tokens < 1 || n_tokens > a.tokens) {
            if (reporter)
                raise_flag(a.flags, a.capacity, slot, SSM_FLAG_BAD_ACCEPTED);
            return;
        }
    }
    head_tile<KPL, State> t;
    t.lane = threadIdx.x & 31;
    t.row0 = tile * SSM_TILE_ROWS + (threadIdx.x >> 5) * SSM_ROWS_PER_WARP;
    int32_t from = a.current ? a.current[slot] : 0;
    State *source = state_head<State>(a, slot, layer, from, h);
    tile_load(t, d, source);

    int64_t cell = (int64_t)slot * a.layers + layer;
    int32_t used = 0, start = 0;
    const uint8_t *ring = a.ring ? a.ring + (int64_t)slot * a.ring_slot_stride +
                                       (int64_t)layer * a.ring_layer_stride
                                 : NULL;
    if (a.history_mode != HISTORY_NONE) {
        used = a.ring_n[cell];
        start = a.ring_start[cell];
        apply_records<KPL, State, Act>(t, a, ring, a.ring_layout, start, used, a.ring_mask, h);
        if (a.history_mode == HISTORY_STEP && ring_folds(used, a.tokens, a.max_tokens, a.history))
            tile_store(t, d, source);
    }

    const uint8_t *tok_base;
    int32_t tok_first = 0, tok_mask = 0x7fffffff;
    if (a.tok_in_ring) {
        tok_base = ring;
        tok_first = start + used;
        tok_mask = a.ring_mask;
    } else {
        tok_base = a.tok ? a.tok + (int64_t)slot * a.tok_slot_stride +
                               (int64_t)layer * a.tok_layer_stride
                         : NULL;
    }
    const record_layout &lay = a.tok_in_ring ? a.ring_layout : a.tok_layout;
    token_regs<KPL> tk;
#pragma unroll
    for (int j = 0; j < KPL; j++)
        tk.q[j] = 0.0f;
    float o[SSM_ROWS_PER_WARP];
    for (int32_t i = 0; i < n_tokens; i++) {
        const uint8_t *record = tok_base + (int64_t)((tok_first + i) & tok_mask) * lay.bytes;
        const float *q = a.q ? a.q + ((int64_t)slot * a.max_tokens + i) * d.H * d.K
                             : (const float *)0;
        token_load<KPL, Act>(tk, d, lay, record, q, h, t.row0, t.lane);
        tile_token<KPL, State>(t, d, tk, a.out != NULL, o);
        if (a.out) {
            int64_t token = a.token_offsets ? (int64_t)a.token_offsets[r] + a.piece + i
                                            : (int64_t)r * a.tokens + i;
            store_outputs((Act *)a.out + (token * d.HV + h) * d.V, d, t.row0, t.lane, o);
        }
        if (a.store == STORE_EACH)
            tile_store(t, d, state_head<State>(a, slot, layer, i, h));
    }
    if (a.store == STORE_FINAL)
        tile_store(t, d, source);
    else if (a.store == STORE_DST)
        tile_store(t, d, (State *)a.dst + (int64_t)h * d.V * d.K);
}

} /* namespace ssm */
#endif
