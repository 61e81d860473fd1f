/* A mode for tests/check_tuning: CPU, SSM_CAP_LAYOUTS, steps that compute
 * nothing. It records the update layout every verify, decode and commit is
 * handed (layout_probe_log, which the test reads through dlsym on the same
 * file the core loaded) and offers one tuned family whose choices it
 * records too, so a test sees what the core hands a plugin. */
#include <string.h>

#include "ssmstate/plugin.h"

#define PROBE_CALLS 256

typedef struct probe_call {
    char kind;        /* 'v' verify, 'd' decode, 'c' commit, 'p' prefill */
    int32_t rows;
    uint32_t layout;
} probe_call;

typedef struct probe_log {
    int32_t count;
    probe_call calls[PROBE_CALLS];
    int32_t applied;  /* choices installed by the latest tune_apply */
    ssm_tune_choice_v1 choices[64];
} probe_log;

SSM_PLUGIN_EXPORT probe_log layout_probe_log;

static void note(char kind, int32_t rows, uint32_t layout)
{
    if (layout_probe_log.count < PROBE_CALLS)
        layout_probe_log.calls[layout_probe_log.count++] = (probe_call){kind, rows, layout};
}

static ssm_status check_config(const ssm_mode_params_v1 *p, char *why, size_t len, int32_t *bad)
{
    (void)p, (void)why, (void)len;
    *bad = -1;
    return SSM_OK;
}

static ssm_status plan(const ssm_mode_params_v1 *p, ssm_mode_plan_v1 *out)
{
    (void)p;
    memset(out, 0, sizeof *out);
    out->state_bytes = 8;
    return SSM_OK;
}

static int instance_token;

static ssm_status create(const ssm_mode_params_v1 *p, const ssm_services_v1 *s, void **instance)
{
    (void)p, (void)s;
    *instance = &instance_token;
    return SSM_OK;
}

static void destroy(void *instance)
{
    (void)instance;
}

static ssm_status reset_slot(void *instance, int32_t slot, void *stream)
{
    (void)instance, (void)slot, (void)stream;
    return SSM_OK;
}

static uint32_t layout_of(const ssm_step_v1 *s)
{
    return s->struct_size >= offsetof(ssm_step_v1, layout) + sizeof(uint32_t) ? s->layout : 0;
}

static ssm_status prefill(void *instance, const ssm_step_v1 *s)
{
    (void)instance;
    note('p', s->rows, layout_of(s));
    return SSM_OK;
}

static ssm_status decode(void *instance, const ssm_step_v1 *s)
{
    (void)instance;
    note('d', s->rows, layout_of(s));
    return SSM_OK;
}

static ssm_status verify(void *instance, const ssm_step_v1 *s)
{
    (void)instance;
    note('v', s->rows, layout_of(s));
    return SSM_OK;
}

static ssm_status commit(void *instance, const ssm_commit_v1 *c)
{
    (void)instance;
    note('c', c->rows,
         c->struct_size >= offsetof(ssm_commit_v1, layout) + sizeof(uint32_t) ? c->layout : 0);
    return SSM_OK;
}

/* Tuning: the family "decode" with two candidates; nothing to time (the
 * tests drive passes through the core's test hook instead), but
 * tune_apply records what the core installs. */
static const char *const probe_names[] = {"auto", "fast"};
static const ssm_tune_family_v1 probe_families[] = {{SSM_TUNE_DECODE, 2, probe_names}};

static ssm_status tune_space(void *instance, const ssm_tune_family_v1 **families, int32_t *count)
{
    (void)instance;
    *families = probe_families;
    *count = 1;
    return SSM_OK;
}

static ssm_status tune_apply(void *instance, const ssm_tune_choice_v1 *choices, int32_t count)
{
    (void)instance;
    layout_probe_log.applied = count < 64 ? count : 64;
    memcpy(layout_probe_log.choices, choices,
           sizeof *choices * (size_t)layout_probe_log.applied);
    return SSM_OK;
}

SSM_PLUGIN_EXPORT const ssm_plugin_v1 ssm_plugin_entry_v1 = {
    .abi_version = SSM_PLUGIN_V1_ABI_VERSION,
    .struct_size = sizeof(ssm_plugin_v1),
    .name = "layout_probe",
    .mode_version = 1,
    .capabilities = SSM_CAP_CPU | SSM_CAP_GDN | SSM_CAP_KDA | SSM_CAP_STATE_F32 |
                    SSM_CAP_STATE_BF16 | SSM_CAP_ACT_F32 | SSM_CAP_ACT_BF16 | SSM_CAP_LAYOUTS,
    .check_config = check_config,
    .plan = plan,
    .create = create,
    .destroy = destroy,
    .reset_slot = reset_slot,
    .prefill = prefill,
    .decode = decode,
    .verify = verify,
    .commit = commit,
    .tune_space = tune_space,
    .tune_apply = tune_apply,
};
