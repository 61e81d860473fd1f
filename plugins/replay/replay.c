/* The replay mode's table, options, plan and life cycle, and its CPU
 * transfers; its methods are the CPU's (replay_cpu_ops) or the GPU's
 * (replay_cuda.cu), chosen at create. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "plugins/common/build_caps.h"
#include "plugins/common/tune_entries.h"
#include "plugins/common/device_check.h"
#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/layout.h"
#include "plugins/replay/replay.h"

#define REPLAY_MODE_VERSION 1

#ifdef HAVE_CUDA
#define REPLAY_GPU_OPS (&replay_cuda_ops)
#else
#define REPLAY_GPU_OPS NULL
#endif
/* L when [replay] does not set it: at T = 4 a fold every 9 to 12 tokens. */
#define REPLAY_DEFAULT_HISTORY 16
/* Past this the history outweighs the state it saves at any real shape
 * (Qwen3-Next: 72 records are as large as the 2 MiB state). */
#define REPLAY_MAX_HISTORY 1024
/* Decodes of at most this many rows fold every step unless [replay]
 * fold_rows says otherwise: measured on the H200, the fold-free decode only
 * pays once the batch is large enough to be bound by bytes, not latency
 * (bench/results/, docs/modes.md). */
#define REPLAY_DEFAULT_FOLD_ROWS 8
#define REPLAY_MAX_FOLD_ROWS 65535

/* ------------------------------------------------------------- options */

/* Why an option (index `option`, -1 for a default) is rejected. */
static ssm_status reject(char *why, size_t why_len, int32_t *bad_option, int32_t option,
                         const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static ssm_status reject(char *why, size_t why_len, int32_t *bad_option, int32_t option,
                         const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, why_len, fmt, args);
    va_end(args);
    *bad_option = option;
    return SSM_ERR_CONFIG;
}

/* Decimal digits only, at most nine of them, so the value fits and the range
 * checks after can say what is wrong with it. */
static int parse_count(const char *text, int32_t *out)
{
    int32_t value = 0, digits = 0;
    for (const char *c = text; *c; c++, digits++) {
        if (*c < '0' || *c > '9' || digits == 9)
            return 0;
        value = value * 10 + (*c - '0');
    }
    *out = value;
    return digits > 0;
}

