/* The stream of `ssmstate serve` (see serve_stream.h).
 *
 * One step is one forward of an engine:
 *   1. requests that arrived by now (a Poisson process counted in steps) wait
 *      in arrival order; while fewer than `concurrency` hold a slot, the next
 *      one acquires a fresh slot;
 *   2. the requests still in their prompt, oldest first, share a budget of
 *      `chunk` prompt tokens (one varlen prefill batch); every request past
 *      its prompt runs an MTP round (one verify batch of T = 4 tokens a row);
 *   3. every layer runs its prefill batch, then its verify batch; one commit
 *      for all layers keeps each round's accepted length;
 *   4. the step's device work is waited for (CUDA events); requests that
 *      reached their output length release their slots.
 * The wall time of 1-4 is the step's time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/fold_rule.h"
#include "serve_stream.h"

/* A request holding a slot. */
typedef struct live {
    int64_t id;
    int32_t slot;
    int32_t prompt, output;
    int32_t prefilled, produced, rounds;
    int32_t since_checkpoint; /* replay: records committed since the checkpoint (every layer) */
    serve_log *log;           /* a checked request while logging; NULL otherwise */
} live;

/* A row of this step's prefill or verify batch. */
typedef struct row {
    int32_t live;    /* index into the live requests */
    int32_t tokens;  /* prompt piece, or T */
    int32_t keep;    /* tokens committed: the piece, or the accepted length */
    int64_t offset;  /* first token within the batch */
    int64_t log_at;  /* where its outputs go in the request's log; -1: not logged */
} row;

typedef struct level {
    serve_engine *e;
    serve_workload w;
    serve_arrivals arrivals;
    int32_t concurrency, check;
    serve_log **logs;
    int logging, measuring;
    live *live;
    int32_t live_count;
    row *prefill, *verify;
    int32_t prefill_count, verify_count;
    int64_t prefill_tokens;
    int64_t admitted, finished, step;
    ssm_ticket ticket;
    int ticket_open;
    double *step_ms, *device_ms; /* [o->steps] measured */
    double busy;                 /* sum over measured steps of requests holding slots */
    int trace;                   /* SSMSTATE_SERVE_TRACE: a line per step on stderr */
    serve_point *out;
    char *error;
    size_t len;
} level;

/* "call (layer N): why"; returns -1. */
static int api_failed(level *v, const char *call, int32_t layer)
{
    if (layer >= 0)
        snprintf(v->error, v->len, "%s (layer %d): %s", call, layer, ssm_last_error());
    else
        snprintf(v->error, v->len, "%s: %s", call, ssm_last_error());
    return -1;
}

/* Bytes of one token's outputs. */
static size_t out_row_bytes(const serve_engine *e)
{
    const ssm_model_dims *m = &e->data->model;
    return (size_t)m->value_heads * (size_t)m->value_dim * ssm_dtype_size(e->data->act);
}

int serve_engine_create(serve_engine *e, ssm_ctx *ctx, int32_t capacity, int32_t history,
                        const cli_device *dev, const serve_data *data, const serve_options *o,
                        char *error, size_t len)
{
    memset(e, 0, sizeof *e);
    e->ctx = ctx;
    e->dev = dev;
    e->data = data;
    e->o = o;
    e->capacity = capacity;
    e->tokens = SERVE_DRAFTS + 1;
    e->history = history;
    const int32_t layers = data->model.layers;
    const size_t meta = 4 * (size_t)capacity + 2;
    e->out_prefill = device_alloc(dev, (size_t)o->chunk * out_row_bytes(e));
    e->out_verify = device_alloc(dev, (size_t)capacity * (size_t)e->tokens * out_row_bytes(e));
    e->meta = device_alloc(dev, meta * sizeof(int32_t));
    e->meta_host = calloc(meta, sizeof(int32_t));
    int ok = e->out_prefill && e->out_verify && e->meta && e->meta_host;
    if (ok && o->check > 0) {
        const size_t window = (size_t)(data->model.conv_width - 1) *
                              (size_t)ssm_conv_channels(&data->model) * ssm_dtype_size(data->act);
        const ssm_config *c = ssm_ctx_config(ctx);
        const size_t state = (size_t)data->model.value_heads * (size_t)data->model.value_dim *
                             (size_t)data->model.key_dim * ssm_dtype_size(c->state_dtype);
        e->export_window = calloc((size_t)layers, sizeof(void *));
        e->export_state = calloc((size_t)layers, sizeof(void *));
        ok = e->export_window && e->export_state;
        for (int32_t l = 0; ok && l < layers; l++) {
            e->export_window[l] = device_alloc(dev, window);
            e->export_state[l] = device_alloc(dev, state);
            ok = e->export_window[l] && e->export_state[l];
        }
    }
    if (!ok) {
        snprintf(error, len, "out of %s memory for the step buffers",
                 dev->where.type == SSM_DEVICE_CPU ? "host" : "device");
        serve_engine_destroy(e);
        return -1;
    }
    return 0;
}

