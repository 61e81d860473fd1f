/* `ssmstate serve CONFIG... [options]`: the streamed serving benchmark
 * (docs/serve.md). Per config, state dtype and mode: what a request's
 * state costs and how many requests a state budget holds, then a stream of
 * seeded requests (Poisson arrivals, chunked prefill, MTP rounds of T = 4,
 * slots released and reused) at a sweep of concurrency caps, timed per step;
 * a sample of requests is replayed on the CPU and compared. Runs on the GPU
 * when the build has CUDA and one is visible, else on the CPU. Exit 0 when
 * everything ran and passed, 1 when a check failed, 2 for bad usage or a
 * mode that could not run, 77 when --device cuda has no GPU to run on. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/fold_rule.h"
#include "serve.h"
#include "serve_data.h"
#include "serve_check.h"
#include "tools/device.h"
#include "serve_mode.h"
#include "serve_report.h"

enum { MAX_CONFIGS = 8 };

static const char usage_line[] =
    "ssmstate serve CONFIG... [--modes LIST] [--state f32,bf16] [--device cpu|cuda[:N]] "
    "[--state-budget SIZE] [--concurrency LIST] [--steps N] [--warmup-steps N] [--check N] "
    "[--check-layers ends|all|LIST] [--check-threads N] "
    "[--seed N] [--rate R|auto] [--prompt MIN:MAX] [--output MIN:MAX] [--chunk N] "
    "[--accept P] [--json FILE] [--quiet]";

static const char help_text[] =
    "Streams seeded requests through a context of each mode, as an engine serves them\n"
    "(Poisson arrivals, chunked prefill, MTP rounds of T = 4 with seeded acceptance,\n"
    "slots released and reused), at a sweep of concurrency caps up to the most requests\n"
    "the state budget holds; prints per mode the state per request, that maximum,\n"
    "tokens/s, p50/p99 step time, replay's folds/s and a CPU cross-check of a sample of\n"
    "requests. Runs on the GPU when built with CUDA and one is visible, else on the CPU.\n"
    "docs/serve.md explains every option and column.\n"
    "\n"
    "  --modes LIST         modes, or all (default native,compact,replay)\n"
    "  --state LIST         state dtypes (default f32,bf16)\n"
    "  --device D           cpu, cuda or cuda:N (default: see above)\n"
    "  --state-budget SIZE  state memory per mode, K/M/G/T = powers of 1024\n"
    "                       (default 40G on a GPU, 1M on the CPU)\n"
    "  --concurrency LIST   levels below the maximum (default 1,2,4,...); the\n"
    "                       maximum and native's maximum are always measured\n"
    "  --steps N            measured steps per level (default 200; CPU 50)\n"
    "  --warmup-steps N     most warm-up steps per level (default 2000; CPU 200)\n"
    "  --check N            requests cross-checked on the CPU (default 4; 0: none)\n"
    "  --check-layers L     their layers: ends (first, middle, last; the default),\n"
    "                       all, or indices 0,17,35\n"
    "  --check-threads N    threads replaying the check (default: one per CPU\n"
    "                       this process may use; 1: one at a time); any N gives\n"
    "                       the same result\n"
    "  --seed N             workload and data seed (default 1)\n"
    "  --rate R|auto        arrivals per step (default auto: keeps the cap full)\n"
    "  --prompt MIN:MAX     prompt lengths, log-uniform (default 64:4096; CPU 16:128)\n"
    "  --output MIN:MAX     output lengths, uniform (default 64:512; CPU 16:64)\n"
    "  --chunk N            prompt tokens prefilled per step (default 512; CPU 128)\n"
    "  --accept P           chance each draft token is accepted (default 0.7)\n"
    "  --json FILE          write the results as one JSON document (figures:\n"
    "                       bench/plot_serve.py FILE)\n"
    "  --quiet              no progress lines on stderr\n"
    "\n"
    "On the CPU the defaults marked CPU apply: examples/serve-tiny.ini then runs in\n"
    "well under a minute. Ctrl-C stops the run at the end of a step: the tables\n"
    "and --json then hold what was measured until then.\n"
    "\n"
    "exit status: 0 ok, 1 a cross-check failed, 2 bad usage or a mode could not run,\n"
    "77 --device cuda without a CUDA build or a visible GPU, 130 interrupted (Ctrl-C)\n";

/* parse_arguments() after --help: nothing more to do. */
enum { PARSED_HELP = -1 };

