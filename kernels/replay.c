/* Replay outputs through the replay identity; the contracts are in replay.h. All arithmetic is
 * fp32, loops ascend, and the history sums run oldest record first. */
#include <math.h>
#include <string.h>

#include "kernels/layout.h"
#include "kernels/math.h"
#include "kernels/replay.h"

static size_t align16(size_t n)
{
    return (n + 15) & ~(size_t)15;
}

/* Byte offsets inside one record. */
typedef struct replay_parts {
    size_t u, gate_sum, gate_error, total;
} replay_parts;

static replay_parts parts(const ssm_model_dims *m, ssm_dtype act)
{
    replay_parts p;
    p.u = ssm_record_bytes(m, act); /* the raw record comes first */
    p.gate_sum = p.u + align16(sizeof(float) * (size_t)m->value_heads * m->value_dim);
    p.gate_error = p.gate_sum + align16(sizeof(float) * (size_t)ssm_gate_width(m));
    p.total = p.gate_error + align16(sizeof(float) * (size_t)ssm_gate_width(m));
    return p;
}

size_t ssm_replay_record_bytes(const ssm_model_dims *m, ssm_dtype act)
{
    return parts(m, act).total;
}

/* What the output math needs to find things in one history. */
typedef struct replay_view {
    const ssm_model_dims *m;
    ssm_dtype act;
    ssm_dtype state_dtype;  /* of the checkpoint; only the output functions read it */
    const ssm_replay_history *h;
    replay_parts parts;
    int kda;
    int32_t group;          /* value heads per key head */
    int32_t gate_per_head;  /* 1 (GDN) or K (KDA) */
} replay_view;

static replay_view view_of(const ssm_model_dims *m, ssm_dtype act, const ssm_replay_history *h)
{
    int kda = m->kind == SSM_MODEL_KDA;
    replay_view w = {m, act, SSM_DTYPE_F32, h, parts(m, act), kda, m->value_heads / m->heads,
                     kda ? m->key_dim : 1};
    return w;
}

static uint8_t *record_at(const replay_view *w, int32_t i)
{
    return w->h->records + (size_t)i * w->parts.total;
}

/* u of record i, value head h: [V]. */
static float *record_u(const replay_view *w, int32_t i, int32_t h)
{
    return (float *)(record_at(w, i) + w->parts.u) + (int64_t)h * w->m->value_dim;
}

/* G of record i for value head h (1 or K values), as the fp32 running sum
 * and the rounding error that sum has accumulated (G = sum + error). */
typedef struct gate_sum {
    float *sum, *error;
} gate_sum;

static gate_sum record_gate(const replay_view *w, int32_t i, int32_t h)
{
    int64_t first = (int64_t)h * w->gate_per_head;
    gate_sum g = {(float *)(record_at(w, i) + w->parts.gate_sum) + first,
                  (float *)(record_at(w, i) + w->parts.gate_error) + first};
    return g;
}

/* G_p - G_i of channel c (0 for a scalar gate). The two sums share the
 * rounding of every addition before record i, so their difference is exact
 * to within the additions between i and p; the error terms carry those.
 * Without them a long history (|G| in the hundreds) would blur the decay of
 * recent records by |G| * 2^-24, near the contract's 1e-5 at L = 1024. */
static float gate_gap(gate_sum p, gate_sum i, int32_t c)
{
    return (p.sum[c] - i.sum[c]) + (p.error[c] - i.error[c]);
}

/* G_p of channel c: the exponent of the checkpoint's decay. */
static float gate_total(gate_sum p, int32_t c)
{
    return p.sum[c] + p.error[c];
}

/* Normalized key of record i, key head j: [K]. */
static float *record_key(const replay_view *w, int32_t i, int32_t j)
{
    return w->h->keys + ((int64_t)i * w->m->heads + j) * w->m->key_dim;
}

