/* The prologue of a chunked prefill inside the tensor-core prepare kernel
 * (chunk_tc.cuh): the block of (chunk, value head, row) computes the conv,
 * SiLU and norms of its key head's q and k and its value head's v, and its
 * gates and beta, from the step's projections, where the two-kernel form
 * has prep.cuh's kernel write them as token records and the prepare read
 * them back. GDN's value heads of one key head each repeat its q and k
 * conv: 2K channels against the chunk's products.
 *
 * The per-token math is prep.cuh's (conv_token, head_squares,
 * head_normalize, gate_log_decay, dev_sigmoid) in the same order, with a
 * head's channels four to a lane over K / 4 consecutive lanes as there, so a
 * prompt gets the same bits whichever form runs it.
 *
 * The window: a pass's first chunk reads the W - 1 inputs before it from the
 * slot's conv buffer, every other from the inputs. The scan, launched after
 * the prepare, writes the window the pass leaves (chunk_window_advance), so
 * no prepare block reads a window another has overwritten. Only the exact
 * width SSM_CHUNK_PROLOGUE_WIDTH runs here; others keep the prologue
 * kernel. */
#ifndef SSM_KERNELS_CUDA_CHUNK_PROLOGUE_CUH
#define SSM_KERNELS_CUDA_CHUNK_PROLOGUE_CUH

#include "kernels/cuda/chunk.cuh"
#include "kernels/cuda/prep.cuh"

