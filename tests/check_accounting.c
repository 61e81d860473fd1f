/* State accounting: the bytes per slot every built-in mode plans, against the
 * storage formulas of docs/modes.md written out again here (not taken from
 * the kernels), for random shapes, dtypes, draft widths and history lengths;
 * the pool identity; the plan against what each mode's create really
 * allocates on the CPU; and the size targets at Qwen3-Next shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/context.h"
#include "tests/expect.h"
#include "tests/runner.h"
#include "tests/testutil.h"

/* ------------------------------------------------- docs/modes.md formulas */

typedef struct shape {
    ssm_model_dims m;
    uint64_t s_state, s_act; /* element sizes */
    uint64_t t_max;          /* 1 + max_draft_tokens */
    uint64_t history;        /* L (replay) */
} shape;

static uint64_t align16(uint64_t n)
{
    return (n + 15) / 16 * 16;
}

static uint64_t gate_width(const ssm_model_dims *m) /* HV (GDN) or HV*K (KDA) */
{
    return (uint64_t)m->value_heads * (m->kind == SSM_MODEL_KDA ? (uint64_t)m->key_dim : 1);
}

/* S = HV V K s_state */
static uint64_t state_bytes(const shape *s)
{
    return (uint64_t)s->m.value_heads * s->m.value_dim * s->m.key_dim * s->s_state;
}

/* C = (W - 1 + T_max) D s_act, D = 2 H K + HV V */
static uint64_t conv_bytes(const shape *s)
{
    uint64_t d = 2ull * s->m.heads * s->m.key_dim + (uint64_t)s->m.value_heads * s->m.value_dim;
    return ((uint64_t)s->m.conv_width - 1 + s->t_max) * d * s->s_act;
}

/* R = a16(H K s_act) + a16(HV V s_act) + a16(4 gw) + a16(4 HV) */
static uint64_t record_bytes(const shape *s)
{
    return align16((uint64_t)s->m.heads * s->m.key_dim * s->s_act) +
           align16((uint64_t)s->m.value_heads * s->m.value_dim * s->s_act) +
           align16(4 * gate_width(&s->m)) + align16(4ull * s->m.value_heads);
}

/* R_replay = R + a16(4 HV V) + 2 a16(4 gw): the raw record, u, and G as a
 * running sum and its rounding error. */
static uint64_t replay_record_bytes(const shape *s)
{
    return record_bytes(s) + align16(4ull * s->m.value_heads * s->m.value_dim) +
           2 * align16(4 * gate_width(&s->m));
}

/* native: layers (T_max S + C) + 4 (the current snapshot's index) */
static uint64_t native_per_slot(const shape *s)
{
    return s->m.layers * (s->t_max * state_bytes(s) + conv_bytes(s)) + 4;
}

/* compact: layers (S + C + T_max R) */
static uint64_t compact_per_slot(const shape *s)
{
    return s->m.layers * (state_bytes(s) + conv_bytes(s) + s->t_max * record_bytes(s));
}

/* replay: layers (S + C + L R_replay + 4) (4: the cursor) */
static uint64_t replay_per_slot(const shape *s)
{
    return s->m.layers * (state_bytes(s) + conv_bytes(s) + s->history * replay_record_bytes(s) + 4);
}

/* --------------------------------------------------------------- planning */

/* A config for `mode` at shape s; replay's gets [replay] history = L. The
 * option storage lives in *storage for as long as the config is used. */
typedef struct replay_section {
    const char *names[1];
    int32_t lines[1], counts[1];
    ssm_mode_option option;
    const ssm_mode_option *options[1];
    char value[16];
} replay_section;

static void make_config(ssm_config *c, const shape *s, const char *mode, int32_t capacity,
                        replay_section *storage)
{
    test_config(c, &s->m, mode, s->s_state == 4 ? SSM_DTYPE_F32 : SSM_DTYPE_BF16,
                s->s_act == 4 ? SSM_DTYPE_F32 : SSM_DTYPE_BF16, capacity,
                (int32_t)s->t_max - 1);
    if (strcmp(mode, "replay") != 0)
        return;
    snprintf(storage->value, sizeof storage->value, "%llu", (unsigned long long)s->history);
    storage->names[0] = "replay";
    storage->lines[0] = 0;
    storage->counts[0] = 1;
    storage->option = (ssm_mode_option){"history", storage->value, 0};
    storage->options[0] = &storage->option;
    c->mode_sections_count = 1;
    c->mode_section_names = storage->names;
    c->mode_section_lines = storage->lines;
    c->mode_options_count = storage->counts;
    c->mode_options = storage->options;
}

/* The plan of `mode` at shape s; fails the test, saying why, when the mode
 * cannot plan it (a missing replay plugin included: never a silent pass). */
