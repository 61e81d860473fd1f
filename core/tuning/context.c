/* Tuning and the context (core/tuning/tuning.h, docs/tuning.md): a pass at creation
 * and at ssm_tune, never in a step; the cache file loaded, updated and, when
 * the pass changed it, merged into the file as it is then and saved around
 * it; the choices installed in the plugin and the update layouts
 * kept for the verifies' tickets. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/context.h"
#include "core/tuning/tuning.h"

/* ------------------------------------------------------------ test hook */

static const ssm_tune_runner *hook_runner;
static char hook_device[96];

void ssm_tuning_test_hook(const ssm_tune_runner *runner, const char *device)
{
    hook_runner = runner;
    snprintf(hook_device, sizeof hook_device, "%s", device ? device : "test");
}

/* ---------------------------------------------- the plugin as a runner */

static ssm_status plugin_space(void *user, const ssm_tune_family_v1 **families, int32_t *count)
{
    ssm_ctx *ctx = user;
    *families = NULL;
    *count = 0;
    if (!ctx->mode->tune_space)
        return SSM_OK; /* the mode is not tuned */
    return ctx->mode->tune_space(ctx->instance, families, count);
}

static ssm_status plugin_begin(void *user, int32_t max_rows, void *stream)
{
    ssm_ctx *ctx = user;
    if (!ctx->mode->tune_begin || !ctx->mode->tune_run || !ctx->mode->tune_end)
        return ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' lists families but cannot time them",
                             ctx->mode->name);
    return ctx->mode->tune_begin(ctx->instance, max_rows, stream);
}

static ssm_status plugin_run(void *user, ssm_tune_trial_v1 *trial)
{
    ssm_ctx *ctx = user;
    return ctx->mode->tune_run(ctx->instance, trial);
}

static void plugin_end(void *user)
{
    ssm_ctx *ctx = user;
    ctx->mode->tune_end(ctx->instance);
}

static ssm_status plugin_apply(void *user, const ssm_tune_choice_v1 *choices, int32_t count)
{
    ssm_ctx *ctx = user;
    if (!ctx->mode->tune_apply)
        return count == 0 ? SSM_OK
                          : ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' cannot apply choices",
                                          ctx->mode->name);
    return ctx->mode->tune_apply(ctx->instance, choices, count);
}

/* ---------------------------------------------------------------- passes */

static void base_key(const ssm_ctx *ctx, tuning_key *key)
{
    const ssm_config *c = ctx->config;
    memset(key, 0, sizeof *key);
    if (hook_runner)
        snprintf(key->device, sizeof key->device, "%s", hook_device);
    else
        ssm_tuning_device_key(&c->device, key);
    snprintf(key->library, sizeof key->library, "%d.%d.%d", SSMSTATE_VERSION_MAJOR,
             SSMSTATE_VERSION_MINOR, SSMSTATE_VERSION_PATCH);
    key->kind = c->model.kind;
    key->layers = c->model.layers;
    key->heads = c->model.heads;
    key->value_heads = c->model.value_heads;
    key->key_dim = c->model.key_dim;
    key->value_dim = c->model.value_dim;
    key->conv_width = c->model.conv_width;
    key->has_lower_bound = c->model.has_lower_bound;
    key->lower_bound = c->model.has_lower_bound ? c->model.lower_bound : 0.0f;
    key->max_tokens = ctx->params.max_tokens;
    key->state_dtype = c->state_dtype;
    key->activation_dtype = c->activation_dtype;
    snprintf(key->mode, sizeof key->mode, "%s", ctx->mode->name);
}

/* mode = tune saves next to the cache: the directory must take a new file. */
static ssm_status check_writable(const ssm_config *c)
{
    const char *path = c->tuning.cache;
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (access(dir, W_OK | X_OK) == 0)
        return SSM_OK;
    char where[512];
    ssm_config_where(c, 0, where, sizeof where);
    return ssm_error_set(SSM_ERR_CONFIG,
                         "%s[tuning] cache = '%s': mode = tune cannot write the cache: directory "
                         "'%s': %s",
                         where, path, dir, strerror(errno));
}

/* Whether this context tunes at all: not when off, not on a CPU context
 * (nothing to tune there) unless the test hook stands in for a device. */
static int tunes(const ssm_ctx *ctx)
{
    if (ctx->config->tuning.mode == SSM_TUNING_OFF)
        return 0;
    return hook_runner || ctx->config->device.type == SSM_DEVICE_CUDA;
}

/* One pass over the context; on success the plugin has the choices and
 * ctx->tuning the layouts and the report. On error nothing changed. */
