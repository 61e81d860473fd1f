/* A plugin whose table is shorter than any the ABI ever had: the loader
 * must refuse it, naming both sizes. */
#include "ssmstate/plugin.h"

SSM_PLUGIN_EXPORT const ssm_plugin_v1 ssm_plugin_entry_v1 = {
    .abi_version = SSM_PLUGIN_V1_ABI_VERSION,
    .struct_size = SSM_PLUGIN_V1_MIN_SIZE - sizeof(void *),
    .name = "short_table",
    .mode_version = 1,
};
