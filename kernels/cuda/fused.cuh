/* Decode and verify in one launch: the prologue's work (conv, SiLU, q and k
 * normalization, gates and beta; prep.cuh) done inside the recurrence
 * kernel, so nothing goes through memory between the two and there is no
 * second launch.
 *
 * Each block runs tiles [first, last) of one value head of one row, as
 * tile_kernel does (tile.cuh), and first computes into shared memory what
 * its tiles need of the step's T tokens: q and k of its key head (every
 * block of that key head computes them again: 2K channels a token, against
 * the V x K state it moves), v of its own value rows, the gates and beta
 * of its head. The first tile's state is on its way (cp.async) meanwhile.
 * Then each tile's state stays in registers across the T tokens, whose
 * inputs come from shared memory, and the next tile's state streams in.
 *
 * The per-token math is prep.cuh's, function for function, and the update
 * is tile_token: the states, outputs, records and windows are the bits of
 * the prologue and the tile job run one after the other, so every mode
 * still agrees bit for bit whichever path a step takes.
 *
 * The conv buffer. A verify reads the window (rows [0, W-1)) and stages its
 * inputs after it, for the commit: no one writes what anyone reads, and
 * one block per channel stages (q and k: the first block of the key head's
 * first value head; v: the block of those rows). A decode advances the
 * window in place. A block writes the new window of its own value rows
 * right after reading it: nobody else reads those. q and k's channels are
 * read by every block of the key head (group value heads, each in
 * tile_blocks_per_head blocks), so only the last of them to arrive writes
 * them: each block counts itself in arrivals[slot][layer][key head] after
 * its reads, and the one that brings the count to the total writes the
 * window from its registers once its tiles are done (their work hides the
 * count's round trip) and sets the count back to zero. The counters
 * are zero between steps, so a step captured in a graph replays with them.
 * Two rows naming one slot would break the count (as they break every
 * step, docs/architecture.md); a reset of the slot clears it. */
#ifndef SSM_KERNELS_CUDA_FUSED_CUH
#define SSM_KERNELS_CUDA_FUSED_CUH

#include "kernels/cuda/tile.cuh"