/* The exit status of a run Ctrl-C stopped, as a shell reports SIGINT. */
enum { SERVE_EXIT_INTERRUPTED = 130 };

/* Options the command line set, which the CPU's defaults leave alone. */
enum {
    GIVEN_BUDGET = 1,
    GIVEN_STEPS = 2,
    GIVEN_WARMUP = 4,
    GIVEN_PROMPT = 8,
    GIVEN_OUTPUT = 16,
    GIVEN_CHUNK = 32
};

/* ------------------------------------------------------------- parsing */

/* cli_parse_long into an int32_t. */
static int parse_int(const char *text, int32_t min, int32_t max, int32_t *out)
{
    long value;
    if (cli_parse_long(text, min, max, &value) != 0)
        return -1;
    *out = (int32_t)value;
    return 0;
}

/* "MIN:MAX" with min <= max within [lo, hi]. */
static int parse_range(const char *text, int32_t lo, int32_t hi, int32_t *min, int32_t *max)
{
    char copy[64];
    const char *colon = strchr(text, ':');
    if (!colon || strlen(text) >= sizeof copy)
        return -1;
    snprintf(copy, sizeof copy, "%.*s", (int)(colon - text), text);
    if (parse_int(copy, lo, hi, min) != 0 || parse_int(colon + 1, lo, hi, max) != 0)
        return -1;
    return *min <= *max ? 0 : -1;
}

/* A number in [min, max]; 0, or -1. */
static int parse_double(const char *text, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end || !(value >= min && value <= max))
        return -1;
    *out = value;
    return 0;
}

/* --concurrency: counts in [1, 65536]; 0, or -1. */
static int parse_levels(char *text, serve_options *o)
{
    char *items[SERVE_MAX_LIST];
    int n = cli_split_list(text, items, SERVE_MAX_LIST);
    for (int i = 0; i < n; i++)
        if (parse_int(items[i], 1, 65536, &o->concurrency[i]) != 0)
            return -1;
    o->concurrency_count = n;
    return n > 0 ? 0 : -1;
}

/* "ends", "all" or a list of layer indices (ranges are checked per config). */
static int check_layers_syntax(const char *text)
{
    if (!strcmp(text, "ends") || !strcmp(text, "all"))
        return 0;
    char previous = ',';
    for (const char *p = text; *p; previous = *p++) {
        int digit = *p >= '0' && *p <= '9';
        if (!digit && !(*p == ',' && previous != ','))
            return -1;
    }
    return previous == ',' ? -1 : 0; /* empty, or a trailing comma */
}

/* The defaults docs/serve.md lists. */
static void set_defaults(serve_options *o)
{
    memset(o, 0, sizeof *o);
    o->workload = (serve_workload){1, 1.0, 64, 4096, 64, 512, 0.7, SERVE_DRAFTS + 1};
    o->chunk = 512;
    o->steps = 200;
    o->warmup_steps = 2000;
    o->check = 4;
    o->states[0] = SSM_DTYPE_F32;
    o->states[1] = SSM_DTYPE_BF16;
    o->states_count = 2;
    o->modes[0] = "native";
    o->modes[1] = "compact";
    o->modes[2] = "replay";
    o->modes_count = 3;
}

/* On the CPU a run of the GPU's defaults takes many minutes even for
 * examples/serve-tiny.ini (a 64 MiB budget is hundreds of slots, and
 * prompts of thousands of tokens): these make it well under one. Options
 * the command line gave stay as given. */
