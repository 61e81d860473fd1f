/* Tuning on the GPU (docs/tuning.md), shared by the built-in modes: the
 * candidates of each family they tune, scratch state to time them on, and
 * the timing itself. The core drives it through the plugin's tune_* entries
 * (plugin_v1.h), outside any step. Timing runs the very launch functions of
 * launch.cuh on a gpu_common of its own (one layer, `max_rows` slots, its
 * own flag words), allocated by tune_begin through the services and
 * released by tune_end: the serving pool is never read or written. */
#ifndef SSM_COMMON_CUDA_TUNE_CUH
#define SSM_COMMON_CUDA_TUNE_CUH

#include <stdarg.h>
#include <stdio.h>

#include "plugins/common/cuda/launch.cuh"

namespace ssm {

/* Names by candidate index (launch.cuh's DECODE_*, MULTI_*, PREFILL_*). */
static const char *const tune_decode_names[DECODE_CANDIDATES] = {"auto", "passes=1",
                                                                 "passes=head", "no-overlap"};
static const char *const tune_verify_names[MULTI_CANDIDATES] = {"auto", "blocks=6", "blocks=1",
                                                                "no-overlap"};
/* A commit has no prologue to overlap: no "no-overlap". */
static const char *const tune_commit_names[MULTI_NO_OVERLAP] = {"auto", "blocks=6", "blocks=1"};
static const char *const tune_prefill_names[PREFILL_CANDIDATES] = {"auto", "rows=32", "rows=64"};

/* How a mode's steps use the recurrence, so its timings run the job it
 * serves: native's verify stores each token's state (snapshots), compact's
 * and replay's store none. replays_commit: the mode's commit replays
 * records in a tile job of its own (no built-in mode's does: compact's next
 * step applies them, kernels/cuda/pending.cuh). */
struct tune_profile {
    bool verify_snapshots;
    bool replays_commit;
};

struct gpu_tune {
    tune_profile profile;
    ssm_tune_family_v1 families[4];
    int32_t count;
    /* the scratch, between tune_begin and tune_end */
    bool active;
    gpu_common g;
    int32_t rows; /* slots of the scratch */
    const ssm_services_v1 *svc;
    ssm_layer_weights weights;
    void *state, *conv, *x, *gate, *beta, *out;
    float *conv_weight, *a_log, *dt_bias;
    int32_t *accepted, *offsets;
    uint32_t *flags;
    char why[160]; /* the latest launch error, written by tune_error */
    /* Test-only: $SSMSTATE_TUNING_TEST_FAIL = "family:candidate" (e.g.
     * "verify:blocks=1") makes that candidate launch an impossible block,
     * a real launch failure (tests/gpu/check_tuning_cuda). */
    int32_t fail_family;
    char fail_candidate[32];
};

/* The test-only failing candidate's launch: more threads than a block has. */
__global__ void tune_impossible_kernel() {}

/* The families a context of g can tune, into t (tune_space). */
inline void gpu_tune_init(gpu_tune &t, const gpu_common &g, tune_profile profile)
{
    memset(&t, 0, sizeof t);
    t.profile = profile;
    t.families[t.count++] = {SSM_TUNE_DECODE, DECODE_CANDIDATES, tune_decode_names};
    t.families[t.count++] = {SSM_TUNE_VERIFY, MULTI_CANDIDATES, tune_verify_names};
    if (profile.replays_commit)
        t.families[t.count++] = {SSM_TUNE_COMMIT, MULTI_NO_OVERLAP, tune_commit_names};
    if (g.chunked_prefill && g.tensor_core_prefill)
        t.families[t.count++] = {SSM_TUNE_PREFILL, PREFILL_CANDIDATES, tune_prefill_names};
}

inline const ssm_tune_family_v1 *gpu_tune_family(const gpu_tune &t, int32_t family)
{
    for (int32_t i = 0; i < t.count; i++)
        if (t.families[i].family == family)
            return &t.families[i];
    return NULL;
}

/* Installs choices in g (tune_apply): all or nothing. */
inline ssm_status gpu_tune_apply(gpu_common &g, const gpu_tune &t,
                                 const ssm_tune_choice_v1 *choices, int32_t count,
                                 const ssm_services_v1 *s)
{
    int8_t table[SSM_TUNE_FAMILIES][SSM_TUNE_BUCKETS];
    memset(table, 0, sizeof table);
    for (int32_t i = 0; i < count; i++) {
        const ssm_tune_choice_v1 &c = choices[i];
        const ssm_tune_family_v1 *f = gpu_tune_family(t, c.family);
        if (!f || c.bucket < 0 || c.bucket >= SSM_TUNE_BUCKETS || c.candidate < 0 ||
            c.candidate >= f->candidates)
            return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                            "tune_apply: family %d, bucket %d, candidate %d is not offered",
                            (int)c.family, (int)c.bucket, (int)c.candidate);
        table[c.family][c.bucket] = (int8_t)c.candidate;
    }
    memcpy(g.tuned, table, sizeof table);
    return SSM_OK;
}