namespace ssm {

/* What the in-kernel prologue reads and writes besides the state. */
struct step_inputs {
    const void *x, *gate, *beta; /* token t of row r at r * T + t */
    const float *conv_weight, *conv_bias, *a_log, *dt_bias;
    void *conv;         /* [capacity][layers][conv_rows][D] act */
    int32_t conv_rows;
    bool stage;         /* verify: inputs staged after the window; decode: it advances */
    int32_t *arrivals;  /* decode: [capacity][layers][H], zero between steps */
    /* A replay decode that folds (step_kernel's HISTORY): the blocks of a
     * (slot, layer) that have arrived, [capacity][layers], zero between
     * steps; the last one empties the ring (step_window_arrive). */
    int32_t *cell_arrivals;
    /* Records of the tokens for a commit to replay (compact), as prep.cuh
     * writes them: token t of a slot at records + slot * slot_stride +
     * layer * layer_stride + t * layout.bytes. NULL: none. */
    uint8_t *records;
    int64_t slot_stride, layer_stride;
    /* With a pending commit (tile_args.pending), a verify writes the set
     * pending_write_set() picks: record_set(layout, step_place.record_set). */
    record_layout layout;
};

/* One token as a block's tiles consume it. */
template <int K, bool KDA> struct __align__(16) step_token {
    float q[K], k[K];         /* q normalized and scaled, k normalized */
    float decay[KDA ? K : 4]; /* e^g: per key channel (KDA) or decay[0] */
    float beta;
};

/* Shared memory of a block: T tokens, then T x `rows` values of v. */
template <int K, bool KDA>
__host__ __device__ inline size_t step_shared_bytes(int32_t tokens, int32_t rows)
{
    return (size_t)tokens * (sizeof(step_token<K, KDA>) + (size_t)rows * sizeof(float));
}

/* Where a block is: its job, its tiles, its value rows [row_first, row_end). */
struct step_place {
    tile_job j;
    int32_t first, last, per_head, row_first, row_end, key_head;
    int32_t record_set; /* the set of in.records this step writes */
    bool writes_qk; /* stages (and records) q and k: first block of the key head's first head */
};

/* Conv group g of a block: four channels at `c` of the row's D, at `at`
 * within q, k or the block's value rows. Group order: [0, K/4) q of the key
 * head, [K/4, K/2) k, then the block's value rows. */
struct step_group {
    int32_t at, c;
    bool live, is_qk, is_q;
};

template <int K>
__device__ __forceinline__ step_group step_group_of(const dims &d, const step_place &p, int32_t g)
{
    const int32_t qk_groups = K / 2, groups = qk_groups + (p.row_end - p.row_first) / 4;
    step_group s;
    s.live = g < groups;
    s.is_qk = g < qk_groups;
    s.is_q = g < K / 4;
    s.at = s.is_q ? 4 * g : s.is_qk ? 4 * (g - K / 4) : 4 * (g - qk_groups);
    s.c = s.is_q    ? p.key_head * K + s.at
          : s.is_qk ? d.H * K + p.key_head * K + s.at
                    : 2 * d.H * K + p.j.h * d.V + p.row_first + s.at;
    return s;
}

/* Threads of a step block. */
#define SSM_STEP_THREADS (32 * SSM_TILE_WARPS)

/* The first of a thread's beta tokens: token t goes to the thread whose
 * distance from the block's last thread is T * count + t (mod the block),
 * so the gates' threads are not counted twice. */
__device__ __forceinline__ int32_t step_beta_first(int32_t T, int32_t count)
{
    const int32_t bd = SSM_STEP_THREADS, from_top = bd - 1 - (int32_t)threadIdx.x;
    return (from_top + bd - T * count % bd) % bd;
}

/* A thread's first loads of the prologue: its first conv group's inputs
 * (token 0, and once the slot is known its window rows; its taps are only
 * prefetched, as holding them would spill) and its first gate and beta
 * inputs. None but the window needs the slot, so they go out before the
 * slot's load, and the window before the state's address: the prologue's
 * loads lead the state's stream instead of queueing behind it. */
template <class Act> struct step_early {
    typename conv4<Act>::bits raw[4], next;
    float gate, a_log, bias, beta; /* raw gate and beta inputs; the head's a_log, the bias */
};

template <int K, bool KDA, class Act>
__device__ __forceinline__ void step_early_inputs(const tile_args &a, const step_inputs &in,
                                                  const step_place &p, step_early<Act> &e)
{
    const dims &d = a.d;
    const tile_job &j = p.j;
    const int32_t T = a.tokens, count = KDA ? K : 1;
    const step_group g = step_group_of<K>(d, p, (int32_t)threadIdx.x);
    e.next = {};
    if (g.live && T > 0)
        e.next = load_bits((const Act *)in.x + (int64_t)j.r * T * d.D + g.c);
    if (g.live) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(in.conv_weight + (int64_t)g.c * d.W));
        if (in.conv_bias)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(in.conv_bias + g.c));
    }
    const int32_t from_top = SSM_STEP_THREADS - 1 - (int32_t)threadIdx.x;
    e.gate = e.a_log = e.bias = e.beta = 0.0f;
    if (from_top < T * count) {
        const int32_t t = from_top / count, ch = KDA ? j.h * K + from_top % count : j.h;
        e.gate = load((const Act *)in.gate + ((int64_t)j.r * T + t) * d.GW + ch);
        e.a_log = in.a_log[j.h];
        e.bias = in.dt_bias[ch];
    }
    const int32_t t = step_beta_first(T, count);
    if (t < T)
        e.beta = load((const Act *)in.beta + ((int64_t)j.r * T + t) * d.HV + j.h);
}

template <int K, class Act>
__device__ __forceinline__ void step_early_window(const tile_args &a, const step_inputs &in,
                                                  const step_place &p, step_early<Act> &e)
{
    const dims &d = a.d;
    const step_group g = step_group_of<K>(d, p, (int32_t)threadIdx.x);
    const Act *buffer = (const Act *)in.conv + (p.j.cell * in.conv_rows) * d.D;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        e.raw[i] = {};
        if (g.live && i < d.W - 1)
            e.raw[i] = load_bits(buffer + (int64_t)i * d.D + g.c);
    }
}

/* The conv of a block's channels for the row's T tokens. Group g of four
 * channels: [0, K/4) q of the key head, [K/4, K/2) k, then the block's
 * value rows. Threads take groups in order, so a head of q or k is K/4
 * consecutive lanes of a warp as in prep_conv, and its norm adds in that
 * order. A decode's q/k threads keep the advanced window in `window` and
 * return true; its v threads store theirs at once. A thread asks for its
 * window rows and first token together (prep_conv does the same); EXACT:
 * the conv width is 4 (conv_width). */
