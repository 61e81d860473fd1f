/* Host side of the GPU path, compiled into each plugin's .cu: what every mode
 * keeps besides its states (the per-slot token scratch and q buffer), the
 * argument structs filled from a step, and the launches with their dispatch
 * on key dim, state dtype and activation dtype. Launches only: no
 * allocation, no synchronization, so a step can be captured in a graph. */
#ifndef SSM_COMMON_CUDA_LAUNCH_CUH
#define SSM_COMMON_CUDA_LAUNCH_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda/chunk_tc.cuh"
#include "kernels/cuda/commit.cuh"
#include "kernels/cuda/fused.cuh"
#include "kernels/cuda/identity_direct.cuh"
#include "kernels/cuda/pending.cuh"
#include "ssmstate/plugin.h"

namespace ssm {

/* When decode and verify run in one launch (step_in_one_launch). */
enum { ONE_LAUNCH_AUTO, ONE_LAUNCH_ALWAYS, ONE_LAUNCH_NEVER };
/* Which kernel runs replay's identity steps (SSMSTATE_CUDA_IDENTITY). */
enum { IDENTITY_AUTO, IDENTITY_DIRECT, IDENTITY_STAGED };
#define ONE_LAUNCH_DECODE_ROWS 8

/* What every mode keeps on the GPU besides its states. */
struct gpu_common {
    dims d;
    record_layout raw;    /* one token record */
    int32_t layers, capacity, max_tokens, conv_rows;
    ssm_dtype state_dtype, act_dtype;
    size_t act_size, state_size;
    int64_t state_elems;  /* one layer: HV * V * K */
    uint8_t *tokens;      /* [capacity][max_tokens] records (decode, native verify) */
    float *q;             /* [capacity][max_tokens][H][K] normalized, scaled */
    /* The chunked prefill's pieces: prefill_units chunks, each of
     * SSM_CHUNK_TOKENS records (the decay field holding the log-decay) and
     * their q, by row of a group of the step's rows (launch_prefill_chunked). */
    int32_t prefill_units;
    uint8_t *prefill_tokens;
    float *prefill_q;
    float *prefill_work;  /* [prefill_units][HV] records of chunk_tc.cuh (its shapes only) */
    uint32_t *flags;      /* the core's device flag words */
    int32_t *slot_table;  /* [capacity]: slot_table[s] == s, for one-slot jobs */
    /* [capacity][layers][H]: the fused decode's window counters (fused.cuh),
     * zero between steps. */
    int32_t *arrivals;
    int32_t one_launch;   /* ONE_LAUNCH_*: decode and verify in one launch (fused.cuh) */
    bool identity_fold_inside; /* replay's identity kernel folds its rows itself */
    bool identity_fold_early;  /* ... before it waits for the prologue */
    bool identity_fold_staged; /* ... its records staged in shared memory first */
    bool identity_tensor;      /* ... its products with the tokens on tensor cores */
    int32_t identity_rows;     /* ... value rows a block: 0 by the batch (identity_rows_for) */
    int32_t identity_choice;   /* ... where its checkpoint is read (IDENTITY_*) */
    bool replay_self_commit;   /* ... and commits a decode itself (no commit launch) */
    int32_t prep_rows; /* rows each block of the prologue kernel takes in turn */
    int32_t decode_stages; /* tiles a one-token tile job stages at once (tile_stream) */
    int32_t prefill_group; /* tokens a prefill's prologue block takes (prep_group_tokens) */
    int32_t sms;          /* the device's multiprocessors (launch shapes only) */
    int32_t shared_optin; /* shared memory a block may opt in to, bytes */
    int32_t multi_token_blocks; /* tile_min_blocks of larger multi-token jobs (6, or 1) */
    bool overlap;               /* recurrence kernels overlap their prologue (PDL, sm_90 on) */
    bool blocks_forced;         /* SSMSTATE_CUDA_MULTI_TOKEN_BLOCKS=1: overrides tuned choices */
    /* Tuned choices (docs/tuning.md): candidate of each family per batch
     * bucket, 0 the built-in rule; read at launch (tuned_choice), written
     * only by tune_apply, outside any step. */
    int8_t tuned[SSM_TUNE_FAMILIES][SSM_TUNE_BUCKETS];
    bool chunked_prefill;       /* the chunk kernel's shared memory fits: prefill is chunked */
    bool tensor_core_prefill;   /* ... and runs on chunk_tc.cuh's kernels */
    bool prefill_bf16_products; /* ... with bf16 products (prefill_precision = fast) */
    bool prefill_fused;         /* ... and its prepare runs the prologue (chunk_prologue.cuh) */
    bool prefill_scan_double;   /* ... and its bf16 scan has two records' room */
};

/* Bytes of the tensor-core prefill's work records of one chunk (every
 * value head), 0 for the shapes it does not run. */
inline size_t prefill_work_bytes(const ssm_model_dims &m)
{
    if (!chunk_tc_supported(m.key_dim, m.value_dim))
        return 0;
    return (size_t)chunk_tc_work_floats(m.key_dim, m.value_dim, m.value_heads, 1, 1) *
           sizeof(float);
}

/* Chunks the prefill's scratch holds: one a slot up to
 * SSM_PREFILL_CHUNKS_MAX, a whole pass of one row of 4096 tokens; a
 * prefill of more rows runs them in groups (launch_prefill_chunked). A
 * workspace of the context (the plan's shared bytes), which grows with the
 * capacity up to that bound, so a small context keeps a small one. */
#define SSM_PREFILL_CHUNKS_MAX 64
inline int32_t prefill_units_of(const ssm_mode_params_v2 *p)
{
    return p->capacity < SSM_PREFILL_CHUNKS_MAX ? p->capacity : SSM_PREFILL_CHUNKS_MAX;
}

/* Bytes of one token's record and q in the scratch. */
inline size_t gpu_token_bytes(const ssm_mode_params_v2 *p)
{
    record_layout raw = make_record_layout(p->model, ssm_dtype_size(p->activation_dtype), false);
    return (size_t)raw.bytes + (size_t)p->model.heads * p->model.key_dim * sizeof(float);
}

/* Bytes per slot of the token scratch and q buffer (a step's tokens) and
 * the fused decode's counters. */
inline size_t gpu_scratch_bytes(const ssm_mode_params_v2 *p)
{
    size_t arrivals = (size_t)p->model.layers * p->model.heads * sizeof(int32_t);
    return (size_t)p->max_tokens * gpu_token_bytes(p) + arrivals;
}

/* Bytes per context of the chunked prefill's scratch: prefill_units_of
 * chunks of tokens and their work records. */
inline size_t gpu_shared_bytes(const ssm_mode_params_v2 *p)
{
    return (size_t)prefill_units_of(p) *
           (SSM_CHUNK_TOKENS * gpu_token_bytes(p) + prefill_work_bytes(p->model));
}

/* Fills g and allocates the scratch; SSM_ERR_OUT_OF_MEMORY after svc->error. */
inline ssm_status gpu_common_create(gpu_common &g, const ssm_mode_params_v2 *p,
                                    const ssm_services_v1 *s)
{
    g.d = make_dims(p->model);
    g.act_size = ssm_dtype_size(p->activation_dtype);
    g.state_size = ssm_dtype_size(p->state_dtype);
    g.raw = make_record_layout(p->model, g.act_size, false);
    g.layers = p->model.layers;
    g.capacity = p->capacity;
    g.max_tokens = p->max_tokens;
    g.conv_rows = p->model.conv_width - 1 + p->max_tokens;
    g.state_dtype = p->state_dtype;
    g.act_dtype = p->activation_dtype;
    g.state_elems = (int64_t)p->model.value_heads * p->model.value_dim * p->model.key_dim;
    int device = 0, major = 0;
    g.sms = 0;
    g.shared_optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&g.sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaDeviceGetAttribute(&g.shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                               device) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
        g.sms = g.shared_optin = major = 0; /* unknown: the narrowest launch shapes */
        (void)cudaGetLastError();          /* so no later launch reports this error */
    }
    /* Below this, prefill runs the recurrent kernels in pieces of T_max. */
    g.chunked_prefill =
        chunk_shared_floats(g.d.K) * sizeof(float) <= (size_t)g.shared_optin;
    size_t prepare = chunk_prepare_shared_floats(g.d.K, g.d.V, g.d.kda ? g.d.K : 1),
           scan = chunk_scan_shared_floats(g.d.K, 32);
    g.tensor_core_prefill = g.chunked_prefill && prefill_work_bytes(p->model) > 0 &&
                            (prepare > scan ? prepare : scan) * sizeof(float) <=
                                (size_t)g.shared_optin;
    /* A measuring knob, read once here, never in a step: the register budget
     * of multi-token jobs above SSM_LATENCY_ROWS rows, 6 blocks of 80
     * registers (the default) or 1 (no cap, no spills). docs/bench.md. */
    const char *budget = getenv("SSMSTATE_CUDA_MULTI_TOKEN_BLOCKS");
    g.blocks_forced = budget && strcmp(budget, "1") == 0;
    g.multi_token_blocks = g.blocks_forced ? 1 : 6;
    memset(g.tuned, 0, sizeof g.tuned); /* the built-in choices until tune_apply */
    /* Likewise: SSMSTATE_CUDA_OVERLAP=0 launches every kernel after the one
     * before it has finished. */
    const char *overlap = getenv("SSMSTATE_CUDA_OVERLAP");
    g.overlap = major >= 9 && !(overlap && strcmp(overlap, "0") == 0);
    /* SSMSTATE_CUDA_ONE_LAUNCH: 1 runs every decode and native's and
     * compact's verify in one launch each (fused.cuh) instead of the
     * prologue and the tile job, 0 none; unset, the measured choice of
     * step_in_one_launch. The same bits either way. */
    const char *one_launch = getenv("SSMSTATE_CUDA_ONE_LAUNCH");
    g.one_launch = !one_launch                ? ONE_LAUNCH_AUTO
                   : strcmp(one_launch, "1") == 0 ? ONE_LAUNCH_ALWAYS
                   : strcmp(one_launch, "0") == 0 ? ONE_LAUNCH_NEVER
                                                  : ONE_LAUNCH_AUTO;
    /* Replay's identity kernel folds the rows that need it in its own
     * blocks (identity.cuh); SSMSTATE_CUDA_REPLAY_FOLD=job folds them in a
     * tile job launched before it instead. Inside measured 10% faster at
     * B = 256 (H100). The same bits either way. */
    const char *fold = getenv("SSMSTATE_CUDA_REPLAY_FOLD");
    g.identity_fold_inside = !(fold && strcmp(fold, "job") == 0);
    /* SSMSTATE_CUDA_REPLAY_FOLD=early: inside, before the kernel waits for
     * the step's prologue, so that the two overlap. */
    g.identity_fold_early = fold && strcmp(fold, "early") == 0;
    /* SSMSTATE_CUDA_REPLAY_FOLD_LOADS: how the direct kernel's blocks
     * (identity_direct.cuh) and KDA's staged kernel read those records,
     * `staged` (the default: every record the block needs copied into
     * shared memory at once, then the updates from there; the folding
     * launch 9% shorter on an H200) or `plain` (each record from the ring
     * by its update, as GDN's staged kernel's always are). The same bits
     * either way. */
    const char *loads = getenv("SSMSTATE_CUDA_REPLAY_FOLD_LOADS");
    g.identity_fold_staged = !(loads && strcmp(loads, "plain") == 0);
    /* SSMSTATE_CUDA_IDENTITY_PRODUCTS: where identity.cuh's kernel forms
     * the checkpoint's products with the tokens' k and q, `cuda` (the
     * default: a thread a row, CUDA cores) or `tensor` (3xTF32 on tensor
     * cores, where a block holds 128 rows of at most four tokens at
     * K = 128; not yet the default: no GPU has run it). The same committed
     * state; outputs within the identity's bound. */
    const char *products = getenv("SSMSTATE_CUDA_IDENTITY_PRODUCTS");
    g.identity_tensor = products && strcmp(products, "tensor") == 0;
    /* SSMSTATE_CUDA_IDENTITY_ROWS=128 or 32: the value rows of every block
     * of identity.cuh's kernel, whatever the batch (by default 32 where the
     * batch has fewer blocks of 128 than the device has SMs); the tests run
     * small batches through the large batches' kernels with it. */
    const char *identity_rows = getenv("SSMSTATE_CUDA_IDENTITY_ROWS");
    g.identity_rows = !identity_rows                           ? 0
                      : strcmp(identity_rows, "128") == 0 ? SSM_IDENTITY_THREADS
                      : strcmp(identity_rows, "32") == 0  ? SSM_IDENTITY_SMALL_ROWS
                                                          : 0;
    /* Replay's one-token identity steps of GDN at K = 128 run on
     * identity_direct.cuh's kernel (the checkpoint into registers), others
     * on identity.cuh's (staged through shared memory): on an H100 at
     * B = 256 the direct kernel took a decode from 319 to 277 us, but a
     * round's 4-token verify from 480 to 601 and KDA's decode from 377 to
     * 396 (its kernel spills). SSMSTATE_CUDA_IDENTITY=direct runs every step
     * it fits there, =staged none. The same committed state either way;
     * outputs within the identity's bound. */
    const char *identity = getenv("SSMSTATE_CUDA_IDENTITY");
    g.identity_choice = !identity                       ? IDENTITY_AUTO
                        : strcmp(identity, "direct") == 0 ? IDENTITY_DIRECT
                        : strcmp(identity, "staged") == 0 ? IDENTITY_STAGED
                                                          : IDENTITY_AUTO;
    /* SSMSTATE_CUDA_REPLAY_COMMIT=self: replay's identity decode commits
     * itself (the window advanced by its prologue, the cursor by the
     * identity kernel's last block of each slot and layer); unset or
     * `launch`, it stages the inputs and commits in a launch of its own
     * after the step, as a verify does. The same bits either way. */
    const char *commit = getenv("SSMSTATE_CUDA_REPLAY_COMMIT");
    g.replay_self_commit = commit && strcmp(commit, "self") == 0;
    /* SSMSTATE_CUDA_PREP_ROWS=N (1 to 64): each block of the prologue
     * kernel takes N rows in turn, a grid of 1/N the blocks; 1 (the
     * default) one row a block. The same bits either way. */
    const char *prep_rows = getenv("SSMSTATE_CUDA_PREP_ROWS");
    g.prep_rows = prep_rows ? (int32_t)strtol(prep_rows, NULL, 10) : 1;
    g.prep_rows = g.prep_rows < 1 ? 1 : g.prep_rows > 64 ? 64 : g.prep_rows;
    /* One-token tile jobs stage two tiles ahead of the one they update
     * (48 KiB of shared memory a block); SSMSTATE_CUDA_DECODE_STAGES=2
     * stages one. The same bits either way. */
    const char *stages = getenv("SSMSTATE_CUDA_DECODE_STAGES");
    g.decode_stages = stages && strcmp(stages, "2") == 0 ? SSM_TILE_STAGES : 3;
    /* [state] prefill_precision = fast: the tensor-core prefill's products
     * on bf16 operands, one pass each, instead of 3xTF32 (5e-3 from fp64
     * instead of 1e-5 from the CPU). It changes the state a prefill leaves,
     * the same way in every mode. */
    g.prefill_bf16_products = p->prefill_precision == SSM_PREFILL_FAST;
    /* The gates' and the identity's exponentials through the hardware's
     * approximations (prep.cuh's dev_* helpers; other bits than the CPU's,
     * the same in every mode), the faster form (docs/numerics.md);
     * SSMSTATE_CUDA_FAST_MATH=0 computes them as the CPU does. */
    /* A measuring knob: SSMSTATE_CUDA_PREFILL_GROUP=N (1 to 64) gives each
     * block of a prefill's prologue N tokens instead of 4. The same bits
     * either way. */
    const char *group = getenv("SSMSTATE_CUDA_PREFILL_GROUP");
    g.prefill_group = group && atoi(group) >= 1 && atoi(group) <= 64 ? atoi(group) : 4;
    /* A tensor-core prefill runs its prologue inside its prepare kernel
     * (conv width SSM_CHUNK_PROLOGUE_WIDTH only; H100: GDN 0.3 to 1.7% and
     * KDA 2.8 to 6.9% faster); SSMSTATE_CUDA_PREFILL_PROLOGUE=kernel runs it
     * as a kernel of its own. The same bits either way. */
    const char *prologue = getenv("SSMSTATE_CUDA_PREFILL_PROLOGUE");
    g.prefill_fused = g.tensor_core_prefill && g.d.W == SSM_CHUNK_PROLOGUE_WIDTH &&
                      !(prologue && strcmp(prologue, "kernel") == 0);
    /* The scan of a `fast` prefill has two records' room, so a chunk's
     * whole record streams while the chunk before computes (two barriers a
     * chunk instead of three; H100: the scan 10 to 17% faster), where it
     * fits at 64 value rows a block; SSMSTATE_CUDA_PREFILL_SCAN=single
     * gives it one. The same bits either way. */
    const char *prefill_scan = getenv("SSMSTATE_CUDA_PREFILL_SCAN");
    g.prefill_scan_double = !(prefill_scan && strcmp(prefill_scan, "single") == 0) &&
                            chunk_scan2_shared_bytes(g.d.K, 64) <= (size_t)g.shared_optin;
    const char *fast = getenv("SSMSTATE_CUDA_FAST_MATH");
    g.d.fast_math = !(fast && strcmp(fast, "0") == 0);
    g.flags = s->struct_size >= offsetof(ssm_services_v1, device_flags) + sizeof(void *)
                  ? s->device_flags
                  : NULL;
    size_t slots = (size_t)p->capacity * p->max_tokens;
    g.tokens = (uint8_t *)s->alloc(s->core, slots * (size_t)g.raw.bytes);
    g.q = (float *)s->alloc(s->core, slots * (size_t)p->model.heads * p->model.key_dim * sizeof(float));
    g.prefill_units = prefill_units_of(p);
    size_t pieces = (size_t)g.prefill_units * SSM_CHUNK_TOKENS;
    g.prefill_tokens = (uint8_t *)s->alloc(s->core, pieces * (size_t)g.raw.bytes);
    g.prefill_q = (float *)s->alloc(
        s->core, pieces * (size_t)p->model.heads * p->model.key_dim * sizeof(float));
    g.prefill_work = NULL;
    if (prefill_work_bytes(p->model) > 0)
        g.prefill_work =
            (float *)s->alloc(s->core, (size_t)g.prefill_units * prefill_work_bytes(p->model));
    g.slot_table = (int32_t *)s->alloc(s->core, sizeof(int32_t) * (size_t)p->capacity);
    size_t arrivals = (size_t)p->capacity * p->model.layers * p->model.heads * sizeof(int32_t);
    g.arrivals = (int32_t *)s->alloc(s->core, arrivals);
    int32_t *host = (int32_t *)s->alloc_host(s->core, sizeof(int32_t) * (size_t)p->capacity);
    if (!g.tokens || !g.q || !g.prefill_tokens || !g.prefill_q || !g.slot_table || !g.arrivals ||
        !host ||
        (prefill_work_bytes(p->model) > 0 && !g.prefill_work)) {
        s->release_host(s->core, host);
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of device memory for scratch");
    }
    for (int32_t i = 0; i < p->capacity; i++)
        host[i] = i;
    cudaError_t e = cudaMemcpy(g.slot_table, host, sizeof(int32_t) * (size_t)p->capacity,
                               cudaMemcpyHostToDevice);
    s->release_host(s->core, host);
    if (e == cudaSuccess)
        e = cudaMemset(g.arrivals, 0, arrivals);
    if (e != cudaSuccess)
        return s->error(s->core, SSM_ERR_DEVICE, "create: %s", cudaGetErrorString(e));
    return SSM_OK;
}

