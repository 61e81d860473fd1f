/* ssmstate plugin ABI: the umbrella header. A plugin author includes this and
 * gets the newest ABI under version-free names; the versioned headers stay
 * frozen so old plugins keep building. */
#ifndef SSMSTATE_PLUGIN_H
#define SSMSTATE_PLUGIN_H

#include "ssmstate/plugin_v2.h"

#define SSM_PLUGIN_ABI_VERSION SSM_PLUGIN_V2_ABI_VERSION
#define SSM_PLUGIN_SYMBOL SSM_PLUGIN_V2_SYMBOL
typedef ssm_plugin_v2 ssm_plugin;
typedef ssm_services_v1 ssm_services;
typedef ssm_mode_params_v2 ssm_mode_params;
typedef ssm_mode_plan_v1 ssm_mode_plan;
typedef ssm_option_v1 ssm_option;
typedef ssm_step_v1 ssm_step;
typedef ssm_commit_v1 ssm_commit_args;
typedef ssm_canonical_v1 ssm_canonical;
typedef ssm_page_view_v1 ssm_page_view;

/* Defines the module's one exported symbol. Use it once per plugin:
 *   SSM_PLUGIN_EXPORT const ssm_plugin_v2 ssm_plugin_entry_v2 = { ... }; */
#if defined(__GNUC__)
#define SSM_PLUGIN_EXPORT __attribute__((visibility("default")))
#else
#define SSM_PLUGIN_EXPORT
#endif

#endif
