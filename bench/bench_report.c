/* The bench's output: ratios derived across rows, the table on stdout and
 * one JSON object per row. Nothing here measures; it reads bench_table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "tools/cli.h"

bench_row *bench_table_add(bench_table *t)
{
    if (t->count == t->capacity) {
        int32_t capacity = t->capacity ? 2 * t->capacity : 64;
        bench_row *grown = realloc(t->rows, (size_t)capacity * sizeof *grown);
        if (!grown)
            return NULL;
        t->rows = grown;
        t->capacity = capacity;
    }
    bench_row *row = &t->rows[t->count++];
    memset(row, 0, sizeof *row);
    row->gbps = row->copy_fraction = row->speedup = row->fla_us = NAN;
    return row;
}

void bench_table_free(bench_table *t)
{
    free(t->rows);
    t->rows = NULL;
    t->count = t->capacity = 0;
}

static const char *op_name(bench_op op)
{
    return op == BENCH_OP_COPY ? "copy" : op == BENCH_OP_DECODE ? "decode" : "round";
}

/* The measured row of (op, mode, layers, batch, accepted), or NULL. */
static const bench_row *find_row(const bench_table *t, bench_op op, const char *mode,
                                 int32_t layers, int32_t batch, int32_t accepted)
{
    for (int32_t i = 0; i < t->count; i++) {
        const bench_row *r = &t->rows[i];
        if (r->op == op && r->layers == layers && r->batch == batch &&
            r->accepted == accepted && !strcmp(r->mode, mode) && !r->error[0])
            return r;
    }
    return NULL;
}

void bench_report_derive(bench_table *t, const bench_fla *fla)
{
    for (int32_t i = 0; i < t->count; i++) {
        bench_row *r = &t->rows[i];
        if (r->error[0] || !(r->median_us > 0))
            continue;
        r->gbps = r->bytes ? (double)r->bytes / (r->median_us * 1e3) : NAN;
        const bench_fla_entry *peer =
            r->op == BENCH_OP_DECODE && r->layers == 1
                ? bench_fla_find(fla, t->shape.model.kind, t->shape.state_dtype, r->batch, 1)
                : NULL;
        if (peer) {
            r->fla_us = peer->median_us;
            snprintf(r->fla_variant, sizeof r->fla_variant, "%.31s", peer->variant);
        }
    }
    for (int32_t i = 0; i < t->count; i++) {
        bench_row *r = &t->rows[i];
        if (r->error[0] || !(r->median_us > 0))
            continue;
        const bench_row *copy = find_row(t, BENCH_OP_COPY, "copy", r->layers, r->batch, 0);
        if (copy && copy->gbps > 0)
            r->copy_fraction = r->gbps / copy->gbps;
        const bench_row *native = r->op == BENCH_OP_COPY ? NULL
                                  : find_row(t, r->op, "native", r->layers, r->batch,
                                             r->accepted);
        if (native)
            r->speedup = native->median_us / r->median_us;
    }
}

/* ------------------------------------------------------------- the table */

typedef struct sort_item {
    int32_t layers, op, accepted, batch, mode_rank, index;
} sort_item;

static int compare_items(const void *a, const void *b)
{
    const sort_item *x = a, *y = b;
    const int32_t kx[] = {x->layers, x->op, x->accepted, x->batch, x->mode_rank, x->index};
    const int32_t ky[] = {y->layers, y->op, y->accepted, y->batch, y->mode_rank, y->index};
    for (size_t i = 0; i < sizeof kx / sizeof kx[0]; i++)
        if (kx[i] != ky[i])
            return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

static int32_t mode_rank(const char *mode, const char *const *modes, int32_t count)
{
    if (!strcmp(mode, "copy"))
        return -1;
    for (int32_t i = 0; i < count; i++)
        if (!strcmp(mode, modes[i]))
            return i;
    return count;
}

/* "12.3" or "-" for NaN, into buf. */
static const char *format_number(double value, const char *format, char *buf, size_t len)
{
    if (isnan(value))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, format, value);
    return buf;
}

