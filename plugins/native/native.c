/* The native mode's table, life cycle and slot transfers. */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "plugins/common/build_caps.h"
#include "plugins/common/tune_entries.h"
#include "plugins/common/device_check.h"

#include "plugins/common/conv_buffer.h"
#include "plugins/common/cpu_steps.h"
#include "kernels/reference.h"
#include "plugins/native/native.h"

#define NATIVE_MODE_VERSION 1

static ssm_status native_check_config(const ssm_mode_params_v1 *p, char *why, size_t why_len,
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

static size_t conv_bytes_per_layer(const ssm_mode_params_v1 *p)
{
    return ssm_conv_buffer_bytes(&p->model, p->activation_dtype, p->max_tokens);
}

static ssm_status native_plan(const ssm_mode_params_v1 *p, ssm_mode_plan_v1 *out)
{
    size_t state = (size_t)ssm_ref_state_elems(&p->model) * ssm_dtype_size(p->state_dtype);
    memset(out, 0, sizeof *out);
    out->state_bytes = (uint64_t)p->model.layers * p->max_tokens * state;
    out->conv_bytes = (uint64_t)p->model.layers * conv_bytes_per_layer(p);
    out->scratch_bytes = sizeof(int32_t); /* the current snapshot index */
    out->shared_bytes = (uint64_t)ssm_cpu_scratch_floats(&p->model) * sizeof(float);
#ifdef HAVE_CUDA
    if (p->device.type == SSM_DEVICE_CUDA)
        out->scratch_bytes += native_cuda_scratch_bytes(p); /* token scratch and q */
#endif
    return SSM_OK;
}

static void native_destroy(void *instance)
{
    native_mode *n = instance;
    if (!n)
        return;
    const ssm_services_v1 *s = n->services;
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

static ssm_status native_create(const ssm_mode_params_v1 *p, const ssm_services_v1 *s,
                                void **instance)
{
    native_mode *n = s->alloc_host(s->core, sizeof *n);
    if (!n)
        return s->error(s->core, SSM_ERR_OUT_OF_MEMORY, "out of memory");
    n->params = *p;
    n->params.options = NULL;
    n->params.options_count = 0;
    n->services = s;
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
                                                            conv_bytes_per_layer(&n->params)));
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

static ssm_status native_reset_slot(void *instance, int32_t slot, void *stream)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_reset(n, slot, stream);
#endif
    int32_t layers = n->params.model.layers;
    memset(native_state(n, slot, 0, 0), 0, (size_t)layers * n->snapshots * n->state_bytes);
    memset(native_conv(n, slot, 0), 0, (size_t)layers * n->conv_rows * n->conv_row_bytes);
    n->current[slot] = 0;
    return SSM_OK;
}

static ssm_status native_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                     void *stream)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_export(n, slot, dst, stream);
#endif
    ssm_cpu_target target = native_cpu_target(n);
    ssm_cpu_export_canonical(&n->params, &target, slot, dst);
    return SSM_OK;
}

/* A reset first: the imported state becomes snapshot 0, the current one. */
static ssm_status native_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                     void *stream)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_import(n, slot, src, stream);
#endif
    native_reset_slot(n, slot, stream);
    ssm_cpu_target target = native_cpu_target(n);
    ssm_cpu_import_canonical(&n->params, &target, slot, src);
    return SSM_OK;
}

static ssm_status native_copy_slot(void *instance, int32_t src, int32_t dst, void *stream)
{
    native_mode *n = instance;
    if (src == dst)
        return SSM_OK;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_copy(n, src, dst, stream);
#endif
    native_reset_slot(n, dst, stream);
    ssm_cpu_target target = native_cpu_target(n);
    ssm_cpu_copy_canonical(&n->params, &target, src, dst);
    return SSM_OK;
}

/* Pages in device memory: the GPU path only (the core asks only CUDA
 * contexts). */
static ssm_status native_export_slots(void *instance, int32_t count, const int32_t *slots,
                                     const ssm_page_view_v1 *views, void *stream)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_export_slots(n, count, slots, views, stream);
#endif
    return n->services->error(n->services->core, SSM_ERR_UNSUPPORTED,
                              "batched page moves need a CUDA context");
}

static ssm_status native_import_slots(void *instance, int32_t count, const int32_t *slots,
                                     const ssm_page_view_v1 *views, const uint32_t *refused,
                                     void *stream)
{
    native_mode *n = instance;
#ifdef HAVE_CUDA
    if (native_on_gpu(n))
        return native_cuda_import_slots(n, count, slots, views, refused, stream);
#endif
    return n->services->error(n->services->core, SSM_ERR_UNSUPPORTED,
                              "batched page moves need a CUDA context");
}

/* Tuning (docs/tuning.md): GPU contexts only. */
SSM_TUNE_ENTRIES(native, native_mode)

SSM_PLUGIN_EXPORT const ssm_plugin_v1 ssm_plugin_entry_v1 = {
    .abi_version = SSM_PLUGIN_V1_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v1),
    .name = "native",
    .mode_version = NATIVE_MODE_VERSION,
    .capabilities = SSM_CAP_CPU | SSM_CAP_CUDA_IF_BUILT | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16 | SSM_CAP_PAGES |
                    SSM_CAP_LAYOUTS,
    .check_config = native_check_config,
    .plan = native_plan,
    .create = native_create,
    .destroy = native_destroy,
    .reset_slot = native_reset_slot,
    .prefill = native_prefill,
    .decode = native_decode,
    .verify = native_verify,
    .commit = native_commit,
    .export_slot = native_export_slot,
    .import_slot = native_import_slot,
    .copy_slot = native_copy_slot,
    .materialize = NULL,
    .export_slots = native_export_slots,
    .import_slots = native_import_slots,
    SSM_TUNE_TABLE(native),
};
