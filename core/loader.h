/* Finding, loading and checking mode plugins (dlopen). */
#ifndef SSM_CORE_LOADER_H
#define SSM_CORE_LOADER_H

#include <limits.h>

#include "core/internal.h"

typedef struct ssm_loaded_plugin {
    void *handle;                /* from dlopen; NULL when not loaded */
    const ssm_plugin_v1 *table;  /* the plugin's table, checked */
    char path[PATH_MAX];         /* the file it came from */
} ssm_loaded_plugin;

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
 * its ABI version and table size (at least SSM_PLUGIN_V1_MIN_SIZE), that
 * every required method is set, and that the table's name is `mode` (NULL:
 * the file's name without directory and ".so"). Only a file that passes is
 * pinned (never unmapped); a refused one is unloaded. */
ssm_status ssm_loader_open_file(const char *path, const char *mode, ssm_loaded_plugin *out);

/* The plugin's table as this library's struct: the plugin's own bytes
 * (struct_size of them), the entries of a shorter (older) table NULL. The
 * core calls a plugin through such a copy, so it never reads past the
 * plugin's table. */
void ssm_loader_table(const ssm_loaded_plugin *plugin, ssm_plugin_v1 *out);

/* Unloads; a zeroed or already closed plugin is fine. */
void ssm_loader_close(ssm_loaded_plugin *plugin);

/* Calls visit(path, user) for every `*.so` on the search path in search order
 * (the installed directory and $SSMSTATE_PLUGIN_PATH's are skipped when they
 * do not exist). Stops early when visit returns nonzero. Errors: those of
 * ssm_loader_check_dir, before any visit. */
ssm_status ssm_loader_each_file(const char *plugin_dir,
                                int (*visit)(const char *path, void *user), void *user);

#endif
