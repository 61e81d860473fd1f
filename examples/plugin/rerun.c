/* rerun: a small state mode, built outside the ssmstate tree against its SDK.
 *
 * Per slot and layer it keeps one state, the conv buffer, and the tokens of
 * the last verify as the update consumes them (q, k, v, gate and beta after
 * the conv, the norms and the gate functions: an ssm_ref_token each). A
 * verify runs its tokens on a scratch copy of the state and never writes
 * the slot's state; it keeps the tokens, and stages its inputs in the conv
 * buffer's tail. The commit runs the first `accepted` kept tokens on the
 * state itself, the same function on the same numbers, so the state it
 * stores is, bit for bit, the one the verify passed through; then it keeps
 * their inputs in the window. (A commit gets no weights, which is why the
 * tokens are kept after the conv and gates rather than as raw inputs.)
 * Prefill and decode update the state in place through the SDK's drivers.
 *
 * The compact idea in one file: read it top to bottom.
 * Build: make (pkg-config ssmstate-plugin); check: ssmstate conform rerun.so. */
#include <stdio.h>
#include <string.h>

#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/layout.h"
#include "kernels/reference.h"
#include "ssmstate/plugin.h"

/* Only the entry table leaves the shared module. */
#define EXPORT __attribute__((visibility("default")))

typedef struct rerun_mode {
    ssm_mode_params_v2 params;
    const ssm_services_v1 *services;
    size_t state_bytes, conv_bytes, stash_bytes; /* per (slot, layer) */
    uint8_t *states;  /* [capacity][layers] states */
    uint8_t *conv;    /* [capacity][layers] conv buffers (window + staged inputs) */
    uint8_t *stash;   /* [capacity][layers][max_tokens] tokens (ssm_ref_token floats) */
    uint8_t *trial;   /* one layer's state: where a verify runs its tokens */
    float *scratch;   /* the SDK drivers' scratch */
} rerun_mode;

static size_t cell(const rerun_mode *r, int32_t slot, int32_t layer)
{
    return (size_t)slot * r->params.model.layers + layer;
}

static void *state_of(void *mode, int32_t slot, int32_t layer)
{
    rerun_mode *r = mode;
    return r->states + cell(r, slot, layer) * r->state_bytes;
}

static void *conv_of(void *mode, int32_t slot, int32_t layer)
{
    rerun_mode *r = mode;
    return r->conv + cell(r, slot, layer) * r->conv_bytes;
}

static uint8_t *stash_of(rerun_mode *r, int32_t slot, int32_t layer)
{
    return r->stash + cell(r, slot, layer) * r->stash_bytes;
}

static ssm_cpu_target target_of(rerun_mode *r)
{
    return (ssm_cpu_target){r, conv_of, state_of};
}

/* Bytes of one kept token. */
static size_t token_bytes(const ssm_mode_params_v2 *p)
{
    return (size_t)ssm_ref_token_floats(&p->model) * sizeof(float);
}

/* Token t kept for (slot, layer), its fields bound to the stash. */
static ssm_ref_token kept_token(rerun_mode *r, int32_t slot, int32_t layer, int32_t t)
{
    ssm_ref_token token;
    float *at = (float *)(stash_of(r, slot, layer) + (size_t)t * token_bytes(&r->params));
    ssm_ref_token_bind(&r->params.model, at, &token);
    return token;
}

/* ------------------------------------------------------------ the table */

static ssm_status rerun_check_config(const ssm_mode_params_v2 *p, char *why, size_t why_len,
                                     int32_t *bad_option)
{
    *bad_option = -1;
    if (p->options_count > 0) {
        *bad_option = 0;
        snprintf(why, why_len, "unknown key (the rerun mode takes no options)");
        return SSM_ERR_CONFIG;
    }
    if (p->device.type != SSM_DEVICE_CPU) {
        snprintf(why, why_len, "the rerun mode runs on the CPU only");
        return SSM_ERR_UNSUPPORTED;
    }
    return SSM_OK;
}

