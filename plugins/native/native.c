/* The native mode's table and life cycle; its methods are the CPU's
 * (native_step.c) or the GPU's (native_cuda.cu), chosen at create. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "plugins/common/build_caps.h"
#include "plugins/common/tune_entries.h"
#include "plugins/common/device_check.h"

#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "plugins/common/mode.h"
#include "kernels/reference.h"
#include "plugins/native/native.h"

#define NATIVE_MODE_VERSION 1

#ifdef HAVE_CUDA
#define NATIVE_GPU_OPS (&native_cuda_ops)
#else
#define NATIVE_GPU_OPS NULL
#endif

static ssm_status native_check_config(const ssm_mode_params_v2 *p, char *why, size_t why_len,
                                      int32_t *bad_option)
{
    *bad_option = -1;
    if (p->options_count > 0) {
        *bad_option = 0;
        snprintf(why, why_len, "unknown key (the native mode takes no options)");
        return SSM_ERR_CONFIG;
    }
    return ssm_check_device(p, why, why_len);
}

static size_t conv_bytes_per_layer(const ssm_mode_params_v2 *p)
{
    return ssm_conv_buffer_bytes(&p->model, p->activation_dtype, p->max_tokens);
}

static ssm_status native_plan(const ssm_mode_params_v2 *p, ssm_mode_plan_v1 *out)
{
    size_t state = (size_t)ssm_ref_state_elems(&p->model) * ssm_dtype_size(p->state_dtype);
    memset(out, 0, sizeof *out);
    out->state_bytes = (uint64_t)p->model.layers * p->max_tokens * state;
    out->conv_bytes = (uint64_t)p->model.layers * conv_bytes_per_layer(p);
    out->scratch_bytes = sizeof(int32_t); /* the current snapshot index */
    out->shared_bytes = (uint64_t)ssm_cpu_scratch_floats(&p->model) * sizeof(float);
#ifdef HAVE_CUDA
    if (p->device.type == SSM_DEVICE_CUDA) {
        out->scratch_bytes += native_cuda_scratch_bytes(p); /* token scratch and q */
        out->shared_bytes += native_cuda_shared_bytes(p); /* the chunked prefill's scratch */
    }
#endif
    return SSM_OK;
}

static void native_destroy(void *instance)
{
    native_mode *n = instance;
    if (!n)
        return;
    const ssm_services_v1 *s = n->base.services;
#ifdef HAVE_CUDA
    native_cuda_destroy(n);
#endif
    s->release(s->core, n->states);
    s->release(s->core, n->conv);
    if (native_on_gpu(n))
        s->release(s->core, n->current);
    else
        s->release_host(s->core, n->current);
    s->release_host(s->core, n->scratch);
    s->release_host(s->core, n);
}

static ssm_status native_create(const ssm_mode_params_v2 *p, const ssm_services_v1 *s,
                                void **instance)
{
    native_mode *n = s->alloc_host(s->core, sizeof *n);
    if (!n)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    ssm_mode_base_init(&n->base, p, s, &native_cpu_ops, NATIVE_GPU_OPS);
    n->snapshots = p->max_tokens;
    n->state_bytes = (size_t)ssm_ref_state_elems(&p->model) * ssm_dtype_size(p->state_dtype);
    n->conv_row_bytes = (size_t)ssm_conv_channels(&p->model) * ssm_dtype_size(p->activation_dtype);
    n->conv_rows = p->model.conv_width - 1 + p->max_tokens;
    size_t slot_layers = (size_t)p->capacity * p->model.layers;
    n->states = s->alloc(s->core, slot_layers * n->snapshots * n->state_bytes);
    n->conv = s->alloc(s->core, slot_layers * conv_bytes_per_layer(p));
    n->current = native_on_gpu(n) ? s->alloc(s->core, sizeof(int32_t) * (size_t)p->capacity)
                                  : s->alloc_host(s->core, sizeof(int32_t) * (size_t)p->capacity);
    n->scratch = s->alloc_host(s->core, sizeof(float) * (size_t)ssm_cpu_scratch_floats(&p->model));
    if (!n->states || !n->conv || !n->current || !n->scratch) {
        /* the message reads n: written before n is freed */
        ssm_status st = s->error(s->core, SSM_ERR_OUT_OF_MEMORY,
                                 "out of memory for %d slots of %zu bytes", p->capacity,
                                 (size_t)p->model.layers * (n->snapshots * n->state_bytes +
                                                            conv_bytes_per_layer(&n->base.params)));
        native_destroy(n);
        return st;
    }
#ifdef HAVE_CUDA
    if (native_on_gpu(n)) {
        ssm_status st = native_cuda_create(n);
        if (st != SSM_OK) {
            native_destroy(n);
            return st;
        }
    }
#endif
    *instance = n;
    return SSM_OK;
}

/* Tuning (docs/tuning.md): GPU contexts only. */
SSM_TUNE_ENTRIES(native, native_mode)

SSM_PLUGIN_EXPORT const ssm_plugin_v2 ssm_plugin_entry_v2 = {
    .abi_version = SSM_PLUGIN_V2_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v2),
    .name = "native",
    .mode_version = NATIVE_MODE_VERSION,
    .capabilities = SSM_CAP_CPU | SSM_CAP_CUDA_IF_BUILT | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16 | SSM_CAP_PAGES |
                    SSM_CAP_LAYOUTS,
    .check_config = native_check_config,
    .plan = native_plan,
    .create = native_create,
    .destroy = native_destroy,
    SSM_MODE_METHODS,
    SSM_TUNE_TABLE(native),
};
