/* Device basics every kernel shares: element types, loads and stores with the
 * rounding of kernels/math.h, the warp reduction, and the flag words.
 *
 * The warp sum is a butterfly (xor 16, 8, 4, 2, 1): every lane ends with the
 * same bits, and a given set of 32 partial sums always reduces in the same
 * order. The recurrence's own row sums use the same idea over the 8 lanes of
 * a row (tile.cuh's group_sum); that, and one op order in every caller, is
 * what makes native, compact and replay agree bit for bit on one device. */
#ifndef SSM_KERNELS_CUDA_DEVICE_CUH
#define SSM_KERNELS_CUDA_DEVICE_CUH

#include <stdint.h>

#include "kernels/math.h"
#include "ssmstate/types.h"

namespace ssm {

/* A bf16 value as its bits; arithmetic happens in fp32. */
struct bf16 {
    uint16_t bits;
};

/* Widening load and rounding store for the two element types. */
__device__ __forceinline__ float load(const float *p) { return *p; }
__device__ __forceinline__ float load(const bf16 *p) { return ssm_bf16_to_f32(p->bits); }
__device__ __forceinline__ void store(float *p, float v) { *p = v; }
__device__ __forceinline__ void store(bf16 *p, float v) { p->bits = ssm_f32_to_bf16(v); }

/* Four consecutive elements (16-byte aligned fp32, 8-byte aligned bf16),
 * widened to fp32, and stored back with rounding. */
__device__ __forceinline__ void load4(const float *p, float *v)
{
    float4 x = *(const float4 *)p;
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
}
/* Four elements' raw bits (bf16 pairs, or fp32) widened to fp32. Zero bits
 * widen to +0. */
__device__ __forceinline__ void widen4(uint2 x, float *v)
{
    v[0] = ssm_f32_from_bits(x.x << 16), v[1] = ssm_f32_from_bits(x.x & 0xffff0000u);
    v[2] = ssm_f32_from_bits(x.y << 16), v[3] = ssm_f32_from_bits(x.y & 0xffff0000u);
}
__device__ __forceinline__ void widen4(uint4 x, float *v)
{
    v[0] = ssm_f32_from_bits(x.x), v[1] = ssm_f32_from_bits(x.y);
    v[2] = ssm_f32_from_bits(x.z), v[3] = ssm_f32_from_bits(x.w);
}
__device__ __forceinline__ void load4(const bf16 *p, float *v)
{
    widen4(*(const uint2 *)p, v);
}
__device__ __forceinline__ void store4(float *p, const float *v)
{
    *(float4 *)p = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void store4(bf16 *p, const float *v)
{
    uint2 x;
    x.x = ssm_f32_to_bf16(v[0]) | ((uint32_t)ssm_f32_to_bf16(v[1]) << 16);
    x.y = ssm_f32_to_bf16(v[2]) | ((uint32_t)ssm_f32_to_bf16(v[3]) << 16);
    *(uint2 *)p = x;
}

/* Four consecutive channels of an activation tensor as raw bits (8 bytes
 * of bf16, 16 of fp32), for moves without arithmetic. */
template <class Act> struct conv4;
template <> struct conv4<bf16> {
    typedef uint2 bits;
};
template <> struct conv4<float> {
    typedef uint4 bits;
};

/* load4 in two steps: the load (raw bits) now, the widening (widen4)
 * later, so that a thread has all of its loads in flight before it uses
 * the first one. */
template <class Act> __device__ __forceinline__ typename conv4<Act>::bits load_bits(const Act *p)
{
    return *(const typename conv4<Act>::bits *)p;
}

/* Raw bits back where load_bits found them: a move, no rounding. */
template <class Act>
__device__ __forceinline__ void store_bits(Act *p, typename conv4<Act>::bits x)
{
    *(typename conv4<Act>::bits *)p = x;
}

/* v as an element of type E holds it (identity for fp32). */
__device__ __forceinline__ float round_to(const float *, float v) { return v; }
__device__ __forceinline__ float round_to(const bf16 *, float v) { return ssm_bf16_round(v); }

/* cp.async of one chunk (four elements); a row past V stages zeros. */
template <class State>
__device__ __forceinline__ void copy_chunk_async(State *shared, const State *global, bool valid)
{
    unsigned dst = (unsigned)__cvta_generic_to_shared(shared);
    int bytes = valid ? 4 * (int)sizeof(State) : 0;
    if constexpr (sizeof(State) == 4)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(global),
                     "r"(bytes)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(global),
                     "r"(bytes)
                     : "memory");
}

__device__ __forceinline__ void copy_async_commit()
{
    asm volatile("cp.async.commit_group;" ::: "memory");
}

/* Waits until at most `pending` of this thread's committed groups are in
 * flight. The "memory" clobbers keep the compiler from moving the stage's
 * plain reads above this wait or below the next copy into the same stage:
 * with no barrier between them, they are what orders the two. */
template <int pending> __device__ __forceinline__ void copy_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(pending) : "memory");
}

