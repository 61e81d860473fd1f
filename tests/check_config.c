/* The config parser and validator (core/config/config.c): good files parse to the
 * right values, and every kind of bad input fails with "file:line: message"
 * naming the key, leaving *out untouched. [workload], the command's section,
 * is kept as text like a mode section and judged by the command
 * (tests/check_workload.c). */
#include "config.h" /* HAVE_CUDA */

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config/limits.h"
#include "core/internal.h"
#include "tests/runner.h"
#include "tests/testutil.h"

/* A complete GDN config, one key per line; the numbers are the lines the
 * cases below refer to. Its [workload] is only text to the library: the
 * first of its mode sections. */
#define BASE_TEXT                \
    "[model]\n"                  /*  1 */ \
    "kind = gdn\n"               /*  2 */ \
    "layers = 2\n"               /*  3 */ \
    "heads = 2\n"                /*  4 */ \
    "value_heads = 4\n"          /*  5 */ \
    "key_dim = 8\n"              /*  6 */ \
    "value_dim = 16\n"           /*  7 */ \
    "conv_width = 4\n"           /*  8 */ \
    "[state]\n"                  /*  9 */ \
    "mode = native\n"            /* 10 */ \
    "state_dtype = f32\n"        /* 11 */ \
    "activation_dtype = bf16\n"  /* 12 */ \
    "device = cpu\n"             /* 13 */ \
    "max_requests = 4\n"         /* 14 */ \
    "max_draft_tokens = 3\n"     /* 15 */ \
    "[workload]\n"               /* 16 */ \
    "requests = 4\n"             /* 17 */ \
    "prompt_min = 8\n"           /* 18 */ \
    "prompt_max = 32\n"          /* 19 */ \
    "prefill_chunk = 64\n"       /* 20 */ \
    "decode_steps = 8\n"         /* 21 */ \
    "acceptance = 0.7\n"         /* 22 */ \
    "seed = 1\n"                 /* 23 */

/* Only the required keys. */
#define MINIMAL_TEXT \
    "[model]\nkind = gdn\nlayers = 2\nheads = 2\nvalue_heads = 4\nkey_dim = 8\n" \
    "value_dim = 16\nconv_width = 4\n[state]\nmode = native\nstate_dtype = f32\n" \
    "max_requests = 4\n"


static ssm_config *parse_ok(const char *text)
{
    ssm_config *config = NULL;
    ssm_status status = ssm_config_parse_text(text, "test.ini", &config);
    ck_assert_msg(status == SSM_OK, "parse failed: %s", ssm_last_error());
    ck_assert_ptr_nonnull(config);
    return config;
}

/* Parsing `text` fails with SSM_ERR_CONFIG, "test.ini:<line>: " first and
 * `phrase` somewhere in the message, and leaves *out alone. */
static void check_parse_error(int at, const char *text, int line, const char *phrase)
{
    ssm_config sentinel;
    ssm_config *out = &sentinel;
    ssm_status status = ssm_config_parse_text(text, "test.ini", &out);
    const char *message = ssm_last_error();
    ck_assert_msg(status == SSM_ERR_CONFIG, "case %d: expected SSM_ERR_CONFIG, got %s (%s)",
                  at, ssm_status_name(status), message);
    ck_assert_msg(out == &sentinel, "case %d: *out written on failure", at);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "test.ini:%d: ", line);
    ck_assert_msg(strncmp(message, prefix, strlen(prefix)) == 0,
                  "case %d: expected prefix '%s' in '%s'", at, prefix, message);
    ck_assert_msg(strstr(message, phrase) != NULL, "case %d: expected '%s' in '%s'", at,
                  phrase, message);
}
#define expect_parse_error(text, line, phrase) check_parse_error(__LINE__, text, line, phrase)

