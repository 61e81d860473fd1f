/* Finding, loading and checking mode plugins (dlopen). */
#ifndef SSM_CORE_LOADER_H
#define SSM_CORE_LOADER_H

#include <limits.h>

#include "core/internal.h"

/* A plugin file, loaded and checked, and its table as the core calls it:
 * the newest ABI's struct, whatever version the file speaks. */
typedef struct ssm_loaded_plugin {
    void *handle;                /* from dlopen; NULL when not loaded */
    uint32_t abi_version;        /* the version the file speaks */
    /* The methods and fields, in the newest struct: a v2 file's own table; a
     * v1 file's entries (those past a shorter table NULL) with check_config,
     * plan and create NULL, since they take the older parameters. The core
     * calls those three through ssm_loader_check_config, ssm_loader_plan and
     * ssm_loader_create, everything else through this table. */
    ssm_plugin_v2 table;
    ssm_plugin_v1 v1;            /* a v1 file's table, for the adapter (core/loader_v1.c) */
    ssm_mode_params_v1 v1_params; /* the parameters a v1 instance was created with */
    char path[PATH_MAX];         /* the file it came from */
} ssm_loaded_plugin;

/* The three methods that take the mode parameters, for a plugin of any ABI
 * version: a v1 plugin is handed the parameters v1 knows (loader_v1.c). */
ssm_status ssm_loader_check_config(const ssm_loaded_plugin *plugin, const ssm_mode_params_v2 *p,
                                 char *why, size_t why_len, int32_t *bad_option);
ssm_status ssm_loader_plan(const ssm_loaded_plugin *plugin, const ssm_mode_params_v2 *p,
                         ssm_mode_plan_v1 *out);
ssm_status ssm_loader_create(ssm_loaded_plugin *plugin, const ssm_mode_params_v2 *p,
                           const ssm_services_v1 *svc, void **instance);

/* The v1 adapter (core/loader_v1.c). ssm_loader_v1_adopt fills plugin->v1
 * from a v1 file's table of table->struct_size bytes (the entries past it
 * NULL) and plugin->table from that. The others call the v1 plugin's
 * methods with the v2 parameters converted: a v1 plugin is not told the
 * prefill's precision, and prefills as it was built to. */
void ssm_loader_v1_adopt(const ssm_plugin_v1 *table, ssm_loaded_plugin *plugin);
void ssm_loader_v1_params(const ssm_mode_params_v2 *p, ssm_mode_params_v1 *out);

/* SSM_OK when plugin_dir is NULL, "" or a directory; else SSM_ERR_PLUGIN
 * naming it ("plugin_dir DIR: no such directory", "... not a directory").
 * The installed directory and $SSMSTATE_PLUGIN_PATH's may be missing; a
 * plugin_dir someone set must not be, or a typo would go unnoticed. */
ssm_status ssm_loader_check_dir(const char *plugin_dir);

/* Loads the plugin of mode `mode`: looks for `<mode>.so` in plugin_dir (if
 * set), then the installed plugin directory, then each directory of
 * $SSMSTATE_PLUGIN_PATH, and loads the first file that exists. Errors
 * (SSM_ERR_PLUGIN) name a plugin_dir that is no directory
 * (ssm_loader_check_dir), every path tried, or the file and the symbols and
 * versions that did not fit. *out is only written on success. */
ssm_status ssm_loader_open_mode(const char *mode, const char *plugin_dir, ssm_loaded_plugin *out);

/* Loads one file and checks it is a plugin this library speaks: probes the
 * entry symbols newest first, checks that the symbol lives in that file,
 * its ABI version and table size (v2: the whole table; v1: at least
 * SSM_PLUGIN_V1_MIN_SIZE), that every required method is set, and that the
 * table's name is `mode` (NULL: the file's name without directory and
 * ".so"). Only a file that passes is pinned (never unmapped); a refused one
 * is unloaded. */
ssm_status ssm_loader_open_file(const char *path, const char *mode, ssm_loaded_plugin *out);

/* Unloads; a zeroed or already closed plugin is fine. */
void ssm_loader_close(ssm_loaded_plugin *plugin);

/* Calls visit(path, user) for every `*.so` on the search path in search order
 * (the installed directory and $SSMSTATE_PLUGIN_PATH's are skipped when they
 * do not exist). Stops early when visit returns nonzero. Errors: those of
 * ssm_loader_check_dir, before any visit. */
ssm_status ssm_loader_each_file(const char *plugin_dir,
                                int (*visit)(const char *path, void *user), void *user);

#endif
