/* Configuration: INI text to ssm_config, and the checks every ssm_config must
 * pass, whether it came from a file or was filled in by the engine
 * (docs/config.md).
 *
 * This file holds the key table and the owned config form; config_parse.c
 * reads INI text and config_check.c holds the checks. */

#include "config.h" /* the build's */

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config/limits.h"
#include "core/config/private.h"

/* ------------------------------------------------------------ the keys */

const char *const section_names[SECTION_FIXED_COUNT] = {"model", "state", "tuning"};

#define INT_KEY(section, name, required, field, min, max) \
    {section, name, required, 1, offsetof(ssm_config, field), min, max}
#define OTHER_KEY(section, name, required) {section, name, required, 0, 0, 0, 0}

/* In file order: the first failing check is reported, so model comes first. */
const key_spec key_specs[KEY_COUNT] = {
    [KEY_KIND] = OTHER_KEY(SECTION_MODEL, "kind", 1),
    [KEY_LAYERS] = INT_KEY(SECTION_MODEL, "layers", 1, model.layers, 1, SSM_MAX_LAYERS),
    [KEY_HEADS] = INT_KEY(SECTION_MODEL, "heads", 1, model.heads, 1, SSM_MAX_HEADS),
    [KEY_VALUE_HEADS] = INT_KEY(SECTION_MODEL, "value_heads", 1, model.value_heads, 1, SSM_MAX_HEADS),
    [KEY_KEY_DIM] = INT_KEY(SECTION_MODEL, "key_dim", 1, model.key_dim, 1, SSM_MAX_HEAD_DIM),
    [KEY_VALUE_DIM] = INT_KEY(SECTION_MODEL, "value_dim", 1, model.value_dim, 1, SSM_MAX_HEAD_DIM),
    [KEY_CONV_WIDTH] = INT_KEY(SECTION_MODEL, "conv_width", 1, model.conv_width, 1, SSM_MAX_CONV_WIDTH),
    [KEY_LOWER_BOUND] = OTHER_KEY(SECTION_MODEL, "lower_bound", 0),
    /* tensor parallelism (ssm_head_slice): 0 = unset */
    [KEY_MODEL_HEADS] = INT_KEY(SECTION_MODEL, "model_heads", 0, head_slice.heads, 0, SSM_MAX_HEADS),
    [KEY_MODEL_VALUE_HEADS] = INT_KEY(SECTION_MODEL, "model_value_heads", 0,
                                      head_slice.value_heads, 0, SSM_MAX_HEADS),
    [KEY_FIRST_VALUE_HEAD] = INT_KEY(SECTION_MODEL, "first_value_head", 0, head_slice.first, 0,
                                     SSM_MAX_HEADS),
    [KEY_MODE] = OTHER_KEY(SECTION_STATE, "mode", 1),
    [KEY_STATE_DTYPE] = OTHER_KEY(SECTION_STATE, "state_dtype", 1),
    [KEY_ACTIVATION_DTYPE] = OTHER_KEY(SECTION_STATE, "activation_dtype", 0),
    [KEY_DEVICE] = OTHER_KEY(SECTION_STATE, "device", 0),
    [KEY_MAX_REQUESTS] = INT_KEY(SECTION_STATE, "max_requests", 1, max_requests, 1, SSM_MAX_REQUESTS),
    [KEY_MAX_DRAFT_TOKENS] = INT_KEY(SECTION_STATE, "max_draft_tokens", 0, max_draft_tokens, 0,
                                     SSM_MAX_DRAFT_TOKENS),
    [KEY_PLUGIN_DIR] = OTHER_KEY(SECTION_STATE, "plugin_dir", 0),
    [KEY_PREFILL_PRECISION] = OTHER_KEY(SECTION_STATE, "prefill_precision", 0),
    /* docs/tuning.md */
    [KEY_TUNING_MODE] = OTHER_KEY(SECTION_TUNING, "mode", 0),
    [KEY_TUNING_CACHE] = OTHER_KEY(SECTION_TUNING, "cache", 0),
    [KEY_TUNING_BUDGET_MS] = INT_KEY(SECTION_TUNING, "budget_ms", 0, tuning.budget_ms, 0,
                                     SSM_TUNING_MAX_BUDGET_MS),
};

/* "1..4096", or ">= 1" when there is no practical upper limit. */
const char *describe_range(const key_spec *spec, char *buf, size_t len)
{
    if (spec->max == INT32_MAX)
        snprintf(buf, len, ">= %d", (int)spec->min);
    else
        snprintf(buf, len, "%d..%d", (int)spec->min, (int)spec->max);
    return buf;
}