/* Programmatic dependent launch (Hopper). A prologue lets the step's
 * recurrence kernel start as soon as every prologue block runs
 * (griddep_launch_dependents); the recurrence kernel asks for its state,
 * which no prologue writes, and waits (griddep_wait) for the prologue's
 * grid to finish, its writes visible, before it reads anything the
 * prologue writes. Without the launch attribute both are no-ops. */
__device__ __forceinline__ void griddep_launch_dependents()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void griddep_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Adds one to *count with acquire-release order at GPU scope and returns the
 * count after this arrival: what every block wrote before it is visible to
 * the block that sees the last arrival. */
__device__ __forceinline__ int32_t arrive(int32_t *count)
{
    int32_t before;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;"
                 : "=r"(before)
                 : "l"(count)
                 : "memory");
    return before + 1;
}

/* The elements e = threadIdx.x, + blockDim.x, + 2 blockDim.x, ... of an
 * [n][per] array as (i, c) = (e / per, e % per), stepped with one
 * division at the start instead of two per element. */
struct block_walk {
    int32_t i, c, per, di, dc;
    __device__ __forceinline__ explicit block_walk(int32_t per_)
        : i((int32_t)threadIdx.x / per_), c((int32_t)threadIdx.x % per_), per(per_),
          di((int32_t)blockDim.x / per_), dc((int32_t)blockDim.x % per_)
    {
    }
    __device__ __forceinline__ void next()
    {
        i += di;
        c += dc;
        if (c >= per) {
            c -= per;
            i++;
        }
    }
};

/* Stores value(i, c) into to[i * per + c] for the block's [n][per]
 * elements. Each thread asks for BATCH of its elements before it stores
 * any, so their loads are in flight together. Every thread of the block
 * calls it; a barrier must follow before `to` is read. */
template <int BATCH, class Value>
__device__ __forceinline__ void stage_elements(float *to, int32_t n, int32_t per, Value value)
{
    const int32_t total = n * per, step = (int32_t)blockDim.x;
    block_walk w(per);
    for (int32_t e = (int32_t)threadIdx.x; e < total; e += BATCH * step) {
        float x[BATCH];
#pragma unroll
        for (int b = 0; b < BATCH; b++) {
            x[b] = e + b * step < total ? value(w.i, w.c) : 0.0f;
            w.next();
        }
#pragma unroll
        for (int b = 0; b < BATCH; b++)
            if (e + b * step < total)
                to[e + b * step] = x[b];
    }
}

/* Sum over the 32 lanes of a warp; every lane gets the same bits. */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

/* Raises flag bits for a slot, or for the out-of-pool word (flags[capacity]). */
__device__ __forceinline__ void raise_flag(uint32_t *flags, int32_t capacity, int32_t slot,
                                           uint32_t bits)
{
    if (!flags)
        return;
    int32_t word = (slot >= 0 && slot < capacity) ? slot : capacity;
    atomicOr(flags + word, bits);
}

/* Whether a row's slot is live. Padding (-1) is skipped silently; any other
 * slot outside [0, capacity) is skipped and raises SSM_FLAG_BAD_SLOT (a
 * replayed graph may carry values the host never checked). */
__device__ __forceinline__ bool slot_is_live(int32_t slot, int32_t capacity, uint32_t *flags,
                                             bool report)
{
    if (slot == -1)
        return false;
    if (slot < 0 || slot >= capacity) {
        if (report)
            raise_flag(flags, capacity, slot, SSM_FLAG_BAD_SLOT);
        return false;
    }
    return true;
}

/* Byte offsets inside one GPU token record: what the one-token update
 * consumes, prepared once by the prologue (prep.cuh) so no recurrence warp
 * repeats it: k [H][K] f32 normalized | v [HV][V] act | decay e^g [GW] f32 |
 * beta [HV] f32, and for replay records u [HV][V] f32 | G sum [GW] |
 * G error [GW]. (The CPU keeps the raw k in the activation dtype and g,
 * kernels/record.h; the two never meet: pages carry materialized states.)
 *
 * Compact's records (make_compact_layout) are smaller and hold two sets:
 * k as the conv gave it in the activation dtype with each key head's 1/norm
 * beside it (k_scale), the decays and beta, twice (set 0, then set 1,
 * set_bytes apart: a verify writes one while its step applies the pending
 * commit's from the other), then one v. v needs no second set: each block
 * of a step writes only its own rows of v, after it has read the pending
 * ones (step_kernel). record_set() gives a set's offsets. */
struct record_layout {
    int64_t k, v, decay, beta, u, gate_sum, gate_error;
    /* 1/norm [H] f32 with k in act; 0 (never its offset: k comes first):
     * k normalized in f32, so that a zeroed layout means the plain record */
    int64_t k_scale;
    int64_t set_bytes; /* compact: set 1's k, k_scale, decay and beta lie this far on */
    int64_t bytes;     /* one record (raw, replay, or compact's two sets and v) */
};

__host__ __device__ inline int64_t align16(int64_t n) { return (n + 15) & ~(int64_t)15; }

