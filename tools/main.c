/* Entry point of the `ssmstate` command: dispatches to a subcommand and holds
 * the helpers the subcommands share. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ssmstate/ssmstate.h"
#include "cli.h"

static const char usage_text[] =
    "usage: ssmstate <command> [options]\n"
    "\n"
    "commands:\n"
    "  plugins [--plugin-dir DIR]          list the state-mode plugins found\n"
    "  check CONFIG                        validate a config and print its plan\n"
    "  run CONFIG [--dump DIR] [--quiet]   simulate a serving session and check\n"
    "                                      every output against the CPU reference\n"
    "  run CONFIG --modes LIST [--quiet]   the same session once per mode (LIST:\n"
    "                                      native,compact,replay or all), side by side\n"
    "  inspect PAGE                        print a state page's header and verify its\n"
    "                                      checksums (exit 1: not a valid page)\n"
    "  bench CONFIG...                     time decode and MTP rounds of every mode on\n"
    "                                      the GPU against a copy (docs/bench.md)\n"
    "  serve CONFIG...                     streamed serving benchmark: concurrency,\n"
    "                                      tokens/s and memory per mode (docs/serve.md)\n"
    "  conform PLUGIN.so|MODE [OPTIONS]    the conformance suite every state mode\n"
    "                                      must pass, on CPU and CUDA contexts\n"
    "                                      (--device cpu|cuda|all; docs/abi.md)\n"
    "\n"
    "exit status: 0 ok, 1 numerical check failed, 2 bad usage, config or plugin\n";

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ssmstate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return CLI_EXIT_USAGE;
}

int cli_usage(const char *usage, const char *bad)
{
    if (bad)
        return cli_fail("bad argument '%s' (usage: %s)", bad, usage);
    return cli_fail("usage: %s", usage);
}

int cli_check_writable(const char *option, const char *path)
{
    struct stat st;
    int existed = stat(path, &st) == 0;
    if (existed && S_ISDIR(st.st_mode))
        return cli_fail("%s %s: is a directory", option, path);
    FILE *f = fopen(path, "a"); /* creates it if need be, never truncates */
    if (!f)
        return cli_fail("%s %s: cannot write: %s", option, path, strerror(errno));
    fclose(f);
    if (!existed)
        unlink(path);
    return CLI_EXIT_OK;
}

int cli_make_directories(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char saved = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0777) != 0) {
            if (errno != EEXIST)
                return -1;
            if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
                errno = ENOTDIR;
                return -1;
            }
        }
        *p = saved;
        if (saved == '\0')
            return 0;
    }
}

int cli_fail_library(void)
{
    const char *message = ssm_last_error();
    return cli_fail("%s", message[0] ? message : "unknown error");
}

int cli_load_config(const char *path, ssm_config **config, workload *w)
{
    ssm_config *loaded = NULL;
    if (ssm_config_load(path, &loaded) != SSM_OK)
        return cli_fail_library();
    workload read;
    char error[1024];
    if (workload_from_config(loaded, &read, error, sizeof error) != 0) {
        ssm_config_free(loaded);
        return cli_fail("%s", error);
    }
    if (w)
        *w = read;
    *config = loaded;
    return CLI_EXIT_OK;
}

const char *cli_format_bytes(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double value = (double)bytes / 1024.0;
    size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < sizeof units / sizeof units[0]) {
        value /= 1024.0;
        unit++;
    }
    snprintf(buf, len, "%.2f %s", value, units[unit]);
    return buf;
}

int cli_parse_bytes(const char *text, uint64_t *out)
{
    static const char units[] = "KMGT";
    char *end;
    if (!isdigit((unsigned char)text[0]))
        return -1;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (errno == ERANGE)
        return -1;
    unsigned shift = 0;
    if (*end) {
        const char *unit = strchr(units, toupper((unsigned char)*end));
        if (!unit || (end[1] && strcmp(end + 1, "iB") != 0))
            return -1;
        shift = 10u * (unsigned)(unit - units + 1);
    }
    if (value > (UINT64_MAX >> shift))
        return -1;
    *out = (uint64_t)value << shift;
    return 0;
}

/* An uninstalled ssmstate finds its own build's plugins: libtool leaves the
 * program (or the wrapper script's real program) and the modules in the
 * build's .libs. So the directory of /proc/self/exe when it is a .libs, or
 * the .libs beside it, goes at the end of $SSMSTATE_PLUGIN_PATH (after
 * what the user set there). An installed ssmstate has no .libs beside it
 * and searches as before. */
static void add_build_plugins(void)
{
    char exe[PATH_MAX], dir[PATH_MAX + 8];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash || slash == exe)
        return;
    *slash = '\0';
    const char *base = strrchr(exe, '/');
    if (base && !strcmp(base + 1, ".libs"))
        snprintf(dir, sizeof dir, "%s", exe);
    else
        snprintf(dir, sizeof dir, "%s/.libs", exe);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return;
    const char *path = getenv("SSMSTATE_PLUGIN_PATH");
    if (!path || !*path) {
        setenv("SSMSTATE_PLUGIN_PATH", dir, 1);
        return;
    }
    size_t len = strlen(path) + 1 + strlen(dir) + 1;
    char *joined = malloc(len);
    if (!joined)
        return;
    snprintf(joined, len, "%s:%s", path, dir);
    setenv("SSMSTATE_PLUGIN_PATH", joined, 1);
    free(joined);
}

int main(int argc, char **argv)
{
    add_build_plugins();
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {
        {"plugins", cmd_plugins},
        {"check", cmd_check},
        {"run", cmd_run},
        {"bench", cmd_bench},
        {"serve", cmd_serve},
        {"inspect", cmd_inspect},
        {"conform", cmd_conform},
    };

    if (argc < 2) {
        fputs(usage_text, stderr);
        return CLI_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(usage_text, stdout);
        return CLI_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ssmstate %d.%d.%d\n", SSMSTATE_VERSION_MAJOR, SSMSTATE_VERSION_MINOR,
               SSMSTATE_VERSION_PATCH);
        return CLI_EXIT_OK;
    }
    opterr = 0; /* the subcommands report bad options on one line themselves */
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    return cli_fail("unknown command '%s' (usage: ssmstate "
                    "plugins|check|run|bench|serve|inspect|conform ...; see 'ssmstate --help')",
                    argv[1]);
}