static ssm_status rerun_plan(const ssm_mode_params_v2 *p, ssm_mode_plan_v1 *out)
{
    const ssm_model_dims *m = &p->model;
    memset(out, 0, sizeof *out);
    out->state_bytes = (uint64_t)m->layers * ssm_state_bytes(m, p->state_dtype);
    out->conv_bytes =
        (uint64_t)m->layers * ssm_conv_buffer_bytes(m, p->activation_dtype, p->max_tokens);
    out->scratch_bytes = (uint64_t)m->layers * p->max_tokens * token_bytes(p);
    out->shared_bytes =
        ssm_state_bytes(m, p->state_dtype) + (uint64_t)ssm_cpu_scratch_floats(m) * sizeof(float);
    return SSM_OK;
}

static void rerun_destroy(void *instance)
{
    rerun_mode *r = instance;
    if (!r)
        return;
    const ssm_services_v1 *s = r->services;
    s->release(s->core, r->states);
    s->release(s->core, r->conv);
    s->release(s->core, r->stash);
    s->release_host(s->core, r->trial);
    s->release_host(s->core, r->scratch);
    s->release_host(s->core, r);
}

static ssm_status rerun_create(const ssm_mode_params_v2 *p, const ssm_services_v1 *s,
                               void **instance)
{
    const ssm_model_dims *m = &p->model;
    rerun_mode *r = s->alloc_host(s->core, sizeof *r);
    if (!r)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    r->params = *p;
    r->params.options = NULL; /* the caller's array does not outlive create */
    r->params.options_count = 0;
    r->services = s;
    r->state_bytes = ssm_state_bytes(m, p->state_dtype);
    r->conv_bytes = ssm_conv_buffer_bytes(m, p->activation_dtype, p->max_tokens);
    r->stash_bytes = (size_t)p->max_tokens * token_bytes(p);
    size_t cells = (size_t)p->capacity * m->layers;
    r->states = s->alloc(s->core, cells * r->state_bytes); /* zero-filled: every slot fresh */
    r->conv = s->alloc(s->core, cells * r->conv_bytes);
    r->stash = s->alloc(s->core, cells * r->stash_bytes);
    r->trial = s->alloc_host(s->core, r->state_bytes);
    r->scratch = s->alloc_host(s->core, (size_t)ssm_cpu_scratch_floats(m) * sizeof(float));
    if (!r->states || !r->conv || !r->stash || !r->trial || !r->scratch) {
        rerun_destroy(r);
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory for %d slots",
                        p->capacity);
    }
    *instance = r;
    return SSM_OK;
}

static ssm_status rerun_reset_slot(void *instance, int32_t slot, void *stream)
{
    rerun_mode *r = instance;
    (void)stream;
    for (int32_t l = 0; l < r->params.model.layers; l++) {
        memset(state_of(r, slot, l), 0, r->state_bytes);
        memset(conv_of(r, slot, l), 0, r->conv_bytes);
        memset(stash_of(r, slot, l), 0, r->stash_bytes);
    }
    return SSM_OK;
}

/* Prefill and decode: the SDK's row loops, in place. */
static ssm_status rerun_in_place(void *instance, const ssm_step_v1 *step)
{
    rerun_mode *r = instance;
    ssm_cpu_target target = target_of(r);
    ssm_cpu_run_sequences(&r->params, r->services, step, &target, r->scratch);
    return SSM_OK;
}

/* Verify: stage the inputs, prepare and keep each token, run the tokens on
 * the trial state (token 0 reads the slot's state), write the outputs. */
