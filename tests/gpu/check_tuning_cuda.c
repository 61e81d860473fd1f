/* Tuning on the GPU (docs/tuning.md). On a GDN shape
 * with GVA (2 layers, H 2, HV 4, K 64, V 32), T_max 4, 6 slots:
 *
 * 1. the serving pool is untouched by tuning: per mode, a context with live
 *    state (prefill, a verify round) has its cache deleted and runs
 *    ssm_tune (every entry timed again on scratch); every slot's export is
 *    bit for bit what it was, no flag is raised, and the next verify round
 *    gives bit for bit the outputs and exports of a twin that never tuned.
 * 2. compact vs native with tuning on and a different update layout per
 *    bucket (the test-only layout 1 for 1 and 3..4 rows, 0 for 2 rows,
 *    SSMSTATE_TUNING_TEST_LAYOUTS=1): rounds of verify + commit and decodes
 *    at every bucket give bit-identical outputs and exports, fp32 and bf16
 *    state; each ticket carries its bucket's layout; and a native context
 *    without the layouts differs from them (the layout does change bits,
 *    so the comparison is not vacuous).
 * 3. two CUDA graphs captured at 1 row (layout 1) and at 2 rows (layout 0),
 *    in native and in compact, launched alternately with fresh inputs and
 *    accepted lengths: the two modes stay bit-identical, so each graph's
 *    commit ran its own verify's layout.
 * 4. a candidate that fails to launch (SSMSTATE_TUNING_TEST_FAIL, a real
 *    launch of an impossible block) is recorded in the cache with its
 *    reason and never run again: a later pass over entries without a choice
 *    skips it and the record stays.
 *
 * A Check suite run without fork through tests/gpu/tuning_cuda.gpu; exit
 * 77 when no CUDA device is visible. SSM_TEST_SEED replays a run. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/tuning/tuning.h"
#include "tests/expect.h"
#include "tests/gpu/gpu_suite.h"
#include "tests/gpu/gpu_util.h"

#define LAYERS 2
#define CAP 6
#define TMAX 4
#define PROMPT 40 /* tokens per prefilled lane */
#define MAX_CTX 3

static const ssm_model_dims dims = {.kind = SSM_MODEL_GDN, .layers = LAYERS, .heads = 2,
                                    .value_heads = 4, .key_dim = 64, .value_dim = 32,
                                    .conv_width = 4};

/* ------------------------------------------------------------ a bench */

/* Contexts of one model fed the same steps: shared weights and inputs,
 * outputs per context. Slots are acquired in the same order everywhere, so
 * one device slot buffer serves all. */
typedef struct bench {
    test_rng rng;
    ssm_dtype sd;
    int n;
    ssm_ctx *ctx[MAX_CTX];
    cudaStream_t stream;
    test_weights hw[LAYERS];
    gpu_weights dw[LAYERS];
    gpu_inputs in[LAYERS];     /* CAP * PROMPT tokens */
    void *out[MAX_CTX][LAYERS];
    size_t out_bytes;          /* CAP * PROMPT tokens */
    int32_t *slots_dev, *accepted_dev, *offsets_dev;
    char dir[64], cache[96];
} bench;

/* Fresh random inputs for every token the buffers hold (a step reads the
 * first of them). */
static void bench_inputs(bench *b)
{
    for (int l = 0; l < LAYERS; l++) {
        test_io full;
        test_io_make(&b->rng, &dims, SSM_DTYPE_F32, (int64_t)CAP * PROMPT, &full);
        ck_assert(gpu_inputs_copy(&b->in[l], &full, b->stream));
        ck_assert(gpu_ok(cudaStreamSynchronize(b->stream), "inputs"));
        test_io_free(&full);
    }
}

