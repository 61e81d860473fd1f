/* Tables and JSON of `ssmstate serve` (see serve_report.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "tools/cli.h"
#include "serve_report.h"

serve_ratios serve_report_ratios(const serve_table *t)
{
    serve_ratios r = {NAN, NAN, 0, NAN, NAN, NAN};
    const serve_mode_result *native = serve_find_mode(t, "native");
    const serve_mode_result *compact = serve_find_mode(t, "compact");
    const serve_mode_result *replay = serve_find_mode(t, "replay");
    if (!native || native->max_concurrent == 0)
        return r;
    r.native_max = native->max_concurrent;
    /* what each budget holds, not the run's capped slots */
    if (replay)
        r.replay_concurrent = (double)replay->budget_holds / (double)native->budget_holds;
    if (compact)
        r.compact_concurrent = (double)compact->budget_holds / (double)native->budget_holds;
    const serve_point *base = serve_find_point(native, r.native_max);
    const serve_point *rp = serve_find_point(replay, r.native_max);
    const serve_point *cp = serve_find_point(compact, r.native_max);
    if (base)
        r.native_rows = base->mean_rows;
    if (base && base->tokens_per_second > 0) {
        if (rp)
            r.replay_speed = rp->tokens_per_second / base->tokens_per_second;
        if (cp)
            r.compact_speed = cp->tokens_per_second / base->tokens_per_second;
    }
    return r;
}

/* 1 when the mode ran, raised no flag and passed its check (if any). */
static int mode_passed(const serve_mode_result *m)
{
    return !m->error[0] && m->status_flags == 0 && (!m->check.ran || m->check.pass);
}

int serve_report_passed(const serve_table *t)
{
    for (int32_t i = 0; i < t->modes_count; i++)
        if (!mode_passed(&t->modes[i]))
            return 0;
    return 1;
}

/* "1.23" or "-" for NaN. */
static const char *number(char *buf, size_t len, const char *format, double value)
{
    if (isnan(value))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, format, value);
    return buf;
}

/* The table's check column for a mode. */
static const char *check_cell(const serve_mode_result *m)
{
    if (m->status_flags)
        return "FLAGGED";
    if (!m->check.ran)
        return "-";
    return m->check.pass ? "pass" : "FAIL";
}

/* One mode's table line at its largest concurrency, or why it has none. */
static void print_mode_row(const serve_mode_result *m)
{
    char bytes[32], tps[32], p50[32], p99[32], folds[32];
    if (m->max_concurrent == 0 || (m->error[0] && m->points_count == 0)) {
        printf("  %-9s %-13s %s\n", m->mode,
               m->plan.bytes_per_slot ? cli_format_bytes(m->plan.bytes_per_slot, bytes,
                                                         sizeof bytes)
                                      : "-",
               m->error);
        return;
    }
    const serve_point *p = serve_max_point(m);
    printf("  %-9s %-13s %-14lld %-14s %-8s %-8s %-10s %s\n", m->mode,
           cli_format_bytes(m->plan.bytes_per_slot, bytes, sizeof bytes),
           (long long)m->budget_holds,
           number(tps, sizeof tps, "%.1f", p ? p->tokens_per_second : NAN),
           number(p50, sizeof p50, "%.3f", p ? p->p50_ms : NAN),
           number(p99, sizeof p99, "%.3f", p ? p->p99_ms : NAN),
           number(folds, sizeof folds, "%.1f", p ? p->folds_per_second : NAN), check_cell(m));
}

/* Every level of every mode, one line each. */
static void print_sweep(const serve_table *t)
{
    printf("  sweep: every concurrency level (rows: MTP rounds per step; busy: requests "
           "holding a slot per step):\n");
    printf("  %-9s %-11s %-12s %-8s %-8s %-10s %-9s %-8s %-12s %s\n", "mode", "concurrency",
           "tokens/s", "p50 ms", "p99 ms", "device p50", "rows", "busy", "prefill/step",
           "folds/s");
    for (int32_t i = 0; i < t->modes_count; i++) {
        const serve_mode_result *m = &t->modes[i];
        for (int32_t k = 0; k < m->points_count; k++) {
            const serve_point *p = &m->points[k];
            char tps[32], p50[32], p99[32], dev[32], rows[32], busy[32], fill[32], folds[32];
            printf("  %-9s %-11d %-12s %-8s %-8s %-10s %-9s %-8s %-12s %s\n", m->mode,
                   p->concurrency, number(tps, sizeof tps, "%.1f", p->tokens_per_second),
                   number(p50, sizeof p50, "%.3f", p->p50_ms),
                   number(p99, sizeof p99, "%.3f", p->p99_ms),
                   number(dev, sizeof dev, "%.3f", p->device_p50_ms),
                   number(rows, sizeof rows, "%.1f", p->mean_rows),
                   number(busy, sizeof busy, "%.1f", p->mean_busy),
                   number(fill, sizeof fill, "%.1f",
                          p->steps ? (double)p->prefill_tokens / (double)p->steps : NAN),
                   number(folds, sizeof folds, "%.1f", p->folds_per_second));
        }
    }
}

