/* Reference shadow (see shadow.h). */
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "shadow.h"

struct shadow {
    ssm_model_dims model;
    ssm_dtype state_dtype, act;
    int32_t lanes;
    int64_t window_bytes, state_bytes; /* one layer */
    unsigned char *windows, *states;   /* [lanes][layers][...] */
    unsigned char *tail_window, *tail_state; /* scratch for rejected tokens */
    void *ref_out;                     /* [max_tokens][HV][V] activation dtype */
    float *scratch;                    /* ssm_ref_sequence's or ssm_chunk_sequence's scratch */
    bound output_bound, state_bound;   /* one device: against native's computation */
    bound_total *totals;               /* [layers]: the outputs so far */
};

int shadow_create(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act, int32_t lanes,
                  int64_t max_tokens, bound_relation relation, shadow **out)
{
    shadow *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->model = *m;
    s->state_dtype = state_dtype;
    s->act = act;
    s->lanes = lanes;
    s->window_bytes = ssm_ref_window_elems(m) * (int64_t)ssm_dtype_size(act);
    s->state_bytes = ssm_ref_state_elems(m) * (int64_t)ssm_dtype_size(state_dtype);
    const size_t slots = (size_t)lanes * (size_t)m->layers;
    s->windows = calloc(slots, (size_t)s->window_bytes);
    s->states = calloc(slots, (size_t)s->state_bytes);
    s->tail_window = malloc((size_t)s->window_bytes);
    s->tail_state = malloc((size_t)s->state_bytes);
    s->ref_out = malloc((size_t)(max_tokens * m->value_heads * m->value_dim) *
                        ssm_dtype_size(act));
    int64_t sequential = ssm_ref_sequence_scratch_floats(m),
            chunked = ssm_chunk_sequence_scratch_floats(m);
    s->scratch = malloc((size_t)(sequential > chunked ? sequential : chunked) * sizeof(float));
    s->totals = calloc((size_t)m->layers, sizeof *s->totals);
    if (!s->windows || !s->states || !s->tail_window || !s->tail_state || !s->ref_out ||
        !s->scratch || !s->totals) {
        shadow_destroy(s);
        return -1;
    }
    s->output_bound = bound_for_outputs(relation, state_dtype, act);
    s->state_bound = bound_for_states(relation, state_dtype);
    *out = s;
    return 0;
}

void shadow_destroy(shadow *s)
{
    if (!s)
        return;
    free(s->windows);
    free(s->states);
    free(s->tail_window);
    free(s->tail_state);
    free(s->ref_out);
    free(s->scratch);
    free(s->totals);
    free(s);
}

static unsigned char *lane_window(const shadow *s, int32_t lane, int32_t layer)
{
    return s->windows + ((int64_t)lane * s->model.layers + layer) * s->window_bytes;
}

static unsigned char *lane_state(const shadow *s, int32_t lane, int32_t layer)
{
    return s->states + ((int64_t)lane * s->model.layers + layer) * s->state_bytes;
}

void shadow_reset(shadow *s, int32_t lane)
{
    memset(lane_window(s, lane, 0), 0, (size_t)(s->window_bytes * s->model.layers));
    memset(lane_state(s, lane, 0), 0, (size_t)(s->state_bytes * s->model.layers));
}

ssm_step_io shadow_io_at(const ssm_model_dims *m, ssm_dtype act, const ssm_step_io *io,
                         int64_t t)
{
    const int64_t size = (int64_t)ssm_dtype_size(act);
    ssm_step_io at = {
        (const char *)io->x + t * ssm_conv_channels(m) * size,
        (const char *)io->gate + t * ssm_gate_width(m) * size,
        (const char *)io->beta + t * m->value_heads * size,
        (char *)io->out + t * (int64_t)m->value_heads * m->value_dim * size,
    };
    return at;
}

bound_result shadow_step(shadow *s, int32_t lane, int32_t layer, const ssm_layer_weights *w,
                          const ssm_step_io *io, int64_t n, int64_t keep, int prefill)
{
    const ssm_model_dims *m = &s->model;
    unsigned char *window = lane_window(s, lane, layer), *state = lane_state(s, lane, layer);
    ssm_step_io ref = {io->x, io->gate, io->beta, s->ref_out};

    /* The kept tokens advance the shadow itself; the rest run on a copy, as a
     * verify's rejected tail never reaches the committed state. */
    (prefill ? ssm_chunk_sequence : ssm_ref_sequence)(m, s->state_dtype, s->act, w, window, state,
                                                      &ref, keep, s->scratch);
    if (n > keep) {
        ssm_step_io tail = shadow_io_at(m, s->act, &ref, keep);
        memcpy(s->tail_window, window, (size_t)s->window_bytes);
        memcpy(s->tail_state, state, (size_t)s->state_bytes);
        ssm_ref_sequence(m, s->state_dtype, s->act, w, s->tail_window, s->tail_state, &tail,
                         n - keep, s->scratch);
    }
    return bound_add(&s->totals[layer], io->out, s->ref_out, s->act,
                     n * m->value_heads * m->value_dim);
}

bound_result shadow_outputs(const shadow *s, int32_t layer)
{
    const bound_total *t = &s->totals[layer];
    bound_result r = {bound_total_rel_rms(t), 0, bound_total_pass(s->output_bound, t)};
    return r;
}

bound_result shadow_compare_canonical(const shadow *s, int32_t lane, int32_t layer,
                                       const void *window, const void *state)
{
    bound_result r = bound_compare(state, lane_state(s, lane, layer), s->state_dtype,
                                   ssm_ref_state_elems(&s->model), s->state_bound);
    if (memcmp(window, lane_window(s, lane, layer), (size_t)s->window_bytes) != 0)
        r.pass = 0;
    return r;
}

const char *shadow_bound_text(const shadow *s)
{
    return bound_text(s->output_bound);
}

/* The lanes' windows and states are each one block of layers, so a lane is
 * two runs of bytes. */
int64_t shadow_lane_bytes(const shadow *s)
{
    return (s->window_bytes + s->state_bytes) * s->model.layers;
}

void shadow_lane_save(const shadow *s, int32_t lane, void *bytes)
{
    const int64_t windows = s->window_bytes * s->model.layers;
    memcpy(bytes, lane_window(s, lane, 0), (size_t)windows);
    memcpy((char *)bytes + windows, lane_state(s, lane, 0),
           (size_t)(s->state_bytes * s->model.layers));
}

void shadow_lane_load(shadow *s, int32_t lane, const void *bytes)
{
    const int64_t windows = s->window_bytes * s->model.layers;
    memcpy(lane_window(s, lane, 0), bytes, (size_t)windows);
    memcpy(lane_state(s, lane, 0), (const char *)bytes + windows,
           (size_t)(s->state_bytes * s->model.layers));
}
