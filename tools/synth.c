/* Synthetic data: a splitmix64 stream (rng.h) per coordinate tuple (see synth.h). */
#include <math.h>
#include <stdlib.h>

#include "kernels/reference.h"
#include "rng.h"
#include "synth.h"

/* Separate streams so that, e.g., layer 3's weights never correlate with
 * request 3's inputs. */
enum {
    STREAM_WEIGHTS = 1,
    STREAM_PROMPT = 2,
    STREAM_ACCEPT = 3,
    STREAM_TOKEN = 4,
};

static double draw_normal(rng *r, double mean, double std)
{
    double u1 = 1.0 - rng_uniform(r); /* (0, 1]: log stays finite */
    double u2 = rng_uniform(r);
    return mean + std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill_normal(rng *r, float *dst, int64_t n, double mean, double std)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)draw_normal(r, mean, std);
}

int synth_weights_create(const ssm_model_dims *m, uint64_t seed, synth_weights *out)
{
    const int64_t d = ssm_conv_channels(m), hv = m->value_heads;
    const int64_t dt_count = m->kind == SSM_MODEL_KDA ? hv * m->key_dim : hv;
    const int64_t per_layer = d * m->conv_width + d + hv + dt_count;

    out->layers = m->layers;
    out->layer = calloc((size_t)m->layers, sizeof *out->layer);
    out->floats = (size_t)(per_layer * m->layers);
    out->storage = malloc(out->floats * sizeof(float));
    if (!out->layer || !out->storage) {
        synth_weights_destroy(out);
        return -1;
    }
    for (int32_t l = 0; l < m->layers; l++) {
        float *conv_weight = out->storage + per_layer * l;
        float *conv_bias = conv_weight + d * m->conv_width;
        float *a_log = conv_bias + d;
        float *dt_bias = a_log + hv;
        rng r = rng_at3(seed, STREAM_WEIGHTS, (uint64_t)l, 0, 0);
        fill_normal(&r, conv_weight, d * m->conv_width, 0.0, 1.0 / sqrt((double)m->conv_width));
        fill_normal(&r, conv_bias, d, 0.0, 0.05);
        for (int64_t h = 0; h < hv; h++)
            a_log[h] = (float)log(1.0 + 15.0 * rng_uniform(&r));
        fill_normal(&r, dt_bias, dt_count, -2.0, 0.5);
        out->layer[l] = (ssm_layer_weights){conv_weight, conv_bias, a_log, dt_bias};
    }
    return 0;
}

void synth_weights_rebase(const synth_weights *w, const float *base, ssm_layer_weights *out)
{
    for (int32_t l = 0; l < w->layers; l++) {
        const ssm_layer_weights *h = &w->layer[l];
        out[l] = (ssm_layer_weights){
            base + (h->conv_weight - w->storage),
            h->conv_bias ? base + (h->conv_bias - w->storage) : NULL,
            base + (h->a_log - w->storage),
            base + (h->dt_bias - w->storage),
        };
    }
}

void synth_weights_destroy(synth_weights *w)
{
    free(w->layer);
    free(w->storage);
    w->layer = NULL;
    w->storage = NULL;
}

int32_t synth_prompt_length(const workload *w, int32_t request)
{
    rng r = rng_at3(w->seed, STREAM_PROMPT, (uint64_t)request, 0, 0);
    int64_t span = (int64_t)w->prompt_max - w->prompt_min + 1;
    int64_t pick = (int64_t)(rng_uniform(&r) * (double)span);
    return w->prompt_min + (int32_t)(pick < span ? pick : span - 1);
}

int32_t synth_accepted_length(const workload *w, int32_t request, int32_t round,
                              int32_t tokens)
{
    rng r = rng_at3(w->seed, STREAM_ACCEPT, (uint64_t)request, (uint64_t)round, 0);
    int32_t accepted = 1;
    while (accepted < tokens && rng_uniform(&r) < w->acceptance)
        accepted++;
    return accepted;
}

void synth_token_inputs(const ssm_model_dims *m, ssm_dtype act, uint64_t seed, int32_t request,
                        int64_t position, int32_t layer, const synth_inputs *dst, int64_t at)
{
    const int64_t d = ssm_conv_channels(m), gw = ssm_gate_width(m), hv = m->value_heads;
    rng r = rng_at3(seed, STREAM_TOKEN, (uint64_t)(int64_t)request, (uint64_t)position,
                   (uint64_t)layer);
    for (int64_t i = 0; i < d; i++)
        ssm_ref_store(dst->x, act, at * d + i, (float)draw_normal(&r, 0.0, 1.0));
    for (int64_t i = 0; i < gw; i++)
        ssm_ref_store(dst->gate, act, at * gw + i, (float)draw_normal(&r, 0.0, 1.0));
    for (int64_t i = 0; i < hv; i++)
        ssm_ref_store(dst->beta, act, at * hv + i, (float)draw_normal(&r, 0.0, 1.5));
}