static ssm_plan plan_of(const shape *s, const char *mode, int32_t capacity)
{
    ssm_config c;
    replay_section storage;
    make_config(&c, s, mode, capacity, &storage);
    ssm_plan plan;
    ssm_status status = ssm_config_plan(&c, &plan);
    ck_assert_msg(status == SSM_OK,
                  "the %s plugin cannot plan this config (%s: %s)%s", mode,
                  ssm_status_name(status), ssm_last_error(),
                  status == SSM_ERR_PLUGIN ? "; this test needs the plugin built "
                                             "($SSMSTATE_PLUGIN_PATH)"
                                           : "");
    return plan;
}

static void check_mode(const shape *s, const char *mode, uint64_t expected, int32_t capacity)
{
    ssm_plan p = plan_of(s, mode, capacity);
    const uint64_t layers = (uint64_t)s->m.layers;
    ck_assert_msg(p.bytes_per_slot == expected,
                  "%s: plan says %llu bytes per slot, docs/modes.md %llu (%s L%d H%d HV%d K%d "
                  "V%d W%d, state %llu B, act %llu B, T_max %llu, L %llu)",
                  mode, (unsigned long long)p.bytes_per_slot, (unsigned long long)expected,
                  ssm_model_kind_name(s->m.kind), s->m.layers, s->m.heads, s->m.value_heads,
                  s->m.key_dim, s->m.value_dim, s->m.conv_width,
                  (unsigned long long)s->s_state, (unsigned long long)s->s_act,
                  (unsigned long long)s->t_max, (unsigned long long)s->history);
    ck_assert_uint_eq(p.bytes_per_slot, p.state_bytes_per_slot + p.conv_bytes_per_slot +
                                            p.scratch_bytes_per_slot);
    /* The split `ssmstate check` prints: every mode keeps at least one state
     * per layer, and the conv buffer of every mode is the same. */
    ck_assert_uint_ge(p.state_bytes_per_slot, layers * state_bytes(s));
    ck_assert_uint_eq(p.conv_bytes_per_slot, layers * conv_bytes(s));
    ck_assert_int_eq(p.capacity, capacity);
    ck_assert_uint_eq(p.pool_bytes, (uint64_t)p.capacity * p.bytes_per_slot + p.shared_bytes);
}

/* ---------------------------------------------------- what create allocates */

/* The public API reports plans only, so the test notes each block a mode's
 * create asks for: the context's own services with the two alloc entries
 * passing through here (one test at a time per forked process). */
static struct allocation_log {
    const ssm_services_v1 *real;
    int32_t count;
    void *blocks[32];
    size_t bytes[32];
} allocation_log;

static void *noted(void *block, size_t bytes)
{
    if (block) {
        ck_assert_int_lt(allocation_log.count, 32);
        allocation_log.blocks[allocation_log.count] = block;
        allocation_log.bytes[allocation_log.count++] = bytes;
    }
    return block;
}

static void *log_alloc(void *core, size_t bytes)
{
    return noted(allocation_log.real->alloc(core, bytes), bytes);
}

static void *log_alloc_host(void *core, size_t bytes)
{
    return noted(allocation_log.real->alloc_host(core, bytes), bytes);
}

/* The bytes `mode`'s create asks for at shape s with `capacity` slots,
 * besides the instance's own block (no plan counts it), from a second
 * instance made with the parameters the core handed the context's; *plan
 * gets the context's plan. */
static uint64_t allocated_bytes(const shape *s, const char *mode, int32_t capacity,
                                ssm_plan *plan)
{
    ssm_config c;
    replay_section storage;
    make_config(&c, s, mode, capacity, &storage);
    ssm_ctx *ctx = NULL;
    ck_assert_msg(ssm_ctx_create(&c, &ctx) == SSM_OK, "%s: %s", mode, ssm_last_error());
    EXPECT(ssm_ctx_plan(ctx, plan), SSM_OK);
    memset(&allocation_log, 0, sizeof allocation_log);
    allocation_log.real = &ctx->services;
    ssm_services_v1 services = ctx->services;
    services.alloc = log_alloc;
    services.alloc_host = log_alloc_host;
    void *instance = NULL;
    ck_assert_msg(ctx->mode->create(&ctx->params, &services, &instance) == SSM_OK, "%s: %s",
                  mode, ssm_last_error());
    uint64_t bytes = 0;
    for (int32_t i = 0; i < allocation_log.count; i++)
        bytes += allocation_log.blocks[i] == instance ? 0 : allocation_log.bytes[i];
    ctx->mode->destroy(instance);
    ssm_ctx_destroy(ctx);
    return bytes;
}

/* At 1 and 3 slots: what grows with the slots is bytes_per_slot, the rest
 * is shared_bytes. */
static void check_allocations(const shape *s, const char *mode)
{
    ssm_plan one, three;
    uint64_t at_one = allocated_bytes(s, mode, 1, &one);
    uint64_t at_three = allocated_bytes(s, mode, 3, &three);
    uint64_t per_slot = (at_three - at_one) / 2, shared = at_one - per_slot;
    ck_assert_msg(per_slot == one.bytes_per_slot && three.bytes_per_slot == one.bytes_per_slot,
                  "%s: create allocates %llu bytes per slot, the plan says %llu", mode,
                  (unsigned long long)per_slot, (unsigned long long)one.bytes_per_slot);
    ck_assert_msg(shared == one.shared_bytes && three.shared_bytes == one.shared_bytes,
                  "%s: create allocates %llu bytes not per slot, the plan's shared_bytes "
                  "says %llu (%s L%d H%d HV%d K%d V%d, state %llu B, T_max %llu)",
                  mode, (unsigned long long)shared, (unsigned long long)one.shared_bytes,
                  ssm_model_kind_name(s->m.kind), s->m.layers, s->m.heads, s->m.value_heads,
                  s->m.key_dim, s->m.value_dim, (unsigned long long)s->s_state,
                  (unsigned long long)s->t_max);
}

