/* `ssmstate bench CONFIG... [options]`: times decode steps, MTP rounds and a
 * device-to-device copy on a CUDA device through the public API, for every
 * mode side by side, and prints what fraction of the copy's bandwidth each
 * reaches (docs/bench.md). Each CONFIG gives a model; the command overrides
 * its device, dtypes, mode, max_requests and max_draft_tokens. Exit 0 when
 * every measurement ran, 2 for bad usage or a failed measurement, and 77
 * (BENCH_EXIT_NO_GPU) on a build without CUDA or with no GPU visible. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h" /* the build's: HAVE_CUDA */

#include "bench.h"
#include "tools/cli.h"
#ifdef HAVE_CUDA
#include "bench_cuda.h"
#endif

enum { MAX_CONFIGS = 8 };

static const char usage_line[] =
    "ssmstate bench CONFIG... [--state f32,bf16] [--modes LIST] [--batches LIST] "
    "[--layers 1,chain] [--accepted LIST] [--samples N] [--warmup N] [--quick] "
    "[--json FILE] [--fla FILE] [--quiet]";

static const char help_text[] =
    "Times, on the CUDA device of each CONFIG (cuda:0 when it says cpu), per state dtype,\n"
    "layer count, batch size B and mode: one decode step of every layer, one MTP round\n"
    "(verify T = 4 tokens on every layer, commit a), and a device-to-device copy of the\n"
    "states (the ceiling). Prints median time, bytes that had to move, GB/s, % of the copy\n"
    "and speedup over native; docs/bench.md explains every column.\n"
    "\n"
    "  --state LIST     state dtypes (default f32,bf16)\n"
    "  --modes LIST     modes, or all (default native,compact,replay)\n"
    "  --batches LIST   batch sizes (default 1,8,32,64,128,256)\n"
    "  --layers LIST    layer counts; chain = the config's layers (default 1,chain)\n"
    "  --accepted LIST  accepted lengths of the MTP rounds, 1..4 (default 1,2,3,4)\n"
    "  --samples N      timing samples per measurement (default 30)\n"
    "  --warmup N       untimed launches before them (default 3)\n"
    "  --quick          smoke run: B 1,8, one layer, 5 samples, 1 warm-up\n"
    "  --json FILE      also write one JSON object per measurement to FILE\n"
    "  --fla FILE       fla's timings (bench/fla_bench.py) to compare one-layer decode with\n"
    "  --quiet          no progress lines on stderr\n"
    "\n"
    "exit status: 0 ok, 2 bad usage or a failed measurement, 77 no CUDA build or no GPU\n";

/* Which list options the command line set, so --quick fills only the rest. */
enum { SET_BATCHES = 1, SET_LAYERS = 2, SET_SAMPLES = 4, SET_WARMUP = 8 };

/* parse_arguments() after --help: nothing more to do. */
enum { PARSED_HELP = -1 };

/* Parses "N" in [min, max]; returns 0 or -1. */
static int parse_count(const char *text, int32_t min, int32_t max, int32_t *out)
{
    long value;
    if (cli_parse_long(text, min, max, &value) != 0)
        return -1;
    *out = (int32_t)value;
    return 0;
}

/* A list of counts in [min, max]; "chain" is BENCH_LAYERS_CHAIN when allowed. */
static int parse_counts(char *text, int32_t min, int32_t max, int allow_chain, int32_t *out,
                        int32_t *count)
{
    char *items[BENCH_MAX_LIST];
    int n = cli_split_list(text, items, BENCH_MAX_LIST);
    for (int i = 0; i < n; i++) {
        if (allow_chain && !strcmp(items[i], "chain"))
            out[i] = BENCH_LAYERS_CHAIN;
        else if (parse_count(items[i], min, max, &out[i]) != 0)
            return -1;
    }
    *count = n;
    return n > 0 ? 0 : -1;
}