static void bench_open(bench *b, ssm_dtype sd, uint64_t salt)
{
    memset(b, 0, sizeof *b);
    test_rng_init(&b->rng, test_seed() ^ salt);
    b->sd = sd;
    snprintf(b->dir, sizeof b->dir, "/tmp/ssm_tuning_cuda_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(b->dir));
    snprintf(b->cache, sizeof b->cache, "%s/tuning.cache", b->dir);
    ck_assert(gpu_ok(cudaStreamCreate(&b->stream), "stream"));
    int64_t tokens = (int64_t)CAP * PROMPT;
    b->out_bytes = gpu_out_bytes(&dims, SSM_DTYPE_F32, tokens);
    for (int l = 0; l < LAYERS; l++) {
        test_weights_make(&b->rng, &dims, 1, &b->hw[l]);
        ck_assert(gpu_weights_upload(&dims, &b->hw[l], &b->dw[l]));
        ck_assert(gpu_inputs_alloc(&dims, SSM_DTYPE_F32, tokens, &b->in[l]));
    }
    int32_t offsets[CAP + 1];
    for (int i = 0; i <= CAP; i++)
        offsets[i] = i * PROMPT;
    ck_assert(gpu_alloc((void **)&b->slots_dev, sizeof(int32_t) * CAP, NULL, 0));
    ck_assert(gpu_alloc((void **)&b->accepted_dev, sizeof(int32_t) * CAP, NULL, 0));
    ck_assert(gpu_alloc((void **)&b->offsets_dev, sizeof offsets, offsets, 0));
}

/* Adds a CUDA context of `mode` with [tuning] mode `tuning` over b->cache;
 * every slot acquired. */
static int bench_add(bench *b, const char *mode, ssm_tuning_mode tuning)
{
    ssm_config c;
    test_config(&c, &dims, mode, b->sd, SSM_DTYPE_F32, CAP, TMAX - 1);
    c.device = (ssm_device){SSM_DEVICE_CUDA, 0};
    c.tuning.mode = tuning;
    c.tuning.cache = b->cache;
    c.tuning.budget_ms = 2;
    int k = b->n;
    EXPECT(ssm_ctx_create(&c, &b->ctx[k]), SSM_OK);
    for (int s = 0; s < CAP; s++) {
        int32_t slot;
        EXPECT(ssm_slot_acquire(b->ctx[k], &slot), SSM_OK);
        ck_assert_int_eq(slot, s);
    }
    for (int l = 0; l < LAYERS; l++)
        ck_assert(gpu_alloc(&b->out[k][l], b->out_bytes, NULL, 0));
    b->n++;
    return k;
}

static void bench_close(bench *b)
{
    cudaStreamSynchronize(b->stream);
    for (int k = 0; k < b->n; k++) {
        ssm_ctx_destroy(b->ctx[k]);
        for (int l = 0; l < LAYERS; l++)
            gpu_free(b->out[k][l]);
    }
    for (int l = 0; l < LAYERS; l++) {
        test_weights_free(&b->hw[l]);
        gpu_weights_free(&b->dw[l]);
        gpu_inputs_free(&b->in[l]);
    }
    gpu_free(b->slots_dev);
    gpu_free(b->accepted_dev);
    gpu_free(b->offsets_dev);
    cudaStreamDestroy(b->stream);
    unlink(b->cache);
    rmdir(b->dir);
}

/* Every context prefills PROMPT tokens into every slot. */
static void bench_prefill(bench *b)
{
    int32_t slots[CAP], offsets[CAP + 1];
    for (int i = 0; i < CAP; i++)
        slots[i] = i;
    for (int i = 0; i <= CAP; i++)
        offsets[i] = i * PROMPT;
    ck_assert(gpu_ok(cudaMemcpy(b->slots_dev, slots, sizeof slots, cudaMemcpyHostToDevice),
                     "slots"));
    bench_inputs(b);
    for (int k = 0; k < b->n; k++) {
        ssm_prefill_batch pb = {CAP, b->slots_dev, b->offsets_dev, PROMPT, slots, offsets};
        for (int l = 0; l < LAYERS; l++) {
            ssm_step_io io = gpu_inputs_io(&b->in[l], b->out[k][l]);
            EXPECT(ssm_prefill(b->ctx[k], l, &pb, &b->dw[l].w, &io, b->stream), SSM_OK);
        }
    }
    ck_assert(gpu_ok(cudaStreamSynchronize(b->stream), "prefill"));
}

/* Bitwise equality of context k's and context 0's outputs of `tokens`
 * tokens, every layer; returns 1 when equal. */
static int outputs_equal(bench *b, int k, int64_t tokens)
{
    size_t bytes = gpu_out_bytes(&dims, SSM_DTYPE_F32, tokens);
    void *x = malloc(bytes), *y = malloc(bytes);
    int equal = 1;
    for (int l = 0; l < LAYERS; l++) {
        ck_assert(gpu_ok(cudaMemcpy(x, b->out[0][l], bytes, cudaMemcpyDeviceToHost), "out"));
        ck_assert(gpu_ok(cudaMemcpy(y, b->out[k][l], bytes, cudaMemcpyDeviceToHost), "out"));
        equal &= memcmp(x, y, bytes) == 0;
    }
    free(x);
    free(y);
    return equal;
}

static int exports_equal(bench *b, int k)
{
    int equal = 1;
    for (int s = 0; s < CAP; s++) {
        test_snapshot x, y;
        EXPECT(gpu_snapshot_take(b->ctx[0], s, b->stream, &x), SSM_OK);
        EXPECT(gpu_snapshot_take(b->ctx[k], s, b->stream, &y), SSM_OK);
        equal &= test_snapshot_equal(&x, &y);
        test_snapshot_free(&x);
        test_snapshot_free(&y);
    }
    return equal;
}

/* One verify of `rows` random distinct slots x T tokens on every context,
 * then the commit of random accepted lengths (device), the tickets'
 * layouts into layouts[k]. */
static void bench_verify(bench *b, int32_t rows, int32_t T, uint32_t *layouts)
{
    int32_t slots[CAP], accepted[CAP];
    int32_t order[CAP];
    for (int i = 0; i < CAP; i++)
        order[i] = i;
    for (int i = CAP - 1; i > 0; i--) {
        int j = test_rng_int(&b->rng, 0, i);
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int r = 0; r < rows; r++) {
        slots[r] = order[r];
        accepted[r] = test_rng_int(&b->rng, 1, T);
    }
    ck_assert(gpu_ok(cudaMemcpy(b->slots_dev, slots, sizeof(int32_t) * rows,
                                cudaMemcpyHostToDevice), "slots"));
    ck_assert(gpu_ok(cudaMemcpy(b->accepted_dev, accepted, sizeof(int32_t) * rows,
                                cudaMemcpyHostToDevice), "accepted"));
    bench_inputs(b);
    for (int k = 0; k < b->n; k++) {
        ssm_batch batch = {rows, T, b->slots_dev, slots};
        ssm_ticket ticket = SSM_TICKET_INIT;
        for (int l = 0; l < LAYERS; l++) {
            ssm_step_io io = gpu_inputs_io(&b->in[l], b->out[k][l]);
            EXPECT(ssm_verify(b->ctx[k], l, &batch, &b->dw[l].w, &io, &ticket, b->stream),
                   SSM_OK);
        }
        EXPECT(ssm_commit(b->ctx[k], &ticket, b->accepted_dev, b->stream), SSM_OK);
        if (layouts)
            layouts[k] = ticket.layout;
    }
    ck_assert(gpu_ok(cudaStreamSynchronize(b->stream), "verify"));
}

static void bench_decode(bench *b, int32_t rows)
{
    int32_t slots[CAP];
    for (int r = 0; r < rows; r++)
        slots[r] = r;
    ck_assert(gpu_ok(cudaMemcpy(b->slots_dev, slots, sizeof(int32_t) * rows,
                                cudaMemcpyHostToDevice), "slots"));
    bench_inputs(b);
    for (int k = 0; k < b->n; k++) {
        ssm_batch batch = {rows, 1, b->slots_dev, slots};
        for (int l = 0; l < LAYERS; l++) {
            ssm_step_io io = gpu_inputs_io(&b->in[l], b->out[k][l]);
            EXPECT(ssm_decode(b->ctx[k], l, &batch, &b->dw[l].w, &io, b->stream), SSM_OK);
        }
    }
    ck_assert(gpu_ok(cudaStreamSynchronize(b->stream), "decode"));
}

/* The key of this bench's contexts for `mode` (what core/tuning/context.c builds). */
static tuning_key bench_key(const bench *b, const char *mode, int32_t family, int32_t bucket)
{
    tuning_key k;
    memset(&k, 0, sizeof k);
    ssm_device device = {SSM_DEVICE_CUDA, 0};
    ssm_tuning_device_key(&device, &k);
    snprintf(k.library, sizeof k.library, "%d.%d.%d", SSMSTATE_VERSION_MAJOR,
             SSMSTATE_VERSION_MINOR, SSMSTATE_VERSION_PATCH);
    k.kind = dims.kind;
    k.layers = dims.layers;
    k.heads = dims.heads;
    k.value_heads = dims.value_heads;
    k.key_dim = dims.key_dim;
    k.value_dim = dims.value_dim;
    k.conv_width = dims.conv_width;
    k.max_tokens = TMAX;
    k.state_dtype = b->sd;
    k.activation_dtype = SSM_DTYPE_F32;
    snprintf(k.mode, sizeof k.mode, "%s", mode);
    k.family = family;
    k.bucket = bucket;
    return k;
}

/* Layouts for every mode: 1 row the test-only "fma2-rev", 2 rows "fma2",
 * 3..4 rows "fma2-rev" (5..8 rows: absent, the built-in). */
static void write_layouts(const bench *b)
{
    tuning_cache cache = {0};
    const char *names[] = {"fma2-rev", "fma2", "fma2-rev"};
    for (int32_t bucket = 0; bucket < 3; bucket++) {
        tuning_entry e;
        memset(&e, 0, sizeof e);
        e.key = bench_key(b, TUNING_ANY_MODE, SSM_TUNE_LAYOUT, bucket);
        snprintf(e.choice, sizeof e.choice, "%s", names[bucket]);
        EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    }
    EXPECT(tuning_cache_save(b->cache, &cache), SSM_OK);
    tuning_cache_free(&cache);
}

static uint32_t expected_layout(int32_t rows)
{
    return rows == 2 || rows > 4 ? 0 : 1;
}

/* ============================================================ 1. pool */

START_TEST(test_pool_untouched_by_tuning)
{
    static const char *const modes[] = {"native", "compact", "replay"};
    for (int m = 0; m < 3; m++) {
        bench b;
        bench_open(&b, SSM_DTYPE_F32, 0x7001 + m);
        int tuned = bench_add(&b, modes[m], SSM_TUNING_TUNE);
        int twin = bench_add(&b, modes[m], SSM_TUNING_OFF);
        ck_assert_int_eq(tuned, 0);
        bench_prefill(&b);
        bench_verify(&b, 3, 3, NULL);
        ck_assert_msg(outputs_equal(&b, twin, 9), "%s: outputs before tuning", modes[m]);
        test_snapshot before[CAP];
        for (int s = 0; s < CAP; s++)
            EXPECT(gpu_snapshot_take(b.ctx[tuned], s, b.stream, &before[s]), SSM_OK);
        /* Every entry timed again, with the pool live. */
        ck_assert_int_eq(unlink(b.cache), 0);
        ssm_tune_report r;
        EXPECT(ssm_tune(b.ctx[tuned], b.stream, &r), SSM_OK);
        ck_assert_msg(r.tuned >= 8, "%s: %d entries tuned", modes[m], (int)r.tuned);
        ck_assert_int_eq(r.saved, 1);
        ck_assert_int_eq(access(b.cache, R_OK), 0);
        for (int s = 0; s < CAP; s++) {
            test_snapshot after;
            EXPECT(gpu_snapshot_take(b.ctx[tuned], s, b.stream, &after), SSM_OK);
            ck_assert_msg(test_snapshot_equal(&before[s], &after),
                          "%s: slot %d changed by tuning", modes[m], s);
            test_snapshot_free(&after);
            test_snapshot_free(&before[s]);
        }
        ssm_ctx_report report;
        EXPECT(ssm_ctx_status(b.ctx[tuned], &report), SSM_OK);
        ck_assert_int_eq(report.flags, 0);
        /* The tuned choices change no bit of what follows. */
        bench_verify(&b, 5, 4, NULL);
        ck_assert_msg(outputs_equal(&b, twin, 20), "%s: outputs after tuning", modes[m]);
        ck_assert_msg(exports_equal(&b, twin), "%s: exports after tuning", modes[m]);
        bench_decode(&b, 6);
        ck_assert_msg(outputs_equal(&b, twin, 6), "%s: decode after tuning", modes[m]);
        /* Not while a stream is being captured. */
        ck_assert(gpu_ok(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeThreadLocal),
                         "capture"));
        EXPECT(ssm_tune(b.ctx[tuned], b.stream, &r), SSM_ERR_INVALID_ARGUMENT);
        cudaGraph_t graph;
        ck_assert(gpu_ok(cudaStreamEndCapture(b.stream, &graph), "end capture"));
        cudaGraphDestroy(graph);
        bench_close(&b);
    }
}
END_TEST

