/* The simulated session's state, shared by session.c (the run) and
 * session_checkpoint.c (saving and resuming it). Private to the tool. */
#ifndef SSM_TOOLS_SESSION_PRIVATE_H
#define SSM_TOOLS_SESSION_PRIVATE_H

#include <stdint.h>

#include "dump.h"
#include "session.h"
#include "session_device.h"
#include "shadow.h"
#include "synth.h"

/* A request of the workload. `committed` counts its tokens so far and is
 * also the position of its next token: prompt tokens are 0 .. prompt-1,
 * decode tokens follow. */
typedef struct request {
    int32_t id;
    int32_t prompt_tokens;
    int32_t committed;
    int32_t rounds;
    int32_t slot;
    int32_t lane;
    int32_t *accepted; /* [decode_steps]: accepted length of each round */
} request;

/* One row of this forward's prefill or round batch. */
typedef struct batch_row {
    request *req;   /* NULL: a padding row (slot -1) */
    int32_t tokens; /* prompt chunk, or T */
    int32_t keep;   /* tokens the row commits: the chunk, or the accepted length */
} batch_row;

/* The rows of one batch and their caller-owned metadata. */
typedef struct batch_rows {
    batch_row *rows;
    int32_t count;
    int32_t *slots;   /* [count] */
    int32_t *offsets; /* [count+1] first token of each row in the tensors */
    int32_t *accepted;/* [count] rounds only */
} batch_rows;

struct session {
    ssm_ctx *ctx;
    const ssm_config *config;
    workload workload; /* a copy of the options' */
    ssm_model_dims model;
    ssm_dtype act, state_dtype;
    int32_t lanes, tokens_per_row;
    int64_t max_committed; /* longest request: prompt_max + decode_steps * T */
    session_summary *sum;
    const session_observer *observer; /* NULL: none */

    synth_weights weights;
    shadow *shadow;
    dump *dump;

    request *requests;
    int32_t *accepted_history;
    request **lane_request; /* [lanes], NULL when free */
    int32_t next_request, finished;

    /* Batch buffers, allocated once and shared by prefill and rounds (each
     * call has finished, its outputs downloaded, before the next fills
     * them), and their twins on the context's device. */
    batch_rows prefill, round;
    void *x, *gate, *beta, *out;
    size_t io_tokens; /* tokens x, gate, beta and out hold */
    session_device device;

    /* Finishing a request: the exported canonical form of every layer. */
    void **export_window, **export_state;

    /* Dump only: the library's outputs of each lane's committed tokens
     * [lanes][layers][max_committed][HV*V], and float32 staging. */
    float *lane_outputs;
    float *stage_x, *stage_gate, *stage_beta, *stage_state, *stage_window;
    void *one_x, *one_gate, *one_beta;
};

#endif
