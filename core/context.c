/* Context life cycle: resolve the config against its mode plugin, size the
 * pool, create the plugin instance; and tear it all down again. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/context.h"
#include "core/pages/device_memory.h"

static const char *capability_names(uint64_t caps, char *buf, size_t len)
{
    static const char *const names[] = {"cpu", "cuda", "gdn", "kda", "state-f32",
                                        "state-bf16", "act-f32", "act-bf16", "pages",
                                        "layouts"};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (caps & (1ull << i))
            used += snprintf(buf + used, used < len ? len - used : 0, "%s%s", used ? "," : "",
                             names[i]);
    return buf;
}

/* The capability a config needs that the plugin lacks, or NULL. */
static const char *missing_capability(const ssm_config *c, uint64_t caps)
{
    if (c->device.type == SSM_DEVICE_CPU && !(caps & SSM_CAP_CPU)) return "device = cpu";
    if (c->device.type == SSM_DEVICE_CUDA && !(caps & SSM_CAP_CUDA)) return "device = cuda";
    if (c->model.kind == SSM_MODEL_GDN && !(caps & SSM_CAP_GDN)) return "kind = gdn";
    if (c->model.kind == SSM_MODEL_KDA && !(caps & SSM_CAP_KDA)) return "kind = kda";
    if (c->state_dtype == SSM_DTYPE_F32 && !(caps & SSM_CAP_STATE_F32)) return "state_dtype = f32";
    if (c->state_dtype == SSM_DTYPE_BF16 && !(caps & SSM_CAP_STATE_BF16))
        return "state_dtype = bf16";
    if (c->activation_dtype == SSM_DTYPE_F32 && !(caps & SSM_CAP_ACT_F32))
        return "activation_dtype = f32";
    if (c->activation_dtype == SSM_DTYPE_BF16 && !(caps & SSM_CAP_ACT_BF16))
        return "activation_dtype = bf16";
    return NULL;
}

/* Mode parameters for `c` with the options of the section called `section`;
 * the options array is allocated (free it) unless the section is absent. */
static ssm_status build_params(const ssm_config *c, const char *section, ssm_mode_params_v2 *p,
                               ssm_option_v1 **options)
{
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->model = c->model;
    p->state_dtype = c->state_dtype;
    p->activation_dtype = c->activation_dtype;
    p->device = c->device;
    p->capacity = c->max_requests;
    p->max_tokens = 1 + c->max_draft_tokens;
    p->prefill_precision = c->prefill_precision == SSM_PREFILL_PRECISION_HIGH ? SSM_PREFILL_HIGH
                                                                              : SSM_PREFILL_FAST;
    *options = NULL;
    int32_t index = ssm_config_find_section(c, section);
    if (index < 0 || c->mode_options_count[index] == 0)
        return SSM_OK;
    int32_t n = c->mode_options_count[index];
    *options = ssm_calloc((size_t)n, sizeof **options);
    if (!*options)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory for mode options");
    for (int32_t i = 0; i < n; i++) {
        (*options)[i].key = c->mode_options[index][i].key;
        (*options)[i].value = c->mode_options[index][i].value;
        (*options)[i].line = c->mode_options[index][i].line;
    }
    p->options_count = n;
    p->options = *options;
    return SSM_OK;
}

/* Lets the plugin judge its options and the combination; a rejection is a
 * config error at the offending option's line (or its section's). */
static ssm_status check_with_plugin(const ssm_config *c, const ssm_loaded_plugin *plugin,
                                    const ssm_mode_params_v2 *p, const char *section)
{
    char why[512] = "";
    int32_t bad = -1;
    if (ssm_loader_check_config(plugin, p, why, sizeof why, &bad) == SSM_OK)
        return SSM_OK;
    char where[512];
    int32_t index = ssm_config_find_section(c, section);
    int32_t line = (bad >= 0 && bad < p->options_count) ? p->options[bad].line
                   : index >= 0                        ? c->mode_section_lines[index]
                                                       : 0;
    ssm_config_where(c, line, where, sizeof where);
    if (bad >= 0 && bad < p->options_count)
        return ssm_error_set(SSM_ERR_CONFIG, "%s[%s] %s: %s", where, section,
                             p->options[bad].key, why[0] ? why : "rejected by the plugin");
    return ssm_error_set(SSM_ERR_CONFIG, "%smode '%s' rejects this configuration: %s", where,
                         plugin->table.name, why[0] ? why : "no reason given");
}

/* Every mode section other than the selected mode's must name a mode plugin
 * that accepts its options, so a typo in a section name is caught and an
 * operator can keep the sections of modes not in use. */
