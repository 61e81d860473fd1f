/* `ssmstate conform [--device cpu|cuda|all] PLUGIN.so|MODE [key=value,...]`:
 * the conformance suite every state mode must pass (tests/conformance),
 * against one plugin file or a mode on the plugin search path, on CPU
 * contexts and, where it can, CUDA ones. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "device.h"
#include "tests/conformance/conformance.h"

static const char usage[] =
    "ssmstate conform [--device cpu|cuda|all] PLUGIN.so|MODE [key=value,...]";

static const char help_text[] =
    "Runs the conformance suite against one state-mode plugin: a file (its directory\n"
    "becomes plugin_dir, its name without .so the mode, which must match the plugin's\n"
    "table) or a mode name found on the plugin search path. Options for the mode's\n"
    "config section follow as key=value,... (for example history=16 for replay).\n"
    "Every test draws fresh random inputs; the seed is printed, and SSM_TEST_SEED\n"
    "replays a run. CK_VERBOSITY=verbose lists every test.\n"
    "\n"
    "--device cpu|cuda|all   where the suite's contexts run (default all, or\n"
    "                        $SSM_CONFORM_DEVICE when set). cpu: CPU contexts.\n"
    "                        cuda: contexts on CUDA device 0, with the step buffers\n"
    "                        in device memory, checked against the CPU reference\n"
    "                        within the CPU-vs-CUDA bounds. all: the CPU, then CUDA\n"
    "                        where the build has CUDA, a GPU is visible and the\n"
    "                        plugin declares SSM_CAP_CUDA (else one line says why\n"
    "                        CUDA was skipped)\n"
    "\n"
    "exit status: 0 every test passed, 1 a test failed, 2 bad usage or a target that\n"
    "is not a plugin that loads (one line says why; no test runs), 77 --device cuda\n"
    "where CUDA contexts cannot run (one line says why; no test runs)\n";

int cmd_conform(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: %s\n\n%s", usage, help_text);
        return CLI_EXIT_OK;
    }
    const char *device = NULL; /* conform_main: $SSM_CONFORM_DEVICE, else all */
    char *positional[3] = {argv[0], NULL, NULL};
    int count = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--device")) {
            if (i + 1 >= argc)
                return cli_usage(usage, argv[i]);
            device = argv[++i];
        } else if (!strncmp(argv[i], "--device=", 9)) {
            device = argv[i] + 9;
        } else if (argv[i][0] == '-' || count == 3) {
            return cli_usage(usage, argv[i]);
        } else {
            positional[count++] = argv[i];
        }
    }
    if (count < 2)
        return cli_usage(usage, NULL);
    if (device && strcmp(device, "cpu") && strcmp(device, "cuda") && strcmp(device, "all"))
        return cli_fail("--device: '%s' is not cpu, cuda or all", device);
    int status = conform_main(count, positional, device);
    return status == 0                      ? CLI_EXIT_OK
           : status == CONFORM_NOT_A_PLUGIN ? CLI_EXIT_USAGE
           : status == CONFORM_NO_DEVICE    ? DEVICE_EXIT_NO_GPU
                                            : CLI_EXIT_CHECK_FAILED;
}