void serve_engine_destroy(serve_engine *e)
{
    if (!e->dev)
        return;
    for (int32_t l = 0; l < e->data->model.layers; l++) {
        if (e->export_window)
            device_free(e->dev, e->export_window[l]);
        if (e->export_state)
            device_free(e->dev, e->export_state[l]);
    }
    free(e->export_window);
    free(e->export_state);
    device_free(e->dev, e->out_prefill);
    device_free(e->dev, e->out_verify);
    device_free(e->dev, e->meta);
    free(e->meta_host);
    memset(e, 0, sizeof *e);
}

/* ------------------------------------------------------------ one step */

/* Step 1: arrivals join the queue; free slots go to the oldest waiting. */
static int admit(level *v)
{
    serve_engine *e = v->e;
    int64_t arrived = serve_arrivals_until(&v->arrivals, (double)v->step);
    while (v->live_count < v->concurrency && v->admitted < arrived) {
        live *l = &v->live[v->live_count];
        memset(l, 0, sizeof *l);
        if (ssm_slot_acquire(e->ctx, &l->slot) != SSM_OK)
            return api_failed(v, "ssm_slot_acquire", -1);
        l->id = v->admitted++;
        l->prompt = serve_prompt_length(&v->w, l->id);
        l->output = serve_output_length(&v->w, l->id);
        if (v->logging && l->id < v->check) {
            l->log = serve_log_create(l->id, &e->data->model, ssm_ctx_config(e->ctx)->state_dtype,
                                      e->data->act, e->check_layers);
            if (!l->log) {
                snprintf(v->error, v->len, "out of memory for the check's log");
                ssm_slot_release(e->ctx, l->slot);
                return -1;
            }
            v->logs[l->id] = l->log;
        }
        v->live_count++;
    }
    return 0;
}

/* Logs the row's call when its request is checked. */
static void log_row(level *v, row *r, serve_call_kind kind, int64_t batch_tokens)
{
    live *l = &v->live[r->live];
    r->log_at = -1;
    if (!v->logging || !l->log)
        return;
    const serve_call call = {kind, v->step, batch_tokens, r->offset, r->tokens, r->keep};
    r->log_at = serve_log_add(l->log, &call);
}