/* A file with `text`, in a fresh temporary directory; free with remove_file. */
static char *write_temp_file(const char *text, size_t len)
{
    char dir_template[] = "/tmp/ssm_config_XXXXXX";
    char *dir = mkdtemp(dir_template);
    ck_assert_ptr_nonnull(dir);
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/test_XXXXXX", dir);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

static void remove_file(char *path)
{
    unlink(path);
    *strrchr(path, '/') = '\0';
    rmdir(path);
    free(path);
}

/* ------------------------------------------------------------- good */

START_TEST(test_full_config_every_key)
{
    const char *text =
        "; a comment\n"                      /*  1 */
        "# another\n"                        /*  2 */
        "[model]\n"                          /*  3 */
        "kind = kda\n"                       /*  4 */
        "layers = 3\n"                       /*  5 */
        "heads = 2\n"                        /*  6 */
        "value_heads = 6\n"                  /*  7 */
        "key_dim = 16\n"                     /*  8 */
        "value_dim = 32\n"                   /*  9 */
        "conv_width = 3\n"                   /* 10 */
        "lower_bound = -5\n"                 /* 11 */
        "\n"                                 /* 12 */
        "[state]\n"                          /* 13 */
        "mode = replay\n"                    /* 14 */
        "state_dtype = bf16\n"               /* 15 */
        "activation_dtype = f32\n"           /* 16 */
        "device = cpu\n"                     /* 17 */
        "max_requests = 7\n"                 /* 18 */
        "max_draft_tokens = 15\n"            /* 19 */
        "plugin_dir = /opt/ssm ; inline\n"   /* 20 */
        "[workload]\n"                       /* 21 */
        "requests = 9\n"                     /* 22 */
        "prompt_min = 2\n"                   /* 23 */
        "prompt_max = 2\n"                   /* 24 */
        "prefill_chunk = 16\n"               /* 25 */
        "decode_steps = 0\n"                 /* 26 */
        "acceptance = 0.25\n"                /* 27 */
        "seed = 18446744073709551615\n"      /* 28 */
        "[replay]\n"                         /* 29 */
        "history = 64\n"                     /* 30 */
        "note = keep  inner   spaces\n";     /* 31 */
    ssm_config *c = parse_ok(text);
    ck_assert_int_eq(c->model.kind, SSM_MODEL_KDA);
    ck_assert_int_eq(c->model.layers, 3);
    ck_assert_int_eq(c->model.heads, 2);
    ck_assert_int_eq(c->model.value_heads, 6);
    ck_assert_int_eq(c->model.key_dim, 16);
    ck_assert_int_eq(c->model.value_dim, 32);
    ck_assert_int_eq(c->model.conv_width, 3);
    ck_assert_int_eq(c->model.has_lower_bound, 1);
    ck_assert(c->model.lower_bound == -5.0f);
    ck_assert_str_eq(c->mode, "replay");
    ck_assert_int_eq(c->state_dtype, SSM_DTYPE_BF16);
    ck_assert_int_eq(c->activation_dtype, SSM_DTYPE_F32);
    ck_assert_int_eq(c->device.type, SSM_DEVICE_CPU);
    ck_assert_int_eq(c->device.index, 0);
    ck_assert_int_eq(c->max_requests, 7);
    ck_assert_int_eq(c->max_draft_tokens, SSM_MAX_DRAFT_TOKENS);
    ck_assert_str_eq(c->plugin_dir, "/opt/ssm");
    ck_assert_str_eq(c->source, "test.ini");
    ck_assert_int_eq(c->mode_sections_count, 2);
    /* [workload]: its keys and values as written, for the command */
    ck_assert_str_eq(c->mode_section_names[0], "workload");
    ck_assert_int_eq(c->mode_section_lines[0], 21);
    ck_assert_int_eq(c->mode_options_count[0], 7);
    ck_assert_str_eq(c->mode_options[0][0].key, "requests");
    ck_assert_str_eq(c->mode_options[0][0].value, "9");
    ck_assert_int_eq(c->mode_options[0][0].line, 22);
    ck_assert_str_eq(c->mode_options[0][6].key, "seed");
    ck_assert_str_eq(c->mode_options[0][6].value, "18446744073709551615");
    ck_assert_int_eq(c->mode_options[0][6].line, 28);
    ck_assert_str_eq(c->mode_section_names[1], "replay");
    ck_assert_int_eq(c->mode_section_lines[1], 29);
    ck_assert_int_eq(c->mode_options_count[1], 2);
    ck_assert_str_eq(c->mode_options[1][0].key, "history");
    ck_assert_str_eq(c->mode_options[1][0].value, "64");
    ck_assert_int_eq(c->mode_options[1][0].line, 30);
    ck_assert_str_eq(c->mode_options[1][1].value, "keep  inner   spaces");
    ck_assert_int_eq(c->mode_options[1][1].line, 31);
    ck_assert_int_eq(ssm_config_validate(c), SSM_OK);
    ssm_config_free(c);
}
END_TEST

START_TEST(test_aliases_and_layout)
{
    /* BOM, CRLF, indentation, blanks around '=', "key: value", fp32. */
    const char *text = "\xEF\xBB\xBF[model]\r\n"
                       "  kind=gdn\r\n"
                       "\tlayers   =   2   \r\n"
                       "heads: 2\r\n"
                       "value_heads = 2\r\n"
                       "key_dim = 4\nvalue_dim = 4\nconv_width = 1\n"
                       "   \n"
                       "[state]\nmode = my_vendor_mode2\nstate_dtype = fp32\n"
                       "activation_dtype = fp32\nmax_requests = 1048576";
    ssm_config *c = parse_ok(text);
    ck_assert_int_eq(c->model.kind, SSM_MODEL_GDN);
    ck_assert_int_eq(c->model.layers, 2);
    ck_assert_int_eq(c->model.heads, 2);
    ck_assert_int_eq(c->model.conv_width, 1);
    ck_assert_int_eq(c->model.has_lower_bound, 0);
    ck_assert_str_eq(c->mode, "my_vendor_mode2");
    ck_assert_int_eq(c->state_dtype, SSM_DTYPE_F32);
    ck_assert_int_eq(c->activation_dtype, SSM_DTYPE_F32);
    ck_assert_int_eq(c->max_requests, SSM_MAX_REQUESTS);
    ssm_config_free(c);
}
END_TEST

START_TEST(test_plugin_dir_relative_to_cwd)
{
    char *cwd = getcwd(NULL, 0);
    char expected[PATH_MAX + 32];
    snprintf(expected, sizeof expected, "%s/my/plugins", cwd);
    ssm_config *c = parse_ok(test_edit_line(BASE_TEXT, 15, "plugin_dir = my/plugins"));
    ck_assert_str_eq(c->plugin_dir, expected);
    ssm_config_free(c);
    c = parse_ok(test_edit_line(BASE_TEXT, 15, "plugin_dir ="));
    ck_assert_str_eq(c->plugin_dir, ""); /* "" means: skip it */
    ssm_config_free(c);
    free(cwd);
}
END_TEST

/* --------------------------------------------------------- defaults */

START_TEST(test_struct_defaults)
{
    ssm_config c;
    memset(&c, 0xab, sizeof c);
    ssm_config_defaults(&c);
    ck_assert_int_eq(c.model.layers, 0);
    ck_assert_int_eq(c.model.heads, 0);
    ck_assert_int_eq(c.model.value_heads, 0);
    ck_assert_int_eq(c.model.key_dim, 0);
    ck_assert_int_eq(c.model.value_dim, 0);
    ck_assert_int_eq(c.model.conv_width, 0);
    ck_assert_int_eq(c.model.has_lower_bound, 0);
    ck_assert_str_eq(c.mode, "native");
    ck_assert_int_eq(c.state_dtype, SSM_DTYPE_F32);
    ck_assert_int_eq(c.activation_dtype, SSM_DTYPE_F32);
    ck_assert_int_eq(c.device.type, SSM_DEVICE_CPU);
    ck_assert_int_eq(c.device.index, 0);
    ck_assert_int_eq(c.max_requests, 1);
    ck_assert_int_eq(c.max_draft_tokens, 0);
    ck_assert_ptr_null(c.plugin_dir);
    ck_assert_int_eq(c.mode_sections_count, 0);
    ck_assert_ptr_null(c.source);
    /* No model yet: not a valid config, and no file:line to point at. */
    ck_assert_int_eq(ssm_config_validate(&c), SSM_ERR_CONFIG);
    ck_assert_str_eq(ssm_last_error(), "[model] layers = 0 is out of range (allowed: 1..4096)");
}
END_TEST

START_TEST(test_file_defaults)
{
    ssm_config *c = parse_ok(MINIMAL_TEXT);
    ck_assert_int_eq(c->activation_dtype, SSM_DTYPE_BF16);
    ck_assert_int_eq(c->device.type, SSM_DEVICE_CPU);
    ck_assert_int_eq(c->device.index, 0);
    ck_assert_int_eq(c->max_draft_tokens, 0);
    ck_assert_ptr_null(c->plugin_dir);
    ck_assert_int_eq(c->model.has_lower_bound, 0);
    ck_assert_int_eq(c->mode_sections_count, 0);
    ck_assert_int_eq(ssm_config_find_section(c, "native"), -1);
    ck_assert_int_eq(ssm_config_find_section(c, "workload"), -1);
    ssm_config_free(c);

    /* A [workload] is kept as it is written, nothing filled in. */
    c = parse_ok(MINIMAL_TEXT "[workload]\nseed = 42\n");
    int32_t w = ssm_config_find_section(c, "workload");
    ck_assert_int_eq(w, 0);
    ck_assert_int_eq(c->mode_options_count[w], 1);
    ck_assert_str_eq(c->mode_options[w][0].key, "seed");
    ck_assert_str_eq(c->mode_options[w][0].value, "42");
    ssm_config_free(c);
}
END_TEST

/* ------------------------------------------------------ unknown keys */

START_TEST(test_unknown_keys)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 3, "layer = 2"), 3,
                       "unknown key 'layer' in [model] (known keys: kind, layers,");
    expect_parse_error(test_edit_line(BASE_TEXT, 13, "devices = cpu"), 13,
                       "unknown key 'devices' in [state] (known keys: mode,");
    /* Keys of one section are unknown in another. */
    expect_parse_error(test_edit_line(BASE_TEXT, 10, "mode = native\nrequests = 4"), 11,
                       "unknown key 'requests' in [state]");
    /* Key names are case-sensitive. */
    expect_parse_error(test_edit_line(BASE_TEXT, 2, "Kind = gdn"), 2, "unknown key 'Kind' in [model]");
}
END_TEST