template <int K, bool KDA, class Act, bool EXACT>
__device__ __forceinline__ bool step_conv(const tile_args &a, const step_inputs &in,
                                          const step_place &p, const step_early<Act> &early,
                                          step_token<K, KDA> *tok, float *v,
                                          typename conv4<Act>::bits (&window)[4],
                                          int32_t &channel)
{
    typedef typename conv4<Act>::bits bits;
    const dims &d = a.d;
    const tile_job &j = p.j;
    const int32_t keep = conv_width<4, EXACT>(d) - 1, T = a.tokens,
                  rows = p.row_end - p.row_first;
    const int32_t groups = K / 2 + rows / 4;
    Act *buffer = (Act *)in.conv + (j.cell * in.conv_rows) * d.D;
    const Act *x = (const Act *)in.x + (int64_t)j.r * T * d.D;
    uint8_t *records = in.records ? in.records + (int64_t)j.slot * in.slot_stride +
                                        (int64_t)j.layer * in.layer_stride
                                  : (uint8_t *)0;
    const record_layout lay = record_set(in.layout, p.record_set);
    bool finite = true, holds_qk = false;
    /* Iteration 0 holds every q/k group (K / 2 <= 64 < blockDim.x), so its
       shuffles have the whole warp; later ones only value rows. A warp
       whose first thread is past the last group (a GDN block's last warp:
       its threads run the gates) has nothing to convolve and no shuffle
       partner, so it skips the loop instead of running it on zeros. */
    const bool warp_has_groups = ((int32_t)threadIdx.x & ~31) < groups;
    for (int32_t g = (int32_t)threadIdx.x, pass0 = warp_has_groups; pass0 || g < groups;
         g += (int32_t)blockDim.x, pass0 = 0) {
        const step_group s = step_group_of<K>(d, p, g);
        const bool live = s.live, is_qk = s.is_qk, is_q = s.is_q;
        const int32_t at = s.at, c = s.c;
        const bool writer = live && (!is_qk || p.writes_qk);
        bits raw[4], next = {};
        if (g == (int32_t)threadIdx.x) { /* asked for at the kernel's entry */
#pragma unroll
            for (int i = 0; i < 4; i++)
                raw[i] = early.raw[i];
            next = early.next;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                raw[i] = bits{};
                if (live && i < keep)
                    raw[i] = load_bits(buffer + (int64_t)i * d.D + c);
            }
            if (live && T > 0)
                next = load_bits(x + c);
        }
        conv_taps<4> taps;
        conv_taps_load(d, in.conv_weight, in.conv_bias, c, live, taps);
        for (int32_t t = 0; t < T; t++) {
            const bits now_bits = next;
            float win[4][4], now[4], value[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                widen4(raw[i], win[i]);
            widen4(now_bits, now);
            if (live && t + 1 < T)
                next = load_bits(x + (int64_t)(t + 1) * d.D + c);
#pragma unroll
            for (int ch = 0; ch < 4; ch++)
                finite = finite && isfinite(now[ch]);
            float squares = conv_token<4, Act, EXACT>(d, taps, win, now, value);
#pragma unroll
            for (int i = 0; i < 4; i++) { /* the window's bits advance as conv_token's floats */
                if (i < keep - 1)
                    raw[i] = raw[i + 1 < 4 ? i + 1 : i];
                else if (i == keep - 1)
                    raw[i] = now_bits;
            }
            if (pass0)
                squares = head_squares(live && is_qk ? squares : 0.0f, K);
            if (in.stage && writer)
                store_bits(buffer + (int64_t)(keep + t) * d.D + c, now_bits);
            if (!live)
                continue;
            uint8_t *record = records ? records + (int64_t)t * lay.bytes : (uint8_t *)0;
            if (is_qk) {
                float out[4];
                float inv = head_normalize(d, value, squares, is_q ? d.query_scale : 1.0f, out);
                store4((is_q ? tok[t].q : tok[t].k) + at, out);
                if (record && !is_q && writer)
                    record_store_k<Act>(lay, record, p.key_head * K + at, K, value, out, inv);
            } else {
                store4(v + (int64_t)t * rows + at, value); /* records: step_records_v */
            }
        }
        if (in.stage || !live)
            continue;
        if (is_qk) {
#pragma unroll
            for (int i = 0; i < 4; i++)
                window[i] = raw[i];
            channel = c;
            holds_qk = true;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++)
                if (i < keep)
                    store_bits(buffer + (int64_t)i * d.D + c, raw[i]);
        }
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, j.slot, SSM_FLAG_NONFINITE_INPUT);
    return holds_qk;
}

