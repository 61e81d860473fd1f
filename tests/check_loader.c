/* Plugin discovery and loading: every way a plugin can be missing or wrong
 * gives one clear error naming the path, the symbol and the versions, and
 * leaves nothing behind. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "core/loader.h"
#include "tests/runner.h"
#include "tests/testutil.h"

static const char *test_plugin_dir(void)
{
    const char *dir = getenv("SSM_TEST_PLUGIN_DIR");
    ck_assert_msg(dir != NULL, "SSM_TEST_PLUGIN_DIR is not set (run through make check)");
    return dir;
}

#define ck_assert_error_has(needle)                                                           \
    ck_assert_msg(strstr(ssm_last_error(), (needle)) != NULL, "error '%s' lacks '%s'",        \
                  ssm_last_error(), (needle))

START_TEST(test_missing_plugin_names_paths)
{
    char dir[] = "/tmp/ssm-empty-XXXXXX", tried[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ssm_loaded_plugin p = {0};
    ck_assert_int_eq(ssm_loader_open_mode("nosuch", dir, &p), SSM_ERR_PLUGIN);
    ck_assert_error_has("no plugin for mode 'nosuch'");
    snprintf(tried, sizeof tried, "%s/nosuch.so", dir);
    ck_assert_error_has(tried);
    ck_assert_ptr_null(p.handle);
    rmdir(dir);
}
END_TEST

START_TEST(test_wrong_abi_refused)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/wrong_abi.so", test_plugin_dir());
    ssm_loaded_plugin p = {0};
    ck_assert_int_eq(ssm_loader_open_file(path, NULL, &p), SSM_ERR_PLUGIN);
    ck_assert_error_has(path);
    ck_assert_error_has("ssm_plugin_entry_v1");
    ck_assert_error_has("ABI version 99");
    ck_assert_error_has("speaks version 1");
    ck_assert_ptr_null(p.handle);
}
END_TEST

START_TEST(test_library_without_symbol_refused)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/no_symbol.so", test_plugin_dir());
    ssm_loaded_plugin p = {0};
    ck_assert_int_eq(ssm_loader_open_file(path, NULL, &p), SSM_ERR_PLUGIN);
    ck_assert_error_has("is not an ssmstate plugin");
    ck_assert_error_has("ssm_plugin_entry_v2 (v2), ssm_plugin_entry_v1 (v1)");
    ck_assert_error_has(path);
}
END_TEST

/* A v1 table that ends at materialize (before export_slots and import_slots)
 * loads through the v1 adapter: the table the core calls reads the entries
 * past its struct_size as NULL, and its check_config, plan and create are
 * reached through ssm_loader_* only. */
START_TEST(test_old_table_accepted)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/old_table.so", test_plugin_dir());
    ssm_loaded_plugin p = {0};
    ck_assert_msg(ssm_loader_open_file(path, NULL, &p) == SSM_OK, "%s", ssm_last_error());
    ck_assert_uint_eq(p.abi_version, SSM_PLUGIN_V1_ABI_VERSION);
    ck_assert_uint_eq(p.v1.struct_size, SSM_PLUGIN_V1_MIN_SIZE);
    ck_assert_uint_lt(SSM_PLUGIN_V1_MIN_SIZE, sizeof(ssm_plugin_v1));
    const ssm_plugin_v1 *own = dlsym(p.handle, SSM_PLUGIN_V1_SYMBOL);
    ck_assert_ptr_nonnull(own);
    ck_assert_ptr_nonnull(own->export_slots); /* the object has one, past its table */
    ck_assert_ptr_eq(p.table.commit, own->commit);
    ck_assert_ptr_null(p.table.export_slots);
    ck_assert_ptr_null(p.table.import_slots);
    ck_assert_ptr_null(p.table.check_config);
    ck_assert_ptr_eq(p.v1.check_config, own->check_config);
    ck_assert_str_eq(p.table.name, "old_table");
    ssm_loader_close(&p);

    /* today's plugins speak v2, their table whole */
    ck_assert_int_eq(ssm_loader_open_mode("native", NULL, &p), SSM_OK);
    ck_assert_uint_eq(p.abi_version, SSM_PLUGIN_V2_ABI_VERSION);
    ck_assert_uint_eq(p.table.struct_size, sizeof(ssm_plugin_v2));
    ck_assert_ptr_nonnull(p.table.check_config);
    ck_assert_ptr_nonnull(p.table.export_slots);
    ck_assert_ptr_nonnull(p.table.import_slots);
    ssm_loader_close(&p);
}
END_TEST

