/* The cross-check (see serve_check.h).
 *
 * Its unit of work is one (request, layer): the request's logged calls
 * through a fresh one-layer CPU context, compared as one tensor. The stream
 * feeds every layer from the input pool (serve_pool_offset of the step, the
 * layer and the call's kind), never from the layer below, so the units are
 * independent. Threads take them costliest first; each unit keeps its own
 * difference and error, and they are merged in (request, layer) order up to
 * the first unit that failed, as one thread running them in order would, so
 * the outcome does not depend on the thread count. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/reference.h"
#include "serve_check.h"

/* One (request, layer) and what its replay found. */
typedef struct check_unit {
    const serve_log *log;
    int32_t layer;
    compare_difference diff;
    char error[256];
} check_unit;

/* A unit's place in the order the threads take them: costliest first. */
typedef struct check_turn {
    int64_t cost; /* tokens the unit replays */
    int64_t unit;
} check_turn;

/* What the threads share. */
typedef struct check_pool {
    ssm_config config;          /* one layer, CPU, the check's mode */
    const serve_data *data;
    int spoil;                  /* SSMSTATE_SERVE_TEST_SPOIL is set */
    bound_relation relation;    /* the run's device against these CPU contexts */
    check_unit *units;          /* in (request, layer) order */
    check_turn *turns;          /* the order units are handed out */
    int64_t count;
    int64_t next;               /* the next turn */
    int64_t first_failed;       /* the lowest unit that failed so far; count while none */
    pthread_mutex_t lock;
} check_pool;

/* One unit's replay: its context, slot, outputs, final window and state, and
 * the comparison holding the run's side. */
typedef struct check_replay {
    ssm_ctx *ctx;
    int32_t slot;               /* -1 until acquired */
    compare_baseline *baseline;
    void *out, *window, *state;
} check_replay;

/* Bytes of one token's outputs. */
static size_t width_bytes(const check_pool *pool)
{
    const ssm_model_dims *m = &pool->data->model;
    return (size_t)m->value_heads * (size_t)m->value_dim * ssm_dtype_size(pool->data->act);
}

/* Frees what replay_open made (any part of it may be missing). */
static void replay_close(check_replay *r)
{
    if (r->ctx && r->slot >= 0)
        ssm_slot_release(r->ctx, r->slot);
    ssm_ctx_destroy(r->ctx);
    compare_baseline_destroy(r->baseline);
    free(r->out);
    free(r->window);
    free(r->state);
    memset(r, 0, sizeof *r);
    r->slot = -1;
}

/* A unit's context with a slot, its comparison and buffers. Returns 0, or
 * -1 with the unit's error set and everything freed. */
static int replay_open(const check_pool *pool, check_unit *u, check_replay *r)
{
    const ssm_config *c = &pool->config;
    const ssm_model_dims *m = &c->model;
    memset(r, 0, sizeof *r);
    r->slot = -1;
    r->out = malloc((size_t)u->log->tokens * width_bytes(pool));
    r->window = malloc((size_t)ssm_ref_window_elems(m) * ssm_dtype_size(c->activation_dtype));
    r->state = malloc((size_t)ssm_ref_state_elems(m) * ssm_dtype_size(c->state_dtype));
    if (!r->out || !r->window || !r->state ||
        compare_baseline_create(m, c->state_dtype, c->activation_dtype, pool->relation,
                                &r->baseline) != 0) {
        snprintf(u->error, sizeof u->error, "check: out of memory");
    } else if (ssm_ctx_create(c, &r->ctx) != SSM_OK) {
        snprintf(u->error, sizeof u->error, "check: a CPU context of mode %s: %s", c->mode,
                 ssm_last_error());
    } else if (ssm_slot_acquire(r->ctx, &r->slot) != SSM_OK) {
        snprintf(u->error, sizeof u->error, "check: ssm_slot_acquire: %s", ssm_last_error());
        r->slot = -1;
    } else {
        return 0;
    }
    replay_close(r);
    return -1;
}

/* Runs one logged call of the unit's request on its context with the
 * layer's inputs and weights, writing its outputs at out. Returns 0, or -1
 * with the unit's error set. */
static int replay_call(const check_pool *pool, check_unit *u, const check_replay *r,
                       const serve_call *c, void *out)
{
    const serve_data *d = pool->data;
    const int64_t first =
        serve_pool_offset(c->step, u->layer, c->kind, c->batch_tokens, d->pool_tokens) +
        c->row_offset;
    const ssm_step_io io = serve_pool_io(d, first, out, 1);
    const ssm_layer_weights *weights = &d->host_weights.layer[u->layer];
    const int32_t slot = r->slot;
    ssm_status status;
    const char *call;
    if (c->kind == SERVE_PREFILL) {
        const int32_t offsets[2] = {0, c->tokens};
        const ssm_prefill_batch b = {1, &slot, offsets, c->tokens, &slot, offsets};
        call = "ssm_prefill";
        status = ssm_prefill(r->ctx, 0, &b, weights, &io, NULL);
    } else {
        const ssm_batch b = {1, c->tokens, &slot, &slot};
        ssm_ticket ticket = SSM_TICKET_INIT;
        call = "ssm_verify";
        status = ssm_verify(r->ctx, 0, &b, weights, &io, &ticket, NULL);
        if (status == SSM_OK) {
            const int32_t keep = c->keep;
            call = "ssm_commit";
            status = ssm_commit(r->ctx, &ticket, &keep, NULL);
        }
    }
    if (status == SSM_OK)
        return 0;
    snprintf(u->error, sizeof u->error, "check: %s (request %lld, layer %d): %s", call,
             (long long)u->log->request, u->layer, ssm_last_error());
    return -1;
}

