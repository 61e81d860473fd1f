#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/testutil.h"
#include "tools/rng.h"

uint64_t test_seed(void)
{
    static uint64_t seed;
    static int have;
    if (!have) {
        const char *env = getenv("SSM_TEST_SEED");
        if (env && *env) {
            seed = strtoull(env, NULL, 0);
        } else {
            FILE *f = fopen("/dev/urandom", "rb");
            if (!f || fread(&seed, sizeof seed, 1, f) != 1)
                seed = 0x5eed;
            if (f)
                fclose(f);
        }
        have = 1;
        fprintf(stderr, "# test seed: SSM_TEST_SEED=%llu\n", (unsigned long long)seed);
    }
    return seed;
}

/* The first splitmix64 number of the seed, odd so never the zero state. */
void test_rng_init(test_rng *r, uint64_t seed)
{
    rng s = {seed};
    r->s = rng_next(&s) | 1;
}

uint64_t test_rng_next(test_rng *r)
{
    uint64_t x = r->s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    r->s = x;
    return x * 0x2545f4914f6cdd1dull;
}

double test_rng_uniform(test_rng *r)
{
    return rng_unit(test_rng_next(r));
}

double test_rng_normal(test_rng *r)
{
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int32_t test_rng_int(test_rng *r, int32_t lo, int32_t hi)
{
    return lo + (int32_t)(test_rng_next(r) % (uint64_t)(hi - lo + 1));
}

void test_fill_normal(test_rng *r, void *dst, ssm_dtype t, int64_t n, double mean, double std)
{
    for (int64_t i = 0; i < n; i++)
        ssm_ref_store(dst, t, i, (float)(mean + std * test_rng_normal(r)));
}

void test_weights_make(test_rng *r, const ssm_model_dims *m, int with_bias, test_weights *out)
{
    int64_t d = ssm_conv_channels(m), w = m->conv_width;
    int64_t dt_n = m->kind == SSM_MODEL_KDA ? (int64_t)m->value_heads * m->key_dim : m->value_heads;
    memset(out, 0, sizeof *out);
    out->conv_weight = malloc(sizeof(float) * d * w);
    out->a_log = malloc(sizeof(float) * m->value_heads);
    out->dt_bias = malloc(sizeof(float) * dt_n);
    test_fill_normal(r, out->conv_weight, SSM_DTYPE_F32, d * w, 0.0, 1.0 / sqrt((double)w));
    if (with_bias) {
        out->conv_bias = malloc(sizeof(float) * d);
        test_fill_normal(r, out->conv_bias, SSM_DTYPE_F32, d, 0.0, 0.1);
    }
    for (int32_t h = 0; h < m->value_heads; h++)
        out->a_log[h] = (float)log(1.0 + 15.0 * test_rng_uniform(r));
    test_fill_normal(r, out->dt_bias, SSM_DTYPE_F32, dt_n, -2.0, 0.5);
    out->w.conv_weight = out->conv_weight;
    out->w.conv_bias = out->conv_bias;
    out->w.a_log = out->a_log;
    out->w.dt_bias = out->dt_bias;
}

void test_weights_free(test_weights *tw)
{
    free(tw->conv_weight);
    free(tw->conv_bias);
    free(tw->a_log);
    free(tw->dt_bias);
    memset(tw, 0, sizeof *tw);
}

void test_io_make(test_rng *r, const ssm_model_dims *m, ssm_dtype act, int64_t n, test_io *out)
{
    size_t es = ssm_dtype_size(act);
    int64_t d = ssm_conv_channels(m), gw = ssm_gate_width(m);
    int64_t ow = (int64_t)m->value_heads * m->value_dim;
    int64_t nn = n > 0 ? n : 1;
    memset(out, 0, sizeof *out);
    out->tokens = n;
    out->x = malloc(es * nn * d);
    out->gate = malloc(es * nn * gw);
    out->beta = malloc(es * nn * m->value_heads);
    out->out = calloc((size_t)(nn * ow), es);
    test_fill_normal(r, out->x, act, n * d, 0.0, 1.0);
    test_fill_normal(r, out->gate, act, n * gw, 0.0, 1.0);
    test_fill_normal(r, out->beta, act, n * m->value_heads, 0.0, 1.5);
    out->io.x = out->x;
    out->io.gate = out->gate;
    out->io.beta = out->beta;
    out->io.out = out->out;
}

void test_io_free(test_io *t)
{
    free(t->x);
    free(t->gate);
    free(t->beta);
    free(t->out);
    memset(t, 0, sizeof *t);
}

/* Adds one pair of values to the sums. */
static void rms_sum_pair(test_rms_sum *s, double x, double y)
{
    if (!isfinite(x) || !isfinite(y)) {
        s->error2 = INFINITY;
        return;
    }
    s->error2 += (x - y) * (x - y);
    s->reference2 += y * y;
}

void test_rms_sum_add(test_rms_sum *s, const void *a, ssm_dtype ta, const void *b, ssm_dtype tb,
                      int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        rms_sum_pair(s, ssm_ref_load(a, ta, i), ssm_ref_load(b, tb, i));
}

void test_rms_sum_add_f64(test_rms_sum *s, const void *a, ssm_dtype ta, const double *ref,
                          int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        rms_sum_pair(s, ssm_ref_load(a, ta, i), ref[i]);
}

double test_rms_sum_value(const test_rms_sum *s)
{
    if (isinf(s->error2))
        return INFINITY;
    if (s->reference2 == 0)
        return s->error2 == 0 ? 0 : INFINITY;
    return sqrt(s->error2 / s->reference2);
}

double test_rel_rms(const void *a, ssm_dtype ta, const void *b, ssm_dtype tb, int64_t n)
{
    test_rms_sum s = {0, 0};
    test_rms_sum_add(&s, a, ta, b, tb, n);
    return test_rms_sum_value(&s);
}

double test_rel_rms_f64(const void *a, ssm_dtype ta, const double *ref, int64_t n)
{
    test_rms_sum s = {0, 0};
    test_rms_sum_add_f64(&s, a, ta, ref, n);
    return test_rms_sum_value(&s);
}

int test_bitwise_equal(const void *a, const void *b, ssm_dtype t, int64_t n)
{
    return memcmp(a, b, ssm_dtype_size(t) * (size_t)n) == 0;
}

int64_t test_first_difference(const void *a, const void *b, ssm_dtype t, int64_t n)
{
    size_t es = ssm_dtype_size(t);
    for (int64_t i = 0; i < n; i++)
        if (memcmp((const char *)a + i * es, (const char *)b + i * es, es) != 0)
            return i;
    return -1;
}

int32_t test_pick_rows(test_rng *r, const int *eligible, int32_t lanes, int32_t count, int32_t pads,
                       int32_t max_rows, int32_t *out)
{
    int32_t *pool = calloc((size_t)(lanes > 0 ? lanes : 1), sizeof *pool);
    int32_t n = 0, rows = 0;
    for (int32_t i = 0; i < lanes; i++)
        if (eligible[i])
            pool[n++] = i;
    if (count > n)
        count = n;
    for (int32_t i = 0; i < count && rows < max_rows; i++) {
        int32_t j = test_rng_int(r, i, n - 1), t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
        out[rows++] = pool[i];
    }
    for (int32_t p = 0; p < pads && rows < max_rows; p++) {
        int32_t at = test_rng_int(r, 0, rows);
        memmove(out + at + 1, out + at, sizeof *out * (size_t)(rows - at));
        out[at] = -1;
        rows++;
    }
    free(pool);
    return rows;
}

void test_random_dims(test_rng *r, ssm_model_kind kind, int gva, ssm_model_dims *m)
{
    static const int32_t dims[] = {8, 16, 24, 32};
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->layers = test_rng_int(r, 1, 3);
    m->heads = test_rng_int(r, 1, 3);
    m->value_heads = m->heads * (gva ? test_rng_int(r, 2, 3) : 1);
    m->key_dim = dims[test_rng_int(r, 0, 3)];
    m->value_dim = dims[test_rng_int(r, 0, 3)];
    m->conv_width = test_rng_int(r, 2, 4);
    if (kind == SSM_MODEL_KDA && test_rng_int(r, 0, 1)) {
        m->has_lower_bound = 1;
        m->lower_bound = -5.0f;
    }
}

void test_config(ssm_config *c, const ssm_model_dims *m, const char *mode, ssm_dtype state,
                 ssm_dtype act, int32_t capacity, int32_t max_draft)
{
    ssm_config_defaults(c);
    c->model = *m;
    c->mode = mode;
    c->state_dtype = state;
    c->activation_dtype = act;
    c->max_requests = capacity;
    c->max_draft_tokens = max_draft;
}

void test_snapshot_alloc(const ssm_ctx *ctx, test_snapshot *out)
{
    const ssm_config *c = ssm_ctx_config(ctx);
    memset(out, 0, sizeof *out);
    out->layers = c->model.layers;
    out->conv_bytes = (size_t)ssm_ref_window_elems(&c->model) * ssm_dtype_size(c->activation_dtype);
    out->state_bytes = (size_t)ssm_ref_state_elems(&c->model) * ssm_dtype_size(c->state_dtype);
    out->conv = calloc((size_t)out->layers, sizeof(void *));
    out->state = calloc((size_t)out->layers, sizeof(void *));
    for (int32_t l = 0; l < out->layers; l++) {
        out->conv[l] = calloc(1, out->conv_bytes + 1);
        out->state[l] = calloc(1, out->state_bytes);
    }
}

ssm_status test_snapshot_take(ssm_ctx *ctx, int32_t slot, test_snapshot *out)
{
    test_snapshot_alloc(ctx, out);
    return ssm_slot_export_canonical(ctx, slot, out->conv, out->state, NULL);
}

int test_snapshot_equal(const test_snapshot *a, const test_snapshot *b)
{
    if (a->layers != b->layers || a->conv_bytes != b->conv_bytes || a->state_bytes != b->state_bytes)
        return 0;
    for (int32_t l = 0; l < a->layers; l++)
        if (memcmp(a->conv[l], b->conv[l], a->conv_bytes) != 0 ||
            memcmp(a->state[l], b->state[l], a->state_bytes) != 0)
            return 0;
    return 1;
}

void test_snapshot_free(test_snapshot *s)
{
    for (int32_t l = 0; l < s->layers; l++) {
        free(s->conv[l]);
        free(s->state[l]);
    }
    free(s->conv);
    free(s->state);
    memset(s, 0, sizeof *s);
}

ssm_status test_prefill_prompts(ssm_ctx *ctx, const int32_t *slots, int32_t count,
                                const ssm_model_dims *m, test_rng *r)
{
    int32_t *offsets = calloc((size_t)count + 1, sizeof *offsets);
    if (!offsets)
        return SSM_ERR_OUT_OF_MEMORY;
    for (int32_t k = 0; k < count; k++)
        offsets[k + 1] = offsets[k] + 3 + 9 * k;
    ssm_prefill_batch b = {count, slots, offsets, 3 + 9 * (count - 1), NULL, NULL};
    ssm_status status = SSM_OK;
    for (int32_t l = 0; l < m->layers && status == SSM_OK; l++) {
        test_weights w;
        test_weights_make(r, m, 1, &w);
        test_io io;
        test_io_make(r, m, SSM_DTYPE_BF16, offsets[count], &io);
        status = ssm_prefill(ctx, l, &b, &w.w, &io.io, NULL);
        test_io_free(&io);
        test_weights_free(&w);
    }
    free(offsets);
    return status;
}

const char *test_edit_line(const char *text, int line, const char *replacement)
{
    static char buffers[4][16384];
    static int next;
    char *out = buffers[next++ % 4];
    const char *start = text;
    for (int i = 1; i < line; i++) {
        start = strchr(start, '\n');
        if (!start) {
            fprintf(stderr, "test_edit_line: the text has no line %d\n", line);
            abort();
        }
        start++;
    }
    const char *end = strchr(start, '\n');
    end = end ? end + 1 : start + strlen(start);
    int n = snprintf(out, sizeof buffers[0], "%.*s%s%s%s", (int)(start - text), text,
                     replacement ? replacement : "", replacement ? "\n" : "", end);
    if (n < 0 || n >= (int)sizeof buffers[0]) {
        fprintf(stderr, "test_edit_line: the result is longer than %zu bytes\n", sizeof buffers[0]);
        abort();
    }
    return out;
}

void test_source_path(char *out, size_t len, const char *relative)
{
    const char *top = getenv("SSM_TOP_SRCDIR");
    if (top && *top)
        snprintf(out, len, "%s/%s", top, relative);
    else
        snprintf(out, len, "%.*s%s", (int)(strlen(__FILE__) - strlen("tests/testutil.c")),
                 __FILE__, relative);
}