static ssm_status run_pass(ssm_ctx *ctx, void *stream)
{
    const ssm_config *c = ctx->config;
    ssm_tune_runner plugin = {ctx, plugin_space, plugin_begin, plugin_run, plugin_end,
                              plugin_apply};
    const ssm_tune_runner *runner = hook_runner ? hook_runner : &plugin;
    tuning_cache cache = {0};
    int missing = 0;
    ssm_status status = tuning_cache_load(c->tuning.cache, &cache, &missing);
    if (status == SSM_ERR_CONFIG && c->tuning.mode == SSM_TUNING_CACHED) {
        ssm_log(1, "tuning: %s; the built-in choices run", ssm_last_error());
        status = SSM_OK;
    }
    if (status != SSM_OK)
        return status;
    if (missing && c->tuning.mode == SSM_TUNING_CACHED)
        ssm_log(1, "tuning: cache %s does not exist; the built-in choices run", c->tuning.cache);
    tuning_key key;
    base_key(ctx, &key);
    tuning_pass pass;
    memset(&pass, 0, sizeof pass);
    pass.base = &key;
    pass.runner = runner;
    pass.mode = c->tuning.mode;
    int32_t rows = ctx->capacity < 65535 ? ctx->capacity : 65535;
    pass.max_bucket = tuning_bucket(rows);
    pass.budget_ms = c->tuning.budget_ms > 0 ? c->tuning.budget_ms : 20;
    pass.stream = stream;
    pass.test_layouts = ctx->tuning.test_layouts;
    int previous = ssm_tuning_enter_device(&c->device);
    status = tuning_run_pass(&pass, &cache);
    if (status == SSM_OK)
        status = runner->apply(runner->user, pass.choices, pass.choice_count);
    ssm_tuning_leave_device(previous);
    if (status != SSM_OK) {
        tuning_cache_free(&cache);
        return status;
    }
    if (pass.changed && c->tuning.mode == SSM_TUNING_TUNE) {
        if (tuning_cache_merge_save(c->tuning.cache, &cache) == SSM_OK)
            pass.report.saved = 1;
        else
            ssm_log(1, "tuning: %s; the choices hold for this context only", ssm_last_error());
    }
    tuning_cache_free(&cache);
    int layouts = (ctx->mode->capabilities & SSM_CAP_LAYOUTS) != 0;
    for (int32_t b = 0; b < SSM_TUNE_BUCKETS; b++)
        ctx->tuning.layout[b] = layouts ? pass.layout[b] : 0;
    ctx->tuning.report = pass.report;
    ssm_log(2,
            "tuning: mode '%s': %d entries tuned, %d cached, %d left built-in; %d candidates "
            "failed now, %d skipped as failed before%s",
            ctx->mode->name, (int)pass.report.tuned, (int)pass.report.cached,
            (int)pass.report.untuned, (int)pass.report.failed, (int)pass.report.skipped_failed,
            pass.report.saved ? "; cache saved" : "");
    return SSM_OK;
}

ssm_status ssm_tuning_create(ssm_ctx *ctx)
{
    const char *test = getenv(TUNING_TEST_LAYOUTS_ENV);
    ctx->tuning.test_layouts = test && !strcmp(test, "1");
    if (!tunes(ctx)) {
        if (ctx->config->tuning.mode != SSM_TUNING_OFF)
            ssm_log(2, "tuning: a CPU context has no launch choices; nothing to tune");
        return SSM_OK;
    }
    if (ctx->config->tuning.mode == SSM_TUNING_TUNE) {
        ssm_status status = check_writable(ctx->config);
        if (status != SSM_OK)
            return status;
    }
    return run_pass(ctx, NULL);
}

uint32_t ssm_tuning_layout(const ssm_ctx *ctx, int32_t rows)
{
    return ctx->tuning.layout[tuning_bucket(rows)];
}

ssm_status ssm_tune(ssm_ctx *ctx, void *stream, ssm_tune_report *report)
{
    if (!ctx)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_tune: ctx is NULL");
    if (ctx->tickets.open_count > 0)
        return ssm_error_set(SSM_ERR_VERIFY_PENDING,
                             "ssm_tune: %d forwards are open; commit or abort them before tuning",
                             (int)ctx->tickets.open_count);
    ssm_tune_report zero;
    memset(&zero, 0, sizeof zero);
    if (!tunes(ctx)) {
        if (report)
            *report = zero;
        return SSM_OK;
    }
    if (ctx->config->device.type == SSM_DEVICE_CUDA) {
        int capturing = ssm_tuning_stream_capturing(stream);
        if (capturing != 0)
            return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                                 capturing > 0
                                     ? "ssm_tune: the stream is being captured into a graph; "
                                       "tune before capturing (tuning synchronizes and allocates)"
                                     : "ssm_tune: cannot ask whether the stream is being captured");
        ssm_status status = ssm_device_sync(ctx);
        if (status != SSM_OK)
            return status;
    }
    if (ctx->config->tuning.mode == SSM_TUNING_TUNE) {
        ssm_status status = check_writable(ctx->config);
        if (status != SSM_OK)
            return status;
    }
    ssm_status status = run_pass(ctx, stream);
    if (status == SSM_OK && ctx->config->device.type == SSM_DEVICE_CUDA)
        status = ssm_device_sync(ctx);
    if (status == SSM_OK && report)
        *report = ctx->tuning.report;
    return status;
}

ssm_status ssm_ctx_tune_report(const ssm_ctx *ctx, ssm_tune_report *out)
{
    if (!ctx || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_ctx_tune_report: NULL argument");
    *out = ctx->tuning.report;
    return SSM_OK;
}
