/* fla's timings, written by bench/fla_bench.py: each timing is a flat JSON
 * object (keys model, batch, tokens, median_us; optional variant, state;
 * others ignored), whether the file holds one per line or a document
 * {"meta": ..., "results": [...]}. The reader scans the file, outside
 * strings, for '{' and takes every flat object there (values: strings,
 * numbers, true, false, null) that has the four keys; other objects (meta,
 * failed rows without median_us, the enclosing document) are skipped. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { VALUE_MAX = 64, FILE_MAX = 64 << 20 };

static const char *skip_space(const char *p)
{
    while (isspace((unsigned char)*p))
        p++;
    return p;
}

/* The string at p into out (cut to VALUE_MAX - 1; out may be NULL);
 * returns the position after its closing quote, or NULL. */
static const char *read_string(const char *p, char *out)
{
    size_t n = 0;
    if (*p++ != '"')
        return NULL;
    while (*p && *p != '"') {
        if (*p == '\\' && p[1])
            p++;
        if (out && n + 1 < VALUE_MAX)
            out[n++] = *p;
        p++;
    }
    if (out)
        out[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

/* A bare value (number, true, false, null) at p into out. */
static const char *read_bare(const char *p, char *out)
{
    size_t n = 0;
    while (*p && (isalnum((unsigned char)*p) || strchr("+-.", *p))) {
        if (n + 1 < VALUE_MAX)
            out[n++] = *p;
        p++;
    }
    out[n] = '\0';
    return n ? p : NULL;
}

/* Stores one key's value; *seen gets a bit per required key, and a value
 * out of range clears the object (returns -1). */
static int take_value(const char *key, const char *value, int quoted, bench_fla_entry *e,
                      unsigned *seen)
{
    char *end = NULL;
    if (!strcmp(key, "model") && quoted) {
        if (strcmp(value, "gdn") && strcmp(value, "kda"))
            return -1;
        e->model = !strcmp(value, "gdn") ? SSM_MODEL_GDN : SSM_MODEL_KDA;
        *seen |= 1u;
    } else if (!strcmp(key, "variant") && quoted) {
        snprintf(e->variant, sizeof e->variant, "%.31s", value);
    } else if (!strcmp(key, "state") && quoted) {
        if (strcmp(value, "f32") && strcmp(value, "bf16"))
            return -1;
        e->state_dtype = !strcmp(value, "f32") ? SSM_DTYPE_F32 : SSM_DTYPE_BF16;
    } else if (!strcmp(key, "batch") || !strcmp(key, "tokens")) {
        long n = strtol(value, &end, 10);
        if (quoted || *end || n < 1 || n > (1 << 24))
            return -1;
        *(!strcmp(key, "batch") ? &e->batch : &e->tokens) = (int32_t)n;
        *seen |= !strcmp(key, "batch") ? 2u : 4u;
    } else if (!strcmp(key, "median_us") && !quoted && strcmp(value, "null") != 0) {
        e->median_us = strtod(value, &end);
        if (*end || !(e->median_us > 0) || !isfinite(e->median_us))
            return -1;
        *seen |= 8u;
    }
    return 0;
}

/* Parses the flat object at p ('{'). Returns 1 when it is one with the four
 * keys (into *e), 0 otherwise. */
static int parse_object(const char *p, bench_fla_entry *e)
{
    char key[VALUE_MAX], value[VALUE_MAX];
    unsigned seen = 0;
    *e = (bench_fla_entry){.state_dtype = SSM_DTYPE_F32};
    p = skip_space(p + 1);
    while (*p != '}') {
        if (!(p = read_string(p, key)) || *(p = skip_space(p)) != ':')
            return 0;
        p = skip_space(p + 1);
        int quoted = *p == '"';
        if (!(p = quoted ? read_string(p, value) : read_bare(p, value)))
            return 0; /* nested, or not JSON */
        if (take_value(key, value, quoted, e, &seen) != 0)
            return 0;
        p = skip_space(p);
        if (*p == ',')
            p = skip_space(p + 1);
        else if (*p != '}')
            return 0;
    }
    return seen == 15u;
}

static int add_entry(bench_fla *fla, int32_t *capacity, const bench_fla_entry *entry)
{
    if (fla->count == *capacity) {
        int32_t grown_capacity = *capacity ? 2 * *capacity : 64;
        bench_fla_entry *grown =
            realloc(fla->entries, (size_t)grown_capacity * sizeof *grown);
        if (!grown)
            return -1;
        fla->entries = grown;
        *capacity = grown_capacity;
    }
    fla->entries[fla->count++] = *entry;
    return 0;
}

/* The whole file, NUL-terminated, or NULL with the reason in error. */
static char *read_file(const char *path, char *error, size_t len)
{
    FILE *file = fopen(path, "rb");
    if (!file) {
        snprintf(error, len, "%s: cannot open", path);
        return NULL;
    }
    long size = fseek(file, 0, SEEK_END) == 0 ? ftell(file) : -1;
    char *text = size >= 0 && size <= FILE_MAX ? malloc((size_t)size + 1) : NULL;
    if (text && (fseek(file, 0, SEEK_SET) != 0 ||
                 fread(text, 1, (size_t)size, file) != (size_t)size)) {
        free(text);
        text = NULL;
    }
    fclose(file);
    if (!text)
        snprintf(error, len, "%s: cannot read it (or it is over 64 MiB)", path);
    else
        text[size] = '\0';
    return text;
}

int bench_fla_load(const char *path, bench_fla *out, char *error, size_t len)
{
    char *text = read_file(path, error, len);
    if (!text)
        return -1;
    bench_fla fla = {NULL, 0};
    int32_t capacity = 0;
    int status = 0;
    for (const char *p = text; status == 0 && *p;) {
        if (*p == '"') { /* never look for objects inside strings */
            const char *after = read_string(p, NULL);
            p = after ? after : p + strlen(p);
            continue;
        }
        bench_fla_entry entry;
        if (*p == '{' && parse_object(p, &entry) && add_entry(&fla, &capacity, &entry) != 0) {
            snprintf(error, len, "%s: out of memory", path);
            status = -1;
        }
        p++;
    }
    free(text);
    if (status == 0 && fla.count == 0) {
        snprintf(error, len, "%s: no timings (objects with model, batch, tokens, median_us)",
                 path);
        status = -1;
    }
    if (status != 0) {
        bench_fla_free(&fla);
        return -1;
    }
    *out = fla;
    return 0;
}

void bench_fla_free(bench_fla *fla)
{
    free(fla->entries);
    fla->entries = NULL;
    fla->count = 0;
}

const bench_fla_entry *bench_fla_find(const bench_fla *fla, ssm_model_kind model,
                                      ssm_dtype state_dtype, int32_t batch, int32_t tokens)
{
    const bench_fla_entry *found = NULL;
    for (int32_t i = 0; fla && i < fla->count; i++) {
        const bench_fla_entry *e = &fla->entries[i];
        if (e->model != model || e->state_dtype != state_dtype || e->batch != batch ||
            e->tokens != tokens)
            continue;
        /* The strongest peer: the fastest of fla's variants for this row. */
        if (!found || e->median_us < found->median_us)
            found = e;
    }
    return found;
}