static int32_t next_power_of_two(int32_t n)
{
    int32_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* Reads the [replay] keys one by one; the combination is judged after. */
static ssm_status read_options(const ssm_mode_params_v2 *p, replay_options *o,
                               int32_t *history_option, int32_t *outputs_option, char *why,
                               size_t why_len, int32_t *bad_option)
{
    for (int32_t i = 0; i < p->options_count; i++) {
        const char *key = p->options[i].key, *value = p->options[i].value;
        if (!strcmp(key, "history")) {
            *history_option = i;
            if (!parse_count(value, &o->history))
                return reject(why, why_len, bad_option, i,
                              "'%s' is not a record count (a power of two from %d to %d, "
                              "e.g. %d)",
                              value, 2 * p->max_tokens, REPLAY_MAX_HISTORY,
                              next_power_of_two(2 * p->max_tokens > REPLAY_DEFAULT_HISTORY
                                                    ? 2 * p->max_tokens
                                                    : REPLAY_DEFAULT_HISTORY));
        } else if (!strcmp(key, "outputs")) {
            *outputs_option = i;
            if (!strcmp(value, "exact"))
                o->outputs = REPLAY_OUTPUTS_EXACT;
            else if (!strcmp(value, "identity"))
                o->outputs = REPLAY_OUTPUTS_IDENTITY;
            else if (!strcmp(value, "matrix"))
                o->outputs = REPLAY_OUTPUTS_MATRIX;
            else
                return reject(why, why_len, bad_option, i,
                              "'%s' is not an output form (allowed: exact, identity, matrix)",
                              value);
        } else if (!strcmp(key, "fold_rows")) {
            if (!parse_count(value, &o->fold_rows) || o->fold_rows > REPLAY_MAX_FOLD_ROWS)
                return reject(why, why_len, bad_option, i,
                              "'%s' is not a row count (0 to %d; 0 never folds early)", value,
                              REPLAY_MAX_FOLD_ROWS);
        } else {
            return reject(why, why_len, bad_option, i,
                          "unknown key (the replay mode takes: history, outputs, fold_rows)");
        }
    }
    return SSM_OK;
}

/* The output form without [replay] outputs: the fastest form that meets the
 * numerics contract on the context's device. On the GPU that is the
 * identity kernel (one read of the checkpoint and the history, no state
 * update; docs/modes.md has the measurements), over an fp32 state only: the
 * identity forms are refused over a bf16 one (parse_options). The CPU keeps
 * exact, native's outputs bit for bit, although the identity is faster there
 * too: the CPU path is the reference the other paths are compared with, not
 * a serving target. Where the GPU cannot stage the history for the
 * identity, creating the context falls back to exact (replay_cuda.cu). */
static replay_outputs replay_default_outputs(const ssm_mode_params_v2 *p)
{
    if (p->device.type == SSM_DEVICE_CUDA && p->state_dtype == SSM_DTYPE_F32)
        return REPLAY_OUTPUTS_IDENTITY;
    return REPLAY_OUTPUTS_EXACT;
}

/* The options of p with their defaults, every value and combination checked
 * against the model and the draft width. On rejection: why, and the option
 * at fault in *bad_option (-1 when a default is). */
static ssm_status parse_options(const ssm_mode_params_v2 *p, replay_options *o, char *why,
                                size_t why_len, int32_t *bad_option)
{
    int32_t history_option = -1, outputs_option = -1;
    o->history = REPLAY_DEFAULT_HISTORY;
    o->outputs = REPLAY_OUTPUTS_EXACT;
    o->fold_rows = REPLAY_DEFAULT_FOLD_ROWS;
    *bad_option = -1;
    ssm_status status =
        read_options(p, o, &history_option, &outputs_option, why, why_len, bad_option);
    if (status != SSM_OK)
        return status;
    o->outputs_set = outputs_option >= 0;
    if (!o->outputs_set)
        o->outputs = replay_default_outputs(p);
    int32_t L = o->history, fits = next_power_of_two(2 * p->max_tokens);
    if (L > REPLAY_MAX_HISTORY)
        return reject(why, why_len, bad_option, history_option,
                      "%d records are more than the %d allowed: a history that long takes "
                      "more memory than the snapshots it replaces",
                      L, REPLAY_MAX_HISTORY);
    if (L < 1 || (L & (L - 1)) != 0)
        return reject(why, why_len, bad_option, history_option,
                      "%d is not a power of two; use %d", L,
                      next_power_of_two(L > fits ? L : fits));
    if (L < 2 * p->max_tokens) {
        const char *rule = "a step folds first when n + 2T > L, so L must be at least 2T";
        if (history_option < 0)
            return reject(why, why_len, bad_option, -1,
                          "[replay] history defaults to %d records, too few for verifies of %d "
                          "tokens (1 + max_draft_tokens): %s = %d; set [replay] history = %d",
                          L, p->max_tokens, rule, 2 * p->max_tokens, fits);
        return reject(why, why_len, bad_option, history_option,
                      "%d records are too few for verifies of %d tokens (1 + "
                      "max_draft_tokens): %s = %d; use %d",
                      L, p->max_tokens, rule, 2 * p->max_tokens, fits);
    }
    /* Native rounds a bf16 state after every token; the identity forms never
     * round the history, so their gap to native grows with it: measured
     * 3.2e-3 relative RMS on average at 16 records with slow gates, and more
     * over longer histories (docs/modes.md). Only an explicit form gets
     * here: the default over a bf16 state is exact. */
    if (o->outputs != REPLAY_OUTPUTS_EXACT && p->state_dtype == SSM_DTYPE_BF16)
        return reject(why, why_len, bad_option, outputs_option,
                      "the identity forms need state_dtype = f32: over a bf16 state they "
                      "drift from native, which rounds the state after every token, more "
                      "the longer the history; use outputs = exact (the default there)");
    if (o->outputs == REPLAY_OUTPUTS_MATRIX && p->model.kind == SSM_MODEL_KDA)
        return reject(why, why_len, bad_option, outputs_option,
                      "matrix needs a scalar gate ([model] kind = gdn); a KDA model decays "
                      "each key channel separately, so the decay cannot leave the "
                      "k-contraction as one factor per (token, record) pair; use "
                      "outputs = identity or exact");
    return SSM_OK;
}

static ssm_status replay_check_config(const ssm_mode_params_v2 *p, char *why, size_t why_len,
                                      int32_t *bad_option)
{
    replay_options options;
    ssm_status status = parse_options(p, &options, why, why_len, bad_option);
    if (status != SSM_OK)
        return status;
    return ssm_check_device(p, why, why_len);
}

/* ---------------------------------------------------------------- plan */

/* Options of params that check_config accepted (so parsing cannot fail). */
static replay_options options_of(const ssm_mode_params_v2 *p)
{
    replay_options options;
    char why[8];
    int32_t bad;
    parse_options(p, &options, why, sizeof why, &bad);
    return options;
}

/* The host working memory, in floats: offsets of its parts after the shared
 * scratch at 0, which the reference drivers, a fold and ssm_replay_load_keys
 * take turns on. */
typedef struct host_layout {
    int64_t conv_out, keys, outputs, tokens, work, total;
} host_layout;

static host_layout host_layout_of(const ssm_mode_params_v2 *p, const replay_options *o)
{
    const ssm_model_dims *m = &p->model;
    int64_t steps = ssm_cpu_scratch_floats(m), apply = ssm_record_apply_scratch_floats(m);
    host_layout h;
    h.conv_out = steps > apply ? steps : apply;
    h.keys = h.conv_out + ssm_conv_channels(m);
    h.outputs = h.keys + (int64_t)o->history * m->heads * m->key_dim;
    h.tokens = h.outputs + ssm_replay_outputs_scratch_floats(m, o->history, p->max_tokens);
    h.work = h.tokens + (int64_t)p->max_tokens * ssm_ref_token_floats(m);
    h.total = h.work + (int64_t)((ssm_state_bytes(m, p->state_dtype) + sizeof(float) - 1) /
                                 sizeof(float));
    return h;
}

/* One history record: the CPU's (kernels/replay.h), or the GPU path's,
 * which keeps k normalized in fp32 and the decay instead of g. */
static size_t record_bytes_of(const ssm_mode_params_v2 *p)
{
#ifdef HAVE_CUDA
    if (p->device.type == SSM_DEVICE_CUDA)
        return replay_cuda_record_bytes(p);
#endif
    return ssm_replay_record_bytes(&p->model, p->activation_dtype);
}

static size_t records_bytes_per_layer(const ssm_mode_params_v2 *p, const replay_options *o)
{
    return (size_t)o->history * record_bytes_of(p);
}

static ssm_status replay_plan(const ssm_mode_params_v2 *p, ssm_mode_plan_v1 *out)
{
    replay_options options = options_of(p);
    uint64_t layers = (uint64_t)p->model.layers;
    memset(out, 0, sizeof *out);
    out->state_bytes = layers * ssm_state_bytes(&p->model, p->state_dtype);
    out->conv_bytes = layers * ssm_conv_buffer_bytes(&p->model, p->activation_dtype, p->max_tokens);
    out->scratch_bytes = layers * (records_bytes_per_layer(p, &options) + sizeof(int32_t));
    out->shared_bytes = (uint64_t)host_layout_of(p, &options).total * sizeof(float) +
                        (uint64_t)p->max_tokens * sizeof(ssm_ref_token);
#ifdef HAVE_CUDA
    if (p->device.type == SSM_DEVICE_CUDA) {
        out->scratch_bytes += replay_cuda_scratch_bytes(p); /* token scratch, q, ring starts, folded cursors */
        out->shared_bytes += replay_cuda_shared_bytes(p); /* the chunked prefill's scratch */
    }
#endif
    return SSM_OK;
}

/* ---------------------------------------------------------- life cycle */

static void replay_destroy(void *instance)
{
    replay_mode *r = instance;
    if (!r)
        return;
    const ssm_services_v1 *s = r->base.services;
#ifdef HAVE_CUDA
    replay_cuda_destroy(r);
#endif
    s->release(s->core, r->checkpoints);
    s->release(s->core, r->conv);
    s->release(s->core, r->records);
    s->release(s->core, r->cursors);
    s->release_host(s->core, r->scratch);
    s->release_host(s->core, r->tokens);
    s->release_host(s->core, r);
}

/* Points the host working memory into r->scratch and binds the tokens. */
static void bind_host(replay_mode *r)
{
    host_layout h = host_layout_of(&r->base.params, &r->options);
    int64_t token_floats = ssm_ref_token_floats(&r->base.params.model);
    r->conv_out = r->scratch + h.conv_out;
    r->keys = r->scratch + h.keys;
    r->outputs_scratch = r->scratch + h.outputs;
    r->work = (uint8_t *)(r->scratch + h.work);
    for (int32_t t = 0; t < r->base.params.max_tokens; t++)
        ssm_ref_token_bind(&r->base.params.model, r->scratch + h.tokens + t * token_floats,
                           &r->tokens[t]);
}

static ssm_status replay_create(const ssm_mode_params_v2 *p, const ssm_services_v1 *s,
                                void **instance)
{
    replay_mode *r = s->alloc_host(s->core, sizeof *r);
    if (!r)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_mode_base_init(&r->base, p, s, &replay_cpu_ops, REPLAY_GPU_OPS);
    r->options = options_of(p);
    r->state_bytes = ssm_state_bytes(&p->model, p->state_dtype);
    r->conv_bytes = ssm_conv_buffer_bytes(&p->model, p->activation_dtype, p->max_tokens);
    r->record_bytes = record_bytes_of(p);
    size_t slot_layers = (size_t)p->capacity * p->model.layers;
    r->checkpoints = s->alloc(s->core, slot_layers * r->state_bytes);
    r->conv = s->alloc(s->core, slot_layers * r->conv_bytes);
    r->records = s->alloc(s->core, slot_layers * records_bytes_per_layer(p, &r->options));
    /* Cursors live with the state: a device path reads them in its kernels. */
    r->cursors = s->alloc(s->core, slot_layers * sizeof(int32_t));
    r->scratch = s->alloc_host(
        s->core, sizeof(float) * (size_t)host_layout_of(p, &r->options).total);
    r->tokens = s->alloc_host(s->core, sizeof(ssm_ref_token) * (size_t)p->max_tokens);
    if (!r->checkpoints || !r->conv || !r->records || !r->cursors || !r->scratch || !r->tokens) {
        /* the message reads r: written before r is freed */
        ssm_status st = s->error(s->core, SSM_ERR_OUT_OF_MEMORY,
                                 "out of memory for %d slots (history of %d records)",
                                 p->capacity, (int)r->options.history);
        replay_destroy(r);
        return st;
    }
    bind_host(r);
#ifdef HAVE_CUDA
    if (replay_on_gpu(r)) {
        ssm_status st = replay_cuda_create(r);
        if (st != SSM_OK) {
            replay_destroy(r);
            return st;
        }
    }
#endif
    *instance = r;
    return SSM_OK;
}

static ssm_status replay_reset_slot(void *instance, int32_t slot, void *stream)
{
    replay_mode *r = instance;
    size_t layers = (size_t)r->base.params.model.layers;
    memset(replay_checkpoint(r, slot, 0), 0, layers * r->state_bytes);
    memset(replay_conv(r, slot, 0), 0, layers * r->conv_bytes);
    /* Not needed for correctness (n = 0 hides them), but a reused slot keeps
     * nothing of the request before. */
    memset(replay_records(r, slot, 0), 0, layers * records_bytes_per_layer(&r->base.params, &r->options));
    memset(replay_cursor(r, slot, 0), 0, layers * sizeof(int32_t));
    return SSM_OK;
}

/* ----------------------------------------------------------- transfers */

/* Export never touches the slot: the committed records are applied to the
 * exported copy of the checkpoint, not to the checkpoint. */
static ssm_status replay_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                     void *stream)
{
    replay_mode *r = instance;
    ssm_cpu_target target = replay_cpu_target(r);
    ssm_cpu_export_canonical(&r->base.params, &target, slot, dst);
    for (int32_t l = 0; l < r->base.params.model.layers; l++)
        replay_apply_committed(r, slot, l, dst->state[l]);
    return SSM_OK;
}