inline void gpu_common_destroy(gpu_common &g, const ssm_services_v1 *s)
{
    s->release(s->core, g.tokens);
    s->release(s->core, g.q);
    s->release(s->core, g.prefill_tokens);
    s->release(s->core, g.prefill_q);
    s->release(s->core, g.prefill_work);
    s->release(s->core, g.slot_table);
    s->release(s->core, g.arrivals);
    g.arrivals = NULL;
    g.tokens = NULL;
    g.q = NULL;
    g.prefill_tokens = NULL;
    g.prefill_q = NULL;
    g.prefill_work = NULL;
    g.slot_table = NULL;
}

/* ------------------------------------------------------------- tuning */

/* The candidates of each family (docs/tuning.md has the table). Index 0 is
 * the built-in rule; none of them changes a bit of a result (the update
 * layout, which would, is ssm_step_v1.layout, chosen by the core). */
enum { TUNE_AUTO = 0 };
enum { DECODE_PASSES_1 = 1, DECODE_PASSES_HEAD = 2, DECODE_NO_OVERLAP = 3, DECODE_CANDIDATES };
enum { MULTI_BLOCKS_6 = 1, MULTI_BLOCKS_1 = 2, MULTI_NO_OVERLAP = 3, MULTI_CANDIDATES };
enum { PREFILL_ROWS_32 = 1, PREFILL_ROWS_64 = 2, PREFILL_CANDIDATES };

