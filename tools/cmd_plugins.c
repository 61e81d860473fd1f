/* `ssmstate plugins [--plugin-dir DIR]`: what the loader finds on the search
 * path, so an operator can see which modes a config may name and why a
 * plugin is refused. Exit 0 when every file found is a usable plugin; 2
 * when none was found (naming every directory searched), a file found is
 * not usable, or DIR is not a directory. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssmstate/plugin.h"
#include "ssmstate/ssmstate.h"
#include "cli.h"

/* Writes the SSM_CAP_* bits as "cpu,cuda,gdn,..." (unknown bits as hex). */
static const char *format_capabilities(uint64_t caps, char *buf, size_t len)
{
    static const struct {
        uint64_t bit;
        const char *name;
    } names[] = {
        {SSM_CAP_CPU, "cpu"},           {SSM_CAP_CUDA, "cuda"},
        {SSM_CAP_GDN, "gdn"},           {SSM_CAP_KDA, "kda"},
        {SSM_CAP_STATE_F32, "state-f32"}, {SSM_CAP_STATE_BF16, "state-bf16"},
        {SSM_CAP_ACT_F32, "act-f32"},   {SSM_CAP_ACT_BF16, "act-bf16"},
        {SSM_CAP_PAGES, "pages"},       {SSM_CAP_LAYOUTS, "layouts"},
    };
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(caps & names[i].bit))
            continue;
        caps &= ~names[i].bit;
        used += snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? "," : "",
                         names[i].name);
    }
    if (caps)
        snprintf(buf + used, used < len ? len - used : 0, "%s0x%llx", used ? "," : "",
                 (unsigned long long)caps);
    else if (!used)
        snprintf(buf, len, "-");
    return buf;
}

int cli_list_plugins(const char *plugin_dir, ssm_plugin_info **out, int32_t *count)
{
    /* A first guess of the size; asked again when more plugins are found. */
    int32_t capacity = 16;
    for (;;) {
        ssm_plugin_info *infos = calloc((size_t)capacity, sizeof *infos);
        int32_t found = 0;
        if (!infos)
            return cli_fail("out of memory");
        if (ssm_plugins_list(plugin_dir, infos, capacity, &found) != SSM_OK) {
            free(infos);
            return cli_fail_library();
        }
        if (found <= capacity) {
            *out = infos;
            *count = found;
            return CLI_EXIT_OK;
        }
        free(infos);
        capacity = found;
    }
}

/* Where a mode goes in a listing: the built-in modes first, native, compact,
 * replay. */
static int mode_rank(const ssm_plugin_info *info)
{
    static const char *const built_in[] = {"native", "compact", "replay"};
    for (int i = 0; i < 3; i++)
        if (info->abi_version != 0 && !strcmp(info->name, built_in[i]))
            return i;
    return 3;
}

void cli_sort_plugins(ssm_plugin_info *infos, int32_t count)
{
    /* insertion sort: stable, and lists are short */
    for (int32_t i = 1; i < count; i++) {
        ssm_plugin_info moving = infos[i];
        int32_t j = i;
        for (; j > 0 && mode_rank(&infos[j - 1]) > mode_rank(&moving); j--)
            infos[j] = infos[j - 1];
        infos[j] = moving;
    }
}

static const char usage_line[] = "ssmstate plugins [--plugin-dir DIR]";

/* The directories ssm_plugins_list searches, in its order: DIR, the
 * installed directory, each entry of $SSMSTATE_PLUGIN_PATH (which holds the
 * build's .libs for an uninstalled ssmstate: main.c). */
static const char *search_path(const char *plugin_dir, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
#define ADD(fmt, ...)                                                                    \
    do {                                                                                 \
        int n_ = snprintf(buf + used, len - used, "%s" fmt, used ? ", " : "", __VA_ARGS__); \
        used = n_ < 0 ? used : (size_t)n_ >= len - used ? len - 1 : used + (size_t)n_;   \
    } while (0)
    if (plugin_dir && *plugin_dir)
        ADD("%s (--plugin-dir)", plugin_dir);
    ADD("%s (the installed plugin directory)", SSM_PLUGIN_DIR);
    const char *env = getenv("SSMSTATE_PLUGIN_PATH");
    while (env && *env) {
        const char *colon = strchr(env, ':');
        int n = colon ? (int)(colon - env) : (int)strlen(env);
        if (n > 0)
            ADD("%.*s ($SSMSTATE_PLUGIN_PATH)", n, env);
        env = colon ? colon + 1 : NULL;
    }
#undef ADD
    return buf;
}

int cmd_plugins(int argc, char **argv)
{
    static const struct option options[] = {
        {"plugin-dir", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *plugin_dir = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "d:h", options, NULL)) != -1) {
        switch (opt) {
        case 'd': plugin_dir = optarg; break;
        case 'h': printf("usage: %s\n", usage_line); return CLI_EXIT_OK;
        default: return cli_usage(usage_line, argv[optind - 1]);
        }
    }
    if (optind != argc)
        return cli_usage(usage_line, argv[optind]);

    ssm_plugin_info *infos = NULL;
    int32_t listed = 0;
    int exit_code = cli_list_plugins(plugin_dir, &infos, &listed);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;

    if (listed == 0) {
        char searched[8192];
        free(infos);
        return cli_fail("no plugins found; searched %s",
                        search_path(plugin_dir, searched, sizeof searched));
    }
    printf("%-10s %-4s %-5s %-6s %-48s %s\n", "name", "abi", "mode", "status", "capabilities",
           "path");
    int32_t errors = 0;
    for (int32_t i = 0; i < listed; i++) {
        const ssm_plugin_info *p = &infos[i];
        char caps[256];
        printf("%-10s %-4u %-5u %-6s %-48s %s\n", p->name[0] ? p->name : "?", p->abi_version,
               p->mode_version, p->status == SSM_OK ? "ok" : "error",
               format_capabilities(p->capabilities, caps, sizeof caps), p->path);
        if (p->status != SSM_OK) {
            printf("           %s: %s\n", ssm_status_name(p->status), p->error);
            errors++;
        }
    }
    free(infos);
    if (errors)
        return cli_fail("%d of the %d files found %s not usable (listed above)", (int)errors,
                        (int)listed, errors == 1 ? "is" : "are");
    return CLI_EXIT_OK;
}