namespace ssm {

#define SSM_CHUNK_PROLOGUE_WIDTH 4

namespace tcp {

constexpr int WIDTH = SSM_CHUNK_PROLOGUE_WIDTH, KEEP = WIDTH - 1;

/* Index in the step's tensors of position `pos` of row r's pass (its
 * tokens from token_offsets[r] + piece). */
__device__ __forceinline__ int64_t input_token(const chunk_args &a, int32_t r, int32_t pos)
{
    return (int64_t)a.token_offsets[r] + a.piece + pos;
}

/* Channels [c, c + 4) of the input at position `pos` of the pass: the
 * slot's window row for a position before it, else the step's input. */
template <class Act>
__device__ __forceinline__ const Act *input_at(const chunk_args &a, const Act *window, int32_t r,
                                               int32_t pos, int32_t c)
{
    const dims &d = a.pro.d;
    return pos < 0 ? window + (int64_t)(KEEP + pos) * d.D + c
                   : (const Act *)a.pro.x + input_token(a, r, pos) * d.D + c;
}

/* The slot's conv window in the buffer. */
template <class Act>
__device__ __forceinline__ Act *window_of(const chunk_args &a, int32_t slot)
{
    return (Act *)a.pro.conv +
           ((int64_t)slot * a.layers + a.layer) * a.pro.conv_rows * a.pro.d.D;
}

/* The W - 1 inputs before position `first` of the pass (the window's rows
 * for positions before it) into raw[0 .. W - 2], and the input at `first`
 * into next, for a thread that slides its window from `first` on over the
 * chunk's c tokens from t0; zeros where first >= c. */
template <class Act>
__device__ __forceinline__ void first_inputs(const chunk_args &a, const Act *window, int32_t r,
                                             int32_t t0, int32_t first, int32_t c,
                                             int32_t channel,
                                             typename conv4<Act>::bits (&raw)[WIDTH],
                                             typename conv4<Act>::bits &next)
{
    next = {};
#pragma unroll
    for (int i = 0; i < WIDTH; i++) {
        raw[i] = {};
        if (i < KEEP && first < c)
            raw[i] = load_bits(input_at(a, window, r, t0 + first - KEEP + i, channel));
    }
    if (first < c)
        next = load_bits(input_at(a, window, r, t0 + first, channel));
}

} /* namespace tcp */

/* Normalized q (scaled by K^-0.5) and k of the chunk's tokens [t0, t0 + C)
 * of the pass, key head `key_head`, to qc and kc ([C][LK]); tokens past c
 * are zeros. Thread tid takes the four channels 4 (tid % (K / 4)) of q
 * (tid % (K / 2) < K / 4) or k, for the C / groups consecutive tokens of
 * group tid / (K / 2): a head's K / 4 lanes are consecutive lanes of one
 * warp, and every lane of a warp walks as many tokens, so the norms'
 * butterflies are the prologue kernel's. Raises the non-finite flag for an
 * input that is not finite. */
template <int K, int THREADS, class Act>
__device__ void chunk_prologue_qk(const chunk_args &a, int32_t slot, int32_t r, int32_t t0,
                                  int32_t c, int32_t key_head, float *qc, float *kc, int32_t LK)
{
    typedef typename conv4<Act>::bits bits;
    using tcp::KEEP;
    using tcp::WIDTH;
    constexpr int32_t lanes = K / 2, groups = THREADS / lanes,
                      span = SSM_CHUNK_TOKENS / groups;
    static_assert(THREADS % lanes == 0 && SSM_CHUNK_TOKENS % groups == 0, "token groups");
    const dims &d = a.pro.d;
    const int32_t e4 = threadIdx.x % lanes, first = (int32_t)(threadIdx.x / lanes) * span;
    const bool is_k = e4 >= K / 4;
    const int32_t x = 4 * (e4 % (K / 4));
    const int32_t channel = (is_k ? d.H * K : 0) + key_head * K + x;
    const Act *window = tcp::window_of<Act>(a, slot);
    float *dst = (is_k ? kc : qc) + x;

    bits raw[WIDTH], next;
    tcp::first_inputs<Act>(a, window, r, t0, first, c, channel, raw, next);
    conv_taps<WIDTH> taps;
    conv_taps_load(d, a.pro.conv_weight, a.pro.conv_bias, channel, true, taps);
    bool finite = true;
#pragma unroll 2
    for (int32_t s = 0; s < span; s++) {
        const int32_t t = first + s;
        const bool live = t < c;
        const bits now = next;
        float window_f[WIDTH][4], in[4], value[4], out[4];
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            widen4(raw[i], window_f[i]);
        widen4(now, in);
        if (t + 1 < c)
            next = load_bits(tcp::input_at(a, window, r, t0 + t + 1, channel));
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            finite = finite && (!live || isfinite(in[ch]));
        float squares = conv_token<WIDTH, Act, true>(d, taps, window_f, in, value);
#pragma unroll
        for (int i = 0; i < KEEP; i++)
            raw[i] = i + 1 < KEEP ? raw[i + 1] : now;
        squares = head_squares(squares, K);
        head_normalize(d, value, squares, is_k ? 1.0f : d.query_scale, out);
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            dst[t * LK + ch] = live ? out[ch] : 0.0f;
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

/* The chunk's log-decays (G: [C] for GDN, [C][K] for KDA) and beta ([C])
 * of value head h; zeros past c. */
template <int K, int THREADS, class Act>
__device__ void chunk_prologue_gates(const chunk_args &a, int32_t slot, int32_t r, int32_t t0,
                                     int32_t c, int32_t h, float *G, float *beta)
{
    const dims &d = a.pro.d;
    const Act *gate = (const Act *)a.pro.gate, *beta_in = (const Act *)a.pro.beta;
    const int32_t tid = threadIdx.x;
    bool finite = true;
    for (int32_t t = tid; t < SSM_CHUNK_TOKENS; t += THREADS) {
        float b = 0.0f;
        if (t < c) {
            const float in = load(beta_in + tcp::input_token(a, r, t0 + t) * d.HV + h);
            finite = finite && isfinite(in);
            b = dev_sigmoid(d, in);
        }
        beta[t] = b;
    }
    /* gate channel e: the value head (GDN), or its key channel x (KDA) */
    const int32_t gk = d.kda ? K : 1;
    for (int32_t i = tid; i < SSM_CHUNK_TOKENS * gk; i += THREADS) {
        const int32_t t = i / gk, e = d.kda ? h * K + i % gk : h;
        float g = 0.0f;
        if (t < c) {
            const float in = load(gate + tcp::input_token(a, r, t0 + t) * d.GW + e);
            finite = finite && isfinite(in);
            g = gate_log_decay(d, a.pro.a_log, a.pro.dt_bias, e, in);
        }
        G[i] = g;
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

/* beta_t v_t of value head h for the chunk's tokens, to out ([C][ld],
 * zeros past c): the conv and SiLU of v's channels, as the prologue
 * kernel's record holds them (rounded to Act), times beta; by `threads`
 * threads, this one `tid` of them (the block's last warps, while its first
 * solve the inverse). Thread tid takes the four channels 4 (tid % (V / 4))
 * of the consecutive tokens of group tid / (V / 4) (C split evenly over a
 * power of two of groups), the window sliding from one token to the next
 * as in chunk_prologue_qk (one load a token, not W); threads past the
 * groups take none. */
template <class Act>
__device__ void chunk_prologue_values(const chunk_args &a, int32_t slot, int32_t r, int32_t t0,
                                      int32_t c, int32_t h, const float *beta, float *out,
                                      int32_t ld, int32_t tid, int32_t threads)
{
    typedef typename conv4<Act>::bits bits;
    using tcp::KEEP;
    using tcp::WIDTH;
    const dims &d = a.pro.d;
    const int32_t quads = d.V / 4, groups = threads / quads;
    int32_t usable = 1; /* the most groups, a power of two, that split the chunk evenly */
    while (2 * usable <= groups && SSM_CHUNK_TOKENS % (2 * usable) == 0)
        usable *= 2;
    const int32_t span = SSM_CHUNK_TOKENS / usable;
    const int32_t e4 = tid % quads, group = tid / quads;
    if (group >= usable)
        return;
    const int32_t first = group * span;
    const int32_t channel = 2 * d.H * d.K + h * d.V + 4 * e4;
    const Act *window = tcp::window_of<Act>(a, slot);
    conv_taps<WIDTH> taps;
    conv_taps_load(d, a.pro.conv_weight, a.pro.conv_bias, channel, true, taps);
    bits raw[WIDTH], next;
    tcp::first_inputs<Act>(a, window, r, t0, first, c, channel, raw, next);
    bool finite = true;
#pragma unroll 2
    for (int32_t s = 0; s < span; s++) {
        const int32_t t = first + s;
        const bool live = t < c;
        const bits now = next;
        float window_f[WIDTH][4], in[4], value[4];
#pragma unroll
        for (int i = 0; i < WIDTH; i++)
            widen4(raw[i], window_f[i]);
        widen4(now, in);
        if (t + 1 < c)
            next = load_bits(tcp::input_at(a, window, r, t0 + t + 1, channel));
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            finite = finite && (!live || isfinite(in[ch]));
        conv_token<WIDTH, Act, true>(d, taps, window_f, in, value);
#pragma unroll
        for (int i = 0; i < KEEP; i++)
            raw[i] = i + 1 < KEEP ? raw[i + 1] : now;
#pragma unroll
        for (int ch = 0; ch < 4; ch++)
            out[t * ld + 4 * e4 + ch] = live ? beta[t] * value[ch] : 0.0f;
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

/* The window a pass of n > 0 tokens leaves in the slot's conv buffer: its
 * last W - 1 inputs (for n < W - 1 the old window's last W - 1 - n before
 * them). Value head h's channels, and for the first value head of a key
 * head that key head's q and k: called by one block per (row, value head),
 * after every prepare block of the pass has read the old window. Raw bits
 * move, as the prologue kernel's write-back moves them. */
template <class Act>
__device__ void chunk_window_advance(const chunk_args &a, int32_t slot, int32_t r, int32_t n,
                                     int32_t h)
{
    typedef typename conv4<Act>::bits bits;
    using tcp::KEEP;
    const dims &d = a.pro.d;
    Act *window = tcp::window_of<Act>(a, slot);
    const int32_t quads_v = d.V / 4, quads_k = h % d.group == 0 ? d.K / 4 : 0;
    const int32_t key_head = h / d.group;
    for (int32_t i = threadIdx.x; i < quads_v + 2 * quads_k; i += blockDim.x) {
        const int32_t channel = i < quads_v       ? 2 * d.H * d.K + h * d.V + 4 * i
                                : i < quads_v + quads_k ? key_head * d.K + 4 * (i - quads_v)
                                                        : d.H * d.K + key_head * d.K +
                                                              4 * (i - quads_v - quads_k);
        bits kept[KEEP];
#pragma unroll
        for (int j = 0; j < KEEP; j++)
            kept[j] = load_bits(tcp::input_at(a, window, r, n - KEEP + j, channel));
#pragma unroll
        for (int j = 0; j < KEEP; j++)
            store_bits(window + (int64_t)j * d.D + channel, kept[j]);
    }
}

} /* namespace ssm */
#endif
