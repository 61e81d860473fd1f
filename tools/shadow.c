/* Reference shadow and the SPEC 3.5 bounds (see shadow.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "shadow.h"

/* SPEC 3.5, "any mode, CPU vs CUDA" (the replay-vs-native bounds): fp32
 * activations and state: relative RMS <= 1e-5; bf16 outputs over an fp32
 * state: each element within one bf16 ulp; bf16 state: relative RMS <= 4e-3. */
typedef enum bound_kind { BOUND_REL_RMS, BOUND_BF16_ULP } bound_kind;

struct shadow {
    ssm_model_dims model;
    ssm_dtype state_dtype, act;
    int32_t lanes;
    int64_t window_bytes, state_bytes; /* one layer */
    unsigned char *windows, *states;   /* [lanes][layers][...] */
    unsigned char *tail_window, *tail_state; /* scratch for rejected tokens */
    void *ref_out;                     /* [max_tokens][HV][V] activation dtype */
    float *scratch;                    /* ssm_ref_sequence scratch */
    bound_kind output_bound;
    double output_limit, state_limit;  /* relative RMS limits */
};

int shadow_create(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act, int32_t lanes,
                  int64_t max_tokens, shadow **out)
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
    s->scratch = malloc((size_t)ssm_ref_sequence_scratch_floats(m) * sizeof(float));
    if (!s->windows || !s->states || !s->tail_window || !s->tail_state || !s->ref_out ||
        !s->scratch) {
        shadow_destroy(s);
        return -1;
    }
    if (state_dtype == SSM_DTYPE_BF16) {
        s->output_bound = BOUND_REL_RMS;
        s->output_limit = 4e-3;
    } else if (act == SSM_DTYPE_F32) {
        s->output_bound = BOUND_REL_RMS;
        s->output_limit = 1e-5;
    } else {
        s->output_bound = BOUND_BF16_ULP;
        s->output_limit = INFINITY; /* the ulp test decides */
    }
    s->state_limit = state_dtype == SSM_DTYPE_BF16 ? 4e-3 : 1e-5;
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

/* Position of a bf16 value on the number line, so that adjacent values
 * differ by one and +0 == -0. */
static int64_t bf16_ordinal(uint16_t bits)
{
    int64_t magnitude = bits & 0x7fff;
    return (bits & 0x8000) ? -magnitude : magnitude;
}

static int bf16_is_nan(uint16_t bits)
{
    return (bits & 0x7f80) == 0x7f80 && (bits & 0x007f) != 0;
}

static double relative_rms(const void *got, const void *ref, ssm_dtype t, int64_t n)
{
    double diff2 = 0.0, ref2 = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double g = ssm_ref_load(got, t, i), r = ssm_ref_load(ref, t, i);
        diff2 += (g - r) * (g - r); /* NaN in got makes the result NaN: never passes */
        ref2 += r * r;
    }
    if (ref2 == 0.0)
        return diff2 == 0.0 ? 0.0 : (isnan(diff2) ? NAN : INFINITY);
    return sqrt(diff2 / ref2);
}

static shadow_result compare(const void *got, const void *ref, ssm_dtype t, int64_t n,
                             bound_kind bound, double limit)
{
    shadow_result r = {relative_rms(got, ref, t, n), 0, 0};
    if (bound == BOUND_REL_RMS) {
        r.pass = r.rel_rms <= limit;
        return r;
    }
    const uint16_t *g = got, *e = ref;
    for (int64_t i = 0; i < n; i++) {
        int64_t ulps = llabs(bf16_ordinal(g[i]) - bf16_ordinal(e[i]));
        if (bf16_is_nan(g[i]) || bf16_is_nan(e[i]))
            ulps = INT64_MAX;
        if (ulps > r.max_ulps)
            r.max_ulps = ulps;
    }
    r.pass = r.max_ulps <= 1;
    return r;
}

shadow_result shadow_step(shadow *s, int32_t lane, int32_t layer, const ssm_layer_weights *w,
                          const ssm_step_io *io, int64_t n, int64_t keep)
{
    const ssm_model_dims *m = &s->model;
    unsigned char *window = lane_window(s, lane, layer), *state = lane_state(s, lane, layer);
    ssm_step_io ref = {io->x, io->gate, io->beta, s->ref_out};

    /* The kept tokens advance the shadow itself; the rest run on a copy, as a
     * verify's rejected tail never reaches the committed state. */
    ssm_ref_sequence(m, s->state_dtype, s->act, w, window, state, &ref, keep, s->scratch);
    if (n > keep) {
        ssm_step_io tail = shadow_io_at(m, s->act, &ref, keep);
        memcpy(s->tail_window, window, (size_t)s->window_bytes);
        memcpy(s->tail_state, state, (size_t)s->state_bytes);
        ssm_ref_sequence(m, s->state_dtype, s->act, w, s->tail_window, s->tail_state, &tail,
                         n - keep, s->scratch);
    }
    return compare(io->out, s->ref_out, s->act, n * m->value_heads * m->value_dim,
                   s->output_bound, s->output_limit);
}

shadow_result shadow_compare_canonical(const shadow *s, int32_t lane, int32_t layer,
                                       const void *window, const void *state)
{
    shadow_result r = compare(state, lane_state(s, lane, layer), s->state_dtype,
                              ssm_ref_state_elems(&s->model), BOUND_REL_RMS, s->state_limit);
    if (memcmp(window, lane_window(s, lane, layer), (size_t)s->window_bytes) != 0)
        r.pass = 0;
    return r;
}

const char *shadow_bound_text(const shadow *s)
{
    if (s->output_bound == BOUND_BF16_ULP)
        return "each element within 1 bf16 ulp";
    return s->output_limit < 1e-4 ? "relative RMS <= 1e-5" : "relative RMS <= 4e-3";
}
