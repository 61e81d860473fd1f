/* The method skeleton of the built-in modes (see mode.h). */
#include <string.h>

#include "plugins/common/cpu_steps.h"
#include "plugins/common/mode.h"

void ssm_mode_base_init(ssm_mode_base *base, const ssm_mode_params_v2 *p,
                        const ssm_services_v1 *s, const ssm_mode_ops *cpu,
                        const ssm_mode_ops *gpu)
{
    base->params = *p;
    base->params.options = NULL;
    base->params.options_count = 0;
    base->services = s;
    base->ops = p->device.type == SSM_DEVICE_CUDA && gpu ? gpu : cpu;
}

static const ssm_mode_ops *ops_of(void *instance)
{
    return ((const ssm_mode_base *)instance)->ops;
}

static ssm_status unsupported(void *instance, const char *what)
{
    const ssm_services_v1 *s = ((const ssm_mode_base *)instance)->services;
    return s->error(s->core, SSM_ERR_UNSUPPORTED, "%s", what);
}

ssm_status ssm_mode_prefill(void *instance, const ssm_step_v1 *step)
{
    return ops_of(instance)->prefill(instance, step);
}

ssm_status ssm_mode_decode(void *instance, const ssm_step_v1 *step)
{
    return ops_of(instance)->decode(instance, step);
}

ssm_status ssm_mode_verify(void *instance, const ssm_step_v1 *step)
{
    return ops_of(instance)->verify(instance, step);
}

ssm_status ssm_mode_commit(void *instance, const ssm_commit_v1 *commit)
{
    return ops_of(instance)->commit(instance, commit);
}

ssm_status ssm_mode_reset_slot(void *instance, int32_t slot, void *stream)
{
    return ops_of(instance)->reset_slot(instance, slot, stream);
}

ssm_status ssm_mode_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                void *stream)
{
    return ops_of(instance)->export_slot(instance, slot, dst, stream);
}

ssm_status ssm_mode_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                void *stream)
{
    return ops_of(instance)->import_slot(instance, slot, src, stream);
}

ssm_status ssm_mode_copy_slot(void *instance, int32_t src, int32_t dst, void *stream)
{
    return src == dst ? SSM_OK : ops_of(instance)->copy_slot(instance, src, dst, stream);
}

ssm_status ssm_mode_materialize(void *instance, const int32_t *slots, int32_t count,
                                void *stream)
{
    const ssm_mode_ops *ops = ops_of(instance);
    return ops->materialize ? ops->materialize(instance, slots, count, stream) : SSM_OK;
}

ssm_status ssm_mode_export_slots(void *instance, int32_t count, const int32_t *slots,
                                 const ssm_page_view_v1 *views, void *stream)
{
    const ssm_mode_ops *ops = ops_of(instance);
    if (!ops->export_slots)
        return unsupported(instance, "batched page moves need a CUDA context");
    return ops->export_slots(instance, count, slots, views, stream);
}

ssm_status ssm_mode_import_slots(void *instance, int32_t count, const int32_t *slots,
                                 const ssm_page_view_v1 *views, const uint32_t *refused,
                                 void *stream)
{
    const ssm_mode_ops *ops = ops_of(instance);
    if (!ops->import_slots)
        return unsupported(instance, "batched page moves need a CUDA context");
    return ops->import_slots(instance, count, slots, views, refused, stream);
}

/* Where the CPU drivers find the instance's slots. */
static ssm_cpu_target target_of(void *instance)
{
    const ssm_mode_ops *ops = ops_of(instance);
    return (ssm_cpu_target){instance, ops->conv_of, ops->state_of};
}

ssm_status ssm_cpu_mode_export_slot(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                                    void *stream)
{
    (void)stream;
    ssm_cpu_target target = target_of(instance);
    ssm_cpu_export_canonical(&((ssm_mode_base *)instance)->params, &target, slot, dst);
    return SSM_OK;
}

ssm_status ssm_cpu_mode_import_slot(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                                    void *stream)
{
    ops_of(instance)->reset_slot(instance, slot, stream);
    ssm_cpu_target target = target_of(instance);
    ssm_cpu_import_canonical(&((ssm_mode_base *)instance)->params, &target, slot, src);
    return SSM_OK;
}

ssm_status ssm_cpu_mode_copy_slot(void *instance, int32_t src, int32_t dst, void *stream)
{
    ops_of(instance)->reset_slot(instance, dst, stream);
    ssm_cpu_target target = target_of(instance);
    ssm_cpu_copy_canonical(&((ssm_mode_base *)instance)->params, &target, src, dst);
    return SSM_OK;
}
