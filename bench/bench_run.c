/* The measurements of one model: per state dtype, layer count and batch
 * size, the copy ceiling, then one context per mode (created once, used for
 * every measurement of that mode, destroyed before the next) for a decode
 * step and an MTP round per accepted length. Only the public API touches
 * the state; CUDA is called directly for buffers, streams and the copy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cuda.h"
#include "tools/cli.h"
#include "tools/fold_rule.h"

/* NVTX ranges ("decode", "round a=N") around each mode's measurements, so
 * a profiler can take one op's kernels (ncu --nvtx --nvtx-include
 * "round a=3/", bench/device_profile.sh). NVTX 3 is header-only and part of
 * the CUDA toolkit; without a profiler attached a range costs a call that
 * returns at once. A toolkit without it gets no ranges. */
#if defined(__has_include)
#if __has_include(<nvtx3/nvToolsExt.h>)
#include <nvtx3/nvToolsExt.h>
#define RANGE_PUSH(name) nvtxRangePushA(name)
#define RANGE_POP() nvtxRangePop()
#endif
#endif
#ifndef RANGE_PUSH
#define RANGE_PUSH(name) ((void)0)
#define RANGE_POP() ((void)0)
#endif

enum {
    HISTORY_WHEN_UNSET = 16,  /* replay's L when [replay] sets none */
    FOLD_ROWS_WHEN_UNSET = 8  /* replay's fold_rows when [replay] sets none */
};

/* What the enqueue functions of one context read. */
typedef struct bench_context {
    ssm_ctx *ctx;
    const bench_data *data;
    int32_t layers, batch;
    int32_t steps;           /* decode: steps per unit, every layer each */
    int32_t tokens;          /* round: T */
    const int32_t *accepted; /* round: device [batch], every row a */
    ssm_ticket open_ticket;  /* a forward that a failed round left open */
    int ticket_open;
} bench_context;

/* What every measurement of one model shares. */
typedef struct model_run {
    const ssm_config *config;
    const bench_options *o;
    int32_t device;
    bench_shape shape;       /* the state dtype being measured */
    bench_data data;
    cudaStream_t stream;
    bench_table *table;
    int failed;              /* a measurement failed */
    int broken;              /* the device is unusable: stop */
} model_run;

/* ------------------------------------------------------------ the work */

/* "call (layer N): why" (no layer for a negative one); returns -1. */
static int api_failed(const char *call, int32_t layer, char *error, size_t len)
{
    if (layer >= 0)
        snprintf(error, len, "%s (layer %d): %s", call, layer, ssm_last_error());
    else
        snprintf(error, len, "%s: %s", call, ssm_last_error());
    return -1;
}

static ssm_step_io step_io(const bench_data *d)
{
    return (ssm_step_io){d->x, d->gate, d->beta, d->out};
}

/* `steps` decode steps, each over every layer. */
static int enqueue_decode(void *user, cudaStream_t stream, char *error, size_t len)
{
    bench_context *c = user;
    ssm_batch batch = {c->batch, 1, c->data->slots, c->data->slots_host};
    ssm_step_io io = step_io(c->data);
    for (int32_t step = 0; step < c->steps; step++)
        for (int32_t layer = 0; layer < c->layers; layer++)
            if (ssm_decode(c->ctx, layer, &batch, &c->data->weights[layer], &io, stream) !=
                SSM_OK)
                return api_failed("ssm_decode", layer, error, len);
    return 0;
}

/* One MTP round: verify T tokens on every layer under one ticket, commit. */
static int enqueue_round(void *user, cudaStream_t stream, char *error, size_t len)
{
    bench_context *c = user;
    ssm_batch batch = {c->batch, c->tokens, c->data->slots, c->data->slots_host};
    ssm_step_io io = step_io(c->data);
    ssm_ticket ticket = SSM_TICKET_INIT;
    for (int32_t layer = 0; layer < c->layers; layer++) {
        if (ssm_verify(c->ctx, layer, &batch, &c->data->weights[layer], &io, &ticket, stream) ==
            SSM_OK)
            continue;
        c->open_ticket = ticket;
        c->ticket_open = ticket.context_id != 0 || ticket.forward != 0;
        return api_failed("ssm_verify", layer, error, len);
    }
    if (ssm_commit(c->ctx, &ticket, c->accepted, stream) != SSM_OK) {
        c->open_ticket = ticket;
        c->ticket_open = 1;
        return api_failed("ssm_commit", -1, error, len);
    }
    return 0;
}

static void recover_round(void *user, cudaStream_t stream)
{
    bench_context *c = user;
    if (c->ticket_open)
        ssm_forward_abort(c->ctx, &c->open_ticket, stream);
    c->ticket_open = 0;
}