inline void gpu_tune_end(gpu_tune &t)
{
    if (!t.active)
        return;
    const ssm_services_v1 *s = t.svc;
    gpu_common_destroy(t.g, s);
    void *buffers[] = {t.state, t.conv, t.x, t.gate, t.beta, t.out, t.conv_weight,
                       t.a_log, t.dt_bias, t.accepted, t.offsets, t.flags};
    for (void *b : buffers)
        s->release(s->core, b);
    t.state = t.conv = t.x = t.gate = t.beta = t.out = NULL;
    t.conv_weight = t.a_log = t.dt_bias = NULL;
    t.accepted = t.offsets = NULL;
    t.flags = NULL;
    t.active = false;
}

/* Scratch for batches of up to max_rows rows: one layer of every buffer a
 * step of the mode reads or writes, zero-filled (finite inputs), all through
 * the services. SSM_ERR_OUT_OF_MEMORY (after s->error) leaves nothing. */
inline ssm_status gpu_tune_begin(gpu_tune &t, const ssm_mode_params_v2 *p, int32_t max_rows,
                                 const ssm_services_v1 *s)
{
    gpu_tune_end(t);
    if (max_rows < 1 || max_rows > 65535)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT, "tune_begin: %d rows", (int)max_rows);
    ssm_mode_params_v2 scratch = *p;
    scratch.model.layers = 1;
    scratch.capacity = max_rows;
    scratch.options = NULL;
    scratch.options_count = 0;
    t.svc = s;
    t.rows = max_rows;
    t.active = true;
    t.fail_family = -1;
    const char *fail = getenv("SSMSTATE_TUNING_TEST_FAIL");
    const char *colon = fail ? strchr(fail, ':') : NULL;
    for (int32_t i = 0; colon && i < t.count; i++) {
        const char *name = t.families[i].family == SSM_TUNE_DECODE    ? "decode"
                           : t.families[i].family == SSM_TUNE_VERIFY  ? "verify"
                           : t.families[i].family == SSM_TUNE_COMMIT  ? "commit"
                           : t.families[i].family == SSM_TUNE_PREFILL ? "prefill"
                                                                       : "";
        if (strlen(name) == (size_t)(colon - fail) && !strncmp(fail, name, strlen(name))) {
            t.fail_family = t.families[i].family;
            snprintf(t.fail_candidate, sizeof t.fail_candidate, "%s", colon + 1);
        }
    }
    ssm_status st = gpu_common_create(t.g, &scratch, s);
    const gpu_common &g = t.g;
    size_t rows = (size_t)max_rows, tokens = rows * SSM_CHUNK_TOKENS;
    size_t act = g.act_size;
    if (st == SSM_OK) {
        t.state = s->alloc(s->core, rows * g.max_tokens * (size_t)g.state_elems * g.state_size);
        t.conv = s->alloc(s->core, rows * g.conv_rows * (size_t)g.d.D * act);
        t.x = s->alloc(s->core, tokens * g.d.D * act);
        t.gate = s->alloc(s->core, tokens * g.d.GW * act);
        t.beta = s->alloc(s->core, tokens * g.d.HV * act);
        t.out = s->alloc(s->core, tokens * g.d.HV * (size_t)g.d.V * act);
        t.conv_weight = (float *)s->alloc(s->core, (size_t)g.d.D * g.d.W * sizeof(float));
        t.a_log = (float *)s->alloc(s->core, (size_t)g.d.HV * sizeof(float));
        t.dt_bias = (float *)s->alloc(s->core, (size_t)g.d.GW * sizeof(float));
        t.accepted = (int32_t *)s->alloc(s->core, rows * sizeof(int32_t));
        t.offsets = (int32_t *)s->alloc(s->core, (rows + 1) * sizeof(int32_t));
        t.flags = (uint32_t *)s->alloc(s->core, (rows + 1) * sizeof(uint32_t));
        if (!t.state || !t.conv || !t.x || !t.gate || !t.beta || !t.out || !t.conv_weight ||
            !t.a_log || !t.dt_bias || !t.accepted || !t.offsets || !t.flags)
            st = s->error(s->core, SSM_ERR_OUT_OF_MEMORY,
                          "out of device memory for the tuning scratch of %d rows",
                          (int)max_rows);
    }
    int32_t *host = NULL;
    if (st == SSM_OK) {
        host = (int32_t *)s->alloc_host(s->core, (2 * rows + 1) * sizeof(int32_t));
        if (!host)
            st = s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    }
    if (st == SSM_OK) {
        for (size_t r = 0; r < rows; r++)
            host[r] = g.max_tokens; /* every verified token accepted */
        for (size_t r = 0; r <= rows; r++)
            host[rows + r] = (int32_t)(r * SSM_CHUNK_TOKENS); /* one piece per row */
        cudaError_t e = cudaMemcpy(t.accepted, host, rows * sizeof(int32_t),
                                   cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
            e = cudaMemcpy(t.offsets, host + rows, (rows + 1) * sizeof(int32_t),
                           cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
            st = s->error(s->core, SSM_ERR_DEVICE, "tune_begin: %s", cudaGetErrorString(e));
    }
    s->release_host(s->core, host);
    if (st != SSM_OK) {
        gpu_tune_end(t);
        return st;
    }
    t.g.flags = t.flags; /* never the context's flag words */
    t.weights.conv_weight = t.conv_weight;
    t.weights.conv_bias = NULL;
    t.weights.a_log = t.a_log;
    t.weights.dt_bias = t.dt_bias;
    return SSM_OK;
}

/* The services the timed launches report through: errors land in t.why. */
static void tune_log(void *core, int level, const char *fmt, ...) {}

static ssm_status tune_error(void *core, ssm_status code, const char *fmt, ...)
{
    gpu_tune *t = (gpu_tune *)core;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->why, sizeof t->why, fmt, ap);
    va_end(ap);
    return code;
}