/* Section and plugin names: they become file names, so keep them plain. */
int is_plain_name(const char *name, size_t len)
{
    if (len == 0 || len > CONFIG_MAX_NAME)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return 0;
    }
    return 1;
}

/* -------------------------------------------------------------- errors */

ssm_status fail_atv(const char *source, int32_t line, const char *fmt, va_list ap)
{
    char message[1024];
    vsnprintf(message, sizeof message, fmt, ap);
    if (!source)
        return ssm_error_set(SSM_ERR_CONFIG, "%s", message);
    if (line > 0)
        return ssm_error_set(SSM_ERR_CONFIG, "%s:%d: %s", source, (int)line, message);
    return ssm_error_set(SSM_ERR_CONFIG, "%s: %s", source, message);
}

ssm_status fail_out_of_memory(const char *source)
{
    return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory while reading config %s",
                         source ? source : "");
}

const char *ssm_config_where(const ssm_config *config, int32_t line, char *buf, size_t len)
{
    if (!buf || len == 0)
        return "";
    buf[0] = '\0';
    if (!config || !config->source)
        return buf;
    if (line > 0)
        snprintf(buf, len, "%s:%d: ", config->source, (int)line);
    else
        snprintf(buf, len, "%s: ", config->source);
    return buf;
}

/* ------------------------------------------------ the owned config form */

void owned_free(config_owned *owned)
{
    if (!owned)
        return;
    for (int32_t s = 0; s < owned->config.mode_sections_count; s++) {
        for (int32_t i = 0; i < owned->options_count[s]; i++) {
            ssm_free((char *)owned->options[s][i].key);
            ssm_free((char *)owned->options[s][i].value);
        }
        ssm_free(owned->options[s]);
        ssm_free(owned->section_names[s]);
    }
    ssm_free(owned->section_names);
    ssm_free(owned->section_lines);
    ssm_free(owned->options_count);
    ssm_free(owned->options_capacity);
    ssm_free(owned->options);
    ssm_free(owned->mode);
    ssm_free(owned->plugin_dir);
    ssm_free(owned->source);
    ssm_free(owned->tuning_cache);
    ssm_free(owned);
}

/* Points the public struct at the owned arrays (they move as they grow). */
void owned_publish(config_owned *owned)
{
    ssm_config *c = &owned->config;
    c->mode = owned->mode;
    c->plugin_dir = owned->plugin_dir;
    c->source = owned->source;
    c->tuning.cache = owned->tuning_cache;
    c->mode_section_names = (const char *const *)owned->section_names;
    c->mode_section_lines = owned->section_lines;
    c->mode_options_count = owned->options_count;
    c->mode_options = (const ssm_mode_option *const *)owned->options;
}

static int grow_array(void **array, size_t element_size, int32_t capacity)
{
    void *grown = ssm_realloc(*array, element_size * (size_t)capacity);
    if (!grown)
        return 0;
    *array = grown;
    return 1;
}

/* Appends an empty mode section; its index, or -1 when out of memory. */
int32_t owned_add_section(config_owned *owned, const char *name, size_t name_len,
                          int32_t line)
{
    int32_t count = owned->config.mode_sections_count;
    if (count == owned->sections_capacity) {
        int32_t capacity = count ? 2 * count : 4;
        /* A failure half way leaves some arrays bigger than the recorded
         * capacity, which is harmless. */
        if (!grow_array((void **)&owned->section_names, sizeof(char *), capacity) ||
            !grow_array((void **)&owned->section_lines, sizeof(int32_t), capacity) ||
            !grow_array((void **)&owned->options_count, sizeof(int32_t), capacity) ||
            !grow_array((void **)&owned->options_capacity, sizeof(int32_t), capacity) ||
            !grow_array((void **)&owned->options, sizeof(ssm_mode_option *), capacity))
            return -1;
        owned->sections_capacity = capacity;
    }
    char *copy = ssm_strndup(name, name_len);
    if (!copy)
        return -1;
    owned->section_names[count] = copy;
    owned->section_lines[count] = line;
    owned->options_count[count] = 0;
    owned->options_capacity[count] = 0;
    owned->options[count] = NULL;
    owned->config.mode_sections_count = count + 1;
    return count;
}