typedef struct copy_buffers {
    void *source, *destination;
    size_t bytes;
} copy_buffers;

static int enqueue_memcpy(void *user, cudaStream_t stream, char *error, size_t len)
{
    copy_buffers *c = user;
    return bench_cuda_check(cudaMemcpyAsync(c->destination, c->source, c->bytes,
                                            cudaMemcpyDeviceToDevice, stream),
                            "cudaMemcpyAsync", error, len);
}

static int enqueue_copy_kernel(void *user, cudaStream_t stream, char *error, size_t len)
{
    copy_buffers *c = user;
    return bench_cuda_check(bench_copy_kernel(c->destination, c->source, c->bytes, stream),
                            "copy kernel", error, len);
}

/* ------------------------------------------------------------- the rows */

static bench_row *new_row(model_run *run, bench_op op, const char *mode, int32_t layers,
                          int32_t batch, int32_t accepted)
{
    bench_row *row = bench_table_add(run->table);
    if (!row) {
        fprintf(stderr, "ssmstate: bench: out of memory for the results\n");
        run->failed = run->broken = 1;
        return NULL;
    }
    snprintf(row->mode, sizeof row->mode, "%s", mode);
    row->op = op;
    row->layers = layers;
    row->batch = batch;
    row->tokens = op == BENCH_OP_ROUND ? run->shape.tokens : 1;
    row->accepted = accepted;
    row->steps_per_launch = 1;
    row->bytes = bench_floor_bytes(&run->shape, mode, op, batch, layers, accepted);
    row->io_bytes = bench_io_bytes(&run->shape, op, batch, layers);
    return row;
}

/* Times `work` into `row`; a failure marks the row (and the run). */
static void time_into(model_run *run, const bench_work *work, bench_row *row)
{
    bench_timing timing;
    if (bench_time(run->stream, work, run->o, &timing, row->error, sizeof row->error) != 0) {
        run->failed = 1;
        run->broken = bench_device_broken();
        return;
    }
    row->median_us = timing.median_us;
    row->p10_us = timing.p10_us;
    row->p90_us = timing.p90_us;
    row->launches_per_sample = timing.units_per_sample;
    row->samples = timing.samples;
    row->graph = timing.graph;
    snprintf(row->capture_error, sizeof row->capture_error, "%s", timing.capture_error);
}

static void fail_rows(model_run *run, bench_row *const *rows, int32_t count, const char *why)
{
    for (int32_t i = 0; i < count; i++)
        if (!rows[i]->error[0])
            snprintf(rows[i]->error, sizeof rows[i]->error, "%s", why);
    run->failed = 1;
}

/* ------------------------------------------------------- measurements */

/* The state bytes of `layers` layers and `batch` slots copied by a kernel
 * (the ceiling, mode "copy") and by cudaMemcpyAsync (mode "memcpy"). */
static void measure_copy(model_run *run, int32_t layers, int32_t batch)
{
    bench_row *row = new_row(run, BENCH_OP_COPY, "copy", layers, batch, 0);
    bench_row *memcpy_row = new_row(run, BENCH_OP_COPY, "memcpy", layers, batch, 0);
    if (!row || !memcpy_row)
        return;
    copy_buffers c = {NULL, NULL, bench_state_bytes(&run->shape) * (size_t)batch * layers};
    char *error = row->error;
    size_t len = sizeof row->error;
    if (bench_cuda_check(cudaMalloc(&c.source, c.bytes), "cudaMalloc", error, len) == 0 &&
        bench_cuda_check(cudaMalloc(&c.destination, c.bytes), "cudaMalloc", error, len) == 0 &&
        bench_cuda_check(cudaMemset(c.source, 0, c.bytes), "cudaMemset", error, len) == 0) {
        bench_work kernel = {enqueue_copy_kernel, NULL, &c, 1, 0, 4096};
        time_into(run, &kernel, row);
        bench_work memcpy_work = {enqueue_memcpy, NULL, &c, 1, 0, 4096};
        time_into(run, &memcpy_work, memcpy_row);
    } else {
        snprintf(memcpy_row->error, sizeof memcpy_row->error, "%s", row->error);
        run->failed = 1;
    }
    cudaFree(c.source);
    cudaFree(c.destination);
}

/* The decode step and every round of one mode, on a context of `layers`
 * layers and `batch` slots, after 2L warm-up steps that fill replay's ring
 * (above [replay] fold_rows rows; at or below it, decodes fold every step
 * and the ring stays empty). */