/* --------------------------------------------------- missing things */

/* Deleting the line of each required key. */
static const struct { int line; const char *key; int header; } required_lines[] = {
    {2, "kind", 1},       {3, "layers", 1},     {4, "heads", 1},
    {5, "value_heads", 1}, {6, "key_dim", 1},   {7, "value_dim", 1},
    {8, "conv_width", 1}, {10, "mode", 9},      {11, "state_dtype", 9},
    {14, "max_requests", 9},
};

START_TEST(test_missing_required_key)
{
    char phrase[96];
    snprintf(phrase, sizeof phrase, "is missing required key '%s'", required_lines[_i].key);
    check_parse_error(_i, test_edit_line(BASE_TEXT, required_lines[_i].line, NULL),
                      required_lines[_i].header, phrase);
}
END_TEST

START_TEST(test_missing_sections)
{
    const char *state = strstr(BASE_TEXT, "[state]");
    expect_parse_error(state, 1, "missing section [model] (it needs: kind, layers,");
    expect_parse_error("[native]\nx = 1\n[state]\nmode = native\nstate_dtype = f32\n"
                       "max_requests = 1\n",
                       1, "missing section [model]");
    char model_only[1024];
    snprintf(model_only, sizeof model_only, "%.*s", (int)(state - BASE_TEXT), BASE_TEXT);
    expect_parse_error(model_only, 1, "missing section [state] (it needs: mode, state_dtype, max_requests)");
    expect_parse_error("", 1, "missing section [model]");
    expect_parse_error("; only a comment\n", 1, "missing section [model]");
}
END_TEST

/* ---------------------------------------------------------- values */

typedef struct bad_case {
    int line;                /* line of BASE_TEXT to replace */
    const char *replacement;
    int error_line;
    const char *phrase;
} bad_case;

static const bad_case bad_values[] = {
    /* enumerations */
    {2, "kind = mamba", 2, "[model] kind = 'mamba' is not valid (allowed: gdn, kda)"},
    {2, "kind = GDN", 2, "(allowed: gdn, kda)"},
    {11, "state_dtype = f64", 11, "[state] state_dtype = 'f64' is not valid (allowed: f32, bf16)"},
    {12, "activation_dtype = int8", 12, "activation_dtype = 'int8' is not valid (allowed: f32, bf16)"},
    {13, "device = gpu", 13, "[state] device = 'gpu' is not valid (allowed: cpu, cuda, cuda:N)"},
    {13, "device = cuda:x", 13, "(allowed: cpu, cuda, cuda:N)"},
    {13, "device = cuda:", 13, "(allowed: cpu, cuda, cuda:N)"},
    {13, "device = cpu:0", 13, "(allowed: cpu, cuda, cuda:N)"},
    /* integers that are not */
    {3, "layers = 12x", 3, "[model] layers = '12x' is not valid (allowed: an integer 1..4096)"},
    {3, "layers =", 3, "[model] layers = '' is not valid"},
    {3, "layers = 1 2", 3, "layers = '1 2' is not valid"},
    {3, "layers = 2.0", 3, "layers = '2.0' is not valid"},
    {3, "layers = 0x10", 3, "layers = '0x10' is not valid"},
    {3, "layers = 99999999999", 3, "layers = '99999999999' is out of range (allowed: an integer 1..4096)"},
    {3, "layers = -99999999999999999999", 3, "is out of range"},
    /* integers out of range */
    {3, "layers = 0", 3, "[model] layers = 0 is out of range (allowed: 1..4096)"},
    {3, "layers = 4097", 3, "layers = 4097 is out of range (allowed: 1..4096)"},
    {3, "layers = -1", 3, "layers = -1 is out of range"},
    {4, "heads = 0", 4, "[model] heads = 0 is out of range (allowed: 1..1024)"},
    {5, "value_heads = 1025", 5, "value_heads = 1025 is out of range (allowed: 1..1024)"},
    {6, "key_dim = 1025", 6, "key_dim = 1025 is out of range (allowed: 1..1024)"},
    {7, "value_dim = 0", 7, "value_dim = 0 is out of range"},
    {8, "conv_width = 17", 8, "conv_width = 17 is out of range (allowed: 1..16)"},
    {8, "conv_width = 0", 8, "conv_width = 0 is out of range"},
    {14, "max_requests = 0", 14, "[state] max_requests = 0 is out of range (allowed: 1..1048576)"},
    {14, "max_requests = 1048577", 14, "max_requests = 1048577 is out of range"},
    {15, "max_draft_tokens = 16", 15, "max_draft_tokens = 16 is out of range (allowed: 0..15)"},
    {15, "max_draft_tokens = -1", 15, "max_draft_tokens = -1 is out of range"},
    /* comments: '#' only at the start of a line, in any section */
    {22, "acceptance = 0.5 # not a comment here", 22,
     "'#' starts a comment only at the start of a line; after a value, use ';'"},
    {13, "plugin_dir = /opt/ssm  # the build", 13, "'#' starts a comment only"},
    /* names */
    {10, "mode = Native", 10, "[state] mode = 'Native' is not a plugin name (1 to 48 characters of a-z, 0-9 and _)"},
    {10, "mode = na-tive", 10, "is not a plugin name"},
    {10, "mode = ../evil", 10, "is not a plugin name"},
    {10, "mode =", 10, "[state] mode is not set"},
};

START_TEST(test_bad_value)
{
    const bad_case *c = &bad_values[_i];
    check_parse_error(_i, test_edit_line(BASE_TEXT, c->line, c->replacement), c->error_line, c->phrase);
}
END_TEST

