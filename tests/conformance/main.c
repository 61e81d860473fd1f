/* check_conformance: the ssmstate conformance suite, run against one mode
 * plugin. Any plugin (built-in or a vendor's) must pass it.
 *
 *   check_conformance /path/to/mymode.so    a plugin file: plugin_dir is its
 *                                           directory, the mode its basename
 *                                           without .so (the table's name must
 *                                           match, as for any plugin)
 *   check_conformance replay                a mode name, found on the normal
 *                                           search path ([state] plugin_dir,
 *                                           the installed directory, then
 *                                           $SSMSTATE_PLUGIN_PATH)
 *   SSM_CONFORM_MODE=native check_conformance
 *
 * Options for the mode's config section go in a second argument or in
 * $SSM_CONFORM_OPTIONS as "key=value,key=value" (for example
 * "history=16,outputs=matrix" for replay); without them the built-in replay
 * mode gets a random history length per test and other modes none. Each test
 * draws its verify width T_max (1 + max_draft_tokens) in [1, 5];
 * $SSM_CONFORM_MAX_TOKENS lowers that ceiling, for options that only suit
 * narrower verifies.
 *
 * The seed is fresh each run and printed to stderr ("# test seed:
 * SSM_TEST_SEED=..."); set SSM_TEST_SEED to replay a failing run. Output
 * follows Check's usual variables: CK_TAP_LOG_FILE_NAME=- prints TAP (what
 * `make check` uses), CK_VERBOSITY=verbose lists every test, CK_RUN_CASE /
 * CK_RUN_SUITE select, CK_FORK=no runs under a debugger. The exit status is
 * 0 when every test passed.
 *
 * $SSM_CONFORM_DEVICE (`ssmstate conform --device`) picks the contexts: cpu,
 * cuda or all (the default): the suite on CPU contexts (SSM_CAP_CPU), then
 * the same suite on contexts of CUDA device 0 where the build has CUDA, a
 * GPU is visible and the plugin declares SSM_CAP_CUDA; otherwise one line
 * says why CUDA was skipped. Asked for cuda alone where it cannot run, it
 * says why in one line and exits CONFORM_NO_DEVICE (77). Every test exports
 * slots through the mode's pages (SSM_CAP_PAGES); variants that need a
 * capability the plugin does not declare only check that ssm_ctx_create
 * refuses them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/conformance/conformance.h"

static void usage(FILE *to)
{
    fprintf(to,
            "usage: check_conformance PLUGIN.so|MODE [key=value,...]\n"
            "       SSM_CONFORM_MODE=MODE [SSM_CONFORM_OPTIONS=key=value,...] "
            "check_conformance\n"
            "Runs the ssmstate conformance suite against one mode plugin, on CPU contexts\n"
            "and CUDA ones (SSM_CONFORM_DEVICE=cpu|cuda|all, default all).\n");
}

/* Splits a plugin file path into its directory and mode name. */
static int target_from_path(const char *arg, char *dir, size_t dir_len, char *mode,
                            size_t mode_len)
{
    const char *slash = strrchr(arg, '/');
    const char *base = slash ? slash + 1 : arg;
    size_t base_len = strlen(base);
    if (base_len > 3 && strcmp(base + base_len - 3, ".so") == 0)
        base_len -= 3;
    if (base_len == 0 || base_len >= mode_len)
        return -1;
    memcpy(mode, base, base_len);
    mode[base_len] = '\0';
    if (!slash)
        snprintf(dir, dir_len, ".");
    else if (slash == arg)
        snprintf(dir, dir_len, "/");
    else
        snprintf(dir, dir_len, "%.*s", (int)(slash - arg), arg);
    return 0;
}

/* Before any test: the plugin under test is on the path and loads. A file
 * that is no plugin (or one this library refuses) would fail every test in
 * the same words; it gets one line instead. 0 with its capabilities in
 * *capabilities, or -1 after that line. */
static int preflight(const char *arg, uint64_t *capabilities)
{
    int32_t capacity = 64, count = 0;
    ssm_plugin_info *infos = NULL;
    for (;;) {
        free(infos);
        infos = calloc((size_t)capacity, sizeof *infos);
        if (!infos) {
            fprintf(stderr, "check_conformance: out of memory\n");
            return -1;
        }
        if (ssm_plugins_list(conform.plugin_dir, infos, capacity, &count) != SSM_OK) {
            fprintf(stderr, "check_conformance: %s\n", ssm_last_error());
            free(infos);
            return -1;
        }
        if (count <= capacity)
            break;
        capacity = count;
    }
    const ssm_plugin_info *mine = NULL;
    for (int32_t i = 0; i < count && !mine; i++)
        if (strcmp(infos[i].name, conform.mode) == 0)
            mine = &infos[i];
    int ok = mine && mine->status == SSM_OK;
    if (!mine && conform.plugin_dir)
        fprintf(stderr,
                "check_conformance: %s is not a mode plugin: the loader finds no mode '%s' in "
                "%s%s\n",
                arg, conform.mode, conform.plugin_dir,
                strncmp(conform.mode, "lib", 3) ? "" : " (a mode's name never starts with lib)");
    else if (!mine)
        fprintf(stderr, "check_conformance: no plugin for mode '%s' on the search path\n", arg);
    else if (!ok)
        fprintf(stderr, "check_conformance: not a usable mode plugin: %s\n", mine->error);
    if (ok)
        *capabilities = mine->capabilities;
    free(infos);
    return ok ? 0 : -1;
}

