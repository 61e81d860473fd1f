/* The replay identity on the CPU (docs/modes.md): outputs of new tokens from a
 * checkpoint S0 and the records appended since it, without writing any state.
 *
 * With G_i = g_1 + ... + g_i (own gate included) and u_i the delta-rule value
 * of record i, token p (record index p) sees
 *   r_p = e^{G_p} S0 k_p + sum_{i<p}  e^{G_p-G_i} (k_i . k_p) u_i
 *   u_p = beta_p (v_p - r_p)
 *   o_p = e^{G_p} S0 q_p + sum_{i<=p} e^{G_p-G_i} (k_i . q_p) u_i
 * For KDA the exponentials are per key channel and sit inside the
 * k-contraction. Every decay is expf of a difference G_p - G_i <= 0, never a
 * ratio of two exponentials, so nothing overflows however long the history.
 * S0 is read in the state dtype and widened; nothing in between is rounded,
 * which is why replay outputs match native's within the contract's tolerance and
 * not bit for bit. Exactness lives in the fold: the raw part of each record
 * goes through ssm_record_apply, the update native runs.
 *
 * A history lives in a flat array of records that a fold empties, so record
 * i always sits at index i (the cursor never wraps). */
#ifndef SSM_KERNELS_REPLAY_H
#define SSM_KERNELS_REPLAY_H

#include "kernels/record.h"

/* How the output math is organized. Both compute the identity above. */
typedef enum ssm_replay_form {
    /* Token by token, decay applied per key channel: any gate (GDN, KDA). */
    SSM_REPLAY_RECURRENT = 0,
    /* Per row: S0 is read once for all tokens, and the history enters as
     * dot-product matrices times one decay factor per (token, record) pair.
     * That factor exists only for a scalar gate: GDN only. For GDN the two
     * forms give the same bits. */
    SSM_REPLAY_MATRIX = 1
} ssm_replay_form;

/* One record: the raw token record of record.h at offset 0 (what a fold
 * applies), then u [HV][V] fp32, then G [HV] (GDN) or [HV][K] (KDA) as two
 * fp32 arrays: the running sum and its accumulated rounding error, so that
 * G_p - G_i stays accurate to fp32 however large |G| grows.
 * The normalized key is not kept: ssm_replay_load_keys recomputes it from the
 * raw part with the same normalization, bit for bit, for half the bytes. */
size_t ssm_replay_record_bytes(const ssm_model_dims *m, ssm_dtype act);

/* One (slot, layer) as the output math sees it. */
typedef struct ssm_replay_history {
    const void *checkpoint; /* S0 [HV][V][K], state dtype */
    uint8_t *records;       /* record i at records + i * ssm_replay_record_bytes */
    float *keys;            /* [history][H][K]: the normalized key of each record */
} ssm_replay_history;

/* Fills keys[i] for records first <= i < last from their raw parts.
 * token_scratch holds ssm_ref_token_floats floats. */
void ssm_replay_load_keys(const ssm_model_dims *m, ssm_dtype act, const ssm_replay_history *h,
                          int32_t first, int32_t last, float *token_scratch);

/* Writes record `index` of a prepared token (c: its conv output, already
 * rounded to act): the raw part, G = G_{index-1} + g (g at index 0), and
 * keys[index]. Its u is written by ssm_replay_outputs. */
void ssm_replay_append(const ssm_model_dims *m, ssm_dtype act, const ssm_replay_history *h,
                       int32_t index, const float *c, const ssm_ref_token *tok);

/* Floats of scratch ssm_replay_outputs needs for histories of up to
 * `history` records and rows of up to max_tokens tokens. */
int64_t ssm_replay_outputs_scratch_floats(const ssm_model_dims *m, int32_t history,
                                          int32_t max_tokens);

/* Outputs of `tokens` consecutive tokens of one row, whose records
 * first .. first+tokens-1 were appended (records before `first` are complete).
 * tok[t] holds token t's q, v and beta. In token order, writes u_p into
 * record p and o_p to out ([tokens][HV][V], act). Reads the checkpoint,
 * never writes it. SSM_REPLAY_MATRIX requires a GDN model. */
void ssm_replay_outputs(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                        ssm_replay_form form, const ssm_replay_history *h, int32_t first,
                        int32_t tokens, const ssm_ref_token *tok, void *out, float *scratch);

/* Replay's fold rule on the CPU (docs/modes.md, "The fold rule"): before a
 * step of `tokens` tokens, a (slot, layer) holding n records since its
 * checkpoint folds when n + 2 tokens could pass its ring of `history`
 * records. The CPU plugin applies it; the command counts folds with it. */
static inline int ssm_replay_folds(int32_t n, int32_t tokens, int32_t history)
{
    return n + 2 * tokens > history;
}

#endif
