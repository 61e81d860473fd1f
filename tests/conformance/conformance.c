/* The conformance suite's test cases (see conformance.h). Every test opens a
 * session of the plugin under test for one variant (loop index bits:
 * VARIANT_*) on the device of its test case, drives it like an engine and
 * checks it as it goes. The same cases make the CPU suite and the CUDA
 * suite. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/conformance/conformance.h"

#define SALT ((uint64_t)__LINE__)

/* Acquires every slot but maybe one and prefills them (varlen, padding). */
static void session_start(session *s)
{
    int32_t n = s->cap - test_rng_int(&s->rng, 0, 1);
    for (int32_t i = 0; i < n; i++)
        session_acquire(s);
    op_prefill(s);
    session_check_slots(s);
}

/* The plugin is found, speaks an ABI this library speaks (v1 through the
 * loader's adapter, or v2), runs on the suite's device (the CPU, or CUDA)
 * with pages, and a context of it reports the file it came from. */
START_TEST(test_plugin_loads)
{
    int32_t count = 0;
    ssm_plugin_info *infos = calloc(64, sizeof *infos);
    ck_assert_int_eq(ssm_plugins_list(conform.plugin_dir, infos, 64, &count), SSM_OK);
    const ssm_plugin_info *mine = NULL;
    for (int32_t i = 0; i < count && i < 64; i++)
        if (strcmp(infos[i].name, conform.mode) == 0)
            mine = &infos[i];
    ck_assert_msg(mine != NULL, "no plugin for mode '%s' on the search path (plugin_dir %s)",
                  conform.mode, conform.plugin_dir ? conform.plugin_dir : "(none)");
    ck_assert_msg(mine->status == SSM_OK, "%s: %s", mine->path, mine->error);
    ck_assert_msg(mine->abi_version == SSM_PLUGIN_V1_ABI_VERSION ||
                      mine->abi_version == SSM_PLUGIN_V2_ABI_VERSION,
                  "%s speaks ABI v%u", mine->path, mine->abi_version);
    int cuda = conform.device == SSM_DEVICE_CUDA;
    uint64_t need = (cuda ? SSM_CAP_CUDA : SSM_CAP_CPU) | SSM_CAP_PAGES;
    ck_assert_msg((mine->capabilities & need) == need,
                  "%s: capabilities 0x%llx lack %s or PAGES, which the suite needs", mine->path,
                  (unsigned long long)mine->capabilities, cuda ? "CUDA" : "CPU");
    ck_assert_msg(mine->capabilities & (SSM_CAP_GDN | SSM_CAP_KDA),
                  "%s: neither GDN nor KDA is offered", mine->path);
    session s;
    int variant = (mine->capabilities & SSM_CAP_GDN) ? 0 : VARIANT_KDA;
    if (!(mine->capabilities & SSM_CAP_ACT_BF16))
        variant |= VARIANT_ACT_F32;
    if (!(mine->capabilities & SSM_CAP_STATE_F32))
        variant |= VARIANT_STATE_BF16;
    ck_assert_msg(conform_session_open(&s, variant, SALT, 1), "%s: no variant is supported", mine->path);
    const char *path = ssm_ctx_plugin_path(s.ctx);
    ck_assert_msg(path && strcmp(path, mine->path) == 0,
                  "the context loaded %s, the search path lists %s", path ? path : "(null)",
                  mine->path);
    conform_session_close(&s);
    free(infos);
}
END_TEST

/* Random engine sessions: prefill, decode, verify + commit (T varying per
 * round), two forwards side by side, abort, reset, release + reacquire,
 * non-finite inputs, and protocol errors, all checked against the
 * reference. */
START_TEST(test_random_session)
{
    session s;
    if (!conform_session_open(&s, _i, SALT, 1))
        return;
    session_start(&s);
    for (int k = 0; k < 30; k++)
        op_random(&s, 1);
    conform_session_close(&s);
}
END_TEST

/* Many verify rounds with random accepted lengths (and decodes) over every
 * slot: long enough for a history mode to wrap its history many times. */
START_TEST(test_many_rounds)
{
    session s;
    if (!conform_session_open(&s, _i, SALT, 1))
        return;
    session_start(&s);
    for (int k = 0; k < 70; k++) {
        if (test_rng_int(&s.rng, 0, 4) == 0)
            op_decode(&s);
        else
            op_verify(&s);
        if (k % 7 == 6)
            session_check_slots(&s);
        s.step++;
    }
    session_check_slots(&s);
    conform_session_close(&s);
}
END_TEST

/* Export never changes a slot (docs/pages.md): two contexts of the plugin run
 * the same steps, one exported after every step and one never until the end; on
 * one device both compute the same outputs bit for bit, and the same export at
 * the end. (A history mode that folded into the slot on export would compute
 * other outputs from then on.) */
