/* CPU reference of the computation (docs/numerics.md); the contracts are in reference.h. Scalar
 * math comes from kernels/math.h so the CUDA kernels share its op order. */
#include <math.h>
#include <string.h>

#include "kernels/math.h"
#include "kernels/reference.h"

float ssm_ref_load(const void *base, ssm_dtype t, int64_t i)
{
    switch (t) {
    case SSM_DTYPE_F32:
        return ((const float *)base)[i];
    case SSM_DTYPE_BF16:
        return ssm_bf16_to_f32(((const uint16_t *)base)[i]);
    default: /* fp16 is not offered; NaN makes a wrong dtype loud */
        return NAN;
    }
}

void ssm_ref_store(void *base, ssm_dtype t, int64_t i, float v)
{
    switch (t) {
    case SSM_DTYPE_F32:
        ((float *)base)[i] = v;
        break;
    case SSM_DTYPE_BF16:
        ((uint16_t *)base)[i] = ssm_f32_to_bf16(v);
        break;
    default:
        break;
    }
}

float ssm_ref_round(ssm_dtype t, float v)
{
    switch (t) {
    case SSM_DTYPE_F32:
        return v;
    case SSM_DTYPE_BF16:
        return ssm_bf16_round(v);
    default:
        return NAN;
    }
}

/* Address of element i of a tensor of dtype t. */
static const void *element_at(const void *base, ssm_dtype t, int64_t i)
{
    return (const char *)base + (size_t)i * ssm_dtype_size(t);
}

static int is_kda(const ssm_model_dims *m)
{
    return m->kind == SSM_MODEL_KDA;
}

static int64_t head_floats(const ssm_model_dims *m)
{
    return (int64_t)m->heads * m->key_dim;
}

int64_t ssm_ref_token_floats(const ssm_model_dims *m)
{
    return 2 * head_floats(m) + (int64_t)m->value_heads * m->value_dim + ssm_gate_width(m) +
           m->value_heads;
}

void ssm_ref_token_bind(const ssm_model_dims *m, float *scratch, ssm_ref_token *tok)
{
    tok->q = scratch;
    tok->k = tok->q + head_floats(m);
    tok->v = tok->k + head_floats(m);
    tok->g = tok->v + (int64_t)m->value_heads * m->value_dim;
    tok->beta = tok->g + ssm_gate_width(m);
}

void ssm_ref_conv_token(const ssm_model_dims *m, ssm_dtype act, const ssm_layer_weights *w,
                        const void *window, const void *x, int64_t t, float *c)
{
    int64_t d_count = ssm_conv_channels(m);
    int32_t width = m->conv_width;
    for (int64_t d = 0; d < d_count; d++) {
        /* Bias first, then taps oldest to newest (causal-conv1d's order). */
        float acc = w->conv_bias ? w->conv_bias[d] : 0.0f;
        for (int32_t i = 0; i < width; i++) {
            int64_t pos = t - (width - 1) + i;
            float in = pos < 0 ? ssm_ref_load(window, act, (width - 1 + pos) * d_count + d)
                               : ssm_ref_load(x, act, pos * d_count + d);
            acc += w->conv_weight[d * width + i] * in;
        }
        c[d] = ssm_ref_round(act, ssm_silu(acc));
    }
}

void ssm_ref_conv_window_advance(const ssm_model_dims *m, ssm_dtype act, void *window,
                                 const void *x, int64_t n)
{
    int64_t rows = m->conv_width - 1;
    size_t row_bytes = (size_t)ssm_conv_channels(m) * ssm_dtype_size(act);
    if (rows == 0 || n <= 0)
        return;
    if (n >= rows) {
        memcpy(window, element_at(x, act, (n - rows) * ssm_conv_channels(m)), rows * row_bytes);
        return;
    }
    /* Fewer new inputs than rows: the newest old rows move to the front. */
    memmove(window, (char *)window + n * row_bytes, (rows - n) * row_bytes);
    memcpy((char *)window + (rows - n) * row_bytes, x, n * row_bytes);
}