/* ------------------------------------------------------------------ tests */

static void random_shape(test_rng *r, shape *s)
{
    memset(s, 0, sizeof *s);
    test_random_dims(r, test_rng_int(r, 0, 1) ? SSM_MODEL_KDA : SSM_MODEL_GDN,
                     test_rng_int(r, 0, 1), &s->m);
    s->m.layers = test_rng_int(r, 1, 48);
    s->m.key_dim = test_rng_int(r, 1, 160); /* odd sizes exercise the 16-byte alignment */
    s->m.value_dim = test_rng_int(r, 1, 160);
    s->s_state = test_rng_int(r, 0, 1) ? 4 : 2;
    s->s_act = test_rng_int(r, 0, 1) ? 4 : 2;
    s->t_max = (uint64_t)test_rng_int(r, 1, 16);
    uint64_t least = 2;
    while (least < 2 * s->t_max)
        least *= 2;
    s->history = least << test_rng_int(r, 0, 3); /* a power of two >= 2 T_max, <= 256 */
}

START_TEST(test_formulas_match_plans)
{
    test_rng r;
    test_rng_init(&r, test_seed() + (uint64_t)_i);
    for (int trial = 0; trial < 8; trial++) {
        shape s;
        random_shape(&r, &s);
        int32_t capacity = test_rng_int(&r, 1, 64);
        check_mode(&s, "native", native_per_slot(&s), capacity);
        check_mode(&s, "compact", compact_per_slot(&s), capacity);
        check_mode(&s, "replay", replay_per_slot(&s), capacity);
    }
}
END_TEST

START_TEST(test_plans_match_allocations)
{
    test_rng r;
    test_rng_init(&r, test_seed() + 100 + (uint64_t)_i);
    shape s;
    random_shape(&r, &s);
    s.m.layers = test_rng_int(&r, 1, 3); /* a few real pools, kept small */
    check_allocations(&s, "native");
    check_allocations(&s, "compact");
    check_allocations(&s, "replay");
}
END_TEST

/* The worked example of docs/modes.md: Qwen3-Next (36 layers, H 16, HV 32,
 * K = V = 128, W 4), fp32 state, bf16 activations, T = 4, L = 16. */
static shape qwen3_next(void)
{
    shape s;
    memset(&s, 0, sizeof s);
    s.m = (ssm_model_dims){.kind = SSM_MODEL_GDN, .layers = 36, .heads = 16, .value_heads = 32,
                           .key_dim = 128, .value_dim = 128, .conv_width = 4};
    s.s_state = 4;
    s.s_act = 2;
    s.t_max = 4;
    s.history = 16;
    return s;
}

START_TEST(test_qwen3_next_worked_example)
{
    shape s = qwen3_next();
    ck_assert_uint_eq(native_per_slot(&s), 306118660);
    ck_assert_uint_eq(compact_per_slot(&s), 81432576);
    ck_assert_uint_eq(replay_per_slot(&s), 96436368);
    check_mode(&s, "native", 306118660, 8);
    check_mode(&s, "compact", 81432576, 8);
    check_mode(&s, "replay", 96436368, 8);
}
END_TEST

/* The size targets: at T = 4, compact at most 30% and replay (L = 16) at most
 * 45% of native, as planned. */
START_TEST(test_qwen3_next_targets)
{
    shape s = qwen3_next();
    double native = (double)plan_of(&s, "native", 1).bytes_per_slot;
    double compact = (double)plan_of(&s, "compact", 1).bytes_per_slot / native;
    double replay = (double)plan_of(&s, "replay", 1).bytes_per_slot / native;
    ck_assert_msg(compact <= 0.30, "compact is %.4f of native (target <= 0.30)", compact);
    ck_assert_msg(replay <= 0.45, "replay (L = 16) is %.4f of native (target <= 0.45)", replay);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("accounting");
    TCase *formulas = tcase_create("formulas");
    tcase_add_loop_test(formulas, test_formulas_match_plans, 0, 8);
    suite_add_tcase(s, formulas);
    TCase *allocations = tcase_create("allocations");
    tcase_add_loop_test(allocations, test_plans_match_allocations, 0, 4);
    suite_add_tcase(s, allocations);
    TCase *qwen = tcase_create("qwen3_next");
    tcase_add_test(qwen, test_qwen3_next_worked_example);
    tcase_add_test(qwen, test_qwen3_next_targets);
    suite_add_tcase(s, qwen);
    return s;
}
