/* The conformance suite's oracle: per slot and layer, the conv window and
 * matrix state the CPU reference (kernels/reference.h) reaches on the tokens
 * the slot kept, and the numerics contract's comparisons (tests/spec_bounds.h:
 * relative RMS over the whole output of the session per layer, and over
 * each exported state per layer; every block checked for NaN at once;
 * nothing per element). A CPU context is on the reference's device (the
 * reference computes what native computes): outputs within
 * spec_bound_vs_native (1e-5 for fp32 outputs and 2e-4 for bf16 ones over
 * an fp32 state, 1e-2 over a bf16 state), states within
 * spec_bound_vs_native_state (1e-5 fp32, 1e-2 bf16). A CUDA context is held
 * to the CPU-vs-CUDA rows, as the GPU suites hold it (gpu_world.c):
 * spec_bound_cpu_vs_cuda (1e-4 fp32 outputs, 5e-4 bf16, 1e-2 over a bf16
 * state) and spec_bound_cpu_vs_cuda_state (1e-4, 1e-2); a session whose
 * prefill runs under prefill_precision = fast takes
 * spec_bound_fast_prefill_cpu_vs_cuda (1e-2) for both, the same reference
 * prefilling through its fp32 chunked form. Conv windows hold copies of
 * inputs: bit for bit on either device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/chunk.h"
#include "kernels/reference.h"
#include "tests/conformance/conformance.h"

static unsigned char *lane_window(const session *s, int32_t slot, int32_t l)
{
    return s->windows + ((size_t)slot * (size_t)s->m.layers + (size_t)l) * s->window_bytes;
}

static unsigned char *lane_state(const session *s, int32_t slot, int32_t l)
{
    return s->states + ((size_t)slot * (size_t)s->m.layers + (size_t)l) * s->state_bytes;
}

void ref_open(session *s)
{
    const ssm_model_dims *m = &s->m;
    size_t lanes = (size_t)s->cap * (size_t)m->layers;
    int64_t max_tokens = CONFORM_MAX_PREFILL > s->t_max ? CONFORM_MAX_PREFILL : s->t_max;
    ck_assert_msg(m->layers <= CONFORM_MAX_LAYERS, "too many layers");
    s->window_bytes = (size_t)ssm_ref_window_elems(m) * ssm_dtype_size(s->ad);
    s->state_bytes = (size_t)ssm_ref_state_elems(m) * ssm_dtype_size(s->sd);
    s->windows = calloc(lanes, s->window_bytes);
    s->states = calloc(lanes, s->state_bytes);
    s->tail_window = malloc(s->window_bytes + 1);
    s->tail_state = malloc(s->state_bytes);
    s->ref_out = malloc((size_t)(max_tokens * m->value_heads * m->value_dim) *
                        ssm_dtype_size(s->ad));
    int64_t sequential = ssm_ref_sequence_scratch_floats(m),
            chunked = ssm_chunk_sequence_scratch_floats(m);
    s->scratch = malloc(sizeof(float) * (size_t)(sequential > chunked ? sequential : chunked));
    ck_assert_msg(s->windows && s->states && s->tail_window && s->tail_state && s->ref_out &&
                      s->scratch,
                  "out of memory");
    if (!s->cuda) {
        s->out_bound = spec_bound_vs_native(s->sd, s->ad);
        s->state_limit = spec_bound_vs_native_state(s->sd).limit;
    } else if (s->cfg.prefill_precision == SSM_PREFILL_PRECISION_FAST) {
        s->out_bound = spec_bound_fast_prefill_cpu_vs_cuda();
        s->state_limit = s->out_bound.limit;
    } else {
        s->out_bound = spec_bound_cpu_vs_cuda(s->sd, s->ad);
        s->state_limit = spec_bound_cpu_vs_cuda_state(s->sd).limit;
    }
    memset(s->totals, 0, sizeof s->totals);
}

void ref_close(session *s)
{
    free(s->windows);
    free(s->states);
    free(s->tail_window);
    free(s->tail_state);
    free(s->ref_out);
    free(s->scratch);
}

void ref_reset(session *s, int32_t slot)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        memset(lane_window(s, slot, l), 0, s->window_bytes);
        memset(lane_state(s, slot, l), 0, s->state_bytes);
    }
}

void ref_check_row(session *s, const ssm_step_io *io, int32_t l, int32_t row, int32_t slot,
                   int64_t n, int64_t keep, int prefill)
{
    const ssm_model_dims *m = &s->m;
    size_t es = ssm_dtype_size(s->ad);
    int64_t out_elems = (int64_t)m->value_heads * m->value_dim;
    ssm_step_io ref = {io->x, io->gate, io->beta, s->ref_out};
    (prefill ? ssm_chunk_sequence : ssm_ref_sequence)(m, s->sd, s->ad, &s->w[l].w,
                                                      lane_window(s, slot, l),
                                                      lane_state(s, slot, l), &ref, keep, s->scratch);
    if (n > keep) { /* a verify's rejected tokens run on a copy */
        ssm_step_io tail = {(const char *)io->x + keep * ssm_conv_channels(m) * (int64_t)es,
                            (const char *)io->gate + keep * ssm_gate_width(m) * (int64_t)es,
                            (const char *)io->beta + keep * m->value_heads * (int64_t)es,
                            (char *)s->ref_out + keep * out_elems * (int64_t)es};
        memcpy(s->tail_window, lane_window(s, slot, l), s->window_bytes);
        memcpy(s->tail_state, lane_state(s, slot, l), s->state_bytes);
        ssm_ref_sequence(m, s->sd, s->ad, &s->w[l].w, s->tail_window, s->tail_state, &tail,
                         n - keep, s->scratch);
    }
    char why[256];
    if (!spec_add_block(&s->totals[l], io->out, s->ref_out, s->ad, n * out_elems, why,
                        sizeof why))
        ck_abort_msg("%s [%s, step %d]: layer %d row %d (slot %d), %lld tokens (%lld kept): "
                     "output %s; bound: %s",
                     s->desc, s->op, s->step, l, row, slot, (long long)n, (long long)keep, why,
                     spec_bound_text(s->out_bound));
}