static ssm_status check_other_sections(const ssm_config *c)
{
    for (int32_t i = 0; i < c->mode_sections_count; i++) {
        const char *name = c->mode_section_names[i];
        if (strcmp(name, c->mode) == 0)
            continue;
        /* [workload] is the ssmstate command's section, kept as text: no plugin's. */
        if (strcmp(name, "workload") == 0)
            continue;
        ssm_loaded_plugin other = {0};
        char where[512];
        ssm_config_where(c, c->mode_section_lines[i], where, sizeof where);
        if (ssm_loader_open_mode(name, c->plugin_dir, &other) != SSM_OK)
            return ssm_error_set(SSM_ERR_CONFIG, "%sunknown section [%s]: %s", where, name,
                                 ssm_last_error());
        ssm_mode_params_v2 params;
        ssm_option_v1 *options = NULL;
        ssm_status status = build_params(c, name, &params, &options);
        if (status == SSM_OK)
            status = check_with_plugin(c, &other, &params, name);
        ssm_free(options);
        ssm_loader_close(&other);
        if (status != SSM_OK)
            return status;
    }
    return SSM_OK;
}

/* Everything ssm_ctx_create does short of allocating: validate (the one
 * validation of the call), check the device when a context is to be made
 * on it, load, check, plan. On success the caller owns *plugin and
 * *options. */
static ssm_status resolve(const ssm_config *c, int check_device, ssm_loaded_plugin *plugin,
                          ssm_mode_params_v2 *params, ssm_option_v1 **options, ssm_plan *plan)
{
    ssm_status status = ssm_config_validate(c);
    /* The device before anything is loaded or allocated on it: a missing
     * GPU reads as such, not as the first allocation that fails. */
    if (status == SSM_OK && check_device)
        status = ssm_device_check(&c->device);
    if (status != SSM_OK)
        return status;
    if (ssm_loader_check_dir(c->plugin_dir) != SSM_OK) {
        char where[512], why[512];
        snprintf(why, sizeof why, "%s", ssm_last_error());
        return ssm_error_set(SSM_ERR_CONFIG, "%s[state] %s",
                             ssm_config_where(c, 0, where, sizeof where), why);
    }
    ssm_loaded_plugin loaded = {0};
    status = ssm_loader_open_mode(c->mode, c->plugin_dir, &loaded);
    if (status != SSM_OK)
        return status;
    const char *missing = missing_capability(c, loaded.table.capabilities);
    if (missing) {
        char caps[256];
        status = ssm_error_set(SSM_ERR_UNSUPPORTED, "mode '%s' (%s) does not support %s; it offers: %s",
                               c->mode, loaded.path, missing,
                               capability_names(loaded.table.capabilities, caps, sizeof caps));
        goto fail;
    }
    status = build_params(c, c->mode, params, options);
    if (status == SSM_OK)
        status = check_with_plugin(c, &loaded, params, c->mode);
    if (status == SSM_OK)
        status = check_other_sections(c);
    ssm_mode_plan_v1 mode_plan = {0};
    if (status == SSM_OK)
        status = ssm_loader_plan(&loaded, params, &mode_plan);
    /* Every limit at its maximum gives a pool past 2^64 bytes: refuse it
     * rather than plan (and allocate) a wrapped size. */
    uint64_t slot_bytes = 0, pool_bytes = 0;
    if (status == SSM_OK &&
        (__builtin_add_overflow(mode_plan.state_bytes, mode_plan.conv_bytes, &slot_bytes) ||
         __builtin_add_overflow(slot_bytes, mode_plan.scratch_bytes, &slot_bytes) ||
         __builtin_mul_overflow(slot_bytes, (uint64_t)c->max_requests, &pool_bytes) ||
         __builtin_add_overflow(pool_bytes, mode_plan.shared_bytes, &pool_bytes) ||
         pool_bytes > SIZE_MAX)) {
        /* The struct keeps no key lines: the file and the key name it. */
        char where[512];
        ssm_config_where(c, 0, where, sizeof where);
        status = ssm_error_set(SSM_ERR_CONFIG,
                               "%s[state] max_requests = %d: a pool of that many slots of this "
                               "model in mode '%s' takes more than 2^64 bytes",
                               where, (int)c->max_requests, c->mode);
    }
    if (status != SSM_OK) {
        ssm_free(*options);
        *options = NULL;
        params->options = NULL;
        params->options_count = 0;
        goto fail;
    }
    memset(plan, 0, sizeof *plan);
    plan->state_bytes_per_slot = mode_plan.state_bytes;
    plan->conv_bytes_per_slot = mode_plan.conv_bytes;
    plan->scratch_bytes_per_slot = mode_plan.scratch_bytes;
    plan->bytes_per_slot = mode_plan.state_bytes + mode_plan.conv_bytes + mode_plan.scratch_bytes;
    plan->shared_bytes = mode_plan.shared_bytes;
    plan->capacity = c->max_requests;
    plan->pool_bytes = plan->bytes_per_slot * (uint64_t)c->max_requests + plan->shared_bytes;
    *plugin = loaded;
    return SSM_OK;
fail:
    ssm_loader_close(&loaded);
    return status;
}

