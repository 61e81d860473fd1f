/* A v1 plugin whose table ends at materialize, before export_slots and
 * import_slots: its struct_size is SSM_PLUGIN_V1_MIN_SIZE. The loader must
 * accept it and read the entries past it as NULL, even though this object
 * (built with today's header) has something there. */
#include "tests/plugins/stub_methods.h"

static ssm_status unsupported(void)
{
    return SSM_ERR_UNSUPPORTED;
}

static ssm_status check_config(const ssm_mode_params_v1 *p, char *why, size_t len, int32_t *bad)
{
    (void)p, (void)why, (void)len;
    *bad = -1;
    return unsupported();
}

static ssm_status plan(const ssm_mode_params_v1 *p, ssm_mode_plan_v1 *out)
{
    (void)p, (void)out;
    return unsupported();
}

static ssm_status create(const ssm_mode_params_v1 *p, const ssm_services_v1 *s, void **instance)
{
    (void)p, (void)s, (void)instance;
    return unsupported();
}

static ssm_status export_slots(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, void *stream)
{
    (void)instance, (void)count, (void)slots, (void)views, (void)stream;
    return unsupported();
}

SSM_PLUGIN_EXPORT const ssm_plugin_v1 ssm_plugin_entry_v1 = {
    .abi_version = SSM_PLUGIN_V1_ABI_VERSION,
    .struct_size = SSM_PLUGIN_V1_MIN_SIZE,
    .name = "old_table",
    .mode_version = 1,
    .check_config = check_config,
    .plan = plan,
    .create = create,
    STUB_INSTANCE_METHODS,
    .export_slots = export_slots, /* past struct_size: never read */
};