void ref_check_export(session *s, int32_t slot, const test_snapshot *snap)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        const unsigned char *want = lane_window(s, slot, l);
        if (memcmp(snap->conv[l], want, s->window_bytes) != 0) {
            size_t es = ssm_dtype_size(s->ad), i = 0;
            while (i + es < s->window_bytes && !memcmp((char *)snap->conv[l] + i, want + i, es))
                i += es;
            ck_abort_msg("%s [%s, step %d]: slot %d layer %d: exported conv window differs from "
                         "the reference's at element %zu (%.9g vs %.9g)",
                         s->desc, s->op, s->step, slot, l, i / es,
                         ssm_ref_load(snap->conv[l], s->ad, (int64_t)(i / es)),
                         ssm_ref_load(want, s->ad, (int64_t)(i / es)));
        }
        double rel = test_rel_rms(snap->state[l], s->sd, lane_state(s, slot, l), s->sd,
                                  ssm_ref_state_elems(&s->m));
        if (!(rel <= s->state_limit))
            ck_abort_msg("%s [%s, step %d]: slot %d layer %d: exported state relative RMS %.3g "
                         "vs the reference; bound: %.0e",
                         s->desc, s->op, s->step, slot, l, rel, s->state_limit);
    }
}

void ref_check_totals(session *s, int final)
{
    for (int32_t l = 0; l < s->m.layers; l++) {
        const spec_total *t = &s->totals[l];
        if (!spec_check_total(s->out_bound, t, final))
            ck_abort_msg("%s [%s, step %d]: layer %d: outputs so far (%lld elements) relative "
                         "RMS %.3g vs the reference; bound: %s",
                         s->desc, s->op, s->step, l, (long long)t->elements,
                         spec_total_rel_rms(t), spec_bound_text(s->out_bound));
    }
}