ssm_status ssm_config_plan(const ssm_config *config, ssm_plan *out)
{
    if (!config || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_config_plan: NULL argument");
    ssm_loaded_plugin plugin = {0};
    ssm_mode_params_v2 params;
    ssm_option_v1 *options = NULL;
    ssm_plan plan;
    ssm_status status = resolve(config, 0, &plugin, &params, &options, &plan);
    if (status != SSM_OK)
        return status;
    ssm_free(options);
    ssm_loader_close(&plugin);
    *out = plan;
    return SSM_OK;
}

/* Distinct per context in a process, and unlikely to repeat across processes,
 * so a ticket cannot pass for another context's. */
static uint64_t new_context_id(void)
{
    static _Atomic uint64_t counter;
    uint64_t z = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^
                 (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) | 1;
}

static void release_context(ssm_ctx *ctx)
{
    if (ctx->instance)
        ctx->mode->destroy(ctx->instance);
    ssm_loader_close(&ctx->plugin);
    ssm_tickets_free(&ctx->tickets);
    ssm_free((void *)ctx->params.options);
    ssm_free(ctx->slot_acquired);
    ssm_free(ctx->slot_flags);
    ssm_free(ctx->free_slots);
    ssm_free(ctx->row_marks);
    ssm_device_flags_free(ctx);
    ssm_device_pages_free(ctx);
    ssm_config_free(ctx->config);
    ssm_free(ctx);
}

ssm_status ssm_ctx_create(const ssm_config *config, ssm_ctx **out)
{
    if (!config || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_ctx_create: NULL argument");
    ssm_ctx *ctx = ssm_calloc(1, sizeof *ctx);
    if (!ctx)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory for a context");
    ssm_option_v1 *options = NULL;
    ssm_status status = ssm_config_clone(config, &ctx->config);
    if (status == SSM_OK)
        status = resolve(ctx->config, 1, &ctx->plugin, &ctx->params, &options, &ctx->plan);
    if (status != SSM_OK) {
        release_context(ctx);
        return status;
    }
    ctx->mode = &ctx->plugin.table;
    ctx->capacity = ctx->config->max_requests;
    ctx->slot_acquired = ssm_calloc((size_t)ctx->capacity, 1);
    ctx->slot_flags = ssm_calloc((size_t)ctx->capacity, sizeof *ctx->slot_flags);
    ctx->free_slots = ssm_calloc((size_t)ctx->capacity, sizeof *ctx->free_slots);
    ctx->row_marks = ssm_calloc((size_t)ctx->capacity, sizeof *ctx->row_marks);
    if (!ctx->slot_acquired || !ctx->slot_flags || !ctx->free_slots || !ctx->row_marks) {
        release_context(ctx);
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory for the slot table");
    }
    /* Lowest slot numbers are handed out first. */
    for (int32_t i = 0; i < ctx->capacity; i++)
        ctx->free_slots[i] = ctx->capacity - 1 - i;
    ctx->free_count = ctx->capacity;
    status = ssm_tickets_init(&ctx->tickets, new_context_id(), ctx->config->model.layers,
                              ctx->capacity);
    if (status == SSM_OK)
        status = ssm_device_flags_create(ctx);
    if (status == SSM_OK)
        status = ssm_device_pages_create(ctx);
    if (status == SSM_OK) {
        ssm_services_init(ctx, &ctx->services);
        status = ssm_loader_create(&ctx->plugin, &ctx->params, &ctx->services, &ctx->instance);
        if (status != SSM_OK)
            ctx->instance = NULL;
    }
    if (status == SSM_OK)
        status = ssm_tuning_create(ctx); /* [tuning]: docs/tuning.md */
    if (status != SSM_OK) {
        release_context(ctx);
        return status;
    }
    ssm_log(2, "context: mode '%s', %d slots, %llu bytes per slot", ctx->mode->name,
            ctx->capacity, (unsigned long long)ctx->plan.bytes_per_slot);
    *out = ctx;
    return SSM_OK;
}

ssm_status ssm_ctx_create_from_file(const char *path, ssm_ctx **out)
{
    ssm_config *config = NULL;
    ssm_status status = ssm_config_load(path, &config);
    if (status != SSM_OK)
        return status;
    status = ssm_ctx_create(config, out);
    ssm_config_free(config);
    return status;
}

void ssm_ctx_destroy(ssm_ctx *ctx)
{
    if (ctx)
        release_context(ctx);
}

ssm_status ssm_ctx_plan(const ssm_ctx *ctx, ssm_plan *out)
{
    if (!ctx || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_ctx_plan: NULL argument");
    *out = ctx->plan;
    return SSM_OK;
}

const ssm_config *ssm_ctx_config(const ssm_ctx *ctx)
{
    return ctx ? ctx->config : NULL;
}

const char *ssm_ctx_plugin_path(const ssm_ctx *ctx)
{
    return ctx ? ctx->plugin.path : NULL;
}