/* Bucket of a batch of `rows` rows: the least b with rows <= 2^b. */
__host__ __device__ inline int32_t tune_bucket(int64_t rows)
{
    int32_t b = 0;
    while (b < SSM_TUNE_BUCKETS - 1 && ((int64_t)1 << b) < rows)
        b++;
    return b;
}

/* The candidate in force for a family at a batch of `rows` rows (host-side
 * table lookup: no allocation, no synchronization, capturable). */
inline int32_t tuned_choice(const gpu_common &g, int32_t family, int64_t rows)
{
    return g.tuned[family][tune_bucket(rows)];
}

/* The layout a step or commit was handed (0 from a core before 0.3). */
inline uint32_t step_layout(const ssm_step_v1 *s)
{
    return s->struct_size >= offsetof(ssm_step_v1, layout) + sizeof(uint32_t) ? s->layout : 0;
}

inline uint32_t commit_layout(const ssm_commit_v1 *c)
{
    return c->struct_size >= offsetof(ssm_commit_v1, layout) + sizeof(uint32_t) ? c->layout : 0;
}

inline ssm_status launch_status(const ssm_services_v1 *s, const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess)
        return SSM_OK;
    return s->error(s->core, SSM_ERR_DEVICE, "%s: %s", what, cudaGetErrorString(e));
}

/* Calls f(width, act): width a std::integral_constant bounding the conv
 * width at compile time (4, or SSM_MAX_WIDTH for wider convs), act a value
 * of the activation type. The prologue and the commit are compiled for
 * these four combinations. */
template <class F> inline void by_width_and_act(const gpu_common &g, F f)
{
    bool bf16_act = g.act_dtype == SSM_DTYPE_BF16, narrow = g.d.W <= 4;
    if (bf16_act && narrow)
        f(std::integral_constant<int, 4>(), bf16());
    else if (bf16_act)
        f(std::integral_constant<int, SSM_MAX_WIDTH>(), bf16());
    else if (narrow)
        f(std::integral_constant<int, 4>(), 0.0f);
    else
        f(std::integral_constant<int, SSM_MAX_WIDTH>(), 0.0f);
}

/* Launches kernel<<<grid, block, shared, st>>>(args...); with after_prep
 * as a programmatic dependent of the launch before it (it may start while
 * that one, the step's prologue, finishes: griddep_wait in device.cuh).
 * Errors surface through cudaGetLastError, as a <<<>>> launch's do. */
template <class... Params, class... Args>
inline void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                          cudaStream_t st, bool after_prep, Args... args)
{
    cudaLaunchAttribute overlap[1];
    overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = shared;
    config.stream = st;
    config.attrs = overlap;
    config.numAttrs = after_prep ? 1 : 0;
    cudaLaunchKernelEx(&config, kernel, args...);
}

/* ------------------------------------------------------------- prep */

/* Prep arguments for a step whose records go to the token scratch; a mode
 * points records elsewhere (compact's records, replay's ring) afterwards. */
inline prep_args prep_for(const gpu_common &g, const ssm_step_v1 *step, void *conv, bool stage)
{
    prep_args a = {};
    a.d = g.d;
    /* A prefill at prefill_precision = high computes its gates and
       activations as the CPU does: with the fast gates a KDA prefill's bf16
       outputs ended 6.2e-4 from the CPU's, past the 5e-4 that decode and
       verify meet with them (docs/numerics.md). At fast, whose bound is
       against fp64 and far wider, both go through the hardware's
       approximations; every mode runs the same prefill kernels, so modes
       still agree bit for bit. */
    if (step->token_offsets) {
        a.d.fast_math = g.prefill_bf16_products;
        a.d.fast_activations = g.prefill_bf16_products;
    }
    a.rows = step->rows;
    a.tokens = step->token_offsets ? g.max_tokens : step->tokens;
    a.layer = step->layer;
    a.layers = g.layers;
    a.capacity = g.capacity;
    a.max_tokens = g.max_tokens;
    a.slots = step->slots;
    a.token_offsets = step->token_offsets;
    a.x = step->io.x;
    a.gate = step->io.gate;
    a.beta = step->io.beta;
    a.conv_weight = step->weights->conv_weight;
    a.conv_bias = step->weights->conv_bias;
    a.a_log = step->weights->a_log;
    a.dt_bias = step->weights->dt_bias;
    a.conv = conv;
    a.conv_rows = g.conv_rows;
    a.stage = stage;
    a.records = g.tokens;
    a.slot_stride = (int64_t)g.max_tokens * g.raw.bytes;
    a.layer_stride = 0;
    a.layout = g.raw;
    a.ring_mask = 0x7fffffff;
    a.q = g.q;
    a.flags = g.flags;
    return a;
}

