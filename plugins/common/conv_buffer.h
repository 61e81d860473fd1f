/* The conv window as every mode keeps it (docs/modes.md): per (slot, layer) a
 * buffer of W-1 window rows followed by T_max tail rows. A verify stages its
 * T inputs in the tail, so the conv of its tokens reads [window; tail], and a
 * commit of `a` shifts the buffer by a rows: the window is then exactly the
 * last W-1 accepted inputs, for any a, bit for bit. Decode and prefill leave
 * the tail alone and advance the window directly. */
#ifndef SSM_COMMON_CONV_BUFFER_H
#define SSM_COMMON_CONV_BUFFER_H

#include "ssmstate/types.h"

/* Rows in one buffer: W - 1 + max_tokens. */
static inline int64_t ssm_conv_buffer_rows(const ssm_model_dims *m, int32_t max_tokens)
{
    return (int64_t)m->conv_width - 1 + max_tokens;
}

/* Bytes of one buffer. */
static inline size_t ssm_conv_buffer_bytes(const ssm_model_dims *m, ssm_dtype act,
                                           int32_t max_tokens)
{
    return (size_t)ssm_conv_buffer_rows(m, max_tokens) * (size_t)ssm_conv_channels(m) *
           ssm_dtype_size(act);
}

/* Copies T input rows x [T][D] into the tail and returns the tail. */
void *ssm_conv_buffer_stage(const ssm_model_dims *m, ssm_dtype act, void *buffer, const void *x,
                            int32_t tokens);

/* Keeps the first `accepted` staged rows: the window becomes the last W-1
 * rows of [window; staged[0..accepted)]. */
void ssm_conv_buffer_commit(const ssm_model_dims *m, ssm_dtype act, void *buffer,
                            int32_t accepted);

#endif