static void measure_context(model_run *run, ssm_ctx *ctx, int32_t layers, int32_t batch,
                            bench_row *const *rows)
{
    const bench_shape *s = &run->shape;
    bench_context c = {.ctx = ctx, .data = &run->data, .layers = layers, .batch = batch};
    c.steps = 2 * s->history;
    RANGE_PUSH("decode");
    if (enqueue_decode(&c, run->stream, rows[0]->error, sizeof rows[0]->error) != 0 ||
        bench_cuda_check(cudaStreamSynchronize(run->stream), "warm-up", rows[0]->error,
                         sizeof rows[0]->error) != 0) {
        RANGE_POP();
        fail_rows(run, rows, 1 + run->o->accepted_count, rows[0]->error);
        run->broken = bench_device_broken();
        return;
    }
    c.steps = bench_fold_period(s->history, 1, 1);
    rows[0]->steps_per_launch = c.steps;
    bench_work decode = {enqueue_decode, NULL, &c, c.steps, 1, 1};
    time_into(run, &decode, rows[0]);
    RANGE_POP();

    int replay = !strcmp(rows[0]->mode, "replay");
    c.tokens = s->tokens;
    for (int32_t i = 0; i < run->o->accepted_count && !run->broken; i++) {
        int32_t a = run->o->accepted[i];
        /* Whole fold periods, at least L rounds, per sample. */
        int32_t period = bench_fold_period(s->history, s->tokens, a);
        int32_t rounds = period * ((s->history + period - 1) / period);
        c.accepted = run->data.accepted + (size_t)(a - 1) * (size_t)run->data.max_batch;
        bench_work round = {enqueue_round, recover_round, &c, 1, replay ? rounds : 0, rounds};
        char range[32];
        snprintf(range, sizeof range, "round a=%d", (int)a);
        RANGE_PUSH(range);
        time_into(run, &round, rows[1 + i]);
        RANGE_POP();
    }
}

/* Kernel flags after the measurements: a skipped row moved fewer bytes
 * than counted, so a flagged context's numbers do not stand. */
static void check_flags(model_run *run, ssm_ctx *ctx, bench_row *const *rows, int32_t count)
{
    ssm_ctx_report report;
    char why[256];
    if (ssm_ctx_status(ctx, &report) != SSM_OK)
        snprintf(why, sizeof why, "ssm_ctx_status: %s", ssm_last_error());
    else if (report.flags)
        snprintf(why, sizeof why, "the kernels flagged %d slots (flags 0x%x, first slot %d)",
                 report.flagged_slots, report.flags, report.first_flagged);
    else
        return;
    fail_rows(run, rows, count, why);
}

static void measure_mode(model_run *run, const char *mode, int32_t layers, int32_t batch)
{
    const bench_options *o = run->o;
    bench_row *rows[1 + BENCH_MAX_LIST];
    int32_t count = 1 + o->accepted_count, first = run->table->count;
    for (int32_t i = 0; i < count; i++)
        if (!new_row(run, i ? BENCH_OP_ROUND : BENCH_OP_DECODE, mode, layers, batch,
                     i ? o->accepted[i - 1] : 0))
            return;
    for (int32_t i = 0; i < count; i++) /* after the last add: adding may move the rows */
        rows[i] = &run->table->rows[first + i];
    if (!o->quiet)
        fprintf(stderr, "bench: %s %s, %d layer%s, B %d: %s\n",
                ssm_model_kind_name(run->shape.model.kind), ssm_dtype_name(run->shape.state_dtype),
                layers, layers == 1 ? "" : "s", batch, mode);

    ssm_config config = *run->config; /* shallow: strings stay the loaded config's */
    config.mode = mode;
    config.model.layers = layers;
    config.state_dtype = run->shape.state_dtype;
    config.activation_dtype = run->shape.activation_dtype;
    config.device = (ssm_device){SSM_DEVICE_CUDA, run->device};
    config.max_requests = batch;
    config.max_draft_tokens = run->shape.tokens - 1;
    ssm_ctx *ctx = NULL;
    char why[256];
    if (ssm_ctx_create(&config, &ctx) != SSM_OK) {
        snprintf(why, sizeof why, "ssm_ctx_create: %s", ssm_last_error());
        fail_rows(run, rows, count, why);
        return;
    }
    int32_t acquired = 0;
    while (acquired < batch && ssm_slot_acquire(ctx, &run->data.slots_host[acquired]) == SSM_OK)
        acquired++;
    if (acquired < batch) {
        snprintf(why, sizeof why, "ssm_slot_acquire: %s", ssm_last_error());
        fail_rows(run, rows, count, why);
    } else if (bench_cuda_check(cudaMemcpy(run->data.slots, run->data.slots_host,
                                           (size_t)batch * sizeof(int32_t),
                                           cudaMemcpyHostToDevice),
                                "cudaMemcpy", why, sizeof why) != 0) {
        fail_rows(run, rows, count, why);
    } else {
        measure_context(run, ctx, layers, batch, rows);
        if (!run->broken)
            check_flags(run, ctx, rows, count);
    }
    cudaStreamSynchronize(run->stream);
    ssm_ctx_destroy(ctx);
}