inline ssm_status launch_prep(const gpu_common &g, const prep_args &a, void *stream,
                              const ssm_services_v1 *s)
{
    if (a.rows == 0)
        return SSM_OK;
    if (a.rows > 65535)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "a batch of %d rows: the CUDA kernels take at most 65535", a.rows);
    int32_t width = a.d.D / 4 > a.d.GW ? a.d.D / 4 : a.d.GW;
    prep_args grouped = a;
    grouped.group_tokens = prep_group_tokens(a, g.prefill_group);
    int32_t groups = grouped.group_tokens > 0 && a.tokens > grouped.group_tokens
                         ? (a.tokens + grouped.group_tokens - 1) / grouped.group_tokens
                         : 1;
    int32_t row_blocks = (a.rows + g.prep_rows - 1) / g.prep_rows;
    dim3 grid((width + SSM_PREP_THREADS - 1) / SSM_PREP_THREADS, row_blocks, groups);
    cudaStream_t st = (cudaStream_t)stream;
    by_width_and_act(g, [&](auto width, auto act) {
        constexpr int W = decltype(width)::value;
        if (W == 4 && g.d.W == 4)
            prep_kernel<4, decltype(act), true><<<grid, SSM_PREP_THREADS, 0, st>>>(grouped);
        else
            prep_kernel<W, decltype(act), false><<<grid, SSM_PREP_THREADS, 0, st>>>(grouped);
    });
    return launch_status(s, "conv and gates kernel");
}

/* ------------------------------------------------------------- tiles */

/* Tile arguments over `state` with `snapshots` per (slot, layer), tokens
 * from the token scratch; the caller sets history, outputs and stores. */
inline tile_args tile_for(const gpu_common &g, int32_t rows, const int32_t *slots, int32_t layer,
                          void *state, int32_t snapshots)
{
    tile_args a = {};
    a.d = g.d;
    a.rows = rows;
    a.layers = g.layers;
    a.capacity = g.capacity;
    a.max_tokens = g.max_tokens;
    a.layer = layer;
    a.slots = slots;
    a.flags = g.flags;
    a.state = state;
    a.snapshots = snapshots;
    a.ring_mask = 0x7fffffff;
    a.tok = g.tokens;
    a.tok_slot_stride = (int64_t)g.max_tokens * g.raw.bytes;
    a.tok_layout = g.raw;
    a.q = g.q;
    return a;
}

/* The tokens of a decode or verify step (io->out gets the outputs). */
inline void tile_step_tokens(tile_args &a, const ssm_step_v1 *step)
{
    a.tokens = step->token_offsets ? a.max_tokens : step->tokens;
    a.token_offsets = step->token_offsets;
    a.out = step->io.out;
}

template <int E, bool KDA, class State, class Act>
inline void launch_tile_budget(const tile_args &a, unsigned jobs, cudaStream_t st)
{
    dim3 block(32 * SSM_TILE_WARPS);
    dim3 grid((unsigned)a.window_x + jobs * (unsigned)tile_blocks_per_head(a.d.V, a.passes),
              a.d.HV);
    /* one-token jobs: 4 (tile_min_blocks); others: launch_tile's choice */
    switch (tile_one_token(a) ? 4 : a.multi_token_blocks) {
    case 1: launch_kernel(tile_kernel<E, 1, KDA, State, Act>, grid, block, 0, st, a.after_prep, a); break;
    case 4:
        if (a.decode_stages == 3) /* three 16 KiB stages: the 48 KiB of static shared memory */
            launch_kernel(tile_kernel<E, 4, KDA, State, Act, 3>, grid, block, 0, st, a.after_prep, a);
        else
            launch_kernel(tile_kernel<E, 4, KDA, State, Act>, grid, block, 0, st, a.after_prep, a);
        break;
    default: launch_kernel(tile_kernel<E, 6, KDA, State, Act>, grid, block, 0, st, a.after_prep, a); break;
    }
}

/* Tiles of a head per block: a one-token job with enough heads to give
 * every SM SSM_TILE_HEADS_PER_SM of them runs whole heads per block (the
 * index loads paid once per head, the next tile's state loading while the
 * block updates the current one); otherwise one tile per block, so small
 * batches spread over every SM. Never changes a bit. */
#define SSM_TILE_HEADS_PER_SM 16
inline int32_t tile_passes(const gpu_common &g, const tile_args &a, int64_t jobs)
{
    if (!tile_one_token(a))
        return 1;
    switch (tuned_choice(g, SSM_TUNE_DECODE, a.rows)) {
    case DECODE_PASSES_1: return 1;
    case DECODE_PASSES_HEAD: return tiles_per_head(a.d.V, SSM_TILE_RPL);
    default: break;
    }
    if (g.sms <= 0 || jobs * a.d.HV < (int64_t)g.sms * SSM_TILE_HEADS_PER_SM)
        return 1;
    return tiles_per_head(a.d.V, SSM_TILE_RPL);
}

/* The family a tile job is tuned as: one-token jobs DECODE, commits that
 * replay records COMMIT, every other (verify, folds, prefill pieces) VERIFY. */
inline int32_t tile_family(const tile_args &a)
{
    return tile_one_token(a) ? SSM_TUNE_DECODE : a.accepted ? SSM_TUNE_COMMIT : SSM_TUNE_VERIFY;
}

/* Register budget of a multi-token job (blocks per SM, 6 or 1): the tuned
 * candidate, else at most SSM_LATENCY_ROWS rows 1, else g's (6); the
 * environment's SSMSTATE_CUDA_MULTI_TOKEN_BLOCKS=1 overrides all. */
inline int32_t tile_budget(const gpu_common &g, const tile_args &a)
{
    if (g.blocks_forced)
        return 1;
    switch (tuned_choice(g, tile_family(a), a.rows)) {
    case MULTI_BLOCKS_6: return 6;
    case MULTI_BLOCKS_1: return 1;
    default: return a.rows <= SSM_LATENCY_ROWS ? 1 : g.multi_token_blocks;
    }
}

/* Whether a job that follows its prologue may overlap it: the device's and
 * environment's rule (g.overlap), unless the tuned candidate says no. */
inline bool tile_overlap(const gpu_common &g, const tile_args &a)
{
    int32_t family = tile_family(a), choice = tuned_choice(g, family, a.rows);
    bool off = family == SSM_TUNE_DECODE ? choice == DECODE_NO_OVERLAP : choice == MULTI_NO_OVERLAP;
    return a.after_prep && g.overlap && !off;
}

template <int E, class State, class Act>
inline void launch_tile_kind(const tile_args &a, unsigned jobs, cudaStream_t st)
{
    if (a.d.kda)
        launch_tile_budget<E, true, State, Act>(a, jobs, st);
    else
        launch_tile_budget<E, false, State, Act>(a, jobs, st);
}

template <class State, class Act>
inline void launch_tile_typed(const tile_args &a, unsigned jobs, cudaStream_t st)
{
    switch (a.d.K) {
    case 32: launch_tile_kind<4, State, Act>(a, jobs, st); break;
    case 64: launch_tile_kind<8, State, Act>(a, jobs, st); break;
    default: launch_tile_kind<16, State, Act>(a, jobs, st); break;
    }
}

