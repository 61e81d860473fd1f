/* The command's [workload] section (tools/workload.c): the library loads a
 * config and keeps the section as text; the command reads it. Good sections
 * give the right values and the defaults for what they leave out; every bad
 * one fails with "file:line: message" naming the key, as the library's own
 * keys do, and leaves the result untouched. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "tests/runner.h"
#include "tests/testutil.h"
#include "tools/workload.h"

/* A complete GDN config, one key per line; the numbers are the lines the
 * cases below refer to. */
#define HEAD_TEXT                \
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
    "max_draft_tokens = 3\n"     /* 15 */
#define BASE_TEXT HEAD_TEXT      \
    "[workload]\n"               /* 16 */ \
    "requests = 4\n"             /* 17 */ \
    "prompt_min = 8\n"           /* 18 */ \
    "prompt_max = 32\n"          /* 19 */ \
    "prefill_chunk = 64\n"       /* 20 */ \
    "decode_steps = 8\n"         /* 21 */ \
    "acceptance = 0.7\n"         /* 22 */ \
    "seed = 1\n"                 /* 23 */

/* Only the required keys, and no [workload]: lines 1..12. */
#define MINIMAL_TEXT \
    "[model]\nkind = gdn\nlayers = 2\nheads = 2\nvalue_heads = 4\nkey_dim = 8\n" \
    "value_dim = 16\nconv_width = 4\n[state]\nmode = native\nstate_dtype = f32\n" \
    "max_requests = 4\n"


/* The library loads `text` as test.ini (it must: [workload] is only text
 * to it). */
static ssm_config *load_config(int at, const char *text)
{
    ssm_config *config = NULL;
    ssm_status status = ssm_config_parse_text(text, "test.ini", &config);
    ck_assert_msg(status == SSM_OK, "case %d: the library refused the config: %s", at,
                  ssm_last_error());
    return config;
}

/* The workload of `text`, which must be good. */
static workload read_ok(const char *text)
{
    ssm_config *config = load_config(0, text);
    workload w;
    char err[1024] = "";
    int result = workload_from_config(config, &w, err, sizeof err);
    ck_assert_msg(result == 0, "refused: %s", err);
    ck_assert_str_eq(err, "");
    ssm_config_free(config);
    return w;
}

/* Reading `text`'s [workload] fails with "test.ini:<line>: " first and
 * `phrase` somewhere in the message, and leaves *out alone. */
static void check_error(int at, const char *text, int line, const char *phrase)
{
    ssm_config *config = load_config(at, text);
    workload sentinel, out;
    memset(&sentinel, 0x5a, sizeof sentinel);
    out = sentinel;
    char err[1024] = "";
    ck_assert_msg(workload_from_config(config, &out, err, sizeof err) == -1,
                  "case %d: accepted", at);
    ck_assert_msg(!memcmp(&out, &sentinel, sizeof out), "case %d: *out written on failure", at);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "test.ini:%d: ", line);
    ck_assert_msg(strncmp(err, prefix, strlen(prefix)) == 0, "case %d: expected prefix '%s' in '%s'",
                  at, prefix, err);
    ck_assert_msg(strstr(err, phrase) != NULL, "case %d: expected '%s' in '%s'", at, phrase, err);
    ck_assert_msg(!strchr(err, '\n'), "case %d: not one line: '%s'", at, err);
    ssm_config_free(config);
}
#define expect_error(text, line, phrase) check_error(__LINE__, text, line, phrase)

static void assert_defaults(const workload *w)
{
    ck_assert_int_eq(w->requests, 4);
    ck_assert_int_eq(w->prompt_min, 8);
    ck_assert_int_eq(w->prompt_max, 32);
    ck_assert_int_eq(w->prefill_chunk, 64);
    ck_assert_int_eq(w->decode_steps, 8);
    ck_assert(w->acceptance == 0.7);
    ck_assert(w->seed == 1);
}

/* ------------------------------------------------------------- good */