/* ------------------------------------------------------------ the model */

/* What replay's outputs read: as [replay] outputs says, else what the
 * plugin's default reads on a CUDA context (docs/modes.md): the identity
 * over an f32 state, exact over a bf16 one. (The default also takes exact
 * where the device cannot stage the history for the identity, which no
 * history does at K = 128 on the H200.) */
static bench_replay_reads replay_reads_of(const ssm_config *c, ssm_dtype state_dtype)
{
    const char *outputs = fold_rule_option_text(c, "outputs");
    if (outputs)
        return strcmp(outputs, "exact") ? BENCH_REPLAY_IDENTITY : BENCH_REPLAY_RAW;
    return state_dtype == SSM_DTYPE_F32 ? BENCH_REPLAY_IDENTITY : BENCH_REPLAY_RAW;
}

/* The table's shape before the state dtype is chosen. */
static bench_shape shape_of(const ssm_config *c)
{
    const char *history = fold_rule_option_text(c, "history");
    const char *fold_rows = fold_rule_option_text(c, "fold_rows");
    bench_shape s = {c->model,
                     SSM_DTYPE_F32,
                     SSM_DTYPE_BF16,
                     BENCH_DRAFT_TOKENS + 1,
                     history ? (int32_t)strtol(history, NULL, 10) : HISTORY_WHEN_UNSET,
                     replay_reads_of(c, SSM_DTYPE_F32),
                     fold_rows ? (int32_t)strtol(fold_rows, NULL, 10) : FOLD_ROWS_WHEN_UNSET,
                     1 /* every mode runs on the GPU here: compact's commit in the next step */};
    return s;
}

static int32_t layers_of(const ssm_config *config, int32_t entry)
{
    return entry == BENCH_LAYERS_CHAIN ? config->model.layers : entry;
}

/* Every (layers, batch, mode) of one state dtype into run->table. */
static void measure_state_dtype(model_run *run)
{
    const bench_options *o = run->o;
    for (int32_t l = 0; l < o->layers_count && !run->broken; l++) {
        int32_t layers = layers_of(run->config, o->layers[l]);
        for (int32_t b = 0; b < o->batches_count && !run->broken; b++) {
            measure_copy(run, layers, o->batches[b]);
            for (int32_t m = 0; m < o->modes_count && !run->broken; m++)
                measure_mode(run, o->modes[m], layers, o->batches[b]);
        }
    }
}

int bench_run_model(const ssm_config *config, const char *path, const bench_options *o,
                    int32_t device, const char *device_name, const bench_fla *fla, FILE *json)
{
    model_run run = {.config = config, .o = o, .device = device};
    run.shape = shape_of(config);
    int32_t max_layers = 1, max_batch = 1;
    for (int32_t i = 0; i < o->layers_count; i++)
        if (layers_of(config, o->layers[i]) > max_layers)
            max_layers = layers_of(config, o->layers[i]);
    for (int32_t i = 0; i < o->batches_count; i++)
        if (o->batches[i] > max_batch)
            max_batch = o->batches[i];

    char error[256];
    if (bench_cuda_check(cudaSetDevice(device), "cudaSetDevice", error, sizeof error) != 0 ||
        bench_cuda_check(cudaStreamCreateWithFlags(&run.stream, cudaStreamNonBlocking),
                         "cudaStreamCreate", error, sizeof error) != 0)
        return cli_fail("bench: %s", error);
    if (bench_data_create(&run.shape, max_layers, max_batch, &run.data, error, sizeof error)) {
        cudaStreamDestroy(run.stream);
        return cli_fail("bench: %s: %s", path, error);
    }
    for (int32_t d = 0; d < o->states_count && !run.broken; d++) {
        bench_table table = {path, device_name, run.shape, NULL, 0, 0};
        table.shape.state_dtype = o->states[d];
        run.shape.state_dtype = o->states[d];
        table.shape.replay_reads = run.shape.replay_reads = replay_reads_of(config, o->states[d]);
        run.table = &table;
        measure_state_dtype(&run);
        bench_report_derive(&table, fla);
        bench_report_print(&table, o->modes, o->modes_count);
        if (json)
            bench_report_json(&table, json);
        bench_table_free(&table);
    }
    if (run.broken)
        fprintf(stderr, "ssmstate: bench: the device failed; stopped measuring\n");
    bench_data_destroy(&run.data);
    cudaStreamDestroy(run.stream);
    return run.failed ? CLI_EXIT_USAGE : CLI_EXIT_OK;
}
