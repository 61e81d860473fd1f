/* CPU step drivers shared by the built-in modes: the row loops of prefill and
 * decode (each row a sequence through ssm_ref_sequence on the slot's conv
 * buffer and current state), the non-finite check, and the scratch split
 * single-token work uses. A mode says where a slot's buffers are; the loop is
 * written once. */
#ifndef SSM_COMMON_CPU_STEPS_H
#define SSM_COMMON_CPU_STEPS_H

#include "kernels/reference.h"
#include "ssmstate/plugin.h"

/* Where a mode keeps a slot's conv buffer and the state a sequence updates. */
typedef struct ssm_cpu_target {
    void *mode;
    void *(*conv_buffer)(void *mode, int32_t slot, int32_t layer);
    void *(*state)(void *mode, int32_t slot, int32_t layer);
} ssm_cpu_target;

/* Floats of scratch the drivers and ssm_cpu_token_scratch need. */
int64_t ssm_cpu_scratch_floats(const ssm_model_dims *m);

/* Runs every live row of a prefill (token_offsets set: the chunked form,
 * ssm_chunk_sequence) or a decode (one token per row: ssm_ref_sequence) in
 * row order, raising SSM_FLAG_NONFINITE_INPUT for rows whose
 * inputs are not finite (the row is still computed). */
void ssm_cpu_run_sequences(const ssm_mode_params_v2 *p, const ssm_services_v1 *services,
                           const ssm_step_v1 *step, const ssm_cpu_target *target, float *scratch);

/* The canonical form (plugin_v1.h) of a slot, every layer: the window rows
 * of its conv buffer and the state the target names. Export copies out of
 * the slot, import into it, copy from one slot to another; none touches any
 * other part of a mode's storage (the caller resets what it must first). */
void ssm_cpu_export_canonical(const ssm_mode_params_v2 *p, const ssm_cpu_target *target,
                              int32_t slot, const ssm_canonical_v1 *dst);
void ssm_cpu_import_canonical(const ssm_mode_params_v2 *p, const ssm_cpu_target *target,
                              int32_t slot, const ssm_canonical_v1 *src);
void ssm_cpu_copy_canonical(const ssm_mode_params_v2 *p, const ssm_cpu_target *target,
                            int32_t src_slot, int32_t dst_slot);

/* Raises the non-finite flag of `slot` if tokens [0, tokens) of io are not all finite. */
void ssm_cpu_flag_nonfinite(const ssm_mode_params_v2 *p, const ssm_services_v1 *services,
                            int32_t slot, const ssm_step_io *io, int64_t tokens);

/* Scratch of ssm_cpu_scratch_floats split for one token: conv output c[D],
 * the derived token, and one head's working state. */
typedef struct ssm_cpu_token_scratch {
    float *conv;
    ssm_ref_token token;
    float *head;
} ssm_cpu_token_scratch;
ssm_cpu_token_scratch ssm_cpu_token_scratch_split(const ssm_model_dims *m, float *scratch);

#endif