void ssm_ref_l2_normalize(int32_t k_dim, float *x, float scale)
{
    float sum_of_squares = 0.0f;
    for (int32_t i = 0; i < k_dim; i++)
        sum_of_squares += x[i] * x[i];
    float inv = ssm_l2_inv(sum_of_squares);
    for (int32_t i = 0; i < k_dim; i++)
        x[i] = (x[i] * inv) * scale;
}

void ssm_ref_split_normalize(const ssm_model_dims *m, const float *c, ssm_ref_token *tok)
{
    int64_t qk = head_floats(m);
    memcpy(tok->q, c, sizeof(float) * qk);
    memcpy(tok->k, c + qk, sizeof(float) * qk);
    memcpy(tok->v, c + 2 * qk, sizeof(float) * m->value_heads * m->value_dim);
    float scale = ssm_query_scale(m->key_dim);
    for (int32_t h = 0; h < m->heads; h++) {
        ssm_ref_l2_normalize(m->key_dim, tok->q + (int64_t)h * m->key_dim, scale);
        ssm_ref_l2_normalize(m->key_dim, tok->k + (int64_t)h * m->key_dim, 1.0f);
    }
}

void ssm_ref_gates(const ssm_model_dims *m, ssm_dtype act, const ssm_layer_weights *w,
                   const void *gate_in, const void *beta_in, ssm_ref_token *tok)
{
    for (int32_t h = 0; h < m->value_heads; h++) {
        if (is_kda(m)) {
            for (int32_t k = 0; k < m->key_dim; k++) {
                int64_t i = (int64_t)h * m->key_dim + k;
                tok->g[i] = ssm_kda_gate(w->a_log[h], ssm_ref_load(gate_in, act, i),
                                         w->dt_bias[i], m->has_lower_bound, m->lower_bound);
            }
        } else {
            tok->g[h] = ssm_gdn_gate(w->a_log[h], ssm_ref_load(gate_in, act, h), w->dt_bias[h]);
        }
        tok->beta[h] = ssm_sigmoid(ssm_ref_load(beta_in, act, h));
    }
}

void ssm_ref_prepare_token(const ssm_model_dims *m, ssm_dtype act, const ssm_layer_weights *w,
                           const void *window, const ssm_step_io *io, int64_t t,
                           float *c_scratch, ssm_ref_token *tok)
{
    ssm_ref_conv_token(m, act, w, window, io->x, t, c_scratch);
    ssm_ref_split_normalize(m, c_scratch, tok);
    ssm_ref_gates(m, act, w, element_at(io->gate, act, t * ssm_gate_width(m)),
                  element_at(io->beta, act, t * m->value_heads), tok);
}

void ssm_ref_head_update(int32_t k_dim, int32_t v_dim, int per_channel_gate, const float *q,
                         const float *k, const float *v, const float *g, float beta,
                         ssm_dtype state_dtype, float *S, float *o)
{
    /* Decay. Every element gets exactly one multiplication, so the loop
     * order cannot change the result; channel-outer takes one expf per
     * channel instead of one per element. */
    if (per_channel_gate) {
        for (int32_t j = 0; j < k_dim; j++) {
            float decay = ssm_expf(g[j]);
            for (int32_t i = 0; i < v_dim; i++)
                S[(int64_t)i * k_dim + j] *= decay;
        }
    } else {
        float decay = ssm_expf(g[0]);
        for (int64_t e = 0; e < (int64_t)v_dim * k_dim; e++)
            S[e] *= decay;
    }
    /* Delta rule row by row: row i of the update, output and rounding
     * depend on row i alone. */
    for (int32_t i = 0; i < v_dim; i++) {
        float *row = S + (int64_t)i * k_dim;
        float recalled = 0.0f;
        for (int32_t j = 0; j < k_dim; j++)
            recalled += row[j] * k[j];
        float u = beta * (v[i] - recalled);
        for (int32_t j = 0; j < k_dim; j++)
            row[j] += u * k[j];
        if (o) {
            float acc = 0.0f;
            for (int32_t j = 0; j < k_dim; j++)
                acc += row[j] * q[j];
            o[i] = acc;
        }
        for (int32_t j = 0; j < k_dim; j++)
            row[j] = ssm_ref_round(state_dtype, row[j]);
    }
}

