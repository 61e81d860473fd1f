/* The [workload] section (see workload.h). The library hands it over as
 * text: key, value and line of each option, in file order, values trimmed
 * and without their comment, duplicate keys already refused. Numbers are
 * read by the rules of the library's own keys (core/config/parse.c), and
 * errors are worded as the library words its own, so a bad [workload]
 * reads like any other bad key. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "workload.h"

#include "core/config/numbers.h" /* the library's number rules */

/* ------------------------------------------------------------ the keys */

typedef enum workload_key {
    KEY_REQUESTS,
    KEY_PROMPT_MIN,
    KEY_PROMPT_MAX,
    KEY_PREFILL_CHUNK,
    KEY_DECODE_STEPS,
    KEY_ACCEPTANCE,
    KEY_SEED,
    KEY_COUNT,
    KEY_NONE = KEY_COUNT
} workload_key;

/* In the order the checks run (and the known keys are listed). The int
 * keys come first: an int32_t field allowed in [min, max]. */
static const struct {
    const char *name;
    size_t offset;
    int32_t min;
} keys[KEY_COUNT] = {
    [KEY_REQUESTS] = {"requests", offsetof(workload, requests), 1},
    [KEY_PROMPT_MIN] = {"prompt_min", offsetof(workload, prompt_min), 1},
    [KEY_PROMPT_MAX] = {"prompt_max", offsetof(workload, prompt_max), 1},
    [KEY_PREFILL_CHUNK] = {"prefill_chunk", offsetof(workload, prefill_chunk), 1},
    [KEY_DECODE_STEPS] = {"decode_steps", offsetof(workload, decode_steps), 0},
    [KEY_ACCEPTANCE] = {"acceptance", 0, 0},
    [KEY_SEED] = {"seed", 0, 0},
};
#define INT_KEYS KEY_ACCEPTANCE /* keys before it are int keys */

void workload_defaults(workload *w)
{
    *w = (workload){
        .requests = 4,
        .prompt_min = 8,
        .prompt_max = 32,
        .prefill_chunk = 64,
        .decode_steps = 8,
        .acceptance = 0.7,
        .seed = 1,
    };
}

/* ----------------------------------------------------------- values */

/* ----------------------------------------------------------- errors */

/* Where the reading reports: the config (its source) and the lines of the
 * section header and of each key found. */
typedef struct reader {
    const ssm_config *config;
    char *err;
    size_t err_len;
    int32_t header_line;
    int seen[KEY_COUNT];
    int32_t key_lines[KEY_COUNT]; /* 0: not set, or set without a line */
} reader;

/* "source:line: message" into the reader's err (as the library's
 * ssm_config_where: "source: " without a line, nothing without a source);
 * returns -1. */
static int fail_at(reader *r, int32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail_at(reader *r, int32_t line, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    const char *source = r->config->source;
    if (!source)
        snprintf(r->err, r->err_len, "%s", message);
    else if (line > 0)
        snprintf(r->err, r->err_len, "%s:%d: %s", source, (int)line, message);
    else
        snprintf(r->err, r->err_len, "%s: %s", source, message);
    return -1;
}

/* The line of `key`, else of `other` (the key it is compared with), else
 * of the section header: a check reports where the value came from. */
static int32_t line_of(const reader *r, workload_key key, workload_key other)
{
    if (r->key_lines[key])
        return r->key_lines[key];
    if (other != KEY_NONE && r->key_lines[other])
        return r->key_lines[other];
    return r->header_line;
}

static int fail_value(reader *r, int32_t line, workload_key key, const char *value,
                      parse_result result, const char *allowed)
{
    return fail_at(r, line, "[" WORKLOAD_SECTION "] %s = '%s' %s (allowed: %s)", keys[key].name,
                   value, result == PARSE_RANGE ? "is out of range" : "is not valid", allowed);
}

/* -------------------------------------------------------- reading */

static int take_value(reader *r, workload *w, workload_key key, const char *value, int32_t line)
{
    parse_result result;
    if (key < INT_KEYS) {
        int32_t *field = (int32_t *)((char *)w + keys[key].offset);
        result = parse_int32(value, field);
        if (result == PARSE_OK)
            return 0; /* the range: checked with the rest, see check */
        char allowed[64];
        snprintf(allowed, sizeof allowed, "an integer %d..%d", (int)keys[key].min,
                 (int)WORKLOAD_MAX_COUNT);
        return fail_value(r, line, key, value, result, allowed);
    }
    if (key == KEY_ACCEPTANCE) {
        result = parse_double(value, &w->acceptance);
        return result == PARSE_OK ? 0 : fail_value(r, line, key, value, result, "0..1");
    }
    result = parse_uint64(value, &w->seed);
    return result == PARSE_OK ? 0
                              : fail_value(r, line, key, value, result, "0..18446744073709551615");
}

static int take_option(reader *r, workload *w, const ssm_mode_option *option)
{
    for (int k = 0; k < KEY_COUNT; k++) {
        if (strcmp(keys[k].name, option->key) != 0)
            continue;
        if (r->seen[k])
            return fail_at(r, option->line,
                           "duplicate key '%s' in [" WORKLOAD_SECTION "] (first set at line %d)",
                           option->key, (int)r->key_lines[k]);
        r->seen[k] = 1;
        r->key_lines[k] = option->line;
        return take_value(r, w, (workload_key)k, option->value, option->line);
    }
    char known[256];
    size_t used = 0;
    for (int k = 0; k < KEY_COUNT; k++)
        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s", k ? ", " : "",
                                 keys[k].name);
    return fail_at(r, option->line, "unknown key '%s' in [" WORKLOAD_SECTION "] (known keys: %s)",
                   option->key, known);
}

