/* The chunked recurrence of one value head; the algebra is in chunk.h. */
#include "kernels/chunk.h"

#include "kernels/math.h"
#include "kernels/reference.h"

/* The largest key dim a config takes (core/config/limits.h, SSM_MAX_HEAD_DIM):
 * the room of a token's decays on the stack. */
enum { MAX_KEY_DIM = 1024 };

int64_t ssm_chunk_scratch_floats(int32_t k_dim, int32_t v_dim, int32_t chunk)
{
    return (int64_t)chunk * k_dim * 2   /* G (per channel or one), W */
           + (int64_t)chunk * chunk * 3 /* A, T, and the output weights */
           + (int64_t)chunk * v_dim;    /* U */
}

/* Where one chunk's matrices live in the scratch. */
typedef struct chunk_work {
    int32_t K, V, c, gk; /* gk: decay values per token (K or 1) */
    float *G;            /* [c][gk]: log-decay summed over the chunk's tokens 0..t */
    float *W;            /* [c][K] */
    float *A, *T, *QK;   /* [c][c] */
    float *U;            /* [c][V] */
} chunk_work;

/* e^{G_t - G_i} of key channel j (GDN: the one decay). */
static float decay_between(const chunk_work *w, int32_t t, int32_t i, int32_t j)
{
    int32_t at = w->gk == 1 ? 0 : j;
    return ssm_expf(w->G[(int64_t)t * w->gk + at] - w->G[(int64_t)i * w->gk + at]);
}

/* e^{G_t} of key channel j. */
static float decay_from_start(const chunk_work *w, int32_t t, int32_t j)
{
    return ssm_expf(w->G[(int64_t)t * w->gk + (w->gk == 1 ? 0 : j)]);
}

/* decay[j] = e^{G_t} of every key channel j < K (decay has room for the
 * config's largest head dim, MAX_KEY_DIM): the values decay_from_start
 * gives, taken once per token instead of once per use. */
static void decays_from_start(const chunk_work *w, int32_t t, float *decay)
{
    if (w->gk == 1) {
        float one = decay_from_start(w, t, 0);
        for (int32_t j = 0; j < w->K; j++)
            decay[j] = one;
        return;
    }
    for (int32_t j = 0; j < w->K; j++)
        decay[j] = decay_from_start(w, t, j);
}

/* Token t of the chunk starting at t0. */
static const float *q_of(const ssm_chunk_tokens *x, int64_t t) { return x->q + t * x->qk_stride; }
static const float *k_of(const ssm_chunk_tokens *x, int64_t t) { return x->k + t * x->qk_stride; }
static const float *v_of(const ssm_chunk_tokens *x, int64_t t) { return x->v + t * x->v_stride; }
static const float *g_of(const ssm_chunk_tokens *x, int64_t t) { return x->g + t * x->g_stride; }
static float beta_of(const ssm_chunk_tokens *x, int64_t t) { return x->beta[t * x->beta_stride]; }

/* G, A and the output weights QK[t][i] = sum_j D_ti[j] k_i[j] q_t[j]. */
static void chunk_pairs(chunk_work *w, const ssm_chunk_tokens *x, int64_t t0)
{
    for (int32_t t = 0; t < w->c; t++) {
        const float *g = g_of(x, t0 + t);
        for (int32_t j = 0; j < w->gk; j++)
            w->G[(int64_t)t * w->gk + j] = (t ? w->G[(int64_t)(t - 1) * w->gk + j] : 0.0f) + g[j];
    }
    for (int32_t t = 0; t < w->c; t++) {
        const float *kt = k_of(x, t0 + t), *qt = q_of(x, t0 + t);
        float beta = beta_of(x, t0 + t);
        for (int32_t i = 0; i <= t; i++) {
            const float *ki = k_of(x, t0 + i);
            float kk = 0.0f, kq = 0.0f;
            for (int32_t j = 0; j < w->K; j++) {
                float d = w->gk == 1 ? 1.0f : decay_between(w, t, i, j);
                kk += d * ki[j] * kt[j];
                kq += d * ki[j] * qt[j];
            }
            if (w->gk == 1) {
                float d = decay_between(w, t, i, 0);
                kk *= d;
                kq *= d;
            }
            w->A[(int64_t)t * w->c + i] = i < t ? beta * kk : 0.0f;
            w->QK[(int64_t)t * w->c + i] = kq;
        }
    }
}

/* T = (I + A)^-1 by forward substitution: T[t][t] = 1 and, for i < t,
 * T[t][i] = -sum_{m=i}^{t-1} A[t][m] T[m][i]. */
