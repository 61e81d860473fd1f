/* Plugin loading, after UCX's module loader: RTLD_NOW|RTLD_LOCAL so a bad
 * plugin fails at load and cannot leak symbols into others; dladdr() to be
 * sure the entry symbol really is the file's own (and not one of a library it
 * pulled in), and that its table names the mode its file is named for;
 * unload on any failed check. A plugin that passes is pinned
 * (RTLD_NODELETE): it stays mapped for the process's life, closing it only
 * drops the handle, and a second dlopen of the file gets the mapped one back.
 * A CUDA plugin registers its device code with the CUDA runtime when mapped
 * and unregisters it when unmapped; unmapping one plugin before another's
 * first kernel is the likeliest reading of a failure seen on the H200
 * (docs/abi.md, "Loading", step 5). */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/loader.h"

#ifndef SSM_PLUGIN_DIR
#define SSM_PLUGIN_DIR "/usr/local/lib/ssmstate"
#endif

/* The entry symbols this library speaks, newest first, and the shortest
 * table of each. A new ABI version adds a line here and an adapter file that
 * turns the tables before it into its own (loader_v1.c). */
static const struct {
    const char *symbol;
    uint32_t version;
    size_t min_size;
} entry_points[] = {
    {SSM_PLUGIN_V2_SYMBOL, SSM_PLUGIN_V2_ABI_VERSION, sizeof(ssm_plugin_v2)},
    {SSM_PLUGIN_V1_SYMBOL, SSM_PLUGIN_V1_ABI_VERSION, SSM_PLUGIN_V1_MIN_SIZE},
};
#define ENTRY_POINT_COUNT (sizeof entry_points / sizeof entry_points[0])

static int is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

/* The first required method a table lacks, or NULL. check_config, plan and
 * create are the file's own (a v1 file's are not in the v2 table). */
static const char *missing_method(const ssm_plugin_v2 *t, int check_config, int plan, int create)
{
    if (!check_config) return "check_config";
    if (!plan) return "plan";
    if (!create) return "create";
    if (!t->destroy) return "destroy";
    if (!t->reset_slot) return "reset_slot";
    if (!t->prefill) return "prefill";
    if (!t->decode) return "decode";
    if (!t->verify) return "verify";
    if (!t->commit) return "commit";
    return NULL;
}

/* Checks the table at `address`, the entry symbol of ABI `version`, and
 * fills out->table (and for v1, the adapter's copy). */
static ssm_status adopt_table(const char *path, const char *symbol, uint32_t version,
                              size_t min_size, const void *address, ssm_loaded_plugin *out)
{
    const ssm_plugin_v1 *head = address; /* every version starts with v1's first fields */
    if (head->abi_version != version)
        return ssm_error_set(SSM_ERR_PLUGIN,
                             "%s: symbol %s declares plugin ABI version %u; this library "
                             "speaks version %u",
                             path, symbol, head->abi_version, version);
    if (head->struct_size < min_size)
        return ssm_error_set(SSM_ERR_PLUGIN,
                             "%s: symbol %s has a table of %u bytes; ABI version %u needs %zu",
                             path, symbol, head->struct_size, version, min_size);
    int check_config, plan, create;
    out->abi_version = version;
    if (version == SSM_PLUGIN_V1_ABI_VERSION) {
        ssm_loader_v1_adopt(head, out);
        check_config = out->v1.check_config != NULL;
        plan = out->v1.plan != NULL;
        create = out->v1.create != NULL;
    } else {
        memcpy(&out->table, address, sizeof out->table);
        check_config = out->table.check_config != NULL;
        plan = out->table.plan != NULL;
        create = out->table.create != NULL;
    }
    const ssm_plugin_v2 *t = &out->table;
    if (!t->name || !*t->name || strlen(t->name) >= 64)
        return ssm_error_set(SSM_ERR_PLUGIN, "%s: the plugin table has no usable name", path);
    const char *missing = missing_method(t, check_config, plan, create);
    if (missing)
        return ssm_error_set(SSM_ERR_PLUGIN, "%s: the plugin table lacks the method '%s'", path,
                             missing);
    return SSM_OK;
}

/* Marks the loaded file `path` never to be unmapped (see the top). A
 * failure costs only that: it is logged, and dlerror() is cleared. */
static void pin(const char *path)
{
    dlerror();
    void *again = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD | RTLD_NODELETE);
    if (again)
        dlclose(again);
    else
        ssm_log(2, "could not pin plugin %s: %s", path, dlerror());
}

/* The mode a plugin file is named for: its name without directory and ".so". */
static void mode_of_path(const char *path, char *out, size_t size)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 3 && strcmp(base + len - 3, ".so") == 0)
        len -= 3;
    snprintf(out, size, "%.*s", (int)len, base);
}

