/* Weights and the input pool of `ssmstate serve` (see serve_data.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_data.h"

enum { POOL_REQUEST = -2 }; /* synth's request coordinate of pool tokens */

/* Bytes of one token's x, gate and beta. */
static void token_bytes(const ssm_model_dims *m, ssm_dtype act, size_t *x, size_t *gate,
                        size_t *beta)
{
    const size_t s = ssm_dtype_size(act);
    *x = (size_t)ssm_conv_channels(m) * s;
    *gate = (size_t)ssm_gate_width(m) * s;
    *beta = (size_t)m->value_heads * s;
}

/* The device copy of the weights; on the CPU the host's serve as they are. */
static int upload_weights(const cli_device *d, serve_data *data, char *error, size_t len)
{
    const ssm_model_dims *m = &data->model;
    const synth_weights *host = &data->host_weights;
    data->weights = calloc((size_t)m->layers, sizeof *data->weights);
    if (!data->weights) {
        snprintf(error, len, "out of memory for the weights");
        return -1;
    }
    if (d->where.type == SSM_DEVICE_CPU) {
        memcpy(data->weights, host->layer, (size_t)m->layers * sizeof *data->weights);
        return 0;
    }
    const size_t bytes = host->floats * sizeof(float);
    data->weight_storage = device_alloc(d, bytes);
    if (!data->weight_storage) {
        snprintf(error, len, "out of device memory for the weights");
        return -1;
    }
    if (device_upload(d, data->weight_storage, host->storage, bytes, error, len) != 0)
        return -1;
    synth_weights_rebase(host, data->weight_storage, data->weights);
    return 0;
}

/* The pool on the host, then its device copy (the same buffers on the CPU). */
static int make_pool(const cli_device *d, serve_data *data, uint64_t seed, char *error,
                     size_t len)
{
    size_t x, gate, beta;
    token_bytes(&data->model, data->act, &x, &gate, &beta);
    const size_t n = (size_t)data->pool_tokens;
    data->host_x = malloc(n * x);
    data->host_gate = malloc(n * gate);
    data->host_beta = malloc(n * beta);
    if (!data->host_x || !data->host_gate || !data->host_beta) {
        snprintf(error, len, "out of memory for the input pool (%zu tokens)", n);
        return -1;
    }
    const synth_inputs dst = {data->host_x, data->host_gate, data->host_beta};
    for (int64_t t = 0; t < data->pool_tokens; t++)
        synth_token_inputs(&data->model, data->act, seed, POOL_REQUEST, t, 0, &dst, t);
    if (d->where.type == SSM_DEVICE_CPU) {
        data->x = data->host_x;
        data->gate = data->host_gate;
        data->beta = data->host_beta;
        return 0;
    }
    data->x = device_alloc(d, n * x);
    data->gate = device_alloc(d, n * gate);
    data->beta = device_alloc(d, n * beta);
    if (!data->x || !data->gate || !data->beta) {
        snprintf(error, len, "out of device memory for the input pool (%zu tokens)", n);
        return -1;
    }
    if (device_upload(d, data->x, data->host_x, n * x, error, len) != 0 ||
        device_upload(d, data->gate, data->host_gate, n * gate, error, len) != 0 ||
        device_upload(d, data->beta, data->host_beta, n * beta, error, len) != 0)
        return -1;
    return device_sync(d, error, len);
}

int serve_data_create(const cli_device *d, const ssm_model_dims *m, ssm_dtype act,
                      uint64_t seed, int64_t pool_tokens, serve_data *out, char *error,
                      size_t len)
{
    memset(out, 0, sizeof *out);
    out->model = *m;
    out->act = act;
    out->pool_tokens = pool_tokens;
    if (synth_weights_create(m, seed, &out->host_weights) != 0) {
        snprintf(error, len, "out of memory for the weights");
        return -1;
    }
    if (upload_weights(d, out, error, len) != 0 || make_pool(d, out, seed, error, len) != 0) {
        serve_data_destroy(d, out);
        return -1;
    }
    return 0;
}

void serve_data_destroy(const cli_device *d, serve_data *data)
{
    if (d->where.type != SSM_DEVICE_CPU) {
        device_free(d, data->weight_storage);
        device_free(d, data->x);
        device_free(d, data->gate);
        device_free(d, data->beta);
    }
    free(data->host_x);
    free(data->host_gate);
    free(data->host_beta);
    free(data->weights);
    synth_weights_destroy(&data->host_weights);
    memset(data, 0, sizeof *data);
}

int64_t serve_pool_offset(int64_t step, int32_t layer, int32_t kind, int64_t need,
                          int64_t pool_tokens)
{
    uint64_t h = (uint64_t)step * 0x9e3779b97f4a7c15ull;
    h ^= ((uint64_t)(uint32_t)layer + 1) * 0xbf58476d1ce4e5b9ull;
    h ^= ((uint64_t)kind + 1) * 0x94d049bb133111ebull;
    h ^= h >> 31;
    h *= 0xd6e8feb86659fd93ull;
    h ^= h >> 32;
    /* A multiple of 8 tokens: every tensor's batch starts 16-byte aligned, as
     * one allocated for the batch would. */
    return 8 * (int64_t)(h % (uint64_t)((pool_tokens - need) / 8 + 1));
}

ssm_step_io serve_pool_io(const serve_data *data, int64_t first, void *out, int host)
{
    size_t x, gate, beta;
    token_bytes(&data->model, data->act, &x, &gate, &beta);
    const size_t at = (size_t)first;
    ssm_step_io io = {
        (const char *)(host ? data->host_x : data->x) + at * x,
        (const char *)(host ? data->host_gate : data->gate) + at * gate,
        (const char *)(host ? data->host_beta : data->beta) + at * beta,
        out,
    };
    return io;
}