START_TEST(test_export_read_only)
{
    session s;
    if (!conform_session_open(&s, _i, SALT, 1))
        return;
    s.op = "export read-only";
    ssm_ctx *quiet = NULL;
    CONFORM_EXPECT(&s, ssm_ctx_create(&s.cfg, &quiet), SSM_OK);
    int32_t a[CONFORM_MAX_CAP], q[CONFORM_MAX_CAP];
    for (int32_t i = 0; i < s.cap; i++) {
        a[i] = session_acquire(&s);
        CONFORM_EXPECT(&s, ssm_slot_acquire(quiet, &q[i]), SSM_OK);
    }
    for (s.step = 0; s.step < 40; s.step++) {
        int kind = s.step == 0 ? 0 : test_rng_int(&s.rng, 0, 4); /* prefill, decode, verify */
        int32_t T = kind == 0 ? 0 : kind == 1 ? 1 : test_rng_int(&s.rng, 1, s.t_max);
        int32_t offsets[CONFORM_MAX_CAP + 1] = {0}, accepted[CONFORM_MAX_CAP];
        for (int32_t i = 0; i < s.cap; i++) {
            offsets[i + 1] = offsets[i] + (kind == 0 ? test_rng_int(&s.rng, 0, 6) : T);
            accepted[i] = T > 0 ? test_rng_int(&s.rng, 1, T) : 0;
        }
        test_io *io = session_ios(&s, offsets[s.cap]), *out = session_ios(&s, offsets[s.cap]);
        ssm_ticket ta = SSM_TICKET_INIT, tq = SSM_TICKET_INIT;
        const int32_t *sa = staged_array(&s, a, s.cap), *sq = staged_array(&s, q, s.cap),
                      *so = staged_array(&s, offsets, s.cap + 1);
        for (int32_t l = 0; l < s.m.layers; l++) {
            ssm_step_io qio = io[l].io;
            qio.out = out[l].out;
            if (kind == 0) {
                ssm_prefill_batch ba = {s.cap, sa, so, 6, a, offsets},
                                  bq = {s.cap, sq, so, 6, q, offsets};
                CONFORM_EXPECT(&s, staged_prefill(&s, s.ctx, l, &ba, &io[l].io), SSM_OK);
                CONFORM_EXPECT(&s, staged_prefill(&s, quiet, l, &bq, &qio), SSM_OK);
            } else {
                ssm_batch ba = {s.cap, T, sa, a}, bq = {s.cap, T, sq, q};
                CONFORM_EXPECT(&s,
                               kind == 1 ? staged_decode(&s, s.ctx, l, &ba, &io[l].io)
                                         : staged_verify(&s, s.ctx, l, &ba, &io[l].io, &ta),
                               SSM_OK);
                CONFORM_EXPECT(&s,
                               kind == 1 ? staged_decode(&s, quiet, l, &bq, &qio)
                                         : staged_verify(&s, quiet, l, &bq, &qio, &tq),
                               SSM_OK);
            }
        }
        if (kind >= 2) {
            CONFORM_EXPECT(&s, staged_commit(&s, s.ctx, &ta, accepted, s.cap), SSM_OK);
            CONFORM_EXPECT(&s, staged_commit(&s, quiet, &tq, accepted, s.cap), SSM_OK);
        }
        staged_array_free(&s, sa);
        staged_array_free(&s, sq);
        staged_array_free(&s, so);
        for (int32_t l = 0; l < s.m.layers; l++)
            ck_assert_msg(memcmp(io[l].out, out[l].out, session_out_bytes(&s, offsets[s.cap])) ==
                              0,
                          "%s [step %d]: layer %d: a context exported after every step computed "
                          "other outputs than one never exported: export changed a slot",
                          s.desc, s.step, l);
        for (int32_t i = 0; i < s.cap; i++) {
            test_snapshot snap;
            CONFORM_EXPECT(&s, staged_export(&s, s.ctx, a[i], &snap), SSM_OK);
            test_snapshot_free(&snap);
        }
        session_ios_free(&s, io);
        session_ios_free(&s, out);
    }
    for (int32_t i = 0; i < s.cap; i++) {
        test_snapshot x, y;
        CONFORM_EXPECT(&s, staged_export(&s, s.ctx, a[i], &x), SSM_OK);
        CONFORM_EXPECT(&s, staged_export(&s, quiet, q[i], &y), SSM_OK);
        ck_assert_msg(test_snapshot_equal(&x, &y),
                      "%s: slot %d exported after every step differs from its twin exported once",
                      s.desc, a[i]);
        test_snapshot_free(&x);
        test_snapshot_free(&y);
    }
    ssm_ctx_destroy(quiet);
    conform_session_close(&s);
}
END_TEST