/* ======================================================= 2. layouts */

START_TEST(test_compact_native_bitwise_with_layouts)
{
    static const ssm_dtype states[] = {SSM_DTYPE_F32, SSM_DTYPE_BF16};
    setenv(TUNING_TEST_LAYOUTS_ENV, "1", 1);
    for (int d = 0; d < 2; d++) {
        bench b;
        bench_open(&b, states[d], 0x7100 + d);
        write_layouts(&b);
        int native = bench_add(&b, "native", SSM_TUNING_TUNE);
        int compact = bench_add(&b, "compact", SSM_TUNING_TUNE);
        unsetenv(TUNING_TEST_LAYOUTS_ENV);
        int control = bench_add(&b, "native", SSM_TUNING_TUNE); /* layout 0 everywhere */
        setenv(TUNING_TEST_LAYOUTS_ENV, "1", 1);
        ck_assert_int_eq(native, 0);
        bench_prefill(&b);
        ck_assert(outputs_equal(&b, compact, (int64_t)CAP * PROMPT));
        int control_differs = 0;
        for (int round = 0; round < 16; round++) {
            int32_t rows = 1 + round % 4, T = test_rng_int(&b.rng, 1, TMAX);
            uint32_t layouts[MAX_CTX];
            bench_verify(&b, rows, T, layouts);
            ck_assert_int_eq(layouts[native], expected_layout(rows));
            ck_assert_int_eq(layouts[compact], expected_layout(rows));
            ck_assert_int_eq(layouts[control], 0);
            ck_assert_msg(outputs_equal(&b, compact, (int64_t)rows * T),
                          "state %d round %d (%d rows x %d): outputs differ", d, round, rows, T);
            ck_assert_msg(exports_equal(&b, compact), "state %d round %d: exports differ", d,
                          round);
            control_differs |= !outputs_equal(&b, control, (int64_t)rows * T);
            if (round % 4 == 3) {
                int32_t decoded = 1 + round / 4 % 2; /* 1 row (layout 1), 2 rows (0) */
                bench_decode(&b, decoded);
                ck_assert(outputs_equal(&b, compact, decoded));
                ck_assert(exports_equal(&b, compact));
            }
        }
        ck_assert_msg(control_differs,
                      "the test-only layout never changed a bit: the comparison is vacuous");
        bench_close(&b);
    }
    unsetenv(TUNING_TEST_LAYOUTS_ENV);
}
END_TEST