/* The gates and beta of the block's value head for the row's T tokens
 * (and their records, by the head's first block). They go to the block's
 * last threads, which have no conv channels in a GDN step (2K + its value
 * rows < the block's threads), so their loads and transcendentals run
 * beside the conv rather than after it on the same thread. */
template <int K, bool KDA, class Act>
__device__ __forceinline__ void step_gates(const tile_args &a, const step_inputs &in,
                                           const step_place &p, const step_early<Act> &early,
                                           step_token<K, KDA> *tok)
{
    const dims &d = a.d;
    const tile_job &j = p.j;
    const int32_t count = KDA ? K : 1, T = a.tokens;
    uint8_t *records = in.records && p.first == 0
                           ? in.records + (int64_t)j.slot * in.slot_stride +
                                 (int64_t)j.layer * in.layer_stride
                           : (uint8_t *)0;
    const record_layout lay = record_set(in.layout, p.record_set);
    bool finite = true;
    const int32_t from_top = SSM_STEP_THREADS - 1 - (int32_t)threadIdx.x;
    for (int32_t i = from_top; i < T * count; i += SSM_STEP_THREADS) {
        int32_t t = i / count, e = KDA ? j.h * K + i % count : j.h;
        /* the first inputs were asked for at the kernel's entry */
        const bool first = i == from_top;
        float raw = first ? early.gate
                          : load((const Act *)in.gate + ((int64_t)j.r * T + t) * d.GW + e);
        const float bias = first || !KDA ? early.bias : in.dt_bias[e];
        finite = finite && isfinite(raw);
        float decay = dev_expf(d, gate_log_decay_of(d, early.a_log, bias, raw));
        tok[t].decay[i % count] = decay;
        if (records)
            ((float *)(records + (int64_t)t * lay.bytes + lay.decay))[e] = decay;
    }
    const int32_t beta_first = step_beta_first(T, count);
    for (int32_t t = beta_first; t < T; t += SSM_STEP_THREADS) {
        float raw = t == beta_first
                        ? early.beta
                        : load((const Act *)in.beta + ((int64_t)j.r * T + t) * d.HV + j.h);
        finite = finite && isfinite(raw);
        tok[t].beta = dev_sigmoid(d, raw);
        if (records)
            ((float *)(records + (int64_t)t * lay.bytes + lay.beta))[j.h] = tok[t].beta;
    }
    if (!finite)
        raise_flag(a.flags, a.capacity, j.slot, SSM_FLAG_NONFINITE_INPUT);
}

/* The block's rows of v of the row's T tokens into their records (a
 * compact verify), from shared memory after the prologue's barrier: a
 * record has one v, whose pending rows this block read before that barrier
 * (step_pending_stage). The values were rounded to Act by the conv, so the
 * store is exact. */
template <class Act>
__device__ __forceinline__ void step_records_v(const tile_args &a, const step_inputs &in,
                                               const step_place &p, const float *v)
{
    const int32_t rows = p.row_end - p.row_first, quads = rows / 4;
    uint8_t *records = in.records + (int64_t)p.j.slot * in.slot_stride +
                       (int64_t)p.j.layer * in.layer_stride + in.layout.v;
    for (int32_t i = (int32_t)threadIdx.x; i < a.tokens * quads; i += (int32_t)blockDim.x) {
        const int32_t t = i / quads, at = 4 * (i % quads);
        store4((Act *)(records + (int64_t)t * in.layout.bytes) + (int64_t)p.j.h * a.d.V +
                   p.row_first + at,
               v + (int64_t)t * rows + at);
    }
}

/* A folding decode's ring (step_kernel's HISTORY): the committed records
 * every block applies before the token, read before the block's arrival. */
struct step_ring {
    const uint8_t *base;
    int32_t first, used;
};

__device__ __forceinline__ step_ring step_ring_of(const tile_args &a, const tile_job &j)
{
    step_ring r;
    r.base = a.ring + (int64_t)j.slot * a.ring_slot_stride + (int64_t)j.layer * a.ring_layer_stride;
    r.first = a.ring_start[j.cell];
    r.used = a.ring_n[j.cell];
    return r;
}