static void chunk_inverse(chunk_work *w)
{
    int32_t c = w->c;
    for (int32_t t = 0; t < c; t++) {
        for (int32_t i = 0; i < t; i++) {
            float sum = 0.0f;
            for (int32_t m = i; m < t; m++)
                sum += w->A[(int64_t)t * c + m] * w->T[(int64_t)m * c + i];
            w->T[(int64_t)t * c + i] = -sum;
        }
        w->T[(int64_t)t * c + t] = 1.0f;
        for (int32_t i = t + 1; i < c; i++)
            w->T[(int64_t)t * c + i] = 0.0f;
    }
}

/* W = T (beta e^G K), then U = T (beta V) - W S0^T. Token i's terms go into
 * every row t >= i in turn (i outer), so each row still sums its terms in
 * the order i = 0, 1, ..., t, and e^{G_i} is taken once per token. */
static void chunk_deltas(chunk_work *w, const ssm_chunk_tokens *x, int64_t t0, const float *S)
{
    int32_t c = w->c, K = w->K, V = w->V;
    float decay[MAX_KEY_DIM];
    for (int64_t f = 0; f < (int64_t)c * K; f++)
        w->W[f] = 0.0f;
    for (int64_t f = 0; f < (int64_t)c * V; f++)
        w->U[f] = 0.0f;
    for (int32_t i = 0; i < c; i++) {
        const float *ki = k_of(x, t0 + i), *vi = v_of(x, t0 + i);
        decays_from_start(w, i, decay);
        for (int32_t t = i; t < c; t++) {
            float *wt = w->W + (int64_t)t * K, *ut = w->U + (int64_t)t * V;
            float tb = w->T[(int64_t)t * c + i] * beta_of(x, t0 + i);
            for (int32_t j = 0; j < K; j++)
                wt[j] += tb * decay[j] * ki[j];
            for (int32_t e = 0; e < V; e++)
                ut[e] += tb * vi[e];
        }
    }
    for (int32_t t = 0; t < c; t++) {
        const float *wt = w->W + (int64_t)t * K;
        float *ut = w->U + (int64_t)t * V;
        for (int32_t e = 0; e < V; e++) {
            const float *row = S + (int64_t)e * K;
            float recalled = 0.0f;
            for (int32_t j = 0; j < K; j++)
                recalled += wt[j] * row[j];
            ut[e] -= recalled;
        }
    }
}

/* o_t = S0 (e^{G_t} q_t) + sum_{i<=t} QK[t][i] u_i, from the chunk's S0. */
static void chunk_outputs(const chunk_work *w, const ssm_chunk_tokens *x, int64_t t0,
                          const float *S, float *o, int64_t o_stride)
{
    int32_t c = w->c, K = w->K, V = w->V;
    float decay[MAX_KEY_DIM];
    for (int32_t t = 0; t < c; t++) {
        const float *qt = q_of(x, t0 + t);
        float *ot = o + (t0 + t) * o_stride;
        decays_from_start(w, t, decay);
        for (int32_t e = 0; e < V; e++) {
            const float *row = S + (int64_t)e * K;
            float acc = 0.0f;
            for (int32_t j = 0; j < K; j++)
                acc += row[j] * decay[j] * qt[j];
            for (int32_t i = 0; i <= t; i++)
                acc += w->QK[(int64_t)t * c + i] * w->U[(int64_t)i * V + e];
            ot[e] = acc;
        }
    }
}

/* S = e^{G_last} S0 + sum_i u_i (D_last,i . k_i)^T, rounded to the state dtype.
 * Row by row (e inner of i): each element still gets its one decay and then
 * its terms in the order i = 0, 1, ..., c - 1. */
static void chunk_state(const chunk_work *w, const ssm_chunk_tokens *x, int64_t t0,
                        ssm_dtype state_dtype, float *S)
{
    int32_t c = w->c, K = w->K, V = w->V, last = c - 1;
    float scaled[MAX_KEY_DIM]; /* e^{G_last}, then D_last,i . k_i */
    decays_from_start(w, last, scaled);
    for (int32_t e = 0; e < V; e++)
        for (int32_t j = 0; j < K; j++)
            S[(int64_t)e * K + j] *= scaled[j];
    for (int32_t i = 0; i < c; i++) {
        const float *ki = k_of(x, t0 + i);
        const float *ui = w->U + (int64_t)i * V;
        for (int32_t j = 0; j < K; j++)
            scaled[j] = decay_between(w, last, i, j) * ki[j];
        for (int32_t e = 0; e < V; e++) {
            float *row = S + (int64_t)e * K;
            for (int32_t j = 0; j < K; j++)
                row[j] += ui[e] * scaled[j];
        }
    }
    for (int64_t e = 0; e < (int64_t)V * K; e++)
        S[e] = ssm_ref_round(state_dtype, S[e]);
}