/* Step 2: this step's batches and their metadata, on the host. */
static int plan(level *v)
{
    serve_engine *e = v->e;
    int32_t budget = e->o->chunk;
    v->prefill_count = v->verify_count = 0;
    v->prefill_tokens = 0;
    for (int32_t i = 0; i < v->live_count; i++) {
        live *l = &v->live[i];
        if (l->prefilled < l->prompt) {
            int32_t left = l->prompt - l->prefilled;
            if (budget == 0)
                continue;
            int32_t piece = left < budget ? left : budget;
            budget -= piece;
            v->prefill[v->prefill_count++] = (row){i, piece, piece, v->prefill_tokens, -1};
            v->prefill_tokens += piece;
        } else {
            int32_t a = serve_accepted_length(&v->w, l->id, l->rounds);
            v->verify[v->verify_count] =
                (row){i, e->tokens, a, (int64_t)v->verify_count * e->tokens, -1};
            v->verify_count++;
        }
    }
    const int32_t p = v->prefill_count, n = v->verify_count;
    int32_t *m = e->meta_host;
    m[p] = 0;
    for (int32_t r = 0; r < p; r++) {
        m[r] = v->live[v->prefill[r].live].slot;
        m[p + 1 + r] = (int32_t)(v->prefill[r].offset + v->prefill[r].tokens);
        log_row(v, &v->prefill[r], SERVE_PREFILL, v->prefill_tokens);
    }
    for (int32_t r = 0; r < n; r++) {
        m[2 * p + 1 + r] = v->live[v->verify[r].live].slot;
        m[2 * p + 1 + n + r] = v->verify[r].keep;
        log_row(v, &v->verify[r], SERVE_VERIFY, (int64_t)n * e->tokens);
    }
    for (int32_t i = 0; i < v->live_count; i++)
        if (v->live[i].log && v->live[i].log->failed) {
            snprintf(v->error, v->len, "out of memory for the check's log");
            return -1;
        }
    return 0;
}

/* The step's metadata to the device: the first of its device work. */
static int upload_meta(level *v)
{
    const size_t count = 2 * (size_t)v->prefill_count + 1 + 2 * (size_t)v->verify_count;
    return device_upload(v->e->dev, v->e->meta, v->e->meta_host, count * sizeof(int32_t),
                        v->error, v->len);
}

/* The most tokens of one prefill row this step (0: none). */
static int32_t longest_prefill(const level *v)
{
    int32_t longest = 0;
    for (int32_t r = 0; r < v->prefill_count; r++)
        longest = v->prefill[r].tokens > longest ? v->prefill[r].tokens : longest;
    return longest;
}

/* Whether SSMSTATE_SERVE_TRACE asks for the step lines: set, not empty, not 0. */
static int trace_wanted(void)
{
    const char *value = getenv("SSMSTATE_SERVE_TRACE");
    return value && value[0] && strcmp(value, "0") != 0;
}

/* Test-only (SSMSTATE_SERVE_TRACE, docs/serve.md "Tests"): the step about to
 * run, on stderr and flushed before any of its device work, so the last line
 * names the step a hang is in (its calls, its wait or its releases). */
static void trace_step(const level *v)
{
    if (!v->trace)
        return;
    const ssm_config *c = ssm_ctx_config(v->e->ctx);
    fprintf(stderr,
            "serve trace: %s %s concurrency %d step %lld (%s): prefill %d rows, %lld tokens, "
            "longest %d; verify %d rows\n",
            c->mode, ssm_dtype_name(c->state_dtype), v->concurrency, (long long)v->step,
            v->measuring ? "measured" : "warm-up", v->prefill_count,
            (long long)v->prefill_tokens, longest_prefill(v), v->verify_count);
    fflush(stderr);
}

/* Copies the logged rows' outputs of one layer's batch into their logs. */
static int keep_outputs(level *v, const row *rows, int32_t count, const void *out, int32_t layer)
{
    const size_t width = out_row_bytes(v->e);
    if (!v->e->check_layers[layer])
        return 0;
    for (int32_t r = 0; r < count; r++) {
        if (rows[r].log_at < 0)
            continue;
        const serve_log *log = v->live[rows[r].live].log;
        if (device_download(v->e->dev, serve_log_outputs(log, layer, rows[r].log_at),
                           (const char *)out + (size_t)rows[r].offset * width,
                           (size_t)rows[r].tokens * width, v->error, v->len) != 0)
            return -1;
    }
    return 0;
}

