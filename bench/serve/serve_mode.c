/* One mode of `ssmstate serve` (see serve_mode.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"
#include "tools/fold_rule.h"
#include "serve_check.h"
#include "serve_mode.h"
#include "serve_stream.h"

ssm_config serve_mode_config(const ssm_config *base, const char *mode, ssm_dtype state,
                             ssm_device device, int32_t slots)
{
    ssm_config c = *base;
    c.mode = mode;
    c.state_dtype = state;
    c.device = device;
    c.max_requests = slots;
    c.max_draft_tokens = SERVE_DRAFTS;
    return c;
}

void serve_mode_plan(const ssm_config *base, const char *mode, ssm_dtype state, ssm_device device,
                     uint64_t budget, serve_mode_result *m)
{
    char bytes[32], pool[32], shared[32];
    memset(m, 0, sizeof *m);
    snprintf(m->mode, sizeof m->mode, "%s", mode);
    ssm_config c = serve_mode_config(base, mode, state, device, 1);
    if (ssm_config_plan(&c, &m->plan) != SSM_OK) {
        snprintf(m->error, sizeof m->error, "no plan: %s", ssm_last_error());
        return;
    }
    int64_t fits = 0;
    if (cli_slots_in_budget(&c, budget, &fits) != 0) {
        snprintf(m->error, sizeof m->error, "no plan: %s", ssm_last_error());
        return;
    }
    m->budget_holds = fits;
    m->max_concurrent = fits > SERVE_MAX_SLOTS ? SERVE_MAX_SLOTS : (int32_t)fits;
    if (m->max_concurrent == 0)
        snprintf(m->error, sizeof m->error,
                 "the state budget (%s) holds no request of %s after the mode's shared %s "
                 "(raise --state-budget)",
                 cli_format_bytes(budget, pool, sizeof pool),
                 cli_format_bytes(m->plan.bytes_per_slot, bytes, sizeof bytes),
                 cli_format_bytes(m->plan.shared_bytes, shared, sizeof shared));
}

/* qsort order of levels. */
static int compare_levels(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int32_t serve_mode_levels(const serve_options *o, int32_t max, int32_t native_max,
                          int32_t *levels)
{
    int32_t n = 0;
    if (o->concurrency_count > 0) {
        for (int32_t i = 0; i < o->concurrency_count; i++)
            if (o->concurrency[i] < max)
                levels[n++] = o->concurrency[i];
    } else {
        for (int64_t c = 1; c < max && n < SERVE_MAX_POINTS - 2; c *= 2)
            levels[n++] = (int32_t)c;
    }
    if (native_max > 0 && native_max < max)
        levels[n++] = native_max;
    levels[n++] = max;
    qsort(levels, (size_t)n, sizeof *levels, compare_levels);
    int32_t distinct = 0;
    for (int32_t i = 0; i < n; i++)
        if (distinct == 0 || levels[i] != levels[distinct - 1])
            levels[distinct++] = levels[i];
    return distinct;
}

/* What the check compares with and how strictly (docs/numerics.md): on the
 * GPU the CPU in the same mode, within the CPU-vs-CUDA bound; on the CPU a
 * native context, bit for bit where modes are bit-identical to native (replay
 * without [replay] outputs runs exact there), else within the bound for one
 * device. */
static const char *check_setup(const ssm_config *base, const cli_device *dev,
                               const char *mode, serve_check_result *r)
{
    const int builtin =
        !strcmp(mode, "native") || !strcmp(mode, "compact") || !strcmp(mode, "replay");
    const char *outputs = fold_rule_option_text(base, "outputs");
    const int exact = strcmp(mode, "replay") != 0 || !outputs || !strcmp(outputs, "exact");
    const char *against = dev->where.type == SSM_DEVICE_CPU ? "native" : mode;
    snprintf(r->against, sizeof r->against, "cpu %s", against);
    r->outputs_bitwise = dev->where.type == SSM_DEVICE_CPU && builtin && exact;
    r->states_bitwise = dev->where.type == SSM_DEVICE_CPU && builtin;
    r->relation = bound_relation_of(dev->where.type, base->prefill_precision);
    return against;
}

/* A level's result on stderr, unless --quiet. */
static void progress_line(const serve_options *o, const ssm_config *c, const serve_point *p)
{
    if (o->quiet)
        return;
    fprintf(stderr, "serve: %s %s %s: concurrency %d: %.1f tokens/s, step p50 %.3g ms (%lld "
                    "warm-up + %lld steps)\n",
            ssm_model_kind_name(c->model.kind), ssm_dtype_name(c->state_dtype), c->mode,
            p->concurrency, p->tokens_per_second, p->p50_ms, (long long)p->warmup_steps,
            (long long)p->steps);
}

/* The levels, then the check of the largest. */
static void sweep(serve_engine *e, const ssm_config *c, const serve_options *o,
                  const serve_data *data, int32_t native_max, serve_mode_result *m)
{
    int32_t levels[SERVE_MAX_POINTS];
    int32_t count = serve_mode_levels(o, m->max_concurrent, native_max, levels);
    serve_log **logs = o->check > 0 ? calloc((size_t)o->check, sizeof *logs) : NULL;
    if (o->check > 0 && !logs) {
        snprintf(m->error, sizeof m->error, "out of memory");
        return;
    }
    for (int32_t i = 0; i < count && !m->error[0]; i++) {
        serve_point *p = &m->points[m->points_count];
        const int checked = i == count - 1 ? o->check : 0;
        memset(p, 0, sizeof *p);
        p->rate = o->rate > 0 ? o->rate : serve_auto_rate(o, levels[i]);
        int status = serve_engine_level(e, levels[i], checked, logs, p, m->error, sizeof m->error);
        if (status < 0 || (status > 0 && p->steps == 0))
            break;
        m->points_count++; /* an interrupted level keeps the steps it measured */
        progress_line(o, c, p);
        if (status > 0)
            break;
    }
    if (!m->error[0] && o->check > 0) {
        const char *against = check_setup(c, e->dev, m->mode, &m->check);
        if (!o->quiet)
            fprintf(stderr, "serve: %s %s %s: checking %d requests against %s\n",
                    ssm_model_kind_name(c->model.kind), ssm_dtype_name(c->state_dtype), m->mode,
                    o->check, m->check.against);
        serve_check_run(c, against, c->state_dtype, data, logs, o->check, o->check_threads,
                        &m->check);
    }
    for (int32_t i = 0; logs && i < o->check; i++)
        serve_log_destroy(logs[i]);
    free(logs);
}

void serve_mode_run(const ssm_config *base, const serve_options *o, const cli_device *dev,
                    const serve_data *data, ssm_dtype state, int32_t native_max,
                    serve_mode_result *m)
{
    if (serve_interrupted) {
        snprintf(m->error, sizeof m->error, "not run: interrupted (Ctrl-C)");
        return;
    }
    ssm_config c = serve_mode_config(base, m->mode, state, dev->where, m->max_concurrent);
    ssm_ctx *ctx = NULL;
    if (ssm_ctx_create(&c, &ctx) != SSM_OK) {
        snprintf(m->error, sizeof m->error, "ssm_ctx_create: %s", ssm_last_error());
        return;
    }
    const int32_t history =
        !strcmp(m->mode, "replay") ? fold_rule_option(base, "history", FOLD_RULE_DEFAULT_HISTORY)
                                   : 0;
    serve_engine e;
    uint8_t *checked = malloc((size_t)data->model.layers);
    if (!checked)
        snprintf(m->error, sizeof m->error, "out of memory");
    else if (serve_check_layers(o->check_layers, data->model.layers, checked) < 1)
        snprintf(m->error, sizeof m->error, "--check-layers: '%s' names no layer of the model",
                 o->check_layers);
    else if (serve_engine_create(&e, ctx, m->max_concurrent, history, dev, data, o, m->error,
                                 sizeof m->error) == 0) {
        e.check_layers = checked;
        sweep(&e, ssm_ctx_config(ctx), o, data, native_max, m);
        ssm_ctx_report report;
        if (ssm_ctx_status(ctx, &report) == SSM_OK)
            m->status_flags = report.flags;
        else if (!m->error[0])
            snprintf(m->error, sizeof m->error, "ssm_ctx_status: %s", ssm_last_error());
        serve_engine_destroy(&e);
    }
    free(checked);
    char ignored[256];
    device_sync(dev, ignored, sizeof ignored);
    ssm_ctx_destroy(ctx);
}