START_TEST(test_every_key)
{
    workload w = read_ok(HEAD_TEXT "[workload]\nrequests = 9\nprompt_min = 2\nprompt_max = 2\n"
                                   "prefill_chunk = 16\ndecode_steps = 0\nacceptance = 0.25\n"
                                   "seed = 18446744073709551615\n");
    ck_assert_int_eq(w.requests, 9);
    ck_assert_int_eq(w.prompt_min, 2);
    ck_assert_int_eq(w.prompt_max, 2);
    ck_assert_int_eq(w.prefill_chunk, 16);
    ck_assert_int_eq(w.decode_steps, 0);
    ck_assert(w.acceptance == 0.25);
    ck_assert(w.seed == UINT64_MAX);

    /* the bounds themselves */
    w = read_ok(MINIMAL_TEXT "[workload]\nrequests = 1\nprompt_min = 1048576\n"
                             "prompt_max = 1048576\nprefill_chunk = 1048576\n"
                             "decode_steps = 1048576\nacceptance = 1\nseed = 0\n");
    ck_assert_int_eq(w.requests, 1);
    ck_assert_int_eq(w.prompt_min, WORKLOAD_MAX_COUNT);
    ck_assert_int_eq(w.decode_steps, WORKLOAD_MAX_COUNT);
    ck_assert(w.acceptance == 1.0);
    ck_assert(w.seed == 0);
    w = read_ok(MINIMAL_TEXT "[workload]\nacceptance = 0\n");
    ck_assert(w.acceptance == 0.0);
    w = read_ok(MINIMAL_TEXT "[workload]\nacceptance = -0\n");
    ck_assert(w.acceptance == 0.0);
    w = read_ok(MINIMAL_TEXT "[workload]\nacceptance = .5e0\n");
    ck_assert(w.acceptance == 0.5);
    w = read_ok(MINIMAL_TEXT "[workload]\nacceptance = 1e-400\n"); /* underflow: 0 */
    ck_assert(w.acceptance >= 0.0 && w.acceptance < 1e-300);
    w = read_ok(MINIMAL_TEXT "[workload]\nrequests = +7\nseed = 007\n");
    ck_assert_int_eq(w.requests, 7);
    ck_assert(w.seed == 7);
}
END_TEST

START_TEST(test_base_text)
{
    workload w = read_ok(BASE_TEXT);
    assert_defaults(&w); /* BASE_TEXT spells out the defaults */
}
END_TEST

/* Comments and layout are the library's: the value arrives without them. */
START_TEST(test_layout)
{
    workload w = read_ok(test_edit_line(BASE_TEXT, 22, "acceptance = 0.5 ; a comment # with a hash"));
    ck_assert(w.acceptance == 0.5);
    w = read_ok(test_edit_line(BASE_TEXT, 23, "  seed:42   "));
    ck_assert(w.seed == 42);
    w = read_ok(test_edit_line(BASE_TEXT, 16, "[workload]   ; the command's"));
    assert_defaults(&w);
}
END_TEST

/* --------------------------------------------------------- defaults */

START_TEST(test_defaults)
{
    workload w;
    memset(&w, 0xab, sizeof w);
    workload_defaults(&w);
    assert_defaults(&w);

    /* No [workload] at all. */
    w = read_ok(MINIMAL_TEXT);
    assert_defaults(&w);
    /* An empty one. */
    w = read_ok(MINIMAL_TEXT "[workload]\n");
    assert_defaults(&w);
    /* A [workload] that sets one key keeps the others' defaults. */
    w = read_ok(MINIMAL_TEXT "[workload]\nseed = 42\n");
    ck_assert(w.seed == 42);
    ck_assert_int_eq(w.requests, 4);
    ck_assert_int_eq(w.prompt_max, 32);
    ck_assert(w.acceptance == 0.7);
    /* Wherever the section is, among others. */
    w = read_ok("[workload]\nrequests = 3\n[native]\n" MINIMAL_TEXT "[replay]\nhistory = 8\n");
    ck_assert_int_eq(w.requests, 3);
}
END_TEST

/* ------------------------------------------------------ unknown keys */

