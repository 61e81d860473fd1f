/* Fuzzing the INI config loader (docs/reliability.md): the input is a config
 * file. It is parsed from memory (ssm_config_parse_text) and loaded as a file
 * (ssm_config_load, through a memfd), and both must agree. An accepted config
 * must lie within docs/config.md's limits, clone and re-validate, and, for the
 * built-in modes, plan without a size that wraps. The command's reader of its
 * [workload] section (tools/workload.c) runs on every accepted config too:
 * it refuses with one line or gives a workload within its limits. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/config/limits.h"
#include "core/internal.h"
#include "tests/fuzz/fuzz_common.h"
#include "tools/workload.h"

/* Whether `name` is one of the three built-in modes. */
static int is_builtin(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (!strcmp(name, fuzz_modes[i]))
            return 1;
    return 0;
}

/* Whether s is a section or mode name: 1 to 48 of [a-z0-9_]. */
static int plain_name(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > 48)
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == n;
}

/* The documented limits of an accepted config (docs/config.md). */
static void check_accepted(const ssm_config *c)
{
    const ssm_model_dims *m = &c->model;
    FUZZ_CHECK(c->mode && plain_name(c->mode));
    FUZZ_CHECK(m->kind == SSM_MODEL_GDN || m->kind == SSM_MODEL_KDA);
    FUZZ_CHECK(m->layers >= 1 && m->layers <= SSM_MAX_LAYERS);
    FUZZ_CHECK(m->heads >= 1 && m->value_heads >= m->heads && m->value_heads % m->heads == 0);
    FUZZ_CHECK(m->value_heads <= SSM_MAX_HEADS);
    FUZZ_CHECK(m->key_dim >= 1 && m->key_dim <= SSM_MAX_HEAD_DIM);
    FUZZ_CHECK(m->value_dim >= 1 && m->value_dim <= SSM_MAX_HEAD_DIM);
    FUZZ_CHECK(m->conv_width >= 1 && m->conv_width <= SSM_MAX_CONV_WIDTH);
    FUZZ_CHECK(!m->has_lower_bound || (m->kind == SSM_MODEL_KDA && m->lower_bound < 0));
    FUZZ_CHECK(c->state_dtype == SSM_DTYPE_F32 || c->state_dtype == SSM_DTYPE_BF16);
    FUZZ_CHECK(c->activation_dtype == SSM_DTYPE_F32 || c->activation_dtype == SSM_DTYPE_BF16);
    FUZZ_CHECK(c->device.type == SSM_DEVICE_CPU || c->device.type == SSM_DEVICE_CUDA);
    FUZZ_CHECK(c->max_requests >= 1 && c->max_requests <= SSM_MAX_REQUESTS);
    FUZZ_CHECK(c->max_draft_tokens >= 0 && c->max_draft_tokens <= SSM_MAX_DRAFT_TOKENS);
    FUZZ_CHECK(c->mode_sections_count >= 0);
    for (int32_t s = 0; s < c->mode_sections_count; s++) {
        FUZZ_CHECK(plain_name(c->mode_section_names[s]) && c->mode_section_lines[s] > 0);
        for (int32_t o = 0; o < c->mode_options_count[s]; o++) {
            const ssm_mode_option *opt = &c->mode_options[s][o];
            FUZZ_CHECK(opt->key && opt->key[0] && opt->value && opt->line > 0);
        }
    }
    ssm_config *clone = NULL;
    FUZZ_CHECK(ssm_config_clone(c, &clone) == SSM_OK);
    FUZZ_CHECK(ssm_config_validate(clone) == SSM_OK);
    FUZZ_CHECK(!memcmp(&clone->model, &c->model, sizeof c->model));
    FUZZ_CHECK(clone->mode_sections_count == c->mode_sections_count);
    ssm_config_free(clone);
}