/* Test-only (SSMSTATE_SERVE_TEST_SPOIL set, docs/serve.md "Tests"): the
 * first replayed output becomes NaN, so tests/serve_smoke.sh can see the
 * check fail. */
static void spoil_first_output(const check_pool *pool, check_replay *r)
{
    if (pool->config.activation_dtype == SSM_DTYPE_BF16) {
        const uint16_t nan = 0x7fc0;
        memcpy(r->out, &nan, sizeof nan);
    } else {
        const float nan = NAN;
        memcpy(r->out, &nan, sizeof nan);
    }
}

/* Compares the replayed outputs (and final state) of the unit with the log,
 * into the unit's difference. Returns 0, or -1 with its error set. */
static int compare_unit(const check_pool *pool, check_unit *u, check_replay *r)
{
    const serve_log *log = u->log;
    session_block block = {.request = (int32_t)log->request, .layer = u->layer,
                           .kind = SESSION_VERIFY, .tokens = (int32_t)log->tokens,
                           .keep = (int32_t)log->tokens, .rows = 1, .out = log->out[u->layer]};
    compare_keep_output(r->baseline, &block);
    if (pool->spoil)
        spoil_first_output(pool, r);
    block.out = r->out;
    compare_output(r->baseline, &u->diff, &block);
    compare_outputs_finish(r->baseline, &u->diff); /* the one block is the whole tensor */
    if (log->finished) {
        void *window[1] = {r->window}, *state[1] = {r->state};
        if (ssm_slot_export_canonical(r->ctx, r->slot, window, state, NULL) != SSM_OK) {
            snprintf(u->error, sizeof u->error, "check: ssm_slot_export_canonical: %s",
                     ssm_last_error());
            return -1;
        }
        compare_keep_final_state(r->baseline, (int32_t)log->request, u->layer,
                                 log->window[u->layer], log->state[u->layer]);
        compare_final_state(r->baseline, &u->diff, (int32_t)log->request, u->layer, r->window,
                            r->state);
    }
    if (compare_baseline_ok(r->baseline))
        return 0;
    snprintf(u->error, sizeof u->error, "check: out of memory comparing outputs");
    return -1;
}

/* One unit: a fresh context and slot, every call, the comparison; frees
 * what it made. Returns 0, or -1 with the unit's error set. */
static int run_unit(const check_pool *pool, check_unit *u)
{
    check_replay r;
    if (replay_open(pool, u, &r) != 0)
        return -1;
    int64_t at = 0;
    int status = 0;
    for (int32_t i = 0; status == 0 && i < u->log->count; i++) {
        const serve_call *c = &u->log->calls[i];
        status = replay_call(pool, u, &r, c, (char *)r.out + (size_t)at * width_bytes(pool));
        at += c->tokens;
    }
    if (status == 0)
        status = compare_unit(pool, u, &r);
    replay_close(&r);
    return status;
}

/* The next unit to run, or -1 when none is left. Units after one that failed
 * are skipped: the result stops at the first failure, as in order. */
static int64_t take_unit(check_pool *pool)
{
    int64_t unit = -1;
    pthread_mutex_lock(&pool->lock);
    while (unit < 0 && pool->next < pool->count) {
        const int64_t candidate = pool->turns[pool->next++].unit;
        if (candidate < pool->first_failed)
            unit = candidate;
    }
    pthread_mutex_unlock(&pool->lock);
    return unit;
}

/* Records that `unit` failed. */
static void unit_failed(check_pool *pool, int64_t unit)
{
    pthread_mutex_lock(&pool->lock);
    if (unit < pool->first_failed)
        pool->first_failed = unit;
    pthread_mutex_unlock(&pool->lock);
}

/* A worker: units until none is left. */
static void *worker_main(void *arg)
{
    check_pool *pool = arg;
    for (int64_t unit = take_unit(pool); unit >= 0; unit = take_unit(pool))
        if (run_unit(pool, &pool->units[unit]) != 0)
            unit_failed(pool, unit);
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

/* Adds one unit's difference to the total. */
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

/* CPUs this process may run on (its affinity mask, which a container's
 * cpuset narrows), else the online ones. The mask grows until the kernel's
 * fits (EINVAL: more CPUs than the mask holds). */
static long usable_cpus(void)
{
    for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
        cpu_set_t *set = CPU_ALLOC(cpus);
        if (!set)
            break;
        size_t size = CPU_ALLOC_SIZE(cpus);
        int got = sched_getaffinity(0, size, set) == 0;
        long count = got ? CPU_COUNT_S(size, set) : 0;
        CPU_FREE(set);
        if (got && count > 0)
            return count;
        if (got || errno != EINVAL)
            break;
    }
    return sysconf(_SC_NPROCESSORS_ONLN);
}