static ssm_status replay_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                     void *stream)
{
    replay_mode *r = instance;
    replay_reset_slot(r, slot, stream);
    ssm_cpu_target target = replay_cpu_target(r);
    ssm_cpu_import_canonical(&r->base.params, &target, slot, src);
    return SSM_OK;
}

/* The copy starts with an empty history: the source's committed records are
 * folded into the copied checkpoint (the source keeps its own). */
static ssm_status replay_copy_slot(void *instance, int32_t src, int32_t dst, void *stream)
{
    replay_mode *r = instance;
    replay_reset_slot(r, dst, stream);
    ssm_cpu_target target = replay_cpu_target(r);
    ssm_cpu_copy_canonical(&r->base.params, &target, src, dst);
    for (int32_t l = 0; l < r->base.params.model.layers; l++)
        replay_apply_committed(r, src, l, replay_checkpoint(r, dst, l));
    return SSM_OK;
}

static ssm_status replay_materialize(void *instance, const int32_t *slots, int32_t count,
                                     void *stream)
{
    replay_mode *r = instance;
    for (int32_t i = 0; i < count; i++)
        if (slots[i] >= 0)
            for (int32_t l = 0; l < r->base.params.model.layers; l++)
                replay_fold(r, slots[i], l);
    return SSM_OK;
}