/* ======================================================== 3. graphs */

typedef struct captured {
    cudaGraphExec_t exec;
    uint32_t layout;
} captured;

/* Captures every layer's verify of `rows` rows (slots 0..rows-1) x T and the
 * commit of b->accepted_dev[..] for context k; inputs are read from
 * b->in at launch. */
static captured capture_round(bench *b, int k, int32_t rows, int32_t T, const int32_t *slots,
                              int32_t *slots_dev, int32_t *accepted_dev)
{
    captured c = {0};
    ck_assert(gpu_ok(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal),
                     "begin capture"));
    ssm_batch batch = {rows, T, slots_dev, slots};
    ssm_ticket ticket = SSM_TICKET_INIT;
    for (int l = 0; l < LAYERS; l++) {
        ssm_step_io io = gpu_inputs_io(&b->in[l], b->out[k][l]);
        EXPECT(ssm_verify(b->ctx[k], l, &batch, &b->dw[l].w, &io, &ticket, b->stream), SSM_OK);
    }
    EXPECT(ssm_commit(b->ctx[k], &ticket, accepted_dev, b->stream), SSM_OK);
    cudaGraph_t graph;
    ck_assert(gpu_ok(cudaStreamEndCapture(b->stream, &graph), "end capture"));
    ck_assert(gpu_ok(cudaGraphInstantiateWithFlags(&c.exec, graph, 0), "instantiate"));
    cudaGraphDestroy(graph);
    c.layout = ticket.layout;
    return c;
}