/* The ratios the serving targets name (nothing without native). */
static void print_ratios(const serve_table *t)
{
    serve_ratios r = serve_report_ratios(t);
    char a[32], b[32], c[32], d[32];
    if (r.native_max == 0)
        return;
    printf("  ratios: concurrent requests replay/native %sx (target >= 2.5x), compact/native "
           "%sx (>= 3x);\n",
           number(a, sizeof a, "%.2f", r.replay_concurrent),
           number(b, sizeof b, "%.2f", r.compact_concurrent));
    printf("          tokens/s at native's largest concurrency (%d): replay/native %sx "
           "(target >= 1.8x), compact/native %sx\n",
           r.native_max, number(c, sizeof c, "%.2f", r.replay_speed),
           number(d, sizeof d, "%.2f", r.compact_speed));
    if (isfinite(r.native_rows) && r.native_rows < 0.9 * r.native_max)
        printf("          (at that level %.1f of the %d requests ran an MTP round a step, the\n"
               "          rest waited for prefill: --chunk bounds it; see docs/serve.md)\n",
               r.native_rows, r.native_max);
    static const char *const others[2] = {"replay", "compact"};
    for (int i = 0; i < 2; i++) {
        const serve_mode_result *m = serve_find_mode(t, others[i]);
        if (m && m->max_concurrent < r.native_max)
            printf("          (%s: -x, it holds %d requests, fewer than native's %d, so it has "
                   "no point at that level)\n",
                   others[i], m->max_concurrent, r.native_max);
    }
}

/* Flags, a stopped sweep, and each mode's cross-check, one line each. */
static void print_checks(const serve_table *t)
{
    for (int32_t i = 0; i < t->modes_count; i++) {
        const serve_mode_result *m = &t->modes[i];
        const serve_check_result *c = &m->check;
        if (m->status_flags)
            printf("  %s: the kernels flagged slots (ssm_ctx_status flags 0x%x): the numbers "
                   "do not stand\n",
                   m->mode, m->status_flags);
        if (m->error[0] && m->points_count > 0)
            printf("  %s: stopped: %s\n", m->mode, m->error);
        if (!c->ran)
            continue;
        if (c->error[0]) {
            printf("  check %s: FAIL: %s\n", m->mode, c->error);
            continue;
        }
        const compare_difference *d = &c->diff;
        char ulps[48] = "", text[32];
        if (d->max_output_ulps > 0)
            snprintf(ulps, sizeof ulps, ", at most %s bf16 ulps",
                     bound_ulps_text(d->max_output_ulps, text, sizeof text));
        printf("  check %s: %d requests (%d finished) against %s: %lld layer outputs %s "
               "(max relative RMS %.3g%s), %lld final states %s, windows %s: %s\n",
               m->mode, c->requests, c->finished, c->against, (long long)d->blocks,
               c->outputs_bitwise ? (d->outputs_identical ? "bit-identical" : "NOT bit-identical")
                                  : (d->outputs_within_bound ? "within the bound"
                                                             : "OUTSIDE the bound"),
               d->max_output_rel_rms, ulps,
               (long long)d->states,
               c->states_bitwise ? (d->states_identical ? "bit-identical" : "NOT bit-identical")
                                 : (d->states_within_bound ? "within the bound"
                                                           : "OUTSIDE the bound"),
               d->windows_identical ? "bit-identical" : "DIFFER", c->pass ? "pass" : "FAIL");
    }
}