/* A decode's q and k window as the block's q/k threads hold it (the
 * window advanced, step_conv) and the block's place in the arrival count. */
template <class Act> struct step_window_regs {
    typename conv4<Act>::bits window[4]; /* raw bits, as read: written back without rounding */
    int32_t channel;
    bool holds_qk;
    int32_t arrived; /* thread 0: the count its block's arrival brought */
    int32_t cell_arrived; /* thread 0, HISTORY: the same for the (slot, layer)'s ring, or 0 */
};

/* A decode block counts itself among those that read its key head's q and
 * k window (see the top of this file). Thread 0 asks, after the barrier
 * that follows the block's reads; the answer is used only at the end of
 * the block (step_window_write), so the tiles' work hides the atomic's
 * round trip. The add releases those reads (the barrier orders them before
 * it) and acquires every earlier block's, so the block that brings the
 * count to the total writes after all of them without a fence of its own.
 * HISTORY with a non-empty ring: the block counts itself the same way among
 * the (slot, layer)'s blocks, which all read the ring's cursors before
 * arriving, and the last of them empties the ring at its end. An empty
 * ring is left as it is, and its count never moves. */
template <class Act, bool HISTORY>
__device__ __forceinline__ void step_window_arrive(const tile_args &a, const step_inputs &in,
                                                   const step_place &p, const step_ring &ring,
                                                   step_window_regs<Act> &w)
{
    if (threadIdx.x != 0)
        return;
    w.arrived = arrive(in.arrivals + p.j.cell * a.d.H + p.key_head);
    w.cell_arrived = HISTORY && ring.used > 0 ? arrive(in.cell_arrivals + p.j.cell) : 0;
}

/* The last block of a key head to arrive writes that head's q and k
 * window, after its tiles. Only the warps holding q and k channels (the
 * first K / 2 threads) meet, on a named barrier. */
template <class Act, bool HISTORY>
__device__ __forceinline__ void step_window_write(const tile_args &a, const step_inputs &in,
                                                  const step_place &p,
                                                  const step_window_regs<Act> &w,
                                                  const step_ring &ring)
{
    __shared__ int32_t last_arrival;
    const int32_t qk_threads = (a.d.K / 2 + 31) / 32 * 32;
    if ((int32_t)threadIdx.x >= qk_threads)
        return;
    if (threadIdx.x == 0) {
        last_arrival = w.arrived == a.d.group * p.per_head;
        if (last_arrival)
            atomicExch(in.arrivals + p.j.cell * a.d.H + p.key_head, 0);
        if (HISTORY && w.cell_arrived == a.d.HV * p.per_head) { /* the ring's last block */
            int32_t *start = (int32_t *)a.ring_start, *n = (int32_t *)a.ring_n;
            start[p.j.cell] = (ring.first + ring.used) & a.ring_mask;
            n[p.j.cell] = 0;
            in.cell_arrivals[p.j.cell] = 0;
        }
    }
    asm volatile("bar.sync 1, %0;" ::"r"(qk_threads) : "memory");
    if (!last_arrival || !w.holds_qk)
        return;
    Act *buffer = (Act *)in.conv + (p.j.cell * in.conv_rows) * a.d.D + w.channel;
#pragma unroll
    for (int i = 0; i < 4; i++)
        if (i < a.d.W - 1)
            store_bits(buffer + (int64_t)i * a.d.D, w.window[i]);
}

/* Where the block is (p), from its indexes alone: grid (blocks a head,
 * value heads, rows), so no division stands before the first load. */
__device__ __forceinline__ void step_place_indexes(const tile_args &a, step_place &p)
{
    constexpr int RPL = SSM_TILE_RPL;
    const dims &d = a.d;
    const int32_t tiles = tiles_per_head(d.V, RPL);
    p.per_head = (int32_t)gridDim.x;
    p.first = (int32_t)blockIdx.x * a.passes;
    p.last = p.first + a.passes < tiles ? p.first + a.passes : tiles;
    tile_job &j = p.j;
    j.r = (int32_t)blockIdx.z;
    j.layer = a.layer;
    j.h = blockIdx.y;
    j.n_tokens = a.tokens;
    p.key_head = j.h / d.group;
    p.writes_qk = p.first == 0 && j.h % d.group == 0;
    p.row_first = p.first * tile_rows(RPL);
    p.row_end = p.last * tile_rows(RPL) < d.V ? p.last * tile_rows(RPL) : d.V;
}

