/* The side-by-side table of `ssmstate run --modes` (see modes_report.h):
 * rows are measures, columns are modes. Every cell is formatted first, so
 * the columns can be as wide as their widest cell. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "modes_report.h"

enum { MAX_COLUMNS = 16, CELL = 48, LABEL_WIDTH = 28 };

typedef struct row {
    const char *label;
    char cells[MAX_COLUMNS][CELL];
} row;

/* Relative RMS (the bounded quantity), with bf16 outputs the largest
 * distance of an element in ulps beside it: shown, never bounded (an
 * element near zero may be many ulps off). */
static void format_error(char *cell, double rel_rms, int64_t ulps, int show_ulps)
{
    char text[32];
    if (show_ulps)
        snprintf(cell, CELL, "%.3g, %s ulp", rel_rms, bound_ulps_text(ulps, text, sizeof text));
    else
        snprintf(cell, CELL, "%.3g", rel_rms);
}

/* How many of the baseline's blocks and states a mode was compared on; a
 * mode compared on fewer (or on blocks native lacks) proves nothing. */
static int complete(const modes_report_mode *m, const modes_report_mode *base)
{
    const compare_difference *d = &m->difference;
    return d->unmatched == 0 && d->blocks == base->summary.output_blocks &&
           d->states == base->summary.final_states;
}

static int relation_holds(const modes_report_mode *m, const modes_report_mode *base)
{
    const compare_difference *d = &m->difference;
    switch (m->relation) {
    case MODES_BASELINE:
        return 1;
    case MODES_BITWISE:
        return complete(m, base) && d->outputs_identical && d->states_identical &&
               d->windows_identical;
    case MODES_REPLAY:
        return complete(m, base) && d->outputs_within_bound && d->states_identical &&
               d->windows_identical;
    case MODES_WITHIN_BOUND:
        return complete(m, base) && d->outputs_within_bound && d->states_within_bound &&
               d->windows_identical;
    }
    return 0;
}

static const char *relation_text(modes_relation r, const char *output_bound)
{
    static char text[160];
    switch (r) {
    case MODES_BASELINE:
        return "the baseline";
    case MODES_BITWISE:
        return "outputs and final states bit for bit";
    case MODES_REPLAY:
        snprintf(text, sizeof text,
                 "outputs %s over the session; exported (materialized) states and conv "
                 "windows bit for bit",
                 output_bound);
        return text;
    case MODES_WITHIN_BOUND:
        snprintf(text, sizeof text,
                 "outputs %s over the session; final states within the state bound",
                 output_bound);
        return text;
    }
    return "";
}

static void print_header(const ssm_config *c, const modes_report_mode *modes, int count)
{
    const session_summary *s = &modes[0].summary;
    const bound states = bound_for_states(BOUND_ONE_DEVICE, c->state_dtype);
    printf("session     %s %d layers, state %s, activations %s, T = %d; %d requests (at most %d "
           "at once), %lld forwards, %lld prefill + %lld accepted tokens, %lld padding rows\n",
           ssm_model_kind_name(c->model.kind), c->model.layers, ssm_dtype_name(c->state_dtype),
           ssm_dtype_name(c->activation_dtype), s->tokens_per_row, s->requests, s->lanes,
           (long long)s->forwards, (long long)s->prefill_tokens, (long long)s->accepted_tokens,
           (long long)s->padding_rows);
    printf("modes       one context each, from this config with only `mode` replaced; same "
           "weights, inputs, prompt and accepted lengths, schedule; run in lockstep\n");
    for (int i = 0; i < count; i++) {
        printf("  %-9s %s", modes[i].name, modes[i].plugin_path);
        if (modes[i].relation == MODES_REPLAY)
            printf(" (history L = %d)", modes[i].history);
        printf("\n");
    }
    printf("required    vs the CPU reference: outputs %s over each layer's whole output, final "
           "states %s, conv windows bit for bit\n",
           s->bound, bound_text(states));
    for (int i = 1; i < count; i++)
        printf("            %s vs %s: %s\n", modes[i].name, modes[0].name,
               relation_text(modes[i].relation, s->bound));
    for (int i = 1; i < count; i++)
        if (modes[i].relation == MODES_REPLAY)
            printf("folds       derived by this command from the fold rules (the library does "
                   "not report them): a layer with n records since its checkpoint folds before "
                   "a step of T tokens when n + 2T > L, at a prefill when n > 0, and at every "
                   "decode of at most [replay] fold_rows rows; counted per (request, layer)\n");
    printf("\n");
}

