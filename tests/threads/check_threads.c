/* Threads (docs/reliability.md): ssmstate.h's guarantee. Separate contexts run
 * concurrently from separate threads, plugins load concurrently, and
 * ssm_last_error() is per thread.
 * - sessions: THREADS threads each run every job (a mode, a model kind and
 *   dtypes: prefill, decode rounds, verify + commit rounds on seeded inputs
 *   and acceptance, the final pages) in contexts of their own, rotated so
 *   different modes run at once. Each job's digest (every output and the
 *   final pages, bit for bit) must equal the same job run alone. The threads
 *   go first in the (forked) test process, so the library's lazily set state
 *   (log level, CRC table) is first touched concurrently; the single-threaded
 *   runs follow.
 * - errors: each thread fails calls with arguments of its own, waits until
 *   every thread has failed its call, then reads its own message.
 * Workers never call ck_assert (Check's failure path is not thread-safe):
 * they return a message the test's thread asserts on. CI runs this under
 * ThreadSanitizer (.ci/run). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/runner.h"
#include "tests/testutil.h"

#define THREADS 4
#define ROUNDS 6
#define CAP 3
#define MAX_DRAFT 3

typedef struct job {
    const char *mode;
    ssm_model_kind kind;
    ssm_dtype sd, ad;
} job;

static const job jobs[] = {
    {"native", SSM_MODEL_GDN, SSM_DTYPE_F32, SSM_DTYPE_F32},
    {"compact", SSM_MODEL_KDA, SSM_DTYPE_F32, SSM_DTYPE_BF16},
    {"replay", SSM_MODEL_GDN, SSM_DTYPE_BF16, SSM_DTYPE_BF16},
    {"native", SSM_MODEL_KDA, SSM_DTYPE_BF16, SSM_DTYPE_F32},
    {"compact", SSM_MODEL_GDN, SSM_DTYPE_F32, SSM_DTYPE_F32},
    {"replay", SSM_MODEL_KDA, SSM_DTYPE_F32, SSM_DTYPE_BF16},
};
#define JOBS ((int)(sizeof jobs / sizeof jobs[0]))

/* FNV-1a over everything a session produced. */
static void digest(uint64_t *h, const void *data, size_t bytes)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++)
        *h = (*h ^ p[i]) * 0x100000001b3ull;
}

typedef struct session {
    const job *j;
    ssm_model_dims m;
    test_rng r;
    test_weights w[2];
    ssm_ctx *ctx;
    uint64_t hash;
    char why[512];
} session;

