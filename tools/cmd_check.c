/* `ssmstate check CONFIG [--pool-bytes N]`: validates a config and prints
 * what it resolves to and what it costs, in its own mode and in every other
 * mode found (and how many slots each fits in a pool of N bytes), so an
 * operator can compare modes before editing `mode =`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssmstate/ssmstate.h"
#include "cli.h"
#include "fold_rule.h"

static void print_config(const char *path, const ssm_config *c)
{
    const ssm_model_dims *m = &c->model;
    printf("config      %s\n", path);
    printf("model       %s, %d layers, H=%d HV=%d K=%d V=%d W=%d D=%lld, lower bound ",
           ssm_model_kind_name(m->kind), m->layers, m->heads, m->value_heads, m->key_dim,
           m->value_dim, m->conv_width, (long long)ssm_conv_channels(m));
    if (m->kind == SSM_MODEL_KDA && m->has_lower_bound)
        printf("%g\n", m->lower_bound);
    else
        printf("none\n");
    printf("state       mode %s, state %s, activations %s, device %s", c->mode,
           ssm_dtype_name(c->state_dtype), ssm_dtype_name(c->activation_dtype),
           c->device.type == SSM_DEVICE_CUDA ? "cuda" : "cpu");
    if (c->device.type == SSM_DEVICE_CUDA)
        printf(":%d", c->device.index);
    printf(", max_requests %d, max_draft_tokens %d\n", c->max_requests, c->max_draft_tokens);
}

/* A replay config's history and output form, as the plugin resolves them
 * (plugins/replay/replay.c): without [replay] outputs, identity on a CUDA
 * device over an f32 state and exact elsewhere (docs/modes.md). */
static void print_replay(const ssm_config *c)
{
    if (strcmp(c->mode, "replay") != 0)
        return;
    const char *history = fold_rule_option_text(c, "history");
    const char *outputs = fold_rule_option_text(c, "outputs");
    if (history)
        printf("replay      history %s, outputs ", history);
    else
        printf("replay      history %d (the default), outputs ", FOLD_RULE_DEFAULT_HISTORY);
    if (outputs)
        printf("%s\n", outputs);
    else if (c->device.type != SSM_DEVICE_CUDA)
        printf("exact (the default on the cpu)\n");
    else if (c->state_dtype == SSM_DTYPE_F32)
        printf("identity (the default on cuda over an f32 state; exact where the device "
               "cannot stage the history for it)\n");
    else
        printf("exact (the default over a %s state)\n", ssm_dtype_name(c->state_dtype));
}

static void print_plan(const ssm_plan *p)
{
    char a[32], b[32], d[32], e[32];
    printf("per slot    %llu bytes (%s): state %s, conv %s, scratch %s\n",
           (unsigned long long)p->bytes_per_slot, cli_format_bytes(p->bytes_per_slot, a, sizeof a),
           cli_format_bytes(p->state_bytes_per_slot, b, sizeof b),
           cli_format_bytes(p->conv_bytes_per_slot, d, sizeof d),
           cli_format_bytes(p->scratch_bytes_per_slot, e, sizeof e));
    printf("shared      %llu bytes (%s)\n", (unsigned long long)p->shared_bytes,
           cli_format_bytes(p->shared_bytes, a, sizeof a));
    printf("pool        %llu bytes (%s) for a capacity of %d slots\n",
           (unsigned long long)p->pool_bytes, cli_format_bytes(p->pool_bytes, a, sizeof a),
           p->capacity);
}

/* One usable mode's plan, split as the table prints it. */
typedef struct mode_cost {
    uint64_t per_slot, state, conv, history, shared, pool;
} mode_cost;

/* "state" is one matrix state per layer, the least any mode keeps; what a
 * mode keeps beyond that and the conv buffer is its history: native's other
 * snapshots and snapshot index, compact's records, replay's ring and cursor. */
static mode_cost cost_of(const ssm_config *c, const ssm_plan *p)
{
    uint64_t one_state = (uint64_t)c->model.layers * (uint64_t)c->model.value_heads *
                         (uint64_t)c->model.value_dim * (uint64_t)c->model.key_dim *
                         ssm_dtype_size(c->state_dtype);
    mode_cost m;
    m.per_slot = p->bytes_per_slot;
    m.state = p->state_bytes_per_slot < one_state ? p->state_bytes_per_slot : one_state;
    m.conv = p->conv_bytes_per_slot;
    m.history = p->bytes_per_slot - m.state - m.conv;
    m.shared = p->shared_bytes;
    m.pool = p->pool_bytes;
    return m;
}