/* Step 3: every layer's prefill and verify, then the commit. */
static int run_layers(level *v)
{
    serve_engine *e = v->e;
    const serve_data *d = e->data;
    const int32_t p = v->prefill_count, n = v->verify_count;
    const ssm_prefill_batch prefill = {p, e->meta, e->meta + p, longest_prefill(v), e->meta_host,
                                       e->meta_host + p};
    const ssm_batch verify = {n, e->tokens, e->meta + 2 * p + 1, e->meta_host + 2 * p + 1};
    v->ticket = (ssm_ticket)SSM_TICKET_INIT;
    for (int32_t layer = 0; layer < d->model.layers; layer++) {
        if (p > 0) {
            int64_t first = serve_pool_offset(v->step, layer, SERVE_PREFILL, v->prefill_tokens,
                                              d->pool_tokens);
            ssm_step_io io = serve_pool_io(d, first, e->out_prefill, 0);
            if (ssm_prefill(e->ctx, layer, &prefill, &d->weights[layer], &io, e->dev->stream) !=
                SSM_OK)
                return api_failed(v, "ssm_prefill", layer);
            if (v->logging && keep_outputs(v, v->prefill, p, e->out_prefill, layer) != 0)
                return -1;
        }
        if (n > 0) {
            int64_t first = serve_pool_offset(v->step, layer, SERVE_VERIFY,
                                              (int64_t)n * e->tokens, d->pool_tokens);
            ssm_step_io io = serve_pool_io(d, first, e->out_verify, 0);
            ssm_status status = ssm_verify(e->ctx, layer, &verify, &d->weights[layer], &io,
                                           &v->ticket, e->dev->stream);
            v->ticket_open = v->ticket.context_id != 0 || v->ticket.forward != 0;
            if (status != SSM_OK)
                return api_failed(v, "ssm_verify", layer);
            if (v->logging && keep_outputs(v, v->verify, n, e->out_verify, layer) != 0)
                return -1;
        }
    }
    if (n > 0) {
        if (ssm_commit(e->ctx, &v->ticket, e->meta + 2 * p + 1 + n, e->dev->stream) != SSM_OK)
            return api_failed(v, "ssm_commit", -1);
        v->ticket_open = 0;
    }
    return 0;
}

/* A checked request's final canonical form into its log. */
static int log_final_state(level *v, live *l)
{
    serve_engine *e = v->e;
    const ssm_model_dims *m = &e->data->model;
    if (ssm_slot_export_canonical(e->ctx, l->slot, e->export_window, e->export_state,
                                  e->dev->stream) != SSM_OK)
        return api_failed(v, "ssm_slot_export_canonical", -1);
    if (serve_log_finish(l->log) != 0) {
        snprintf(v->error, v->len, "out of memory for the check's log");
        return -1;
    }
    const size_t window = (size_t)(m->conv_width - 1) * (size_t)ssm_conv_channels(m) *
                          ssm_dtype_size(e->data->act);
    const size_t state = (size_t)m->value_heads * (size_t)m->value_dim * (size_t)m->key_dim *
                         ssm_dtype_size(l->log->state_dtype);
    for (int32_t layer = 0; layer < m->layers; layer++) {
        if (!l->log->checked[layer])
            continue;
        if (device_download(e->dev, l->log->window[layer], e->export_window[layer], window,
                           v->error, v->len) != 0 ||
            device_download(e->dev, l->log->state[layer], e->export_state[layer], state, v->error,
                           v->len) != 0)
            return -1;
    }
    return 0;
}

/* Step 4 (after the wait): requests move on; finished ones release their
 * slots. Returns the tokens the step produced, or -1. */
static int64_t finish(level *v)
{
    serve_engine *e = v->e;
    const int32_t layers = e->data->model.layers;
    int64_t tokens = 0, folds = 0;
    for (int32_t r = 0; r < v->prefill_count; r++)
        v->live[v->prefill[r].live].prefilled += v->prefill[r].tokens;
    for (int32_t r = 0; r < v->verify_count; r++) {
        live *l = &v->live[v->verify[r].live];
        int32_t a = v->verify[r].keep, useful = l->output - l->produced;
        if (e->history > 0) {
            const session_block b = {.kind = SESSION_VERIFY, .tokens = e->tokens, .keep = a,
                                     .rows = v->verify_count};
            folds += (int64_t)fold_rule_step(&l->since_checkpoint, &b, e->history, 0) * layers;
        }
        useful = a < useful ? a : useful;
        l->produced += useful;
        l->rounds++;
        tokens += useful;
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < v->live_count; i++) {
        live *l = &v->live[i];
        if (l->produced < l->output) {
            v->live[kept++] = *l;
            continue;
        }
        if (v->logging && l->log && log_final_state(v, l) != 0)
            return -1;
        if (ssm_slot_release(e->ctx, l->slot) != SSM_OK)
            return api_failed(v, "ssm_slot_release", -1);
        v->finished++;
        if (v->measuring)
            v->out->finished++;
    }
    v->live_count = kept;
    if (v->measuring) {
        v->out->folds += folds;
        v->out->verify_rows += v->verify_count;
        v->out->prefill_tokens += v->prefill_tokens;
    }
    return tokens;
}

