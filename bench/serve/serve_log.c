/* A checked request's log (see serve_log.h). */
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "serve_log.h"

/* Bytes of one token's outputs. */
static size_t out_width_bytes(const serve_log *log)
{
    return (size_t)log->model.value_heads * (size_t)log->model.value_dim *
           ssm_dtype_size(log->act);
}

serve_log *serve_log_create(int64_t request, const ssm_model_dims *m, ssm_dtype state_dtype,
                            ssm_dtype act, const uint8_t *checked)
{
    serve_log *log = calloc(1, sizeof *log);
    if (!log)
        return NULL;
    log->request = request;
    log->model = *m;
    log->state_dtype = state_dtype;
    log->act = act;
    log->out = calloc((size_t)m->layers, sizeof *log->out);
    log->checked = malloc((size_t)m->layers);
    if (!log->out || !log->checked) {
        free(log->out);
        free(log->checked);
        free(log);
        return NULL;
    }
    memcpy(log->checked, checked, (size_t)m->layers);
    return log;
}

/* Frees a [layers] array of buffers and the array (NULL is fine). */
static void free_layers(void **buffers, int32_t layers)
{
    for (int32_t l = 0; buffers && l < layers; l++)
        free(buffers[l]);
    free(buffers);
}

void serve_log_destroy(serve_log *log)
{
    if (!log)
        return;
    free(log->calls);
    free(log->checked);
    free_layers(log->out, log->model.layers);
    free_layers(log->window, log->model.layers);
    free_layers(log->state, log->model.layers);
    free(log);
}

/* Room for `tokens` outputs in every layer, growing by doubling. */
static int reserve(serve_log *log, int64_t tokens)
{
    if (tokens <= log->room)
        return 0;
    int64_t room = log->room ? log->room : 256;
    while (room < tokens)
        room *= 2;
    for (int32_t l = 0; l < log->model.layers; l++) {
        if (!log->checked[l])
            continue;
        void *grown = realloc(log->out[l], (size_t)room * out_width_bytes(log));
        if (!grown)
            return -1;
        log->out[l] = grown;
    }
    log->room = room;
    return 0;
}

int64_t serve_log_add(serve_log *log, const serve_call *call)
{
    if (log->failed)
        return -1;
    if (log->count == log->capacity) {
        int32_t capacity = log->capacity ? 2 * log->capacity : 64;
        serve_call *calls = realloc(log->calls, (size_t)capacity * sizeof *calls);
        if (!calls) {
            log->failed = 1;
            return -1;
        }
        log->calls = calls;
        log->capacity = capacity;
    }
    if (reserve(log, log->tokens + call->tokens) != 0) {
        log->failed = 1;
        return -1;
    }
    log->calls[log->count++] = *call;
    int64_t at = log->tokens;
    log->tokens += call->tokens;
    return at;
}

void *serve_log_outputs(const serve_log *log, int32_t layer, int64_t at)
{
    return (char *)log->out[layer] + (size_t)at * out_width_bytes(log);
}

int serve_log_finish(serve_log *log)
{
    const int32_t layers = log->model.layers;
    const size_t window = (size_t)ssm_ref_window_elems(&log->model) * ssm_dtype_size(log->act);
    const size_t state =
        (size_t)ssm_ref_state_elems(&log->model) * ssm_dtype_size(log->state_dtype);
    log->window = calloc((size_t)layers, sizeof *log->window);
    log->state = calloc((size_t)layers, sizeof *log->state);
    int ok = log->window && log->state;
    for (int32_t l = 0; ok && l < layers; l++) {
        if (!log->checked[l])
            continue;
        log->window[l] = malloc(window);
        log->state[l] = malloc(state);
        ok = log->window[l] && log->state[l];
    }
    if (!ok) {
        free_layers(log->window, layers);
        free_layers(log->state, layers);
        log->window = log->state = NULL;
        log->failed = 1;
        return -1;
    }
    log->finished = 1;
    return 0;
}
