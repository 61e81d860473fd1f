/* Configuration: INI text to ssm_config (docs/config.md).
 *
 * inih splits lines into sections and `key = value` pairs, but its handler is
 * not told the line number, it reports no section headers, and it forgives
 * what a config must not (text after "]", indented continuation lines). So
 * inih reads the text through read_line() below, which hands it one line at a
 * time: the parser always knows the current line, sees every section header,
 * and rejects a malformed line itself with a message that says what is wrong.
 * (ini_parse_string is the same loop with a reader that counts nothing.)
 *
 * Every error is "source:line: message"; the first one stops the parse. */

#include "config.h" /* the build's */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ini.h>

#include "core/config/numbers.h"
#include "core/config/private.h"

/* A config is a few dozen lines; refuse to slurp something that is not one. */
#define CONFIG_MAX_FILE_BYTES (1 << 20)

/* "name, name, ..." of a section's keys (only the required ones if asked). */
static const char *list_keys(int section, int required_only, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int k = 0; k < KEY_COUNT; k++) {
        if (key_specs[k].section != section || (required_only && !key_specs[k].required))
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", key_specs[k].name);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

static ssm_status fail_at(const char *source, int32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ssm_status fail_at(const char *source, int32_t line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ssm_status status = fail_atv(source, line, fmt, ap);
    va_end(ap);
    return status;
}

/* ----------------------------------------------------------- values */

static int parse_dtype(const char *text, ssm_dtype *out)
{
    if (!strcmp(text, "f32") || !strcmp(text, "fp32"))
        *out = SSM_DTYPE_F32;
    else if (!strcmp(text, "bf16"))
        *out = SSM_DTYPE_BF16;
    else if (!strcmp(text, "f16") || !strcmp(text, "fp16"))
        *out = SSM_DTYPE_F16; /* known, refused by the checks with its own message */
    else
        return 0;
    return 1;
}

/* cpu, cuda (device 0) or cuda:N. */
static int parse_device(const char *text, ssm_device *out)
{
    if (!strcmp(text, "cpu")) {
        *out = (ssm_device){SSM_DEVICE_CPU, 0};
        return 1;
    }
    if (!strcmp(text, "cuda")) {
        *out = (ssm_device){SSM_DEVICE_CUDA, 0};
        return 1;
    }
    int32_t index;
    if (!strncmp(text, "cuda:", 5) && parse_int32(text + 5, &index) == PARSE_OK) {
        *out = (ssm_device){SSM_DEVICE_CUDA, index};
        return 1;
    }
    return 0;
}

static char *join_path(const char *dir, const char *name)
{
    size_t dir_len = strlen(dir);
    int need_slash = dir_len > 0 && dir[dir_len - 1] != '/';
    char *path = ssm_malloc(dir_len + (size_t)need_slash + strlen(name) + 1);
    if (path)
        sprintf(path, "%s%s%s", dir, need_slash ? "/" : "", name);
    return path;
}

/* The absolute directory of `config_path`, or the cwd when there is no file. */
static char *directory_of(const char *config_path)
{
    const char *slash = config_path ? strrchr(config_path, '/') : NULL;
    if (slash && config_path[0] == '/')
        return ssm_strndup(config_path, slash == config_path ? 1 : (size_t)(slash - config_path));
    char *cwd = ssm_getcwd();
    if (!cwd || !slash)
        return cwd;
    char *relative = ssm_strndup(config_path, (size_t)(slash - config_path));
    char *dir = relative ? join_path(cwd, relative) : NULL;
    ssm_free(relative);
    ssm_free(cwd);
    return dir;
}

/* The loader searches plugin_dir long after parsing, from whatever directory
 * the process is in by then; a relative plugin_dir means "next to the config
 * file", so it is made absolute now. NULL (errno set) on failure. */
static char *resolve_plugin_dir(const char *config_path, const char *plugin_dir)
{
    if (plugin_dir[0] == '/' || plugin_dir[0] == '\0')
        return ssm_strdup(plugin_dir);
    char *dir = directory_of(config_path);
    if (!dir)
        return NULL;
    char *resolved = join_path(dir, plugin_dir);
    ssm_free(dir);
    return resolved;
}

/* ---------------------------------------------------------- parsing */

typedef struct parse_state {
    config_owned *owned;
    const char *source;      /* name in messages */
    const char *config_path; /* the file, for a relative plugin_dir; NULL: cwd */
    const char *next;        /* text not yet handed to inih */
    int32_t line;            /* line last handed to inih */
    int section;             /* SECTION_* */
    int32_t mode_section;    /* index of the current mode section */
    int32_t key_lines[KEY_COUNT];
    int32_t header_lines[SECTION_FIXED_COUNT];
    ssm_status status;       /* first error; parsing stops there */
} parse_state;

static ssm_status parse_fail(parse_state *ps, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ssm_status parse_fail(parse_state *ps, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ps->status = fail_atv(ps->source, ps->line, fmt, ap);
    va_end(ap);
    return ps->status;
}

static ssm_status parse_out_of_memory(parse_state *ps)
{
    return ps->status = fail_out_of_memory(ps->source);
}

static ssm_status fail_value(parse_state *ps, config_key key, const char *value,
                             parse_result result, const char *allowed)
{
    const key_spec *spec = &key_specs[key];
    return parse_fail(ps, "[%s] %s = '%s' %s (allowed: %s)", section_names[spec->section],
                      spec->name, value, result == PARSE_RANGE ? "is out of range" : "is not valid",
                      allowed);
}

static ssm_status take_value(parse_state *ps, config_key key, const char *value)
{
    config_owned *owned = ps->owned;
    ssm_config *c = &owned->config;
    const key_spec *spec = &key_specs[key];
    parse_result result;
    if (spec->is_int) {
        int32_t *field = (int32_t *)((char *)c + spec->offset);
        char range[48], allowed[64];
        result = parse_int32(value, field);
        if (result == PARSE_OK)
            return SSM_OK; /* range: checked with everything else, see check_int_keys */
        snprintf(allowed, sizeof allowed, "an integer %s",
                 describe_range(spec, range, sizeof range));
        return fail_value(ps, key, value, result, allowed);
    }
    switch (key) {
    case KEY_KIND:
        if (!strcmp(value, "gdn"))
            c->model.kind = SSM_MODEL_GDN;
        else if (!strcmp(value, "kda"))
            c->model.kind = SSM_MODEL_KDA;
        else
            return fail_value(ps, key, value, PARSE_BAD, "gdn, kda");
        return SSM_OK;
    case KEY_LOWER_BOUND: {
        double bound = 0;
        result = parse_double(value, &bound);
        if (result == PARSE_OK && fabs(bound) > FLT_MAX)
            result = PARSE_RANGE;
        if (result != PARSE_OK)
            return fail_value(ps, key, value, result, "a number < 0");
        c->model.lower_bound = (float)bound;
        c->model.has_lower_bound = 1;
        return SSM_OK;
    }
    case KEY_MODE:
        ssm_free(owned->mode);
        owned->mode = ssm_strdup(value);
        c->mode = owned->mode;
        return owned->mode ? SSM_OK : parse_out_of_memory(ps);
    case KEY_STATE_DTYPE:
        return parse_dtype(value, &c->state_dtype)
                   ? SSM_OK
                   : fail_value(ps, key, value, PARSE_BAD, "f32, bf16");
    case KEY_ACTIVATION_DTYPE:
        return parse_dtype(value, &c->activation_dtype)
                   ? SSM_OK
                   : fail_value(ps, key, value, PARSE_BAD, "f32, bf16");
    case KEY_DEVICE:
        return parse_device(value, &c->device)
                   ? SSM_OK
                   : fail_value(ps, key, value, PARSE_BAD, "cpu, cuda, cuda:N");
    case KEY_PLUGIN_DIR:
        ssm_free(owned->plugin_dir);
        owned->plugin_dir = resolve_plugin_dir(ps->config_path, value);
        c->plugin_dir = owned->plugin_dir;
        if (!owned->plugin_dir && errno == ENOMEM)
            return parse_out_of_memory(ps);
        if (!owned->plugin_dir)
            return parse_fail(ps, "[state] plugin_dir = '%s' cannot be resolved: %s", value,
                              strerror(errno));
        return SSM_OK;
    case KEY_PREFILL_PRECISION:
        if (!strcmp(value, "fast"))
            c->prefill_precision = SSM_PREFILL_PRECISION_FAST;
        else if (!strcmp(value, "high"))
            c->prefill_precision = SSM_PREFILL_PRECISION_HIGH;
        else
            return fail_value(ps, key, value, PARSE_BAD, "fast, high");
        return SSM_OK;
    case KEY_TUNING_MODE:
        if (!strcmp(value, "off"))
            c->tuning.mode = SSM_TUNING_OFF;
        else if (!strcmp(value, "cached"))
            c->tuning.mode = SSM_TUNING_CACHED;
        else if (!strcmp(value, "tune"))
            c->tuning.mode = SSM_TUNING_TUNE;
        else
            return fail_value(ps, key, value, PARSE_BAD, "off, cached, tune");
        return SSM_OK;
    case KEY_TUNING_CACHE:
        /* Relative to the config file's directory, as plugin_dir is. */
        ssm_free(owned->tuning_cache);
        owned->tuning_cache = resolve_plugin_dir(ps->config_path, value);
        c->tuning.cache = owned->tuning_cache;
        if (!owned->tuning_cache && errno == ENOMEM)
            return parse_out_of_memory(ps);
        if (!owned->tuning_cache)
            return parse_fail(ps, "[tuning] cache = '%s' cannot be resolved: %s", value,
                              strerror(errno));
        return SSM_OK;
    default:
        return ps->status = ssm_error_set(SSM_ERR_INTERNAL, "config key %d has no parser",
                                          (int)key);
    }
}

static ssm_status take_mode_option(parse_state *ps, const char *key, const char *value)
{
    config_owned *owned = ps->owned;
    int32_t s = ps->mode_section;
    for (int32_t i = 0; i < owned->options_count[s]; i++)
        if (!strcmp(owned->options[s][i].key, key))
            return parse_fail(ps, "duplicate key '%s' in [%s] (first set at line %d)", key,
                              owned->section_names[s], (int)owned->options[s][i].line);
    if (!owned_add_option(owned, s, key, value, ps->line))
        return parse_out_of_memory(ps);
    return SSM_OK;
}

static ssm_status take_pair(parse_state *ps, const char *name, const char *value)
{
    if (!name[0])
        return parse_fail(ps, "missing key name before '='");
    if (ps->section == SECTION_NONE)
        return parse_fail(ps,
                          "key '%s' is outside any section (put it under [model], [state], "
                          "[tuning] or the section of the mode or program that reads it)",
                          name);
    if (ps->section == SECTION_MODE)
        return take_mode_option(ps, name, value);
    for (int k = 0; k < KEY_COUNT; k++) {
        if (key_specs[k].section != ps->section || strcmp(key_specs[k].name, name))
            continue;
        if (ps->key_lines[k])
            return parse_fail(ps, "duplicate key '%s' in [%s] (first set at line %d)", name,
                              section_names[ps->section], (int)ps->key_lines[k]);
        ps->key_lines[k] = ps->line;
        return take_value(ps, (config_key)k, value);
    }
    char known[256];
    return parse_fail(ps, "unknown key '%s' in [%s] (known keys: %s)", name,
                      section_names[ps->section], list_keys(ps->section, 0, known, sizeof known));
}

/* inih's handler, called for each `key = value` line of the text. */
static int handle_pair(void *user, const char *section, const char *name, const char *value)
{
    parse_state *ps = user;
    (void)section; /* read_line tracked it, with more detail */
    if (ps->status == SSM_OK)
        take_pair(ps, name, value);
    return ps->status == SSM_OK;
}

/* `line` is "[...]" plus whatever follows, NUL-terminated. */
static ssm_status open_section(parse_state *ps, const char *line)
{
    const char *close = strchr(line, ']');
    if (!close)
        return parse_fail(ps, "section header has no closing ']'");
    const char *name = line + 1;
    size_t name_len = (size_t)(close - name);
    const char *rest = close + 1;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    if (*rest != '\n' && *rest != '\0' && *rest != ';' && *rest != '#')
        return parse_fail(ps, "unexpected text after [%.*s]", (int)name_len, name);
    if (!is_plain_name(name, name_len))
        return parse_fail(ps,
                          "bad section name [%.*s] (section names are 1 to %d characters of "
                          "a-z, 0-9 and _)",
                          (int)name_len, name, CONFIG_MAX_NAME);
    for (int s = 0; s < SECTION_FIXED_COUNT; s++) {
        if (strlen(section_names[s]) != name_len || strncmp(section_names[s], name, name_len))
            continue;
        if (ps->header_lines[s])
            return parse_fail(ps, "duplicate section [%s] (first at line %d)", section_names[s],
                              (int)ps->header_lines[s]);
        ps->header_lines[s] = ps->line;
        ps->section = s;
        return SSM_OK;
    }
    config_owned *owned = ps->owned;
    for (int32_t s = 0; s < owned->config.mode_sections_count; s++)
        if (strlen(owned->section_names[s]) == name_len &&
            !strncmp(owned->section_names[s], name, name_len))
            return parse_fail(ps, "duplicate section [%.*s] (first at line %d)", (int)name_len,
                              name, (int)owned->section_lines[s]);
    int32_t index = owned_add_section(owned, name, name_len, ps->line);
    if (index < 0)
        return parse_out_of_memory(ps);
    ps->section = SECTION_MODE;
    ps->mode_section = index;
    return SSM_OK;
}

/* Where inih would end a key: at '=' or ':', or at a ';' comment that follows
 * a blank. */
static const char *find_separator(const char *s)
{
    int after_blank = 0;
    while (*s && *s != '=' && *s != ':' && !(after_blank && *s == ';')) {
        after_blank = isspace((unsigned char)*s);
        s++;
    }
    return s;
}

/* Checks a line (leading blanks gone, NUL-terminated) before inih sees it.
 * Section headers are handled here, as inih reports none. */
static ssm_status check_line(parse_state *ps, const char *line)
{
    if (line[0] == '\n' || line[0] == '\0' || line[0] == ';' || line[0] == '#')
        return SSM_OK; /* blank or comment */
    if (line[0] == '[')
        return open_section(ps, line);
    const char *separator = find_separator(line);
    if (*separator != '=' && *separator != ':') {
        size_t len = strcspn(line, "\n");
        return parse_fail(ps, "expected 'key = value' or '[section]', not '%.*s'", (int)len, line);
    }
    /* inih ends a value at " ;" only; " #" would stay in it (a path that
     * fails much later, far from this line). */
    for (const char *p = separator + 1; *p && !(*p == ';' && isspace((unsigned char)p[-1])); p++)
        if (*p == '#' && (p[-1] == ' ' || p[-1] == '\t'))
            return parse_fail(ps, "'#' starts a comment only at the start of a line; after a "
                                  "value, use ';'");
    return SSM_OK;
}

/* inih's reader: the next line into `buffer` (of `size` bytes), or NULL at
 * the end or after an error. Leading blanks are dropped so inih never takes
 * an indented line for the continuation of the previous value. */
static char *read_line(char *buffer, int size, void *stream)
{
    parse_state *ps = stream;
    if (ps->status != SSM_OK || ps->next[0] == '\0')
        return NULL;
    const char *start = ps->next;
    const char *end = strchr(start, '\n');
    if (!end)
        end = start + strlen(start);
    ps->next = end[0] ? end + 1 : end;
    ps->line++;
    while (start < end && isspace((unsigned char)*start))
        start++;
    while (end > start && isspace((unsigned char)end[-1])) /* "\r" of CRLF too */
        end--;
    size_t len = (size_t)(end - start);
    if (size < 3 || len > (size_t)size - 2) {
        parse_fail(ps, "line is too long (at most %d characters)", size - 2);
        return NULL;
    }
    memcpy(buffer, start, len);
    buffer[len] = '\n';
    buffer[len + 1] = '\0';
    if (check_line(ps, buffer) != SSM_OK)
        return NULL;
    return buffer;
}

/* Every required key present; else the first missing one, at its section's
 * header, or at line 1 when the whole section is missing. */
static ssm_status check_required(parse_state *ps)
{
    for (int k = 0; k < KEY_COUNT; k++) {
        const key_spec *spec = &key_specs[k];
        if (!spec->required || ps->key_lines[k])
            continue;
        int32_t header = ps->header_lines[spec->section];
        if (!header) {
            char required[256];
            ps->line = 1;
            return parse_fail(ps, "missing section [%s] (it needs: %s)", section_names[spec->section],
                              list_keys(spec->section, 1, required, sizeof required));
        }
        ps->line = header;
        return parse_fail(ps, "[%s] is missing required key '%s'", section_names[spec->section],
                          spec->name);
    }
    return SSM_OK;
}

/* The one path of ssm_config_load and ssm_config_parse_text. */
static ssm_status parse_config(const char *text, const char *source, const char *config_path,
                               ssm_config **out)
{
    parse_state ps = {.source = source, .config_path = config_path, .next = text,
                      .section = SECTION_NONE, .status = SSM_OK};
    ps.owned = owned_new();
    if (!ps.owned)
        return fail_out_of_memory(source);
    config_owned *owned = ps.owned;
    /* A file's defaults differ from a struct's: engines run bf16 activations. */
    owned->config.activation_dtype = SSM_DTYPE_BF16;
    owned->config.mode = NULL;
    owned->source = ssm_strdup(source);
    if (!owned->source) {
        owned_free(owned);
        return fail_out_of_memory(source);
    }
    if (!strncmp(ps.next, "\xEF\xBB\xBF", 3)) /* UTF-8 byte order mark */
        ps.next += 3;

    int first_error = ini_parse_stream(read_line, &ps, handle_pair, &ps);
    if (ps.status == SSM_OK && first_error == -2)
        ps.status = fail_out_of_memory(source);
    else if (ps.status == SSM_OK && first_error != 0)
        /* read_line should have caught whatever inih objects to. */
        ps.status = fail_at(source, first_error, "syntax error");
    if (ps.status == SSM_OK)
        check_required(&ps);
    owned_publish(owned);
    if (ps.status == SSM_OK) {
        checker ck = {&owned->config, ps.key_lines, ps.header_lines};
        ps.status = check_config(&ck);
    }
    if (ps.status != SSM_OK) {
        owned_free(owned);
        return ps.status;
    }
    *out = &owned->config;
    return SSM_OK;
}

ssm_status ssm_config_parse_text(const char *text, const char *source, ssm_config **out)
{
    if (!text || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_config_parse_text: %s is NULL",
                             text ? "out" : "text");
    return parse_config(text, source ? source : "<string>", NULL, out);
}

/* The whole file, NUL-terminated, in *out (the caller frees it). */
static ssm_status read_text_file(const char *path, char **out)
{
    FILE *file = fopen(path, "rb");
    if (!file)
        return fail_at(path, 0, "cannot open config file: %s", strerror(errno));
    size_t size = 0, capacity = 4096;
    char *text = ssm_malloc(capacity);
    ssm_status status = text ? SSM_OK : fail_out_of_memory(path);
    while (status == SSM_OK) {
        if (size + 1 == capacity) {
            char *grown = capacity >= CONFIG_MAX_FILE_BYTES ? NULL : ssm_realloc(text, 2 * capacity);
            if (!grown) {
                status = capacity >= CONFIG_MAX_FILE_BYTES
                             ? fail_at(path, 0, "not a config file: larger than %d bytes",
                                       CONFIG_MAX_FILE_BYTES)
                             : fail_out_of_memory(path);
                break;
            }
            text = grown;
            capacity *= 2;
        }
        size_t n = fread(text + size, 1, capacity - 1 - size, file);
        size += n;
        if (n == 0)
            break;
    }
    if (status == SSM_OK && ferror(file))
        status = fail_at(path, 0, "cannot read config file: %s", strerror(errno));
    fclose(file);
    if (status == SSM_OK) {
        text[size] = '\0';
        /* The parser stops at a NUL; say so rather than ignore the rest. */
        const char *nul = memchr(text, '\0', size);
        if (nul) {
            int32_t line = 1;
            for (const char *p = text; p < nul; p++)
                line += *p == '\n';
            status = fail_at(path, line, "NUL byte in the config file");
        }
    }
    if (status != SSM_OK) {
        ssm_free(text);
        return status;
    }
    *out = text;
    return SSM_OK;
}

ssm_status ssm_config_load(const char *path, ssm_config **out)
{
    if (!path || !out)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT, "ssm_config_load: %s is NULL",
                             path ? "out" : "path");
    char *text = NULL;
    ssm_status status = read_text_file(path, &text);
    if (status != SSM_OK)
        return status;
    status = parse_config(text, path, path, out);
    ssm_free(text);
    return status;
}