START_TEST(test_graphs_commit_their_own_layouts)
{
    setenv(TUNING_TEST_LAYOUTS_ENV, "1", 1);
    bench b;
    bench_open(&b, SSM_DTYPE_F32, 0x7200);
    write_layouts(&b);
    int native = bench_add(&b, "native", SSM_TUNING_TUNE);
    int compact = bench_add(&b, "compact", SSM_TUNING_TUNE);
    bench_prefill(&b);
    /* Graph A: 1 row (slot 0) x 4, layout 1; graph B: 2 rows (slots 1, 2)
     * x 3, layout 0. Each has its own slots and accepted buffers. */
    int32_t slots_a[1] = {0}, slots_b[2] = {1, 2};
    int32_t *dev_slots_a, *dev_slots_b, *acc_a, *acc_b;
    ck_assert(gpu_alloc((void **)&dev_slots_a, sizeof slots_a, slots_a, 0));
    ck_assert(gpu_alloc((void **)&dev_slots_b, sizeof slots_b, slots_b, 0));
    int32_t ones[2] = {1, 1};
    ck_assert(gpu_alloc((void **)&acc_a, sizeof(int32_t), ones, 0));
    ck_assert(gpu_alloc((void **)&acc_b, 2 * sizeof(int32_t), ones, 0));
    captured graphs[2][2];
    for (int k = 0; k < 2; k++) {
        graphs[k][0] = capture_round(&b, k, 1, 4, slots_a, dev_slots_a, acc_a);
        graphs[k][1] = capture_round(&b, k, 2, 3, slots_b, dev_slots_b, acc_b);
        ck_assert_int_eq(graphs[k][0].layout, 1);
        ck_assert_int_eq(graphs[k][1].layout, 0);
    }
    (void)native;
    for (int launch = 0; launch < 8; launch++) {
        int g = launch % 2;
        int32_t rows = g ? 2 : 1, T = g ? 3 : 4;
        int32_t accepted[2] = {test_rng_int(&b.rng, 1, T), test_rng_int(&b.rng, 1, T)};
        ck_assert(gpu_ok(cudaMemcpy(g ? acc_b : acc_a, accepted, sizeof(int32_t) * rows,
                                    cudaMemcpyHostToDevice), "accepted"));
        bench_inputs(&b);
        for (int k = 0; k < 2; k++)
            ck_assert(gpu_ok(cudaGraphLaunch(graphs[k][g].exec, b.stream), "launch"));
        ck_assert(gpu_ok(cudaStreamSynchronize(b.stream), "graphs"));
        ck_assert_msg(outputs_equal(&b, compact, (int64_t)rows * T), "launch %d: outputs",
                      launch);
        ck_assert_msg(exports_equal(&b, compact), "launch %d: exports", launch);
    }
    for (int k = 0; k < 2; k++)
        for (int g = 0; g < 2; g++)
            cudaGraphExecDestroy(graphs[k][g].exec);
    gpu_free(dev_slots_a);
    gpu_free(dev_slots_b);
    gpu_free(acc_a);
    gpu_free(acc_b);
    bench_close(&b);
    unsetenv(TUNING_TEST_LAYOUTS_ENV);
}
END_TEST