/* Every value in range, then what no key says alone. */
static int check(reader *r, const workload *w, int32_t max_draft_tokens)
{
    for (int k = 0; k < INT_KEYS; k++) {
        int32_t value = *(const int32_t *)((const char *)w + keys[k].offset);
        if (value < keys[k].min || value > WORKLOAD_MAX_COUNT)
            return fail_at(r, line_of(r, (workload_key)k, KEY_NONE),
                           "[" WORKLOAD_SECTION "] %s = %d is out of range (allowed: %d..%d)",
                           keys[k].name, (int)value, (int)keys[k].min, (int)WORKLOAD_MAX_COUNT);
    }
    if (w->prompt_max < w->prompt_min)
        return fail_at(r, line_of(r, KEY_PROMPT_MAX, KEY_PROMPT_MIN),
                       "[" WORKLOAD_SECTION "] prompt_max = %d must be >= prompt_min = %d",
                       (int)w->prompt_max, (int)w->prompt_min);
    if (!(w->acceptance >= 0.0 && w->acceptance <= 1.0)) /* NaN fails too */
        return fail_at(r, line_of(r, KEY_ACCEPTANCE, KEY_NONE),
                       "[" WORKLOAD_SECTION "] acceptance = %g is out of range (allowed: 0..1)",
                       w->acceptance);
    /* Each key in range, the session as a whole may still be past what a
     * run can finish: its tokens, at most. */
    const int64_t tokens_per_round = 1 + (int64_t)max_draft_tokens;
    const int64_t request_tokens = (int64_t)w->prompt_max + (int64_t)w->decode_steps * tokens_per_round;
    if ((int64_t)w->requests * request_tokens > WORKLOAD_MAX_TOKENS)
        return fail_at(r, line_of(r, KEY_REQUESTS, KEY_PROMPT_MAX),
                       "[" WORKLOAD_SECTION "] requests = %d of up to %lld tokens each "
                       "(prompt_max %d + decode_steps %d x %lld) make a session of %lld tokens, "
                       "past the %lld a run can finish",
                       (int)w->requests, (long long)request_tokens, (int)w->prompt_max,
                       (int)w->decode_steps, (long long)tokens_per_round,
                       (long long)w->requests * request_tokens, (long long)WORKLOAD_MAX_TOKENS);
    return 0;
}

int workload_from_config(const ssm_config *config, workload *out, char *err, size_t err_len)
{
    static char unused[1];
    reader r = {config, err_len ? err : unused, err_len ? err_len : sizeof unused, 0, {0}, {0}};
    r.err[0] = '\0';
    workload w;
    workload_defaults(&w);
    int32_t s = -1;
    for (int32_t i = 0; s < 0 && i < config->mode_sections_count && config->mode_section_names;
         i++)
        if (config->mode_section_names[i] &&
            !strcmp(config->mode_section_names[i], WORKLOAD_SECTION))
            s = i;
    if (s >= 0) {
        r.header_line = config->mode_section_lines ? config->mode_section_lines[s] : 0;
        const int32_t count = config->mode_options_count ? config->mode_options_count[s] : 0;
        for (int32_t i = 0; i < count; i++)
            if (take_option(&r, &w, &config->mode_options[s][i]) != 0)
                return -1;
    }
    if (check(&r, &w, config->max_draft_tokens) != 0)
        return -1;
    *out = w;
    return 0;
}