static void print_row(const bench_row *r)
{
    char op[24], bytes[32], median[24], gbps[24], fraction[24], speedup[24];
    if (r->op == BENCH_OP_ROUND)
        snprintf(op, sizeof op, "round a=%d", r->accepted);
    else
        snprintf(op, sizeof op, "%s", op_name(r->op));
    printf("  %-10s %6d %5d  %-10.10s ", op, r->layers, r->batch,
           r->mode);
    if (r->error[0]) {
        printf("error: %s\n", r->error);
        return;
    }
    printf("%11s %12s %9s %8s %9s  %s\n",
           format_number(r->median_us, "%.2f", median, sizeof median),
           r->bytes ? cli_format_bytes(r->bytes, bytes, sizeof bytes) : "-",
           format_number(r->gbps, "%.1f", gbps, sizeof gbps),
           format_number(100 * r->copy_fraction, "%.1f", fraction, sizeof fraction),
           r->op == BENCH_OP_COPY ? "-" : format_number(r->speedup, "%.2fx", speedup,
                                                         sizeof speedup),
           r->graph ? "graph" : "plain*");
}

/* One line per distinct capture failure, then the fla ratios, then the
 * byte model's reminder. */
static void print_footnotes(const bench_table *t, const sort_item *items)
{
    for (int32_t i = 0; i < t->count; i++) {
        const bench_row *r = &t->rows[items[i].index];
        if (r->graph || r->error[0] || !r->capture_error[0])
            continue;
        int repeated = 0;
        for (int32_t j = 0; j < i && !repeated; j++) {
            const bench_row *s = &t->rows[items[j].index];
            repeated = !s->graph && !strcmp(s->mode, r->mode) && s->op == r->op &&
                       !strcmp(s->capture_error, r->capture_error);
        }
        if (!repeated)
            printf("  * %s %s: CUDA graph capture failed, timed plain calls: %s\n", r->mode,
                   op_name(r->op), r->capture_error);
    }
    int fla_header = 0;
    for (int32_t i = 0; i < t->count; i++) {
        const bench_row *r = &t->rows[items[i].index];
        if (isnan(r->fla_us))
            continue;
        if (!fla_header++)
            printf("\n  ssmstate / fla, one-layer decode (time ratio; below 1: ssmstate faster):\n"
                   "  %5s  %-10s %11s %11s %8s  %s\n", "B", "mode", "ssmstate us", "fla us",
                   "ratio", "fla kernel");
        printf("  %5d  %-10.10s %11.2f %11.2f %8.3f  %s\n", r->batch, r->mode, r->median_us,
               r->fla_us, r->median_us / r->fla_us, r->fla_variant[0] ? r->fla_variant : "-");
    }
    uint64_t floor = bench_floor_bytes(&t->shape, "native", BENCH_OP_DECODE, 1, 1, 1);
    uint64_t io = bench_io_bytes(&t->shape, BENCH_OP_DECODE, 1, 1);
    printf("\n  bytes: state and history traffic that had to move per step or round "
           "(docs/bench.md);\n  inputs, outputs and the conv window move the same in every "
           "mode and are not counted\n  (%.1f%% on top of native decode's bytes). %% copy: "
           "GB/s over the copy's at the same layers and B.\n",
           floor ? 100.0 * (double)io / (double)floor : 0.0);
}