START_TEST(test_short_table_refused)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/short_table.so", test_plugin_dir());
    ssm_loaded_plugin p = {0};
    ck_assert_int_eq(ssm_loader_open_file(path, NULL, &p), SSM_ERR_PLUGIN);
    ck_assert_error_has(path);
    char sizes[128];
    snprintf(sizes, sizeof sizes, "a table of %zu bytes; ABI version 1 needs %zu",
             (size_t)(SSM_PLUGIN_V1_MIN_SIZE - sizeof(void *)), (size_t)SSM_PLUGIN_V1_MIN_SIZE);
    ck_assert_error_has(sizes);
    ck_assert_ptr_null(p.handle);
}
END_TEST

START_TEST(test_not_a_library_refused)
{
    char dir[] = "/tmp/ssm-loader-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/textfile.so", dir);
    FILE *f = fopen(path, "w");
    fputs("this is not an ELF file\n", f);
    fclose(f);
    ssm_loaded_plugin p = {0};
    ck_assert_int_eq(ssm_loader_open_mode("textfile", dir, &p), SSM_ERR_PLUGIN);
    ck_assert_error_has("cannot load plugin");
    ck_assert_error_has(path);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* Copies file `from` to `to` through `to`.new and a rename (a new inode,
 * as an install does). */
static void replace_file(const char *from, const char *to)
{
    char next[4200];
    snprintf(next, sizeof next, "%s.new", to);
    FILE *in = fopen(from, "rb"), *out = fopen(next, "wb");
    ck_assert_msg(in && out, "cannot copy %s to %s", from, next);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);
    ck_assert_int_eq(rename(next, to), 0);
}

/* Whether a line of /proc/self/maps names a file under `dir`. */
static int mapped_under(const char *dir)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[4400];
    int found = 0;
    while (fgets(line, sizeof line, f))
        found |= strstr(line, dir) != NULL;
    fclose(f);
    return found;
}

/* A plugin under another mode's name is refused, left unmapped (not
 * pinned), and once the right file replaces it, it loads. */
