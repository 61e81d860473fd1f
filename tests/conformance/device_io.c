/* A conformance session's calls on its device (see conformance.h, "Device
 * staging"). A CPU context gets the host buffers, as an engine on the CPU
 * passes them. A CUDA context reads and writes only device memory the
 * caller owns, so each call stages what it needs there the way an engine
 * does (upload, the call on an explicit stream, wait, download), with the
 * GPU suites' helpers (tests/gpu/gpu_util.h); the checks in session.c,
 * errors.c and reference.c then read host copies on either device. Every
 * CUDA call sits behind HAVE_CUDA: a build without CUDA never makes a CUDA
 * session (main.c runs no CUDA suite there) and links no CUDA runtime. */
#include "config.h" /* the build's: HAVE_CUDA */

#include <stdlib.h>
#include <string.h>

#include "tests/conformance/conformance.h"

#ifdef HAVE_CUDA
#include <cuda_runtime_api.h>

#include "tests/gpu/gpu_util.h"

/* The GPU helpers print "# call: error" before returning 0; the test names
 * what it was doing. */
#define DEVICE_EXPECT(s, ok, what)                                                            \
    ck_assert_msg((ok), "%s [%s, step %d]: %s failed on the device (the # line above says "  \
                  "why)",                                                                     \
                  (s)->desc, (s)->op, (s)->step, (what))

static cudaStream_t stream_of(const session *s)
{
    return (cudaStream_t)s->stream;
}

static const ssm_layer_weights *weights_of(const session *s, int32_t l)
{
    return &((const gpu_weights *)s->device_weights)[l].w;
}

/* One step's tensors in device memory. */
typedef struct device_io {
    void *x, *gate, *beta, *out;
    size_t out_bytes;
} device_io;

static void device_io_free(device_io *d)
{
    gpu_free(d->x);
    gpu_free(d->gate);
    gpu_free(d->beta);
    gpu_free(d->out);
    memset(d, 0, sizeof *d);
}

/* Device copies of the host tensors of `tokens` tokens (at least one, as
 * test_io_make allocates), the outputs as they stand on the host; returns
 * the step io over them. */
static ssm_step_io device_io_upload(session *s, const ssm_step_io *host, int64_t tokens,
                                    device_io *d)
{
    memset(d, 0, sizeof *d);
    if (tokens < 0)
        tokens = 0;
    d->out_bytes = gpu_out_bytes(&s->m, s->ad, tokens);
    int ok = gpu_alloc(&d->x, gpu_x_bytes(&s->m, s->ad, tokens), host->x, 0) &&
             gpu_alloc(&d->gate, gpu_gate_bytes(&s->m, s->ad, tokens), host->gate, 0) &&
             gpu_alloc(&d->beta, gpu_beta_bytes(&s->m, s->ad, tokens), host->beta, 0) &&
             gpu_alloc(&d->out, d->out_bytes, host->out, 0);
    if (!ok)
        device_io_free(d);
    DEVICE_EXPECT(s, ok, "staging a step's tensors");
    ssm_step_io io = {d->x, d->gate, d->beta, d->out};
    return io;
}

/* Waits for the stream (a failed kernel shows here), copies the outputs
 * into host_out and frees the tensors. */