static ssm_status rerun_verify(void *instance, const ssm_step_v1 *step)
{
    rerun_mode *r = instance;
    const ssm_model_dims *m = &r->params.model;
    ssm_dtype act = r->params.activation_dtype;
    int32_t T = step->tokens, L = step->layer;
    ssm_cpu_token_scratch s = ssm_cpu_token_scratch_split(m, r->scratch);
    for (int32_t row = 0; row < step->rows; row++) {
        int32_t slot = step->slots[row];
        if (slot < 0)
            continue; /* padding */
        ssm_step_io io = ssm_io_at(m, act, &step->io, (int64_t)row * T);
        ssm_cpu_flag_nonfinite(&r->params, r->services, slot, &io, T);
        uint8_t *window = conv_of(r, slot, L);
        ssm_step_io staged = io;
        staged.x = ssm_conv_buffer_stage(m, act, window, io.x, T);
        for (int32_t t = 0; t < T; t++) {
            ssm_ref_token token = kept_token(r, slot, L, t);
            ssm_ref_prepare_token(m, act, step->weights, window, &staged, t, s.conv, &token);
            ssm_ref_token_update(m, r->params.state_dtype, act, &token,
                                 t == 0 ? state_of(r, slot, L) : r->trial, r->trial,
                                 (uint8_t *)io.out + (size_t)t * ssm_out_row_bytes(m, act),
                                 s.head);
        }
    }
    return SSM_OK;
}

/* Commit: the first accepted[row] kept tokens of every layer on the state
 * itself, then their inputs into the window. The core checked each accepted
 * length is in [1, T]. */
static ssm_status rerun_commit(void *instance, const ssm_commit_v1 *commit)
{
    rerun_mode *r = instance;
    const ssm_model_dims *m = &r->params.model;
    ssm_cpu_token_scratch s = ssm_cpu_token_scratch_split(m, r->scratch);
    for (int32_t row = 0; row < commit->rows; row++) {
        int32_t slot = commit->slots[row];
        if (slot < 0)
            continue;
        for (int32_t l = 0; l < m->layers; l++) {
            for (int32_t t = 0; t < commit->accepted[row]; t++) {
                ssm_ref_token token = kept_token(r, slot, l, t);
                ssm_ref_token_update(m, r->params.state_dtype, r->params.activation_dtype,
                                     &token, state_of(r, slot, l), state_of(r, slot, l), NULL,
                                     s.head);
            }
            ssm_conv_buffer_commit(m, r->params.activation_dtype, conv_of(r, slot, l),
                                   commit->accepted[row]);
        }
    }
    return SSM_OK;
}

static ssm_status rerun_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                    void *stream)
{
    rerun_mode *r = instance;
    ssm_cpu_target target = target_of(r);
    (void)stream;
    ssm_cpu_export_canonical(&r->params, &target, slot, dst);
    return SSM_OK;
}

static ssm_status rerun_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                    void *stream)
{
    rerun_mode *r = instance;
    ssm_cpu_target target = target_of(r);
    rerun_reset_slot(r, slot, stream);
    ssm_cpu_import_canonical(&r->params, &target, slot, src);
    return SSM_OK;
}

static ssm_status rerun_copy_slot(void *instance, int32_t src, int32_t dst, void *stream)
{
    rerun_mode *r = instance;
    ssm_cpu_target target = target_of(r);
    if (src == dst)
        return SSM_OK;
    rerun_reset_slot(r, dst, stream);
    ssm_cpu_copy_canonical(&r->params, &target, src, dst);
    return SSM_OK;
}

EXPORT const ssm_plugin_v2 ssm_plugin_entry_v2 = {
    .abi_version = SSM_PLUGIN_V2_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v2),
    .name = "rerun",
    .mode_version = 1,
    .capabilities = SSM_CAP_CPU | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16 | SSM_CAP_PAGES,
    .check_config = rerun_check_config,
    .plan = rerun_plan,
    .create = rerun_create,
    .destroy = rerun_destroy,
    .reset_slot = rerun_reset_slot,
    .prefill = rerun_in_place,
    .decode = rerun_in_place,
    .verify = rerun_verify,
    .commit = rerun_commit,
    .export_slot = rerun_export_slot,
    .import_slot = rerun_import_slot,
    .copy_slot = rerun_copy_slot,
};