void ssm_replay_load_keys(const ssm_model_dims *m, ssm_dtype act, const ssm_replay_history *h,
                          int32_t first, int32_t last, float *token_scratch)
{
    replay_view w = view_of(m, act, h);
    ssm_ref_token tok;
    ssm_ref_token_bind(m, token_scratch, &tok);
    for (int32_t i = first; i < last; i++) {
        /* ssm_record_load normalizes k exactly as the token's k was; point
         * it straight at the key array. */
        tok.k = record_key(&w, i, 0);
        ssm_record_load(m, act, record_at(&w, i), &tok);
    }
}

/* out = before + g over n channels, each addition's exact rounding error
 * (Knuth's two-sum) carried into out.error. */
static void gate_accumulate(gate_sum before, const float *g, int64_t n, gate_sum out)
{
    for (int64_t e = 0; e < n; e++) {
        float sum = before.sum[e] + g[e];
        float g_part = sum - before.sum[e];
        float rounding = (before.sum[e] - (sum - g_part)) + (g[e] - g_part);
        out.sum[e] = sum;
        out.error[e] = before.error[e] + rounding;
    }
}

void ssm_replay_append(const ssm_model_dims *m, ssm_dtype act, const ssm_replay_history *h,
                       int32_t index, const float *c, const ssm_ref_token *tok)
{
    replay_view w = view_of(m, act, h);
    int64_t width = ssm_gate_width(m);
    ssm_record_store(m, act, c, tok, record_at(&w, index));
    gate_sum G = record_gate(&w, index, 0);
    if (index > 0) {
        gate_accumulate(record_gate(&w, index - 1, 0), tok->g, width, G);
    } else {
        memcpy(G.sum, tok->g, sizeof(float) * (size_t)width);
        memset(G.error, 0, sizeof(float) * (size_t)width);
    }
    memcpy(record_key(&w, index, 0), tok->k, sizeof(float) * (size_t)m->heads * m->key_dim);
}

static float dot(int32_t n, const float *a, const float *b)
{
    float acc = 0.0f;
    for (int32_t i = 0; i < n; i++)
        acc += a[i] * b[i];
    return acc;
}

/* The decayed weight of record i seen from a token with gate sum Gp, for the
 * key-head vector x (the token's k or q):
 * GDN e^{Gp - Gi} (k_i . x); KDA sum_k k_i[k] e^{Gp[k] - Gi[k]} x[k]. */
static float pair_weight(const replay_view *w, int32_t h, int32_t i, const float *x,
                         gate_sum Gp)
{
    const float *ki = record_key(w, i, h / w->group);
    gate_sum Gi = record_gate(w, i, h);
    if (!w->kda)
        return ssm_expf(gate_gap(Gp, Gi, 0)) * dot(w->m->key_dim, ki, x);
    float acc = 0.0f;
    for (int32_t k = 0; k < w->m->key_dim; k++)
        acc += ki[k] * ssm_expf(gate_gap(Gp, Gi, k)) * x[k];
    return acc;
}

/* Scratch of the output functions, split. */
typedef struct replay_scratch {
    float *row;          /* [K]: one checkpoint row widened to fp32 */
    float *vectors;      /* [2T][K]: what the checkpoint rows are dotted with */
    float *dots;         /* [V][2T]: the checkpoint dot products */
    float *key_weights;  /* [L]: history weights of r */
    float *query_weights;/* [L]: history weights of o (the token itself included) */
    float *r, *o;        /* [V] */
    float *key_dots;     /* [T][L]: matrix form, k_i . k_p */
    float *query_dots;   /* [T][L]: matrix form, k_i . q_p */
} replay_scratch;

/* The next n floats of a scratch laid out from base (NULL: only counted). */
static float *take(float *base, int64_t *used, int64_t n)
{
    float *p = base ? base + *used : NULL;
    *used += n;
    return p;
}

/* Splits base for histories of up to L records and rows of up to T tokens;
 * *floats gets the total. */
static replay_scratch split_scratch(const ssm_model_dims *m, int32_t L, int32_t T, float *base,
                                    int64_t *floats)
{
    int64_t K = m->key_dim, V = m->value_dim;
    replay_scratch s;
    *floats = 0;
    s.row = take(base, floats, K);
    s.vectors = take(base, floats, 2 * T * K);
    s.dots = take(base, floats, 2 * T * V);
    s.key_weights = take(base, floats, L);
    s.query_weights = take(base, floats, L);
    s.r = take(base, floats, V);
    s.o = take(base, floats, V);
    s.key_dots = take(base, floats, (int64_t)T * L);
    s.query_dots = take(base, floats, (int64_t)T * L);
    return s;
}

