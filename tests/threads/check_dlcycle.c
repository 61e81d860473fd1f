/* dlopen/dlclose cycles (docs/reliability.md): contexts of every mode created
 * and destroyed CYCLES times, from the example files and from a struct whose
 * other mode section loads a second plugin, a create refused by a plugin,
 * plans, plugin listings and the loader's refusals of broken plugins: each
 * loads and unloads plugin files. Under LeakSanitizer (configure
 * --enable-sanitizers=address) a leak fails the test when its process exits.
 * In every build, counting the plugin files mapped in /proc/self/maps: the
 * accepted plugins are mapped while a context lives (so the count is known
 * to see them) and stay pinned after (docs/abi.md, "Loading", step 5), so
 * every cycle ends with exactly the mappings the first one left (cycles map
 * nothing new); the refused plugins are never left mapped. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/loader.h"
#include "tests/runner.h"
#include "tests/testutil.h"

#define CYCLES 40

static const char *const modes[] = {"native", "compact", "replay"};
static const char *const files[] = {"native.so", "compact.so", "replay.so", "wrong_abi.so",
                                    "no_symbol.so"};

#define ACCEPTED 3 /* files[0..3): the modes; the rest are refused */

/* Mappings of this process whose file is one of files[from..to). */
static int plugin_mappings(size_t from, size_t to)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_msg(f != NULL, "cannot read /proc/self/maps");
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        const char *base = strrchr(line, '/');
        for (size_t i = from; base && i < to; i++)
            n += strcmp(base + 1, files[i]) == 0;
    }
    fclose(f);
    return n;
}

static const char *env_dir(const char *name)
{
    const char *dir = getenv(name);
    ck_assert_msg(dir != NULL, "%s is not set (run through make check)", name);
    return dir;
}

/* A one-layer config of `mode` with a section for `other` (options given). */
static void config_with_section(ssm_config *c, ssm_model_dims *m, const char *mode,
                                const char *other, const ssm_mode_option *option)
{
    *m = (ssm_model_dims){SSM_MODEL_GDN, 1, 1, 2, 8, 8, 2, 0, 0.0f};
    test_config(c, m, mode, SSM_DTYPE_F32, SSM_DTYPE_F32, 2, 3);
    static const int32_t lines[1] = {1}, counts[1] = {1};
    static const char *names[1];
    static const ssm_mode_option *options[1];
    names[0] = other;
    options[0] = option;
    c->mode_sections_count = 1;
    c->mode_section_names = names;
    c->mode_section_lines = lines;
    c->mode_options_count = counts;
    c->mode_options = options;
}

START_TEST(test_cycles_leave_nothing)
{
    const char *top = env_dir("SSM_TOP_SRCDIR"), *test_plugins = env_dir("SSM_TEST_PLUGIN_DIR");
    const size_t all = sizeof files / sizeof files[0];
    ck_assert_int_eq(plugin_mappings(0, all), 0);
    int pinned = -1; /* the accepted plugins' mappings after the first cycle */
    static const ssm_mode_option history = {"history", "16", 1}, bogus = {"bogus", "1", 1};
    for (int cycle = 0; cycle < CYCLES; cycle++) {
        for (int i = 0; i < 3; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/examples/%s.ini", top, modes[i]);
            ssm_ctx *ctx = NULL;
            ck_assert_msg(ssm_ctx_create_from_file(path, &ctx) == SSM_OK, "%s",
                          ssm_last_error());
            int32_t slot;
            ck_assert_int_eq(ssm_slot_acquire(ctx, &slot), SSM_OK);
            ck_assert_int_gt(plugin_mappings(i, i + 1), 0);
            ssm_ctx_destroy(ctx);

            /* [replay] checked by the replay plugin, loaded and unloaded. */
            ssm_config c;
            ssm_model_dims m;
            config_with_section(&c, &m, modes[i], "replay", &history);
            ck_assert_msg(ssm_ctx_create(&c, &ctx) == SSM_OK, "%s", ssm_last_error());
            ssm_ctx_destroy(ctx);
            ssm_plan plan;
            ck_assert_int_eq(ssm_config_plan(&c, &plan), SSM_OK);
            /* A section the plugin refuses: the create fails, no context stays. */
            config_with_section(&c, &m, modes[i], modes[(i + 1) % 3], &bogus);
            ctx = NULL;
            ck_assert_int_eq(ssm_ctx_create(&c, &ctx), SSM_ERR_CONFIG);
            ck_assert_ptr_null(ctx);
        }
        ssm_plugin_info info[16];
        int32_t count = 0;
        ck_assert_int_eq(ssm_plugins_list(NULL, info, 16, &count), SSM_OK);
        ck_assert_int_ge(count, 3);
        for (size_t i = 3; i < sizeof files / sizeof files[0]; i++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", test_plugins, files[i]);
            ssm_loaded_plugin p = {0};
            ck_assert_int_eq(ssm_loader_open_file(path, NULL, &p), SSM_ERR_PLUGIN);
        }
        ck_assert_int_eq(plugin_mappings(ACCEPTED, all), 0);
        if (pinned < 0)
            pinned = plugin_mappings(0, ACCEPTED);
        ck_assert_int_gt(pinned, 0);
        ck_assert_int_eq(plugin_mappings(0, ACCEPTED), pinned);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("dlcycle");
    TCase *tc = tcase_create("dlcycle");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cycles_leave_nothing);
    suite_add_tcase(s, tc);
    return s;
}
