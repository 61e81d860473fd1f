/* The adapter that runs a plugin of ABI v1 as a v2 one (docs/abi.md,
 * "Freeze"): its table copied into the v2 struct, and the three methods that
 * take the mode parameters called with the parameters v1 knows. Only the
 * loader's functions here know that versions exist. */
#include <string.h>

#include "core/loader.h"

void ssm_loader_v1_adopt(const ssm_plugin_v1 *table, ssm_loaded_plugin *plugin)
{
    size_t size = table->struct_size < sizeof plugin->v1 ? table->struct_size : sizeof plugin->v1;
    memset(&plugin->v1, 0, sizeof plugin->v1);
    memcpy(&plugin->v1, table, size);
    const ssm_plugin_v1 *t = &plugin->v1;
    ssm_plugin_v2 *v2 = &plugin->table;
    memset(v2, 0, sizeof *v2);
    v2->abi_version = t->abi_version;
    v2->struct_size = sizeof *v2;
    v2->name = t->name;
    v2->mode_version = t->mode_version;
    v2->capabilities = t->capabilities;
    /* check_config, plan and create stay NULL: ssm_loader_* call t's. */
    v2->destroy = t->destroy;
    v2->reset_slot = t->reset_slot;
    v2->prefill = t->prefill;
    v2->decode = t->decode;
    v2->verify = t->verify;
    v2->commit = t->commit;
    v2->export_slot = t->export_slot;
    v2->import_slot = t->import_slot;
    v2->copy_slot = t->copy_slot;
    v2->materialize = t->materialize;
    v2->export_slots = t->export_slots;
    v2->import_slots = t->import_slots;
    v2->tune_space = t->tune_space;
    v2->tune_begin = t->tune_begin;
    v2->tune_run = t->tune_run;
    v2->tune_end = t->tune_end;
    v2->tune_apply = t->tune_apply;
}

void ssm_loader_v1_params(const ssm_mode_params_v2 *p, ssm_mode_params_v1 *out)
{
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    out->model = p->model;
    out->state_dtype = p->state_dtype;
    out->activation_dtype = p->activation_dtype;
    out->device = p->device;
    out->capacity = p->capacity;
    out->max_tokens = p->max_tokens;
    out->options_count = p->options_count;
    out->options = p->options;
}

ssm_status ssm_loader_check_config(const ssm_loaded_plugin *plugin, const ssm_mode_params_v2 *p,
                                 char *why, size_t why_len, int32_t *bad_option)
{
    if (plugin->abi_version != 1)
        return plugin->table.check_config(p, why, why_len, bad_option);
    ssm_mode_params_v1 v1;
    ssm_loader_v1_params(p, &v1);
    return plugin->v1.check_config(&v1, why, why_len, bad_option);
}

ssm_status ssm_loader_plan(const ssm_loaded_plugin *plugin, const ssm_mode_params_v2 *p,
                         ssm_mode_plan_v1 *out)
{
    if (plugin->abi_version != 1)
        return plugin->table.plan(p, out);
    ssm_mode_params_v1 v1;
    ssm_loader_v1_params(p, &v1);
    return plugin->v1.plan(&v1, out);
}

ssm_status ssm_loader_create(ssm_loaded_plugin *plugin, const ssm_mode_params_v2 *p,
                           const ssm_services_v1 *svc, void **instance)
{
    if (plugin->abi_version != 1)
        return plugin->table.create(p, svc, instance);
    /* Kept beside the table: an instance may hold on to its parameters. */
    ssm_loader_v1_params(p, &plugin->v1_params);
    return plugin->v1.create(&plugin->v1_params, svc, instance);
}
