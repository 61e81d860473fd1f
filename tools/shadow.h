/* The checker of `ssmstate run`: a shadow copy of every lane's per-layer
 * state (conv window and matrix state, starting at zero like a fresh slot)
 * that runs the same tokens as the library through the CPU reference
 * (kernels/reference.h) and holds the outputs and final states to the
 * numerics contract's bounds (bound.h): each layer's outputs
 * over the session as one tensor, each final state as one. */
#ifndef SSM_TOOLS_SHADOW_H
#define SSM_TOOLS_SHADOW_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "bound.h"

typedef struct shadow shadow;

/* Shadows for `lanes` concurrent requests; a step checks up to max_tokens
 * tokens of one row, against the bounds of `relation` (BOUND_CPU_VS_CUDA
 * for a CUDA context). Returns 0, or -1 when out of memory. */
int shadow_create(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act, int32_t lanes,
                  int64_t max_tokens, bound_relation relation, shadow **out);
void shadow_destroy(shadow *s);

/* Zero state and window in every layer of a lane, as a freshly acquired slot. */
void shadow_reset(shadow *s, int32_t lane);

/* Runs the n tokens of one row (inputs at offsets 0..n-1 of io) from the
 * lane's state in `layer`, compares the reference outputs with the library's
 * (io->out, [n][HV][V]), adds them to the layer's outputs so far, and
 * advances the lane's state by the first `keep` tokens only (a verify whose
 * first `keep` tokens are accepted). A prefill runs the chunked form every
 * mode's prefill runs (kernels/chunk.h), other steps token by token. The
 * result is the block's own: pass says only that it held no non-finite
 * value (the bound is the layer's, shadow_outputs). */
bound_result shadow_step(shadow *s, int32_t lane, int32_t layer, const ssm_layer_weights *w,
                          const ssm_step_io *io, int64_t n, int64_t keep, int prefill);

/* Compares a slot's exported canonical form for `layer` (window [W-1][D] in
 * the activation dtype, state [HV][V][K] in the state dtype) with the lane's
 * shadow: the window must match bit for bit, the state within the bound. */
bound_result shadow_compare_canonical(const shadow *s, int32_t lane, int32_t layer,
                                       const void *window, const void *state);

/* A lane's reference state (every layer's window and state) as bytes, for
 * checkpoints: shadow_lane_bytes of them, read from or written to `bytes`. */
int64_t shadow_lane_bytes(const shadow *s);
void shadow_lane_save(const shadow *s, int32_t lane, void *bytes);
void shadow_lane_load(shadow *s, int32_t lane, const void *bytes);

/* Every output of `layer` compared so far, as one tensor, against the
 * output bound. */
bound_result shadow_outputs(const shadow *s, int32_t layer);

/* The output bound in words, e.g. "relative RMS <= 1e-5". */
const char *shadow_bound_text(const shadow *s);

/* io advanced to token `t` (all four tensors), for rows inside a batch. */
ssm_step_io shadow_io_at(const ssm_model_dims *m, ssm_dtype act, const ssm_step_io *io,
                         int64_t t);

#endif
