/* The simulated session's buffers on the context's device (see
 * session_device.h), through cli_device's calls. */
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "cli.h"
#include "session_device.h"

static int device_fail(const char *error)
{
    return cli_fail("run: %s", error);
}

int session_device_upload(const session_device *d, void *dst, const void *src, size_t bytes)
{
    char error[512];
    if (!d->cuda || bytes == 0)
        return CLI_EXIT_OK;
    return device_upload(&d->dev, dst, src, bytes, error, sizeof error) == 0 ? CLI_EXIT_OK
                                                                           : device_fail(error);
}

int session_device_download(const session_device *d, void *dst, const void *src, size_t bytes)
{
    char error[512];
    if (!d->cuda || bytes == 0)
        return CLI_EXIT_OK;
    return device_download(&d->dev, dst, src, bytes, error, sizeof error) == 0
               ? CLI_EXIT_OK
               : device_fail(error);
}

int session_device_sync(const session_device *d)
{
    char error[512];
    if (!d->cuda)
        return CLI_EXIT_OK;
    return device_sync(&d->dev, error, sizeof error) == 0 ? CLI_EXIT_OK : device_fail(error);
}

/* A device twin of `bytes`, remembered as failed when out of memory. */
static void *twin(const session_device *d, int *ok, size_t bytes)
{
    void *p = device_alloc(&d->dev, bytes);
    if (!p)
        *ok = 0;
    return p;
}

/* The weights' device copy: one upload of synth's storage. */
static int upload_weights(session_device *d, const session_host_buffers *h, int *ok)
{
    const size_t bytes = h->weights->floats * sizeof(float);
    d->weight_storage = twin(d, ok, bytes);
    if (!*ok)
        return CLI_EXIT_OK;
    synth_weights_rebase(h->weights, d->weight_storage, d->weights);
    return session_device_upload(d, d->weight_storage, h->weights->storage, bytes);
}

int session_device_open(session_device *d, ssm_device where, const session_host_buffers *h)
{
    const ssm_model_dims *m = h->model;
    memset(d, 0, sizeof *d);
    d->weights = calloc((size_t)m->layers, sizeof *d->weights);
    d->export_window = calloc((size_t)m->layers, sizeof *d->export_window);
    d->export_state = calloc((size_t)m->layers, sizeof *d->export_state);
    if (!d->weights || !d->export_window || !d->export_state) {
        session_device_close(d, 0);
        return cli_fail("out of memory for the session's buffers");
    }
    if (where.type != SSM_DEVICE_CUDA) {
        d->x = h->x, d->gate = h->gate, d->beta = h->beta, d->out = h->out;
        d->prefill_slots = h->prefill_slots, d->prefill_offsets = h->prefill_offsets;
        d->round_slots = h->round_slots, d->accepted = h->accepted;
        memcpy(d->weights, h->weights->layer, (size_t)m->layers * sizeof *d->weights);
        memcpy(d->export_window, h->export_window, (size_t)m->layers * sizeof(void *));
        memcpy(d->export_state, h->export_state, (size_t)m->layers * sizeof(void *));
        return CLI_EXIT_OK;
    }
    char error[512];
    d->cuda = 1;
    d->dev.where = where;
    if (device_open(&d->dev, error, sizeof error) != 0) {
        session_device_close(d, m->layers);
        return device_fail(error);
    }
    const size_t as = ssm_dtype_size(h->act), ss = ssm_dtype_size(h->state_dtype);
    const size_t hv = (size_t)m->value_heads;
    int ok = 1;
    d->x = twin(d, &ok, h->tokens * (size_t)ssm_conv_channels(m) * as);
    d->gate = twin(d, &ok, h->tokens * (size_t)ssm_gate_width(m) * as);
    d->beta = twin(d, &ok, h->tokens * hv * as);
    d->out = twin(d, &ok, h->tokens * hv * (size_t)m->value_dim * as);
    d->prefill_slots = twin(d, &ok, (size_t)h->prefill_rows * sizeof(int32_t));
    d->prefill_offsets = twin(d, &ok, ((size_t)h->prefill_rows + 1) * sizeof(int32_t));
    d->round_slots = twin(d, &ok, (size_t)h->round_rows * sizeof(int32_t));
    d->accepted = twin(d, &ok, (size_t)h->round_rows * sizeof(int32_t));
    for (int32_t l = 0; ok && l < m->layers; l++) {
        d->export_window[l] = twin(d, &ok, (size_t)ssm_ref_window_elems(m) * as);
        d->export_state[l] = twin(d, &ok, (size_t)ssm_ref_state_elems(m) * ss);
    }
    int exit_code = ok ? upload_weights(d, h, &ok) : CLI_EXIT_OK;
    if (exit_code == CLI_EXIT_OK && ok)
        exit_code = session_device_sync(d);
    if (exit_code == CLI_EXIT_OK && !ok)
        exit_code = cli_fail("run: out of device memory for the session's buffers");
    if (exit_code != CLI_EXIT_OK)
        session_device_close(d, m->layers);
    return exit_code;
}

void session_device_close(session_device *d, int32_t layers)
{
    if (d->cuda) {
        device_free(&d->dev, d->x);
        device_free(&d->dev, d->gate);
        device_free(&d->dev, d->beta);
        device_free(&d->dev, d->out);
        device_free(&d->dev, d->prefill_slots);
        device_free(&d->dev, d->prefill_offsets);
        device_free(&d->dev, d->round_slots);
        device_free(&d->dev, d->accepted);
        device_free(&d->dev, d->weight_storage);
        for (int32_t l = 0; l < layers; l++) {
            device_free(&d->dev, d->export_window ? d->export_window[l] : NULL);
            device_free(&d->dev, d->export_state ? d->export_state[l] : NULL);
        }
        device_close(&d->dev);
    }
    free(d->weights);
    free(d->export_window);
    free(d->export_state);
    memset(d, 0, sizeof *d);
}