START_TEST(test_bad_lower_bound)
{
    char kda[sizeof BASE_TEXT];
    strcpy(kda, test_edit_line(BASE_TEXT, 2, "kind = kda"));
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = abc"), 9,
                       "[model] lower_bound = 'abc' is not valid (allowed: a number < 0)");
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = nan"), 9, "is not valid");
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = -1e300"), 9,
                       "lower_bound = '-1e300' is out of range");
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound ="), 9, "is not valid");
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = -0x1p2"), 9,
                       "[model] lower_bound = '-0x1p2' is not valid");
}
END_TEST

/* ------------------------------------------------ impossible combinations */

/* [workload] is the command's: whatever its keys and values, the library
 * keeps them as written and judges only the syntax (the command refuses
 * these, tests/check_workload.c). */
static const struct {
    int line;
    const char *replacement;
    const char *key, *value;
} workload_texts[] = {
    {23, "seeds = 1", "seeds", "1"},
    {17, "mode = native", "mode", "native"},
    {17, "requests = 2147483648", "requests", "2147483648"},
    {19, "prompt_max = 2147483647", "prompt_max", "2147483647"},
    {19, "prompt_max = 7", "prompt_max", "7"},
    {22, "acceptance = nan", "acceptance", "nan"},
    {22, "acceptance = 0x1p-1", "acceptance", "0x1p-1"},
    {23, "seed = -1", "seed", "-1"},
    {23, "seed =", "seed", ""},
};

START_TEST(test_workload_not_interpreted)
{
    const int32_t line = workload_texts[_i].line;
    ssm_config *c = parse_ok(test_edit_line(BASE_TEXT, line, workload_texts[_i].replacement));
    int32_t w = ssm_config_find_section(c, "workload");
    ck_assert_int_eq(w, 0);
    ck_assert_int_eq(c->mode_section_lines[w], 16);
    ck_assert_int_eq(c->mode_options_count[w], 7);
    const ssm_mode_option *o = &c->mode_options[w][line - 17];
    ck_assert_str_eq(o->key, workload_texts[_i].key);
    ck_assert_str_eq(o->value, workload_texts[_i].value);
    ck_assert_int_eq(o->line, line);
    ck_assert_int_eq(ssm_config_validate(c), SSM_OK);
    ssm_config_free(c);

    /* A session no run could finish is the command's business too. */
    char many[sizeof BASE_TEXT + 16];
    strcpy(many, test_edit_line(BASE_TEXT, 17, "requests = 1048576"));
    c = parse_ok(test_edit_line(many, 19, "prompt_max = 1048576"));
    ssm_config_free(c);
}
END_TEST

START_TEST(test_value_heads_multiple_of_heads)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 5, "value_heads = 3"), 5,
                       "[model] value_heads = 3 must be a multiple of heads = 2");
    /* GVA the other way round (fewer value heads than key heads) is not a model. */
    expect_parse_error(test_edit_line(BASE_TEXT, 4, "heads = 8"), 5,
                       "value_heads = 4 must be a multiple of heads = 8");
}
END_TEST

START_TEST(test_lower_bound_rules)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 8, "conv_width = 4\nlower_bound = -5"), 9,
                       "[model] lower_bound applies to kind = kda only (this model is gdn)");
    char kda[sizeof BASE_TEXT];
    strcpy(kda, test_edit_line(BASE_TEXT, 2, "kind = kda"));
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = 0"), 9,
                       "[model] lower_bound = 0 must be negative (< 0)");
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = 0.5"), 9,
                       "lower_bound = 0.5 must be negative");
    /* Too small to tell from zero in fp32. */
    expect_parse_error(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = -1e-50"), 9,
                       "must be negative");
    ssm_config *c = parse_ok(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = -0.5"));
    ck_assert_int_eq(c->model.has_lower_bound, 1);
    ck_assert(c->model.lower_bound == -0.5f);
    ssm_config_free(c);
}
END_TEST

/* Tensor parallelism: this context's 2 key heads and 4 value heads are value
 * heads [4, 8) of a model of 4 key heads and 8 value heads. */
START_TEST(test_head_slice)
{
    const char *slice = "conv_width = 4\nmodel_heads = 4\nmodel_value_heads = 8\n"
                        "first_value_head = 4";
    ssm_config *c = parse_ok(test_edit_line(BASE_TEXT, 8, slice));
    ck_assert_int_eq(c->head_slice.heads, 4);
    ck_assert_int_eq(c->head_slice.value_heads, 8);
    ck_assert_int_eq(c->head_slice.first, 4);
    ssm_config_free(c);
    c = parse_ok(BASE_TEXT); /* unset: the whole model */
    ck_assert_int_eq(c->head_slice.heads + c->head_slice.value_heads + c->head_slice.first, 0);
    ssm_config_free(c);
    /* off a key-head group (the group is 2 value heads), at the slice's line */
    expect_parse_error(test_edit_line(BASE_TEXT, 8,
                                 "conv_width = 4\nmodel_heads = 4\nmodel_value_heads = 8\n"
                                 "first_value_head = 3"),
                       11, "head slice: 4 value heads from 3 are not whole key-head groups");
    /* past the model */
    expect_parse_error(test_edit_line(BASE_TEXT, 8,
                                 "conv_width = 4\nmodel_heads = 4\nmodel_value_heads = 8\n"
                                 "first_value_head = 6"),
                       11, "within the model's 8");
    /* another group than the context's */
    expect_parse_error(test_edit_line(BASE_TEXT, 8,
                                 "conv_width = 4\nmodel_heads = 8\nmodel_value_heads = 8"),
                       10, "the model's group is 1");
    expect_parse_error(test_edit_line(BASE_TEXT, 8, "conv_width = 4\nmodel_heads = -1"), 9,
                       "model_heads = -1 is out of range");
    /* first_value_head alone: at its own line, naming what it needs */
    expect_parse_error(test_edit_line(BASE_TEXT, 8, "conv_width = 4\nfirst_value_head = 2"), 9,
                       "head slice: first_value_head = 2 needs the model's model_heads and "
                       "model_value_heads");
}
END_TEST

START_TEST(test_f16_not_offered)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 11, "state_dtype = f16"), 11,
                       "[state] state_dtype = f16: f16 state is not offered yet (allowed: f32, bf16)");
    expect_parse_error(test_edit_line(BASE_TEXT, 11, "state_dtype = fp16"), 11, "f16 state is not offered yet");
    expect_parse_error(test_edit_line(BASE_TEXT, 12, "activation_dtype = f16"), 12,
                       "f16 activation is not offered yet");
}
END_TEST

START_TEST(test_cuda_device)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 13, "device = cuda:-1"), 13,
                       "[state] device = cuda:-1: the CUDA device index must be >= 0");