START_TEST(test_misnamed_plugin_not_pinned)
{
    ssm_loaded_plugin native = {0}, compact = {0}, p = {0};
    ck_assert_int_eq(ssm_loader_open_mode("native", NULL, &native), SSM_OK);
    ck_assert_int_eq(ssm_loader_open_mode("compact", NULL, &compact), SSM_OK);
    char dir[] = "/tmp/ssm-misnamed-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[4096];
    snprintf(path, sizeof path, "%s/compact.so", dir);
    replace_file(native.path, path);
    ck_assert_int_eq(ssm_loader_open_mode("compact", dir, &p), SSM_ERR_PLUGIN);
    ck_assert_error_has("named for mode 'compact' but its table says 'native'");
    ck_assert_ptr_null(p.handle);
    ck_assert_msg(!mapped_under(dir), "the refused %s is still mapped", path);

    replace_file(compact.path, path);
    ck_assert_msg(ssm_loader_open_mode("compact", dir, &p) == SSM_OK, "%s", ssm_last_error());
    ck_assert_str_eq(p.table.name, "compact");
    ck_assert_str_eq(p.path, path);
    ck_assert_msg(mapped_under(dir), "the accepted %s is not mapped", path);
    ssm_loader_close(&p);
    ssm_loader_close(&native);
    ssm_loader_close(&compact);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(test_native_found_on_env_path)
{
    ssm_loaded_plugin p = {0};
    ck_assert_msg(ssm_loader_open_mode("native", NULL, &p) == SSM_OK, "%s", ssm_last_error());
    ck_assert_str_eq(p.table.name, "native");
    ck_assert_uint_eq(p.abi_version, SSM_PLUGIN_V2_ABI_VERSION);
    ck_assert_ptr_nonnull(strstr(p.path, "native.so"));
    ssm_loader_close(&p);
    ck_assert_ptr_null(p.handle);
    ssm_loader_close(&p); /* closing twice is harmless */
}
END_TEST

START_TEST(test_load_unload_cycles)
{
    for (int i = 0; i < 200; i++) {
        ssm_loaded_plugin p = {0};
        ck_assert_int_eq(ssm_loader_open_mode("native", NULL, &p), SSM_OK);
        ssm_loader_close(&p);
    }
}
END_TEST

START_TEST(test_list_reports_good_and_bad)
{
    ssm_plugin_info info[32];
    int32_t count = 0;
    ck_assert_int_eq(ssm_plugins_list(test_plugin_dir(), info, 32, &count), SSM_OK);
    int native = 0, wrong = 0, nosym = 0;
    for (int32_t i = 0; i < count && i < 32; i++) {
        if (strcmp(info[i].name, "native") == 0 && info[i].status == SSM_OK)
            native = info[i].abi_version == SSM_PLUGIN_V2_ABI_VERSION &&
                     (info[i].capabilities & SSM_CAP_CPU);
        if (strcmp(info[i].name, "wrong_abi") == 0)
            wrong = info[i].status == SSM_ERR_PLUGIN && strstr(info[i].error, "99") != NULL;
        if (strcmp(info[i].name, "no_symbol") == 0)
            nosym = info[i].status == SSM_ERR_PLUGIN;
    }
    ck_assert_msg(native && wrong && nosym, "native %d wrong_abi %d no_symbol %d of %d listed",
                  native, wrong, nosym, count);
}
END_TEST

/* A plugin_dir that is missing or a file is an error naming it, for the
 * listing and the loader alike; a negative capacity is refused. */
START_TEST(test_list_refuses_bad_arguments)
{
    ssm_plugin_info info[4];
    int32_t count = 77;
    ck_assert_int_eq(ssm_plugins_list(NULL, info, -1, &count), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_error_has("capacity -1");
    ck_assert_int_eq(count, 77);
    ck_assert_int_eq(ssm_plugins_list("/no/such/plugin/dir", info, 4, &count), SSM_ERR_PLUGIN);
    ck_assert_error_has("plugin_dir /no/such/plugin/dir: no such directory");
    ck_assert_int_eq(count, 77);
    char file[4096];
    snprintf(file, sizeof file, "%s/wrong_abi.so", test_plugin_dir());
    ck_assert_int_eq(ssm_plugins_list(file, info, 4, &count), SSM_ERR_PLUGIN);
    ck_assert_error_has("not a directory");
    ssm_loaded_plugin p = {0};
    ck_assert_int_eq(ssm_loader_open_mode("native", "/no/such/plugin/dir", &p), SSM_ERR_PLUGIN);
    ck_assert_error_has("plugin_dir /no/such/plugin/dir: no such directory");
    ck_assert_ptr_null(p.handle);
    ck_assert_int_eq(ssm_plugins_list("", info, 0, &count), SSM_OK); /* "": no extra directory */
}
END_TEST

/* 8 lines each: what follows starts at line 9. */
static const char *model_text =
    "[model]\nkind = gdn\nlayers = 1\nheads = 1\nvalue_heads = 2\nkey_dim = 8\n"
    "value_dim = 8\nconv_width = 4\n";
static const char *kda_model_text =
    "[model]\nkind = kda\nlayers = 1\nheads = 2\nvalue_heads = 2\nkey_dim = 8\n"
    "value_dim = 8\nconv_width = 4\n";

/* Creates a context from INI text, model first; returns the status,
 * asserting *out is left alone on failure. */
static ssm_status create_from_model_text(const char *model, const char *state_and_more)
{
    char text[2048];
    snprintf(text, sizeof text, "%s%s", model, state_and_more);
    ssm_config *config = NULL;
    ck_assert_msg(ssm_config_parse_text(text, "test.ini", &config) == SSM_OK, "%s",
                  ssm_last_error());
    ssm_ctx *ctx = (ssm_ctx *)0x1;
    ssm_status status = ssm_ctx_create(config, &ctx);
    if (status == SSM_OK)
        ssm_ctx_destroy(ctx);
    else
        ck_assert_ptr_eq(ctx, (ssm_ctx *)0x1);
    ssm_config_free(config);
    return status;
}

/* The GDN model, then state_and_more. */
static ssm_status create_from_text(const char *state_and_more)
{
    return create_from_model_text(model_text, state_and_more);
}

START_TEST(test_context_with_wrong_abi_mode)
{
    char text[1024];
    snprintf(text, sizeof text, "[state]\nmode = wrong_abi\nstate_dtype = f32\nmax_requests = 1\n"
             "plugin_dir = %s\n", test_plugin_dir());
    ck_assert_int_eq(create_from_text(text), SSM_ERR_PLUGIN);
    ck_assert_error_has("ABI version 99");
}
END_TEST

/* [state] prefill_precision reaches a v2 mode's check_config and plan as
 * SSM_PREFILL_*; the default is high. A v1 mode is not told and plans under
 * either setting (the adapter). */
START_TEST(test_prefill_precision_reaches_the_mode)
{
    static const char *const settings[] = {"", "prefill_precision = fast\n",
                                           "prefill_precision = high\n"};
    static const int32_t expected[] = {SSM_PREFILL_HIGH, SSM_PREFILL_FAST, SSM_PREFILL_HIGH};
    char path[4096];
    snprintf(path, sizeof path, "%s/precision_probe.so", test_plugin_dir());
    ssm_loaded_plugin probe = {0};
    ck_assert_msg(ssm_loader_open_file(path, NULL, &probe) == SSM_OK, "%s", ssm_last_error());
    struct {
        int32_t check_config, plan;
    } *seen = dlsym(probe.handle, "precision_probe_seen");
    ck_assert_ptr_nonnull(seen);
    for (int i = 0; i < 3; i++) {
        for (int v1 = 0; v1 < 2; v1++) {
            char text[1024];
            snprintf(text, sizeof text,
                     "%s[state]\nmode = %s\nstate_dtype = f32\nmax_requests = 1\n%s"
                     "plugin_dir = %s\n",
                     model_text, v1 ? "layout_probe" : "precision_probe", settings[i],
                     test_plugin_dir());
            ssm_config *config = NULL;
            ck_assert_int_eq(ssm_config_parse_text(text, "test.ini", &config), SSM_OK);
            ck_assert_int_eq(config->prefill_precision,
                             expected[i] == SSM_PREFILL_HIGH ? SSM_PREFILL_PRECISION_HIGH
                                                             : SSM_PREFILL_PRECISION_FAST);
            seen->check_config = seen->plan = -1;
            ssm_plan plan;
            ck_assert_msg(ssm_config_plan(config, &plan) == SSM_OK, "%s", ssm_last_error());
            ssm_config_free(config);
            ck_assert_int_eq(seen->check_config, v1 ? -1 : expected[i]);
            ck_assert_int_eq(seen->plan, v1 ? -1 : expected[i]);
        }
    }
    char text[1024];
    snprintf(text, sizeof text, "%s[state]\nmode = native\nstate_dtype = f32\n"
             "max_requests = 1\nprefill_precision = bf16\n", model_text);
    ssm_config *config = NULL;
    ck_assert_int_eq(ssm_config_parse_text(text, "test.ini", &config), SSM_ERR_CONFIG);
    ck_assert_ptr_null(config);
    ck_assert_error_has("[state] prefill_precision = 'bf16' is not valid (allowed: fast, high)");
    ssm_loader_close(&probe);
}
END_TEST

START_TEST(test_context_with_missing_plugin_dir)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = native\nstate_dtype = f32\n"
                                      "max_requests = 1\nplugin_dir = /no/such/plugin/dir\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini: [state] plugin_dir /no/such/plugin/dir: no such directory");
}
END_TEST

