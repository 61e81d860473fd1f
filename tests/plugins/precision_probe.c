/* A mode of ABI v2 for tests/check_loader: it records the prefill precision
 * its check_config and plan are handed (precision_probe_seen, read by the
 * test through dlsym on the file the core loaded) and plans an empty slot.
 * It is never created: the test asks for a plan only. */
#include "tests/plugins/stub_methods.h"

typedef struct probe_seen {
    int32_t check_config; /* the precision check_config saw; -1 before */
    int32_t plan;         /* the one plan saw; -1 before */
} probe_seen;

SSM_PLUGIN_EXPORT probe_seen precision_probe_seen = {-1, -1};

static ssm_status check_config(const ssm_mode_params_v2 *p, char *why, size_t len, int32_t *bad)
{
    (void)why, (void)len;
    *bad = -1;
    precision_probe_seen.check_config = p->prefill_precision;
    return SSM_OK;
}

static ssm_status plan(const ssm_mode_params_v2 *p, ssm_mode_plan_v1 *out)
{
    precision_probe_seen.plan = p->prefill_precision;
    *out = (ssm_mode_plan_v1){0, 0, 0, 0};
    return SSM_OK;
}

static ssm_status create(const ssm_mode_params_v2 *p, const ssm_services_v1 *s, void **instance)
{
    (void)p, (void)instance;
    return s->error(s->core, SSM_ERR_UNSUPPORTED, "precision_probe makes no instances");
}

SSM_PLUGIN_EXPORT const ssm_plugin_v2 ssm_plugin_entry_v2 = {
    .abi_version = SSM_PLUGIN_V2_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v2),
    .name = "precision_probe",
    .mode_version = 1,
    .capabilities = SSM_CAP_CPU | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16,
    .check_config = check_config,
    .plan = plan,
    .create = create,
    STUB_INSTANCE_METHODS,
};
