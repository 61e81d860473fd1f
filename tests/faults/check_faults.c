/* Allocation faults (docs/reliability.md: an allocation that fails returns an
 * error code; the context stays usable). The core's allocator (core/faults.h)
 * fails the Nth allocation, N = 1, 2, ... until an operation runs out of
 * allocations to fail (faults_walk). For every fault: SSM_ERR_OUT_OF_MEMORY
 * with a message, no allocation left behind, and the objects made before work
 * as they did:
 *
 * - ssm_ctx_create (config clone, plugin resolution, slot tables, tickets,
 *   the plugin's create through the services) in every mode, GDN and KDA,
 *   from a struct with mode sections and from an INI file with a relative
 *   plugin_dir (ssm_ctx_create_from_file: config load and parse too); a
 *   context made before decodes to the same outputs after every fault, and
 *   the one made in the end decodes to them too.
 * - the page transfers, ssm_slot_copy and the rest (faults_pages.c).
 *
 * The last test prints the faults injected per operation. Before the walks:
 * the allocator's own live count (ssm_realloc moves a block, it does not
 * make one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/faults/faults.h"
#include "tests/runner.h"

static const char *const modes[] = {"native", "compact", "replay"};

typedef struct create_walk {
    ssm_config config;     /* the struct form */
    const char *ini;       /* the file form, relative to the cwd; NULL: the struct */
    ssm_ctx *before;       /* made before the walk */
    faults_probe probe;
    unsigned char *expected, *got;
} create_walk;

/* Creates a context, checks that it decodes as the one made before, and
 * destroys it. */
static ssm_status create_run(void *arg)
{
    create_walk *cw = arg;
    ssm_ctx *ctx = NULL;
    ssm_status status = cw->ini ? ssm_ctx_create_from_file(cw->ini, &ctx)
                                : ssm_ctx_create(&cw->config, &ctx);
    if (status != SSM_OK) {
        ck_assert_ptr_null(ctx);
        return status;
    }
    ssm_fault_fail_allocation(0); /* the probe is not under test */
    faults_probe_run(&cw->probe, ctx, cw->got);
    ck_assert_msg(!memcmp(cw->got, cw->expected, FAULTS_LAYERS * cw->probe.out_bytes),
                  "a context made under the walk decodes differently");
    ssm_ctx_destroy(ctx);
    return status;
}

/* The context made before still decodes as it did. */
static void create_check(void *arg, ssm_status status)
{
    (void)status;
    create_walk *cw = arg;
    faults_probe_run(&cw->probe, cw->before, cw->got);
    ck_assert_msg(!memcmp(cw->got, cw->expected, FAULTS_LAYERS * cw->probe.out_bytes),
                  "a fault changed what an earlier context decodes");
}

/* A [replay] section with an option in every config: each mode resolves it
 * (its own options or another mode's section, checked by that plugin). */
static const char *const section_names[] = {"replay", "native"};
static const int32_t section_lines[] = {0, 0};
static const int32_t section_counts[] = {2, 0};
static const ssm_mode_option replay_options[] = {{"history", "16", 0}, {"outputs", "exact", 0}};
static const ssm_mode_option *const section_options[] = {replay_options, NULL};

static void write_ini(const char *path, const char *mode, int kda)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "[model]\nkind = %s\nlayers = %d\nheads = 2\nvalue_heads = 4\nkey_dim = 16\n"
            "value_dim = 8\nconv_width = 4\n\n[state]\nmode = %s\nstate_dtype = f32\n"
            "activation_dtype = bf16\ndevice = cpu\nmax_requests = 3\nmax_draft_tokens = 3\n"
            "plugin_dir = plugins\n\n[replay]\nhistory = 16\noutputs = exact\n\n[native]\n",
            kda ? "kda" : "gdn", FAULTS_LAYERS, mode);
    ck_assert_int_eq(fclose(f), 0);
}

