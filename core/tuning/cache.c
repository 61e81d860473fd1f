/* The tuning cache file: format, parse, lookup, atomic saves under a lock,
 * the merge of a pass's save (core/tuning/cache.h; the format, the lock and
 * the merge rule are specified in docs/tuning.md).
 *
 * A line is `entry` followed by space-separated name=value fields. Values
 * are percent-encoded: any byte outside [A-Za-z0-9._:/,()*+-] is %XX, so a
 * value never holds a blank, '=', '|' or a line end. */
#include <ctype.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/tuning/cache.h"

static const char *const family_names[SSM_TUNE_FAMILIES] = {"layout", "decode",   "verify",
                                                            "commit", "outputs", "prefill"};

const char *tuning_family_name(int32_t family)
{
    return family >= 0 && family < SSM_TUNE_FAMILIES ? family_names[family] : NULL;
}

int32_t tuning_family_of(const char *name)
{
    for (int32_t f = 0; f < SSM_TUNE_FAMILIES; f++)
        if (!strcmp(family_names[f], name))
            return f;
    return -1;
}

int tuning_key_equal(const tuning_key *a, const tuning_key *b)
{
    return !strcmp(a->device, b->device) && a->cc_major == b->cc_major &&
           a->cc_minor == b->cc_minor && a->driver == b->driver &&
           !strcmp(a->library, b->library) && a->kind == b->kind && a->layers == b->layers &&
           a->heads == b->heads && a->value_heads == b->value_heads &&
           a->key_dim == b->key_dim && a->value_dim == b->value_dim &&
           a->conv_width == b->conv_width && a->has_lower_bound == b->has_lower_bound &&
           (!a->has_lower_bound || a->lower_bound == b->lower_bound) &&
           a->max_tokens == b->max_tokens && a->state_dtype == b->state_dtype &&
           a->activation_dtype == b->activation_dtype && !strcmp(a->mode, b->mode) &&
           a->family == b->family && a->bucket == b->bucket;
}

/* ------------------------------------------------------------ encoding */

static int plain_byte(unsigned char c)
{
    return isalnum(c) || strchr("._:/,()*+-", c) != NULL;
}

/* Appends the encoding of s to buf at *used; 0 when it does not fit. */
static int put_encoded(char *buf, size_t len, size_t *used, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int n = plain_byte(c) ? snprintf(buf + *used, len - *used, "%c", c)
                              : snprintf(buf + *used, len - *used, "%%%02X", c);
        if (n < 0 || (size_t)n >= len - *used)
            return 0;
        *used += (size_t)n;
    }
    return 1;
}

static int put_text(char *buf, size_t len, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int put_text(char *buf, size_t len, size_t *used, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *used, len - *used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len - *used)
        return 0;
    *used += (size_t)n;
    return 1;
}

/* Decodes [s, s + n) into out (out_len bytes with the NUL); 0 on a bad
 * escape, a byte that should have been escaped, or no room. */
static int get_decoded(const char *s, size_t n, char *out, size_t out_len)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            unsigned int byte;
            if (i + 2 >= n)
                return 0;
            if (!isxdigit((unsigned char)s[i + 1]) || !isxdigit((unsigned char)s[i + 2]) ||
                sscanf(s + i + 1, "%2x", &byte) != 1 || byte == 0)
                return 0;
            c = (unsigned char)byte;
            i += 2;
        } else if (!plain_byte(c)) {
            return 0;
        }
        if (o + 1 >= out_len)
            return 0;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 1;
}

static const char *dtype_word(ssm_dtype t)
{
    return t == SSM_DTYPE_F32 ? "f32" : t == SSM_DTYPE_BF16 ? "bf16" : t == SSM_DTYPE_F16 ? "f16" : "?";
}

static int dtype_of(const char *word, ssm_dtype *out)
{
    if (!strcmp(word, "f32"))
        *out = SSM_DTYPE_F32;
    else if (!strcmp(word, "bf16"))
        *out = SSM_DTYPE_BF16;
    else if (!strcmp(word, "f16"))
        *out = SSM_DTYPE_F16;
    else
        return 0;
    return 1;
}

