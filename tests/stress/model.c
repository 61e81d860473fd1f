/* The model's numbers: per context, slot and layer, the conv window and the
 * matrix state the CPU reference (kernels/reference.h) reaches on the tokens
 * the slot kept; prefills through the chunked form every mode's prefill runs
 * (kernels/chunk.h, docs/prefill.md), decode and verify token by token, as
 * tests/conformance/reference.c follows a slot. Outputs are held to the
 * numerics contract's bound on one device (spec_bound_vs_native,
 * tests/spec_bounds.h); exports to the window bit for bit and the state
 * within spec_bound_vs_native_state (relative RMS 1e-5 fp32, 1e-2 bf16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "tests/stress/stress.h"

void st_model_open(st_session *s)
{
    const ssm_model_dims *m = &s->m;
    size_t lanes = (size_t)s->cap * (size_t)m->layers;
    int64_t max_tokens = ST_MAX_PREFILL > s->t_max ? ST_MAX_PREFILL : s->t_max;
    s->window_bytes = (size_t)ssm_ref_window_elems(m) * ssm_dtype_size(s->ad);
    s->state_bytes = (size_t)ssm_ref_state_elems(m) * ssm_dtype_size(s->sd);
    for (int ci = 0; ci < 2; ci++) {
        s->c[ci].windows = calloc(lanes, s->window_bytes);
        s->c[ci].states = calloc(lanes, s->state_bytes);
    }
    s->tail_window = malloc(s->window_bytes + 1);
    s->tail_state = malloc(s->state_bytes);
    s->lane_scratch = malloc(st_model_lane_bytes(s));
    s->ref_out = malloc((size_t)(max_tokens * m->value_heads * m->value_dim) *
                        ssm_dtype_size(s->ad));
    int64_t seq = ssm_ref_sequence_scratch_floats(m), chunk = ssm_chunk_sequence_scratch_floats(m);
    s->scratch = malloc(sizeof(float) * (size_t)(seq > chunk ? seq : chunk));
    s->out_bound = spec_bound_vs_native(s->sd, s->ad);
    s->state_limit = spec_bound_vs_native_state(s->sd).limit;
}

void st_model_close(st_session *s)
{
    for (int ci = 0; ci < 2; ci++) {
        free(s->c[ci].windows);
        free(s->c[ci].states);
    }
    free(s->tail_window);
    free(s->tail_state);
    free(s->lane_scratch);
    free(s->ref_out);
    free(s->scratch);
}

unsigned char *st_model_window(const st_session *s, int ci, int32_t slot, int32_t l)
{
    return s->c[ci].windows + ((size_t)slot * (size_t)s->m.layers + (size_t)l) * s->window_bytes;
}

unsigned char *st_model_state(const st_session *s, int ci, int32_t slot, int32_t l)
{
    return s->c[ci].states + ((size_t)slot * (size_t)s->m.layers + (size_t)l) * s->state_bytes;
}

void st_model_reset(st_session *s, int ci, int32_t slot)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        memset(st_model_window(s, ci, slot, l), 0, s->window_bytes);
        memset(st_model_state(s, ci, slot, l), 0, s->state_bytes);
    }
}

size_t st_model_lane_bytes(const st_session *s)
{
    return (s->window_bytes + s->state_bytes) * (size_t)s->m.layers;
}

void st_model_save(const st_session *s, int ci, int32_t slot, unsigned char *lane)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        memcpy(lane, st_model_window(s, ci, slot, l), s->window_bytes);
        memcpy(lane + s->window_bytes, st_model_state(s, ci, slot, l), s->state_bytes);
        lane += s->window_bytes + s->state_bytes;
    }
}

void st_model_load(st_session *s, int ci, int32_t slot, const unsigned char *lane)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        memcpy(st_model_window(s, ci, slot, l), lane, s->window_bytes);
        memcpy(st_model_state(s, ci, slot, l), lane + s->window_bytes, s->state_bytes);
        lane += s->window_bytes + s->state_bytes;
    }
}

void st_model_row(st_session *s, int ci, int32_t slot, int32_t l, const ssm_step_io *io,
                  int64_t n, int64_t keep, int prefill)
{
    const ssm_model_dims *m = &s->m;
    unsigned char *window = st_model_window(s, ci, slot, l);
    unsigned char *state = st_model_state(s, ci, slot, l);
    ssm_step_io ref = {io->x, io->gate, io->beta, s->ref_out};
    (prefill ? ssm_chunk_sequence : ssm_ref_sequence)(m, s->sd, s->ad, &s->w[l].w, window, state,
                                                      &ref, keep, s->scratch);
    if (n > keep) { /* a verify's rejected tokens run on a copy */
        ssm_step_io tail = st_io_at(s, &ref, keep);
        memcpy(s->tail_window, window, s->window_bytes);
        memcpy(s->tail_state, state, s->state_bytes);
        ssm_ref_sequence(m, s->sd, s->ad, &s->w[l].w, s->tail_window, s->tail_state, &tail,
                         n - keep, s->scratch);
    }
    char why[256];
    if (!spec_add_block(&s->c[ci].totals[l], io->out, s->ref_out, s->ad,
                        n * m->value_heads * m->value_dim, why, sizeof why))
        st_fail(s, "%s slot %d layer %d: %lld tokens (%lld kept): output %s; bound: %s",
                s->c[ci].mode, slot, l, (long long)n, (long long)keep, why,
                spec_bound_text(s->out_bound));
}

void st_model_check_slot(st_session *s, int ci, int32_t slot)
{
    test_snapshot snap;
    ST_EXPECT(s, test_snapshot_take(s->c[ci].ctx, slot, &snap), SSM_OK);
    for (int32_t l = 0; l < s->m.layers; l++) {
        const unsigned char *want = st_model_window(s, ci, slot, l);
        if (memcmp(snap.conv[l], want, s->window_bytes) != 0) {
            int64_t i = test_first_difference(snap.conv[l], want, s->ad,
                                              ssm_ref_window_elems(&s->m));
            st_fail(s, "%s slot %d layer %d: conv window differs from the model at element %lld "
                    "(%.9g vs %.9g)", s->c[ci].mode, slot, l, (long long)i,
                    ssm_ref_load(snap.conv[l], s->ad, i), ssm_ref_load(want, s->ad, i));
        }
        double rel = test_rel_rms(snap.state[l], s->sd, st_model_state(s, ci, slot, l), s->sd,
                                  ssm_ref_state_elems(&s->m));
        if (!(rel <= s->state_limit))
            st_fail(s, "%s slot %d layer %d: state relative RMS %.3g vs the model; bound %.0e",
                    s->c[ci].mode, slot, l, rel, s->state_limit);
        if (rel / s->state_limit > s->count->worst_state)
            s->count->worst_state = rel / s->state_limit;
    }
    test_snapshot_free(&snap);
}

void st_model_check_totals(st_session *s, int ci, int final)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        const spec_total *t = &s->c[ci].totals[l];
        if (!spec_check_total(s->out_bound, t, final))
            st_fail(s, "%s layer %d: outputs so far (%lld elements) relative RMS %.3g vs the "
                    "model; bound: %s", s->c[ci].mode, l, (long long)t->elements,
                    spec_total_rel_rms(t), spec_bound_text(s->out_bound));
        double share = spec_total_rel_rms(t) / s->out_bound.limit;
        if (final && share > s->count->worst_out)
            s->count->worst_out = share;
    }
}