/* The device is checked before anything is loaded or allocated on it:
 * one message for a GPU that is not there (ssm_device_check). */
START_TEST(test_device_checked_first)
{
    ssm_device cpu = {SSM_DEVICE_CPU, 0}, cpu1 = {SSM_DEVICE_CPU, 1};
    ssm_device far = {SSM_DEVICE_CUDA, 1023};
    ck_assert_int_eq(ssm_device_check(&cpu), SSM_OK);
    ck_assert_int_eq(ssm_device_check(&cpu1), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_device_check(NULL), SSM_ERR_INVALID_ARGUMENT);
    ssm_status status = ssm_device_check(&far);
    ck_assert_msg(status == SSM_ERR_DEVICE || status == SSM_ERR_UNSUPPORTED, "%s",
                  ssm_last_error());
    ck_assert_msg(strstr(ssm_last_error(), "cuda:1023: no GPU visible (") ||
                      strstr(ssm_last_error(), "cuda:1023: no such GPU (") ||
                      strstr(ssm_last_error(), "cuda:1023: this build has no CUDA support"),
                  "%s", ssm_last_error());
    /* A context there: that message (a build without CUDA refuses the config first). */
    char why[512];
    snprintf(why, sizeof why, "%s", ssm_last_error());
    char text[1024];
    snprintf(text, sizeof text, "%s[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n"
             "device = cuda:1023\n", model_text);
    ssm_config *config = NULL;
    if (ssm_config_parse_text(text, "test.ini", &config) != SSM_OK) {
        ck_assert_error_has("this build has no CUDA support");
        return;
    }
    ssm_ctx *ctx = NULL;
    ck_assert_int_eq(ssm_ctx_create(config, &ctx), status);
    ck_assert_msg(!strcmp(ssm_last_error(), why), "'%s', not '%s'", ssm_last_error(), why);
    ck_assert_ptr_null(ctx);
    ssm_config_free(config);
}
END_TEST