int tuning_entry_format(const tuning_entry *e, char *buf, size_t len)
{
    const tuning_key *k = &e->key;
    size_t used = 0;
    char bound[32] = "none";
    if (k->has_lower_bound)
        snprintf(bound, sizeof bound, "%.9g", (double)k->lower_bound);
    const char *family = tuning_family_name(k->family);
    if (!family || k->bucket < 0 || k->bucket >= SSM_TUNE_BUCKETS || len == 0)
        return 0;
    int ok = put_text(buf, len, &used, "entry device=") &&
             put_encoded(buf, len, &used, k->device) &&
             put_text(buf, len, &used, " cc=%d.%d driver=%d lib=", (int)k->cc_major,
                      (int)k->cc_minor, (int)k->driver) &&
             put_encoded(buf, len, &used, k->library) &&
             put_text(buf, len, &used,
                      " kind=%s layers=%d H=%d HV=%d K=%d V=%d W=%d lb=%s T=%d state=%s act=%s "
                      "mode=",
                      k->kind == SSM_MODEL_KDA ? "kda" : "gdn", (int)k->layers, (int)k->heads,
                      (int)k->value_heads, (int)k->key_dim, (int)k->value_dim,
                      (int)k->conv_width, bound, (int)k->max_tokens, dtype_word(k->state_dtype),
                      dtype_word(k->activation_dtype)) &&
             put_encoded(buf, len, &used, k->mode) &&
             put_text(buf, len, &used, " family=%s rows=%ld", family, 1L << k->bucket);
    if (ok && e->choice[0])
        ok = put_text(buf, len, &used, " choice=") && put_encoded(buf, len, &used, e->choice) &&
             put_text(buf, len, &used, " ms=%.6g", e->ms);
    for (int32_t i = 0; ok && i < e->failed_count; i++)
        ok = put_text(buf, len, &used, " failed=") &&
             put_encoded(buf, len, &used, e->failed[i]) && put_text(buf, len, &used, "|") &&
             put_encoded(buf, len, &used, e->why[i]);
    return ok;
}

/* ------------------------------------------------------------- parsing */

static int parse_int(const char *s, int32_t lo, int32_t hi, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return 0;
    *out = (int32_t)v;
    return 1;
}

/* The key fields an entry must have, by bit. */
enum {
    F_DEVICE = 1 << 0, F_CC = 1 << 1, F_DRIVER = 1 << 2, F_LIB = 1 << 3, F_KIND = 1 << 4,
    F_LAYERS = 1 << 5, F_H = 1 << 6, F_HV = 1 << 7, F_K = 1 << 8, F_V = 1 << 9, F_W = 1 << 10,
    F_LB = 1 << 11, F_T = 1 << 12, F_STATE = 1 << 13, F_ACT = 1 << 14, F_MODE = 1 << 15,
    F_FAMILY = 1 << 16, F_ROWS = 1 << 17, F_ALL = (1 << 18) - 1
};

static ssm_status bad(char *why, size_t len, const char *what, const char *field)
{
    snprintf(why, len, "%s%s%s", what, field ? " " : "", field ? field : "");
    return SSM_ERR_INVALID_ARGUMENT;
}