inline record_layout make_record_layout(const ssm_model_dims &m, size_t act_size, bool replay)
{
    int64_t gw = m.kind == SSM_MODEL_KDA ? (int64_t)m.value_heads * m.key_dim : m.value_heads;
    record_layout r;
    r.k = 0;
    r.v = align16((int64_t)m.heads * m.key_dim * 4);
    r.decay = r.v + align16((int64_t)m.value_heads * m.value_dim * (int64_t)act_size);
    r.beta = r.decay + align16(gw * 4);
    int64_t raw = r.beta + align16((int64_t)m.value_heads * 4);
    r.u = raw;
    r.gate_sum = r.u + align16((int64_t)m.value_heads * m.value_dim * 4);
    r.gate_error = r.gate_sum + align16(gw * 4);
    r.bytes = replay ? r.gate_error + align16(gw * 4) : raw;
    r.k_scale = 0;
    r.set_bytes = 0;
    return r;
}

/* Compact's record of one token: both sets and v (record_layout's comment). */
inline record_layout make_compact_layout(const ssm_model_dims &m, size_t act_size)
{
    int64_t gw = m.kind == SSM_MODEL_KDA ? (int64_t)m.value_heads * m.key_dim : m.value_heads;
    record_layout r = {};
    r.k = 0;
    r.k_scale = align16((int64_t)m.heads * m.key_dim * (int64_t)act_size);
    r.decay = r.k_scale + align16((int64_t)m.heads * 4);
    r.beta = r.decay + align16(gw * 4);
    r.set_bytes = r.beta + align16((int64_t)m.value_heads * 4);
    r.v = 2 * r.set_bytes;
    r.bytes = r.v + align16((int64_t)m.value_heads * m.value_dim * (int64_t)act_size);
    r.u = r.gate_sum = r.gate_error = r.bytes; /* none: compact keeps no u or gate sums */
    return r;
}

/* One channel of k normalized as the prologue does it (head_normalize:
 * (value * inv) * scale, scale 1 for k), from the conv's value and the
 * head's 1/norm: a compact record keeps those two, so the bits are the
 * same. */
__device__ __forceinline__ float normalized_k(float value, float inv)
{
    return (value * inv) * 1.0f;
}

/* This lane's four channels of k, from channel `index` of [H][K] on, into
 * a record: normalized in fp32 (out), or, where the layout has k_scale, as
 * the conv gave them (value, already rounded to Act) with the head's
 * 1/norm, written by the lane holding the head's first channels. */
template <class Act>
__device__ __forceinline__ void record_store_k(const record_layout &lay, uint8_t *record,
                                               int32_t index, int32_t K,
                                               const float (&value)[4], const float (&out)[4],
                                               float inv)
{
    if (lay.k_scale == 0) {
        store4((float *)(record + lay.k) + index, out);
        return;
    }
    store4((Act *)(record + lay.k) + index, value);
    if (index % K == 0)
        ((float *)(record + lay.k_scale))[index / K] = inv;
}

/* The offsets of record set `set` (0 or 1) of a layout: compact's second
 * set moved by set_bytes, v shared; any other layout has one set. */
__host__ __device__ inline record_layout record_set(record_layout lay, int32_t set)
{
    if (set && lay.set_bytes) {
        lay.k += lay.set_bytes;
        lay.k_scale += lay.set_bytes;
        lay.decay += lay.set_bytes;
        lay.beta += lay.set_bytes;
    }
    return lay;
}

/* The dims a kernel needs, by value. */
struct dims {
    int32_t H, HV, K, V, W, D, GW, group; /* group = HV / H */
    bool kda;
    bool has_lower_bound;
    float lower_bound;
    float query_scale; /* ssm_query_scale(K), computed on the host: the same bits */
    /* The prologue's and the identity's exponentials, divisions and square
     * roots through the hardware's approximations (prep.cuh's dev_* helpers)
     * instead of kernels/math.h's CPU-identical ones. */
    bool fast_math;
    /* The activations' SiLU and q and k norms the same way (prep.cuh's
     * conv_token, head_normalize): a prefill at prefill_precision = fast
     * alone, whose bound leaves room for them. Elsewhere they stay exact. */
    bool fast_activations;
};

inline dims make_dims(const ssm_model_dims &m)
{
    dims d;
    d.H = m.heads;
    d.HV = m.value_heads;
    d.K = m.key_dim;
    d.V = m.value_dim;
    d.W = m.conv_width;
    d.D = (int32_t)(2 * (int64_t)m.heads * m.key_dim + (int64_t)m.value_heads * m.value_dim);
    d.kda = m.kind == SSM_MODEL_KDA;
    d.GW = d.kda ? m.value_heads * m.key_dim : m.value_heads;
    d.group = m.value_heads / m.heads;
    d.has_lower_bound = m.has_lower_bound != 0;
    d.lower_bound = m.lower_bound;
    d.query_scale = ssm_query_scale(m.key_dim);
    d.fast_math = false;
    d.fast_activations = false;
    return d;
}

} /* namespace ssm */
#endif