static void set_defaults(bench_options *o)
{
    static const int32_t batches[] = {1, 8, 32, 64, 128, 256};
    memset(o, 0, sizeof *o);
    o->states[0] = SSM_DTYPE_F32;
    o->states[1] = SSM_DTYPE_BF16;
    o->states_count = 2;
    o->modes[0] = "native";
    o->modes[1] = "compact";
    o->modes[2] = "replay";
    o->modes_count = 3;
    memcpy(o->batches, batches, sizeof batches);
    o->batches_count = 6;
    o->layers[0] = 1;
    o->layers[1] = BENCH_LAYERS_CHAIN;
    o->layers_count = 2;
    for (int32_t a = 1; a <= BENCH_DRAFT_TOKENS + 1; a++)
        o->accepted[o->accepted_count++] = a;
    o->samples = 30;
    o->warmup = 3;
    o->min_sample_us = 1000.0;
}

static void apply_quick(bench_options *o, unsigned set)
{
    if (!(set & SET_BATCHES)) {
        o->batches[0] = 1;
        o->batches[1] = 8;
        o->batches_count = 2;
    }
    if (!(set & SET_LAYERS)) {
        o->layers[0] = 1;
        o->layers_count = 1;
    }
    if (!(set & SET_SAMPLES))
        o->samples = 5;
    if (!(set & SET_WARMUP))
        o->warmup = 1;
}

/* Parses argv into o and the config paths; returns CLI_EXIT_OK,
 * PARSED_HELP, or an exit code after printing the error. */