START_TEST(test_context_with_missing_mode)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = nosuch\nstate_dtype = f32\nmax_requests = 1\n"),
                     SSM_ERR_PLUGIN);
    ck_assert_error_has("no plugin for mode 'nosuch'");
}
END_TEST

START_TEST(test_unknown_section_is_config_error)
{
    /* [model] is 8 lines; [state] starts at line 9, [typo] at line 13. */
    ck_assert_int_eq(create_from_text("[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n"
                                      "[typo]\nx = 1\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:13: unknown section [typo]: no plugin for mode 'typo'");
    /* The loader's reason is quoted once, not overwritten by the message quoting it. */
    const char *second = strstr(strstr(ssm_last_error(), "unknown section") + 1, "unknown section");
    ck_assert_msg(second == NULL, "%s", ssm_last_error());
}
END_TEST

/* Every key within its range, the pool past 2^64 bytes: refused, naming the
 * file and the key. */
START_TEST(test_pool_past_2_64_bytes)
{
    const char *model = "[model]\nkind = gdn\nlayers = 4096\nheads = 1024\nvalue_heads = 1024\n"
                        "key_dim = 1024\nvalue_dim = 1024\nconv_width = 16\n";
    ck_assert_int_eq(create_from_model_text(model, "[state]\nmode = native\nstate_dtype = f32\n"
                                                   "max_draft_tokens = 15\nmax_requests = 1048576\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini: [state] max_requests = 1048576: a pool of that many slots");
    ck_assert_error_has("takes more than 2^64 bytes");
}
END_TEST

/* [workload] is the ssmstate command's section: no plugin is asked about
 * it, whatever it holds (the command reads it, tools/workload.c). */
START_TEST(test_workload_section_is_no_mode)
{
    static const char state[] = "[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n";
    char text[1024];
    snprintf(text, sizeof text, "%s[workload]\nrequests = 2\nseeds = not checked here\n", state);
    ck_assert_int_eq(create_from_text(text), SSM_OK);
    snprintf(text, sizeof text, "%s%s[workload]\n", model_text, state);
    ssm_config *config = NULL;
    ck_assert_int_eq(ssm_config_parse_text(text, "test.ini", &config), SSM_OK);
    ssm_plan plan;
    ck_assert_msg(ssm_config_plan(config, &plan) == SSM_OK, "%s", ssm_last_error());
    ssm_config_free(config);
    /* Beside it, a section no plugin claims is still an error. */
    snprintf(text, sizeof text, "%s[workload]\nseed = 3\n[typo]\n", state);
    ck_assert_int_eq(create_from_text(text), SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:15: unknown section [typo]");
}
END_TEST

START_TEST(test_mode_option_checked_by_plugin)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = native\nstate_dtype = f32\nmax_requests = 1\n"
                                      "[native]\nspeed = fast\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:14: [native] speed:");
}
END_TEST

START_TEST(test_good_context)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = native\nstate_dtype = bf16\nmax_requests = 2\n"),
                     SSM_OK);
}
END_TEST

/* [replay] options the plugin refuses at load, each a config error at the
 * option's line. After the 8 model lines: [state] at 9, its keys at 10..12
 * (13 with max_draft_tokens), then [replay] and its keys. */
START_TEST(test_replay_matrix_needs_gdn)
{
    ck_assert_int_eq(create_from_model_text(kda_model_text,
                                            "[state]\nmode = replay\nstate_dtype = f32\n"
                                            "max_requests = 1\n"
                                            "[replay]\noutputs = matrix\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:14: [replay] outputs:");
    ck_assert_error_has("kind = gdn");
    /* The same section on a GDN model loads. */
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\noutputs = matrix\n"),
                     SSM_OK);
}
END_TEST

