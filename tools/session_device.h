/* Where the simulated session's batch buffers live: the context's device.
 * On the CPU they are the session's host buffers themselves; on a CUDA
 * context each has a device twin, the inputs and metadata are uploaded
 * before a call and the outputs downloaded after it, on one stream, so the
 * checks against the reference read what the GPU computed. Private to the
 * tool (session.c). */
#ifndef SSM_TOOLS_SESSION_DEVICE_H
#define SSM_TOOLS_SESSION_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "device.h"
#include "synth.h"

typedef struct session_device {
    cli_device dev;  /* the stream: NULL on the CPU */
    int cuda;          /* 0: every pointer below is the host buffer itself */
    void *x, *gate, *beta, *out;
    int32_t *prefill_slots, *prefill_offsets, *round_slots, *accepted;
    ssm_layer_weights *weights; /* [layers] */
    float *weight_storage;
    void **export_window, **export_state; /* [layers] */
} session_device;

/* What session_device_open mirrors: the host side of every buffer above. */
typedef struct session_host_buffers {
    const ssm_model_dims *model;
    ssm_dtype act, state_dtype;
    size_t tokens;                  /* tokens the io buffers hold */
    int32_t prefill_rows, round_rows;
    void *x, *gate, *beta, *out;
    int32_t *prefill_slots, *prefill_offsets, *round_slots, *accepted;
    const synth_weights *weights;
    void **export_window, **export_state;
} session_host_buffers;

/* Prepares the buffers for a context on `where`: on the CPU the host's, on
 * CUDA device twins (weights uploaded once) and a stream. Returns
 * CLI_EXIT_OK or an exit code after printing why not; *d is then closed. */
int session_device_open(session_device *d, ssm_device where, const session_host_buffers *h);
void session_device_close(session_device *d, int32_t layers);

/* Host to device before a call (nothing on the CPU). Returns CLI_EXIT_OK or
 * an exit code after printing the error. */
int session_device_upload(const session_device *d, void *dst, const void *src, size_t bytes);

/* Waits for the stream, then device to host (nothing on the CPU). */
int session_device_download(const session_device *d, void *dst, const void *src, size_t bytes);

/* Waits for everything queued on the stream (nothing on the CPU): a failed
 * kernel shows up here. */
int session_device_sync(const session_device *d);

#endif
