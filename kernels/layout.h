/* Where things are in the tensors of types.h: token-major activations, one
 * place for the offset arithmetic every mode's CPU path needs. */
#ifndef SSM_KERNELS_LAYOUT_H
#define SSM_KERNELS_LAYOUT_H

#include "ssmstate/types.h"

/* The tensors of `io` shifted to start at token `first`. */
static inline ssm_step_io ssm_io_at(const ssm_model_dims *m, ssm_dtype act, const ssm_step_io *io,
                                    int64_t first)
{
    size_t es = ssm_dtype_size(act);
    ssm_step_io r;
    r.x = (const char *)io->x + (size_t)(first * ssm_conv_channels(m)) * es;
    r.gate = (const char *)io->gate + (size_t)(first * ssm_gate_width(m)) * es;
    r.beta = (const char *)io->beta + (size_t)(first * m->value_heads) * es;
    r.out = io->out ? (char *)io->out + (size_t)(first * m->value_heads * m->value_dim) * es
                    : NULL;
    return r;
}

/* Bytes of one token's output [HV][V]. */
static inline size_t ssm_out_row_bytes(const ssm_model_dims *m, ssm_dtype act)
{
    return (size_t)m->value_heads * m->value_dim * ssm_dtype_size(act);
}

/* Bytes of one layer's matrix state [HV][V][K]. */
static inline size_t ssm_state_bytes(const ssm_model_dims *m, ssm_dtype state)
{
    return (size_t)m->value_heads * m->value_dim * m->key_dim * ssm_dtype_size(state);
}

#endif