/* The block's slot, as loaded from a.slots[j.r]. False: its row is padding
 * or flagged, nothing to do. */
__device__ __forceinline__ bool step_place_slot(const tile_args &a, step_place &p, int32_t slot)
{
    tile_job &j = p.j;
    j.slot = slot;
    bool reporter = p.first == 0 && j.h == 0 && threadIdx.x == 0;
    if (!slot_is_live(j.slot, a.capacity, a.flags, reporter))
        return false;
    j.cell = (int64_t)j.slot * a.layers + j.layer;
    return true;
}

/* What a block does before its tiles: the T tokens and its value rows of
 * v into shared memory (tok, v), the inputs staged (verify) or the window
 * advanced (decode: v's rows now, q and k's in w for step_window_write). */
template <int E, bool KDA, class Act, bool EXACT, bool HISTORY>
__device__ __forceinline__ void step_prologue(const tile_args &a, const step_inputs &in,
                                              const step_place &p, const step_early<Act> &early,
                                              const step_ring &ring, step_token<8 * E, KDA> *tok,
                                              float *v, step_window_regs<Act> &w)
{
    constexpr int K = 8 * E;
    w.channel = 0;
    w.holds_qk = step_conv<K, KDA, Act, EXACT>(a, in, p, early, tok, v, w.window, w.channel);
    step_gates<K, KDA, Act>(a, in, p, early, tok);
    __syncthreads(); /* the window is read, tokens and v are in shared memory */
    if (!in.stage)
        step_window_arrive<Act, HISTORY>(a, in, p, ring, w);
}

/* A token from shared memory (tok, and its v rows from the block's first
 * row on) into this lane's registers. */
template <int E, bool KDA, class State>
__device__ __forceinline__ void step_token_regs(const tile_args &a, const step_place &p,
                                                const step_token<8 * E, KDA> &tok,
                                                const float *v,
                                                const head_tile<E, SSM_TILE_RPL, State> &t,
                                                token_regs<E, SSM_TILE_RPL, KDA> &tk)
{
    load_lane<E>(tok.k, t.sub, tk.k);
    if constexpr (KDA)
        load_lane<E>(tok.decay, t.sub, tk.decay);
    else
        tk.decay[0] = tok.decay[0];
    tk.beta = tok.beta;
#pragma unroll
    for (int r = 0; r < SSM_TILE_RPL; r++) {
        int32_t row = tile_row(t, r);
        tk.v[r] = row < a.d.V ? v[row - p.row_first] : 0.0f;
    }
}

/* The records of a pending commit (compact, `code`) as the block's tiles
 * apply them: k of its key head, the decays and beta of its head, v of its
 * rows, into ptok and pv (laid out as the step's tokens), asked for by
 * every thread at once, so each tile then applies them from shared memory
 * instead of waiting on each record. The caller's barrier after it lets
 * the block's prologue write its own new rows of v over them. */
template <int K, bool KDA, class Act>
__device__ __forceinline__ void step_pending_stage(const tile_args &a, const step_place &p,
                                                   uint32_t code, step_token<K, KDA> *ptok,
                                                   float *pv)
{
    const dims &d = a.d;
    const tile_job &j = p.j;
    const pending_args &pa = a.pending;
    const record_layout lay = record_set(pa.layout, (code & SSM_PENDING_SET) ? 1 : 0);
    const uint8_t *base =
        pa.records + (int64_t)j.slot * pa.slot_stride + (int64_t)j.layer * pa.layer_stride;
    const int32_t count = (int32_t)(code & SSM_PENDING_COUNT), rows = p.row_end - p.row_first;
    const int32_t decays = KDA ? K : 1, per = K + decays + 1 + rows;
#pragma unroll 4
    for (int32_t i = (int32_t)threadIdx.x; i < count * per; i += (int32_t)blockDim.x) {
        const int32_t t = i / per, e = i % per;
        const uint8_t *record = base + (int64_t)t * lay.bytes;
        if (e < K && lay.k_scale > 0)
            ptok[t].k[e] =
                normalized_k(load((const Act *)(record + lay.k) + (int64_t)p.key_head * K + e),
                             ((const float *)(record + lay.k_scale))[p.key_head]);
        else if (e < K)
            ptok[t].k[e] = ((const float *)(record + lay.k))[(int64_t)p.key_head * K + e];
        else if (e < K + decays)
            ptok[t].decay[e - K] =
                ((const float *)(record + lay.decay))[KDA ? (int64_t)j.h * K + e - K : j.h];
        else if (e == K + decays)
            ptok[t].beta = ((const float *)(record + lay.beta))[j.h];
        else
            pv[(int64_t)t * rows + e - K - decays - 1] =
                load((const Act *)(record + lay.v) + (int64_t)j.h * d.V + p.row_first +
                     (e - K - decays - 1));
    }
}