static void set_cpu_defaults(serve_options *o, unsigned given)
{
    if (!(given & GIVEN_BUDGET))
        o->budget = 1ull << 20;
    if (!(given & GIVEN_STEPS))
        o->steps = 50;
    if (!(given & GIVEN_WARMUP))
        o->warmup_steps = 200;
    if (!(given & GIVEN_PROMPT)) {
        o->workload.prompt_min = 16;
        o->workload.prompt_max = 128;
    }
    if (!(given & GIVEN_OUTPUT)) {
        o->workload.output_min = 16;
        o->workload.output_max = 64;
    }
    if (!(given & GIVEN_CHUNK))
        o->chunk = 128;
}

/* Whether the run goes to the CPU (device_pick's rule): --device cpu,
 * or no --device and no GPU to run on. */
static int runs_on_cpu(const char *forced)
{
    const ssm_device first = {SSM_DEVICE_CUDA, 0};
    if (forced)
        return !strcmp(forced, "cpu");
    return ssm_device_check(&first) != SSM_OK;
}

/* The bit of `given` an option sets (0: none the CPU defaults touch). */
static unsigned given_bit(int opt)
{
    switch (opt) {
    case 'b': return GIVEN_BUDGET;
    case 'n': return GIVEN_STEPS;
    case 'w': return GIVEN_WARMUP;
    case 'p': return GIVEN_PROMPT;
    case 'o': return GIVEN_OUTPUT;
    case 'C': return GIVEN_CHUNK;
    default: return 0;
    }
}

/* One option; returns 0, or -1 for a bad value. */
static int parse_option(int opt, char *arg, serve_options *o, const char **json)
{
    long seed;
    switch (opt) {
    case 'm': return cli_parse_modes(arg, o->modes, SERVE_MAX_LIST, &o->modes_count);
    case 's': return cli_parse_states(arg, o->states, &o->states_count);
    case 'd': o->device = arg; return 0;
    case 'b': return cli_parse_bytes(arg, &o->budget) != 0 || o->budget == 0 ? -1 : 0;
    case 'c': return parse_levels(arg, o);
    case 'n': return parse_int(arg, 1, 10000000, &o->steps);
    case 'w': return parse_int(arg, 0, 10000000, &o->warmup_steps);
    case 'k': return parse_int(arg, 0, 4096, &o->check);
    case 'L':
        o->check_layers = arg;
        return check_layers_syntax(arg);
    case 'T': return parse_int(arg, 1, 4096, &o->check_threads);
    case 'S':
        if (cli_parse_long(arg, 0, 0x7fffffffL, &seed) != 0)
            return -1;
        o->workload.seed = (uint64_t)seed;
        return 0;
    case 'r':
        if (!strcmp(arg, "auto")) {
            o->rate = 0;
            return 0;
        }
        return parse_double(arg, 1e-6, 1e6, &o->rate);
    case 'p': return parse_range(arg, 1, 1 << 20, &o->workload.prompt_min, &o->workload.prompt_max);
    case 'o': return parse_range(arg, 1, 1 << 20, &o->workload.output_min, &o->workload.output_max);
    case 'C': return parse_int(arg, 1, 1 << 20, &o->chunk);
    case 'a': return parse_double(arg, 0.0, 1.0, &o->workload.accept);
    case 'j': *json = arg; return 0;
    case 'q': o->quiet = 1; return 0;
    default: return -1;
    }
}

/* Parses argv into o, the config paths and the JSON file; returns
 * CLI_EXIT_OK, PARSED_HELP, or an exit code after printing the error. */