/* One protocol error in a warmed-up session, then the session goes on. */
static void run_error(int variant, uint64_t salt, void (*inject)(session *))
{
    session s;
    if (!conform_session_open(&s, variant, salt, 2))
        return;
    session_start(&s);
    for (int k = 0; k < 3; k++)
        op_random(&s, 0);
    inject(&s);
    session_check_slots(&s);
    for (int k = 0; k < 2; k++)
        op_random(&s, 0);
    conform_session_close(&s);
}

/* Variants for the error tests: both kinds, both state dtypes, both
 * activation dtypes, GVA and the alternative bit mixed in. */
static int error_variant(int i)
{
    return (i & 1 ? VARIANT_KDA : 0) | (i & 2 ? VARIANT_STATE_BF16 : 0) |
           (i & 1 ? VARIANT_ACT_F32 : 0) | (i & 2 ? VARIANT_GVA : 0) | (i & 1 ? VARIANT_ALT : 0);
}

#define ERROR_TEST(name, fn)                                                                 \
    START_TEST(name)                                                                         \
    {                                                                                        \
        run_error(error_variant(_i), SALT, fn);                                              \
    }                                                                                        \
    END_TEST

ERROR_TEST(test_stale, error_stale)
ERROR_TEST(test_repeated, error_repeated)
ERROR_TEST(test_foreign, error_foreign)
ERROR_TEST(test_accepted_range, error_accepted_range)
ERROR_TEST(test_incomplete, error_incomplete)
ERROR_TEST(test_second_verify, error_second_verify)
ERROR_TEST(test_slot_range, error_slot_range)
ERROR_TEST(test_not_acquired, error_not_acquired)
ERROR_TEST(test_duplicate_slot, error_duplicate_slot)
ERROR_TEST(test_tokens_range, error_tokens_range)

/* The device of a test case, set before its tests fork (an unchecked
 * fixture runs in the runner's process, and makes no CUDA call). */
static void on_cpu(void)
{
    conform.device = SSM_DEVICE_CPU;
}

static void on_cuda(void)
{
    conform.device = SSM_DEVICE_CUDA;
}

/* A test case on `device`: named `cpu_name` or `cuda_name`. */
static TCase *device_case(ssm_device_type device, const char *cpu_name, const char *cuda_name)
{
    int cuda = device == SSM_DEVICE_CUDA;
    TCase *tc = tcase_create(cuda ? cuda_name : cpu_name);
    tcase_add_unchecked_fixture(tc, cuda ? on_cuda : on_cpu, NULL);
    if (cuda) /* each test starts the CUDA runtime and loads the kernels */
        tcase_set_timeout(tc, 120);
    return tc;
}

Suite *conformance_suite(ssm_device_type device)
{
    static char names[2][128];
    int cuda = device == SSM_DEVICE_CUDA;
    snprintf(names[cuda], sizeof names[cuda], cuda ? "conformance(%s, cuda:0)" : "conformance(%s)",
             conform.mode);
    Suite *s = suite_create(names[cuda]);

    TCase *load = device_case(device, "load", "load_cuda");
    tcase_add_test(load, test_plugin_loads);
    suite_add_tcase(s, load);

    TCase *sessions = device_case(device, "sessions", "sessions_cuda");
    tcase_set_timeout(sessions, 120);
    tcase_add_loop_test(sessions, test_random_session, 0, CONFORM_VARIANTS);
    tcase_add_loop_test(sessions, test_many_rounds, 0, CONFORM_VARIANTS);
    tcase_add_loop_test(sessions, test_export_read_only, 0, 16);
    suite_add_tcase(s, sessions);

    TCase *errors = device_case(device, "protocol_errors", "protocol_errors_cuda");
    tcase_set_timeout(errors, 120);
    tcase_add_loop_test(errors, test_stale, 0, 4);
    tcase_add_loop_test(errors, test_repeated, 0, 4);
    tcase_add_loop_test(errors, test_foreign, 0, 4);
    tcase_add_loop_test(errors, test_accepted_range, 0, 4);
    tcase_add_loop_test(errors, test_incomplete, 0, 4);
    tcase_add_loop_test(errors, test_second_verify, 0, 4);
    tcase_add_loop_test(errors, test_slot_range, 0, 4);
    tcase_add_loop_test(errors, test_not_acquired, 0, 4);
    tcase_add_loop_test(errors, test_duplicate_slot, 0, 4);
    tcase_add_loop_test(errors, test_tokens_range, 0, 4);
    suite_add_tcase(s, errors);
    return s;
}
