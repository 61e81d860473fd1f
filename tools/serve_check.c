/* The cross-check (see serve_check.h). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/reference.h"
#include "serve_check.h"

enum { MAX_THREADS = 16 };

/* What every worker reads; tasks are (log, layer) pairs handed out in order. */
typedef struct check_job {
    ssm_config config;          /* one layer, CPU, the check's mode */
    const serve_data *data;
    serve_log *const *logs;
    int32_t layers;
    int64_t tasks, next;
    pthread_mutex_t lock;
} check_job;

typedef struct check_worker {
    check_job *job;
    ssm_ctx *ctx;
    compare_baseline *baseline;
    compare_difference diff;
    void *out, *window, *state; /* CPU outputs of one (request, layer); its final state */
    size_t out_bytes;
    char error[256];
    pthread_t thread;
} check_worker;

/* Bytes of one token's outputs. */
static size_t width_bytes(const check_job *job)
{
    const ssm_model_dims *m = &job->data->model;
    return (size_t)m->value_heads * (size_t)m->value_dim * ssm_dtype_size(job->data->act);
}

/* Runs one logged call of `request` on the worker's context with layer
 * `layer`'s inputs and weights, writing its outputs at out. Returns 0, or -1 with a message. */
static int replay_call(check_worker *w, int64_t request, const serve_call *c, int32_t slot,
                       int32_t layer, void *out)
{
    const serve_data *d = w->job->data;
    const int64_t first =
        serve_pool_offset(c->step, layer, c->kind, c->batch_tokens, d->pool_tokens) +
        c->row_offset;
    const ssm_step_io io = serve_pool_io(d, first, out, 1);
    const ssm_layer_weights *weights = &d->host_weights.layer[layer];
    ssm_status status;
    const char *call;
    if (c->kind == SERVE_PREFILL) {
        const int32_t offsets[2] = {0, c->tokens};
        const ssm_prefill_batch b = {1, &slot, offsets, c->tokens, &slot, offsets};
        call = "ssm_prefill";
        status = ssm_prefill(w->ctx, 0, &b, weights, &io, NULL);
    } else {
        const ssm_batch b = {1, c->tokens, &slot, &slot};
        ssm_ticket ticket = SSM_TICKET_INIT;
        call = "ssm_verify";
        status = ssm_verify(w->ctx, 0, &b, weights, &io, &ticket, NULL);
        if (status == SSM_OK) {
            const int32_t keep = c->keep;
            call = "ssm_commit";
            status = ssm_commit(w->ctx, &ticket, &keep, NULL);
        }
    }
    if (status == SSM_OK)
        return 0;
    snprintf(w->error, sizeof w->error, "check: %s (request %lld, layer %d): %s", call,
             (long long)request, layer, ssm_last_error());
    return -1;
}

/* Test-only (SSMSTATE_SERVE_TEST_SPOIL set, docs/serve.md "Tests"): the
 * first replayed output becomes NaN, so tests/serve_smoke.sh can see the
 * check fail. */
static void spoil_first_output(check_worker *w)
{
    if (w->job->config.activation_dtype == SSM_DTYPE_BF16) {
        const uint16_t nan = 0x7fc0;
        memcpy(w->out, &nan, sizeof nan);
    } else {
        const float nan = NAN;
        memcpy(w->out, &nan, sizeof nan);
    }
}

/* Compares the replayed outputs (and final state) of a layer with the log. */
static int compare_layer(check_worker *w, const serve_log *log, int32_t layer, int32_t slot)
{
    session_block block = {.request = (int32_t)log->request, .layer = layer,
                           .kind = SESSION_VERIFY, .tokens = (int32_t)log->tokens,
                           .keep = (int32_t)log->tokens, .rows = 1, .out = log->out[layer]};
    compare_keep_output(w->baseline, &block);
    if (getenv("SSMSTATE_SERVE_TEST_SPOIL"))
        spoil_first_output(w);
    block.out = w->out;
    compare_output(w->baseline, &w->diff, &block);
    if (log->finished) {
        void *window[1] = {w->window}, *state[1] = {w->state};
        if (ssm_slot_export_canonical(w->ctx, slot, window, state, NULL) != SSM_OK) {
            snprintf(w->error, sizeof w->error, "check: ssm_slot_export_canonical: %s",
                     ssm_last_error());
            return -1;
        }
        compare_keep_final_state(w->baseline, (int32_t)log->request, layer, log->window[layer],
                                 log->state[layer]);
        compare_final_state(w->baseline, &w->diff, (int32_t)log->request, layer, w->window,
                            w->state);
    }
    int ok = compare_baseline_ok(w->baseline);
    compare_next_forward(w->baseline);
    if (!ok)
        snprintf(w->error, sizeof w->error, "check: out of memory comparing outputs");
    return ok ? 0 : -1;
}