int64_t ssm_replay_outputs_scratch_floats(const ssm_model_dims *m, int32_t history,
                                          int32_t max_tokens)
{
    int64_t floats;
    split_scratch(m, history, max_tokens, NULL, &floats);
    return floats;
}

/* dots[v * count + c] = S0[h][v] . vectors[c] for every row v of head h: the
 * checkpoint head is read once, whatever the number of vectors. */
static void checkpoint_dots(const replay_view *w, int32_t h, int32_t count,
                            const float *vectors, float *row, float *dots)
{
    int32_t K = w->m->key_dim, V = w->m->value_dim;
    for (int32_t v = 0; v < V; v++) {
        int64_t base = ((int64_t)h * V + v) * K;
        for (int32_t k = 0; k < K; k++)
            row[k] = ssm_ref_load(w->h->checkpoint, w->state_dtype, base + k);
        for (int32_t c = 0; c < count; c++)
            dots[(int64_t)v * count + c] = dot(K, row, vectors + (int64_t)c * K);
    }
}

/* How one token of one head sees the checkpoint and the history. */
typedef struct token_terms {
    int32_t stride, key_column, query_column; /* where its dots are */
    float scale;  /* e^{G_p} for a scalar gate; 1 when the vectors carry the decay */
    const float *key_weights, *query_weights; /* [p] and [p + 1] */
} token_terms;

/* r, u and o of token p (record p) for value head h: u goes into record p,
 * o to out (the token's [HV][V] row, act). */
static void head_finish(const replay_view *w, int32_t h, int32_t p, const ssm_ref_token *tok,
                        const token_terms *terms, const replay_scratch *s, void *out)
{
    int32_t V = w->m->value_dim;
    for (int32_t v = 0; v < V; v++) {
        const float *d = s->dots + (int64_t)v * terms->stride;
        s->r[v] = terms->scale * d[terms->key_column];
        s->o[v] = terms->scale * d[terms->query_column];
    }
    /* Record by record, oldest first: each element still sums in index order. */
    for (int32_t i = 0; i < p; i++) {
        const float *ui = record_u(w, i, h);
        for (int32_t v = 0; v < V; v++) {
            s->r[v] += terms->key_weights[i] * ui[v];
            s->o[v] += terms->query_weights[i] * ui[v];
        }
    }
    float *up = record_u(w, p, h);
    const float *value = tok->v + (int64_t)h * V;
    for (int32_t v = 0; v < V; v++) {
        up[v] = tok->beta[h] * (value[v] - s->r[v]);
        s->o[v] += terms->query_weights[p] * up[v];
        ssm_ref_store(out, w->act, (int64_t)h * V + v, s->o[v]);
    }
}

/* Token p, value head h, any gate: the decay goes into the vectors the
 * checkpoint is dotted with (KDA, per channel) or scales the dots (GDN). */
static void recurrent_head(const replay_view *w, int32_t h, int32_t p, const ssm_ref_token *tok,
                           const replay_scratch *s, void *out)
{
    int32_t K = w->m->key_dim, j = h / w->group;
    const float *kp = record_key(w, p, j), *qp = tok->q + (int64_t)j * K;
    gate_sum Gp = record_gate(w, p, h);
    token_terms terms = {2, 0, 1, 1.0f, s->key_weights, s->query_weights};
    for (int32_t k = 0; k < K; k++) {
        float decay = w->kda ? ssm_expf(gate_total(Gp, k)) : 1.0f;
        s->vectors[k] = w->kda ? decay * kp[k] : kp[k];
        s->vectors[K + k] = w->kda ? decay * qp[k] : qp[k];
    }
    if (!w->kda)
        terms.scale = ssm_expf(gate_total(Gp, 0));
    checkpoint_dots(w, h, 2, s->vectors, s->row, s->dots);
    for (int32_t i = 0; i <= p; i++) {
        if (i < p)
            s->key_weights[i] = pair_weight(w, h, i, kp, Gp);
        s->query_weights[i] = pair_weight(w, h, i, qp, Gp);
    }
    head_finish(w, h, p, tok, &terms, s, out);
}

