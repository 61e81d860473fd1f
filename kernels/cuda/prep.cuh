/* The prologue of every step on the GPU: per row and token, the conv, norms
 * and gates, done once so that no recurrence warp repeats them: the short conv
 * over the slot's conv buffer (output rounded to the activation dtype), the
 * L2 normalization of q and k per head (q also scaled by K^-0.5), and the
 * gates. It writes one token record per token (device.cuh's layouts: k
 * normalized in fp32 or, compact's, in the activation dtype with its
 * head's 1/norm; v in the activation dtype, the decay e^g and beta in
 * fp32) and the normalized q to a per-slot q buffer. Every mode's recurrence
 * reads these same bits, which is half of why modes agree bit for bit.
 *
 * A thread owns four conv channels and does a group of the row's tokens in
 * order: all of them, except in a prefill, whose pieces split into groups of
 * `group_tokens` (one per block along z, so a 64-token piece is not one
 * thread's serial loop). Only the first group reads the conv buffer (a group
 * spans at least the W - 1 tokens of the window, so the others find their
 * window in x) and only it writes the advanced window back, after its reads,
 * so the buffer needs no other synchronization: verify stages its inputs in
 * the buffer's tail (commit shifts them in, commit.cuh); decode and prefill
 * advance the window in place. Every token's arithmetic is the same whatever
 * the grouping, so the bits are too. A head is K / 4 lanes of one warp, so
 * the per-head sums of squares are a butterfly over those lanes, the same
 * order every time. Replay records also get
 * the running gate sum G with Knuth's two-sum error term, as
 * kernels/replay.c computes it. */
#ifndef SSM_KERNELS_CUDA_PREP_CUH
#define SSM_KERNELS_CUDA_PREP_CUH

#include "kernels/cuda/device.cuh"

namespace ssm {

#define SSM_PREP_THREADS 256
#define SSM_MAX_WIDTH 16 /* the config's largest conv width (core/config/limits.h) */

struct prep_args {
    dims d;
    int32_t rows, tokens, layer, layers, capacity, max_tokens;
    const int32_t *slots;
    /* Prefill: row r's tokens are token_offsets[r] + piece + t; NULL for
     * decode and verify, whose token (r, t) is r * tokens + t. */
    const int32_t *token_offsets;
    int32_t piece;
    /* Tokens per block along grid z (prep_group_tokens); >= tokens: one. */
    int32_t group_tokens;
    const void *x, *gate, *beta;
    const float *conv_weight, *conv_bias, *a_log, *dt_bias;
    void *conv;        /* [capacity][layers][conv_rows][D] act */
    int32_t conv_rows; /* W - 1 + max_tokens */
    bool stage;        /* verify: stage inputs in the tail; else advance the window */
    bool log_decay;    /* write the log-decay g, not e^g (the chunked prefill's records) */
    /* Record of token t of a slot: records + slot * slot_stride +
     * layer * layer_stride + index(t) * layout.bytes, where index(t) = t, or
     * for a replay ring (ring_n != NULL) (start + n + t) & ring_mask. */
    uint8_t *records;
    int64_t slot_stride, layer_stride;
    /* Records and q of row r at r's place instead of its slot's (a prefill
     * of several chunks a launch: rows x chunks fill the scratch). */
    bool records_by_row;
    record_layout layout;
    const int32_t *ring_n, *ring_start;
    int32_t ring_mask, history;
    float *q; /* [capacity][max_tokens][H][K]: normalized and scaled (by row: [rows]) */
    uint32_t *flags;
    /* Replay's folding decode (its records go to the token scratch): the
     * first thread of each row moves the layer's ring cursor (start, n)
     * from fold_start / fold_n into fold_taken[cell] and empties the ring,
     * so the tile job after this kernel folds what was there. NULL: no. */
    int32_t *fold_taken, *fold_n, *fold_start;
    int32_t fold_mask;
};

/* Tokens of row r in this call (prefill rows can be shorter). */
__device__ __forceinline__ int32_t row_tokens(const prep_args &a, int32_t r)
{
    if (!a.token_offsets)
        return a.tokens;
    int32_t left = a.token_offsets[r + 1] - a.token_offsets[r] - a.piece;
    return left < 0 ? 0 : (left < a.tokens ? left : a.tokens);
}

/* Index in the step tensors of token t of row r. */
__device__ __forceinline__ int64_t input_token(const prep_args &a, int32_t r, int32_t t)
{
    return a.token_offsets ? (int64_t)a.token_offsets[r] + a.piece + t
                           : (int64_t)r * a.tokens + t;
}

/* Whether a replay step of T tokens folds first. The fold happens inside
 * the step's recurrence kernel, after this step's records were appended, so
 * they must land past the history they are folded from: the ring keeps
 * n <= L - T_max at every step (n + T + T_max > L folds, replay's rule
 * n + 2T > L for full-width verifies; a decode folds at n = L - T_max).
 * After a fold the new records start a fresh gate sum. */
__device__ __forceinline__ bool ring_folds(int32_t n, int32_t tokens, int32_t max_tokens,
                                           int32_t history)
{
    return n + tokens + max_tokens > history;
}

/* Where a row's records go: record t at base + index(t) * bytes. */
struct record_place {
    uint8_t *base;
    int64_t bytes;
    int32_t first, mask; /* index(t) = (first + t) & mask */
    const uint8_t *previous; /* replay: the record whose G the new ones continue, or NULL */