static int parse_arguments(int argc, char **argv, bench_options *o, const char **configs,
                           int *config_count, const char **json_path, const char **fla_path)
{
    static const struct option options[] = {
        {"state", required_argument, NULL, 's'},   {"modes", required_argument, NULL, 'm'},
        {"batches", required_argument, NULL, 'b'}, {"layers", required_argument, NULL, 'l'},
        {"accepted", required_argument, NULL, 'a'}, {"samples", required_argument, NULL, 'n'},
        {"warmup", required_argument, NULL, 'w'},  {"quick", no_argument, NULL, 'q'},
        {"json", required_argument, NULL, 'j'},    {"fla", required_argument, NULL, 'f'},
        {"quiet", no_argument, NULL, 'Q'},         {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    unsigned set = 0;
    int quick = 0, opt, bad = 0;
    char shown[256] = ""; /* the argument as given: list parsing splits optarg in place */
    set_defaults(o);
    while (!bad && (opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        snprintf(shown, sizeof shown, "%s", optarg ? optarg : "");
        switch (opt) {
        case 's': bad = cli_parse_states(optarg, o->states, &o->states_count); break;
        case 'm': bad = cli_parse_modes(optarg, o->modes, BENCH_MAX_LIST, &o->modes_count); break;
        case 'b':
            bad = parse_counts(optarg, 1, 65536, 0, o->batches, &o->batches_count);
            set |= SET_BATCHES;
            break;
        case 'l':
            bad = parse_counts(optarg, 1, 4096, 1, o->layers, &o->layers_count);
            set |= SET_LAYERS;
            break;
        case 'a':
            bad = parse_counts(optarg, 1, BENCH_DRAFT_TOKENS + 1, 0, o->accepted,
                               &o->accepted_count);
            break;
        case 'n': bad = parse_count(optarg, 1, 100000, &o->samples); set |= SET_SAMPLES; break;
        case 'w': bad = parse_count(optarg, 1, 100000, &o->warmup); set |= SET_WARMUP; break;
        case 'q': quick = 1; break;
        case 'j': *json_path = optarg; break;
        case 'f': *fla_path = optarg; break;
        case 'Q': o->quiet = 1; break;
        case 'h':
            printf("usage: %s\n\n%s", usage_line, help_text);
            return PARSED_HELP;
        default: return cli_usage(usage_line, argv[optind - 1]);
        }
    }
    if (bad)
        return cli_usage(usage_line, shown);
    if (quick)
        apply_quick(o, set);
    *config_count = argc - optind;
    if (*config_count < 1 || *config_count > MAX_CONFIGS)
        return cli_usage(usage_line, *config_count ? argv[optind + MAX_CONFIGS] : NULL);
    for (int i = 0; i < *config_count; i++)
        configs[i] = argv[optind + i];
    return CLI_EXIT_OK;
}

#ifdef HAVE_CUDA
/* The device each config runs on (cuda:0 when it says cpu) and its name.
 * Returns CLI_EXIT_OK, BENCH_EXIT_NO_GPU with the one line that says why, or
 * a usage error for a device index past the GPUs visible. */
static int find_devices(ssm_config *const *loaded, const char *const *configs, int count,
                        int32_t *devices, char (*names)[256])
{
    for (int i = 0; i < count; i++) {
        const ssm_config *c = loaded[i];
        int32_t visible = 0;
        char why[512];
        devices[i] = c->device.type == SSM_DEVICE_CUDA ? c->device.index : 0;
        /* The library's words for a missing GPU (ssm_device_check), as run's. */
        const ssm_device asked = {SSM_DEVICE_CUDA, devices[i]}, first = {SSM_DEVICE_CUDA, 0};
        if (ssm_device_check(&asked) != SSM_OK) {
            snprintf(why, sizeof why, "%s", ssm_last_error());
            if (ssm_device_check(&first) == SSM_OK) /* a GPU past those visible */
                return cli_fail("bench: %s: %s", configs[i], why);
            fprintf(stderr, "ssmstate: bench: %s; nothing measured\n", why);
            return BENCH_EXIT_NO_GPU;
        }
        if (bench_gpu_count(devices[i], &visible, names[i], sizeof names[i], why, sizeof why)) {
            fprintf(stderr, "ssmstate: bench: %s; nothing measured\n", why);
            return BENCH_EXIT_NO_GPU;
        }
    }
    return CLI_EXIT_OK;
}

/* Opens the optional files, runs every config, closes them; returns the
 * worst exit code. */
static int run_configs(ssm_config *const *loaded, const char *const *configs, int count,
                       const bench_options *o, const char *json_path, const char *fla_path)
{
    int32_t devices[MAX_CONFIGS];
    char names[MAX_CONFIGS][256], error[512];
    int exit_code = find_devices(loaded, configs, count, devices, names);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    bench_fla fla = {NULL, 0};
    if (fla_path && bench_fla_load(fla_path, &fla, error, sizeof error) != 0)
        return cli_fail("bench: --fla %s", error);
    FILE *json = NULL;
    if (json_path && !(json = fopen(json_path, "w"))) {
        bench_fla_free(&fla);
        return cli_fail("bench: --json %s: cannot write: %s", json_path, strerror(errno));
    }
    for (int i = 0; i < count; i++) {
        printf("ssmstate bench: %s on %s (cuda:%d): median of %d samples after %d warm-up "
               "launches, CUDA graphs\n", configs[i], names[i], devices[i], o->samples, o->warmup);
        int code = bench_run_model(loaded[i], configs[i], o, devices[i], names[i],
                                   fla_path ? &fla : NULL, json);
        if (code != CLI_EXIT_OK)
            exit_code = code;
    }
    if (json && fclose(json) != 0 && exit_code == CLI_EXIT_OK)
        exit_code = cli_fail("bench: --json %s: %s", json_path, strerror(errno));
    bench_fla_free(&fla);
    return exit_code;
}
#endif

int cmd_bench(int argc, char **argv)
{
    bench_options o;
    const char *configs[MAX_CONFIGS], *json_path = NULL, *fla_path = NULL;
    int config_count = 0;
    int exit_code = parse_arguments(argc, argv, &o, configs, &config_count, &json_path,
                                    &fla_path);
    if (exit_code != CLI_EXIT_OK)
        return exit_code == PARSED_HELP ? CLI_EXIT_OK : exit_code;

    ssm_config *loaded[MAX_CONFIGS] = {NULL};
    for (int i = 0; i < config_count && exit_code == CLI_EXIT_OK; i++)
        exit_code = cli_load_config(configs[i], &loaded[i], NULL);
#ifndef HAVE_CUDA
    if (exit_code == CLI_EXIT_OK) {
        const ssm_device gpu = {SSM_DEVICE_CUDA, loaded[0]->device.type == SSM_DEVICE_CUDA
                                                     ? loaded[0]->device.index
                                                     : 0};
        ssm_device_check(&gpu); /* the library's words, as run's and serve's */
        fprintf(stderr, "ssmstate: bench: %s; nothing measured\n", ssm_last_error());
        exit_code = BENCH_EXIT_NO_GPU;
    }
#else
    if (exit_code == CLI_EXIT_OK)
        exit_code = run_configs(loaded, configs, config_count, &o, json_path, fla_path);
#endif
    for (int i = 0; i < config_count; i++)
        ssm_config_free(loaded[i]);
    return exit_code;
}