static void device_io_download(session *s, device_io *d, void *host_out)
{
    int ok = gpu_ok(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize") &&
             gpu_ok(cudaMemcpy(host_out, d->out, d->out_bytes, cudaMemcpyDeviceToHost),
                    "cudaMemcpy (outputs)");
    device_io_free(d);
    DEVICE_EXPECT(s, ok, "the step, or copying its outputs back,");
}
#endif

#ifndef HAVE_CUDA
/* A CUDA session in a build without CUDA: main.c never makes one. */
static ssm_status no_cuda(session *s)
{
    ck_abort_msg("%s: a CUDA session in a build without CUDA", s->desc);
    return SSM_ERR_UNSUPPORTED;
}
#endif

void staged_open(session *s)
{
    if (!s->cuda)
        return;
#ifdef HAVE_CUDA
    cudaStream_t stream = NULL;
    DEVICE_EXPECT(s, gpu_ok(cudaSetDevice(0), "cudaSetDevice"), "cudaSetDevice");
    DEVICE_EXPECT(s, gpu_ok(cudaStreamCreate(&stream), "cudaStreamCreate"), "creating a stream");
    s->stream = stream;
    gpu_weights *weights = calloc((size_t)s->m.layers, sizeof *weights);
    ck_assert_msg(weights != NULL, "out of memory");
    s->device_weights = weights;
    for (int32_t l = 0; l < s->m.layers; l++)
        DEVICE_EXPECT(s, gpu_weights_upload(&s->m, &s->w[l], &weights[l]),
                      "uploading a layer's weights");
#else
    no_cuda(s);
#endif
}

void staged_close(session *s)
{
#ifdef HAVE_CUDA
    if (s->stream)
        (void)cudaStreamSynchronize(stream_of(s));
    gpu_weights *weights = s->device_weights;
    for (int32_t l = 0; weights && l < s->m.layers; l++)
        gpu_weights_free(&weights[l]);
    free(weights);
    if (s->stream)
        (void)cudaStreamDestroy(stream_of(s));
#endif
    s->device_weights = NULL;
    s->stream = NULL;
}

const int32_t *staged_array(session *s, const int32_t *host, int32_t n)
{
    if (!s->cuda)
        return host;
#ifdef HAVE_CUDA
    void *copy = NULL;
    size_t bytes = sizeof(int32_t) * (size_t)(n > 0 ? n : 0);
    DEVICE_EXPECT(s, gpu_alloc(&copy, bytes, bytes ? host : NULL, 0), "uploading batch metadata");
    return copy;
#else
    no_cuda(s);
    return NULL;
#endif
}

void staged_array_free(session *s, const int32_t *array)
{
    if (!s->cuda || !array)
        return;
#ifdef HAVE_CUDA
    /* The kernels that read it may still be queued. */
    int ok = gpu_ok(cudaStreamSynchronize(stream_of(s)), "cudaStreamSynchronize");
    gpu_free((void *)array);
    DEVICE_EXPECT(s, ok, "the queued steps");
#endif
}

/* One step call's tensors, weights and stream on the session's device: the
 * host's and no stream on the CPU; on CUDA copies of `tokens` tokens, the
 * layer's device weights and the session's stream, until staged_call_end
 * waits for the call and brings its outputs back into host_out. */
typedef struct staged_call {
    ssm_step_io io;
    const ssm_layer_weights *weights;
    void *stream;
#ifdef HAVE_CUDA
    device_io on_device;
#endif
} staged_call;

static void staged_call_begin(session *s, int32_t l, const ssm_step_io *io, int64_t tokens,
                              staged_call *c)
{
    c->io = *io;
    c->weights = &s->w[l].w;
    c->stream = s->stream;
    if (!s->cuda)
        return;
#ifdef HAVE_CUDA
    c->io = device_io_upload(s, io, tokens, &c->on_device);
    c->weights = weights_of(s, l);
#else
    (void)tokens;
    no_cuda(s);
#endif
}

static void staged_call_end(session *s, staged_call *c, void *host_out)
{
#ifdef HAVE_CUDA
    if (s->cuda)
        device_io_download(s, &c->on_device, host_out);
#else
    (void)s, (void)c, (void)host_out;
#endif
}

ssm_status staged_prefill(session *s, ssm_ctx *ctx, int32_t l, const ssm_prefill_batch *b,
                          const ssm_step_io *io)
{
    staged_call c;
    int64_t tokens = s->cuda && b->rows > 0 ? b->token_offsets_host[b->rows] : 0;
    staged_call_begin(s, l, io, tokens, &c);
    ssm_status status = ssm_prefill(ctx, l, b, c.weights, &c.io, c.stream);
    staged_call_end(s, &c, io->out);
    return status;
}

ssm_status staged_decode(session *s, ssm_ctx *ctx, int32_t l, const ssm_batch *b,
                         const ssm_step_io *io)
{
    staged_call c;
    staged_call_begin(s, l, io, (int64_t)b->rows * b->tokens, &c);
    ssm_status status = ssm_decode(ctx, l, b, c.weights, &c.io, c.stream);
    staged_call_end(s, &c, io->out);
    return status;
}

ssm_status staged_verify(session *s, ssm_ctx *ctx, int32_t l, const ssm_batch *b,
                         const ssm_step_io *io, ssm_ticket *ticket)
{
    staged_call c;
    staged_call_begin(s, l, io, (int64_t)b->rows * b->tokens, &c);
    ssm_status status = ssm_verify(ctx, l, b, c.weights, &c.io, ticket, c.stream);
    staged_call_end(s, &c, io->out);
    return status;
}

ssm_status staged_commit(session *s, ssm_ctx *ctx, const ssm_ticket *ticket,
                         const int32_t *accepted, int32_t rows)
{
    const int32_t *lengths = accepted ? staged_array(s, accepted, rows) : NULL;
    ssm_status status = ssm_commit(ctx, ticket, lengths, s->stream);
    staged_array_free(s, lengths);
    return status;
}

ssm_status staged_export(session *s, ssm_ctx *ctx, int32_t slot, test_snapshot *out)
{
    if (!s->cuda)
        return test_snapshot_take(ctx, slot, out);
#ifdef HAVE_CUDA
    return gpu_snapshot_take(ctx, slot, stream_of(s), out);
#else
    memset(out, 0, sizeof *out);
    return no_cuda(s);
#endif
}
