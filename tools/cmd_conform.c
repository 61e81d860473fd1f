/* `ssmstate conform PLUGIN.so|MODE [key=value,...]`: the conformance suite
 * every state mode must pass (tests/conformance), against one plugin file or
 * a mode on the plugin search path, on CPU contexts. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tests/conformance/conformance.h"

static const char usage[] = "ssmstate conform PLUGIN.so|MODE [key=value,...]";

static const char help_text[] =
    "Runs the conformance suite against one state-mode plugin: a file (its directory\n"
    "becomes plugin_dir, its name without .so the mode, which must match the plugin's\n"
    "table) or a mode name found on the plugin search path. Options for the mode's\n"
    "config section follow as key=value,... (for example history=16 for replay).\n"
    "Every test draws fresh random inputs; the seed is printed, and SSM_TEST_SEED\n"
    "replays a run. CK_VERBOSITY=verbose lists every test.\n"
    "\n"
    "exit status: 0 every test passed, 1 a test failed, 2 bad usage or a target that\n"
    "is not a plugin that loads (one line says why; no test runs)\n";

int cmd_conform(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        printf("usage: %s\n\n%s", usage, help_text);
        return CLI_EXIT_OK;
    }
    if (argc < 2)
        return cli_usage(usage, NULL);
    if (argc > 3 || argv[1][0] == '-')
        return cli_usage(usage, argc > 3 ? argv[3] : argv[1]);
    int status = conform_main(argc, argv);
    return status == 0                      ? CLI_EXIT_OK
           : status == CONFORM_NOT_A_PLUGIN ? CLI_EXIT_USAGE
                                            : CLI_EXIT_CHECK_FAILED;
}