#define FAIL(s, call)                                                                        \
    (snprintf((s)->why, sizeof (s)->why, "%s %s: %s: %s", (s)->j->mode,                      \
              (s)->j->kind == SSM_MODEL_GDN ? "gdn" : "kda", #call, ssm_last_error()),       \
     1)
#define TRY(s, call) ((call) == SSM_OK ? 0 : FAIL(s, call))

/* Runs `rows` rows of `tokens` tokens per layer through decode (ticket NULL)
 * or verify, hashing the outputs; pads stay zero. */
static int step(session *s, const int32_t *slots, int32_t rows, int32_t tokens,
                ssm_ticket *ticket)
{
    ssm_batch b = {rows, tokens, slots, NULL};
    for (int32_t l = 0; l < s->m.layers; l++) {
        test_io io;
        test_io_make(&s->r, &s->m, s->j->ad, (int64_t)rows * tokens, &io);
        int bad = ticket ? TRY(s, ssm_verify(s->ctx, l, &b, &s->w[l].w, &io.io, ticket, NULL))
                         : TRY(s, ssm_decode(s->ctx, l, &b, &s->w[l].w, &io.io, NULL));
        digest(&s->hash, io.out,
               (size_t)rows * tokens * s->m.value_heads * s->m.value_dim *
                   ssm_dtype_size(s->j->ad));
        test_io_free(&io);
        if (bad)
            return 1;
    }
    return 0;
}

static int body(session *s)
{
    int32_t slot[2];
    if (TRY(s, ssm_slot_acquire(s->ctx, &slot[0])) || TRY(s, ssm_slot_acquire(s->ctx, &slot[1])))
        return 1;
    /* Prefill: one prompt crossing a 64-token chunk, one short. */
    int32_t offsets[3] = {0, test_rng_int(&s->r, 65, 100), 0};
    offsets[2] = offsets[1] + test_rng_int(&s->r, 1, 20);
    ssm_prefill_batch pb = {2, slot, offsets, offsets[1], NULL, NULL};
    for (int32_t l = 0; l < s->m.layers; l++) {
        test_io io;
        test_io_make(&s->r, &s->m, s->j->ad, offsets[2], &io);
        int bad = TRY(s, ssm_prefill(s->ctx, l, &pb, &s->w[l].w, &io.io, NULL));
        digest(&s->hash, io.out,
               (size_t)offsets[2] * s->m.value_heads * s->m.value_dim *
                   ssm_dtype_size(s->j->ad));
        test_io_free(&io);
        if (bad)
            return 1;
    }
    for (int round = 0; round < ROUNDS; round++) {
        int32_t decode_rows[3] = {slot[0], -1, slot[1]}, verify_rows[2] = {slot[1], slot[0]};
        if (step(s, decode_rows, 3, 1, NULL))
            return 1;
        ssm_ticket t = SSM_TICKET_INIT;
        if (step(s, verify_rows, 2, 1 + MAX_DRAFT, &t))
            return 1;
        int32_t accepted[2] = {test_rng_int(&s->r, 1, 1 + MAX_DRAFT),
                               test_rng_int(&s->r, 1, 1 + MAX_DRAFT)};
        if (TRY(s, ssm_commit(s->ctx, &t, accepted, NULL)))
            return 1;
    }
    size_t bytes = ssm_page_bytes(s->ctx);
    unsigned char *page = malloc(bytes);
    int bad = 0;
    for (int i = 0; i < 2 && !bad; i++) {
        bad = TRY(s, ssm_slot_export_page(s->ctx, slot[i], page, bytes));
        digest(&s->hash, page, bad ? 0 : bytes);
    }
    free(page);
    return bad || TRY(s, ssm_slot_release(s->ctx, slot[0])) ||
           TRY(s, ssm_slot_release(s->ctx, slot[1]));
}

/* Runs job j with inputs from seed; returns 0 and its digest, or 1 and why. */
static int run_job(const job *j, uint64_t seed, uint64_t *hash, char *why, size_t why_size)
{
    session s = {.j = j, .hash = 0xcbf29ce484222325ull};
    test_rng_init(&s.r, seed);
    s.m = (ssm_model_dims){j->kind, 2, 2, 4, 16, 16, 4, j->kind == SSM_MODEL_KDA, -5.0f};
    for (int32_t l = 0; l < s.m.layers; l++)
        test_weights_make(&s.r, &s.m, l == 0, &s.w[l]);
    ssm_config c;
    test_config(&c, &s.m, j->mode, j->sd, j->ad, CAP, MAX_DRAFT);
    int bad = TRY(&s, ssm_ctx_create(&c, &s.ctx)) || body(&s);
    ssm_ctx_destroy(s.ctx);
    for (int32_t l = 0; l < s.m.layers; l++)
        test_weights_free(&s.w[l]);
    *hash = s.hash;
    snprintf(why, why_size, "%s", bad ? s.why : "");
    return bad;
}

typedef struct worker {
    int id;
    uint64_t seed;
    pthread_barrier_t *start;
    uint64_t hash[JOBS];
    char why[600];
} worker;

static void *sessions_worker(void *arg)
{
    worker *w = arg;
    pthread_barrier_wait(w->start);
    for (int k = 0; k < JOBS && !w->why[0]; k++) {
        int j = (k + w->id) % JOBS;
        char why[512];
        if (run_job(&jobs[j], w->seed + (uint64_t)j, &w->hash[j], why, sizeof why))
            snprintf(w->why, sizeof w->why, "thread %d: %s", w->id, why);
    }
    return NULL;
}

START_TEST(test_sessions_match_single_thread)
{
    uint64_t seed = test_seed();
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    worker w[THREADS];
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.id = i, .seed = seed, .start = &start};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, sessions_worker, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++)
        ck_assert_msg(!w[i].why[0], "%s", w[i].why);
    for (int j = 0; j < JOBS; j++) {
        uint64_t alone;
        char why[512];
        ck_assert_msg(!run_job(&jobs[j], seed + (uint64_t)j, &alone, why, sizeof why), "%s",
                      why);
        for (int i = 0; i < THREADS; i++)
            ck_assert_msg(w[i].hash[j] == alone,
                          "job %d (%s) in thread %d: digest %016llx, alone %016llx", j,
                          jobs[j].mode, i, (unsigned long long)w[i].hash[j],
                          (unsigned long long)alone);
    }
}
END_TEST