ssm_status ssm_loader_open_file(const char *path, const char *mode, ssm_loaded_plugin *out)
{
    if (strlen(path) >= sizeof out->path)
        return ssm_error_set(SSM_ERR_PLUGIN, "plugin path too long: %s", path);
    char named[256];
    if (mode)
        snprintf(named, sizeof named, "%s", mode);
    else
        mode_of_path(path, named, sizeof named);
    dlerror();
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
        return ssm_error_set(SSM_ERR_PLUGIN, "cannot load plugin %s: %s", path, dlerror());

    char tried[256] = "";
    for (size_t i = 0; i < ENTRY_POINT_COUNT; i++) {
        const char *symbol = entry_points[i].symbol;
        void *address = dlsym(handle, symbol);
        Dl_info info;
        if (!address || !dladdr(address, &info) || !info.dli_fname ||
            !same_file(info.dli_fname, path)) {
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, "%s%s (v%u)", used ? ", " : "", symbol,
                     entry_points[i].version);
            continue;
        }
        ssm_loaded_plugin loaded = {0};
        ssm_status status = adopt_table(path, symbol, entry_points[i].version,
                                        entry_points[i].min_size, address, &loaded);
        if (status == SSM_OK && strcmp(loaded.table.name, named) != 0)
            status = ssm_error_set(SSM_ERR_PLUGIN,
                                   "%s: file is named for mode '%s' but its table says '%s'",
                                   path, named, loaded.table.name);
        if (status != SSM_OK) {
            dlclose(handle); /* not pinned yet: a refused file is unmapped */
            return status;
        }
        pin(path);
        loaded.handle = handle;
        snprintf(loaded.path, sizeof loaded.path, "%s", path);
        *out = loaded;
        ssm_log(2, "loaded mode '%s' (mode version %u, ABI v%u) from %s", out->table.name,
                out->table.mode_version, out->abi_version, path);
        return SSM_OK;
    }
    dlclose(handle);
    return ssm_error_set(SSM_ERR_PLUGIN,
                         "%s is not an ssmstate plugin: it defines none of the entry symbols "
                         "%s",
                         path, tried);
}

void ssm_loader_close(ssm_loaded_plugin *plugin)
{
    if (plugin && plugin->handle)
        dlclose(plugin->handle);
    if (plugin)
        plugin->handle = NULL;
}

/* Calls visit_dir(dir, user) for plugin_dir, the installed directory and each
 * entry of $SSMSTATE_PLUGIN_PATH, in that order, until it returns nonzero. */
static void each_dir(const char *plugin_dir, int (*visit_dir)(const char *dir, void *user),
                     void *user)
{
    if (plugin_dir && *plugin_dir && visit_dir(plugin_dir, user))
        return;
    if (visit_dir(SSM_PLUGIN_DIR, user))
        return;
    const char *env = getenv("SSMSTATE_PLUGIN_PATH");
    while (env && *env) {
        const char *colon = strchr(env, ':');
        size_t len = colon ? (size_t)(colon - env) : strlen(env);
        char dir[PATH_MAX];
        if (len > 0 && len < sizeof dir) {
            memcpy(dir, env, len);
            dir[len] = '\0';
            if (visit_dir(dir, user))
                return;
        }
        env = colon ? colon + 1 : NULL;
    }
}

struct mode_search {
    const char *mode;
    char tried[2048];
    char found[PATH_MAX];
};

static int look_for_mode(const char *dir, void *user)
{
    struct mode_search *s = user;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.so", dir, s->mode);
    if (is_regular_file(path)) {
        snprintf(s->found, sizeof s->found, "%s", path);
        return 1;
    }
    size_t used = strlen(s->tried);
    snprintf(s->tried + used, sizeof s->tried - used, "%s%s", used ? ", " : "", path);
    return 0;
}

ssm_status ssm_loader_check_dir(const char *plugin_dir)
{
    struct stat st;
    if (!plugin_dir || !*plugin_dir)
        return SSM_OK;
    if (stat(plugin_dir, &st) != 0)
        return ssm_error_set(SSM_ERR_PLUGIN, "plugin_dir %s: %s", plugin_dir,
                             errno == ENOENT ? "no such directory" : strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ssm_error_set(SSM_ERR_PLUGIN, "plugin_dir %s: not a directory", plugin_dir);
    return SSM_OK;
}

ssm_status ssm_loader_open_mode(const char *mode, const char *plugin_dir, ssm_loaded_plugin *out)
{
    ssm_status status = ssm_loader_check_dir(plugin_dir);
    if (status != SSM_OK)
        return status;
    struct mode_search search = {.mode = mode};
    each_dir(plugin_dir, look_for_mode, &search);
    if (!search.found[0])
        return ssm_error_set(SSM_ERR_PLUGIN,
                             "no plugin for mode '%s': tried %s (set [state] plugin_dir or "
                             "$SSMSTATE_PLUGIN_PATH)",
                             mode, search.tried[0] ? search.tried : "no directory");
    ssm_loaded_plugin loaded = {0};
    status = ssm_loader_open_file(search.found, mode, &loaded);
    if (status == SSM_OK)
        *out = loaded;
    return status;
}

struct file_walk {
    int (*visit)(const char *path, void *user);
    void *user;
    int stopped;
};

static int walk_dir(const char *dir, void *user)
{
    struct file_walk *w = user;
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n < 0)
        return 0;
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        size_t len = strlen(name);
        char path[PATH_MAX];
        if (!w->stopped && len > 3 && strcmp(name + len - 3, ".so") == 0) {
            snprintf(path, sizeof path, "%s/%s", dir, name);
            if (is_regular_file(path) && w->visit(path, w->user))
                w->stopped = 1;
        }
        free(names[i]);
    }
    free(names);
    return w->stopped;
}

ssm_status ssm_loader_each_file(const char *plugin_dir,
                                int (*visit)(const char *path, void *user), void *user)
{
    ssm_status status = ssm_loader_check_dir(plugin_dir);
    if (status != SSM_OK)
        return status;
    struct file_walk walk = {visit, user, 0};
    each_dir(plugin_dir, walk_dir, &walk);
    return SSM_OK;
}
