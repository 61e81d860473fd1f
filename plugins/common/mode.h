/* The method skeleton of the built-in modes. Every instance starts with a
 * ssm_mode_base: the params it was created with, the services, and the
 * method table of its device, chosen once at create (the CPU's, or the
 * GPU's in a CUDA build on a CUDA context). The plugin table's per-slot and
 * step methods (SSM_MODE_METHODS) dispatch through that table, so no method
 * asks again which device it runs on.
 *
 * A mode writes its two tables of ssm_mode_ops: steps and resets of its own,
 * and for the CPU the canonical-form transfers below, which need only where
 * a slot's conv buffer and current state are (conv_of, state_of). */
#ifndef SSM_COMMON_MODE_H
#define SSM_COMMON_MODE_H

#include "ssmstate/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One device's implementation of a mode's per-slot methods and steps, each
 * with the contract of the plugin_v1.h method of the same name; `instance`
 * starts with ssm_mode_base. export_slots and import_slots may be NULL (no
 * batched page moves on that device), as may materialize (nothing pending
 * ever) and conv_of / state_of (a GPU table). */
typedef struct ssm_mode_ops {
    ssm_status (*prefill)(void *instance, const ssm_step_v1 *step);
    ssm_status (*decode)(void *instance, const ssm_step_v1 *step);
    ssm_status (*verify)(void *instance, const ssm_step_v1 *step);
    ssm_status (*commit)(void *instance, const ssm_commit_v1 *commit);
    ssm_status (*reset_slot)(void *instance, int32_t slot, void *stream);
    ssm_status (*export_slot)(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream);
    ssm_status (*import_slot)(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                              void *stream);
    /* src != dst: the skeleton answers a copy onto itself. */
    ssm_status (*copy_slot)(void *instance, int32_t src, int32_t dst, void *stream);
    ssm_status (*materialize)(void *instance, const int32_t *slots, int32_t count,
                              void *stream);
    ssm_status (*export_slots)(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, void *stream);
    ssm_status (*import_slots)(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, const uint32_t *refused,
                               void *stream);
    /* CPU tables: a slot's conv buffer of `layer` and its current state. */
    void *(*conv_of)(void *instance, int32_t slot, int32_t layer);
    void *(*state_of)(void *instance, int32_t slot, int32_t layer);
} ssm_mode_ops;

typedef struct ssm_mode_base {
    ssm_mode_params_v2 params;       /* options pointer cleared: not kept */
    const ssm_services_v1 *services;
    const ssm_mode_ops *ops;         /* this device's methods */
} ssm_mode_base;

/* Fills a new instance's base: the params (without the options array,
 * which does not outlive create), the services, and `gpu` on a CUDA
 * context, else `cpu`. gpu may be NULL in a build without CUDA (the core
 * offers such a build no CUDA context). */
void ssm_mode_base_init(ssm_mode_base *base, const ssm_mode_params_v2 *p,
                        const ssm_services_v1 *s, const ssm_mode_ops *cpu,
                        const ssm_mode_ops *gpu);

/* 1 when the instance runs on a CUDA context. */
static inline int ssm_mode_on_gpu(const ssm_mode_base *base)
{
    return base->params.device.type == SSM_DEVICE_CUDA;
}

/* The plugin methods, through base->ops. */
ssm_status ssm_mode_prefill(void *instance, const ssm_step_v1 *step);
ssm_status ssm_mode_decode(void *instance, const ssm_step_v1 *step);
ssm_status ssm_mode_verify(void *instance, const ssm_step_v1 *step);
ssm_status ssm_mode_commit(void *instance, const ssm_commit_v1 *commit);
ssm_status ssm_mode_reset_slot(void *instance, int32_t slot, void *stream);
ssm_status ssm_mode_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                void *stream);
ssm_status ssm_mode_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                void *stream);
ssm_status ssm_mode_copy_slot(void *instance, int32_t src, int32_t dst, void *stream);
ssm_status ssm_mode_materialize(void *instance, const int32_t *slots, int32_t count,
                                void *stream);
ssm_status ssm_mode_export_slots(void *instance, int32_t count, const int32_t *slots,
                                 const ssm_page_view_v1 *views, void *stream);
ssm_status ssm_mode_import_slots(void *instance, int32_t count, const int32_t *slots,
                                 const ssm_page_view_v1 *views, const uint32_t *refused,
                                 void *stream);

/* A GPU table whose methods are the including .cu file's static functions
 * cuda_prefill .. cuda_import_slots, in ssm_mode_ops' order; `materialize`
 * is cuda_materialize or NULL. The CPU drivers' conv_of and state_of stay
 * NULL. */
#define SSM_MODE_GPU_OPS(materialize)                                                  \
    {                                                                                  \
        cuda_prefill, cuda_decode, cuda_verify, cuda_commit, cuda_reset, cuda_export, \
            cuda_import, cuda_copy, (materialize), cuda_export_slots, cuda_import_slots, \
            NULL, NULL                                                                 \
    }

/* The plugin table's entries for the methods above. */
#define SSM_MODE_METHODS                         \
    .reset_slot = ssm_mode_reset_slot,           \
    .prefill = ssm_mode_prefill,                 \
    .decode = ssm_mode_decode,                   \
    .verify = ssm_mode_verify,                   \
    .commit = ssm_mode_commit,                   \
    .export_slot = ssm_mode_export_slot,         \
    .import_slot = ssm_mode_import_slot,         \
    .copy_slot = ssm_mode_copy_slot,             \
    .materialize = ssm_mode_materialize,         \
    .export_slots = ssm_mode_export_slots,       \
    .import_slots = ssm_mode_import_slots

/* CPU transfers through the canonical form (cpu_steps.h), for a CPU table
 * whose conv_of and state_of say where a slot lives: export copies the
 * slot's window and current state out; import resets the slot (the
 * table's reset_slot), then loads; copy resets dst, then copies src. */
ssm_status ssm_cpu_mode_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                    void *stream);
ssm_status ssm_cpu_mode_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                    void *stream);
ssm_status ssm_cpu_mode_copy_slot(void *instance, int32_t src, int32_t dst, void *stream);

#ifdef __cplusplus
}
#endif

#endif
