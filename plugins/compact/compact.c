/* The compact mode's table and life cycle; its methods are the CPU's
 * (compact_step.c) or the GPU's (compact_cuda.cu), chosen at create. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "plugins/common/build_caps.h"
#include "plugins/common/tune_entries.h"
#include "plugins/common/device_check.h"
#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "plugins/common/mode.h"
#include "kernels/layout.h"
#include "kernels/record.h"
#include "plugins/compact/compact.h"

#define COMPACT_MODE_VERSION 1

#ifdef HAVE_CUDA
#define COMPACT_GPU_OPS (&compact_cuda_ops)
#else
#define COMPACT_GPU_OPS NULL
#endif

static ssm_status compact_check_config(const ssm_mode_params_v2 *p, char *why, size_t why_len,
                                       int32_t *bad_option)
{
    *bad_option = -1;
    if (p->options_count > 0) {
        *bad_option = 0;
        snprintf(why, why_len, "unknown key (the compact mode takes no options)");
        return SSM_ERR_CONFIG;
    }
    return ssm_check_device(p, why, why_len);
}

static int64_t scratch_floats(const ssm_model_dims *m)
{
    int64_t steps = ssm_cpu_scratch_floats(m), apply = ssm_record_apply_scratch_floats(m);
    return steps > apply ? steps : apply;
}

/* One token record: the CPU's (kernels/record.h), or the GPU path's, which
 * keeps the decay instead of g, k's 1/norm, and two sets of what a verify
 * writes beside a pending commit's records (all but v: the next step
 * writes its records while it applies the commit's). */
static size_t record_bytes_of(const ssm_mode_params_v2 *p)
{
#ifdef HAVE_CUDA
    if (p->device.type == SSM_DEVICE_CUDA)
        return compact_cuda_record_bytes(p);
#endif
    return ssm_record_bytes(&p->model, p->activation_dtype);
}

static ssm_status compact_plan(const ssm_mode_params_v2 *p, ssm_mode_plan_v1 *out)
{
    uint64_t layers = (uint64_t)p->model.layers;
    memset(out, 0, sizeof *out);
    out->state_bytes = layers * ssm_state_bytes(&p->model, p->state_dtype);
    out->conv_bytes = layers * ssm_conv_buffer_bytes(&p->model, p->activation_dtype, p->max_tokens);
    out->scratch_bytes =
        layers * (uint64_t)p->max_tokens * record_bytes_of(p);
    out->shared_bytes = ssm_state_bytes(&p->model, p->state_dtype) +
                        (uint64_t)scratch_floats(&p->model) * sizeof(float);
#ifdef HAVE_CUDA
    if (p->device.type == SSM_DEVICE_CUDA) {
        out->scratch_bytes += compact_cuda_scratch_bytes(p); /* token scratch and q */
        out->shared_bytes += compact_cuda_shared_bytes(p); /* the chunked prefill's scratch */
    }
#endif
    return SSM_OK;
}

static void compact_destroy(void *instance)
{
    compact_mode *c = instance;
    if (!c)
        return;
    const ssm_services_v1 *s = c->base.services;
#ifdef HAVE_CUDA
    compact_cuda_destroy(c);
#endif
    s->release(s->core, c->states);
    s->release(s->core, c->conv);
    s->release(s->core, c->records);
    s->release_host(s->core, c->work);
    s->release_host(s->core, c->scratch);
    s->release_host(s->core, c);
}

static ssm_status compact_create(const ssm_mode_params_v2 *p, const ssm_services_v1 *s,
                                 void **instance)
{
    compact_mode *c = s->alloc_host(s->core, sizeof *c);
    if (!c)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_mode_base_init(&c->base, p, s, &compact_cpu_ops, COMPACT_GPU_OPS);
    c->state_bytes = ssm_state_bytes(&p->model, p->state_dtype);
    c->conv_bytes = ssm_conv_buffer_bytes(&p->model, p->activation_dtype, p->max_tokens);
    c->record_bytes = record_bytes_of(p);
    size_t slot_layers = (size_t)p->capacity * p->model.layers;
    c->states = s->alloc(s->core, slot_layers * c->state_bytes);
    c->conv = s->alloc(s->core, slot_layers * c->conv_bytes);
    c->records = s->alloc(s->core, slot_layers * (size_t)p->max_tokens * c->record_bytes);
    c->work = s->alloc_host(s->core, c->state_bytes);
    c->scratch = s->alloc_host(s->core, sizeof(float) * (size_t)scratch_floats(&p->model));
    if (!c->states || !c->conv || !c->records || !c->work || !c->scratch) {
        compact_destroy(c);
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory for %d slots",
                        p->capacity);
    }
#ifdef HAVE_CUDA
    if (compact_on_gpu(c)) {
        ssm_status st = compact_cuda_create(c);
        if (st != SSM_OK) {
            compact_destroy(c);
            return st;
        }
    }
#endif
    *instance = c;
    return SSM_OK;
}

/* Tuning (docs/tuning.md): GPU contexts only. */
SSM_TUNE_ENTRIES(compact, compact_mode)

SSM_PLUGIN_EXPORT const ssm_plugin_v2 ssm_plugin_entry_v2 = {
    .abi_version = SSM_PLUGIN_V2_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v2),
    .name = "compact",
    .mode_version = COMPACT_MODE_VERSION,
    .capabilities = SSM_CAP_CPU | SSM_CAP_CUDA_IF_BUILT | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16 | SSM_CAP_PAGES |
                    SSM_CAP_LAYOUTS,
    .check_config = compact_check_config,
    .plan = compact_plan,
    .create = compact_create,
    .destroy = compact_destroy,
    SSM_MODE_METHODS,
    SSM_TUNE_TABLE(compact),
};