START_TEST(test_unknown_keys)
{
    expect_error(test_edit_line(BASE_TEXT, 23, "seeds = 1"), 23,
                 "unknown key 'seeds' in [workload] (known keys: requests, prompt_min, "
                 "prompt_max, prefill_chunk, decode_steps, acceptance, seed)");
    /* Keys of one section are unknown in another. */
    expect_error(test_edit_line(BASE_TEXT, 17, "mode = native"), 17, "unknown key 'mode' in [workload]");
    /* Key names are case-sensitive. */
    expect_error(test_edit_line(BASE_TEXT, 23, "Seed = 1"), 23, "unknown key 'Seed' in [workload]");
    /* The first bad line is the one reported. */
    expect_error(test_edit_line(test_edit_line(BASE_TEXT, 23, "nope = 1"), 17, "requests = x"), 17,
                 "[workload] requests = 'x' is not valid");
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
    /* integers that are not */
    {17, "requests = 12x", 17, "[workload] requests = '12x' is not valid (allowed: an integer 1..1048576)"},
    {17, "requests =", 17, "[workload] requests = '' is not valid"},
    {17, "requests = 1 2", 17, "requests = '1 2' is not valid"},
    {17, "requests = 2.0", 17, "requests = '2.0' is not valid"},
    {17, "requests = 0x10", 17, "requests = '0x10' is not valid"},
    {21, "decode_steps = -x", 21, "decode_steps = '-x' is not valid (allowed: an integer 0..1048576)"},
    {17, "requests = 2147483648", 17, "requests = '2147483648' is out of range (allowed: an integer 1..1048576)"},
    {18, "prompt_min = -99999999999999999999", 18, "prompt_min = '-99999999999999999999' is out of range"},
    /* integers out of range */
    {17, "requests = 0", 17, "[workload] requests = 0 is out of range (allowed: 1..1048576)"},
    {18, "prompt_min = 0", 18, "prompt_min = 0 is out of range"},
    /* what a run could not finish: refused here, never left to spin */
    {19, "prompt_max = 2147483647", 19, "[workload] prompt_max = 2147483647 is out of range (allowed: 1..1048576)"},
    {18, "prompt_min = 1048577", 18, "prompt_min = 1048577 is out of range (allowed: 1..1048576)"},
    {17, "requests = 1048577", 17, "requests = 1048577 is out of range (allowed: 1..1048576)"},
    {20, "prefill_chunk = 1048577", 20, "prefill_chunk = 1048577 is out of range (allowed: 1..1048576)"},
    {21, "decode_steps = 2000000", 21, "decode_steps = 2000000 is out of range (allowed: 0..1048576)"},
    {19, "prompt_max = 7", 19, "[workload] prompt_max = 7 must be >= prompt_min = 8"},
    {18, "prompt_min = 33", 19, "prompt_max = 32 must be >= prompt_min = 33"},
    {20, "prefill_chunk = 0", 20, "prefill_chunk = 0 is out of range (allowed: 1..1048576)"},
    {21, "decode_steps = -1", 21, "decode_steps = -1 is out of range (allowed: 0..1048576)"},
    /* floats */
    {22, "acceptance = 1.5", 22, "[workload] acceptance = 1.5 is out of range (allowed: 0..1)"},
    {22, "acceptance = -0.1", 22, "acceptance = -0.1 is out of range"},
    {22, "acceptance = nan", 22, "acceptance = 'nan' is not valid (allowed: 0..1)"},
    {22, "acceptance = inf", 22, "acceptance = 'inf' is not valid"},
    {22, "acceptance = -inf", 22, "acceptance = '-inf' is not valid"},
    {22, "acceptance = 1e999", 22, "acceptance = '1e999' is out of range"},
    {22, "acceptance = 0.5x", 22, "acceptance = '0.5x' is not valid"},
    {22, "acceptance = 0x0.8", 22, "acceptance = '0x0.8' is not valid"},
    {22, "acceptance = 0x1p-1", 22, "is not valid"},
    {22, "acceptance =", 22, "[workload] acceptance = '' is not valid (allowed: 0..1)"},
    {22, "acceptance = .", 22, "acceptance = '.' is not valid"},
    {22, "acceptance = 1e", 22, "acceptance = '1e' is not valid"},
    /* seeds */
    {23, "seed = -1", 23, "[workload] seed = '-1' is not valid (allowed: 0..18446744073709551615)"},
    {23, "seed = +1", 23, "seed = '+1' is not valid"},
    {23, "seed = 18446744073709551616", 23, "seed = '18446744073709551616' is out of range"},
    {23, "seed = 1x", 23, "seed = '1x' is not valid"},
    {23, "seed =", 23, "seed = '' is not valid"},
};

