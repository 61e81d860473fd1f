#include <string.h>

#include "kernels/record.h"

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

typedef struct record_parts {
    size_t k, v, g, beta, total; /* byte offsets */
} record_parts;

static record_parts parts(const ssm_model_dims *m, ssm_dtype act)
{
    size_t es = ssm_dtype_size(act);
    record_parts p;
    p.k = 0;
    p.v = align16((size_t)m->heads * m->key_dim * es);
    p.g = p.v + align16((size_t)m->value_heads * m->value_dim * es);
    p.beta = p.g + align16((size_t)ssm_gate_width(m) * sizeof(float));
    p.total = p.beta + align16((size_t)m->value_heads * sizeof(float));
    return p;
}

size_t ssm_record_bytes(const ssm_model_dims *m, ssm_dtype act)
{
    return parts(m, act).total;
}

void ssm_record_store(const ssm_model_dims *m, ssm_dtype act, const float *c,
                      const ssm_ref_token *tok, void *record)
{
    record_parts p = parts(m, act);
    int64_t qk = (int64_t)m->heads * m->key_dim;
    char *base = record;
    for (int64_t i = 0; i < qk; i++)
        ssm_ref_store(base + p.k, act, i, c[qk + i]);
    for (int64_t i = 0; i < (int64_t)m->value_heads * m->value_dim; i++)
        ssm_ref_store(base + p.v, act, i, c[2 * qk + i]);
    memcpy(base + p.g, tok->g, sizeof(float) * (size_t)ssm_gate_width(m));
    memcpy(base + p.beta, tok->beta, sizeof(float) * (size_t)m->value_heads);
}

void ssm_record_load(const ssm_model_dims *m, ssm_dtype act, const void *record,
                     ssm_ref_token *tok)
{
    record_parts p = parts(m, act);
    const char *base = record;
    for (int64_t i = 0; i < (int64_t)m->heads * m->key_dim; i++)
        tok->k[i] = ssm_ref_load(base + p.k, act, i);
    /* The same normalization ssm_ref_split_normalize gives k. */
    for (int32_t h = 0; h < m->heads; h++)
        ssm_ref_l2_normalize(m->key_dim, tok->k + (int64_t)h * m->key_dim, 1.0f);
    for (int64_t i = 0; i < (int64_t)m->value_heads * m->value_dim; i++)
        tok->v[i] = ssm_ref_load(base + p.v, act, i);
    memcpy(tok->g, base + p.g, sizeof(float) * (size_t)ssm_gate_width(m));
    memcpy(tok->beta, base + p.beta, sizeof(float) * (size_t)m->value_heads);
}

int64_t ssm_record_apply_scratch_floats(const ssm_model_dims *m)
{
    return ssm_ref_token_floats(m) + (int64_t)m->value_dim * m->key_dim + m->value_dim;
}

void ssm_record_apply(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                      const void *record, void *state, float *scratch)
{
    ssm_ref_token tok;
    ssm_ref_token_bind(m, scratch, &tok);
    ssm_record_load(m, act, record, &tok);
    ssm_ref_token_update(m, state_dtype, act, &tok, state, state, NULL,
                         scratch + ssm_ref_token_floats(m));
}
