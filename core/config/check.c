/* Configuration: the checks every ssm_config must pass, whether it came from
 * a file or was filled in by the engine (docs/config.md). A loaded config is
 * checked with the lines of its keys; a struct, without. */

#include "config.h" /* the build's: HAVE_CUDA */

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "core/config/limits.h"
#include "core/config/private.h"

/* ------------------------------------------------------------ checking */

/* Reports at the line of `key`, else of `other` (the key it is compared
 * with), else of the key's section header. */
static ssm_status check_fail(const checker *ck, config_key key, config_key other,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static ssm_status check_fail(const checker *ck, config_key key, config_key other,
                             const char *fmt, ...)
{
    int32_t line = 0;
    if (ck->key_lines) {
        line = ck->key_lines[key];
        if (!line && other != KEY_NONE)
            line = ck->key_lines[other];
        if (!line && ck->header_lines)
            line = ck->header_lines[key_specs[key].section];
    }
    va_list ap;
    va_start(ap, fmt);
    ssm_status status = fail_atv(ck->config->source, line, fmt, ap);
    va_end(ap);
    return status;
}

static ssm_status check_int_keys(const checker *ck, int section)
{
    for (int k = 0; k < KEY_COUNT; k++) {
        const key_spec *spec = &key_specs[k];
        if (spec->section != section || !spec->is_int)
            continue;
        int32_t value = *(const int32_t *)((const char *)ck->config + spec->offset);
        if (value < spec->min || value > spec->max) {
            char range[48];
            return check_fail(ck, (config_key)k, KEY_NONE, "[%s] %s = %d is out of range (allowed: %s)",
                              section_names[section], spec->name, (int)value,
                              describe_range(spec, range, sizeof range));
        }
    }
    return SSM_OK;
}

static ssm_status check_model(const checker *ck)
{
    const ssm_model_dims *m = &ck->config->model;
    if (m->kind != SSM_MODEL_GDN && m->kind != SSM_MODEL_KDA)
        return check_fail(ck, KEY_KIND, KEY_NONE,
                          "[model] kind = %d is not a model kind (allowed: gdn, kda)", (int)m->kind);
    ssm_status status = check_int_keys(ck, SECTION_MODEL);
    if (status != SSM_OK)
        return status;
    if (m->value_heads % m->heads != 0)
        return check_fail(ck, KEY_VALUE_HEADS, KEY_HEADS,
                          "[model] value_heads = %d must be a multiple of heads = %d "
                          "(each key head serves value_heads / heads value heads)",
                          (int)m->value_heads, (int)m->heads);
    if (m->has_lower_bound) {
        if (m->kind != SSM_MODEL_KDA)
            return check_fail(ck, KEY_LOWER_BOUND, KEY_KIND,
                              "[model] lower_bound applies to kind = kda only (this model is %s)",
                              ssm_model_kind_name(m->kind));
        if (!(isfinite(m->lower_bound) && m->lower_bound < 0.0f))
            return check_fail(ck, KEY_LOWER_BOUND, KEY_NONE,
                              "[model] lower_bound = %g must be negative (< 0)",
                              (double)m->lower_bound);
    }
    return SSM_OK;
}

/* The tensor-parallel slice (ssm_head_slice): none, or the context's heads
 * a whole number of key-head groups inside the model's. */
static ssm_status check_head_slice(const checker *ck)
{
    const ssm_head_slice *h = &ck->config->head_slice;
    const ssm_model_dims *m = &ck->config->model;
    if (h->heads == 0 && h->value_heads == 0 && h->first == 0)
        return SSM_OK;
    if (h->heads == 0 && h->value_heads == 0)
        return check_fail(ck, KEY_FIRST_VALUE_HEAD, KEY_NONE,
                          "head slice: first_value_head = %d needs the model's model_heads and "
                          "model_value_heads",
                          (int)h->first);
    if (h->heads < 1 || h->value_heads < h->heads || h->value_heads > SSM_MAX_HEADS ||
        h->value_heads % h->heads != 0)
        return check_fail(ck, KEY_MODEL_VALUE_HEADS, KEY_MODEL_HEADS,
                          "head slice: the model's heads = %d and value_heads = %d are not a "
                          "model (value_heads a multiple of heads, at most %d)",
                          (int)h->heads, (int)h->value_heads, SSM_MAX_HEADS);
    int32_t group = h->value_heads / h->heads;
    if (m->value_heads / m->heads != group)
        return check_fail(ck, KEY_MODEL_VALUE_HEADS, KEY_VALUE_HEADS,
                          "head slice: this context's value_heads / heads = %d / %d, the "
                          "model's group is %d value heads per key head",
                          (int)m->value_heads, (int)m->heads, (int)group);
    if (h->first < 0 || h->first % group != 0 || h->first > h->value_heads - m->value_heads)
        return check_fail(ck, KEY_FIRST_VALUE_HEAD, KEY_MODEL_VALUE_HEADS,
                          "head slice: %d value heads from %d are not whole key-head groups "
                          "(of %d) within the model's %d",
                          (int)m->value_heads, (int)h->first, (int)group, (int)h->value_heads);
    return SSM_OK;
}

static ssm_status check_dtype(const checker *ck, config_key key, ssm_dtype dtype,
                              const char *what)
{
    if (dtype == SSM_DTYPE_F32 || dtype == SSM_DTYPE_BF16)
        return SSM_OK;
    if (dtype == SSM_DTYPE_F16)
        return check_fail(ck, key, KEY_NONE,
                          "[state] %s = f16: f16 %s is not offered yet (allowed: f32, bf16)",
                          key_specs[key].name, what);
    return check_fail(ck, key, KEY_NONE, "[state] %s = %d is not a dtype (allowed: f32, bf16)",
                      key_specs[key].name, (int)dtype);
}

static ssm_status check_state(const checker *ck)
{
    const ssm_config *c = ck->config;
    if (!c->mode || !c->mode[0])
        return check_fail(ck, KEY_MODE, KEY_NONE,
                          "[state] mode is not set (name a mode plugin: native, compact, replay, ...)");
    if (!is_plain_name(c->mode, strlen(c->mode)))
        return check_fail(ck, KEY_MODE, KEY_NONE,
                          "[state] mode = '%s' is not a plugin name "
                          "(1 to %d characters of a-z, 0-9 and _)",
                          c->mode, CONFIG_MAX_NAME);
    ssm_status status = check_dtype(ck, KEY_STATE_DTYPE, c->state_dtype, "state");
    if (status == SSM_OK)
        status = check_dtype(ck, KEY_ACTIVATION_DTYPE, c->activation_dtype, "activation");
    if (status != SSM_OK)
        return status;
    if (c->device.type == SSM_DEVICE_CPU) {
        if (c->device.index != 0)
            return check_fail(ck, KEY_DEVICE, KEY_NONE,
                              "[state] device: the CPU has index 0, not %d", (int)c->device.index);
    } else if (c->device.type == SSM_DEVICE_CUDA) {
        if (c->device.index < 0)
            return check_fail(ck, KEY_DEVICE, KEY_NONE,
                              "[state] device = cuda:%d: the CUDA device index must be >= 0",
                              (int)c->device.index);
#ifndef HAVE_CUDA
        return check_fail(ck, KEY_DEVICE, KEY_NONE,
                          "[state] device = cuda: this build has no CUDA support "
                          "(configure --with-cuda)");
#endif
    } else {
        return check_fail(ck, KEY_DEVICE, KEY_NONE,
                          "[state] device type %d is not a device (allowed: cpu, cuda, cuda:N)",
                          (int)c->device.type);
    }
    if (c->prefill_precision != SSM_PREFILL_PRECISION_FAST &&
        c->prefill_precision != SSM_PREFILL_PRECISION_HIGH)
        return check_fail(ck, KEY_PREFILL_PRECISION, KEY_NONE,
                          "[state] prefill_precision = %d is not a precision (allowed: fast, high)",
                          (int)c->prefill_precision);
    return check_int_keys(ck, SECTION_STATE);
}

/* [tuning] (docs/tuning.md): a known mode, and a cache file unless off. The
 * file itself is looked at when a CUDA context is created, not here. */
static ssm_status check_tuning(const checker *ck)
{
    const ssm_tuning_config *t = &ck->config->tuning;
    if (t->mode != SSM_TUNING_OFF && t->mode != SSM_TUNING_CACHED && t->mode != SSM_TUNING_TUNE)
        return check_fail(ck, KEY_TUNING_MODE, KEY_NONE,
                          "[tuning] mode = %d is not a tuning mode (allowed: off, cached, tune)",
                          (int)t->mode);
    ssm_status status = check_int_keys(ck, SECTION_TUNING);
    if (status != SSM_OK)
        return status;
    if (t->mode != SSM_TUNING_OFF && (!t->cache || !t->cache[0]))
        return check_fail(ck, KEY_TUNING_CACHE, KEY_TUNING_MODE,
                          "[tuning] cache is required with mode = %s (a file the tuned "
                          "choices are kept in)",
                          t->mode == SSM_TUNING_TUNE ? "tune" : "cached");
    return SSM_OK;
}

ssm_status check_config(const checker *ck)
{
    ssm_status status = check_model(ck);
    if (status == SSM_OK)
        status = check_head_slice(ck);
    if (status == SSM_OK)
        status = check_state(ck);
    if (status == SSM_OK)
        status = check_tuning(ck);
    return status;
}

ssm_status ssm_config_validate(const ssm_config *config)
{
    if (!config)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_config_validate: config is NULL");
    /* No lines here even for a loaded config: it was checked with lines when
     * loaded, so a failure now is a value changed since, and the file's line
     * would show the old one. */
    checker ck = {config, NULL, NULL};
    return check_config(&ck);
}