void bench_report_print(const bench_table *t, const char *const *modes, int32_t modes_count)
{
    const bench_shape *s = &t->shape;
    const ssm_model_dims *m = &s->model;
    printf("\n%s: %s, %d layers (H %d, HV %d, K %d, V %d, W %d), state %s, activations %s, "
           "T %d, replay L %d (outputs %s)\n", t->config_path, ssm_model_kind_name(m->kind),
           m->layers, m->heads, m->value_heads, m->key_dim, m->value_dim, m->conv_width,
           ssm_dtype_name(s->state_dtype), ssm_dtype_name(s->activation_dtype), s->tokens,
           s->history, s->replay_reads == BENCH_REPLAY_RAW ? "exact" : "identity/matrix");
    sort_item *items = malloc((size_t)(t->count ? t->count : 1) * sizeof *items);
    if (!items) {
        printf("  (out of memory printing the table)\n");
        return;
    }
    for (int32_t i = 0; i < t->count; i++) {
        const bench_row *r = &t->rows[i];
        items[i] = (sort_item){r->layers, (int32_t)r->op, r->accepted, r->batch,
                               mode_rank(r->mode, modes, modes_count), i};
    }
    qsort(items, (size_t)t->count, sizeof *items, compare_items);
    printf("  %-10s %6s %5s  %-10s %11s %12s %9s %8s %9s  %s\n", "op", "layers", "B", "mode",
           "median us", "bytes", "GB/s", "% copy", "x native", "timing");
    for (int32_t i = 0; i < t->count; i++) {
        if (i > 0 && (items[i].layers != items[i - 1].layers || items[i].op != items[i - 1].op ||
                      items[i].accepted != items[i - 1].accepted))
            printf("\n");
        print_row(&t->rows[items[i].index]);
    }
    print_footnotes(t, items);
    free(items);
    fflush(stdout);
}

/* ------------------------------------------------------------ JSON lines */

static void json_string(FILE *out, const char *text)
{
    if (!text || !text[0]) {
        fputs("null", out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void json_number(FILE *out, const char *key, double value)
{
    if (isfinite(value))
        fprintf(out, ",\"%s\":%.6g", key, value);
    else
        fprintf(out, ",\"%s\":null", key);
}

void bench_report_json(const bench_table *t, FILE *out)
{
    const bench_shape *s = &t->shape;
    const ssm_model_dims *m = &s->model;
    for (int32_t i = 0; i < t->count; i++) {
        const bench_row *r = &t->rows[i];
        fprintf(out, "{\"model\":\"%s\",\"config\":", ssm_model_kind_name(m->kind));
        json_string(out, t->config_path);
        fputs(",\"device\":", out);
        json_string(out, t->device_name);
        fprintf(out, ",\"heads\":%d,\"value_heads\":%d,\"key_dim\":%d,\"value_dim\":%d,"
                     "\"state\":\"%s\",\"activation\":\"%s\",\"history\":%d,"
                     "\"replay_outputs\":\"%s\"",
                m->heads, m->value_heads, m->key_dim, m->value_dim,
                ssm_dtype_name(s->state_dtype), ssm_dtype_name(s->activation_dtype),
                s->history, s->replay_reads == BENCH_REPLAY_RAW ? "exact" : "identity");
        fprintf(out, ",\"op\":\"%s\",\"mode\":\"%s\",\"layers\":%d,\"batch\":%d,\"tokens\":%d",
                op_name(r->op), r->mode, r->layers, r->batch, r->tokens);
        if (r->op == BENCH_OP_ROUND)
            fprintf(out, ",\"accepted\":%d", r->accepted);
        else
            fputs(",\"accepted\":null", out);
        fprintf(out, ",\"steps_per_launch\":%d,\"launches_per_sample\":%d,\"samples\":%d,"
                     "\"graph\":%s,\"capture_error\":",
                r->steps_per_launch, r->launches_per_sample, r->samples,
                r->graph ? "true" : "false");
        json_string(out, r->capture_error);
        int ok = !r->error[0];
        json_number(out, "median_us", ok ? r->median_us : NAN);
        json_number(out, "p10_us", ok ? r->p10_us : NAN);
        json_number(out, "p90_us", ok ? r->p90_us : NAN);
        fprintf(out, ",\"bytes\":%llu,\"io_bytes\":%llu", (unsigned long long)r->bytes,
                (unsigned long long)r->io_bytes);
        json_number(out, "gbps", r->gbps);
        json_number(out, "copy_fraction", r->copy_fraction);
        json_number(out, "speedup_vs_native", r->speedup);
        json_number(out, "fla_us", r->fla_us);
        fputs(",\"fla_variant\":", out);
        json_string(out, r->fla_variant);
        json_number(out, "ratio_fla", r->median_us / r->fla_us);
        fputs(",\"error\":", out);
        json_string(out, r->error);
        fputs("}\n", out);
    }
    fflush(out);
}