#define ERROR_ROUNDS 20

typedef struct err_worker {
    int id;
    pthread_barrier_t *all;
    char why[600];
} err_worker;

/* Every round: fail a call naming this thread, wait for every thread to
 * have failed its own, check the message, wait again. The barrier count is
 * the same whatever fails, so no thread is left waiting. */
static void *errors_worker(void *arg)
{
    err_worker *w = arg;
    ssm_model_dims m = {SSM_MODEL_GDN, 1, 1, 1, 8, 8, 2, 0, 0.0f};
    ssm_config c;
    test_config(&c, &m, (const char *[]){"native", "compact", "replay"}[w->id % 3],
                SSM_DTYPE_F32, SSM_DTYPE_F32, 2, 1);
    ssm_ctx *ctx = NULL;
    pthread_barrier_wait(w->all);
    if (ssm_ctx_create(&c, &ctx) != SSM_OK)
        snprintf(w->why, sizeof w->why, "thread %d: create: %s", w->id, ssm_last_error());
    for (int round = 0; round < ERROR_ROUNDS; round++) {
        char want[128];
        ssm_status got, expect;
        if (round % 2 == 0 || !ctx) {
            snprintf(want, sizeof want, "/nonexistent/thread-%d-round-%d.ini", w->id, round);
            ssm_config *loaded = NULL;
            got = ssm_config_load(want, &loaded);
            expect = SSM_ERR_CONFIG;
        } else {
            int32_t slot = 1000 * (w->id + 1) + round;
            snprintf(want, sizeof want, "slot %d is outside", slot);
            got = ssm_slot_release(ctx, slot);
            expect = SSM_ERR_SLOT_RANGE;
        }
        pthread_barrier_wait(w->all);
        if (!w->why[0] && (got != expect || !strstr(ssm_last_error(), want)))
            snprintf(w->why, sizeof w->why, "thread %d round %d: got %s '%s', want %s '%s'",
                     w->id, round, ssm_status_name(got), ssm_last_error(),
                     ssm_status_name(expect), want);
        pthread_barrier_wait(w->all);
    }
    ssm_ctx_destroy(ctx);
    return NULL;
}

START_TEST(test_errors_are_per_thread)
{
    pthread_barrier_t all;
    pthread_barrier_init(&all, NULL, THREADS);
    err_worker w[THREADS];
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (err_worker){.id = i, .all = &all};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, errors_worker, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&all);
    for (int i = 0; i < THREADS; i++)
        ck_assert_msg(!w[i].why[0], "%s", w[i].why);
}
END_TEST

#define SHARED_ROUNDS 8

/* What the calls safe from any thread return: the same in every thread. */
typedef struct shared_result {
    uint64_t pool_bytes[3]; /* ssm_config_plan of examples/<mode>.ini */
    int32_t plugins;        /* ssm_plugins_list's count */
    uint64_t page_payload;  /* ssm_page_inspect of the page */
    uint32_t page_crc;
} shared_result;

typedef struct shared_worker {
    pthread_barrier_t *start;
    const unsigned char *page;
    size_t page_bytes;
    shared_result got;
    char why[600];
} shared_worker;

/* Loads and plans each mode's example, lists the plugins and inspects the
 * page, SHARED_ROUNDS times (w->start NULL: once, no barrier). */
