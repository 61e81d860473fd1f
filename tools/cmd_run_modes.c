/* `ssmstate run CONFIG --modes LIST`: the same seeded session once per mode,
 * side by side. Each mode gets its own context from the config with only
 * `mode` replaced (mode sections such as [replay] apply to their mode); the
 * sessions run in lockstep, one forward each in turn, native first, and every
 * other mode's output blocks and final states are compared with native's as
 * they come (tools/compare.h). Exit 0 only when every mode passes its
 * reference check and stands in its relation to native (docs/numerics.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssmstate/ssmstate.h"
#include "cli.h"
#include "compare.h"
#include "fold_rule.h"
#include "modes_report.h"
#include "progress.h"
#include "session.h"

enum { MAX_MODES = 16 };

/* Everything one mode's run owns. */
typedef struct mode_run {
    modes_report_mode *report; /* name, relation, plan, summary, difference, folds */
    ssm_ctx *ctx;
    session *session;
    session_observer observer;
    compare_baseline *baseline; /* shared by every run; kept into by the first */
    int32_t layers;
    int32_t *since_checkpoint;  /* replay only: [requests][layers] */
    int32_t fold_rows;          /* replay only: [replay] fold_rows */
} mode_run;

/* ------------------------------------------------------------- observers */

static void keep_output(void *user, const session_block *block)
{
    mode_run *run = user;
    compare_keep_output(run->baseline, block);
}

static void keep_final_state(void *user, int32_t request, int32_t layer, const void *window,
                             const void *state)
{
    mode_run *run = user;
    compare_keep_final_state(run->baseline, request, layer, window, state);
}

static void compare_block(void *user, const session_block *block)
{
    mode_run *run = user;
    compare_output(run->baseline, &run->report->difference, block);
    if (run->since_checkpoint)
        run->report->folds += fold_rule_step(
            &run->since_checkpoint[(int64_t)block->request * run->layers + block->layer], block,
            run->report->history, run->fold_rows);
}

static void compare_state(void *user, int32_t request, int32_t layer, const void *window,
                          const void *state)
{
    mode_run *run = user;
    compare_final_state(run->baseline, &run->report->difference, request, layer, window, state);
}

/* ------------------------------------------------------------- the mode list */

static int usable(const ssm_plugin_info *info)
{
    return info->abi_version != 0 && info->status == SSM_OK;
}

static const ssm_plugin_info *find_plugin(const ssm_plugin_info *infos, int32_t count,
                                          const char *name)
{
    for (int32_t i = 0; i < count; i++)
        if (infos[i].abi_version != 0 && !strcmp(infos[i].name, name))
            return &infos[i];
    return NULL;
}

static int add_mode(mode_run *runs, int *count, const char *name)
{
    for (int i = 0; i < *count; i++)
        if (!strcmp(runs[i].report->name, name))
            return cli_fail("--modes: '%s' is listed twice", name);
    if (*count == MAX_MODES)
        return cli_fail("--modes: at most %d modes at once", MAX_MODES);
    snprintf(runs[*count].report->name, sizeof runs[*count].report->name, "%s", name);
    (*count)++;
    return CLI_EXIT_OK;
}

/* "all": every usable plugin found, in the sorted order. */
static int list_all(const ssm_plugin_info *infos, int32_t found, mode_run *runs, int *count)
{
    for (int32_t i = 0; i < found; i++)
        if (usable(&infos[i]) && add_mode(runs, count, infos[i].name) != CLI_EXIT_OK)
            return CLI_EXIT_USAGE;
    return CLI_EXIT_OK;
}

static void names_found(const ssm_plugin_info *infos, int32_t found, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int32_t i = 0; i < found; i++)
        if (usable(&infos[i]))
            used += snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? ", " : "",
                             infos[i].name);
    if (!used)
        snprintf(buf, len, "none");
}

/* Native first (the baseline, added when not listed), then the list in its
 * order. Fills each run's report name and relation. */
static int parse_modes(const char *list, const ssm_config *config, mode_run *runs, int *count)
{
    ssm_plugin_info *infos = NULL;
    int32_t found = 0;
    int exit_code = cli_list_plugins(config->plugin_dir, &infos, &found);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    cli_sort_plugins(infos, found); /* native, compact, replay, then the others */
    *count = 0;
    const ssm_plugin_info *native = find_plugin(infos, found, "native");
    const int all = !strcmp(list, "all");
    char known[512];
    names_found(infos, found, known, sizeof known);
    if (!native || !usable(native))
        exit_code = cli_fail("--modes: the native mode, the baseline, is %s",
                             native ? native->error : "not found on the plugin path");
    else if (all)
        exit_code = list_all(infos, found, runs, count);
    else
        exit_code = add_mode(runs, count, "native");

    char *copy = all ? NULL : strdup(list);
    if (!all && !copy && exit_code == CLI_EXIT_OK)
        exit_code = cli_fail("out of memory");
    char *rest = copy, *name;
    int native_listed = 0;
    while (exit_code == CLI_EXIT_OK && (name = strsep(&rest, ",")) != NULL) {
        const ssm_plugin_info *info = find_plugin(infos, found, name);
        if (!name[0])
            exit_code = cli_fail("--modes: empty mode name in '%s'", list);
        else if (!info)
            exit_code = cli_fail("--modes: unknown mode '%s' (modes found: %s)", name, known);
        else if (!usable(info))
            exit_code = cli_fail("--modes: mode '%s' cannot be used: %s", name, info->error);
        else if (strcmp(name, "native") != 0)
            exit_code = add_mode(runs, count, name);
        else if (native_listed++)
            exit_code = cli_fail("--modes: 'native' is listed twice");
    }
    free(copy);
    free(infos);
    for (int i = 0; i < *count; i++) {
        const char *name = runs[i].report->name;
        runs[i].report->relation = i == 0                   ? MODES_BASELINE
                                  : !strcmp(name, "compact") ? MODES_BITWISE
                                  : !strcmp(name, "replay")  ? MODES_REPLAY
                                                             : MODES_WITHIN_BOUND;
    }
    return exit_code;
}