#ifndef HAVE_CUDA
    expect_parse_error(test_edit_line(BASE_TEXT, 13, "device = cuda"), 13,
                       "[state] device = cuda: this build has no CUDA support (configure --with-cuda)");
    expect_parse_error(test_edit_line(BASE_TEXT, 13, "device = cuda:1"), 13, "no CUDA support");
#else
    ssm_config *c = parse_ok(test_edit_line(BASE_TEXT, 13, "device = cuda:1"));
    ck_assert_int_eq(c->device.type, SSM_DEVICE_CUDA);
    ck_assert_int_eq(c->device.index, 1);
    ssm_config_free(c);
#endif
}
END_TEST

/* ----------------------------------------------------------- syntax */

START_TEST(test_duplicates)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 4, "heads = 2\nlayers = 3"), 5,
                       "duplicate key 'layers' in [model] (first set at line 3)");
    expect_parse_error(BASE_TEXT "[model]\n", 24, "duplicate section [model] (first at line 1)");
    expect_parse_error(BASE_TEXT "[workload]\n", 24, "duplicate section [workload] (first at line 16)");
    expect_parse_error(BASE_TEXT "[replay]\nhistory = 8\n[replay]\n", 26,
                       "duplicate section [replay] (first at line 24)");
    expect_parse_error(BASE_TEXT "[replay]\nhistory = 8\nhistory = 16\n", 26,
                       "duplicate key 'history' in [replay] (first set at line 25)");
}
END_TEST

START_TEST(test_key_outside_section)
{
    expect_parse_error("layers = 2\n" BASE_TEXT, 1,
                       "key 'layers' is outside any section (put it under [model], [state], "
                       "[tuning] or the section of the mode or program that reads it)");
    expect_parse_error("; header comes later\n\nmode = native\n" BASE_TEXT, 3, "is outside any section");
}
END_TEST

START_TEST(test_bad_section_names)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 1, "[Model]"), 1,
                       "bad section name [Model] (section names are 1 to 48 characters of a-z, 0-9 and _)");
    expect_parse_error(BASE_TEXT "[mo del]\n", 24, "bad section name [mo del]");
    expect_parse_error(BASE_TEXT "[]\n", 24, "bad section name []");
    expect_parse_error(BASE_TEXT "[a-b]\n", 24, "bad section name [a-b]");
    expect_parse_error(BASE_TEXT "[ replay ]\n", 24, "bad section name [ replay ]");
    expect_parse_error(BASE_TEXT "[a123456789012345678901234567890123456789012345678]\n", 24,
                       "bad section name");
    ssm_config *c = parse_ok(BASE_TEXT "[a12345678901234567890123456789012345678901234567]\n");
    ck_assert_int_eq(c->mode_sections_count, 2); /* [workload] and this one */
    ssm_config_free(c);
}
END_TEST

START_TEST(test_malformed_lines)
{
    expect_parse_error(test_edit_line(BASE_TEXT, 1, "[model"), 1, "section header has no closing ']'");
    expect_parse_error(test_edit_line(BASE_TEXT, 1, "[model] kind = gdn"), 1, "unexpected text after [model]");
    expect_parse_error(test_edit_line(BASE_TEXT, 3, "novalue"), 3,
                       "expected 'key = value' or '[section]', not 'novalue'");
    expect_parse_error(test_edit_line(BASE_TEXT, 3, "layers ; = 2"), 3, "expected 'key = value'");
    expect_parse_error(test_edit_line(BASE_TEXT, 3, "= 2"), 3, "missing key name before '='");
    /* An indented line is not the continuation of the previous value. */
    expect_parse_error(test_edit_line(BASE_TEXT, 10, "mode = native\n    more"), 11,
                       "expected 'key = value' or '[section]', not 'more'");
    /* Comments after a header are fine; after a value only with " ;". */
    ssm_config *c = parse_ok(test_edit_line(BASE_TEXT, 1, "[model]   ; the model # yes"));
    ssm_config_free(c);
    c = parse_ok(test_edit_line(BASE_TEXT, 22, "acceptance = 0.5 ; a comment # with a hash"));
    ck_assert_str_eq(c->mode_options[ssm_config_find_section(c, "workload")][5].value, "0.5");
    ssm_config_free(c);
}
END_TEST

START_TEST(test_long_line)
{
    static char text[8192];
    char value[5001];
    memset(value, 'a', sizeof value - 1);
    value[sizeof value - 1] = '\0';
    snprintf(text, sizeof text, BASE_TEXT "[native]\nnote = %s\n", value);
    expect_parse_error(text, 25, "line is too long");
}
END_TEST

/* ---------------------------------------------------- mode sections */

START_TEST(test_mode_sections_captured)
{
    const char *text = BASE_TEXT
        "[native]\n"                       /* 24 */
        "[replay]\n"                       /* 25 */
        "; comment\n"                      /* 26 */
        "history = 64\n"                   /* 27 */
        "Odd-Key = a = b : c\n"            /* 28 */
        "empty =\n"                        /* 29 */
        "trailing = x ; comment\n"         /* 30 */
        "[my_mode]\n"                      /* 31 */
        "x = 1\n";                         /* 32 */
    ssm_config *c = parse_ok(text);
    ck_assert_int_eq(c->mode_sections_count, 4); /* [workload] first */
    ck_assert_str_eq(c->mode_section_names[0], "workload");
    ck_assert_int_eq(c->mode_section_lines[0], 16);
    ck_assert_int_eq(c->mode_options_count[0], 7);
    ck_assert_str_eq(c->mode_section_names[1], "native");
    ck_assert_int_eq(c->mode_section_lines[1], 24);
    ck_assert_int_eq(c->mode_options_count[1], 0);
    int32_t replay = ssm_config_find_section(c, "replay");
    ck_assert_int_eq(replay, 2);
    ck_assert_int_eq(c->mode_section_lines[replay], 25);
    ck_assert_int_eq(c->mode_options_count[replay], 4);
    const ssm_mode_option *o = c->mode_options[replay];
    ck_assert_str_eq(o[0].key, "history");
    ck_assert_str_eq(o[0].value, "64");
    ck_assert_int_eq(o[0].line, 27);
    ck_assert_str_eq(o[1].key, "Odd-Key"); /* the plugin judges its own keys */
    ck_assert_str_eq(o[1].value, "a = b : c");
    ck_assert_int_eq(o[1].line, 28);
    ck_assert_str_eq(o[2].key, "empty");
    ck_assert_str_eq(o[2].value, "");
    ck_assert_str_eq(o[3].value, "x");
    ck_assert_int_eq(o[3].line, 30);
    ck_assert_int_eq(ssm_config_find_section(c, "my_mode"), 3);
    ck_assert_int_eq(c->mode_options[3][0].line, 32);
    ck_assert_int_eq(ssm_config_find_section(c, "model"), -1);
    ck_assert_int_eq(ssm_config_find_section(c, "nope"), -1);
    ck_assert_int_eq(ssm_config_find_section(c, NULL), -1);
    ck_assert_int_eq(ssm_config_find_section(NULL, "native"), -1);

    char where[64];
    ck_assert_str_eq(ssm_config_where(c, 27, where, sizeof where), "test.ini:27: ");
    ck_assert_str_eq(ssm_config_where(c, 0, where, sizeof where), "test.ini: ");
    ssm_config plain;
    ssm_config_defaults(&plain);
    ck_assert_str_eq(ssm_config_where(&plain, 27, where, sizeof where), "");
    ssm_config_free(c);
}
END_TEST