/* One (request, layer): a fresh slot, every call, the comparison. */
static int replay_task(check_worker *w, const serve_log *log, int32_t layer)
{
    const size_t need = (size_t)log->tokens * width_bytes(w->job);
    if (need > w->out_bytes) {
        void *grown = realloc(w->out, need);
        if (!grown) {
            snprintf(w->error, sizeof w->error, "check: out of memory for the outputs");
            return -1;
        }
        w->out = grown;
        w->out_bytes = need;
    }
    int32_t slot;
    if (ssm_slot_acquire(w->ctx, &slot) != SSM_OK) {
        snprintf(w->error, sizeof w->error, "check: ssm_slot_acquire: %s", ssm_last_error());
        return -1;
    }
    int64_t at = 0;
    int status = 0;
    for (int32_t i = 0; status == 0 && i < log->count; i++) {
        status = replay_call(w, log->request, &log->calls[i], slot, layer,
                             (char *)w->out + (size_t)at * width_bytes(w->job));
        at += log->calls[i].tokens;
    }
    if (status == 0)
        status = compare_layer(w, log, layer, slot);
    ssm_slot_release(w->ctx, slot);
    return status;
}

/* A worker's context, comparison and buffers; 0, or -1 with its error set. */
static int worker_setup(check_worker *w)
{
    const check_job *job = w->job;
    const ssm_model_dims *m = &job->config.model;
    compare_difference_init(&w->diff);
    w->window =
        malloc((size_t)ssm_ref_window_elems(m) * ssm_dtype_size(job->config.activation_dtype));
    w->state = malloc((size_t)ssm_ref_state_elems(m) * ssm_dtype_size(job->config.state_dtype));
    if (!w->window || !w->state ||
        compare_baseline_create(m, job->config.state_dtype, job->config.activation_dtype,
                                &w->baseline) != 0) {
        snprintf(w->error, sizeof w->error, "check: out of memory");
        return -1;
    }
    if (ssm_ctx_create(&job->config, &w->ctx) != SSM_OK) {
        snprintf(w->error, sizeof w->error, "check: a CPU context of mode %s: %s",
                 job->config.mode, ssm_last_error());
        return -1;
    }
    return 0;
}

/* A worker: tasks until none is left or one fails; frees what it made. */
static void *worker_main(void *arg)
{
    check_worker *w = arg;
    check_job *job = w->job;
    int status = worker_setup(w);
    while (status == 0) {
        pthread_mutex_lock(&job->lock);
        int64_t task = job->next < job->tasks ? job->next++ : -1;
        pthread_mutex_unlock(&job->lock);
        if (task < 0)
            break;
        const serve_log *log = job->logs[task / job->layers];
        const int32_t layer = (int32_t)(task % job->layers);
        if (log && log->count > 0 && log->checked[layer])
            status = replay_task(w, log, layer);
    }
    ssm_ctx_destroy(w->ctx);
    compare_baseline_destroy(w->baseline);
    free(w->out);
    free(w->window);
    free(w->state);
    return NULL;
}

int32_t serve_check_layers(const char *spec, int32_t layers, uint8_t *mask)
{
    memset(mask, 0, (size_t)layers);
    if (layers < 1)
        return -1;
    if (!spec || !strcmp(spec, "ends")) {
        mask[0] = mask[layers / 2] = mask[layers - 1] = 1;
    } else if (!strcmp(spec, "all")) {
        memset(mask, 1, (size_t)layers);
    } else {
        for (const char *p = spec; *p;) {
            char *end;
            long layer = strtol(p, &end, 10);
            if (end == p || layer < 0 || layer >= layers || (*end && *end != ','))
                return -1;
            mask[layer] = 1;
            p = *end ? end + 1 : end;
            if (*end && !*p)
                return -1;
        }
    }
    int32_t count = 0;
    for (int32_t l = 0; l < layers; l++)
        count += mask[l];
    return count;
}