/* trial->why from the launch error in t.why, without the launch function's
 * own prefix ("recurrence kernel: ..."): "launch: <CUDA's message>". */
inline void tune_failure(const gpu_tune &t, ssm_tune_trial_v1 *trial)
{
    const char *colon = strchr(t.why, ':');
    const char *message = colon && colon[1] == ' ' ? colon + 2 : t.why[0] ? t.why : "failed";
    snprintf(trial->why, sizeof trial->why, "launch: %.150s", message);
}

/* One launch sequence of `family` at `rows` rows on the scratch. */
inline ssm_status gpu_tune_once(gpu_tune &t, int32_t family, int32_t rows, cudaStream_t stream,
                                const ssm_services_v1 *s)
{
    gpu_common &g = t.g;
    ssm_step_v1 step = {};
    step.struct_size = sizeof step;
    step.layer = 0;
    step.rows = rows;
    step.slots = g.slot_table;
    step.weights = &t.weights;
    step.io.x = t.x;
    step.io.gate = t.gate;
    step.io.beta = t.beta;
    step.io.out = t.out;
    step.stream = stream;
    switch (family) {
    case SSM_TUNE_DECODE:
        step.tokens = 1;
        step.max_row_tokens = 1;
        return launch_in_place(g, &step, t.conv, t.state, 1, NULL, s);
    case SSM_TUNE_VERIFY: {
        step.tokens = g.max_tokens;
        step.max_row_tokens = g.max_tokens;
        ssm_status st = launch_prep(g, prep_for(g, &step, t.conv, true), stream, s);
        int32_t snapshots = t.profile.verify_snapshots ? g.max_tokens : 1;
        tile_args ta = tile_for(g, rows, g.slot_table, 0, t.state, snapshots);
        tile_step_tokens(ta, &step);
        ta.store = t.profile.verify_snapshots ? STORE_EACH : STORE_NONE;
        ta.after_prep = true;
        return st != SSM_OK ? st : launch_tile(g, ta, stream, s);
    }
    case SSM_TUNE_COMMIT: {
        tile_args ta = tile_for(g, rows, g.slot_table, -1, t.state, 1);
        ta.tok_slot_stride = (int64_t)g.max_tokens * g.raw.bytes;
        ta.tok_layer_stride = 0;
        ta.tokens = g.max_tokens;
        ta.accepted = t.accepted;
        ta.q = NULL;
        ta.store = STORE_FINAL;
        ta.conv = t.conv;
        ta.conv_rows = g.conv_rows;
        return launch_tile(g, ta, stream, s);
    }
    case SSM_TUNE_PREFILL:
        step.tokens = 0;
        step.token_offsets = t.offsets;
        step.max_row_tokens = SSM_CHUNK_TOKENS;
        return launch_prefill_chunked(g, &step, t.conv, t.state, 1, NULL, s);
    default:
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT, "family %d is not tuned here",
                        (int)family);
    }
}