void serve_report_print(const serve_table *t, const serve_options *o)
{
    const ssm_model_dims *m = &t->model;
    const serve_workload *w = &o->workload;
    char budget[32];
    printf("\nssmstate serve: %s: %s, %d layers (H=%d HV=%d K=%d V=%d), state %s, activations "
           "%s, on ",
           t->config_path, ssm_model_kind_name(m->kind), m->layers, m->heads, m->value_heads,
           m->key_dim, m->value_dim, ssm_dtype_name(t->state_dtype), ssm_dtype_name(t->act));
    if (t->device.type == SSM_DEVICE_CUDA)
        printf("%s (cuda:%d)\n", t->device_name, t->device.index);
    else
        printf("the CPU\n");
    printf("  state budget %s; T = %d; acceptance %.2f; prompts %d..%d (log-uniform), outputs "
           "%d..%d; prefill %d tokens/step; arrivals Poisson, ",
           cli_format_bytes(t->budget, budget, sizeof budget), w->tokens, w->accept,
           w->prompt_min, w->prompt_max, w->output_min, w->output_max, o->chunk);
    if (o->rate > 0)
        printf("%.3g per step", o->rate);
    else
        printf("auto rate");
    printf("; %d measured steps per level; seed %llu\n", o->steps,
           (unsigned long long)w->seed);
    printf("  %-9s %-13s %-14s %-14s %-8s %-8s %-10s %s\n", "mode", "state/request",
           "max concurrent", "tokens/s @max", "p50 ms", "p99 ms", "folds/s", "check");
    for (int32_t i = 0; i < t->modes_count; i++)
        print_mode_row(&t->modes[i]);
    for (int32_t i = 0; i < t->modes_count; i++)
        if (t->modes[i].budget_holds > t->modes[i].max_concurrent)
            printf("  (%s: the budget holds %lld requests; the run stops at %d slots, so its "
                   "largest level and tokens/s are at %d)\n",
                   t->modes[i].mode, (long long)t->modes[i].budget_holds,
                   t->modes[i].max_concurrent, t->modes[i].max_concurrent);
    printf("  (folds/s: replay's folds of (slot, layer) states, derived from its fold rule: the "
           "library does not report folds)\n");
    print_ratios(t);
    print_checks(t);
    print_sweep(t);
}

/* ------------------------------------------------------------------ JSON */

/* A JSON string of s (quotes, backslashes and control characters escaped). */
static void json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c < 0x20)
            fprintf(out, "\\u%04x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

/* A JSON number, or null when v is not finite. */
static void json_number(FILE *out, double v)
{
    if (isfinite(v))
        fprintf(out, "%.17g", v);
    else
        fputs("null", out);
}

/* One level as a JSON object. */
static void json_point(FILE *out, const serve_point *p)
{
    fprintf(out, "{\"concurrency\":%d,\"rate\":", p->concurrency);
    json_number(out, p->rate);
    fprintf(out, ",\"warmup_steps\":%lld,\"steps\":%lld,\"idle_steps\":%lld,\"seconds\":",
            (long long)p->warmup_steps, (long long)p->steps, (long long)p->idle_steps);
    json_number(out, p->seconds);
    fprintf(out, ",\"tokens\":%lld,\"verify_rows\":%lld,\"prefill_tokens\":%lld,\"finished\":%lld,"
                 "\"folds\":",
            (long long)p->tokens, (long long)p->verify_rows, (long long)p->prefill_tokens,
            (long long)p->finished);
    if (p->folds >= 0)
        fprintf(out, "%lld", (long long)p->folds);
    else
        fputs("null", out);
    const struct {
        const char *key;
        double value;
    } numbers[] = {
        {"tokens_per_second", p->tokens_per_second}, {"folds_per_second", p->folds_per_second},
        {"p50_ms", p->p50_ms}, {"p99_ms", p->p99_ms}, {"device_p50_ms", p->device_p50_ms},
        {"mean_rows", p->mean_rows}, {"mean_busy", p->mean_busy},
    };
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        fprintf(out, ",\"%s\":", numbers[i].key);
        json_number(out, numbers[i].value);
    }
    fputc('}', out);
}

/* A check as a JSON object, or null when none ran. */
static void json_check(FILE *out, const serve_check_result *c)
{
    if (!c->ran) {
        fputs("null", out);
        return;
    }
    const compare_difference *d = &c->diff;
    fputs("{\"against\":", out);
    json_string(out, c->against);
    fprintf(out, ",\"outputs_bitwise\":%s,\"states_bitwise\":%s,\"requests\":%d,\"finished\":%d,"
                 "\"output_tensors\":%lld,\"final_states\":%lld,\"outputs_identical\":%s,"
                 "\"outputs_within_bound\":%s,\"max_output_rel_rms\":",
            c->outputs_bitwise ? "true" : "false", c->states_bitwise ? "true" : "false",
            c->requests, c->finished, (long long)d->blocks, (long long)d->states,
            d->outputs_identical ? "true" : "false", d->outputs_within_bound ? "true" : "false");
    json_number(out, d->max_output_rel_rms);
    char ulps[32];
    fprintf(out, ",\"max_output_ulps\":%s,\"states_identical\":%s,\"states_within_bound\":%s,"
                 "\"windows_identical\":%s,\"max_state_rel_rms\":",
            d->max_output_ulps == BOUND_ULPS_NAN /* JSON has no NaN */
                ? "null"
                : bound_ulps_text(d->max_output_ulps, ulps, sizeof ulps),
            d->states_identical ? "true" : "false", d->states_within_bound ? "true" : "false",
            d->windows_identical ? "true" : "false");
    json_number(out, d->max_state_rel_rms);
    fprintf(out, ",\"pass\":%s,\"error\":", c->pass ? "true" : "false");
    if (c->error[0])
        json_string(out, c->error);
    else
        fputs("null", out);
    fputc('}', out);
}

