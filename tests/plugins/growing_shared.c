/* A mode whose shared bytes grow with the capacity up to four slots (as a
 * CUDA context's prefill scratch does up to 64): 1000 bytes a slot, and
 * 500 + 10000 min(capacity, 4) shared. It only plans; every step method
 * says so. tests/slots_in_budget.sh asks the command how many slots fit a
 * budget, which one plan's (budget - shared) / per slot overstates. */
#include <string.h>

#include "tests/plugins/stub_methods.h"

static ssm_status check_config(const ssm_mode_params_v1 *p, char *why, size_t len, int32_t *bad)
{
    (void)p, (void)why, (void)len;
    *bad = -1;
    return SSM_OK;
}

static ssm_status plan(const ssm_mode_params_v1 *p, ssm_mode_plan_v1 *out)
{
    memset(out, 0, sizeof *out);
    out->state_bytes = 1000;
    out->shared_bytes = 500 + 10000 * (uint64_t)(p->capacity < 4 ? p->capacity : 4);
    return SSM_OK;
}

static ssm_status create(const ssm_mode_params_v1 *p, const ssm_services_v1 *s, void **instance)
{
    (void)p, (void)instance;
    return s->error(s->core, SSM_ERR_UNSUPPORTED, "growing_shared only plans");
}

SSM_PLUGIN_EXPORT const ssm_plugin_v1 ssm_plugin_entry_v1 = {
    .abi_version = SSM_PLUGIN_V1_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v1),
    .name = "growing_shared",
    .mode_version = 1,
    .capabilities = SSM_CAP_CPU | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16,
    .check_config = check_config,
    .plan = plan,
    .create = create,
    STUB_INSTANCE_METHODS,
};
