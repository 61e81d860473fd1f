/* The device buffers of a model's measurements: weights of every layer and
 * one batch of inputs, generated once on the host with the statistics of
 * tools/synth.h (conv weight ~ N(0, 1/W), A_log = log U[1, 16], dt_bias ~
 * N(-2, 0.5^2); x, gate ~ N(0, 1), beta ~ N(0, 1.5^2), in the activation
 * dtype) and shared by every layer and every context. */
#include <stdlib.h>
#include <string.h>

#include "bench_cuda.h"
#include "tools/synth.h"

enum { BENCH_SEED = 20261129 };

/* cudaMalloc + cudaMemcpy of `bytes` from host. */
static int upload(void **device, const void *host, size_t bytes, char *error, size_t len)
{
    if (bench_cuda_check(cudaMalloc(device, bytes), "cudaMalloc", error, len) != 0) {
        *device = NULL;
        return -1;
    }
    return bench_cuda_check(cudaMemcpy(*device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy",
                      error, len);
}

/* Weights of `layers` layers: the host storage of synth_weights in one
 * device block, and per layer the same offsets into it. */
static int upload_weights(const ssm_model_dims *m, int32_t layers, bench_data *d, char *error,
                          size_t len)
{
    ssm_model_dims dims = *m;
    dims.layers = layers;
    synth_weights host;
    if (synth_weights_create(&dims, BENCH_SEED, &host) != 0) {
        snprintf(error, len, "out of memory for the weights");
        return -1;
    }
    /* synth lays the layers out back to back: the last layer's dt_bias ends it. */
    const ssm_layer_weights *last = &host.layer[layers - 1];
    size_t dt_count = (size_t)(m->kind == SSM_MODEL_KDA ? m->value_heads * m->key_dim
                                                        : m->value_heads);
    size_t floats = (size_t)(last->dt_bias - host.storage) + dt_count;
    int status = -1;
    d->weights = calloc((size_t)layers, sizeof *d->weights);
    if (!d->weights)
        snprintf(error, len, "out of memory for the weights");
    else
        status = upload((void **)&d->weight_storage, host.storage, floats * sizeof(float),
                        error, len);
    for (int32_t l = 0; status == 0 && l < layers; l++) {
        const ssm_layer_weights *w = &host.layer[l];
        float *base = d->weight_storage;
        d->weights[l] = (ssm_layer_weights){
            base + (w->conv_weight - host.storage),
            w->conv_bias ? base + (w->conv_bias - host.storage) : NULL,
            base + (w->a_log - host.storage),
            base + (w->dt_bias - host.storage),
        };
    }
    synth_weights_destroy(&host);
    return status;
}

/* Token inputs of max_batch rows of T tokens (row r, token t at r*T + t). */
static int upload_inputs(const bench_shape *s, int32_t max_batch, bench_data *d, char *error,
                         size_t len)
{
    const ssm_model_dims *m = &s->model;
    int64_t tokens = (int64_t)max_batch * s->tokens;
    size_t act = ssm_dtype_size(s->activation_dtype);
    size_t x_bytes = (size_t)(tokens * ssm_conv_channels(m)) * act;
    size_t gate_bytes = (size_t)(tokens * ssm_gate_width(m)) * act;
    size_t beta_bytes = (size_t)(tokens * m->value_heads) * act;
    size_t out_bytes = (size_t)(tokens * m->value_heads * m->value_dim) * act;
    synth_inputs host = {malloc(x_bytes), malloc(gate_bytes), malloc(beta_bytes)};
    int status = -1;
    if (!host.x || !host.gate || !host.beta) {
        snprintf(error, len, "out of memory for the inputs");
    } else {
        for (int32_t r = 0; r < max_batch; r++)
            for (int32_t t = 0; t < s->tokens; t++)
                synth_token_inputs(m, s->activation_dtype, BENCH_SEED, r, t, 0, &host,
                                   (int64_t)r * s->tokens + t);
        status = upload(&d->x, host.x, x_bytes, error, len);
        if (status == 0)
            status = upload(&d->gate, host.gate, gate_bytes, error, len);
        if (status == 0)
            status = upload(&d->beta, host.beta, beta_bytes, error, len);
        if (status == 0)
            status = bench_cuda_check(cudaMalloc(&d->out, out_bytes), "cudaMalloc", error, len);
    }
    free(host.x);
    free(host.gate);
    free(host.beta);
    return status;
}

/* Slots (set per context) and the accepted lengths: row a-1 all a. */
static int upload_metadata(int32_t tokens, int32_t max_batch, bench_data *d, char *error,
                           size_t len)
{
    size_t count = (size_t)tokens * (size_t)max_batch;
    int32_t *accepted = malloc(count * sizeof *accepted);
    d->slots_host = calloc((size_t)max_batch, sizeof *d->slots_host);
    if (!accepted || !d->slots_host) {
        free(accepted);
        snprintf(error, len, "out of memory for the batch metadata");
        return -1;
    }
    for (size_t i = 0; i < count; i++)
        accepted[i] = (int32_t)(i / (size_t)max_batch) + 1;
    int status = upload((void **)&d->accepted, accepted, count * sizeof *accepted, error, len);
    free(accepted);
    if (status == 0)
        status = bench_cuda_check(
            cudaMalloc((void **)&d->slots, (size_t)max_batch * sizeof(int32_t)), "cudaMalloc",
            error, len);
    return status;
}

int bench_data_create(const bench_shape *s, int32_t layers, int32_t max_batch, bench_data *out,
                      char *error, size_t len)
{
    bench_data d;
    memset(&d, 0, sizeof d);
    d.layers = layers;
    d.max_batch = max_batch;
    if (upload_weights(&s->model, layers, &d, error, len) != 0 ||
        upload_inputs(s, max_batch, &d, error, len) != 0 ||
        upload_metadata(s->tokens, max_batch, &d, error, len) != 0) {
        bench_data_destroy(&d);
        return -1;
    }
    *out = d;
    return 0;
}

void bench_data_destroy(bench_data *d)
{
    void *device[] = {d->weight_storage, d->x, d->gate, d->beta, d->out, d->slots, d->accepted};
    for (size_t i = 0; i < sizeof device / sizeof device[0]; i++)
        if (device[i])
            cudaFree(device[i]);
    free(d->weights);
    free(d->slots_host);
    memset(d, 0, sizeof *d);
}
