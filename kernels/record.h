/* A token record: exactly what the one-token update consumes, kept so that
 * replaying it reproduces the update bit for bit (compact's commit, replay's
 * folds): the
 * post-conv k (before normalization) and v as the conv produced them, in the
 * activation dtype (they were rounded to it, so nothing is lost), and the gate
 * g and beta in fp32 as computed from the raw inputs. Normalizing k again with
 * the same function gives the same bits. Compact commits and replay folds both
 * apply records through ssm_record_apply, the very update native runs.
 *
 * Layout of one record (each part starts at a 16-byte boundary):
 * k [H][K] act | v [HV][V] act | g [HV] or [HV][K] f32 | beta [HV] f32. */
#ifndef SSM_KERNELS_RECORD_H
#define SSM_KERNELS_RECORD_H

#include "kernels/reference.h"

/* Bytes of one record. */
size_t ssm_record_bytes(const ssm_model_dims *m, ssm_dtype act);

/* Writes the record of a token from its conv output c[D] (already rounded to
 * act) and its derived gates (tok->g, tok->beta). */
void ssm_record_store(const ssm_model_dims *m, ssm_dtype act, const float *c,
                      const ssm_ref_token *tok, void *record);

/* Reads a record into tok->k (normalized), tok->v, tok->g and tok->beta;
 * tok->q is left alone. */
void ssm_record_load(const ssm_model_dims *m, ssm_dtype act, const void *record,
                     ssm_ref_token *tok);

/* Floats of scratch ssm_record_apply needs. */
int64_t ssm_record_apply_scratch_floats(const ssm_model_dims *m);

/* Applies a record to a state ([HV][V][K], state dtype) in place, exactly as
 * ssm_ref_token_update applied the token it came from (no output). */
void ssm_record_apply(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                      const void *record, void *state, float *scratch);

#endif