static int parse_arguments(int argc, char **argv, serve_options *o, const char **configs,
                           int *config_count, const char **json)
{
    static const struct option options[] = {
        {"modes", required_argument, NULL, 'm'},
        {"state", required_argument, NULL, 's'},
        {"device", required_argument, NULL, 'd'},
        {"state-budget", required_argument, NULL, 'b'},
        {"concurrency", required_argument, NULL, 'c'},
        {"steps", required_argument, NULL, 'n'},
        {"warmup-steps", required_argument, NULL, 'w'},
        {"check", required_argument, NULL, 'k'},
        {"check-layers", required_argument, NULL, 'L'},
        {"check-threads", required_argument, NULL, 'T'},
        {"seed", required_argument, NULL, 'S'},
        {"rate", required_argument, NULL, 'r'},
        {"prompt", required_argument, NULL, 'p'},
        {"output", required_argument, NULL, 'o'},
        {"chunk", required_argument, NULL, 'C'},
        {"accept", required_argument, NULL, 'a'},
        {"json", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    char shown[256];
    unsigned given = 0;
    set_defaults(o);
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (opt == 'h') {
            printf("usage: %s\n\n%s", usage_line, help_text);
            return PARSED_HELP;
        }
        if (opt == '?' || opt == ':')
            return cli_usage(usage_line, argv[optind - 1]);
        snprintf(shown, sizeof shown, "%s", optarg ? optarg : "");
        if (parse_option(opt, optarg, o, json) != 0)
            return cli_usage(usage_line, shown);
        given |= given_bit(opt);
    }
    if (runs_on_cpu(o->device))
        set_cpu_defaults(o, given);
    if (o->check > 0 && o->warmup_steps == 0)
        return cli_fail("serve: --check logs requests during the warm-up: give --warmup-steps "
                        "above 0, or --check 0");
    *config_count = argc - optind;
    if (*config_count < 1 || *config_count > MAX_CONFIGS)
        return cli_usage(usage_line, *config_count ? argv[optind + MAX_CONFIGS] : NULL);
    for (int i = 0; i < *config_count; i++)
        configs[i] = argv[optind + i];
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------- running */

/* The tables of one config, every state dtype: plans first, then the data
 * (sized for the largest pool), then each mode's run. *printed counts the
 * tables printed: all of them, or (interrupted) those with a mode that
 * started. */
static int run_config(const char *path, const serve_options *o, serve_table *tables,
                      int32_t *printed)
{
    *printed = 0;
    ssm_config *config = NULL;
    int exit_code = cli_load_config(path, &config, NULL); /* [workload]: checked, not used */
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    cli_device dev;
    uint8_t *mask = malloc((size_t)config->model.layers);
    int32_t checked = mask ? serve_check_layers(o->check_layers, config->model.layers, mask) : 0;
    free(mask);
    if (checked < 1) {
        int32_t layers = config->model.layers;
        ssm_config_free(config);
        return cli_fail("serve: --check-layers %s: %s has %d layers",
                        o->check_layers ? o->check_layers : "ends", path, layers);
    }
    exit_code = device_pick(o->device, config, &dev);
    char error[512];
    if (exit_code == CLI_EXIT_OK && device_open(&dev, error, sizeof error) != 0)
        exit_code = cli_fail("serve: %s", error);
    if (exit_code != CLI_EXIT_OK) {
        ssm_config_free(config);
        return exit_code;
    }
    const uint64_t budget = o->budget ? o->budget
                            : dev.where.type == SSM_DEVICE_CUDA ? 40ull << 30
                                                                : 1ull << 20;
    int64_t most = 0;
    for (int32_t d = 0; d < o->states_count; d++) {
        serve_table *t = &tables[d];
        t->config_path = path;
        t->model = config->model;
        t->state_dtype = o->states[d];
        t->act = config->activation_dtype;
        snprintf(t->device_name, sizeof t->device_name, "%s", dev.name);
        t->device = dev.where;
        t->budget = budget;
        t->history = fold_rule_option(config, "history", FOLD_RULE_DEFAULT_HISTORY);
        for (int32_t i = 0; i < o->modes_count; i++) {
            serve_mode_plan(config, o->modes[i], o->states[d], dev.where, budget, &t->modes[i]);
            most = t->modes[i].max_concurrent > most ? t->modes[i].max_concurrent : most;
        }
        t->modes_count = o->modes_count;
    }
    serve_data data;
    const int64_t pool = (most * (SERVE_DRAFTS + 1) > o->chunk ? most * (SERVE_DRAFTS + 1)
                                                                : o->chunk) + 1021;
    if (!o->quiet)
        fprintf(stderr, "serve: %s on %s: making the weights and %lld input tokens (Ctrl-C "
                        "stops the run and keeps what was measured)\n",
                path, dev.name, (long long)pool);
    if (serve_data_create(&dev, &config->model, config->activation_dtype, o->workload.seed, pool,
                          &data, error, sizeof error) != 0) {
        exit_code = cli_fail("serve: %s: %s", path, error);
    } else {
        for (int32_t d = 0; d < o->states_count && !serve_interrupted; d++) {
            serve_table *t = &tables[d];
            const serve_mode_result *native = serve_find_mode(t, "native");
            int32_t native_max = native ? native->max_concurrent : 0;
            for (int32_t i = 0; i < t->modes_count; i++)
                if (t->modes[i].max_concurrent > 0)
                    serve_mode_run(config, o, &dev, &data, t->state_dtype, native_max,
                                   &t->modes[i]);
            serve_report_print(t, o);
            fflush(stdout);
            (*printed)++;
        }
        serve_data_destroy(&dev, &data);
    }
    device_close(&dev);
    ssm_config_free(config);
    return exit_code;
}

/* The worst of the tables: a mode that could not run (2) over a failed
 * check or a flagged slot (1). */
static int tables_exit_code(const serve_table *tables, int32_t count)
{
    int code = CLI_EXIT_OK;
    for (int32_t i = 0; i < count; i++)
        for (int32_t m = 0; m < tables[i].modes_count; m++) {
            const serve_mode_result *r = &tables[i].modes[m];
            if (r->error[0])
                return CLI_EXIT_USAGE;
            if (r->status_flags || (r->check.ran && !r->check.pass))
                code = CLI_EXIT_CHECK_FAILED;
        }
    return code;
}

/* --json; CLI_EXIT_OK, or an exit code after printing why. */
static int write_json(const serve_table *tables, int32_t count, const serve_options *o,
                      const char *json_path)
{
    FILE *f = fopen(json_path, "w");
    if (!f)
        return cli_fail("serve: --json %s: cannot write: %s", json_path, strerror(errno));
    int status = serve_report_json(f, tables, count, o);
    if (fclose(f) != 0 || status != 0)
        return cli_fail("serve: --json %s: write failed", json_path);
    return CLI_EXIT_OK;
}

int cmd_serve(int argc, char **argv)
{
    serve_options o;
    const char *configs[MAX_CONFIGS], *json_path = NULL;
    int config_count = 0;
    int exit_code = parse_arguments(argc, argv, &o, configs, &config_count, &json_path);
    if (exit_code != CLI_EXIT_OK)
        return exit_code == PARSED_HELP ? CLI_EXIT_OK : exit_code;
    /* before the run, not after it: its results would be lost */
    if (json_path && (exit_code = cli_check_writable("--json", json_path)) != CLI_EXIT_OK)
        return exit_code;
    const int32_t count = config_count * o.states_count;
    serve_table *tables = calloc((size_t)count, sizeof *tables);
    if (!tables)
        return cli_fail("serve: out of memory");
    int32_t done = 0;
    serve_interrupted = 0;
    serve_catch_interrupt();
    for (int i = 0; i < config_count && exit_code == CLI_EXIT_OK && !serve_interrupted; i++) {
        int32_t printed = 0;
        exit_code = run_config(configs[i], &o, &tables[done], &printed);
        if (exit_code == CLI_EXIT_OK)
            done += printed;
    }
    serve_release_interrupt();
    if (done > 0 && json_path) {
        int written = write_json(tables, done, &o, json_path);
        if (exit_code == CLI_EXIT_OK)
            exit_code = written;
    }
    if (exit_code == CLI_EXIT_OK)
        exit_code = tables_exit_code(tables, done);
    if (serve_interrupted) {
        fprintf(stderr, "ssmstate: serve: interrupted (Ctrl-C): what was measured until then "
                        "is above%s\n",
                json_path ? ", in --json" : "");
        exit_code = SERVE_EXIT_INTERRUPTED;
    }
    free(tables);
    return exit_code;
}