static void fill_rows(const ssm_config *c, const modes_report_mode *modes, int count, row *rows)
{
    /* Every bound is a relative RMS; with bf16 outputs the largest distance
     * in ulps is shown beside it. */
    const int show_ulps = c->activation_dtype == SSM_DTYPE_BF16;
    const modes_report_mode *base = &modes[0];
    for (int i = 0; i < count; i++) {
        const modes_report_mode *m = &modes[i];
        const session_summary *s = &m->summary;
        const compare_difference *d = &m->difference;
        const int pass = session_passed(s), holds = relation_holds(m, base);
        const int64_t tokens = s->prefill_tokens + s->accepted_tokens;
        int r = 0;

        snprintf(rows[r++].cells[i], CELL, "%s", pass ? "PASS" : "FAIL");
        format_error(rows[r++].cells[i], s->max_rel_error, s->max_ulps, show_ulps);
        snprintf(rows[r++].cells[i], CELL, "%.3g", s->max_state_rel_error);
        if (m->relation == MODES_BASELINE) {
            snprintf(rows[r++].cells[i], CELL, "baseline");
            snprintf(rows[r++].cells[i], CELL, "baseline");
            snprintf(rows[r++].cells[i], CELL, "-");
        } else {
            if (d->outputs_identical && d->blocks > 0)
                snprintf(rows[r].cells[i], CELL, "identical");
            else
                format_error(rows[r].cells[i], d->max_output_rel_rms, d->max_output_ulps,
                             show_ulps);
            r++;
            if (d->states == 0)
                snprintf(rows[r].cells[i], CELL, "not compared");
            else if (d->states_identical && d->windows_identical)
                snprintf(rows[r].cells[i], CELL, "identical");
            else
                snprintf(rows[r].cells[i], CELL, "%.3g%s", d->max_state_rel_rms,
                         d->windows_identical ? "" : ", windows differ");
            r++;
            snprintf(rows[r++].cells[i], CELL, "%s", holds ? "PASS" : "FAIL");
        }
        cli_format_bytes(m->plan.bytes_per_slot, rows[r++].cells[i], CELL);
        snprintf(rows[r++].cells[i], CELL, "%.1f%%",
                 100.0 * (double)m->plan.bytes_per_slot / (double)base->plan.bytes_per_slot);
        if (m->relation == MODES_REPLAY)
            snprintf(rows[r++].cells[i], CELL, "%lld", (long long)m->folds);
        else
            snprintf(rows[r++].cells[i], CELL, "-");
        snprintf(rows[r++].cells[i], CELL, "%.0f",
                 s->library_seconds > 0 ? (double)tokens / s->library_seconds : 0.0);
        snprintf(rows[r++].cells[i], CELL, "%.3f s", s->wall_seconds);
        snprintf(rows[r++].cells[i], CELL, "%s", pass && holds ? "PASS" : "FAIL");
    }
}

static void print_rows(const row *rows, int nrows, const modes_report_mode *modes, int count)
{
    int width = 12;
    for (int r = 0; r < nrows; r++)
        for (int i = 0; i < count; i++)
            if ((int)strlen(rows[r].cells[i]) + 2 > width)
                width = (int)strlen(rows[r].cells[i]) + 2;
    printf("%-*s", LABEL_WIDTH, "");
    for (int i = 0; i < count; i++)
        printf("%-*s", i + 1 < count ? width : 0, modes[i].name);
    printf("\n");
    for (int r = 0; r < nrows; r++) {
        printf("%-*s", LABEL_WIDTH, rows[r].label);
        for (int i = 0; i < count; i++)
            printf("%-*s", i + 1 < count ? width : 0, rows[r].cells[i]);
        printf("\n");
    }
}

/* One line per reason a mode failed. */
static void print_failures(const modes_report_mode *m, const modes_report_mode *base)
{
    const session_summary *s = &m->summary;
    const compare_difference *d = &m->difference;
    const char *name = m->name;
    if (s->violations)
        printf("why         %s: %lld violation%s of the reference check; first: %s\n", name,
               (long long)s->violations, s->violations == 1 ? "" : "s", s->first_violation);
    if (s->status_flags)
        printf("why         %s: ssm_ctx_status reports flags 0x%x\n", name, s->status_flags);
    if (!s->violations && isnan(s->max_rel_error))
        printf("why         %s: NaN outputs\n", name);
    if (m->relation == MODES_BASELINE || relation_holds(m, base))
        return;
    if (!complete(m, base))
        printf("why         %s: compared on %lld of %lld output blocks and %lld of %lld final "
               "states (%lld without a native counterpart)\n",
               name, (long long)d->blocks, (long long)base->summary.output_blocks,
               (long long)d->states, (long long)base->summary.final_states,
               (long long)d->unmatched);
    if (m->relation == MODES_BITWISE && !d->outputs_identical)
        printf("why         %s: outputs differ from %s's\n", name, base->name);
    if (m->relation != MODES_BITWISE && !d->outputs_within_bound)
        printf("why         %s: outputs beyond %s of %s's\n", name, s->bound, base->name);
    if (m->relation != MODES_WITHIN_BOUND && !d->states_identical)
        printf("why         %s: final states differ from %s's\n", name, base->name);
    if (m->relation == MODES_WITHIN_BOUND && !d->states_within_bound)
        printf("why         %s: final states beyond the state bound of %s's\n", name, base->name);
    if (!d->windows_identical)
        printf("why         %s: conv windows differ from %s's\n", name, base->name);
}

int modes_report_print(const ssm_config *config, const modes_report_mode *modes, int count)
{
    static const char *const labels[] = {
        "reference check",         "  max error, outputs",     "  max error, final states",
        "vs native: outputs",      "vs native: final states",  "vs native",
        "state bytes per request", "  of native",              "folds (derived)",
        "tokens/s (library calls)", "wall time (with checks)", "verdict",
    };
    enum { ROWS = sizeof labels / sizeof labels[0] };
    row rows[ROWS];
    memset(rows, 0, sizeof rows);
    for (int r = 0; r < ROWS; r++)
        rows[r].label = labels[r];
    print_header(config, modes, count);
    fill_rows(config, modes, count, rows);
    print_rows(rows, ROWS, modes, count);

    int all_pass = 1;
    for (int i = 0; i < count; i++)
        all_pass &= session_passed(&modes[i].summary) && relation_holds(&modes[i], &modes[0]);
    printf("\n");
    for (int i = 0; i < count; i++)
        print_failures(&modes[i], &modes[0]);
    printf("result      %s\n", all_pass ? "PASS: every mode passes its reference check and "
                                          "stands in its relation to native "
                                          "(docs/numerics.md)"
                                        : "FAIL");
    return all_pass;
}