/* Adds one worker's difference to the total. */
static void merge(compare_difference *into, const compare_difference *d)
{
    into->blocks += d->blocks;
    into->states += d->states;
    into->unmatched += d->unmatched;
    into->outputs_identical &= d->outputs_identical;
    into->outputs_within_bound &= d->outputs_within_bound;
    into->states_identical &= d->states_identical;
    into->windows_identical &= d->windows_identical;
    into->states_within_bound &= d->states_within_bound;
    bound_track_max(&into->max_output_rel_rms, d->max_output_rel_rms);
    bound_track_max(&into->max_state_rel_rms, d->max_state_rel_rms);
    if (d->max_output_ulps > into->max_output_ulps)
        into->max_output_ulps = d->max_output_ulps;
}

/* Threads for `tasks` tasks: one per CPU, at most MAX_THREADS. */
static int32_t thread_count(int64_t tasks)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t n = cpus > 0 ? cpus : 1;
    n = n < MAX_THREADS ? n : MAX_THREADS;
    return (int32_t)(n < tasks ? n : tasks > 0 ? tasks : 1);
}

/* The verdict from the merged difference. */
static int verdict(const serve_check_result *r)
{
    const compare_difference *d = &r->diff;
    if (r->error[0] || d->blocks == 0 || d->unmatched != 0 || !d->windows_identical)
        return 0;
    if (!(r->outputs_bitwise ? d->outputs_identical : d->outputs_within_bound))
        return 0;
    return r->states_bitwise ? d->states_identical : d->states_within_bound;
}

void serve_check_run(const ssm_config *base, const char *mode, ssm_dtype state_dtype,
                     const serve_data *data, serve_log *const *logs, int32_t count,
                     serve_check_result *result)
{
    check_job job;
    memset(&job, 0, sizeof job);
    job.config = *base; /* shallow: strings stay the loaded config's */
    job.config.mode = mode;
    job.config.model.layers = 1;
    job.config.state_dtype = state_dtype;
    job.config.activation_dtype = data->act;
    job.config.device = (ssm_device){SSM_DEVICE_CPU, 0};
    job.config.max_requests = 1;
    job.config.max_draft_tokens = SERVE_DRAFTS;
    job.data = data;
    job.logs = logs;
    job.layers = data->model.layers;
    job.tasks = (int64_t)count * data->model.layers;
    pthread_mutex_init(&job.lock, NULL);

    result->ran = 1;
    compare_difference_init(&result->diff);
    for (int32_t i = 0; i < count; i++) {
        if (!logs[i] || logs[i]->count == 0)
            continue;
        result->requests++;
        result->finished += logs[i]->finished;
        if (logs[i]->failed)
            snprintf(result->error, sizeof result->error, "out of memory logging request %lld",
                     (long long)logs[i]->request);
    }
    if (result->requests == 0 && !result->error[0])
        snprintf(result->error, sizeof result->error,
                 "no checked request ran during the warm-up (raise --warmup-steps)");

    check_worker workers[MAX_THREADS];
    const int32_t threads = result->error[0] ? 0 : thread_count(job.tasks);
    int32_t started = 0;
    memset(workers, 0, sizeof workers);
    for (int32_t t = 0; t < threads; t++) {
        workers[t].job = &job;
        if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0)
            break;
        started++;
    }
    if (threads > 0 && started == 0)
        snprintf(result->error, sizeof result->error, "check: cannot start a thread");
    for (int32_t t = 0; t < started; t++) {
        pthread_join(workers[t].thread, NULL);
        merge(&result->diff, &workers[t].diff);
        if (workers[t].error[0] && !result->error[0])
            snprintf(result->error, sizeof result->error, "%s", workers[t].error);
    }
    pthread_mutex_destroy(&job.lock);
    result->pass = verdict(result);
}