/* One name=value field into e; `seen` collects the key fields. */
static ssm_status take_field(tuning_entry *e, const char *name, const char *raw, size_t raw_len,
                             int *seen, char *why, size_t why_len)
{
    tuning_key *k = &e->key;
    char value[256];
    if (!strcmp(name, "failed")) {
        const char *bar = memchr(raw, '|', raw_len);
        if (!bar || e->failed_count >= TUNING_MAX_FAILED)
            return bad(why, why_len, "bad field", name);
        int32_t i = e->failed_count;
        if (!get_decoded(raw, (size_t)(bar - raw), e->failed[i], TUNING_NAME_LEN) ||
            !e->failed[i][0] ||
            !get_decoded(bar + 1, raw_len - (size_t)(bar - raw) - 1, e->why[i], TUNING_WHY_LEN))
            return bad(why, why_len, "bad field", name);
        e->failed_count++;
        return SSM_OK;
    }
    if (!get_decoded(raw, raw_len, value, sizeof value))
        return bad(why, why_len, "bad value of", name);
    int bit = 0, ok = 1;
    if (!strcmp(name, "device")) {
        bit = F_DEVICE;
        ok = strlen(value) < sizeof k->device;
        if (ok)
            strcpy(k->device, value);
    } else if (!strcmp(name, "cc")) {
        bit = F_CC;
        char *dot = strchr(value, '.');
        ok = dot != NULL;
        if (ok) {
            *dot = '\0';
            ok = parse_int(value, 0, 1000, &k->cc_major) && parse_int(dot + 1, 0, 1000, &k->cc_minor);
        }
    } else if (!strcmp(name, "driver")) {
        bit = F_DRIVER;
        ok = parse_int(value, 0, INT32_MAX, &k->driver);
    } else if (!strcmp(name, "lib")) {
        bit = F_LIB;
        ok = strlen(value) < sizeof k->library;
        if (ok)
            strcpy(k->library, value);
    } else if (!strcmp(name, "kind")) {
        bit = F_KIND;
        ok = !strcmp(value, "gdn") || !strcmp(value, "kda");
        k->kind = !strcmp(value, "kda") ? SSM_MODEL_KDA : SSM_MODEL_GDN;
    } else if (!strcmp(name, "layers")) {
        bit = F_LAYERS;
        ok = parse_int(value, 1, INT32_MAX, &k->layers);
    } else if (!strcmp(name, "H")) {
        bit = F_H;
        ok = parse_int(value, 1, INT32_MAX, &k->heads);
    } else if (!strcmp(name, "HV")) {
        bit = F_HV;
        ok = parse_int(value, 1, INT32_MAX, &k->value_heads);
    } else if (!strcmp(name, "K")) {
        bit = F_K;
        ok = parse_int(value, 1, INT32_MAX, &k->key_dim);
    } else if (!strcmp(name, "V")) {
        bit = F_V;
        ok = parse_int(value, 1, INT32_MAX, &k->value_dim);
    } else if (!strcmp(name, "W")) {
        bit = F_W;
        ok = parse_int(value, 1, INT32_MAX, &k->conv_width);
    } else if (!strcmp(name, "lb")) {
        bit = F_LB;
        k->has_lower_bound = strcmp(value, "none") != 0;
        if (k->has_lower_bound) {
            char *end;
            double v = strtod(value, &end);
            ok = end != value && !*end && isfinite(v);
            k->lower_bound = (float)v;
        }
    } else if (!strcmp(name, "T")) {
        bit = F_T;
        ok = parse_int(value, 1, INT32_MAX, &k->max_tokens);
    } else if (!strcmp(name, "state")) {
        bit = F_STATE;
        ok = dtype_of(value, &k->state_dtype);
    } else if (!strcmp(name, "act")) {
        bit = F_ACT;
        ok = dtype_of(value, &k->activation_dtype);
    } else if (!strcmp(name, "mode")) {
        bit = F_MODE;
        ok = value[0] && strlen(value) < sizeof k->mode;
        if (ok)
            strcpy(k->mode, value);
    } else if (!strcmp(name, "family")) {
        bit = F_FAMILY;
        k->family = tuning_family_of(value);
        ok = k->family >= 0;
    } else if (!strcmp(name, "rows")) {
        bit = F_ROWS;
        int32_t rows = 0;
        ok = parse_int(value, 1, 1 << (SSM_TUNE_BUCKETS - 1), &rows) && (rows & (rows - 1)) == 0;
        for (k->bucket = 0; ok && (1 << k->bucket) < rows; k->bucket++)
            ;
    } else if (!strcmp(name, "choice")) {
        ok = value[0] && strlen(value) < sizeof e->choice;
        if (ok)
            strcpy(e->choice, value);
    } else if (!strcmp(name, "ms")) {
        char *end;
        e->ms = strtod(value, &end);
        ok = end != value && !*end && isfinite(e->ms) && e->ms >= 0;
    } else {
        return bad(why, why_len, "unknown field", name);
    }
    if (!ok)
        return bad(why, why_len, "bad value of", name);
    if (bit & *seen)
        return bad(why, why_len, "repeated field", name);
    *seen |= bit;
    return SSM_OK;
}