inline ssm_status launch_tile(const gpu_common &g, const tile_args &a, void *stream,
                              const ssm_services_v1 *s)
{
    int64_t jobs = a.layer < 0 ? (int64_t)a.rows * a.layers : a.rows;
    if (jobs == 0)
        return SSM_OK;
    int32_t passes = tile_passes(g, a, jobs);
    int64_t blocks = (tile_blocks_per_head(a.d.V, passes) +
                      (a.conv && a.accepted ? window_blocks(a.d.D) : 0)) *
                     jobs;
    if (blocks > 0x7fffffff)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "%lld rows x layers is more than one launch of the recurrence takes",
                        (long long)jobs);
    tile_args with_blocks = a;
    with_blocks.passes = passes;
    with_blocks.decode_stages = g.decode_stages;
    with_blocks.multi_token_blocks = tile_budget(g, a);
    with_blocks.after_prep = tile_overlap(g, a);
    with_blocks.window_x = a.conv && a.accepted
                               ? (int32_t)((jobs * window_blocks(a.d.D) + a.d.HV - 1) / a.d.HV)
                               : 0;
    cudaStream_t st = (cudaStream_t)stream;
    bool bf16_state = g.state_dtype == SSM_DTYPE_BF16, bf16_act = g.act_dtype == SSM_DTYPE_BF16;
    if (bf16_state && bf16_act)
        launch_tile_typed<bf16, bf16>(with_blocks, (unsigned)jobs, st);
    else if (bf16_state)
        launch_tile_typed<bf16, float>(with_blocks, (unsigned)jobs, st);
    else if (bf16_act)
        launch_tile_typed<float, bf16>(with_blocks, (unsigned)jobs, st);
    else
        launch_tile_typed<float, float>(with_blocks, (unsigned)jobs, st);
    return launch_status(s, "recurrence kernel");
}

/* The chunk kernel's launch for its state and activation types. */
template <class State, class Act>
inline void launch_chunk_typed(const chunk_args &a, int32_t rows, cudaStream_t st)
{
    dim3 grid((unsigned)((a.V + SSM_CHUNK_ROWS - 1) / SSM_CHUNK_ROWS), (unsigned)a.HV,
              (unsigned)rows);
    size_t shared = chunk_shared_floats(a.K) * sizeof(float);
    cudaFuncSetAttribute(chunk_kernel<State, Act>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)shared);
    chunk_kernel<State, Act><<<grid, SSM_CHUNK_THREADS, shared, st>>>(a);
}

/* Chunks a row in one pass of a tensor-core prefill of a group of `rows`
 * rows (at most prefill_units): as many as the scratch's prefill_units
 * chunks hold (at most SSM_PREFILL_CHUNKS_MAX). */
inline int32_t prefill_chunks_per_pass(const gpu_common &g, int32_t rows)
{
    int32_t chunks = g.prefill_units / rows;
    return chunks < 1 ? 1 : chunks;
}

/* The scan's value rows a block for a launch of `rows` rows of a prefill
 * of `batch_rows`: the candidate tuned for batch_rows where the device fits
 * it, else chunk_scan_tile_rows's rule for the launch (the same bits either
 * way). */
inline int32_t prefill_tile_rows(const gpu_common &g, int32_t batch_rows, int32_t rows)
{
    const dims &d = g.d;
    switch (tuned_choice(g, SSM_TUNE_PREFILL, batch_rows)) {
    case PREFILL_ROWS_32: return 32;
    case PREFILL_ROWS_64:
        if (chunk_scan_shared_floats(d.K, 64) * sizeof(float) <= (size_t)g.shared_optin)
            return 64;
        break;
    default: break;
    }
    return chunk_scan_tile_rows(d.K, d.V, d.HV, rows, g.sms, g.shared_optin);
}

/* One group of at most prefill_units rows of a chunked prefill
 * (launch_prefill_chunked), in passes: a prologue writes the rows' records
 * with log-decays to the prefill scratch, by row, then the chunks on tensor
 * cores (kernels/cuda/chunk_tc.cuh) where the shape allows, else on CUDA
 * cores (kernels/cuda/chunk.cuh), per (row, head, value tile) from the
 * slot's state (`state`, `snapshots` and `current` as tile_args takes them)
 * back to it, the outputs to io->out. On tensor cores a pass runs
 * prefill_units / rows chunks a row (prefill_chunks_per_pass), on CUDA
 * cores one. The state is rounded to its dtype at each chunk's end either
 * way, so a pass of many chunks gives the bits of as many passes of one.
 * `batch_rows`, the whole step's rows, picks the tuned scan tile. */
