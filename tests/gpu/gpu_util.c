/* Device-side helpers for the GPU suites (see gpu_util.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "tests/gpu/gpu_util.h"

int gpu_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    printf("# %s: %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
    return 0;
}

int gpu_device_count(void)
{
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess)
        return 0;
    return devices;
}

int gpu_alloc(void **dst, size_t bytes, const void *src, int fill)
{
    *dst = NULL;
    if (!gpu_ok(cudaMalloc(dst, bytes > 0 ? bytes : 1), "cudaMalloc"))
        return 0;
    cudaError_t e = src ? cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice)
                        : cudaMemset(*dst, fill, bytes > 0 ? bytes : 1);
    if (!gpu_ok(e, src ? "cudaMemcpy (upload)" : "cudaMemset")) {
        cudaFree(*dst);
        *dst = NULL;
        return 0;
    }
    return 1;
}

void gpu_free(void *p)
{
    if (p)
        (void)cudaFree(p);
}

static int64_t at_least_one(int64_t tokens)
{
    return tokens > 0 ? tokens : 1;
}

size_t gpu_x_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens)
{
    return ssm_dtype_size(act) * (size_t)(at_least_one(tokens) * ssm_conv_channels(m));
}

size_t gpu_gate_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens)
{
    return ssm_dtype_size(act) * (size_t)(at_least_one(tokens) * ssm_gate_width(m));
}

size_t gpu_beta_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens)
{
    return ssm_dtype_size(act) * (size_t)(at_least_one(tokens) * m->value_heads);
}

size_t gpu_out_bytes(const ssm_model_dims *m, ssm_dtype act, int64_t tokens)
{
    return ssm_dtype_size(act) *
           (size_t)(at_least_one(tokens) * m->value_heads * (int64_t)m->value_dim);
}

int gpu_weights_upload(const ssm_model_dims *m, const test_weights *host, gpu_weights *out)
{
    int64_t d = ssm_conv_channels(m);
    int64_t dt_n = ssm_gate_width(m); /* dt_bias: [HV] (GDN) or [HV][K] (KDA) */
    memset(out, 0, sizeof *out);
    int ok =
        gpu_alloc((void **)&out->conv_weight, sizeof(float) * (size_t)(d * m->conv_width),
                  host->conv_weight, 0) &&
        gpu_alloc((void **)&out->a_log, sizeof(float) * (size_t)m->value_heads, host->a_log, 0) &&
        gpu_alloc((void **)&out->dt_bias, sizeof(float) * (size_t)dt_n, host->dt_bias, 0) &&
        (!host->conv_bias ||
         gpu_alloc((void **)&out->conv_bias, sizeof(float) * (size_t)d, host->conv_bias, 0));
    if (!ok) {
        gpu_weights_free(out);
        return 0;
    }
    out->w.conv_weight = out->conv_weight;
    out->w.conv_bias = out->conv_bias;
    out->w.a_log = out->a_log;
    out->w.dt_bias = out->dt_bias;
    return 1;
}

void gpu_weights_free(gpu_weights *dw)
{
    gpu_free(dw->conv_weight);
    gpu_free(dw->conv_bias);
    gpu_free(dw->a_log);
    gpu_free(dw->dt_bias);
    memset(dw, 0, sizeof *dw);
}

int gpu_inputs_alloc(const ssm_model_dims *m, ssm_dtype act, int64_t tokens, gpu_inputs *out)
{
    memset(out, 0, sizeof *out);
    out->x_bytes = gpu_x_bytes(m, act, tokens);
    out->gate_bytes = gpu_gate_bytes(m, act, tokens);
    out->beta_bytes = gpu_beta_bytes(m, act, tokens);
    if (gpu_alloc(&out->x, out->x_bytes, NULL, 0) &&
        gpu_alloc(&out->gate, out->gate_bytes, NULL, 0) &&
        gpu_alloc(&out->beta, out->beta_bytes, NULL, 0))
        return 1;
    gpu_inputs_free(out);
    return 0;
}

int gpu_inputs_copy(gpu_inputs *dst, const test_io *src, cudaStream_t stream)
{
    return gpu_ok(cudaMemcpyAsync(dst->x, src->x, dst->x_bytes, cudaMemcpyHostToDevice, stream),
                  "cudaMemcpyAsync (x)") &&
           gpu_ok(cudaMemcpyAsync(dst->gate, src->gate, dst->gate_bytes, cudaMemcpyHostToDevice,
                                  stream),
                  "cudaMemcpyAsync (gate)") &&
           gpu_ok(cudaMemcpyAsync(dst->beta, src->beta, dst->beta_bytes, cudaMemcpyHostToDevice,
                                  stream),
                  "cudaMemcpyAsync (beta)");
}

void gpu_inputs_free(gpu_inputs *in)
{
    gpu_free(in->x);
    gpu_free(in->gate);
    gpu_free(in->beta);
    memset(in, 0, sizeof *in);
}

ssm_step_io gpu_inputs_io(const gpu_inputs *in, void *out)
{
    ssm_step_io io = {in->x, in->gate, in->beta, out};
    return io;
}

ssm_status gpu_snapshot_take(ssm_ctx *ctx, int32_t slot, cudaStream_t stream, test_snapshot *out)
{
    test_snapshot_alloc(ctx, out);
    int32_t layers = out->layers;
    void **conv = calloc((size_t)layers, sizeof(void *));
    void **state = calloc((size_t)layers, sizeof(void *));
    ssm_status status = SSM_OK;
    for (int32_t l = 0; l < layers && status == SSM_OK; l++)
        if (!gpu_alloc(&conv[l], out->conv_bytes, NULL, 0x5A) ||
            !gpu_alloc(&state[l], out->state_bytes, NULL, 0x5A))
            status = SSM_ERR_DEVICE;
    if (status == SSM_OK)
        status = ssm_slot_export_canonical(ctx, slot, conv, state, stream);
    if (status == SSM_OK && !gpu_ok(cudaStreamSynchronize(stream), "export: cudaStreamSynchronize"))
        status = SSM_ERR_DEVICE;
    for (int32_t l = 0; l < layers && status == SSM_OK; l++)
        if (!gpu_ok(cudaMemcpy(out->conv[l], conv[l], out->conv_bytes, cudaMemcpyDeviceToHost),
                    "export: cudaMemcpy (conv)") ||
            !gpu_ok(cudaMemcpy(out->state[l], state[l], out->state_bytes, cudaMemcpyDeviceToHost),
                    "export: cudaMemcpy (state)"))
            status = SSM_ERR_DEVICE;
    for (int32_t l = 0; l < layers; l++) {
        gpu_free(conv[l]);
        gpu_free(state[l]);
    }
    free(conv);
    free(state);
    return status;
}