ssm_status tuning_entry_parse(const char *line, tuning_entry *e, char *why, size_t why_len)
{
    memset(e, 0, sizeof *e);
    if (strncmp(line, "entry ", 6))
        return bad(why, why_len, "not an entry", NULL);
    const char *p = line + 6;
    int seen = 0;
    while (*p) {
        const char *end = strchr(p, ' ');
        if (!end)
            end = p + strlen(p);
        const char *eq = memchr(p, '=', (size_t)(end - p));
        char name[16];
        if (!eq || eq == p || (size_t)(eq - p) >= sizeof name)
            return bad(why, why_len, "a field is not name=value", NULL);
        memcpy(name, p, (size_t)(eq - p));
        name[eq - p] = '\0';
        ssm_status st = take_field(e, name, eq + 1, (size_t)(end - eq - 1), &seen, why, why_len);
        if (st != SSM_OK)
            return st;
        p = *end ? end + 1 : end;
    }
    if (seen != F_ALL)
        return bad(why, why_len, "missing key fields", NULL);
    return SSM_OK;
}

/* -------------------------------------------------------------- entries */

tuning_entry *tuning_cache_find(const tuning_cache *cache, const tuning_key *key)
{
    for (int32_t i = 0; i < cache->count; i++)
        if (tuning_key_equal(&cache->entries[i].key, key))
            return &cache->entries[i];
    return NULL;
}

int tuning_entry_same(const tuning_entry *a, const tuning_entry *b)
{
    if (!tuning_key_equal(&a->key, &b->key) || strcmp(a->choice, b->choice) || a->ms != b->ms ||
        a->failed_count != b->failed_count)
        return 0;
    for (int32_t i = 0; i < a->failed_count; i++)
        if (strcmp(a->failed[i], b->failed[i]) || strcmp(a->why[i], b->why[i]))
            return 0;
    return 1;
}

ssm_status tuning_cache_put(tuning_cache *cache, const tuning_entry *e)
{
    tuning_entry *found = tuning_cache_find(cache, &e->key);
    if (found && tuning_entry_same(found, e))
        return SSM_OK;
    if (!found && cache->count == cache->capacity) {
        int32_t capacity = cache->capacity ? 2 * cache->capacity : 16;
        tuning_entry *grown = ssm_realloc(cache->entries, (size_t)capacity * sizeof *grown);
        if (!grown)
            return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory for the tuning cache");
        cache->entries = grown;
        cache->capacity = capacity;
    }
    if (!found)
        found = &cache->entries[cache->count++];
    *found = *e;
    found->changed = 1;
    cache->changes++;
    return SSM_OK;
}

void tuning_cache_free(tuning_cache *cache)
{
    ssm_free(cache->entries);
    memset(cache, 0, sizeof *cache);
}

/* ------------------------------------------------------------- the file */

/* tuning_cache_load, its warnings logged at `level` (the merge's re-read
 * logs at 2: the pass's own load has warned about the same lines). */