/* Times trial->candidate (tune_run). A candidate that cannot launch is a
 * result, not an error: SSM_OK with trial->why set. An error return means
 * the device is no longer usable (a sticky error) or the call was wrong. */
inline ssm_status gpu_tune_run(gpu_tune &t, ssm_tune_trial_v1 *trial, const ssm_services_v1 *s)
{
    trial->ms = 0;
    trial->why[0] = '\0';
    const ssm_tune_family_v1 *f = gpu_tune_family(t, trial->family);
    if (!t.active || !f || trial->candidate < 0 || trial->candidate >= f->candidates ||
        trial->bucket < 0 || trial->bucket >= SSM_TUNE_BUCKETS)
        return s->error(s->core, SSM_ERR_INVALID_ARGUMENT,
                        "tune_run: family %d bucket %d candidate %d without tune_begin or "
                        "not offered",
                        (int)trial->family, (int)trial->bucket, (int)trial->candidate);
    int64_t wanted = (int64_t)1 << trial->bucket;
    int32_t rows = (int32_t)(wanted < t.rows ? wanted : t.rows);
    memset(t.g.tuned, 0, sizeof t.g.tuned);
    t.g.tuned[trial->family][tune_bucket(rows)] = (int8_t)trial->candidate;
    ssm_services_v1 quiet = *s;
    quiet.core = &t;
    quiet.log = tune_log;
    quiet.error = tune_error;
    cudaStream_t stream = (cudaStream_t)trial->stream;
    t.why[0] = '\0';
    (void)cudaGetLastError();
    /* A first run: launch errors (resources, shared memory) show here. */
    ssm_status st;
    if (trial->family == t.fail_family && !strcmp(f->names[trial->candidate], t.fail_candidate)) {
        tune_impossible_kernel<<<1, 4096, 0, stream>>>();
        st = launch_status(&quiet, "test-only failing candidate");
    } else {
        st = gpu_tune_once(t, trial->family, rows, stream, &quiet);
    }
    cudaError_t sync = cudaStreamSynchronize(stream);
    if (sync != cudaSuccess)
        return s->error(s->core, SSM_ERR_DEVICE, "tuning %s candidate %s: %s",
                        f->names[0], f->names[trial->candidate], cudaGetErrorString(sync));
    if (st != SSM_OK) {
        tune_failure(t, trial);
        return SSM_OK;
    }
    cudaEvent_t begin = NULL, end = NULL;
    cudaError_t e = cudaEventCreate(&begin);
    if (e == cudaSuccess)
        e = cudaEventCreate(&end);
    float first = 0, total = 0;
    int32_t runs = 1;
    if (e == cudaSuccess) {
        /* One timed run sizes the batch that fills the budget. */
        cudaEventRecord(begin, stream);
        st = gpu_tune_once(t, trial->family, rows, stream, &quiet);
        cudaEventRecord(end, stream);
        e = cudaEventSynchronize(end);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&first, begin, end);
    }
    if (e == cudaSuccess && st == SSM_OK) {
        double budget = trial->budget_ms > 0 ? trial->budget_ms : 20;
        runs = first > 0 ? (int32_t)(budget / first) : 100;
        runs = runs < 1 ? 1 : runs > 100 ? 100 : runs;
        cudaEventRecord(begin, stream);
        for (int32_t i = 0; i < runs && st == SSM_OK; i++)
            st = gpu_tune_once(t, trial->family, rows, stream, &quiet);
        cudaEventRecord(end, stream);
        e = cudaEventSynchronize(end);
        if (e == cudaSuccess)
            e = cudaEventElapsedTime(&total, begin, end);
    }
    if (begin)
        cudaEventDestroy(begin);
    if (end)
        cudaEventDestroy(end);
    memset(t.g.tuned, 0, sizeof t.g.tuned);
    if (e != cudaSuccess)
        return s->error(s->core, SSM_ERR_DEVICE, "tuning: %s", cudaGetErrorString(e));
    if (st != SSM_OK) {
        tune_failure(t, trial);
        return SSM_OK;
    }
    trial->ms = (double)total / runs;
    return SSM_OK;
}

} /* namespace ssm */
/* Defines a built-in mode's extern "C" <mode>_cuda_tune_* functions
 * (declared by SSM_TUNE_CUDA_DECLS of plugins/common/tune_entries.h) for the
 * instance type `type`, whose gpu_common is G(m) and tuning state
 * m->gpu->tune. */