/* The CPU's methods: the steps of replay_step.c, and the transfers above,
 * which fold the committed history into what they copy. */
const ssm_mode_ops replay_cpu_ops = {
    .prefill = replay_cpu_prefill,
    .decode = replay_cpu_decode,
    .verify = replay_cpu_verify,
    .commit = replay_cpu_commit,
    .reset_slot = replay_reset_slot,
    .export_slot = replay_export_slot,
    .import_slot = replay_import_slot,
    .copy_slot = replay_copy_slot,
    .materialize = replay_materialize,
    .conv_of = replay_cpu_conv_of,
    .state_of = replay_cpu_checkpoint_of,
};

/* Tuning (docs/tuning.md): GPU contexts only. */
SSM_TUNE_ENTRIES(replay, replay_mode)

SSM_PLUGIN_EXPORT const ssm_plugin_v2 ssm_plugin_entry_v2 = {
    .abi_version = SSM_PLUGIN_V2_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v2),
    .name = "replay",
    .mode_version = REPLAY_MODE_VERSION,
    .capabilities = SSM_CAP_CPU | SSM_CAP_CUDA_IF_BUILT | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16 | SSM_CAP_PAGES,
    .check_config = replay_check_config,
    .plan = replay_plan,
    .create = replay_create,
    .destroy = replay_destroy,
    SSM_MODE_METHODS,
    SSM_TUNE_TABLE(replay),
};
