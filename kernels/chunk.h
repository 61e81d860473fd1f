/* The chunked form of the recurrence (docs/prefill.md): a run of
 * tokens of one value head, processed in chunks of up to `chunk` tokens.
 * Within a chunk of c tokens starting from the state S0 ([V][K]), with G_t
 * the log-decay summed from the chunk's first token to token t (one value
 * for GDN, one per key channel for KDA) and D_ti = e^{G_t - G_i}, always
 * formed from the difference, never as a ratio of exponentials:
 *
 *   A[t][i] = beta_t sum_c D_ti[c] k_i[c] k_t[c]   (i < t)
 *   T       = (I + A)^-1                           (unit lower triangular)
 *   W       = T (beta . e^G . K),  Uv = T (beta . V)   (the WY form)
 *   U       = Uv - W S0^T                           (row t: token t's delta u_t)
 *   o_t     = S0 (e^{G_t} . q_t) + sum_{i<=t} (sum_c D_ti[c] k_i[c] q_t[c]) u_i
 *   S       = e^{G_last} . S0 + sum_i u_i (D_last,i . k_i)^T
 *
 * ("." scales per key channel; for GDN by one factor.) In exact arithmetic
 * this is the sequential update token by token; in fp32 it differs by
 * rounding, and the state is rounded to the state dtype at each chunk's end
 * rather than after every token, so the numerics contract compares it with
 * the fp64 reference at 5e-3 (chunked prefill), not bit for bit. It is the
 * algorithm a tensor-core prefill runs (T, W and U are dense products);
 * here it is plain fp32 loops, testable without a GPU. */
#ifndef SSM_KERNELS_CHUNK_H
#define SSM_KERNELS_CHUNK_H

#include <stdint.h>

#include "ssmstate/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The chunk length of the prefill: 64 tokens. */
#define SSM_CHUNK_TOKENS 64

/* One value head's tokens: token t's key-head vectors at q + t * qk_stride
 * and k + t * qk_stride ([K], q normalized and scaled, k normalized), its
 * value at v + t * v_stride ([V]), its log-decay at g + t * g_stride (1
 * value, or K when per_channel_gate), its beta at beta[t * beta_stride]. */
typedef struct ssm_chunk_tokens {
    const float *q, *k, *v, *g, *beta;
    int64_t qk_stride, v_stride, g_stride, beta_stride;
} ssm_chunk_tokens;

/* Floats of scratch ssm_chunk_head needs for chunks of `chunk` tokens. */
int64_t ssm_chunk_scratch_floats(int32_t k_dim, int32_t v_dim, int32_t chunk);

/* Runs tokens [0, n) of one value head through the chunked form, chunks of
 * `chunk` tokens (1..SSM_CHUNK_TOKENS), from the fp32 head state S [V][K],
 * left in S after the last token (rounded to state_dtype at every chunk's
 * end). Writes token t's output to o + t * o_stride ([V] fp32) when o is
 * not NULL. */
void ssm_chunk_head(int32_t k_dim, int32_t v_dim, int per_channel_gate, int32_t chunk,
                    const ssm_chunk_tokens *tokens, int64_t n, ssm_dtype state_dtype, float *S,
                    float *o, int64_t o_stride, float *scratch);

/* Floats of scratch ssm_chunk_sequence needs. */
int64_t ssm_chunk_sequence_scratch_floats(const ssm_model_dims *m);

/* ssm_ref_sequence's contract (kernels/reference.h) through the chunked
 * form: n tokens of one request through one layer, chunks of
 * SSM_CHUNK_TOKENS; outputs token-major to io->out (act dtype), the state
 * ([HV][V][K], state dtype) and the window ([W-1][D]) updated in place. The
 * tokens are prepared (conv, normalization, gates) exactly as the reference
 * prepares them; only the recurrence differs, by the contract's chunked bound
 * (docs/numerics.md). */
void ssm_chunk_sequence(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                        const ssm_layer_weights *w, void *window, void *state,
                        const ssm_step_io *io, int64_t n, float *scratch);

#ifdef __cplusplus
}
#endif

#endif
