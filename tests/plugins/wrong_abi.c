/* A plugin that claims an ABI version this library does not speak: the
 * loader must refuse it, naming the file, the symbol and both versions. */
#include "ssmstate/plugin.h"

SSM_PLUGIN_EXPORT const ssm_plugin_v1 ssm_plugin_entry_v1 = {
    .abi_version = 99,
    .struct_size = sizeof(ssm_plugin_v1),
    .name = "wrong_abi",
    .mode_version = 1,
};