/* Whether this build can make a context on CUDA device 0 now
 * (ssm_device_check), asked in a child process: the tests fork, and a CUDA
 * runtime started in this process would not survive into them. 0, or -1
 * with the reason in why. */
static int cuda_visible(char *why, size_t len)
{
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, len, "cannot ask: pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child < 0) {
        snprintf(why, len, "cannot ask: fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (child == 0) {
        close(fds[0]);
        const ssm_device first = {SSM_DEVICE_CUDA, 0};
        const char *answer = ssm_device_check(&first) == SSM_OK ? "" : ssm_last_error();
        ssize_t written = write(fds[1], answer, strlen(answer));
        _exit(written == (ssize_t)strlen(answer) ? 0 : 1);
    }
    close(fds[1]);
    size_t got = 0;
    for (;;) {
        ssize_t n = read(fds[0], why + got, len - 1 - got);
        if (n > 0)
            got += (size_t)n;
        if (n == 0 || (n < 0 && errno != EINTR) || got + 1 >= len)
            break;
    }
    why[got] = '\0';
    close(fds[0]);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, len, "the device check did not finish");
        return -1;
    }
    return why[0] ? -1 : 0;
}

/* Whether the CUDA suite runs: 1, or 0 with the reason in why. */
static int cuda_suite_runs(uint64_t capabilities, char *why, size_t len)
{
    if (cuda_visible(why, len) != 0)
        return 0;
    if (!(capabilities & SSM_CAP_CUDA)) {
        snprintf(why, len, "mode '%s' does not declare SSM_CAP_CUDA", conform.mode);
        return 0;
    }
    return 1;
}

int conform_main(int argc, char **argv, const char *devices)
{
    static char dir[4096], mode[256];
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return EXIT_SUCCESS;
    }
    if (argc > 3) {
        usage(stderr);
        return EXIT_FAILURE;
    }
    const char *arg = argc > 1 ? argv[1] : getenv("SSM_CONFORM_MODE");
    if (!arg || !*arg) {
        usage(stderr);
        return EXIT_FAILURE;
    }
    size_t len = strlen(arg);
    if (strchr(arg, '/') || (len > 3 && strcmp(arg + len - 3, ".so") == 0)) {
        if (target_from_path(arg, dir, sizeof dir, mode, sizeof mode) != 0) {
            fprintf(stderr, "check_conformance: cannot make a mode name of '%s'\n", arg);
            return EXIT_FAILURE;
        }
        if (access(arg, R_OK) != 0) {
            fprintf(stderr, "check_conformance: cannot read the plugin %s\n", arg);
            return EXIT_FAILURE;
        }
        conform.mode = mode;
        conform.plugin_dir = dir;
    } else {
        conform.mode = arg;
        conform.plugin_dir = NULL;
    }
    conform.options = argc > 2 ? argv[2] : getenv("SSM_CONFORM_OPTIONS");
    const char *max_tokens = getenv("SSM_CONFORM_MAX_TOKENS");
    conform.max_tokens = max_tokens && *max_tokens ? atoi(max_tokens) : 5;
    if (conform.max_tokens < 1 || conform.max_tokens > 5) {
        fprintf(stderr, "check_conformance: SSM_CONFORM_MAX_TOKENS must be in [1, 5]\n");
        return EXIT_FAILURE;
    }
    if (!devices || !*devices)
        devices = getenv("SSM_CONFORM_DEVICE");
    if (!devices || !*devices)
        devices = "all";
    if (strcmp(devices, "cpu") && strcmp(devices, "cuda") && strcmp(devices, "all")) {
        fprintf(stderr, "check_conformance: the device must be cpu, cuda or all, not '%s'\n",
                devices);
        return EXIT_FAILURE;
    }
    uint64_t capabilities = 0;
    if (preflight(arg, &capabilities) != 0)
        return CONFORM_NOT_A_PLUGIN;
    int cpu = strcmp(devices, "cuda") != 0, cuda = 0;
    char why[512] = "";
    if (strcmp(devices, "cpu") != 0)
        cuda = cuda_suite_runs(capabilities, why, sizeof why);
    if (!cpu && !cuda) {
        fprintf(stderr, "check_conformance: no CUDA contexts to check: %s\n", why);
        return CONFORM_NO_DEVICE;
    }
    fprintf(stderr, "# conformance of mode '%s' (%s)\n", conform.mode,
            conform.plugin_dir ? conform.plugin_dir : "search path");
    if (cuda)
        fputs(cpu ? "# on CPU contexts, then on cuda:0\n" : "# on cuda:0 only\n", stderr);
    else if (strcmp(devices, "all") == 0)
        fprintf(stderr, "# CUDA skipped: %s\n", why);

    test_seed(); /* one seed for every forked test, printed once */
    SRunner *runner = srunner_create(conformance_suite(cpu ? SSM_DEVICE_CPU : SSM_DEVICE_CUDA));
    if (cpu && cuda)
        srunner_add_suite(runner, conformance_suite(SSM_DEVICE_CUDA));
    srunner_run_all(runner, CK_ENV);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