/* _i: mode, GDN or KDA, struct or INI file. */
START_TEST(create_faults)
{
    const char *mode = modes[_i % 3];
    int kda = _i / 3 % 2, from_file = _i / 6;
    ssm_model_dims m = faults_dims(kda);
    create_walk cw = {0};
    test_config(&cw.config, &m, mode, SSM_DTYPE_F32, SSM_DTYPE_BF16, 3, 3);
    cw.config.mode_sections_count = 2;
    cw.config.mode_section_names = section_names;
    cw.config.mode_section_lines = section_lines;
    cw.config.mode_options_count = section_counts;
    cw.config.mode_options = section_options;
    faults_probe_make(&cw.probe, &m);
    cw.expected = malloc(FAULTS_LAYERS * cw.probe.out_bytes);
    cw.got = malloc(FAULTS_LAYERS * cw.probe.out_bytes);
    ck_assert(cw.expected && cw.got);
    int64_t start = ssm_fault_live();
    ck_assert_msg(ssm_ctx_create(&cw.config, &cw.before) == SSM_OK, "%s", ssm_last_error());
    faults_probe_run(&cw.probe, cw.before, cw.expected);

    char dir[] = "/tmp/ssm-faults-XXXXXX", cwd[4096];
    if (from_file) {
        /* ./faults.ini with plugin_dir = plugins, a link to the build's. */
        const char *path = getenv("SSMSTATE_PLUGIN_PATH");
        ck_assert_msg(path && *path, "needs $SSMSTATE_PLUGIN_PATH (make check sets it)");
        char plugins[4096];
        snprintf(plugins, sizeof plugins, "%.*s", (int)strcspn(path, ":"), path);
        ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
        ck_assert_ptr_nonnull(mkdtemp(dir));
        ck_assert_int_eq(chdir(dir), 0);
        ck_assert_int_eq(symlink(plugins, "plugins"), 0);
        write_ini("faults.ini", mode, kda);
        cw.ini = "./faults.ini";
    }
    char what[96];
    snprintf(what, sizeof what, "ssm_ctx_create %s %s from a %s", mode, kda ? "kda" : "gdn",
             from_file ? "file" : "struct");
    int64_t faults = faults_walk(from_file ? OP_CREATE_INI : OP_CREATE_STRUCT, what, create_run,
                                 create_check, &cw);
    ck_assert_int_gt(faults, 3);
    if (from_file) {
        unlink("faults.ini");
        unlink("plugins");
        ck_assert_int_eq(chdir(cwd), 0);
        rmdir(dir);
    }
    ssm_ctx_destroy(cw.before);
    ck_assert_int_eq(ssm_fault_live(), start); /* everything made is given back */
    faults_probe_free(&cw.probe);
    free(cw.expected);
    free(cw.got);
}
END_TEST

/* Only realloc(NULL, n) makes a block: a grow (which likely moves it) and a
 * shrink to zero bytes leave the live count as it was, and ssm_free takes
 * the block back. Zero bytes returns a block (one byte) and keeps p alive
 * until then, so the caller frees what it got, once. */
START_TEST(realloc_counts)
{
    int64_t start = ssm_fault_live();
    unsigned char *p = ssm_realloc(NULL, 16);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(ssm_fault_live(), start + 1);
    memset(p, 0x5a, 16);
    unsigned char *grown = ssm_realloc(p, 1 << 20);
    ck_assert_ptr_nonnull(grown);
    ck_assert_msg(ssm_fault_live() == start + 1,
                  "a grow from 16 bytes to 1 MiB changed the live count by %lld, not 0",
                  (long long)(ssm_fault_live() - start - 1));
    for (int i = 0; i < 16; i++)
        ck_assert_int_eq(grown[i], 0x5a);
    ssm_free(grown);
    ck_assert_int_eq(ssm_fault_live(), start);

    void *kept = ssm_malloc(8);
    ck_assert_ptr_nonnull(kept);
    void *shrunk = ssm_realloc(kept, 0);
    ck_assert_msg(shrunk != NULL, "ssm_realloc(p, 0) returned NULL (p freed or lost)");
    ck_assert_int_eq(ssm_fault_live(), start + 1);
    ssm_free(shrunk);
    void *empty = ssm_realloc(NULL, 0);
    ck_assert_ptr_nonnull(empty);
    ck_assert_int_eq(ssm_fault_live(), start + 1);
    ssm_free(empty);
    ck_assert_int_eq(ssm_fault_live(), start);
}
END_TEST

/* _i: mode, GDN or KDA. */
START_TEST(page_faults)
{
    faults_pages_run(modes[_i % 3], _i / 3);
}
END_TEST

START_TEST(summary)
{
    int64_t total = 0;
    char line[1024];
    size_t used = 0;
    for (int op = 0; op < OP_COUNT; op++) {
        int64_t n = faults_tallied(op);
        total += n;
        used += (size_t)snprintf(line + used, sizeof line - used, "%s %s=%lld", op ? "," : "",
                                 fault_op_names[op], (long long)n);
    }
    printf("# faults injected:%s; total=%lld\n", line, (long long)total);
    fflush(stdout);
    ck_assert_int_gt(total, 0);
}
END_TEST

Suite *make_suite(void)
{
    faults_tally_init();
    Suite *s = suite_create("faults");
    TCase *allocator = tcase_create("allocator");
    tcase_add_test(allocator, realloc_counts);
    suite_add_tcase(s, allocator);
    TCase *tc = tcase_create("faults");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, create_faults, 0, 12);
    tcase_add_loop_test(tc, page_faults, 0, 6);
    tcase_add_test(tc, summary);
    suite_add_tcase(s, tc);
    return s;
}