static void shared_calls(shared_worker *w, int rounds)
{
    static const char *const modes[3] = {"native", "compact", "replay"};
    const char *top = getenv("SSM_TOP_SRCDIR");
    for (int round = 0; round < rounds && !w->why[0]; round++) {
        for (int i = 0; i < 3 && !w->why[0]; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/examples/%s.ini", top ? top : ".", modes[i]);
            ssm_config *c = NULL;
            ssm_plan plan;
            if (ssm_config_load(path, &c) != SSM_OK || ssm_config_plan(c, &plan) != SSM_OK)
                /* bounded, so the message always fits why[] (path could not) */
                snprintf(w->why, sizeof w->why, "%.300s: %.280s", path, ssm_last_error());
            else
                w->got.pool_bytes[i] = plan.pool_bytes;
            ssm_config_free(c);
        }
        ssm_plugin_info listed[2]; /* the first two; the count is what is compared */
        if (ssm_plugins_list(NULL, listed, 2, &w->got.plugins) != SSM_OK)
            snprintf(w->why, sizeof w->why, "plugins_list: %s", ssm_last_error());
        ssm_page_info pi;
        if (ssm_page_inspect(w->page, w->page_bytes, &pi) != SSM_OK)
            snprintf(w->why, sizeof w->why, "page_inspect: %s", ssm_last_error());
        else {
            w->got.page_payload = pi.payload_bytes;
            w->got.page_crc = pi.payload_crc;
        }
    }
}

static void *shared_worker_main(void *arg)
{
    shared_worker *w = arg;
    pthread_barrier_wait(w->start);
    shared_calls(w, SHARED_ROUNDS);
    return NULL;
}

/* ssm_config_load, ssm_config_plan, ssm_plugins_list and ssm_page_inspect
 * from every thread at once (TSan watches), each answering as alone. */
START_TEST(test_shared_calls)
{
    ssm_model_dims m = {SSM_MODEL_GDN, 1, 1, 1, 8, 8, 2, 0, 0.0f};
    ssm_config c;
    test_config(&c, &m, "native", SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 1);
    ssm_ctx *ctx = NULL;
    ck_assert_msg(ssm_ctx_create(&c, &ctx) == SSM_OK, "%s", ssm_last_error());
    int32_t slot = -1;
    ck_assert_msg(ssm_slot_acquire(ctx, &slot) == SSM_OK, "%s", ssm_last_error());
    size_t bytes = ssm_page_bytes(ctx);
    unsigned char *page = malloc(bytes);
    ck_assert(page != NULL);
    ck_assert_msg(ssm_slot_export_page(ctx, slot, page, bytes) == SSM_OK, "%s", ssm_last_error());
    ssm_ctx_destroy(ctx);

    shared_worker alone = {.page = page, .page_bytes = bytes};
    shared_calls(&alone, 1);
    ck_assert_msg(!alone.why[0], "alone: %s", alone.why);
    ck_assert_msg(alone.got.plugins >= 3, "%d plugins listed", alone.got.plugins);

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    shared_worker w[THREADS];
    pthread_t tid[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (shared_worker){.start = &start, .page = page, .page_bytes = bytes};
        ck_assert_int_eq(pthread_create(&tid[i], NULL, shared_worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < THREADS; i++) {
        ck_assert_msg(!w[i].why[0], "thread %d: %s", i, w[i].why);
        const shared_result *a = &alone.got, *g = &w[i].got;
        for (int k = 0; k < 3; k++)
            ck_assert_msg(g->pool_bytes[k] == a->pool_bytes[k],
                          "thread %d: example %d plans %llu bytes, alone %llu", i, k,
                          (unsigned long long)g->pool_bytes[k],
                          (unsigned long long)a->pool_bytes[k]);
        ck_assert_msg(g->plugins == a->plugins && g->page_payload == a->page_payload &&
                          g->page_crc == a->page_crc,
                      "thread %d: %d plugins, page %llu bytes crc %08x; alone %d, %llu, %08x", i,
                      g->plugins, (unsigned long long)g->page_payload, g->page_crc, a->plugins,
                      (unsigned long long)a->page_payload, a->page_crc);
    }
    free(page);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_sessions_match_single_thread);
    tcase_add_test(tc, test_errors_are_per_thread);
    tcase_add_test(tc, test_shared_calls);
    suite_add_tcase(s, tc);
    return s;
}