#define SSM_TUNE_CUDA_ENTRIES(mode, type)                                                     \
    extern "C" ssm_status mode##_cuda_tune_space(type *m, const ssm_tune_family_v1 **families, \
                                                 int32_t *count)                              \
    {                                                                                         \
        *families = m->gpu->tune.families;                                                    \
        *count = m->gpu->tune.count;                                                          \
        return SSM_OK;                                                                        \
    }                                                                                         \
    extern "C" ssm_status mode##_cuda_tune_begin(type *m, int32_t max_rows, void *stream)      \
    {                                                                                         \
        (void)stream;                                                                         \
        return ssm::gpu_tune_begin(m->gpu->tune, &m->base.params, max_rows, m->base.services);\
    }                                                                                         \
    extern "C" ssm_status mode##_cuda_tune_run(type *m, ssm_tune_trial_v1 *trial)             \
    {                                                                                         \
        return ssm::gpu_tune_run(m->gpu->tune, trial, m->base.services);                      \
    }                                                                                         \
    extern "C" void mode##_cuda_tune_end(type *m) { ssm::gpu_tune_end(m->gpu->tune); }        \
    extern "C" ssm_status mode##_cuda_tune_apply(type *m, const ssm_tune_choice_v1 *choices,   \
                                                 int32_t count)                               \
    {                                                                                         \
        return ssm::gpu_tune_apply(G(m), m->gpu->tune, choices, count, m->base.services);     \
    }

#endif