/* Threads for `units` units: `requested`, or one per usable CPU when 0; at
 * most one per unit, at least one. */
static int32_t thread_count(int32_t requested, int64_t units)
{
    long n = requested;
    if (n <= 0)
        n = usable_cpus();
    if (n > units)
        n = (long)units;
    return n > 0 ? (int32_t)n : 1;
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

/* Counts the logged requests (and the finished ones) into the result and
 * says why the check cannot run, if it cannot: a log that ran out of
 * memory, or no logged request. */
static void count_requests(serve_log *const *logs, int32_t count, serve_check_result *result)
{
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
}

/* Orders turns by cost, costliest first; equal costs by unit. */
static int costliest_first(const void *a, const void *b)
{
    const check_turn *x = a, *y = b;
    if (x->cost != y->cost)
        return x->cost > y->cost ? -1 : 1;
    return (x->unit > y->unit) - (x->unit < y->unit);
}

/* The units of the logged requests' checked layers, in (request, layer)
 * order, and their turns. Returns 0, or -1 when out of memory (nothing
 * allocated then). */
static int make_units(check_pool *pool, serve_log *const *logs, int32_t count)
{
    const int32_t layers = pool->data->model.layers;
    int64_t n = 0;
    for (int32_t i = 0; i < count; i++)
        for (int32_t l = 0; logs[i] && logs[i]->count > 0 && l < layers; l++)
            n += logs[i]->checked[l];
    pool->units = calloc((size_t)n + 1, sizeof *pool->units);
    pool->turns = calloc((size_t)n + 1, sizeof *pool->turns);
    if (!pool->units || !pool->turns) {
        free(pool->units);
        free(pool->turns);
        return -1;
    }
    for (int32_t i = 0; i < count; i++) {
        for (int32_t l = 0; logs[i] && logs[i]->count > 0 && l < layers; l++) {
            if (!logs[i]->checked[l])
                continue;
            check_unit *u = &pool->units[pool->count];
            u->log = logs[i];
            u->layer = l;
            compare_difference_init(&u->diff);
            pool->turns[pool->count] = (check_turn){logs[i]->tokens, pool->count};
            pool->count++;
        }
    }
    qsort(pool->turns, (size_t)pool->count, sizeof *pool->turns, costliest_first);
    pool->first_failed = pool->count;
    return 0;
}

/* Runs every unit on `threads` threads, the calling one among them (fewer
 * when a thread cannot start: the caller alone still runs them all). */
static void run_units(check_pool *pool, int32_t threads)
{
    pthread_t *extra = threads > 1 ? calloc((size_t)threads - 1, sizeof *extra) : NULL;
    int32_t started = 0;
    for (int32_t t = 0; extra && t < threads - 1; t++) {
        if (pthread_create(&extra[t], NULL, worker_main, pool) != 0)
            break;
        started++;
    }
    worker_main(pool);
    for (int32_t t = 0; t < started; t++)
        pthread_join(extra[t], NULL);
    free(extra);
}

/* Merges the units' differences in order, up to and including the first
 * that failed, whose error becomes the result's. */
static void gather(const check_pool *pool, serve_check_result *result)
{
    for (int64_t i = 0; i < pool->count && i <= pool->first_failed; i++) {
        merge(&result->diff, &pool->units[i].diff);
        if (i == pool->first_failed)
            snprintf(result->error, sizeof result->error, "%s", pool->units[i].error);
    }
}

void serve_check_run(const ssm_config *base, const char *mode, ssm_dtype state_dtype,
                     const serve_data *data, serve_log *const *logs, int32_t count,
                     int32_t threads, serve_check_result *result)
{
    check_pool pool;
    memset(&pool, 0, sizeof pool);
    pool.config = *base; /* shallow: strings stay the loaded config's */
    pool.config.mode = mode;
    pool.config.model.layers = 1;
    pool.config.state_dtype = state_dtype;
    pool.config.activation_dtype = data->act;
    pool.config.device = (ssm_device){SSM_DEVICE_CPU, 0};
    pool.config.max_requests = 1;
    pool.config.max_draft_tokens = SERVE_DRAFTS;
    pool.data = data;
    pool.spoil = getenv("SSMSTATE_SERVE_TEST_SPOIL") != NULL;
    pool.relation = result->relation;

    result->ran = 1;
    compare_difference_init(&result->diff);
    count_requests(logs, count, result);
    if (!result->error[0] && make_units(&pool, logs, count) != 0)
        snprintf(result->error, sizeof result->error, "check: out of memory");
    if (!result->error[0]) {
        pthread_mutex_init(&pool.lock, NULL);
        run_units(&pool, thread_count(threads, pool.count));
        pthread_mutex_destroy(&pool.lock);
        gather(&pool, result);
    }
    free(pool.units);
    free(pool.turns);
    result->pass = verdict(result);
}