void ssm_chunk_head(int32_t k_dim, int32_t v_dim, int per_channel_gate, int32_t chunk,
                    const ssm_chunk_tokens *tokens, int64_t n, ssm_dtype state_dtype, float *S,
                    float *o, int64_t o_stride, float *scratch)
{
    chunk_work w;
    w.K = k_dim;
    w.V = v_dim;
    w.gk = per_channel_gate ? k_dim : 1;
    w.G = scratch;
    w.W = w.G + (int64_t)chunk * k_dim;
    w.A = w.W + (int64_t)chunk * k_dim;
    w.T = w.A + (int64_t)chunk * chunk;
    w.QK = w.T + (int64_t)chunk * chunk;
    w.U = w.QK + (int64_t)chunk * chunk;
    for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        w.c = (int32_t)(n - t0 < chunk ? n - t0 : chunk);
        chunk_pairs(&w, tokens, t0);
        chunk_inverse(&w);
        chunk_deltas(&w, tokens, t0, S);
        if (o)
            chunk_outputs(&w, tokens, t0, S, o, o_stride);
        chunk_state(&w, tokens, t0, state_dtype, S);
    }
}

int64_t ssm_chunk_sequence_scratch_floats(const ssm_model_dims *m)
{
    int64_t K = m->key_dim, V = m->value_dim;
    return ssm_conv_channels(m)                                   /* one token's conv */
           + SSM_CHUNK_TOKENS * ssm_ref_token_floats(m)           /* a chunk's tokens */
           + V * K + SSM_CHUNK_TOKENS * V                         /* a head's S and outputs */
           + ssm_chunk_scratch_floats((int32_t)K, (int32_t)V, SSM_CHUNK_TOKENS);
}

/* Runs c prepared tokens (token t at tokens + t * stride) of every value
 * head through one chunk, from and back to the layer's state; outputs of
 * the chunk's first token go to `out` (token-major [c][HV][V], act). */
static void chunk_heads(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                        const ssm_ref_token *first, int64_t stride, int32_t c, void *state,
                        void *out, float *S, float *o, float *scratch)
{
    int32_t K = m->key_dim, V = m->value_dim, group = m->value_heads / m->heads;
    int kda = m->kind == SSM_MODEL_KDA;
    int64_t head = (int64_t)V * K, out_width = (int64_t)m->value_heads * V;
    for (int32_t h = 0; h < m->value_heads; h++) {
        int64_t key = (int64_t)(h / group) * K;
        ssm_chunk_tokens x = {first->q + key, first->k + key, first->v + (int64_t)h * V,
                              first->g + (kda ? (int64_t)h * K : h), first->beta + h,
                              stride, stride, stride, stride};
        for (int64_t e = 0; e < head; e++)
            S[e] = ssm_ref_load(state, state_dtype, h * head + e);
        ssm_chunk_head(K, V, kda, SSM_CHUNK_TOKENS, &x, c, state_dtype, S, out ? o : NULL, V,
                       scratch);
        for (int64_t e = 0; e < head; e++)
            ssm_ref_store(state, state_dtype, h * head + e, S[e]);
        if (out)
            for (int32_t t = 0; t < c; t++)
                for (int32_t e = 0; e < V; e++)
                    ssm_ref_store(out, act, t * out_width + (int64_t)h * V + e,
                                  o[(int64_t)t * V + e]);
    }
}

void ssm_chunk_sequence(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                        const ssm_layer_weights *w, void *window, void *state,
                        const ssm_step_io *io, int64_t n, float *scratch)
{
    int64_t tf = ssm_ref_token_floats(m), out_width = (int64_t)m->value_heads * m->value_dim;
    float *conv = scratch, *tokens = conv + ssm_conv_channels(m);
    float *S = tokens + SSM_CHUNK_TOKENS * tf, *o = S + (int64_t)m->value_dim * m->key_dim;
    float *chunk_scratch = o + (int64_t)SSM_CHUNK_TOKENS * m->value_dim;
    ssm_ref_token first;
    ssm_ref_token_bind(m, tokens, &first);
    /* As in ssm_ref_sequence, the window stays as it was until the end. */
    for (int64_t t0 = 0; t0 < n; t0 += SSM_CHUNK_TOKENS) {
        int32_t c = (int32_t)(n - t0 < SSM_CHUNK_TOKENS ? n - t0 : SSM_CHUNK_TOKENS);
        for (int32_t t = 0; t < c; t++) {
            ssm_ref_token tok;
            ssm_ref_token_bind(m, tokens + t * tf, &tok);
            ssm_ref_prepare_token(m, act, w, window, io, t0 + t, conv, &tok);
        }
        void *out = io->out ? (char *)io->out + (size_t)(t0 * out_width) * ssm_dtype_size(act)
                            : NULL;
        chunk_heads(m, state_dtype, act, &first, tf, c, state, out, S, o, chunk_scratch);
    }
    ssm_ref_conv_window_advance(m, act, window, io->x, n);
}