/* The command's [workload] of an accepted config. */
static void check_workload(const ssm_config *c)
{
    workload w;
    char err[1024];
    if (workload_from_config(c, &w, err, sizeof err) != 0) {
        FUZZ_CHECK(err[0] != '\0' && !strchr(err, '\n'));
        return;
    }
    FUZZ_CHECK(w.requests >= 1 && w.requests <= WORKLOAD_MAX_COUNT);
    FUZZ_CHECK(w.prompt_min >= 1 && w.prompt_min <= w.prompt_max);
    FUZZ_CHECK(w.prompt_max <= WORKLOAD_MAX_COUNT);
    FUZZ_CHECK(w.prefill_chunk >= 1 && w.prefill_chunk <= WORKLOAD_MAX_COUNT);
    FUZZ_CHECK(w.decode_steps >= 0 && w.decode_steps <= WORKLOAD_MAX_COUNT);
    FUZZ_CHECK(w.acceptance >= 0 && w.acceptance <= 1);
    FUZZ_CHECK((int64_t)w.requests * ((int64_t)w.prompt_max +
                                      (int64_t)w.decode_steps * (1 + c->max_draft_tokens)) <=
               WORKLOAD_MAX_TOKENS);
}

/* The plan of a CPU config of built-in modes (plugin_dir dropped: the input
 * must not choose what gets dlopen'ed): it fails cleanly or adds up. */
static void check_plan(const ssm_config *c)
{
    if (c->device.type != SSM_DEVICE_CPU || !is_builtin(c->mode))
        return;
    for (int32_t s = 0; s < c->mode_sections_count; s++)
        if (!is_builtin(c->mode_section_names[s]) &&
            strcmp(c->mode_section_names[s], WORKLOAD_SECTION) != 0) /* no plugin's */
            return;
    ssm_config copy = *c;
    copy.plugin_dir = NULL;
    ssm_plan plan;
    ssm_status status = ssm_config_plan(&copy, &plan);
    FUZZ_CHECK(status != SSM_ERR_INTERNAL && status != SSM_ERR_PLUGIN);
    if (status != SSM_OK)
        return;
    FUZZ_CHECK(plan.capacity == c->max_requests);
    FUZZ_CHECK(plan.bytes_per_slot >= plan.state_bytes_per_slot &&
               plan.bytes_per_slot - plan.state_bytes_per_slot >= plan.conv_bytes_per_slot);
    FUZZ_CHECK(plan.bytes_per_slot == plan.state_bytes_per_slot + plan.conv_bytes_per_slot +
                                          plan.scratch_bytes_per_slot);
    FUZZ_CHECK(plan.pool_bytes >= plan.shared_bytes);
    FUZZ_CHECK((plan.pool_bytes - plan.shared_bytes) / (uint64_t)plan.capacity ==
               plan.bytes_per_slot);
}

/* Loads `text` through a memfd; -1 when no memfd can be made. */
static int load_as_file(const uint8_t *data, size_t size, ssm_config **out, ssm_status *status)
{
    int fd = memfd_create("fuzz_config", 0);
    if (fd < 0)
        return -1;
    int ok = write(fd, data, size) == (ssize_t)size;
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (ok)
        *status = ssm_config_load(path, out);
    close(fd);
    return ok ? 0 : -1;
}

/* One input: parse and load, compare, check what was accepted. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_pin_plugins();
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    ssm_config *parsed = NULL, *loaded = NULL;
    ssm_status from_text = ssm_config_parse_text(text, "fuzz.ini", &parsed);
    FUZZ_CHECK(from_text == SSM_OK || from_text == SSM_ERR_CONFIG);
    FUZZ_CHECK((from_text == SSM_OK) == (parsed != NULL));
    FUZZ_CHECK(from_text == SSM_OK || ssm_last_error()[0] != '\0');
    ssm_status from_file = SSM_ERR_INTERNAL;
    if (load_as_file(data, size, &loaded, &from_file) == 0) {
        int has_nul = memchr(data, '\0', size) != NULL;
        FUZZ_CHECK(from_file == (has_nul ? SSM_ERR_CONFIG : from_text));
        FUZZ_CHECK((from_file == SSM_OK) == (loaded != NULL));
        if (loaded && parsed) {
            FUZZ_CHECK(!memcmp(&loaded->model, &parsed->model, sizeof parsed->model));
            FUZZ_CHECK(!strcmp(loaded->mode, parsed->mode));
            FUZZ_CHECK(loaded->max_requests == parsed->max_requests);
            FUZZ_CHECK(loaded->mode_sections_count == parsed->mode_sections_count);
        }
    }
    if (parsed) {
        check_accepted(parsed);
        check_workload(parsed);
        check_plan(parsed);
    }
    ssm_config_free(parsed);
    ssm_config_free(loaded);
    free(text);
    return 0;
}