/* --------------------------------------------------------- files */

START_TEST(test_load_file)
{
    const char *text = test_edit_line(BASE_TEXT, 15, "max_draft_tokens = 3\nplugin_dir = ./plugins");
    char *path = write_temp_file(text, strlen(text));
    ssm_config *c = NULL;
    ck_assert_msg(ssm_config_load(path, &c) == SSM_OK, "%s", ssm_last_error());
    ck_assert_str_eq(c->source, path);
    ck_assert_int_eq(c->model.layers, 2);
    /* A relative plugin_dir is next to the config file. */
    char expected[PATH_MAX];
    snprintf(expected, sizeof expected, "%.*s/./plugins", (int)(strrchr(path, '/') - path), path);
    ck_assert_str_eq(c->plugin_dir, expected);
    ssm_config_free(c);
    remove_file(path);
}
END_TEST

START_TEST(test_load_relative_path)
{
    /* A config named relative to the cwd: plugin_dir still ends up absolute. */
    const char *text = test_edit_line(BASE_TEXT, 15, "plugin_dir = plugins");
    char *path = write_temp_file(text, strlen(text));
    char *cwd = getcwd(NULL, 0);
    char *dir = strdup(path);
    *strrchr(dir, '/') = '\0';
    const char *slash = strrchr(dir, '/');
    ck_assert_int_eq(strncmp(dir, "/tmp/", 5), 0); /* write_temp_file's directory */
    ck_assert_int_eq(chdir("/tmp"), 0);
    char relative[PATH_MAX];
    snprintf(relative, sizeof relative, "%s/%s", slash + 1, strrchr(path, '/') + 1);
    ssm_config *c = NULL;
    ck_assert_msg(ssm_config_load(relative, &c) == SSM_OK, "%s", ssm_last_error());
    char expected[PATH_MAX];
    snprintf(expected, sizeof expected, "%s/plugins", dir);
    ck_assert_str_eq(c->plugin_dir, expected);
    ck_assert_str_eq(c->source, relative);
    ssm_config_free(c);
    ck_assert_int_eq(chdir(cwd), 0);
    free(cwd);
    free(dir);
    remove_file(path);
}
END_TEST