/* One step (steps 1-4 above), timed and counted into the level. */
static int run_step(level *v)
{
    double device_ms, start = device_now();
    if (admit(v) != 0 || plan(v) != 0)
        return -1;
    trace_step(v);
    const int32_t busy = v->live_count;
    if (upload_meta(v) != 0 || device_step_begin(v->e->dev, v->error, v->len) != 0 ||
        run_layers(v) != 0 || device_step_end(v->e->dev, &device_ms, v->error, v->len) != 0)
        return -1;
    int64_t tokens = finish(v);
    if (tokens < 0)
        return -1;
    double ms = 1e3 * (device_now() - start);
    if (v->measuring && v->prefill_count == 0 && v->verify_count == 0) {
        /* Nothing arrived yet, or the queue ran dry: not an engine step,
         * so not in the step times, the means or the step count. */
        v->out->idle_steps++;
    } else if (v->measuring) {
        serve_point *out = v->out;
        v->step_ms[out->steps] = ms;
        v->device_ms[out->steps] = device_ms;
        v->busy += busy;
        out->tokens += tokens;
        out->seconds += ms * 1e-3;
        out->steps++;
    } else {
        v->out->warmup_steps++;
        /* --check at every level, checked or not, so that every mode
         * starts measuring a level at the same step (same work). */
        int32_t check = v->e->o->check;
        int32_t wanted = v->concurrency > check ? v->concurrency : check;
        if (v->finished >= wanted || v->out->warmup_steps >= v->e->o->warmup_steps) {
            v->measuring = 1;
            v->logging = 0;
        }
    }
    v->step++;
    return 0;
}

/* ------------------------------------------------------------ a level */

/* qsort order of doubles. */
static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of values[0..n) (sorted in place), interpolated; NaN for
 * none or when any is NaN. */
static double quantile(double *values, int64_t n, double q)
{
    for (int64_t i = 0; i < n; i++)
        if (isnan(values[i]))
            return NAN;
    if (n == 0)
        return NAN;
    qsort(values, (size_t)n, sizeof *values, compare_doubles);
    double at = q * (double)(n - 1);
    int64_t below = (int64_t)floor(at), above = below + 1 < n ? below + 1 : below;
    return values[below] + (at - (double)below) * (values[above] - values[below]);
}

/* The level's rates, percentiles and means from its measured steps. */
static void summarize(level *v)
{
    serve_point *out = v->out;
    out->tokens_per_second = out->seconds > 0 ? (double)out->tokens / out->seconds : NAN;
    out->folds_per_second =
        v->e->history > 0 && out->seconds > 0 ? (double)out->folds / out->seconds : NAN;
    if (v->e->history == 0)
        out->folds = -1;
    out->p50_ms = quantile(v->step_ms, out->steps, 0.50);
    out->p99_ms = quantile(v->step_ms, out->steps, 0.99);
    out->device_p50_ms = quantile(v->device_ms, out->steps, 0.50);
    out->mean_rows = out->steps ? (double)out->verify_rows / (double)out->steps : NAN;
    out->mean_busy = out->steps ? v->busy / (double)out->steps : NAN;
}