/* One mode as a JSON object. */
static void json_mode(FILE *out, const serve_mode_result *m)
{
    const ssm_plan *p = &m->plan;
    fputs("{\"mode\":", out);
    json_string(out, m->mode);
    fprintf(out, ",\"bytes_per_request\":%llu,\"state_bytes\":%llu,\"conv_bytes\":%llu,"
                 "\"scratch_bytes\":%llu,\"shared_bytes\":%llu,\"max_concurrent\":%lld,"
                 "\"run_slots\":%d,\"status_flags\":%u,\"error\":",
            (unsigned long long)p->bytes_per_slot, (unsigned long long)p->state_bytes_per_slot,
            (unsigned long long)p->conv_bytes_per_slot,
            (unsigned long long)p->scratch_bytes_per_slot, (unsigned long long)p->shared_bytes,
            (long long)m->budget_holds, m->max_concurrent, m->status_flags);
    if (m->error[0])
        json_string(out, m->error);
    else
        fputs("null", out);
    fputs(",\"points\":[", out);
    for (int32_t i = 0; i < m->points_count; i++) {
        if (i)
            fputc(',', out);
        json_point(out, &m->points[i]);
    }
    fputs("],\"check\":", out);
    json_check(out, &m->check);
    fputc('}', out);
}

/* One (config, state dtype) as a JSON object. */
static void json_table(FILE *out, const serve_table *t)
{
    const ssm_model_dims *m = &t->model;
    serve_ratios r = serve_report_ratios(t);
    fputs("{\"config\":", out);
    json_string(out, t->config_path);
    fprintf(out, ",\"model\":\"%s\",\"layers\":%d,\"heads\":%d,\"value_heads\":%d,"
                 "\"key_dim\":%d,\"value_dim\":%d,\"state\":\"%s\",\"activation\":\"%s\","
                 "\"device\":",
            ssm_model_kind_name(m->kind), m->layers, m->heads, m->value_heads, m->key_dim,
            m->value_dim, ssm_dtype_name(t->state_dtype), ssm_dtype_name(t->act));
    json_string(out, t->device_name);
    fprintf(out, ",\"device_type\":\"%s\",\"budget_bytes\":%llu,\"history\":%d,\"modes\":[",
            t->device.type == SSM_DEVICE_CUDA ? "cuda" : "cpu", (unsigned long long)t->budget,
            t->history);
    for (int32_t i = 0; i < t->modes_count; i++) {
        if (i)
            fputc(',', out);
        json_mode(out, &t->modes[i]);
    }
    fputs("],\"ratios\":{\"replay_concurrent\":", out);
    json_number(out, r.replay_concurrent);
    fputs(",\"compact_concurrent\":", out);
    json_number(out, r.compact_concurrent);
    fprintf(out, ",\"native_max\":%d,\"replay_tokens_per_second\":", r.native_max);
    json_number(out, r.replay_speed);
    fputs(",\"compact_tokens_per_second\":", out);
    json_number(out, r.compact_speed);
    fputs(",\"native_rows\":", out);
    json_number(out, r.native_rows);
    fputs("}}", out);
}

int serve_report_json(FILE *out, const serve_table *tables, int32_t count,
                      const serve_options *o)
{
    const serve_workload *w = &o->workload;
    fprintf(out, "{\"command\":\"serve\",\"version\":\"%d.%d.%d\",\"interrupted\":%s,"
                 "\"options\":{\"seed\":%llu,\"tokens\":%d,\"accept\":",
            SSMSTATE_VERSION_MAJOR, SSMSTATE_VERSION_MINOR, SSMSTATE_VERSION_PATCH,
            serve_interrupted ? "true" : "false", (unsigned long long)w->seed, w->tokens);
    json_number(out, w->accept);
    fprintf(out, ",\"prompt_min\":%d,\"prompt_max\":%d,\"output_min\":%d,\"output_max\":%d,"
                 "\"chunk\":%d,\"rate\":",
            w->prompt_min, w->prompt_max, w->output_min, w->output_max, o->chunk);
    if (o->rate > 0)
        json_number(out, o->rate);
    else
        fputs("\"auto\"", out);
    fprintf(out, ",\"steps\":%d,\"warmup_steps\":%d,\"check\":%d},\"tables\":[", o->steps,
            o->warmup_steps, o->check);
    for (int32_t i = 0; i < count; i++) {
        if (i)
            fputs(",\n", out);
        json_table(out, &tables[i]);
    }
    fputs("]}\n", out);
    return ferror(out) ? -1 : 0;
}