    __device__ uint8_t *at(int32_t t) const
    {
        return base + (int64_t)((first + t) & mask) * bytes;
    }
};

/* `owner`: the slot, or the row when records_by_row. */
__device__ inline record_place place_of(const prep_args &a, int32_t slot, int32_t owner)
{
    record_place p;
    p.base = a.records + (int64_t)owner * a.slot_stride + (int64_t)a.layer * a.layer_stride;
    p.bytes = a.layout.bytes;
    p.first = 0;
    p.mask = 0x7fffffff;
    p.previous = NULL;
    if (a.ring_n) {
        int64_t cell = (int64_t)slot * a.layers + a.layer;
        int32_t used = a.ring_n[cell], start = a.ring_start[cell];
        p.first = start + used;
        p.mask = a.ring_mask;
        if (used > 0 && !ring_folds(used, a.tokens, a.max_tokens, a.history))
            p.previous = p.base + (int64_t)((start + used - 1) & a.ring_mask) * p.bytes;
    }
    return p;
}

/* ------------------------------------------------- the per-token math
 * What the prologue computes for a token, shared with the one-launch step
 * kernel (fused.cuh) so the two give the same bits. */

/* The transcendental functions of a step's gates and decays on the GPU.
 * With dims.fast_math (the default) the hardware's approximations
 * (ex2.approx through __expf, __fdividef, __logf: a few ulps); without it
 * kernels/math.h's, built from IEEE operations, which give the CPU's bits. Activations keep the
 * exact SiLU and norm either way: a few ulps there flip the bf16 rounding of
 * q, k and v, which moved fp32 states 1.6e-4 to 4.8e-4 from the CPU's, past
 * the contract's 1e-4. Every mode's kernels call these same helpers, so
 * modes agree bit for bit either way. */
__device__ __forceinline__ float dev_expf(const dims &d, float x)
{
    return d.fast_math ? __expf(x) : ssm_expf(x);
}

__device__ __forceinline__ float dev_sigmoid(const dims &d, float x)
{
    /* __fdividef(1, y) is 0 for y past 2^126, as 1 / y rounds to there. */
    return d.fast_math ? __fdividef(1.0f, 1.0f + __expf(-x)) : ssm_sigmoid(x);
}

/* log(1 + e^x) in the log1p form (Goldberg): log(u) * e / (u - 1) with
 * u = 1 + e keeps the relative accuracy where e is far below 1, which
 * log(1 + e) alone loses. */
__device__ __forceinline__ float dev_softplus(const dims &d, float x)
{
    if (!d.fast_math)
        return ssm_softplus(x);
    if (x > 20.0f)
        return x;
    float e = __expf(x), u = 1.0f + e;
    return u == 1.0f ? e : __logf(u) * __fdividef(e, u - 1.0f);
}

/* The conv taps of channels [c, c + 4): weight[i][ch] for tap i (zero past
 * W, or everywhere when the channels are not live) and the bias. */
template <int WIDTH> struct conv_taps {
    float weight[WIDTH][4], bias[4];
};

/* Weights [D][W] and bias of the four channels: 16-byte loads when the
 * caller's arrays are 16-byte aligned (at W = 4 one per channel instead of
 * four scalar ones), scalar loads otherwise. */
template <int WIDTH>
__device__ __forceinline__ void conv_taps_load(const dims &d, const float *conv_weight,
                                               const float *conv_bias, int32_t c, bool live,
                                               conv_taps<WIDTH> &taps)
{
    const bool vector = ((uintptr_t)conv_weight & 15) == 0 && ((uintptr_t)conv_bias & 15) == 0;
#pragma unroll
    for (int ch = 0; ch < 4; ch++)
        taps.bias[ch] = 0.0f;
    if (live && conv_bias) {
        if (vector)
            load4(conv_bias + c, taps.bias);
        else
#pragma unroll
            for (int ch = 0; ch < 4; ch++)
                taps.bias[ch] = conv_bias[c + ch];
    }
    if (WIDTH == 4 && d.W == 4 && live && vector) {
#pragma unroll
        for (int ch = 0; ch < 4; ch++) {
            float w[4];
            load4(conv_weight + (int64_t)(c + ch) * 4, w);
#pragma unroll
            for (int i = 0; i < 4; i++)
                taps.weight[i][ch] = w[i];
        }
    } else {
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
#pragma unroll
            for (int ch = 0; ch < 4; ch++)
                taps.weight[i][ch] =
                    live && i < d.W ? conv_weight[(int64_t)(c + ch) * d.W + i] : 0.0f;
    }
}

/* The conv width a kernel runs: d.W, or WIDTH itself when EXACT (the
 * caller checked d.W == WIDTH), which the compiler then knows, so a window
 * of WIDTH rows stays in registers instead of going to local memory for
 * the row that `in` replaces. */
template <int WIDTH, bool EXACT> __device__ __forceinline__ int32_t conv_width(const dims &d)
{
    return EXACT ? WIDTH : d.W;
}

/* One token of four channels: value = silu(bias + taps over the window and
 * `in`), rounded to the activation dtype; the window (W - 1 inputs, oldest
 * first) then ends with `in`. Returns the sum of the four squares, in
 * channel order (a head's norm adds the lanes' sums, head_squares). */
template <int WIDTH, class Act, bool EXACT = false>
__device__ __forceinline__ float conv_token(const dims &d, const conv_taps<WIDTH> &taps,
                                            float (&window)[WIDTH][4], const float (&in)[4],
                                            float (&value)[4])
{
    const int32_t W = conv_width<WIDTH, EXACT>(d), keep = W - 1;
    float acc[4], e[4], squares = 0.0f;
    /* Each channel's operations are the reference's; they run phase by phase
       (the sums, the exponentials, the divisions) so that the four channels'
       chains interleave rather than follow one another. */
#pragma unroll
    for (int ch = 0; ch < 4; ch++) {
        /* Bias first, then taps oldest to newest: the reference's order. */
        acc[ch] = taps.bias[ch];
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            if (i < W)
                acc[ch] += taps.weight[i][ch] * (i < keep ? window[i][ch] : in[ch]);
    }
    if (d.fast_activations) {
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            e[ch] = __expf(-acc[ch]);
#pragma unroll
        for (int ch = 0; ch < 4; ch++) {
            value[ch] = round_to((const Act *)0, __fdividef(acc[ch], 1.0f + e[ch]));
            squares += value[ch] * value[ch];
        }
    } else {
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            e[ch] = ssm_expf(-acc[ch]);
#pragma unroll
        for (int ch = 0; ch < 4; ch++) {
            value[ch] = round_to((const Act *)0, ssm_silu_of(acc[ch], e[ch]));
            squares += value[ch] * value[ch];
        }
    }
#pragma unroll
    for (int i = 0; i < WIDTH; i++)
#pragma unroll
        for (int ch = 0; ch < 4; ch++) {
            if (i < keep - 1)
                window[i][ch] = window[i + 1 < WIDTH ? i + 1 : i][ch];
            else if (i == keep - 1)
                window[i][ch] = in[ch];
        }
    return squares;
}

/* The sum of squares of a head of K channels, held as K / 4 consecutive
 * lanes of one warp (each lane's own four first): a butterfly over those
 * lanes, the same order every time. Every lane of the warp takes part
 * (lanes outside q and k with zeros). */
__device__ __forceinline__ float head_squares(float squares, int32_t K)
{
    for (int offset = (K >> 2) >> 1; offset > 0; offset >>= 1)
        squares += __shfl_xor_sync(0xffffffffu, squares, offset);
    return squares;
}

/* q or k of four channels normalized by their head's sum of squares, and
 * scaled (q by K^-0.5, k by 1: normalized_k); returns the head's 1/norm. */
__device__ __forceinline__ float head_normalize(const dims &d, const float (&value)[4],
                                                float squares, float scale, float (&out)[4])
{
    float inv = d.fast_activations ? rsqrtf(squares + 1e-6f) : ssm_l2_inv(squares);
#pragma unroll
    for (int ch = 0; ch < 4; ch++)
        out[ch] = (value[ch] * inv) * scale;
    return inv;
}

/* The log-decay of one gate input from its head's a_log and its bias
 * (dt_bias of the head, GDN, or of the key channel, KDA). */
__device__ __forceinline__ float gate_log_decay_of(const dims &d, float a_log, float bias,
                                                   float in)
{
    if (!d.fast_math)
        return d.kda ? ssm_kda_gate(a_log, in, bias, d.has_lower_bound, d.lower_bound)
                     : ssm_gdn_gate(a_log, in, bias);
    /* kernels/math.h's op order, with the helpers' functions. */
    if (d.kda && d.has_lower_bound)
        return ssm_gate_floor(d.lower_bound * dev_sigmoid(d, dev_expf(d, a_log) * (in + bias)));
    return ssm_gate_floor(-(dev_expf(d, a_log) * dev_softplus(d, in + bias)));
}

/* The same for gate channel e (a value head for GDN, head * K + key
 * channel for KDA). */
__device__ __forceinline__ float gate_log_decay(const dims &d, const float *a_log,
                                                const float *dt_bias, int32_t e, float in)
{
    int32_t h = d.kda ? e / d.K : e;
    return gate_log_decay_of(d, a_log[h], d.kda ? dt_bias[e] : dt_bias[h], in);
}

/* ------------------------------------------------------------ the kernel */

/* The conv of channels [4e, 4e + 4) for the row's n tokens, and the
 * normalization of their head: a head of K channels is K / 4 consecutive
 * lanes of one warp, whose sum of squares is a butterfly over those lanes
 * (each lane first sums its four in order). Lanes past D join the shuffles
 * with zeros. WIDTH bounds the conv width at compile time, so the window
 * stays in registers (EXACT: the width is WIDTH, conv_width). The window's
 * rows and the first token's inputs are asked for together, and each
 * token's inputs while the one before is computed, so no load waits for
 * another. */
template <int WIDTH, class Act, bool EXACT>
__device__ void prep_conv(const prep_args &a, int32_t slot, int32_t r, int32_t first, int32_t end,
                          int32_t n, int32_t e, const record_place &place)
{
    typedef typename conv4<Act>::bits bits;
    const dims &d = a.d;
    const int32_t qk = d.H * d.K, keep = conv_width<WIDTH, EXACT>(d) - 1, c = 4 * e;
    const bool live = c < d.D;
    Act *buffer = (Act *)a.conv + ((int64_t)slot * a.layers + a.layer) * a.conv_rows * d.D;
    const Act *x = (const Act *)a.x;
    /* Window slot i holds the raw bits of the input at position
       first - keep + i of the piece: the buffer's row for a position before
       it, else x's token. The window is kept as the bits it was read as and
       widened for each token's conv, so writing it back (or staging a
       verify's inputs) is a move of those bits, as the reference's memcpy
       is, not a rounding of floats. */
    bits raw[WIDTH], next = {};
#pragma unroll
    for (int i = 0; i < WIDTH; i++) {
        const int32_t at = first - keep + i;
        raw[i] = bits{};
        if (live && i < keep)
            raw[i] = load_bits(at < 0 ? buffer + (int64_t)(keep + at) * d.D + c
                                      : x + input_token(a, r, at) * d.D + c);
    }
    if (live && first < end)
        next = load_bits(x + input_token(a, r, first) * d.D + c);
    conv_taps<WIDTH> taps;
    conv_taps_load(d, a.conv_weight, a.conv_bias, c, live, taps);
    const bool normalized = c < 2 * qk; /* q and k */
    bool finite = true;
    for (int32_t t = first; t < end; t++) {
        const bits now = next;
        float window[WIDTH][4], in[4], value[4];
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            widen4(raw[i], window[i]);
        widen4(now, in);
        if (live && t + 1 < end)
            next = load_bits(x + input_token(a, r, t + 1) * d.D + c);
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            finite = finite && isfinite(in[ch]);
        float squares = conv_token<WIDTH, Act, EXACT>(d, taps, window, in, value);
#pragma unroll
        for (int i = 0; i < WIDTH; i++) {
            if (i < keep - 1)
                raw[i] = raw[i + 1 < WIDTH ? i + 1 : i];
            else if (i == keep - 1)
                raw[i] = now;
        }
        if (live && a.stage)
            store_bits(buffer + (int64_t)(keep + t) * d.D + c, now);
        squares = head_squares(live && normalized ? squares : 0.0f, d.K);
        if (!live)
            continue;
        uint8_t *record = place.at(t);
        if (normalized) {
            float out[4];
            float inv = head_normalize(d, value, squares, c < qk ? d.query_scale : 1.0f, out);
            if (c < qk)
                store4(a.q + ((int64_t)(a.records_by_row ? r : slot) * a.max_tokens + t) * qk +
                           c,
                       out);
            else
                record_store_k<Act>(a.layout, record, c - qk, d.K, value, out, inv);
        } else {
            store4((Act *)(record + a.layout.v) + (c - 2 * qk), value);
        }
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
    /* The first group advances the window: its bits when it did the row's
       last token, else the row's last keep inputs (end < n means
       n > group_tokens >= keep, so they all lie in x). */
    if (live && !a.stage && n > 0 && first == 0) {
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            if (i < keep && end < n)
                raw[i] = load_bits(x + input_token(a, r, n - keep + i) * d.D + c);
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            if (i < keep)
                store_bits(buffer + (int64_t)i * d.D + c, raw[i]);
    }
}

template <class Act>
__device__ void prep_gate(const prep_args &a, int32_t slot, int32_t r, int32_t first,
                          int32_t end, int32_t e, const record_place &place)
{
    const dims &d = a.d;
    const Act *gate = (const Act *)a.gate;
    float sum = 0.0f, error = 0.0f;
    if (place.previous) {
        sum = ((const float *)(place.previous + a.layout.gate_sum))[e];
        error = ((const float *)(place.previous + a.layout.gate_error))[e];
    }
    bool finite = true;
    for (int32_t t = first; t < end; t++) {
        uint8_t *record = place.at(t);
        float in = load(gate + input_token(a, r, t) * d.GW + e);
        finite = finite && isfinite(in);
        float g = gate_log_decay(d, a.a_log, a.dt_bias, e, in);
        ((float *)(record + a.layout.decay))[e] = a.log_decay ? g : dev_expf(d, g);
        if (!a.ring_n)
            continue;
        if (t == 0 && !place.previous) {
            sum = g;
            error = 0.0f;
        } else {
            float next = sum + g;
            float g_part = next - sum;
            float rounding = (sum - (next - g_part)) + (g - g_part);
            sum = next;
            error = error + rounding;
        }
        ((float *)(record + a.layout.gate_sum))[e] = sum;
        ((float *)(record + a.layout.gate_error))[e] = error;
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

template <class Act>
__device__ void prep_beta(const prep_args &a, int32_t slot, int32_t r, int32_t first,
                          int32_t end, int32_t h, const record_place &place)
{
    const Act *beta = (const Act *)a.beta;
    bool finite = true;
    for (int32_t t = first; t < end; t++) {
        float in = load(beta + input_token(a, r, t) * a.d.HV + h);
        finite = finite && isfinite(in);
        ((float *)(place.at(t) + a.layout.beta))[h] = dev_sigmoid(a.d, in);
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

/* Tokens per block along z: a prefill piece (no ring, nothing staged)
 * splits into groups of max(`group`, W - 1) tokens; every other step is one
 * group. A group must span the window (W - 1) for prep_conv's buffer rule.
 * Larger groups share a thread's setup (addresses, taps, window) among more
 * tokens; smaller ones give a short prompt more threads. */
__host__ __device__ inline int32_t prep_group_tokens(const prep_args &a, int32_t group)
{
    if (!a.token_offsets || a.stage || a.ring_n || a.fold_taken)
        return a.tokens;
    return a.d.W - 1 > group ? a.d.W - 1 : group;
}

/* Row r of the step, this block's channels and token group. */
template <int WIDTH, class Act, bool EXACT>
__device__ __forceinline__ void prep_row(const prep_args &a, int32_t r)
{
    int32_t slot = a.slots[r];
    int32_t e = blockIdx.x * blockDim.x + threadIdx.x;
    if (!slot_is_live(slot, a.capacity, a.flags, e == 0))
        return; /* the whole block: slot and n are the row's */
    if (a.fold_taken && e == 0 && blockIdx.z == 0) {
        int64_t cell = (int64_t)slot * a.layers + a.layer;
        int32_t start = a.fold_start[cell], used = a.fold_n[cell];
        a.fold_taken[2 * cell] = start;
        a.fold_taken[2 * cell + 1] = used;
        a.fold_start[cell] = (start + used) & a.fold_mask;
        a.fold_n[cell] = 0;
    }
    int32_t n = row_tokens(a, r);
    int32_t first = (int32_t)blockIdx.z * a.group_tokens;
    if (first >= n)
        return;
    int32_t end = n - first < a.group_tokens ? n : first + a.group_tokens;
    record_place place = place_of(a, slot, a.records_by_row ? r : slot);
    if ((int64_t)blockIdx.x * blockDim.x * 4 < a.d.D)
        prep_conv<WIDTH, Act, EXACT>(a, slot, r, first, end, n, e, place);
    if (e < a.d.GW)
        prep_gate<Act>(a, slot, r, first, end, e, place);
    if (e < a.d.HV)
        prep_beta<Act>(a, slot, r, first, end, e, place);
}

/* grid (ceil(max(D / 4, GW) / SSM_PREP_THREADS), at most rows, token
 * groups), SSM_PREP_THREADS threads; block (x, y, z) takes rows y,
 * y + gridDim.y, ... in turn (prep_row), so a large batch can run in fewer
 * blocks than rows. WIDTH >= the conv width, and EXACT: the width is
 * WIDTH (conv_width). The exact kernel holds no code for other widths, so
 * ptxas allocates its registers alone: with the runtime-width path beside
 * it the width-4 kernel spilled 92 bytes and kept a 40-byte stack, alone it
 * keeps neither. Three blocks an SM leave a thread 80 registers: at four
 * (64) the width-4 kernel spilled 320 bytes, and replay's decode, which
 * waits on it, ran 3% (B = 256) to 10% (B = 1) slower on an H100. */
template <int WIDTH, class Act, bool EXACT>
__global__ void __launch_bounds__(SSM_PREP_THREADS, 3) prep_kernel(prep_args a)
{
    griddep_launch_dependents(); /* the recurrence kernel may start loading its state */
    for (int32_t r = (int32_t)blockIdx.y; r < a.rows; r += (int32_t)gridDim.y)
        prep_row<WIDTH, Act, EXACT>(a, r);
}

} /* namespace ssm */
#endif