/* Releases every slot still held (closing an open forward first). */
static void release_all(level *v)
{
    serve_engine *e = v->e;
    if (v->ticket_open)
        ssm_forward_abort(e->ctx, &v->ticket, e->dev->stream);
    char ignored[256];
    device_sync(e->dev, ignored, sizeof ignored);
    for (int32_t i = 0; i < v->live_count; i++)
        ssm_slot_release(e->ctx, v->live[i].slot);
    v->live_count = 0;
}

/* A line on stderr while a level runs on, every SERVE_PROGRESS_SECONDS
 * (a large model on the CPU can spend minutes in one level). */
static void progress(const level *v, double *next)
{
    const serve_options *o = v->e->o;
    double now = device_now();
    if (o->quiet || now < *next)
        return;
    *next = now + SERVE_PROGRESS_SECONDS;
    const ssm_config *c = ssm_ctx_config(v->e->ctx);
    if (v->measuring)
        fprintf(stderr, "serve: %s %s %s: concurrency %d: measured step %lld of %d\n",
                ssm_model_kind_name(c->model.kind), ssm_dtype_name(c->state_dtype), c->mode,
                (int)v->concurrency, (long long)v->out->steps, (int)o->steps);
    else
        fprintf(stderr,
                "serve: %s %s %s: concurrency %d: warm-up step %lld (at most %d), %lld "
                "requests finished\n",
                ssm_model_kind_name(c->model.kind), ssm_dtype_name(c->state_dtype), c->mode,
                (int)v->concurrency, (long long)v->out->warmup_steps, (int)o->warmup_steps,
                (long long)v->finished);
}

int serve_engine_level(serve_engine *e, int32_t concurrency, int32_t check, serve_log **logs,
                       serve_point *out, char *error, size_t len)
{
    const serve_options *o = e->o;
    level v;
    memset(&v, 0, sizeof v);
    v.e = e;
    v.w = o->workload;
    v.w.rate = out->rate;
    v.w.tokens = e->tokens;
    v.concurrency = concurrency;
    v.check = check;
    v.logs = logs;
    v.logging = check > 0;
    v.out = out;
    v.error = error;
    v.len = len;
    v.trace = trace_wanted();
    out->concurrency = concurrency;
    serve_arrivals_init(&v.arrivals, &v.w);
    for (int32_t i = 0; i < check; i++)
        logs[i] = NULL;
    v.live = calloc((size_t)concurrency, sizeof *v.live);
    v.prefill = calloc((size_t)concurrency, sizeof *v.prefill);
    v.verify = calloc((size_t)concurrency, sizeof *v.verify);
    v.step_ms = calloc((size_t)o->steps + 1, sizeof *v.step_ms);
    v.device_ms = calloc((size_t)o->steps + 1, sizeof *v.device_ms);
    int status = v.live && v.prefill && v.verify && v.step_ms && v.device_ms ? 0 : -1;
    if (status != 0)
        snprintf(error, len, "out of memory for the stream");
    v.measuring = o->warmup_steps == 0;
    v.logging = v.logging && !v.measuring;
    double next_progress = device_now() + SERVE_PROGRESS_SECONDS;
    while (status == 0 && out->steps < o->steps && !serve_interrupted) {
        status = run_step(&v);
        if (status == 0 && out->idle_steps > 1000 * (int64_t)o->steps) {
            snprintf(error, len, "%lld idle steps at %d concurrent: arrivals too rare for "
                     "--steps %d (raise --rate)",
                     (long long)out->idle_steps, (int)concurrency, (int)o->steps);
            status = -1;
        }
        if (status == 0)
            progress(&v, &next_progress);
    }
    if (status == 0 && serve_interrupted) {
        if (out->steps > 0)
            snprintf(error, len, "interrupted (Ctrl-C) at concurrency %d after %lld of %d "
                     "measured steps",
                     (int)concurrency, (long long)out->steps, (int)o->steps);
        else
            snprintf(error, len, "interrupted (Ctrl-C) in the warm-up of concurrency %d",
                     (int)concurrency);
        status = 1;
    }
    if (status >= 0)
        summarize(&v);
    release_all(&v);
    free(v.live);
    free(v.prefill);
    free(v.verify);
    free(v.step_ms);
    free(v.device_ms);
    return status;
}