START_TEST(test_bad_value)
{
    const bad_case *c = &bad_values[_i];
    check_error(_i, test_edit_line(BASE_TEXT, c->line, c->replacement), c->error_line, c->phrase);
}
END_TEST

/* A check of two keys reports at the line of the key it names, else (that
 * key left at its default) at the other's. */
START_TEST(test_check_lines)
{
    expect_error(MINIMAL_TEXT "[workload]\nseed = 3\nprompt_min = 33\n", 15,
                 "[workload] prompt_max = 32 must be >= prompt_min = 33");
    expect_error(MINIMAL_TEXT "[workload]\nprompt_max = 4\n", 14,
                 "[workload] prompt_max = 4 must be >= prompt_min = 8");
}
END_TEST

/* Each [workload] key in range, a session too long to finish as a whole. */
START_TEST(test_too_long)
{
    char many[sizeof BASE_TEXT + 16];
    strcpy(many, test_edit_line(BASE_TEXT, 17, "requests = 1048576"));
    expect_error(test_edit_line(many, 19, "prompt_max = 1048576"), 17,
                 "[workload] requests = 1048576 of up to 1048608 tokens each (prompt_max "
                 "1048576 + decode_steps 8 x 4) make a session of 1099545182208 tokens, "
                 "past the 4294967296 a run can finish");
    /* the same session with fewer requests fits */
    strcpy(many, test_edit_line(BASE_TEXT, 17, "requests = 4095"));
    workload w = read_ok(test_edit_line(many, 19, "prompt_max = 1048576"));
    ck_assert_int_eq(w.requests, 4095);
    /* T counts: the same workload without drafts is a quarter of the tokens */
    strcpy(many, test_edit_line(BASE_TEXT, 21, "decode_steps = 1048576"));
    expect_error(test_edit_line(many, 17, "requests = 1024"), 17,
                 "[workload] requests = 1024 of up to 4194336 tokens each (prompt_max 32 + "
                 "decode_steps 1048576 x 4) make a session of 4295000064 tokens");
    strcpy(many, test_edit_line(test_edit_line(BASE_TEXT, 15, "max_draft_tokens = 0"), 21,
                           "decode_steps = 1048576"));
    w = read_ok(test_edit_line(many, 17, "requests = 1024"));
    ck_assert_int_eq(w.decode_steps, WORKLOAD_MAX_COUNT);
}
END_TEST

/* ---------------------------------------------------------- syntax */

/* The library's rules for any section hold in [workload] too: it refuses
 * these itself, at their line. */