/* `c` is the config with this row's mode. */
static void print_mode_row(const ssm_config *c, const char *name, const mode_cost *m,
                           const mode_cost *native, uint64_t pool_bytes, const char *marked_mode)
{
    char a[32], b[32], d[32], e[32], f[32], marked[80], ratio[16] = "-";
    snprintf(marked, sizeof marked, "%.64s%s", name, strcmp(name, marked_mode) ? "" : "*");
    if (native)
        snprintf(ratio, sizeof ratio, "%.1f%%", 100.0 * (double)m->per_slot /
                                                    (double)native->per_slot);
    printf("  %-10s %-12s %-12s %-12s %-12s %-10s ", marked,
           cli_format_bytes(m->per_slot, a, sizeof a), cli_format_bytes(m->state, b, sizeof b),
           cli_format_bytes(m->conv, d, sizeof d), cli_format_bytes(m->history, e, sizeof e),
           ratio);
    cli_format_bytes(m->pool, f, sizeof f);
    int64_t slots = 0;
    if (!pool_bytes)
        printf("%s\n", f);
    else if (cli_slots_in_budget(c, pool_bytes, &slots) == 0)
        printf("%-16s%lld\n", f, (long long)slots);
    else
        printf("%-16s(no plan: %s)\n", f, ssm_last_error());
}

/* The plan of `config` in every usable mode found on its plugin path (its own
 * mode marked *), and each mode's capacity in pool_bytes (0: not asked). A
 * mode that cannot plan this config gets one line saying why. */
static int print_modes(const ssm_config *config, uint64_t pool_bytes)
{
    ssm_plugin_info *infos = NULL;
    int32_t count = 0;
    int exit_code = cli_list_plugins(config->plugin_dir, &infos, &count);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    cli_sort_plugins(infos, count);

    char a[32], pool[32], capacity[48] = "";
    snprintf(pool, sizeof pool, "pool (%d slots)", config->max_requests);
    if (pool_bytes)
        snprintf(capacity, sizeof capacity, "  slots in %s",
                 cli_format_bytes(pool_bytes, a, sizeof a));
    printf("\nper mode (same config, only `mode` changed; * marks this config's mode):\n");
    printf("  %-10s %-12s %-12s %-12s %-12s %-10s %-14s%s\n", "mode", "bytes/slot", "state",
           "conv", "history", "of native", pool, capacity);
    mode_cost native;
    int have_native = 0;
    for (int32_t i = 0; i < count; i++) {
        const ssm_plugin_info *info = &infos[i];
        if (info->abi_version == 0) /* a file on the path that is no plugin at all */
            continue;
        if (info->status != SSM_OK) {
            printf("  %-10s unusable: %s\n", info->name, info->error);
            continue;
        }
        ssm_config other = *config; /* shallow: only the mode changes */
        other.mode = info->name;
        ssm_plan plan;
        if (ssm_config_plan(&other, &plan) != SSM_OK) {
            printf("  %-10s no plan: %s\n", info->name, ssm_last_error());
            continue;
        }
        mode_cost cost = cost_of(config, &plan);
        if (!strcmp(info->name, "native")) {
            native = cost;
            have_native = 1;
        }
        print_mode_row(&other, info->name, &cost, have_native ? &native : NULL, pool_bytes,
                       config->mode);
    }
    printf("  (state: one matrix state per layer, the least any mode keeps; history: the rest "
           "beyond the conv buffer:\n   native's other snapshots, compact's records, replay's "
           "ring and cursors");
    if (pool_bytes)
        printf(";\n   slots: the most whose pool, slots x bytes per slot + shared bytes, fits");
    printf(")\n");
    free(infos);
    return CLI_EXIT_OK;
}

static const char usage_line[] = "ssmstate check CONFIG [--pool-bytes N[K|M|G|T]]";

int cmd_check(int argc, char **argv)
{
    static const struct option options[] = {
        {"pool-bytes", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    uint64_t pool_bytes = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, "p:h", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if (cli_parse_bytes(optarg, &pool_bytes) != 0 || pool_bytes == 0)
                return cli_fail("--pool-bytes: '%s' is not a size (bytes, or a number with "
                                "K, M, G or T: powers of 1024, e.g. 40G)",
                                optarg);
            break;
        case 'h': printf("usage: %s\n", usage_line); return CLI_EXIT_OK;
        default: return cli_usage(usage_line, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) /* no CONFIG, or a second one */
        return cli_usage(usage_line, optind < argc ? argv[optind + 1] : NULL);
    const char *path = argv[optind];

    ssm_config *config = NULL;
    int exit_code = cli_load_config(path, &config, NULL); /* [workload] too */
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    ssm_plan plan;
    if (ssm_config_plan(config, &plan) != SSM_OK) {
        ssm_config_free(config);
        return cli_fail_library();
    }
    print_config(path, config);
    print_replay(config);
    print_plan(&plan);
    exit_code = print_modes(config, pool_bytes);
    ssm_config_free(config);
    return exit_code;
}