/* ------------------------------------------------------------- the runs */

static int create_contexts(const ssm_config *config, mode_run *runs, int count)
{
    for (int i = 0; i < count; i++) {
        ssm_config mode_config = *config; /* shallow: only the mode changes */
        mode_config.mode = runs[i].report->name;
        if (ssm_ctx_create(&mode_config, &runs[i].ctx) != SSM_OK ||
            ssm_ctx_plan(runs[i].ctx, &runs[i].report->plan) != SSM_OK)
            return cli_fail("mode %s: %s", runs[i].report->name, ssm_last_error());
        snprintf(runs[i].report->plugin_path, sizeof runs[i].report->plugin_path, "%s",
                 ssm_ctx_plugin_path(runs[i].ctx));
    }
    return CLI_EXIT_OK;
}

static int open_sessions(const ssm_config *config, const workload *w,
                         compare_baseline *baseline, mode_run *runs, int count)
{
    for (int i = 0; i < count; i++) {
        mode_run *run = &runs[i];
        run->baseline = baseline;
        run->layers = config->model.layers;
        compare_difference_init(&run->report->difference);
        if (run->report->relation == MODES_REPLAY) {
            run->report->history = fold_rule_option(config, "history", FOLD_RULE_DEFAULT_HISTORY);
            run->fold_rows = fold_rule_option(config, "fold_rows", FOLD_RULE_DEFAULT_FOLD_ROWS);
            run->since_checkpoint = calloc((size_t)w->requests *
                                               (size_t)config->model.layers,
                                           sizeof(int32_t));
            if (!run->since_checkpoint)
                return cli_fail("out of memory");
        }
        run->observer = i == 0 ? (session_observer){run, keep_output, keep_final_state}
                               : (session_observer){run, compare_block, compare_state};
        session_options opt = {.workload = w, .observer = &run->observer};
        int exit_code = session_open(run->ctx, &opt, &run->report->summary, &run->session);
        if (exit_code != CLI_EXIT_OK)
            return exit_code;
    }
    return CLI_EXIT_OK;
}

/* Forward by forward, the baseline first, until the baseline's last request
 * finished; the others made the same forwards. */
static int run_lockstep(int show_progress, compare_baseline *baseline, mode_run *runs,
                        int count)
{
    int exit_code = CLI_EXIT_OK;
    const int32_t requests = runs[0].report->summary.requests;
    progress bar;
    progress_begin(&bar, show_progress, requests, "requests");
    while (exit_code == CLI_EXIT_OK && session_finished(runs[0].session) < requests) {
        for (int i = 0; exit_code == CLI_EXIT_OK && i < count; i++)
            exit_code = session_forward(runs[i].session);
        if (exit_code == CLI_EXIT_OK && !compare_baseline_ok(baseline))
            exit_code = cli_fail("out of memory keeping native's outputs of one forward");
        compare_next_forward(baseline);
        progress_update(&bar, session_finished(runs[0].session));
    }
    progress_end(&bar);
    return exit_code;
}

static int close_sessions(mode_run *runs, int count, int exit_code)
{
    for (int i = 0; i < count; i++) {
        if (runs[i].session)
            exit_code = session_close(runs[i].session, exit_code);
        runs[i].session = NULL;
    }
    return exit_code;
}

static void free_runs(mode_run *runs, int count)
{
    for (int i = 0; i < count; i++) {
        free(runs[i].since_checkpoint);
        ssm_ctx_destroy(runs[i].ctx);
    }
}

int cmd_run_modes(const char *config_path, const char *modes, int show_progress,
                  const ssm_device *device)
{
    ssm_config *config = NULL;
    workload work;
    int exit_code = cli_load_config(config_path, &config, &work);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    if (device)
        config->device = *device;
    modes_report_mode reports[MAX_MODES];
    mode_run runs[MAX_MODES];
    memset(reports, 0, sizeof reports);
    memset(runs, 0, sizeof runs);
    for (int i = 0; i < MAX_MODES; i++)
        runs[i].report = &reports[i];
    int count = 0;
    compare_baseline *baseline = NULL;
    exit_code = parse_modes(modes, config, runs, &count);
    if (exit_code == CLI_EXIT_OK)
        exit_code = create_contexts(config, runs, count);
    if (exit_code == CLI_EXIT_OK &&
        compare_baseline_create(&config->model, config->state_dtype, config->activation_dtype,
                                BOUND_ONE_DEVICE, &baseline) != 0)
        exit_code = cli_fail("out of memory");
    if (exit_code == CLI_EXIT_OK)
        exit_code = open_sessions(config, &work, baseline, runs, count);
    if (exit_code == CLI_EXIT_OK)
        exit_code = run_lockstep(show_progress, baseline, runs, count);
    exit_code = close_sessions(runs, count, exit_code);
    for (int i = 0; exit_code == CLI_EXIT_OK && i < count; i++)
        compare_outputs_finish(baseline, &reports[i].difference); /* one tensor: the session */
    if (exit_code == CLI_EXIT_OK)
        exit_code = modes_report_print(config, reports, count) ? CLI_EXIT_OK
                                                               : CLI_EXIT_CHECK_FAILED;
    compare_baseline_destroy(baseline);
    free_runs(runs, count);
    ssm_config_free(config);
    return exit_code;
}
