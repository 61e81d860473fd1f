/* The prologue of every step on the GPU: per row and token, the short conv
 * (SPEC 2.2 step 1) over the slot's conv buffer, and the gates (step 3).
 * It writes one token record per token (kernels/record.h's layout: post-conv
 * k and v in the activation dtype, g and beta in fp32) and the post-conv q
 * to a per-slot q buffer; the recurrence kernels normalize q and k from
 * those with one function (tile.cuh), so every mode consumes identical bits.
 *
 * One thread per conv channel does all the row's tokens in order, so the
 * conv buffer needs no synchronization: verify stages its inputs in the
 * buffer's tail (commit shifts them in, conv_commit.cuh); decode and prefill
 * advance the window in place. Replay records also get the running gate sum
 * G with Knuth's two-sum error term, as kernels/replay.c computes it. */
#ifndef SSM_KERNELS_CUDA_PREP_CUH
#define SSM_KERNELS_CUDA_PREP_CUH

#include "kernels/cuda/device.cuh"

namespace ssm {

#define SSM_PREP_THREADS 256
#define SSM_PREP_MAX_ROWS 32 /* W - 1 + T: SSM_MAX_CONV_WIDTH - 1 + 1 + SSM_MAX_DRAFT_TOKENS */

struct prep_args {
    dims d;
    int32_t rows, tokens, layer, layers, capacity, max_tokens;
    const int32_t *slots;
    /* Prefill: row r's tokens are token_offsets[r] + piece + t; NULL for
     * decode and verify, whose token (r, t) is r * tokens + t. */
    const int32_t *token_offsets;
    int32_t piece;
    const void *x, *gate, *beta;
    const float *conv_weight, *conv_bias, *a_log, *dt_bias;
    void *conv;        /* [capacity][layers][conv_rows][D] act */
    int32_t conv_rows; /* W - 1 + max_tokens */
    bool stage;        /* verify: stage inputs in the tail; else advance the window */
    /* Record of token t of a slot: records + slot * slot_stride +
     * layer * layer_stride + index(t) * layout.bytes, where index(t) = t, or
     * for a replay ring (ring_n != NULL) (start + n + t) & ring_mask. */
    uint8_t *records;
    int64_t slot_stride, layer_stride;
    record_layout layout;
    const int32_t *ring_n, *ring_start;
    int32_t ring_mask, history;
    void *q; /* [capacity][max_tokens][H][K] act */
    uint32_t *flags;
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
 * n <= L - T_max at every step (n + T + T_max > L folds, the SPEC 3.4 rule
 * n + 2T > L for full-width verifies; a decode folds at n = L - T_max).
 * After a fold the new records start a fresh gate sum. */
__device__ __forceinline__ bool ring_folds(int32_t n, int32_t tokens, int32_t max_tokens,
                                           int32_t history)
{
    return n + tokens + max_tokens > history;
}

template <class Act>
__device__ void prep_conv_channel(const prep_args &a, int32_t slot, int32_t r, int32_t n,
                                  int32_t c, uint8_t *const *record)
{
    const dims &d = a.d;
    Act *buffer = (Act *)a.conv + ((int64_t)slot * a.layers + a.layer) * a.conv_rows * d.D;
    const Act *x = (const Act *)a.x;
    float in[SSM_PREP_MAX_ROWS];
    int32_t keep = d.W - 1;
    bool finite = true;
    for (int32_t i = 0; i < keep; i++)
        in[i] = load(buffer + (int64_t)i * d.D + c);
    for (int32_t t = 0; t < n; t++) {
        in[keep + t] = load(x + input_token(a, r, t) * d.D + c);
        finite = finite && isfinite(in[keep + t]);
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
    int32_t qk = d.H * d.K;
    for (int32_t t = 0; t < n; t++) {
        /* Bias first, then taps oldest to newest: the reference's order. */
        float acc = a.conv_bias ? a.conv_bias[c] : 0.0f;
        for (int32_t i = 0; i < d.W; i++)
            acc += a.conv_weight[(int64_t)c * d.W + i] * in[t + i];
        float out = ssm_silu(acc);
        if (c < qk)
            store((Act *)a.q + ((int64_t)slot * a.max_tokens + t) * qk + c, out);
        else if (c < 2 * qk)
            store((Act *)(record[t] + a.layout.k) + (c - qk), out);
        else
            store((Act *)(record[t] + a.layout.v) + (c - 2 * qk), out);
    }
    if (a.stage) {
        for (int32_t t = 0; t < n; t++)
            store(buffer + (int64_t)(keep + t) * d.D + c, in[keep + t]);
    } else if (n > 0) {
        for (int32_t i = 0; i < keep; i++)
            store(buffer + (int64_t)i * d.D + c, in[n + i]);
    }
}

template <class Act>
__device__ void prep_gate(const prep_args &a, int32_t slot, int32_t r, int32_t n, int32_t e,
                          uint8_t *const *record, const uint8_t *previous)
{
    const dims &d = a.d;
    int32_t h = d.kda ? e / d.K : e;
    const Act *gate = (const Act *)a.gate;
    float sum = 0.0f, error = 0.0f;
    if (previous) {
        sum = ((const float *)(previous + a.layout.gate_sum))[e];
        error = ((const float *)(previous + a.layout.gate_error))[e];
    }
    bool finite = true;
    for (int32_t t = 0; t < n; t++) {
        float in = load(gate + input_token(a, r, t) * d.GW + e);
        finite = finite && isfinite(in);
        float g = d.kda ? ssm_kda_gate(a.a_log[h], in, a.dt_bias[e], d.has_lower_bound,
                                       d.lower_bound)
                        : ssm_gdn_gate(a.a_log[h], in, a.dt_bias[h]);
        ((float *)(record[t] + a.layout.g))[e] = g;
        if (!a.ring_n)
            continue;
        if (t == 0 && !previous) {
            sum = g;
            error = 0.0f;
        } else {
            float next = sum + g;
            float g_part = next - sum;
            float rounding = (sum - (next - g_part)) + (g - g_part);
            sum = next;
            error = error + rounding;
        }
        ((float *)(record[t] + a.layout.gate_sum))[e] = sum;
        ((float *)(record[t] + a.layout.gate_error))[e] = error;
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

template <class Act>
__device__ void prep_beta(const prep_args &a, int32_t slot, int32_t r, int32_t n, int32_t h,
                          uint8_t *const *record)
{
    const Act *beta = (const Act *)a.beta;
    bool finite = true;
    for (int32_t t = 0; t < n; t++) {
        float in = load(beta + input_token(a, r, t) * a.d.HV + h);
        finite = finite && isfinite(in);
        ((float *)(record[t] + a.layout.beta))[h] = ssm_sigmoid(in);
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, slot, SSM_FLAG_NONFINITE_INPUT);
}

/* grid (ceil(max(D, GW) / SSM_PREP_THREADS), rows), SSM_PREP_THREADS threads. */
template <class Act>
__global__ void __launch_bounds__(SSM_PREP_THREADS) prep_kernel(prep_args a)
{
    int32_t r = blockIdx.y;
    int32_t slot = a.slots[r];
    int32_t e = blockIdx.x * blockDim.x + threadIdx.x;
    if (!slot_is_live(slot, a.capacity, a.flags, e == 0))
        return;
    int32_t n = row_tokens(a, r);
    if (n == 0)
        return;
    uint8_t *base = a.records + (int64_t)slot * a.slot_stride + (int64_t)a.layer * a.layer_stride;
    uint8_t *record[SSM_PREP_MAX_ROWS];
    const uint8_t *previous = NULL;
    if (a.ring_n) {
        int64_t cell = (int64_t)slot * a.layers + a.layer;
        int32_t used = a.ring_n[cell], start = a.ring_start[cell];
        for (int32_t t = 0; t < n; t++)
            record[t] = base + (int64_t)((start + used + t) & a.ring_mask) * a.layout.bytes;
        if (used > 0 && !ring_folds(used, a.tokens, a.max_tokens, a.history))
            previous = base + (int64_t)((start + used - 1) & a.ring_mask) * a.layout.bytes;
    } else {
        for (int32_t t = 0; t < n; t++)
            record[t] = base + (int64_t)t * a.layout.bytes;
    }
    if (e < a.d.D)
        prep_conv_channel<Act>(a, slot, r, n, e, record);
    if (e < a.d.GW)
        prep_gate<Act>(a, slot, r, n, e, record, previous);
    if (e < a.d.HV)
        prep_beta<Act>(a, slot, r, n, e, record);
}

} /* namespace ssm */
#endif