int owned_add_option(config_owned *owned, int32_t section, const char *key,
                     const char *value, int32_t line)
{
    int32_t count = owned->options_count[section];
    if (count == owned->options_capacity[section]) {
        int32_t capacity = count ? 2 * count : 4;
        if (!grow_array((void **)&owned->options[section], sizeof(ssm_mode_option), capacity))
            return 0;
        owned->options_capacity[section] = capacity;
    }
    char *key_copy = ssm_strdup(key);
    char *value_copy = ssm_strdup(value);
    if (!key_copy || !value_copy) {
        ssm_free(key_copy);
        ssm_free(value_copy);
        return 0;
    }
    owned->options[section][count] = (ssm_mode_option){key_copy, value_copy, line};
    owned->options_count[section] = count + 1;
    return 1;
}

config_owned *owned_new(void)
{
    config_owned *owned = ssm_calloc(1, sizeof *owned);
    if (owned)
        ssm_config_defaults(&owned->config);
    return owned;
}

/* ------------------------------------------------------- other forms */

void ssm_config_free(ssm_config *config)
{
    /* Only configs from ssm_config_load / ssm_config_clone come here, and
     * their public struct is the first member of the owned form. */
    owned_free((config_owned *)config);
}

void ssm_config_defaults(ssm_config *config)
{
    if (!config)
        return;
    memset(config, 0, sizeof *config);
    /* The model has no dims yet; the kind defaults to the common one. */
    config->model.kind = SSM_MODEL_GDN;
    config->mode = "native";
    config->state_dtype = SSM_DTYPE_F32;
    config->activation_dtype = SSM_DTYPE_F32;
    config->device = (ssm_device){SSM_DEVICE_CPU, 0};
    config->max_requests = 1;
    config->max_draft_tokens = 0;
    config->plugin_dir = NULL;
    config->prefill_precision = SSM_PREFILL_PRECISION_HIGH;
    config->source = NULL;
}

static int copy_string(const char *from, char **to)
{
    *to = NULL;
    if (!from)
        return 1;
    *to = ssm_strdup(from);
    return *to != NULL;
}

/* The mode sections of a struct the caller filled: the arrays must be there
 * for the counts they claim (lines may be left out). */
static int mode_sections_readable(const ssm_config *c)
{
    if (c->mode_sections_count < 0)
        return 0;
    if (c->mode_sections_count == 0)
        return 1;
    if (!c->mode_section_names || !c->mode_options_count || !c->mode_options)
        return 0;
    for (int32_t s = 0; s < c->mode_sections_count; s++) {
        if (!c->mode_section_names[s] || c->mode_options_count[s] < 0 ||
            (c->mode_options_count[s] > 0 && !c->mode_options[s]))
            return 0;
        for (int32_t i = 0; i < c->mode_options_count[s]; i++)
            if (!c->mode_options[s][i].key || !c->mode_options[s][i].value)
                return 0;
    }
    return 1;
}

ssm_status ssm_config_clone(const ssm_config *config, ssm_config **out)
{
    if (!config || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_config_clone: %s is NULL",
                             config ? "out" : "config");
    if (!mode_sections_readable(config))
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "ssm_config_clone: mode sections: count %d with missing arrays",
                             (int)config->mode_sections_count);
    config_owned *owned = ssm_calloc(1, sizeof *owned);
    if (!owned)
        return fail_out_of_memory(config->source);
    owned->config = *config;
    owned->config.mode_sections_count = 0; /* counts what has been copied so far */
    int ok = copy_string(config->mode, &owned->mode) &&
             copy_string(config->plugin_dir, &owned->plugin_dir) &&
             copy_string(config->source, &owned->source) &&
             copy_string(config->tuning.cache, &owned->tuning_cache);
    for (int32_t s = 0; ok && s < config->mode_sections_count; s++) {
        const char *name = config->mode_section_names[s];
        int32_t line = config->mode_section_lines ? config->mode_section_lines[s] : 0;
        ok = owned_add_section(owned, name, strlen(name), line) == s;
        for (int32_t i = 0; ok && i < config->mode_options_count[s]; i++) {
            const ssm_mode_option *option = &config->mode_options[s][i];
            ok = owned_add_option(owned, s, option->key, option->value, option->line);
        }
    }
    owned_publish(owned);
    if (!ok) {
        owned_free(owned);
        return fail_out_of_memory(config->source);
    }
    *out = &owned->config;
    return SSM_OK;
}

int32_t ssm_config_find_section(const ssm_config *config, const char *name)
{
    if (!config || !name || !config->mode_section_names)
        return -1;
    for (int32_t s = 0; s < config->mode_sections_count; s++)
        if (config->mode_section_names[s] && !strcmp(config->mode_section_names[s], name))
            return s;
    return -1;
}