void ssm_ref_token_update(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                          const ssm_ref_token *tok, const void *state_in, void *state_out,
                          void *out, float *head_scratch)
{
    int32_t k_dim = m->key_dim, v_dim = m->value_dim;
    int64_t head_elems = (int64_t)v_dim * k_dim;
    int32_t group = m->value_heads / m->heads; /* value heads per key head */
    int kda = is_kda(m);
    float *S = head_scratch;
    float *o = head_scratch + head_elems;
    for (int32_t h = 0; h < m->value_heads; h++) {
        /* One head at a time through scratch: head h is read completely
         * before it is written, so state_in may equal state_out. */
        int64_t base = h * head_elems;
        int64_t key_head = h / group;
        for (int64_t e = 0; e < head_elems; e++)
            S[e] = ssm_ref_load(state_in, state_dtype, base + e);
        ssm_ref_head_update(k_dim, v_dim, kda, tok->q + key_head * k_dim,
                            tok->k + key_head * k_dim, tok->v + (int64_t)h * v_dim,
                            tok->g + (kda ? (int64_t)h * k_dim : h), tok->beta[h], state_dtype,
                            S, out ? o : NULL);
        for (int64_t e = 0; e < head_elems; e++)
            ssm_ref_store(state_out, state_dtype, base + e, S[e]);
        if (out)
            for (int32_t i = 0; i < v_dim; i++)
                ssm_ref_store(out, act, (int64_t)h * v_dim + i, o[i]);
    }
}

static int64_t head_scratch_floats(const ssm_model_dims *m)
{
    return (int64_t)m->value_dim * m->key_dim + m->value_dim;
}

int64_t ssm_ref_sequence_scratch_floats(const ssm_model_dims *m)
{
    return ssm_conv_channels(m) + ssm_ref_token_floats(m) + head_scratch_floats(m);
}

void ssm_ref_sequence(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                      const ssm_layer_weights *w, void *window, void *state,
                      const ssm_step_io *io, int64_t n, float *scratch)
{
    float *c = scratch;
    float *token_scratch = c + ssm_conv_channels(m);
    float *head_scratch = token_scratch + ssm_ref_token_floats(m);
    int64_t out_width = (int64_t)m->value_heads * m->value_dim;
    ssm_ref_token tok;
    ssm_ref_token_bind(m, token_scratch, &tok);
    /* The window stays as it was before the run until the end: conv of token
     * t takes positions < 0 from it and the rest from io->x. */
    for (int64_t t = 0; t < n; t++) {
        ssm_ref_prepare_token(m, act, w, window, io, t, c, &tok);
        void *out = io->out ? (char *)io->out + (size_t)(t * out_width) * ssm_dtype_size(act)
                            : NULL;
        ssm_ref_token_update(m, state_dtype, act, &tok, state, state, out, head_scratch);
    }
    ssm_ref_conv_window_advance(m, act, window, io->x, n);
}

/* 1 if elements [from, to) of a tensor of dtype t are all finite. */
static int range_finite(const void *base, ssm_dtype t, int64_t from, int64_t to)
{
    for (int64_t i = from; i < to; i++)
        if (!isfinite(ssm_ref_load(base, t, i)))
            return 0;
    return 1;
}

int ssm_ref_inputs_finite(const ssm_model_dims *m, ssm_dtype act, const ssm_step_io *io,
                          int64_t t0, int64_t t1)
{
    int64_t d = ssm_conv_channels(m), gw = ssm_gate_width(m), hv = m->value_heads;
    return range_finite(io->x, act, t0 * d, t1 * d) &&
           range_finite(io->gate, act, t0 * gw, t1 * gw) &&
           range_finite(io->beta, act, t0 * hv, t1 * hv);
}