static ssm_status load_file(const char *path, tuning_cache *cache, int *missing, int level)
{
    tuning_cache_free(cache);
    *missing = 0;
    FILE *file = fopen(path, "r");
    if (!file) {
        if (errno == ENOENT) {
            *missing = 1;
            return SSM_OK;
        }
        return ssm_error_set(SSM_ERR_CONFIG, "[tuning] cache = '%s' cannot be read: %s", path,
                             strerror(errno));
    }
    char line[TUNING_LINE_MAX];
    int32_t number = 0;
    int header = 0;
    ssm_status status = SSM_OK;
    while (status == SSM_OK && fgets(line, sizeof line, file)) {
        number++;
        size_t n = strlen(line);
        int whole = n > 0 && line[n - 1] == '\n';
        if (!whole && !feof(file)) {
            /* Longer than any entry this library writes: skip the rest. */
            int c;
            while ((c = fgetc(file)) != EOF && c != '\n')
                ;
            ssm_log(level, "tuning cache %s:%d: line too long, ignored", path, (int)number);
            cache->skipped_lines++;
            continue;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0 || line[0] == '#')
            continue;
        if (!header) {
            /* Exactly the line save writes (docs/tuning.md): sscanf's " %d"
             * would also take "...cache1", "+1", "01" or two spaces. */
            char expected[64];
            snprintf(expected, sizeof expected, "%s %d", TUNING_CACHE_MAGIC, TUNING_CACHE_VERSION);
            if (strcmp(line, expected) != 0) {
                ssm_log(level,
                        "tuning cache %s: not a cache of format version %d (first line '%.60s'); "
                        "ignored",
                        path, TUNING_CACHE_VERSION, line);
                tuning_cache_free(cache);
                break;
            }
            header = 1;
            continue;
        }
        tuning_entry e;
        char why[96];
        if (tuning_entry_parse(line, &e, why, sizeof why) != SSM_OK) {
            ssm_log(level, "tuning cache %s:%d: %s; line ignored", path, (int)number, why);
            cache->skipped_lines++;
            continue;
        }
        status = tuning_cache_put(cache, &e);
    }
    fclose(file);
    if (status != SSM_OK)
        tuning_cache_free(cache);
    for (int32_t i = 0; i < cache->count; i++)
        cache->entries[i].changed = 0;
    cache->changes = 0;
    return status;
}

ssm_status tuning_cache_load(const char *path, tuning_cache *cache, int *missing)
{
    return load_file(path, cache, missing, 1);
}

/* Writes `cache` to `path` through a temporary renamed over it (the lock,
 * if any, is the caller's). SSM_ERR_CONFIG with the reason on failure, the
 * old file untouched and the temporary removed. */
static ssm_status write_file(const char *path, const tuning_cache *cache)
{
    /* PATH.tmp.<pid>.<n>: unique across processes (pid) and across the
     * contexts of one process that save at once (n), opened exclusively so
     * two writers never share a temporary. */
    static unsigned long saves;
    unsigned long n = __atomic_fetch_add(&saves, 1ul, __ATOMIC_RELAXED);
    size_t len = strlen(path) + 48;
    char *temporary = ssm_malloc(len);
    if (!temporary)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory");
    snprintf(temporary, len, "%s.tmp.%ld.%lu", path, (long)getpid(), n);
    FILE *file = fopen(temporary, "wx");
    if (!file) {
        ssm_status st = ssm_error_set(SSM_ERR_CONFIG, "[tuning] cache = '%s': cannot write %s: %s",
                                      path, temporary, strerror(errno));
        ssm_free(temporary);
        return st;
    }
    int ok = fprintf(file,
                     "%s %d\n# ssmstate's autotuned launch choices (docs/tuning.md); safe to "
                     "delete\n",
                     TUNING_CACHE_MAGIC, TUNING_CACHE_VERSION) > 0;
    /* One byte short of the reader's buffer: a line it reads whole (at
     * most TUNING_LINE_MAX - 2 bytes and its newline). An entry that does
     * not fit (long candidate names or reasons, percent-encoded) is left
     * out with a log line rather than failing the whole save. */
    char line[TUNING_LINE_MAX - 1];
    for (int32_t i = 0; ok && i < cache->count; i++) {
        const tuning_entry *e = &cache->entries[i];
        if (!tuning_entry_format(e, line, sizeof line)) {
            const char *family = tuning_family_name(e->key.family);
            ssm_log(1, "tuning cache %s: a %s entry (bucket %d) does not fit a line; not saved",
                    path, family ? family : "bad", (int)e->key.bucket);
            continue;
        }
        ok = fprintf(file, "%s\n", line) > 0;
    }
    ok = fflush(file) == 0 && ok;
    ok = fsync(fileno(file)) == 0 && ok;
    int saved_errno = errno;
    ok = fclose(file) == 0 && ok;
    if (ok && rename(temporary, path) != 0) {
        saved_errno = errno;
        ok = 0;
    }
    ssm_status status = SSM_OK;
    if (!ok) {
        remove(temporary);
        status = ssm_error_set(SSM_ERR_CONFIG, "[tuning] cache = '%s' cannot be written: %s", path,
                               strerror(saved_errno ? saved_errno : EIO));
    }
    ssm_free(temporary);
    return status;
}

