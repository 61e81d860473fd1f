/* ssm_plugins_list: what `ssmstate plugins` shows. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/loader.h"

struct listing {
    ssm_plugin_info *out;
    int32_t capacity;
    int32_t count;
    char seen[256][64]; /* mode names already listed: earlier ones shadow later */
    int32_t seen_count;
};

static int already_seen(struct listing *l, const char *name)
{
    for (int32_t i = 0; i < l->seen_count; i++)
        if (strcmp(l->seen[i], name) == 0)
            return 1;
    if (l->seen_count < 256)
        snprintf(l->seen[l->seen_count++], sizeof l->seen[0], "%s", name);
    return 0;
}

static int list_file(const char *path, void *user)
{
    struct listing *l = user;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    /* Shared libraries that sit beside plugins (libssmstate.so in a build
     * tree) are not modes; mode names never start with "lib". */
    if (strncmp(base, "lib", 3) == 0)
        return 0;
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(base) - 3), base);
    if (already_seen(l, name))
        return 0;
    ssm_plugin_info info;
    memset(&info, 0, sizeof info);
    snprintf(info.path, sizeof info.path, "%s", path);
    snprintf(info.name, sizeof info.name, "%s", name);
    ssm_loaded_plugin loaded = {0};
    info.status = ssm_loader_open_file(path, NULL, &loaded);
    if (info.status == SSM_OK) {
        info.abi_version = loaded.abi_version;
        info.mode_version = loaded.table.mode_version;
        info.capabilities = loaded.table.capabilities;
        snprintf(info.name, sizeof info.name, "%s", loaded.table.name);
        ssm_loader_close(&loaded);
    } else {
        snprintf(info.error, sizeof info.error, "%s", ssm_last_error());
    }
    if (l->count < l->capacity)
        l->out[l->count] = info;
    l->count++;
    return 0;
}

ssm_status ssm_plugins_list(const char *plugin_dir, ssm_plugin_info *out, int32_t capacity,
                            int32_t *count)
{
    if (!count || (capacity > 0 && !out))
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_plugins_list: NULL argument");
    if (capacity < 0)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_plugins_list: capacity %d (0 or more entries)", (int)capacity);
    struct listing *listing = ssm_calloc(1, sizeof *listing);
    if (!listing)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory listing plugins");
    listing->out = out;
    listing->capacity = capacity;
    ssm_status status = ssm_loader_each_file(plugin_dir, list_file, listing);
    if (status == SSM_OK)
        *count = listing->count;
    ssm_free(listing);
    return status;
}