/* ================================================= 4. failed candidate */

START_TEST(test_failed_candidate_recorded_and_skipped)
{
    bench b;
    bench_open(&b, SSM_DTYPE_F32, 0x7300);
    setenv("SSMSTATE_TUNING_TEST_FAIL", "verify:blocks=1", 1);
    int first = bench_add(&b, "native", SSM_TUNING_TUNE);
    unsetenv("SSMSTATE_TUNING_TEST_FAIL");
    ssm_tune_report r;
    EXPECT(ssm_ctx_tune_report(b.ctx[first], &r), SSM_OK);
    ck_assert_int_eq(r.failed, 4); /* one per bucket: 1, 2, 4, 8 rows */
    tuning_cache cache = {0};
    int missing = 0;
    EXPECT(tuning_cache_load(b.cache, &cache, &missing), SSM_OK);
    for (int32_t bucket = 0; bucket < 4; bucket++) {
        tuning_key k = bench_key(&b, "native", SSM_TUNE_VERIFY, bucket);
        tuning_entry *e = tuning_cache_find(&cache, &k);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->failed_count, 1);
        ck_assert_str_eq(e->failed[0], "blocks=1");
        ck_assert_msg(!strncmp(e->why[0], "launch: ", 8), "why: %s", e->why[0]);
        ck_assert_str_ne(e->choice, "blocks=1");
        ck_assert_str_ne(e->choice, "");
        e->choice[0] = '\0'; /* timed again next time */
    }
    EXPECT(tuning_cache_save(b.cache, &cache), SSM_OK);
    tuning_cache_free(&cache);
    /* The candidate would launch now; it is skipped all the same. */
    int second = bench_add(&b, "native", SSM_TUNING_TUNE);
    EXPECT(ssm_ctx_tune_report(b.ctx[second], &r), SSM_OK);
    ck_assert_int_eq(r.tuned, 4);
    ck_assert_int_eq(r.skipped_failed, 4);
    ck_assert_int_eq(r.failed, 0);
    EXPECT(tuning_cache_load(b.cache, &cache, &missing), SSM_OK);
    for (int32_t bucket = 0; bucket < 4; bucket++) {
        tuning_key k = bench_key(&b, "native", SSM_TUNE_VERIFY, bucket);
        const tuning_entry *e = tuning_cache_find(&cache, &k);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->failed_count, 1);
        ck_assert_str_ne(e->choice, "blocks=1");
    }
    tuning_cache_free(&cache);
    /* Both contexts still serve. */
    bench_prefill(&b);
    bench_verify(&b, 4, 4, NULL);
    ck_assert(outputs_equal(&b, second, 16));
    bench_close(&b);
}
END_TEST

static Suite *make(void)
{
    Suite *s = suite_create("tuning_cuda");
    TCase *t = tcase_create("tuning");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, test_pool_untouched_by_tuning);
    tcase_add_test(t, test_compact_native_bitwise_with_layouts);
    tcase_add_test(t, test_graphs_commit_their_own_layouts);
    tcase_add_test(t, test_failed_candidate_recorded_and_skipped);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return gpu_suite_main(make);
}
