/* The `ssmstate` command: one function per subcommand, and the few helpers
 * they share (error reporting, byte formatting). */
#ifndef SSM_TOOLS_CLI_H
#define SSM_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "workload.h"

/* Exit codes of every subcommand. */
enum {
    CLI_EXIT_OK = 0,
    CLI_EXIT_CHECK_FAILED = 1, /* `run`: an output or state broke the numerics
                                * contract (docs/numerics.md), or
                                * (--modes) a mode broke its relation to native */
    CLI_EXIT_USAGE = 2         /* bad usage, config, plugin, or a library error */
};

/* Subcommands: argv[0] is the subcommand's name; they return an exit code. */
int cmd_plugins(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_bench(int argc, char **argv); /* cmd_bench.c: exits 77 without a GPU */
int cmd_inspect(int argc, char **argv); /* cmd_inspect.c: a state page's header */
int cmd_serve(int argc, char **argv); /* cmd_serve.c: the streamed serving benchmark */
int cmd_conform(int argc, char **argv); /* cmd_conform.c: the conformance suite */

/* `run CONFIG --modes LIST` (cmd_run_modes.c): LIST is "all" or mode names
 * separated by commas; every mode's context on `device`, or on the config's
 * device when it is NULL. */
int cmd_run_modes(const char *config_path, const char *modes, int show_progress,
                  const ssm_device *device);

/* Option lists (cli_lists.c), parsed in place (`text` is cut at its
 * commas, the results point into it). cli_split_list: at most `max`
 * comma-separated items, none empty; returns their count, or -1 (none, an
 * empty one, or too many). cli_parse_states:
 * "f32", "bf16" or both, distinct. cli_parse_modes: "all" (native,
 * compact, replay) or distinct names under 64 bytes, at most `max`. Both
 * return 0, or -1 for a bad list. */
int cli_split_list(char *text, char **items, int max);
/* A whole decimal integer in [min, max] into *out; 0, or -1 (*out untouched). */
int cli_parse_long(const char *text, long min, long max, long *out);
int cli_parse_states(char *text, ssm_dtype states[2], int32_t *count);
int cli_parse_modes(char *text, const char **modes, int max, int32_t *count);

/* Prints "ssmstate: <message>" as one line on stderr; returns CLI_EXIT_USAGE
 * so error paths read `return cli_fail(...)`. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A usage error as one line on stderr, naming the offending argument when
 * `bad` is not NULL; returns CLI_EXIT_USAGE. */
int cli_usage(const char *usage, const char *bad);

/* Whether `path` can be written, asked before a long run whose results go
 * there (the file is not truncated, and removed again if it was new).
 * CLI_EXIT_OK, or an exit code after an error naming option and path. */
int cli_check_writable(const char *option, const char *path);

/* mkdir -p: creates dir and every missing parent (an existing directory is
 * fine). 0, or -1 with errno set (ENOTDIR: a part of the path is a file). */
int cli_make_directories(const char *dir);

/* The most slots whose pool fits in `budget` bytes, into *slots (0: not
 * one), found from the library's plans of `config` with other slot counts
 * (a mode's shared bytes may grow with its capacity up to a bound, so
 * floor((budget - shared) / per slot) of one plan can be too many). Plans
 * go up to CLI_PLAN_SLOTS_MAX slots; past it the count assumes the shared
 * bytes stay. 0, or -1 when a plan fails (ssm_last_error() says why). */
#define CLI_PLAN_SLOTS_MAX 65536
int cli_slots_in_budget(const ssm_config *config, uint64_t budget, int64_t *slots);

/* cli_fail with the library's ssm_last_error() as the message. */
int cli_fail_library(void);

/* Loads CONFIG (ssm_config_load) and reads its [workload] into *w
 * (workload.h; w may be NULL where the subcommand has no use for it: the
 * section is checked all the same, so every subcommand refuses the configs
 * `check` refuses). Returns CLI_EXIT_OK with *config to ssm_config_free, or
 * an exit code after printing the error (nothing to free then). */
int cli_load_config(const char *path, ssm_config **config, workload *w);

/* Every plugin ssm_plugins_list() finds from plugin_dir (NULL: the default
 * path), in a calloc'ed array the caller frees. Returns CLI_EXIT_OK, or an
 * exit code after printing the error. */
int cli_list_plugins(const char *plugin_dir, ssm_plugin_info **out, int32_t *count);

/* Puts native, compact and replay first, in that order; the others keep
 * the order they were found in. */
void cli_sort_plugins(ssm_plugin_info *infos, int32_t count);

/* Parses a size: an integer number of bytes with an optional binary suffix
 * K, M, G or T (also KiB .. TiB; 40G = 40 * 2^30 bytes). Returns 0, or -1
 * for anything else (*out untouched). */
int cli_parse_bytes(const char *text, uint64_t *out);

/* "12345 B", "1.50 KiB", "2.00 MiB", "3.25 GiB" into buf; returns buf. */
const char *cli_format_bytes(uint64_t bytes, char *buf, size_t len);

#endif