START_TEST(test_library_syntax)
{
    static const struct {
        const char *text;
        const char *message;
    } cases[] = {
        {BASE_TEXT "seed = 2\n", "test.ini:24: duplicate key 'seed' in [workload] (first set at line 23)"},
        {BASE_TEXT "[workload]\n", "test.ini:24: duplicate section [workload] (first at line 16)"},
        {MINIMAL_TEXT "[workload]\nacceptance = 0.5 # half\n",
         "test.ini:14: '#' starts a comment only at the start of a line; after a value, use ';'"},
        {MINIMAL_TEXT "[Workload]\n", "test.ini:13: bad section name [Workload]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ssm_config *out = NULL;
        ck_assert_int_eq(ssm_config_parse_text(cases[i].text, "test.ini", &out), SSM_ERR_CONFIG);
        ck_assert_msg(strncmp(ssm_last_error(), cases[i].message, strlen(cases[i].message)) == 0,
                      "case %zu: '%s', expected '%s'", i, ssm_last_error(), cases[i].message);
    }
}
END_TEST

/* --------------------------------------------------------- structs */

/* A config built as a struct: sections without lines, with or without a
 * source; the messages say as much as there is. */
START_TEST(test_struct)
{
    ssm_mode_option options[] = {{"requests", "2", 0}, {"seed", "9", 0}};
    const char *names[] = {"replay", "workload"};
    const int32_t counts[] = {0, 2};
    const ssm_mode_option *all[] = {NULL, options};
    ssm_config c;
    ssm_config_defaults(&c);
    c.mode_sections_count = 2;
    c.mode_section_names = names;
    c.mode_section_lines = NULL;
    c.mode_options_count = counts;
    c.mode_options = all;
    workload w;
    char err[256];
    ck_assert_int_eq(workload_from_config(&c, &w, err, sizeof err), 0);
    ck_assert_int_eq(w.requests, 2);
    ck_assert(w.seed == 9);
    ck_assert_int_eq(w.prompt_max, 32);

    options[0].value = "0";
    ck_assert_int_eq(workload_from_config(&c, &w, err, sizeof err), -1);
    ck_assert_str_eq(err, "[workload] requests = 0 is out of range (allowed: 1..1048576)");
    c.source = "engine";
    ck_assert_int_eq(workload_from_config(&c, &w, err, sizeof err), -1);
    ck_assert_str_eq(err, "engine: [workload] requests = 0 is out of range (allowed: 1..1048576)");
    /* A duplicate the library would have refused in a file. */
    options[0] = (ssm_mode_option){"seed", "1", 4};
    options[1].line = 5;
    ck_assert_int_eq(workload_from_config(&c, &w, err, sizeof err), -1);
    ck_assert_str_eq(err, "engine:5: duplicate key 'seed' in [workload] (first set at line 4)");
    /* No room for the message: still refused. */
    ck_assert_int_eq(workload_from_config(&c, &w, NULL, 0), -1);
    ck_assert_int_eq(workload_from_config(&c, &w, err, 8), -1);
    ck_assert_str_eq(err, "engine:");

    /* No mode sections at all: the defaults. */
    ssm_config_defaults(&c);
    memset(&w, 0, sizeof w);
    ck_assert_int_eq(workload_from_config(&c, &w, err, sizeof err), 0);
    assert_defaults(&w);
}
END_TEST

/* ------------------------------------------------------- examples */

static ssm_config *load_example(const char *name)
{
    char relative[256], path[PATH_MAX];
    snprintf(relative, sizeof relative, "examples/%s", name);
    test_source_path(path, sizeof path, relative);
    ssm_config *c = NULL;
    ck_assert_msg(ssm_config_load(path, &c) == SSM_OK, "%s", ssm_last_error());
    return c;
}

/* Every shipped example's workload reads; the quickstart's is what its
 * comments promise. */
START_TEST(test_examples)
{
    static const char *const names[] = {"quickstart.ini", "native.ini", "compact.ini",
                                        "replay.ini", "qwen3-next.ini", "kimi-linear.ini"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        ssm_config *c = load_example(names[i]);
        workload w;
        char err[1024];
        ck_assert_msg(workload_from_config(c, &w, err, sizeof err) == 0, "%s: %s", names[i], err);
        if (i == 0) {
            ck_assert_int_eq(w.requests, 6);
            ck_assert(w.seed == 42);
        }
        ssm_config_free(c);
    }
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("workload");

    TCase *tc = tcase_create("good");
    tcase_add_test(tc, test_every_key);
    tcase_add_test(tc, test_base_text);
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_defaults);
    suite_add_tcase(s, tc);

    tc = tcase_create("bad");
    tcase_add_test(tc, test_unknown_keys);
    tcase_add_loop_test(tc, test_bad_value, 0, (int)(sizeof bad_values / sizeof bad_values[0]));
    tcase_add_test(tc, test_check_lines);
    tcase_add_test(tc, test_too_long);
    tcase_add_test(tc, test_library_syntax);
    suite_add_tcase(s, tc);

    tc = tcase_create("struct");
    tcase_add_test(tc, test_struct);
    suite_add_tcase(s, tc);

    tc = tcase_create("examples");
    tcase_add_test(tc, test_examples);
    suite_add_tcase(s, tc);

    return s;
}