START_TEST(test_load_errors)
{
    ssm_config sentinel;
    ssm_config *out = &sentinel;
    const char *missing = "/nonexistent/dir/ssm.ini";
    ck_assert_int_eq(ssm_config_load(missing, &out), SSM_ERR_CONFIG);
    ck_assert_ptr_eq(out, &sentinel);
    ck_assert_str_eq(ssm_last_error(),
                     "/nonexistent/dir/ssm.ini: cannot open config file: No such file or directory");

    ck_assert_int_eq(ssm_config_load("/tmp", &out), SSM_ERR_CONFIG);
    ck_assert_ptr_eq(out, &sentinel);
    ck_assert_str_eq(ssm_last_error(), "/tmp: cannot read config file: Is a directory");

    /* A bad file reports its own name and the line. */
    const char *text = test_edit_line(BASE_TEXT, 3, "layers = many");
    char *path = write_temp_file(text, strlen(text));
    ck_assert_int_eq(ssm_config_load(path, &out), SSM_ERR_CONFIG);
    ck_assert_ptr_eq(out, &sentinel);
    char prefix[PATH_MAX + 16];
    snprintf(prefix, sizeof prefix, "%s:3: [model] layers = 'many'", path);
    ck_assert_msg(strncmp(ssm_last_error(), prefix, strlen(prefix)) == 0, "%s", ssm_last_error());
    remove_file(path);

    /* The parser stops at a NUL; the loader says where it is. */
    static const char with_nul[] = "[model]\nkind = gdn\0\nlayers = 2\n";
    path = write_temp_file(with_nul, sizeof with_nul - 1);
    ck_assert_int_eq(ssm_config_load(path, &out), SSM_ERR_CONFIG);
    ck_assert_ptr_eq(out, &sentinel);
    ck_assert_msg(strstr(ssm_last_error(), ":2: NUL byte") != NULL, "%s", ssm_last_error());
    remove_file(path);

    ck_assert_int_eq(ssm_config_load(NULL, &out), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_config_load(missing, NULL), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_config_parse_text(NULL, "x", &out), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(out, &sentinel);
    ssm_config_free(NULL);
}
END_TEST

/* The shipped examples parse, with the shapes their comments promise. */
static ssm_config *load_example(const char *name)
{
    char relative[256], path[PATH_MAX];
    snprintf(relative, sizeof relative, "examples/%s", name);
    test_source_path(path, sizeof path, relative);
    ssm_config *c = NULL;
    ck_assert_msg(ssm_config_load(path, &c) == SSM_OK, "%s", ssm_last_error());
    return c;
}

START_TEST(test_examples)
{
    ssm_config *c = load_example("quickstart.ini");
    ck_assert_int_eq(c->model.kind, SSM_MODEL_GDN);
    ck_assert_int_eq(c->model.value_heads, 4);
    ck_assert_str_eq(c->mode, "native");
    ck_assert_int_eq(c->max_draft_tokens, 3);
    ck_assert_ptr_null(c->plugin_dir);
    ck_assert_int_ge(ssm_config_find_section(c, "workload"), 0); /* kept for the command */
    ssm_config_free(c);

    c = load_example("qwen3-next.ini");
    ck_assert_int_eq(c->model.kind, SSM_MODEL_GDN);
    ck_assert_int_eq(c->model.layers, 36);
    ck_assert_int_eq(ssm_conv_channels(&c->model), 8192);
    ck_assert_int_eq(c->activation_dtype, SSM_DTYPE_BF16);
    ssm_config_free(c);

    c = load_example("kimi-linear.ini");
    ck_assert_int_eq(c->model.kind, SSM_MODEL_KDA);
    ck_assert_int_eq(c->model.has_lower_bound, 0);
    ck_assert_int_eq(ssm_conv_channels(&c->model), 12288);
    ssm_config_free(c);
}
END_TEST

/* ------------------------------------------------------------ clone */

static void assert_same_config(const ssm_config *a, const ssm_config *b)
{
    ck_assert_int_eq(a->model.kind, b->model.kind);
    ck_assert_int_eq(a->model.layers, b->model.layers);
    ck_assert_int_eq(a->model.heads, b->model.heads);
    ck_assert_int_eq(a->model.value_heads, b->model.value_heads);
    ck_assert_int_eq(a->model.key_dim, b->model.key_dim);
    ck_assert_int_eq(a->model.value_dim, b->model.value_dim);
    ck_assert_int_eq(a->model.conv_width, b->model.conv_width);
    ck_assert_int_eq(a->model.has_lower_bound, b->model.has_lower_bound);
    ck_assert(a->model.lower_bound == b->model.lower_bound);
    ck_assert_str_eq(a->mode, b->mode);
    ck_assert_int_eq(a->state_dtype, b->state_dtype);
    ck_assert_int_eq(a->activation_dtype, b->activation_dtype);
    ck_assert_int_eq(a->device.type, b->device.type);
    ck_assert_int_eq(a->device.index, b->device.index);
    ck_assert_int_eq(a->max_requests, b->max_requests);
    ck_assert_int_eq(a->max_draft_tokens, b->max_draft_tokens);
    ck_assert_int_eq(a->plugin_dir == NULL, b->plugin_dir == NULL);
    if (a->plugin_dir)
        ck_assert_str_eq(a->plugin_dir, b->plugin_dir);
    ck_assert_int_eq(a->source == NULL, b->source == NULL);
    if (a->source)
        ck_assert_str_eq(a->source, b->source);
    ck_assert_int_eq(a->mode_sections_count, b->mode_sections_count);
    for (int32_t s = 0; s < a->mode_sections_count; s++) {
        ck_assert_str_eq(a->mode_section_names[s], b->mode_section_names[s]);
        ck_assert_int_eq(a->mode_options_count[s], b->mode_options_count[s]);
        for (int32_t i = 0; i < a->mode_options_count[s]; i++) {
            ck_assert_str_eq(a->mode_options[s][i].key, b->mode_options[s][i].key);
            ck_assert_str_eq(a->mode_options[s][i].value, b->mode_options[s][i].value);
            ck_assert_int_eq(a->mode_options[s][i].line, b->mode_options[s][i].line);
        }
    }
}

START_TEST(test_clone_loaded)
{
    char kda[sizeof BASE_TEXT];
    strcpy(kda, test_edit_line(BASE_TEXT, 2, "kind = kda"));
    ssm_config *c = parse_ok(test_edit_line(kda, 8, "conv_width = 4\nlower_bound = -3.5"));
    ssm_config *copy = NULL;
    ck_assert_int_eq(ssm_config_clone(c, &copy), SSM_OK);
    ck_assert_ptr_ne(copy, c);
    assert_same_config(c, copy);
    ck_assert_ptr_ne(copy->mode, c->mode);
    ck_assert_ptr_ne(copy->source, c->source);
    ssm_config_free(c); /* the copy owns everything it points to */
    ck_assert_str_eq(copy->mode, "native");
    ck_assert(copy->model.lower_bound == -3.5f);
    ck_assert_int_eq(ssm_config_validate(copy), SSM_OK);
    ssm_config *again = NULL;
    ck_assert_int_eq(ssm_config_clone(copy, &again), SSM_OK);
    assert_same_config(copy, again);
    ssm_config_free(copy);
    ssm_config_free(again);

    c = parse_ok(BASE_TEXT "[replay]\nhistory = 64\n[native]\n[compact]\na = 1\nb = 2\n");
    ck_assert_int_eq(ssm_config_clone(c, &copy), SSM_OK);
    assert_same_config(c, copy);
    ck_assert_int_eq(copy->mode_section_lines[0], 16); /* [workload] */
    ck_assert_int_eq(copy->mode_section_lines[1], 24);
    ck_assert_int_eq(copy->mode_section_lines[3], 27);
    ck_assert_ptr_ne(copy->mode_options[0], c->mode_options[0]);
    ssm_config_free(c);
    ssm_config_free(copy);
}
END_TEST

START_TEST(test_clone_struct)
{
    static const ssm_mode_option replay_options[] = {{"history", "32", 0}, {"fold", "eager", 0}};
    const char *names[] = {"replay", "native"};
    const int32_t counts[] = {2, 0};
    const ssm_mode_option *options[] = {replay_options, NULL};
    ssm_config c;
    ssm_config_defaults(&c);
    c.model = (ssm_model_dims){SSM_MODEL_GDN, 4, 2, 4, 16, 16, 4, 0, 0.0f};
    c.mode = "replay";
    c.mode_sections_count = 2;
    c.mode_section_names = names;
    c.mode_section_lines = NULL; /* a struct need not say lines */
    c.mode_options_count = counts;
    c.mode_options = options;
    ck_assert_int_eq(ssm_config_validate(&c), SSM_OK);
    ssm_config *copy = NULL;
    ck_assert_int_eq(ssm_config_clone(&c, &copy), SSM_OK);
    assert_same_config(&c, copy);
    ck_assert_ptr_null(copy->source);
    ck_assert_ptr_null(copy->plugin_dir);
    ck_assert_int_eq(copy->mode_section_lines[0], 0);
    ck_assert_int_eq(ssm_config_find_section(copy, "native"), 1);
    ssm_config_free(copy);

    /* Counts without arrays: refused, nothing returned. */
    ssm_config sentinel;
    ssm_config *out = &sentinel;
    c.mode_options = NULL;
    ck_assert_int_eq(ssm_config_clone(&c, &out), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(out, &sentinel);
    c.mode_sections_count = -1;
    ck_assert_int_eq(ssm_config_clone(&c, &out), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(ssm_config_clone(NULL, &out), SSM_ERR_INVALID_ARGUMENT);
    ck_assert_ptr_eq(out, &sentinel);
}
END_TEST

/* --------------------------------------------------- struct checks */

static void valid_struct(ssm_config *c)
{
    ssm_config_defaults(c);
    c->model = (ssm_model_dims){SSM_MODEL_GDN, 4, 2, 4, 16, 16, 4, 0, 0.0f};
}

/* Validating `c` fails with exactly `message` (no file:line for a struct). */
static void check_struct_error(int at, const ssm_config *c, const char *message)
{
    ck_assert_msg(ssm_config_validate(c) == SSM_ERR_CONFIG, "case %d: accepted", at);
    ck_assert_msg(strcmp(ssm_last_error(), message) == 0, "case %d: '%s', expected '%s'",
                  at, ssm_last_error(), message);
}
#define expect_struct_error(c, message) check_struct_error(__LINE__, c, message)

START_TEST(test_validate_struct)
{
    ssm_config c;
    valid_struct(&c);
    ck_assert_int_eq(ssm_config_validate(&c), SSM_OK);
    ck_assert_int_eq(ssm_config_validate(NULL), SSM_ERR_INVALID_ARGUMENT);

    valid_struct(&c);
    c.model.kind = 0;
    expect_struct_error(&c, "[model] kind = 0 is not a model kind (allowed: gdn, kda)");
    valid_struct(&c);
    c.model.value_heads = 5;
    expect_struct_error(&c, "[model] value_heads = 5 must be a multiple of heads = 2 "
                            "(each key head serves value_heads / heads value heads)");
    valid_struct(&c);
    c.model.key_dim = -4;
    expect_struct_error(&c, "[model] key_dim = -4 is out of range (allowed: 1..1024)");
    valid_struct(&c);
    c.model.has_lower_bound = 1;
    c.model.lower_bound = -5.0f;
    expect_struct_error(&c, "[model] lower_bound applies to kind = kda only (this model is gdn)");
    c.model.kind = SSM_MODEL_KDA;
    ck_assert_int_eq(ssm_config_validate(&c), SSM_OK);
    c.model.lower_bound = 0.0f;
    expect_struct_error(&c, "[model] lower_bound = 0 must be negative (< 0)");
    c.model.lower_bound = NAN;
    expect_struct_error(&c, "[model] lower_bound = nan must be negative (< 0)");
    c.model.has_lower_bound = 0; /* the bound is ignored then */
    ck_assert_int_eq(ssm_config_validate(&c), SSM_OK);

    valid_struct(&c);
    c.mode = NULL;
    expect_struct_error(&c, "[state] mode is not set (name a mode plugin: native, compact, replay, ...)");
    c.mode = "";
    expect_struct_error(&c, "[state] mode is not set (name a mode plugin: native, compact, replay, ...)");
    c.mode = "a/b";
    expect_struct_error(&c, "[state] mode = 'a/b' is not a plugin name (1 to 48 characters of a-z, 0-9 and _)");
    valid_struct(&c);
    c.state_dtype = SSM_DTYPE_F16;
    expect_struct_error(&c, "[state] state_dtype = f16: f16 state is not offered yet (allowed: f32, bf16)");
    valid_struct(&c);
    c.activation_dtype = (ssm_dtype)9;
    expect_struct_error(&c, "[state] activation_dtype = 9 is not a dtype (allowed: f32, bf16)");
    valid_struct(&c);
    c.device = (ssm_device){SSM_DEVICE_CUDA, -2};
    expect_struct_error(&c, "[state] device = cuda:-2: the CUDA device index must be >= 0");
#ifndef HAVE_CUDA
    c.device.index = 0;
    expect_struct_error(&c, "[state] device = cuda: this build has no CUDA support (configure --with-cuda)");
#endif
    c.device = (ssm_device){SSM_DEVICE_CPU, 1};
    expect_struct_error(&c, "[state] device: the CPU has index 0, not 1");
    c.device = (ssm_device){(ssm_device_type)7, 0};
    expect_struct_error(&c, "[state] device type 7 is not a device (allowed: cpu, cuda, cuda:N)");
    valid_struct(&c);
    c.max_requests = 0;
    expect_struct_error(&c, "[state] max_requests = 0 is out of range (allowed: 1..1048576)");
    valid_struct(&c);
    c.max_draft_tokens = 16;
    expect_struct_error(&c, "[state] max_draft_tokens = 16 is out of range (allowed: 0..15)");

    /* A struct that names a source gets it as the prefix, without a line. */
    valid_struct(&c);
    c.source = "engine";
    c.max_requests = -1;
    expect_struct_error(&c, "engine: [state] max_requests = -1 is out of range (allowed: 1..1048576)");
}
END_TEST

START_TEST(test_validate_loaded_then_changed)
{
    ssm_config *c = parse_ok(BASE_TEXT);
    ck_assert_int_eq(ssm_config_validate(c), SSM_OK);
    /* Changed after loading: the file's line would show the old value, so
     * the message names the file only. */
    c->max_requests = 0;
    expect_struct_error(c, "test.ini: [state] max_requests = 0 is out of range (allowed: 1..1048576)");
    ssm_config_free(c);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("config");

    TCase *tc = tcase_create("good");
    tcase_add_test(tc, test_full_config_every_key);
    tcase_add_test(tc, test_aliases_and_layout);
    tcase_add_test(tc, test_plugin_dir_relative_to_cwd);
    suite_add_tcase(s, tc);

    tc = tcase_create("defaults");
    tcase_add_test(tc, test_struct_defaults);
    tcase_add_test(tc, test_file_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("unknown_and_missing");
    tcase_add_test(tc, test_unknown_keys);
    tcase_add_loop_test(tc, test_missing_required_key, 0,
                        (int)(sizeof required_lines / sizeof required_lines[0]));
    tcase_add_test(tc, test_missing_sections);
    suite_add_tcase(s, tc);

    tc = tcase_create("values");
    tcase_add_loop_test(tc, test_bad_value, 0, (int)(sizeof bad_values / sizeof bad_values[0]));
    tcase_add_test(tc, test_bad_lower_bound);
    tcase_add_loop_test(tc, test_workload_not_interpreted, 0,
                        (int)(sizeof workload_texts / sizeof workload_texts[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("combinations");
    tcase_add_test(tc, test_value_heads_multiple_of_heads);
    tcase_add_test(tc, test_lower_bound_rules);
    tcase_add_test(tc, test_head_slice);
    tcase_add_test(tc, test_f16_not_offered);
    tcase_add_test(tc, test_cuda_device);
    suite_add_tcase(s, tc);

    tc = tcase_create("syntax");
    tcase_add_test(tc, test_duplicates);
    tcase_add_test(tc, test_key_outside_section);
    tcase_add_test(tc, test_bad_section_names);
    tcase_add_test(tc, test_malformed_lines);
    tcase_add_test(tc, test_long_line);
    suite_add_tcase(s, tc);

    tc = tcase_create("mode_sections");
    tcase_add_test(tc, test_mode_sections_captured);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_test(tc, test_load_file);
    tcase_add_test(tc, test_load_relative_path);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_examples);
    suite_add_tcase(s, tc);

    tc = tcase_create("clone");
    tcase_add_test(tc, test_clone_loaded);
    tcase_add_test(tc, test_clone_struct);
    suite_add_tcase(s, tc);

    tc = tcase_create("validate_struct");
    tcase_add_test(tc, test_validate_struct);
    tcase_add_test(tc, test_validate_loaded_then_changed);
    suite_add_tcase(s, tc);

    return s;
}