START_TEST(test_replay_identity_needs_f32_state)
{
    /* bf16 state: the identity forms are refused at the outputs line. */
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = bf16\n"
                                      "max_requests = 1\n"
                                      "[replay]\nhistory = 16\noutputs = identity\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:15: [replay] outputs:");
    ck_assert_error_has("need state_dtype = f32");
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = bf16\n"
                                      "max_requests = 1\n"
                                      "[replay]\nhistory = 32\noutputs = matrix\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:15: [replay] outputs:");
    /* exact (explicit or by default) loads at any length. */
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = bf16\n"
                                      "max_requests = 1\n"
                                      "[replay]\nhistory = 64\noutputs = exact\n"),
                     SSM_OK);
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = bf16\n"
                                      "max_requests = 1\n"
                                      "[replay]\nhistory = 64\n"),
                     SSM_OK);
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\nhistory = 64\noutputs = identity\n"),
                     SSM_OK);
}
END_TEST

START_TEST(test_replay_history_not_power_of_two)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\nhistory = 12\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:14: [replay] history:");
    ck_assert_error_has("not a power of two");
}
END_TEST

START_TEST(test_replay_history_too_short)
{
    /* T = 1 + 3 drafts = 4: L must be at least 2T = 8. */
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\nmax_draft_tokens = 3\n"
                                      "[replay]\nhistory = 4\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:15: [replay] history:");
    ck_assert_error_has("too few");
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\nmax_draft_tokens = 3\n"
                                      "[replay]\nhistory = 8\n"),
                     SSM_OK);
}
END_TEST

START_TEST(test_replay_old_outputs_name)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\noutputs = recurrent\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:14: [replay] outputs:");
    ck_assert_error_has("'recurrent'");
    ck_assert_error_has("allowed: exact, identity, matrix");
}
END_TEST

START_TEST(test_replay_fold_rows)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\nfold_rows = 70000\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("test.ini:14: [replay] fold_rows:");
    ck_assert_error_has("'70000' is not a row count (0 to 65535");
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\nfold_rows = -1\n"),
                     SSM_ERR_CONFIG);
    ck_assert_error_has("'-1' is not a row count");
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\nfold_rows = 0\n"),
                     SSM_OK);
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 1\n"
                                      "[replay]\nfold_rows = 256\n"),
                     SSM_OK);
}
END_TEST

START_TEST(test_good_replay_context)
{
    ck_assert_int_eq(create_from_text("[state]\nmode = replay\nstate_dtype = f32\n"
                                      "max_requests = 2\n"
                                      "[replay]\nhistory = 16\noutputs = identity\n"),
                     SSM_OK);
    ck_assert_int_eq(create_from_model_text(kda_model_text,
                                            "[state]\nmode = replay\nstate_dtype = f32\n"
                                            "max_requests = 2\n"
                                            "[replay]\nhistory = 16\noutputs = identity\n"),
                     SSM_OK);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *files = tcase_create("files");
    tcase_add_test(files, test_missing_plugin_names_paths);
    tcase_add_test(files, test_wrong_abi_refused);
    tcase_add_test(files, test_old_table_accepted);
    tcase_add_test(files, test_short_table_refused);
    tcase_add_test(files, test_library_without_symbol_refused);
    tcase_add_test(files, test_not_a_library_refused);
    tcase_add_test(files, test_misnamed_plugin_not_pinned);
    tcase_add_test(files, test_native_found_on_env_path);
    tcase_add_test(files, test_load_unload_cycles);
    tcase_add_test(files, test_list_reports_good_and_bad);
    tcase_add_test(files, test_list_refuses_bad_arguments);
    suite_add_tcase(s, files);
    TCase *contexts = tcase_create("contexts");
    tcase_add_test(contexts, test_context_with_wrong_abi_mode);
    tcase_add_test(contexts, test_context_with_missing_mode);
    tcase_add_test(contexts, test_context_with_missing_plugin_dir);
    tcase_add_test(contexts, test_prefill_precision_reaches_the_mode);
    tcase_add_test(contexts, test_device_checked_first);
    tcase_add_test(contexts, test_unknown_section_is_config_error);
    tcase_add_test(contexts, test_pool_past_2_64_bytes);
    tcase_add_test(contexts, test_workload_section_is_no_mode);
    tcase_add_test(contexts, test_mode_option_checked_by_plugin);
    tcase_add_test(contexts, test_good_context);
    tcase_add_test(contexts, test_replay_matrix_needs_gdn);
    tcase_add_test(contexts, test_replay_identity_needs_f32_state);
    tcase_add_test(contexts, test_replay_history_not_power_of_two);
    tcase_add_test(contexts, test_replay_history_too_short);
    tcase_add_test(contexts, test_replay_old_outputs_name);
    tcase_add_test(contexts, test_replay_fold_rows);
    tcase_add_test(contexts, test_good_replay_context);
    suite_add_tcase(s, contexts);
    return s;
}
