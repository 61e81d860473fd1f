/* CPU reference of the computation (docs/numerics.md): the oracle every mode and every kernel is
 * measured against, and the CPU path of every plugin. All arithmetic is fp32
 * with these rounding points:
 *   - the conv output (after SiLU) is rounded to the activation dtype;
 *   - q and k are normalized in fp32 from those rounded values;
 *   - after each token the state is rounded to the state dtype; the token's
 *     output is computed from the fp32 state before that rounding.
 * Every loop runs in a fixed order (ascending index), so results are
 * reproducible bit for bit on one machine.
 *
 * Tensors follow types.h: activations token-major in the activation dtype,
 * state [HV][V][K] in the state dtype, conv window [W-1][D] in the activation
 * dtype (oldest first), weights fp32. */
#ifndef SSM_KERNELS_REFERENCE_H
#define SSM_KERNELS_REFERENCE_H

#include "ssmstate/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element i of a tensor of dtype t (f32 or bf16), widened to fp32. */
float ssm_ref_load(const void *base, ssm_dtype t, int64_t i);
/* Stores v rounded to dtype t (bf16: round to nearest even). */
void ssm_ref_store(void *base, ssm_dtype t, int64_t i, float v);
/* v rounded to dtype t and widened back (identity for f32). */
float ssm_ref_round(ssm_dtype t, float v);

/* The derived inputs of one token, as the recurrence consumes them. */
typedef struct ssm_ref_token {
    float *q;    /* [H][K], normalized and scaled by K^-0.5 */
    float *k;    /* [H][K], normalized */
    float *v;    /* [HV][V] */
    float *g;    /* [HV] (GDN) or [HV][K] (KDA): natural-log decay, <= 0 */
    float *beta; /* [HV] */
} ssm_ref_token;

/* Floats of scratch one ssm_ref_token needs (see ssm_ref_token_bind). */
int64_t ssm_ref_token_floats(const ssm_model_dims *m);
/* Points the fields of *tok into `scratch` (ssm_ref_token_floats floats). */
void ssm_ref_token_bind(const ssm_model_dims *m, float *scratch, ssm_ref_token *tok);

/* Conv for token t of `x` ([n][D], activation dtype): the W inputs ending at
 * t come from `window` ([W-1][D], oldest first) for positions before 0 and
 * from x otherwise. Writes c[D] = silu(bias + sum w*x), rounded to `act`. */
void ssm_ref_conv_token(const ssm_model_dims *m, ssm_dtype act, const ssm_layer_weights *w,
                        const void *window, const void *x, int64_t t, float *c);

/* window := the last W-1 inputs of [window; x[0..n)] (any n >= 0). */
void ssm_ref_conv_window_advance(const ssm_model_dims *m, ssm_dtype act, void *window,
                                 const void *x, int64_t n);

/* Splits c[D] into q, k, v and normalizes q and k per head. */
void ssm_ref_split_normalize(const ssm_model_dims *m, const float *c, ssm_ref_token *tok);

/* Normalizes one head vector of length K in place: x / sqrt(sum x^2 + 1e-6) * scale. */
void ssm_ref_l2_normalize(int32_t k_dim, float *x, float scale);

/* Gate and beta of one token from the raw inputs (activation dtype):
 * gate_in [HV] (GDN) or [HV][K] (KDA), beta_in [HV]. */
void ssm_ref_gates(const ssm_model_dims *m, ssm_dtype act, const ssm_layer_weights *w,
                   const void *gate_in, const void *beta_in, ssm_ref_token *tok);

/* conv + split/normalize + gates for token t of a run; c_scratch holds D floats. */
void ssm_ref_prepare_token(const ssm_model_dims *m, ssm_dtype act, const ssm_layer_weights *w,
                           const void *window, const ssm_step_io *io, int64_t t,
                           float *c_scratch, ssm_ref_token *tok);

/* The one-token update of one value head on an fp32 head
 * state S[V][K]: decay, delta rule, output o[V] (if o != NULL) from the fp32
 * state, then S rounded to state_dtype in place. g points at 1 value (GDN) or
 * K values (KDA). q, k are the key head's vectors. */
void ssm_ref_head_update(int32_t k_dim, int32_t v_dim, int per_channel_gate, const float *q,
                         const float *k, const float *v, const float *g, float beta,
                         ssm_dtype state_dtype, float *S, float *o);

/* One token over all value heads: reads state_in ([HV][V][K], state dtype),
 * writes state_out (may be the same memory), and the token's output (if out
 * != NULL) to out [HV][V] in `act` at element offset 0. head_scratch holds
 * V*K + V floats. */
void ssm_ref_token_update(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                          const ssm_ref_token *tok, const void *state_in, void *state_out,
                          void *out, float *head_scratch);

/* Floats of scratch ssm_ref_sequence needs. */
int64_t ssm_ref_sequence_scratch_floats(const ssm_model_dims *m);

/* Runs n tokens of one request through one layer, in order: outputs to
 * io->out (token-major), state ([HV][V][K], state dtype) and window ([W-1][D])
 * updated in place. io holds the n tokens' inputs at offsets 0..n-1. */
void ssm_ref_sequence(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                      const ssm_layer_weights *w, void *window, void *state,
                      const ssm_step_io *io, int64_t n, float *scratch);

/* Returns 1 if every input element of tokens [t0, t1) of io is finite. */
int ssm_ref_inputs_finite(const ssm_model_dims *m, ssm_dtype act, const ssm_step_io *io,
                          int64_t t0, int64_t t1);

/* Elements of one layer's matrix state and conv window. */
static inline int64_t ssm_ref_state_elems(const ssm_model_dims *m)
{
    return (int64_t)m->value_heads * m->value_dim * m->key_dim;
}
static inline int64_t ssm_ref_window_elems(const ssm_model_dims *m)
{
    return (int64_t)(m->conv_width - 1) * ssm_conv_channels(m);
}

#ifdef __cplusplus
}
#endif
#endif