inline ssm_status launch_prefill_group(const gpu_common &g, const ssm_step_v1 *step,
                                       int32_t batch_rows, void *conv, void *state,
                                       int32_t snapshots, const int32_t *current,
                                       const ssm_services_v1 *s)
{
    const dims &d = g.d;
    int32_t pieces = (step->max_row_tokens + SSM_CHUNK_TOKENS - 1) / SSM_CHUNK_TOKENS;
    const int32_t per_pass = g.tensor_core_prefill ? prefill_chunks_per_pass(g, step->rows) : 1;
    for (int32_t p = 0; p < pieces; p += per_pass) {
        const int32_t chunks = pieces - p < per_pass ? pieces - p : per_pass;
        const int32_t tokens = chunks * SSM_CHUNK_TOKENS;
        int64_t slot_stride = (int64_t)tokens * g.raw.bytes;
        int64_t floats = g.raw.bytes / (int64_t)sizeof(float);
        int64_t acts = g.raw.bytes / (int64_t)g.act_size;
        prep_args pa = prep_for(g, step, conv, false);
        pa.piece = p * SSM_CHUNK_TOKENS;
        pa.tokens = tokens;
        pa.max_tokens = tokens; /* the q scratch's tokens per slot (or row) */
        pa.records = g.prefill_tokens;
        pa.slot_stride = slot_stride;
        pa.records_by_row = true;
        pa.q = g.prefill_q;
        pa.log_decay = true;
        if (!g.prefill_fused) {
            ssm_status st = launch_prep(g, pa, step->stream, s);
            if (st != SSM_OK)
                return st;
        }
        chunk_args a = {};
        a.H = d.H;
        a.HV = d.HV;
        a.K = d.K;
        a.V = d.V;
        a.group = d.group;
        a.gk = d.kda ? d.K : 1;
        a.token_offsets = step->token_offsets;
        a.piece = pa.piece;
        a.slots = step->slots;
        a.capacity = g.capacity;
        a.flags = g.flags;
        a.rows_own_inputs = true;
        a.bf16_products = g.prefill_bf16_products;
        a.scan_double_buffer = g.prefill_scan_double;
        a.q = g.prefill_q;
        a.q_token = (int64_t)d.H * d.K;
        a.q_row = tokens * a.q_token;
        a.k = (const float *)(g.prefill_tokens + g.raw.k);
        a.k_row = tokens * floats;
        a.k_token = floats;
        a.v = g.prefill_tokens + g.raw.v;
        a.v_row = tokens * acts;
        a.v_token = acts;
        a.g = (const float *)(g.prefill_tokens + g.raw.decay);
        a.g_row = a.k_row;
        a.g_token = floats;
        a.beta = (const float *)(g.prefill_tokens + g.raw.beta);
        a.beta_row = a.k_row;
        a.beta_token = floats;
        a.state = state;
        a.layers = g.layers;
        a.layer = step->layer;
        a.snapshots = snapshots;
        a.current = current;
        a.out = step->io.out;
        a.out_token = (int64_t)d.HV * d.V;
        a.out_row = a.out_token; /* unused with token_offsets */
        a.pro.on = g.prefill_fused;
        a.pro.d = pa.d;
        a.pro.x = pa.x;
        a.pro.gate = pa.gate;
        a.pro.beta = pa.beta;
        a.pro.conv_weight = pa.conv_weight;
        a.pro.conv_bias = pa.conv_bias;
        a.pro.a_log = pa.a_log;
        a.pro.dt_bias = pa.dt_bias;
        a.pro.conv = pa.conv;
        a.pro.conv_rows = pa.conv_rows;
        cudaStream_t stream = (cudaStream_t)step->stream;
        bool bf16_state = g.state_dtype == SSM_DTYPE_BF16, bf16_act = g.act_dtype == SSM_DTYPE_BF16;
        if (g.tensor_core_prefill) {
            float *work = g.prefill_work;
            int32_t rows = step->rows, tile = prefill_tile_rows(g, batch_rows, rows);
            if (bf16_state && bf16_act)
                launch_chunk_tc<bf16, bf16>(a, rows, chunks, work, tile, stream);
            else if (bf16_state)
                launch_chunk_tc<bf16, float>(a, rows, chunks, work, tile, stream);
            else if (bf16_act)
                launch_chunk_tc<float, bf16>(a, rows, chunks, work, tile, stream);
            else
                launch_chunk_tc<float, float>(a, rows, chunks, work, tile, stream);
        } else if (bf16_state && bf16_act)
            launch_chunk_typed<bf16, bf16>(a, step->rows, stream);
        else if (bf16_state)
            launch_chunk_typed<bf16, float>(a, step->rows, stream);
        else if (bf16_act)
            launch_chunk_typed<float, bf16>(a, step->rows, stream);
        else
            launch_chunk_typed<float, float>(a, step->rows, stream);
        ssm_status st = launch_status(s, "chunked prefill kernel");
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

/* A prefill through the chunked form, as every mode runs it: the step's
 * rows in groups of at most prefill_units (the chunks the scratch holds),
 * each group a step of its own over the same inputs and outputs (their
 * token offsets are absolute). Rows do not share state, so the groups
 * give the bits of one launch over all of them. */
inline ssm_status launch_prefill_chunked(const gpu_common &g, const ssm_step_v1 *step,
                                         void *conv, void *state, int32_t snapshots,
                                         const int32_t *current, const ssm_services_v1 *s)
{
    if (step->rows > 65535) /* as every other launch refuses them */
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "a batch of %d rows: the CUDA kernels take at most 65535", step->rows);
    for (int32_t g0 = 0; g0 < step->rows; g0 += g.prefill_units) {
        ssm_step_v1 group = *step;
        group.rows = step->rows - g0 < g.prefill_units ? step->rows - g0 : g.prefill_units;
        group.slots = step->slots ? step->slots + g0 : NULL;
        group.token_offsets = step->token_offsets + g0;
        ssm_status st =
            launch_prefill_group(g, &group, step->rows, conv, state, snapshots, current, s);
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

/* ------------------------------------------------------------- steps */

/* What a one-launch step (fused.cuh) reads besides the state: the step's
 * inputs and weights, and the conv buffer. Decode advances the window
 * (stage false); a verify stages its inputs for the commit. */
inline step_inputs step_inputs_for(const gpu_common &g, const ssm_step_v1 *step, void *conv,
                                   bool stage)
{
    step_inputs in = {};
    in.x = step->io.x;
    in.gate = step->io.gate;
    in.beta = step->io.beta;
    in.conv_weight = step->weights->conv_weight;
    in.conv_bias = step->weights->conv_bias;
    in.a_log = step->weights->a_log;
    in.dt_bias = step->weights->dt_bias;
    in.conv = conv;
    in.conv_rows = g.conv_rows;
    in.stage = stage;
    in.arrivals = g.arrivals;
    return in;
}

/* Whether a one-launch step of `rows` rows runs whole heads a block:
 * once the batch gives every SM SSM_STEP_HEADS_PER_SM heads (a wave of
 * resident blocks), the q and k of a head (and its gates) are then
 * computed once, not once per value tile. */
#define SSM_STEP_HEADS_PER_SM 4
inline bool step_whole_heads(const gpu_common &g, int32_t rows)
{
    return g.sms > 0 && (int64_t)rows * g.d.HV >= (int64_t)g.sms * SSM_STEP_HEADS_PER_SM;
}

/* Whether a step runs in one launch: a decode or verify (no prefill
 * pieces) of a conv width of at most 4, unless SSMSTATE_CUDA_ONE_LAUNCH
 * says otherwise. By default every verify does (an MTP round at B = 256
 * took 12% less time for GDN and 20% less for KDA on an H100); so does a
 * decode of at most ONE_LAUNCH_DECODE_ROWS rows (B = 1: 7.1 against
 * 8.7 us), and one whose blocks run whole heads, at any batch: since the
 * step kernel is compiled for its exact conv width and gates, GDN's decode
 * at B = 256 takes 381.8 us in one launch against 400.1 behind the
 * prologue kernel (H100), and KDA's per-channel decays, which the prologue
 * would write and the recurrence read back, made one launch the faster
 * form for KDA before that (B = 256: 427.8 against 446.1 us).
 * Between the two, one-launch blocks would split heads into value tiles
 * that repeat their head's conv and norms (B = 64 split so took 145
 * against 114 us). docs/architecture.md has the table. */
inline bool step_in_one_launch(const gpu_common &g, const ssm_step_v1 *step)
{
    if (g.one_launch == ONE_LAUNCH_NEVER || step->token_offsets || g.d.W > 4)
        return false;
    return g.one_launch == ONE_LAUNCH_ALWAYS || step->tokens > 1 ||
           step->rows <= ONE_LAUNCH_DECODE_ROWS || step_whole_heads(g, step->rows);
}

/* Whether this plugin's steps can find a commit pending (compact defines
 * it to 1 before including this file): only then is the step kernel's
 * variant that applies one compiled, the others keep no code for it. */
#ifndef SSM_STEP_PENDING
#define SSM_STEP_PENDING 0
#endif

/* Whether this plugin's decodes can fold a replay ring (replay defines it
 * to 1): only then is the step kernel's HISTORY variant compiled. */
#ifndef SSM_STEP_HISTORY
#define SSM_STEP_HISTORY 0
#endif

template <int E, bool KDA, class State, class Act, bool PENDING, bool HISTORY>
inline void launch_step_variant(const tile_args &a, const step_inputs &in, dim3 grid,
                                int32_t rows, cudaStream_t st)
{
    /* Always opted in: the kernel's static staging (up to 32 KiB) counts
     * against the 48 KiB a launch gets without the attribute. The step's
     * tokens, and where a commit can be pending its records. */
    int32_t tokens = a.tokens + (PENDING ? a.max_tokens : 0);
    size_t shared = step_shared_bytes<8 * E, KDA>(tokens, rows);
    void (*kernel)(tile_args, step_inputs) =
        step_kernel<E, KDA, State, Act, PENDING, HISTORY, false, false>;
    if (a.d.W == 4)
        kernel = a.d.fast_math ? step_kernel<E, KDA, State, Act, PENDING, HISTORY, true, true>
                               : step_kernel<E, KDA, State, Act, PENDING, HISTORY, true, false>;
    else if (a.d.fast_math)
        kernel = step_kernel<E, KDA, State, Act, PENDING, HISTORY, false, true>;
    cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    kernel<<<grid, SSM_STEP_THREADS, shared, st>>>(a, in);
}

template <int E, bool KDA, class State, class Act>
inline void launch_step_kind(const tile_args &a, const step_inputs &in, dim3 grid, int32_t rows,
                             cudaStream_t st)
{
    if constexpr (SSM_STEP_PENDING) {
        if (a.pending.codes) {
            launch_step_variant<E, KDA, State, Act, true, false>(a, in, grid, rows, st);
            return;
        }
    }
    if constexpr (SSM_STEP_HISTORY) {
        if (in.cell_arrivals) {
            launch_step_variant<E, KDA, State, Act, false, true>(a, in, grid, rows, st);
            return;
        }
    }
    launch_step_variant<E, KDA, State, Act, false, false>(a, in, grid, rows, st);
}

template <class State, class Act>
inline void launch_step_typed(const tile_args &a, const step_inputs &in, dim3 grid, int32_t rows,
                              cudaStream_t st)
{
    switch (a.d.K * 2 + (a.d.kda ? 1 : 0)) {
    case 64: launch_step_kind<4, false, State, Act>(a, in, grid, rows, st); break;
    case 65: launch_step_kind<4, true, State, Act>(a, in, grid, rows, st); break;
    case 128: launch_step_kind<8, false, State, Act>(a, in, grid, rows, st); break;
    case 129: launch_step_kind<8, true, State, Act>(a, in, grid, rows, st); break;
    case 257: launch_step_kind<16, true, State, Act>(a, in, grid, rows, st); break;
    default: launch_step_kind<16, false, State, Act>(a, in, grid, rows, st); break;
    }
}

/* Tiles a block runs in a one-launch step: whole heads where
 * step_whole_heads() says so; below that, a decode takes tile_passes()'s
 * choice and a verify one tile a block, for parallelism. Never changes a
 * bit. */
inline int32_t step_passes(const gpu_common &g, const tile_args &a)
{
    if (step_whole_heads(g, a.rows))
        return tiles_per_head(a.d.V, SSM_TILE_RPL);
    return a.tokens == 1 ? tile_passes(g, a, a.rows) : 1;
}

/* A decode or verify in one launch (fused.cuh). `a` says where the state
 * is, what is stored (STORE_FINAL: decode in place; STORE_EACH: native's
 * snapshots; STORE_NONE: compact) and where outputs go; `in` the inputs,
 * whether they are staged, and the records (compact). */
inline ssm_status launch_step(const gpu_common &g, tile_args a, const step_inputs &in,
                              void *stream, const ssm_services_v1 *s)
{
    if (a.rows == 0)
        return SSM_OK;
    if (a.rows > 65535)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "a batch of %d rows: the CUDA kernels take at most 65535", a.rows);
    a.passes = step_passes(g, a);
    int32_t rows = a.passes * tile_rows(SSM_TILE_RPL);
    rows = rows < g.d.V ? rows : g.d.V;
    dim3 grid((unsigned)tile_blocks_per_head(g.d.V, a.passes), (unsigned)g.d.HV,
              (unsigned)a.rows);
    cudaStream_t st = (cudaStream_t)stream;
    bool bf16_state = g.state_dtype == SSM_DTYPE_BF16, bf16_act = g.act_dtype == SSM_DTYPE_BF16;
    if (bf16_state && bf16_act)
        launch_step_typed<bf16, bf16>(a, in, grid, rows, st);
    else if (bf16_state)
        launch_step_typed<bf16, float>(a, in, grid, rows, st);
    else if (bf16_act)
        launch_step_typed<float, bf16>(a, in, grid, rows, st);
    else
        launch_step_typed<float, float>(a, in, grid, rows, st);
    return launch_status(s, "step kernel");
}

/* A decode in one launch: the state in place, the window advanced, a
 * pending commit (compact; NULL: none) applied first. */
inline ssm_status launch_decode(const gpu_common &g, const ssm_step_v1 *step, void *conv,
                                void *state, int32_t snapshots, const int32_t *current,
                                const pending_args *pending, const ssm_services_v1 *s)
{
    tile_args a = tile_for(g, step->rows, step->slots, step->layer, state, snapshots);
    a.current = current;
    tile_step_tokens(a, step);
    a.layout = step_layout(step);
    a.store = STORE_FINAL;
    if (pending)
        a.pending = *pending;
    return launch_step(g, a, step_inputs_for(g, step, conv, false), step->stream, s);
}

/* Prefill and decode in place, as every mode runs them: a prologue that
 * advances the window, then a tile job storing the state back, for the
 * step's token, or for a prefill each piece of T_max tokens where the chunk
 * kernel does not fit the device (else launch_prefill_chunked). `state`,
 * `snapshots` and `current` as tile_for and tile_args take them. A decode
 * applies `pending` first (compact's commit; NULL: none); a prefill takes
 * none (launch_pending_flush before it). */
inline ssm_status launch_in_place(const gpu_common &g, const ssm_step_v1 *step, void *conv,
                                  void *state, int32_t snapshots, const int32_t *current,
                                  const ssm_services_v1 *s, const pending_args *pending = NULL)
{
    if (step->token_offsets && step->layer >= 0 && g.chunked_prefill)
        return launch_prefill_chunked(g, step, conv, state, snapshots, current, s);
    if (step->tokens == 1 && step_in_one_launch(g, step))
        return launch_decode(g, step, conv, state, snapshots, current, pending, s);
    int32_t pieces = step->token_offsets ? (step->max_row_tokens + g.max_tokens - 1) / g.max_tokens
                                         : 1;
    for (int32_t p = 0; p < pieces; p++) {
        prep_args pa = prep_for(g, step, conv, false);
        pa.piece = p * g.max_tokens;
        ssm_status st = launch_prep(g, pa, step->stream, s);
        tile_args ta = tile_for(g, step->rows, step->slots, step->layer, state, snapshots);
        ta.current = current;
        tile_step_tokens(ta, step);
        ta.layout = step_layout(step); /* a decode's; 0 for a prefill */
        ta.piece = pa.piece;
        ta.store = STORE_FINAL;
        ta.after_prep = true;
        if (pending && !step->token_offsets)
            ta.pending = *pending;
        if (st == SSM_OK)
            st = launch_tile(g, ta, step->stream, s);
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

template <int E, int MAXT, bool KDA, class Act, bool EXACT, int ROWS, bool TENSOR>
inline void launch_identity_form(const tile_args &a, cudaStream_t st)
{
    dim3 grid((unsigned)a.rows * (unsigned)identity_row_blocks(a.d.V, ROWS), a.d.HV);
    dim3 block(SSM_IDENTITY_THREADS);
    size_t shared = identity_shared_bytes(a.history + a.tokens, a.tokens, a.d, ROWS);
    cudaFuncSetAttribute(identity_kernel<E, MAXT, KDA, Act, EXACT, ROWS, TENSOR>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    launch_kernel(identity_kernel<E, MAXT, KDA, Act, EXACT, ROWS, TENSOR>, grid, block, shared,
                  st, a.after_prep, a);
}

/* The products on tensor cores (a.identity_tensor) where a block holds 128
 * rows of at most four tokens, at K = 128 (the kernels compiled for it). */
template <int E, int MAXT, bool KDA, class Act, bool EXACT, int ROWS>
inline void launch_identity_rows(const tile_args &a, cudaStream_t st)
{
    if constexpr (E == 16 && MAXT == 4 && ROWS == SSM_IDENTITY_TC_ROWS) {
        if (a.identity_tensor && identity_block_rows(a.d.V, ROWS) == ROWS) {
            launch_identity_form<E, MAXT, KDA, Act, EXACT, ROWS, true>(a, st);
            return;
        }
    }
    launch_identity_form<E, MAXT, KDA, Act, EXACT, ROWS, false>(a, st);
}

/* `rows`: value rows a block (identity_rows_for). */
template <int E, int MAXT, bool KDA, class Act, bool EXACT>
inline void launch_identity_typed(const tile_args &a, int32_t rows, cudaStream_t st)
{
    if (rows == SSM_IDENTITY_SMALL_ROWS)
        launch_identity_rows<E, MAXT, KDA, Act, EXACT, SSM_IDENTITY_SMALL_ROWS>(a, st);
    else
        launch_identity_rows<E, MAXT, KDA, Act, EXACT, SSM_IDENTITY_THREADS>(a, st);
}

/* The kernel's registers hold 2 MAXT products a row: 4 for MTP rounds of
 * up to 4 tokens (a kernel of its own for exactly 4, the T = 4 round every
 * MTP engine runs), else 16 (SSM_MAX_DRAFT_TOKENS + 1). */
template <int E, bool KDA, class Act>
inline void launch_identity_tokens(const tile_args &a, int32_t rows, cudaStream_t st)
{
    if (a.tokens == 4)
        launch_identity_typed<E, 4, KDA, Act, true>(a, rows, st);
    else if (a.tokens < 4)
        launch_identity_typed<E, 4, KDA, Act, false>(a, rows, st);
    else
        launch_identity_typed<E, 16, KDA, Act, false>(a, rows, st);
}

template <int E, class Act>
inline void launch_identity_kind(const tile_args &a, int32_t rows, cudaStream_t st)
{
    if (a.d.kda)
        launch_identity_tokens<E, true, Act>(a, rows, st);
    else
        launch_identity_tokens<E, false, Act>(a, rows, st);
}

template <class Act>
inline void launch_identity_keys(const tile_args &a, int32_t rows, cudaStream_t st)
{
    switch (a.d.K) { /* as launch_tile_typed */
    case 32: launch_identity_kind<4, Act>(a, rows, st); break;
    case 64: launch_identity_kind<8, Act>(a, rows, st); break;
    default: launch_identity_kind<16, Act>(a, rows, st); break;
    }
}

template <int TP, bool KDA, class Act>
inline void launch_identity_direct_typed(const tile_args &a, cudaStream_t st)
{
    dim3 grid((unsigned)a.rows * (unsigned)(a.d.V / SSM_DIRECT_ROWS), a.d.HV);
    size_t shared = identity_direct_shared_bytes(a.history, a.tokens, a.d);
    cudaFuncSetAttribute(identity_direct_kernel<TP, KDA, Act>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared);
    launch_kernel(identity_direct_kernel<TP, KDA, Act>, grid, dim3(SSM_DIRECT_THREADS), shared,
                  st, a.after_prep, a);
}

template <bool KDA, class Act>
inline void launch_identity_direct_places(const tile_args &a, cudaStream_t st)
{
    switch (identity_direct_places(a.tokens)) {
    case 1: launch_identity_direct_typed<1, KDA, Act>(a, st); break;
    case 2: launch_identity_direct_typed<2, KDA, Act>(a, st); break;
    default: launch_identity_direct_typed<4, KDA, Act>(a, st); break;
    }
}

/* identity_direct.cuh's kernel for a step it fits (identity_direct_fits). */
template <class Act> inline void launch_identity_direct(const tile_args &a, cudaStream_t st)
{
    if (a.d.kda)
        launch_identity_direct_places<true, Act>(a, st);
    else
        launch_identity_direct_places<false, Act>(a, st);
}

/* Replay's output-only step through the identity (fp32 state): the rows
 * whose ring would overflow fold first, by default in identity.cuh's
 * kernel's own blocks (10% faster at B = 256 on an H100) or, with
 * SSMSTATE_CUDA_REPLAY_FOLD=job, in tile_kernel's HISTORY_FOLD job before
 * it. */
inline ssm_status launch_identity(const gpu_common &g, const tile_args &a, void *stream,
                                  const ssm_services_v1 *s)
{
    if (a.rows == 0)
        return SSM_OK;
    tile_args b = a;
    b.fold_inside = g.identity_fold_inside;
    b.fold_early = g.identity_fold_early;
    b.fold_staged = g.identity_fold_staged;
    b.identity_tensor = g.identity_tensor;
    if (!b.fold_inside) {
        tile_args fold = a;
        fold.history_mode = HISTORY_FOLD;
        fold.store = STORE_NONE;
        fold.out = NULL;
        ssm_status st = launch_tile(g, fold, stream, s);
        if (st != SSM_OK)
            return st;
    }
    cudaStream_t cs = (cudaStream_t)stream;
    b.after_prep = a.after_prep && g.overlap; /* after the prologue or the fold job */
    const int32_t rows =
        g.identity_rows ? g.identity_rows : identity_rows_for(a.rows, a.d.HV, a.d.V, g.sms);
    const bool direct = identity_direct_fits(a.d, a.tokens, a.history, g.shared_optin) &&
                        (g.identity_choice == IDENTITY_DIRECT ||
                         (g.identity_choice == IDENTITY_AUTO && !a.d.kda && a.tokens == 1));
    if (direct) {
        if (g.act_dtype == SSM_DTYPE_BF16)
            launch_identity_direct<bf16>(b, cs);
        else
            launch_identity_direct<float>(b, cs);
    } else if (g.act_dtype == SSM_DTYPE_BF16)
        launch_identity_keys<bf16>(b, rows, cs);
    else
        launch_identity_keys<float>(b, rows, cs);
    return launch_status(s, "replay identity kernel");
}

/* ------------------------------------------------------------- commit */

/* Applies the pending commits (compact, pending_args) of `rows` rows' slots
 * to their states in place, layer `layer` or every layer (-1): a tile job
 * of no tokens whose tiles with nothing pending return at once. Before
 * every reader of the state that is not a step (prefill, page moves). */
inline ssm_status launch_pending_flush(const gpu_common &g, const pending_args &p, int32_t rows,
                                       const int32_t *slots, int32_t layer, void *state,
                                       void *stream, const ssm_services_v1 *s)
{
    tile_args a = tile_for(g, rows, slots, layer, state, 1);
    a.tokens = 0;
    a.tok = NULL;
    a.q = NULL;
    a.store = STORE_FINAL;
    a.pending = p;
    a.pending.only = true;
    a.pending.keep = false;
    return launch_tile(g, a, stream, s);
}

/* Compact's commit (pending.cuh): every layer's window moved and its
 * records marked for the next step. */
inline ssm_status launch_pending_commit(const gpu_common &g, const pending_args &p,
                                        const ssm_commit_v1 *commit, void *conv,
                                        const ssm_services_v1 *s)
{
    if (commit->rows == 0)
        return SSM_OK;
    tile_args a = tile_for(g, commit->rows, commit->slots, -1, NULL, 1);
    a.tokens = commit->tokens;
    a.accepted = commit->accepted;
    a.layout = commit_layout(commit);
    a.conv = conv;
    a.conv_rows = g.conv_rows;
    a.pending = p;
    int64_t jobs = (int64_t)commit->rows * g.layers;
    int64_t windows = jobs * window_blocks(g.d.D);
    if (jobs + windows > 0x7fffffff)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "%lld rows x layers is more than one commit launch takes",
                        (long long)jobs);
    a.window_x = (int32_t)windows;
    dim3 grid((unsigned)(windows + jobs));
    cudaStream_t st = (cudaStream_t)commit->stream;
    if (g.act_dtype == SSM_DTYPE_BF16)
        pending_commit_kernel<bf16><<<grid, 32 * SSM_TILE_WARPS, 0, st>>>(a);
    else
        pending_commit_kernel<float><<<grid, 32 * SSM_TILE_WARPS, 0, st>>>(a);
    return launch_status(s, "commit kernel");
}

inline commit_args commit_for(const gpu_common &g, int32_t rows, int32_t tokens,
                              const int32_t *slots, const int32_t *accepted, void *conv)
{
    commit_args a = {};
    a.d = g.d;
    a.rows = rows;
    a.layers = g.layers;
    a.capacity = g.capacity;
    a.tokens = tokens;
    a.max_tokens = g.max_tokens;
    a.slots = slots;
    a.accepted = accepted;
    a.conv = conv;
    a.conv_rows = g.conv_rows;
    a.flags = g.flags;
    return a;
}

/* Commits layers [first, first + count). */
inline ssm_status launch_commit(const gpu_common &g, commit_args a, int32_t first, int32_t count,
                                void *stream, const ssm_services_v1 *s)
{
    if (a.rows == 0)
        return SSM_OK;
    if (a.rows > 65535)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "a batch of %d rows: the CUDA kernels take at most 65535", a.rows);
    a.layer_first = first;
    dim3 grid((a.d.D / 4 + SSM_PREP_THREADS - 1) / SSM_PREP_THREADS, a.rows, count);
    cudaStream_t st = (cudaStream_t)stream;
    by_width_and_act(g, [&](auto width, auto act) {
        commit_kernel<decltype(width)::value, decltype(act)><<<grid, SSM_PREP_THREADS, 0, st>>>(a);
    });
    return launch_status(s, "commit kernel");
}

/* ------------------------------------------------------------- slots */

/* Zeroes `bytes` at `ptr` on the stream. */
inline ssm_status gpu_zero(void *ptr, size_t bytes, void *stream, const ssm_services_v1 *s)
{
    cudaError_t e = cudaMemsetAsync(ptr, 0, bytes, (cudaStream_t)stream);
    return e == cudaSuccess ? SSM_OK
                            : s->error(s->core, SSM_ERR_DEVICE, "reset: %s", cudaGetErrorString(e));
}

/* Zeroes a slot's window counters (fused.cuh). They are zero after every
 * step; a reset makes sure of it for a slot whose step a replayed graph
 * broke (two rows on one slot), as it does for everything else. */
inline ssm_status gpu_reset_arrivals(const gpu_common &g, int32_t slot, void *stream,
                                     const ssm_services_v1 *s)
{
    size_t per_slot = (size_t)g.layers * g.d.H;
    return gpu_zero(g.arrivals + (size_t)slot * per_slot, per_slot * sizeof(int32_t), stream, s);
}

/* Copies `bytes` device to device on the stream. */
inline ssm_status gpu_copy(void *dst, const void *src, size_t bytes, void *stream,
                           const ssm_services_v1 *s)
{
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream);
    return e == cudaSuccess ? SSM_OK
                            : s->error(s->core, SSM_ERR_DEVICE, "copy: %s", cudaGetErrorString(e));
}

/* The conv windows of a slot's layers: rows [0, W-1) of each buffer. */
inline ssm_status gpu_copy_windows(const gpu_common &g, void *conv, int32_t slot, void *const *dst,
                                   const void *const *src, void *stream, const ssm_services_v1 *s)
{
    size_t row = (size_t)g.d.D * g.act_size;
    size_t window = (size_t)(g.d.W - 1) * row;
    for (int32_t l = 0; l < g.layers && window > 0; l++) {
        uint8_t *buffer = (uint8_t *)conv + ((size_t)slot * g.layers + l) * g.conv_rows * row;
        ssm_status st = dst ? gpu_copy(dst[l], buffer, window, stream, s)
                            : gpu_copy(buffer, src[l], window, stream, s);
        if (st != SSM_OK)
            return st;
    }
    return SSM_OK;
}

} /* namespace ssm */
#endif
