/* Synthetic data for the simulated session. Every number is a pure function
 * of the workload seed and its coordinates (layer, request, token position,
 * round), never of the order in which the session asks for it: a run is
 * reproducible, the dump can regenerate the inputs of any token, and a
 * verified token reads the same inputs as when it is committed. */
#ifndef SSM_TOOLS_SYNTH_H
#define SSM_TOOLS_SYNTH_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "workload.h"

/* fp32 weights of every layer with realistic statistics: conv weight
 * ~ N(0, 1/W), conv bias ~ N(0, 0.05^2), A_log = log(U[1, 16]),
 * dt_bias ~ N(-2, 0.5^2) ([HV] for GDN, [HV][K] for KDA). */
typedef struct synth_weights {
    int32_t layers;
    ssm_layer_weights *layer; /* [layers], pointing into storage */
    float *storage;           /* every layer back to back */
    size_t floats;            /* of storage */
} synth_weights;

/* w's layers for a copy of w->storage at `base` (a device copy, say):
 * out[l] points where w->layer[l] does, relative to base. */
void synth_weights_rebase(const synth_weights *w, const float *base, ssm_layer_weights *out);

/* Returns 0, or -1 when out of memory (nothing allocated then). */
int synth_weights_create(const ssm_model_dims *m, uint64_t seed, synth_weights *out);
void synth_weights_destroy(synth_weights *w);

/* Prompt length of a request, uniform in [prompt_min, prompt_max]. */
int32_t synth_prompt_length(const workload *w, int32_t request);

/* Accepted length of a verify round of `tokens` tokens: 1 (the first token
 * is always accepted) plus the number of leading drafts accepted, each with
 * probability w->acceptance. */
int32_t synth_accepted_length(const workload *w, int32_t request, int32_t round,
                              int32_t tokens);

/* Destination of one token's inputs: element 0 of token `at` in buffers of
 * the activation dtype laid out as in ssm_step_io. */
typedef struct synth_inputs {
    void *x;    /* [.][D] */
    void *gate; /* [.][HV] or [.][HV][K] */
    void *beta; /* [.][HV] */
} synth_inputs;

/* Writes the inputs of (request, position, layer), rounded to `act`:
 * x ~ N(0, 1), gate ~ N(0, 1), beta ~ N(0, 1.5^2). request -1 is a padding
 * row's filler. */
void synth_token_inputs(const ssm_model_dims *m, ssm_dtype act, uint64_t seed, int32_t request,
                        int64_t position, int32_t layer, const synth_inputs *dst, int64_t at);

#endif
