/* `ssmstate check CONFIG`: validates a config and prints what it resolves to
 * and what it costs, in its own mode and in every other mode found, so an
 * operator can compare modes before editing `mode =`. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssmstate/ssmstate.h"
#include "cli.h"

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

/* The plan of `config` in every other usable mode found on its plugin path.
 * A mode that cannot plan this config gets one line saying why. */
static int print_other_modes(const ssm_config *config)
{
    ssm_plugin_info *infos = NULL;
    int32_t count = 0;
    int exit_code = cli_list_plugins(config->plugin_dir, &infos, &count);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;

    int printed_header = 0;
    for (int32_t i = 0; i < count; i++) {
        const ssm_plugin_info *info = &infos[i];
        /* abi_version 0: a file on the path that is no plugin at all */
        if (info->abi_version == 0 || !strcmp(info->name, config->mode))
            continue;
        if (!printed_header) {
            printf("\nother modes (same config, only `mode` changed):\n");
            printf("  %-10s %-14s %s\n", "mode", "bytes/slot", "pool bytes");
            printed_header = 1;
        }
        if (info->status != SSM_OK) {
            printf("  %-10s unusable: %s\n", info->name, info->error);
            continue;
        }
        ssm_config other = *config; /* shallow: only the mode changes */
        other.mode = info->name;
        ssm_plan plan;
        char a[32], b[32];
        if (ssm_config_plan(&other, &plan) != SSM_OK) {
            printf("  %-10s no plan: %s\n", info->name, ssm_last_error());
            continue;
        }
        printf("  %-10s %-14s %s\n", info->name,
               cli_format_bytes(plan.bytes_per_slot, a, sizeof a),
               cli_format_bytes(plan.pool_bytes, b, sizeof b));
    }
    free(infos);
    return CLI_EXIT_OK;
}

static const char usage_line[] = "ssmstate check CONFIG";

int cmd_check(int argc, char **argv)
{
    static const struct option options[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;
    while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (opt != 'h')
            return cli_usage(usage_line, argv[optind - 1]);
        printf("usage: %s\n", usage_line);
        return CLI_EXIT_OK;
    }
    if (optind != argc - 1) /* no CONFIG, or a second one */
        return cli_usage(usage_line, optind < argc ? argv[optind + 1] : NULL);
    const char *path = argv[optind];

    ssm_config *config = NULL;
    if (ssm_config_load(path, &config) != SSM_OK)
        return cli_fail_library();
    ssm_plan plan;
    if (ssm_config_plan(config, &plan) != SSM_OK) {
        ssm_config_free(config);
        return cli_fail_library();
    }
    print_config(path, config);
    print_plan(&plan);
    int exit_code = print_other_modes(config);
    ssm_config_free(config);
    return exit_code;
}
