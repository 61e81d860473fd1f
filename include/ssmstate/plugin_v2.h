/* ssmstate plugin ABI, version 2. FROZEN from its first release on, as
 * version 1 is (tests/check_abi_frozen.c pins both).
 *
 * Version 2 is version 1 with one addition: the mode parameters carry the
 * precision a prefill's products must keep (ssm_mode_params_v2). What v2
 * keeps unchanged it takes from plugin_v1.h under the v1 names: those
 * structs and constants are frozen, so they cannot change under a v2 plugin.
 * What changed has a v2 name: the parameters, and the table whose
 * check_config, plan and create take them. Every method's contract is
 * v1's (plugin_v1.h, docs/abi.md).
 *
 * A v2 plugin exports `ssm_plugin_entry_v2` (SSM_PLUGIN_V2_SYMBOL), a const
 * ssm_plugin_v2 with abi_version 2 and struct_size sizeof(ssm_plugin_v2): a
 * v2 table is whole, its optional methods NULL where the mode lacks them.
 * The loader probes v2 first, then v1, and runs a v1 plugin through an
 * adapter, so a v1 module keeps loading. */
#ifndef SSMSTATE_PLUGIN_V2_H
#define SSMSTATE_PLUGIN_V2_H

#include "ssmstate/plugin_v1.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSM_PLUGIN_V2_ABI_VERSION 2u
#define SSM_PLUGIN_V2_SYMBOL "ssm_plugin_entry_v2"

/* How a prefill may form its products (ssm_mode_params_v2.prefill_precision).
 * FAST: products on bf16 operands with fp32 accumulation are allowed; the
 * outputs and final state of a prefill stay within relative RMS 5e-3 of an
 * fp64 computation. HIGH: fp32-level products; with an fp32 state, the states
 * a prefill leaves on the CPU and on a device agree within relative RMS 1e-5.
 * A CPU prefill in fp32 meets both. */
enum {
    SSM_PREFILL_FAST = 0,
    SSM_PREFILL_HIGH = 1
};

/* ssm_mode_params_v1 and the prefill's precision. */
typedef struct ssm_mode_params_v2 {
    uint32_t struct_size;
    ssm_model_dims model;
    ssm_dtype state_dtype;
    ssm_dtype activation_dtype;
    ssm_device device;
    int32_t capacity;          /* slots in the pool */
    int32_t max_tokens;        /* T_max = 1 + max draft tokens, per verify row */
    int32_t options_count;     /* options from the section [<mode name>] */
    const ssm_option_v1 *options;
    int32_t prefill_precision; /* SSM_PREFILL_* */
} ssm_mode_params_v2;

typedef struct ssm_plugin_v2 {
    uint32_t abi_version;   /* SSM_PLUGIN_V2_ABI_VERSION */
    uint32_t struct_size;   /* sizeof(ssm_plugin_v2) */
    const char *name;       /* mode name, e.g. "native"; matches the file name */
    uint32_t mode_version;  /* the plugin's own version, for logs and pages */
    uint64_t capabilities;  /* SSM_CAP_* */

    ssm_status (*check_config)(const ssm_mode_params_v2 *params, char *why, size_t why_len,
                               int32_t *bad_option);
    ssm_status (*plan)(const ssm_mode_params_v2 *params, ssm_mode_plan_v1 *out);
    ssm_status (*create)(const ssm_mode_params_v2 *params, const ssm_services_v1 *svc,
                         void **instance);
    void (*destroy)(void *instance);

    ssm_status (*reset_slot)(void *instance, int32_t slot, void *stream);
    ssm_status (*prefill)(void *instance, const ssm_step_v1 *step);
    ssm_status (*decode)(void *instance, const ssm_step_v1 *step);
    ssm_status (*verify)(void *instance, const ssm_step_v1 *step);
    ssm_status (*commit)(void *instance, const ssm_commit_v1 *commit);

    /* May be NULL (see v1). */
    ssm_status (*export_slot)(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream);
    ssm_status (*import_slot)(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                              void *stream);
    ssm_status (*copy_slot)(void *instance, int32_t src_slot, int32_t dst_slot, void *stream);
    ssm_status (*materialize)(void *instance, const int32_t *slots, int32_t count, void *stream);
    ssm_status (*export_slots)(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, void *stream);
    ssm_status (*import_slots)(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, const uint32_t *refused,
                               void *stream);
    ssm_status (*tune_space)(void *instance, const ssm_tune_family_v1 **families,
                             int32_t *count);
    ssm_status (*tune_begin)(void *instance, int32_t max_rows, void *stream);
    ssm_status (*tune_run)(void *instance, ssm_tune_trial_v1 *trial);
    void (*tune_end)(void *instance);
    ssm_status (*tune_apply)(void *instance, const ssm_tune_choice_v1 *choices, int32_t count);
} ssm_plugin_v2;

#ifdef __cplusplus
}
#endif
#endif