/* ------------------------------------------------------------ the lock */

int32_t tuning_cache_lock_wait_ms = 10000;

/* PATH.lock, malloc'ed; NULL when out of memory. */
static char *lock_path(const char *path)
{
    size_t len = strlen(path) + sizeof ".lock";
    char *lock = ssm_malloc(len);
    if (lock)
        snprintf(lock, len, "%s.lock", path);
    return lock;
}

/* Opens the lock file, creating it (a file another user owns is opened for
 * reading: flock needs no write access). The descriptor, or -1 with errno. */
static int open_lock(const char *lock)
{
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0 && (errno == EACCES || errno == EROFS || errno == EPERM))
        fd = open(lock, O_RDONLY | O_CLOEXEC);
    return fd;
}

/* Takes flock(LOCK_EX) on fd, polling every millisecond for at most
 * tuning_cache_lock_wait_ms. 1 when held; 0 with errno (EWOULDBLOCK when
 * the wait ran out). */
static int take_lock(int fd)
{
    struct timespec start, now, tick = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return 1;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited_ms = (double)(now.tv_sec - start.tv_sec) * 1e3 +
                           (double)(now.tv_nsec - start.tv_nsec) / 1e6;
        if (waited_ms >= tuning_cache_lock_wait_ms) {
            errno = EWOULDBLOCK;
            return 0;
        }
        nanosleep(&tick, NULL);
    }
}

/* The lock of the cache at `path`: a descriptor holding flock(LOCK_EX) on
 * PATH.lock, or -1 after a warning (the save then goes on without it, as
 * saves did before there was a lock). Never fails otherwise. */
static int lock_cache(const char *path)
{
    char *lock = lock_path(path);
    if (!lock) {
        ssm_log(1, "tuning cache %s: out of memory for its lock; saving without it", path);
        return -1;
    }
    int fd = open_lock(lock);
    if (fd >= 0 && !take_lock(fd)) {
        int saved_errno = errno;
        close(fd);
        fd = -1;
        errno = saved_errno;
    }
    if (fd < 0)
        ssm_log(1, "tuning cache %s: cannot lock %s: %s; saving without the lock", path, lock,
                errno == EWOULDBLOCK ? "another process held it too long" : strerror(errno));
    ssm_free(lock);
    return fd;
}

/* Releases lock_cache's lock (closing the descriptor drops it); -1: none. */
static void unlock_cache(int fd)
{
    if (fd >= 0)
        close(fd);
}

/* ------------------------------------------------------------ the saves */

ssm_status tuning_cache_save(const char *path, const tuning_cache *cache)
{
    int fd = lock_cache(path);
    ssm_status status = write_file(path, cache);
    unlock_cache(fd);
    return status;
}

/* *merged (empty on entry) = the file at `path` as it is now, merged with
 * `mine` as tuning_cache_merge_save says. On error *merged is freed. */
static ssm_status merge_with_file(const char *path, const tuning_cache *mine,
                                  tuning_cache *merged)
{
    int missing = 0;
    ssm_status status = load_file(path, merged, &missing, 1);
    for (int32_t i = 0; status == SSM_OK && i < mine->count; i++) {
        const tuning_entry *e = &mine->entries[i];
        if (e->changed || !tuning_cache_find(merged, &e->key))
            status = tuning_cache_put(merged, e);
    }
    if (status != SSM_OK)
        tuning_cache_free(merged);
    return status;
}

ssm_status tuning_cache_merge_save(const char *path, const tuning_cache *cache)
{
    int fd = lock_cache(path);
    tuning_cache merged = {0};
    ssm_status status = merge_with_file(path, cache, &merged);
    if (status == SSM_OK)
        status = write_file(path, &merged);
    else /* writing this process's entries alone would drop the others' */
        ssm_error_set(status, "tuning cache %s: %s; not saved", path, ssm_last_error());
    tuning_cache_free(&merged);
    unlock_cache(fd);
    return status;
}