/* The staged records of a pending commit through one tile (no outputs). */
template <int E, bool KDA, class State>
__device__ __forceinline__ void step_apply_pending(const tile_args &a, const step_place &p,
                                                   uint32_t code, const step_token<8 * E, KDA> *ptok,
                                                   const float *pv,
                                                   head_tile<E, SSM_TILE_RPL, State> &t)
{
    constexpr int RPL = SSM_TILE_RPL;
    const int32_t rows = p.row_end - p.row_first, count = (int32_t)(code & SSM_PENDING_COUNT);
    const uint32_t layout = (code & SSM_PENDING_LAYOUT) ? 1u : 0u;
    for (int32_t i = 0; i < count; i++) {
        token_regs<E, RPL, KDA> tk;
        step_token_regs(a, p, ptok[i], pv + (int64_t)i * rows, t, tk);
        float unused[RPL];
        tile_token<E, RPL, KDA, State>(t, tk, (const float *)0, unused, layout);
    }
}

/* The step's tokens through one tile whose state is in registers, and its
 * stores: outputs, snapshots (STORE_EACH), the final state (STORE_FINAL). */
template <int E, bool KDA, class State, class Act>
__device__ __forceinline__ void step_tile_tokens(const tile_args &a, const step_place &p,
                                                 const step_token<8 * E, KDA> *tok,
                                                 const float *v,
                                                 head_tile<E, SSM_TILE_RPL, State> &t,
                                                 State *source)
{
    constexpr int RPL = SSM_TILE_RPL;
    const dims &d = a.d;
    const tile_job &j = p.j;
    const int32_t rows = p.row_end - p.row_first;
    for (int32_t i = 0; i < a.tokens; i++) {
        token_regs<E, RPL, KDA> tk;
        step_token_regs(a, p, tok[i], v + (int64_t)i * rows, t, tk);
        float o[RPL];
        tile_token<E, RPL, KDA, State>(t, tk, a.out ? tok[i].q : (const float *)0, o, a.layout);
        if (a.out)
            store_outputs((Act *)a.out + (((int64_t)j.r * a.tokens + i) * d.HV + j.h) * d.V, d,
                          t, o);
        if (a.store == STORE_EACH)
            tile_store(t, d, state_head<State>(a, j.slot, j.layer, i, j.h));
    }
    if (a.store == STORE_FINAL)
        tile_store(t, d, source);
}

/* grid (tile_blocks_per_head(V, a.passes), HV, rows), SSM_STEP_THREADS
 * threads, step_shared_bytes(T + P, a.passes * tile_rows(RPL) capped at V)
 * of dynamic shared memory, P = max_tokens where a commit can be pending
 * (PENDING: a.pending.codes is set), else 0; without PENDING the kernel
 * has no code for it at all. a.tokens tokens a row, no history; the conv
 * width is at most 4, and EXACT: it is 4 (conv_width; the kernel of the exact
 * width holds no code for the others, so ptxas allocates its registers
 * alone: beside the runtime-width path it kept a 96-byte stack), and FAST:
 * a.d.fast_math, fixed at compile time so that the kernel holds only the
 * gates' functions it runs. Decode:
 * a.store STORE_FINAL and in.stage false;
 * native verify: STORE_EACH; compact verify: STORE_NONE with records, after
 * the pending commit (staged with the step's tokens, applied to each tile
 * and stored before the tile's own tokens).
 * HISTORY: a replay decode that folds (in.cell_arrivals set): a.state is
 * the checkpoint, and each tile applies the cell's committed ring records
 * (a.ring, a.ring_n, a.ring_start) before the token and is stored back;
 * the ring is then empty (step_window_arrive). Without HISTORY the kernel
 * holds no ring code.
 * The first tile's state is staged (cp.async) during the prologue, each
 * next one while the block updates the one before. */