/* Matrix form, key head j: the raw dot products of the row's tokens (records
 * first .. first+tokens-1) with every record up to each of them, computed
 * once for all the value heads that share the key head. */
static void matrix_dots(const replay_view *w, int32_t j, int32_t first, int32_t tokens,
                        const ssm_ref_token *tok, int32_t records, const replay_scratch *s)
{
    int32_t K = w->m->key_dim;
    for (int32_t t = 0; t < tokens; t++) {
        int32_t p = first + t;
        const float *kp = record_key(w, p, j), *qp = tok[t].q + (int64_t)j * K;
        for (int32_t i = 0; i <= p; i++) {
            const float *ki = record_key(w, i, j);
            if (i < p)
                s->key_dots[(int64_t)t * records + i] = dot(K, ki, kp);
            s->query_dots[(int64_t)t * records + i] = dot(K, ki, qp);
        }
    }
}

/* Matrix form, value head h, all tokens of the row (GDN): one pass over the
 * checkpoint head, then per token one scalar decay per record. */
static void matrix_head(const replay_view *w, int32_t h, int32_t first, int32_t tokens,
                        const ssm_ref_token *tok, int32_t records, const replay_scratch *s,
                        void *out)
{
    int32_t K = w->m->key_dim, j = h / w->group;
    size_t out_row = ssm_out_row_bytes(w->m, w->act);
    for (int32_t t = 0; t < tokens; t++) {
        memcpy(s->vectors + (int64_t)t * K, record_key(w, first + t, j), sizeof(float) * K);
        memcpy(s->vectors + (int64_t)(tokens + t) * K, tok[t].q + (int64_t)j * K,
               sizeof(float) * K);
    }
    checkpoint_dots(w, h, 2 * tokens, s->vectors, s->row, s->dots);
    for (int32_t t = 0; t < tokens; t++) {
        int32_t p = first + t;
        gate_sum Gp = record_gate(w, p, h);
        token_terms terms = {2 * tokens, t, tokens + t, ssm_expf(gate_total(Gp, 0)), s->key_weights,
                             s->query_weights};
        for (int32_t i = 0; i <= p; i++) {
            float decay = ssm_expf(gate_gap(Gp, record_gate(w, i, h), 0));
            if (i < p)
                s->key_weights[i] = decay * s->key_dots[(int64_t)t * records + i];
            s->query_weights[i] = decay * s->query_dots[(int64_t)t * records + i];
        }
        head_finish(w, h, p, &tok[t], &terms, s, (uint8_t *)out + t * out_row);
    }
}

void ssm_replay_outputs(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                        ssm_replay_form form, const ssm_replay_history *h, int32_t first,
                        int32_t tokens, const ssm_ref_token *tok, void *out, float *scratch)
{
    replay_view w = view_of(m, act, h);
    w.state_dtype = state_dtype;
    size_t out_row = ssm_out_row_bytes(m, act);
    /* Every record up to the row's last token; sizes the weight and dot arrays. */
    int32_t records = first + tokens;
    int64_t floats;
    replay_scratch s = split_scratch(m, records, tokens, scratch, &floats);
    if (form == SSM_REPLAY_MATRIX) {
        for (int32_t j = 0; j < m->heads; j++) {
            matrix_dots(&w, j, first, tokens, tok, records, &s);
            for (int32_t h = j * w.group; h < (j + 1) * w.group; h++)
                matrix_head(&w, h, first, tokens, tok, records, &s, out);
        }
        return;
    }
    for (int32_t t = 0; t < tokens; t++)
        for (int32_t h = 0; h < m->value_heads; h++)
            recurrent_head(&w, h, first + t, &tok[t], &s, (uint8_t *)out + t * out_row);
}