template <int E, bool KDA, class State, class Act, bool PENDING, bool HISTORY, bool EXACT,
          bool FAST>
__global__ void __launch_bounds__(SSM_STEP_THREADS, 4) step_kernel(tile_args a, step_inputs in)
{
    a.d.fast_math = FAST; /* the launch chose FAST from it: now a constant */
    a.d.fast_activations = false; /* a prefill's alone: no code for it here */
    constexpr int RPL = SSM_TILE_RPL, K = 8 * E;
    __shared__ tile_stage<E, RPL, State> stage[SSM_TILE_STAGES];
    extern __shared__ __align__(16) uint8_t step_shared[];
    step_place p;
    step_place_indexes(a, p);
    const int32_t slot = a.slots[p.j.r]; /* first out: everything else waits on it */
    step_early<Act> early;
    step_early_inputs<K, KDA, Act>(a, in, p, early);
    if (!step_place_slot(a, p, slot))
        return;
    step_early_window<K, Act>(a, in, p, early);
    step_ring ring = {};
    if (HISTORY) /* before the block's arrival, after which the ring may empty */
        ring = step_ring_of(a, p.j);
    State *source =
        state_head<State>(a, p.j.slot, p.j.layer, a.current ? a.current[p.j.slot] : 0, p.j.h);
    tile_stage_async(stage[0], a.d, source, p.first);
    copy_async_commit();
    /* A pending commit (compact) is read before anyone clears it; this
       step's records go to the other set (v, which has one, to the block's
       own rows after the prologue's barrier), and its commit is told which. */
    const uint32_t first_code = PENDING ? pending_at(a, p.j, p.first) : 0u;
    p.record_set = PENDING ? pending_write_set(first_code) : 0;
    if (PENDING && in.records && p.first == 0 && p.j.h == 0 && threadIdx.x == 0)
        a.pending.written[p.j.cell] = (uint8_t)p.record_set;
    /* Shared memory: the step's tokens, then the pending commit's records
       (up to max_tokens where a commit can be pending), then their v rows. */
    const int32_t slots = a.tokens + (PENDING ? a.max_tokens : 0),
                  rows = p.row_end - p.row_first;
    step_token<K, KDA> *tok = (step_token<K, KDA> *)step_shared, *ptok = tok + a.tokens;
    float *v = (float *)(step_shared + (size_t)slots * sizeof(step_token<K, KDA>));
    float *pv = v + (int64_t)a.tokens * rows;
    if (first_code)
        step_pending_stage<K, KDA, Act>(a, p, first_code, ptok, pv);
    step_window_regs<Act> w;
    step_prologue<E, KDA, Act, EXACT, HISTORY>(a, in, p, early, ring, tok, v, w);
    if (in.records) /* after the barrier: the pending rows of v were read */
        step_records_v<Act>(a, in, p, v);
    if (first_code) /* every thread read it before the prologue's barrier */
        pending_clear_read(a, p.j, p.first, p.last);
    for (int32_t tile = p.first; tile < p.last; tile++) {
        int32_t k = tile - p.first;
        if (tile + 1 < p.last)
            tile_stage_async(stage[(k + 1) % SSM_TILE_STAGES], a.d, source, tile + 1);
        copy_async_commit(); /* possibly empty: keeps one group per tile */
        copy_async_wait<SSM_TILE_STAGES - 1>();
        head_tile<E, RPL, State> t;
        tile_place(t, tile);
        tile_from_stage(t, stage[k % SSM_TILE_STAGES]);
        if (HISTORY)
            apply_records<E, RPL, KDA, State, Act, true>(t, a.d, ring.base, a.ring_layout,
                                                         ring.first, ring.used, a.ring_mask,
                                                         p.j.h, a.layout);
        /* Every tile of a (slot, layer) has the same code (one commit set
           them all, one step clears them all). */
        if (first_code) {
            step_apply_pending<E, KDA, State>(a, p, first_code, ptok, pv, t);
            if (a.store == STORE_NONE) /* a verify: the committed state goes back */
                tile_store(t, a.d, source);
        }
        step_tile_tokens<E, KDA, State, Act>(a, p, tok, v, t, source);
    }
    if (!in.stage)
        step_window_write<Act, HISTORY>(a, in, p, w, ring);
}

} /* namespace ssm */
#endif
