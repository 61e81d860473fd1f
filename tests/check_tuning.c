/* Tuning (docs/tuning.md), everything that runs
 * without a GPU:
 *
 * 1. the cache file: an entry's round trip through a line and through a
 *    saved file; keys that differ in any one field do not match; files of
 *    another version, not a cache, with corrupt or unknown lines, or with
 *    an endless line are read without a crash (bad lines skipped); values
 *    the writer never produces and lines missing a key field are refused,
 *    the edges of each range read; families and buckets out of range have
 *    no line; CRLF line ends and a last line without its newline are read,
 *    a header with more after the version is not a cache; the longest line
 *    a save writes is read back whole; saves are atomic (no temporary
 *    left, a failed save leaves the old file); a put marks only real
 *    changes (a failure's reason included); merged saves keep every process's entries
 *    under the lock on PATH.lock, and go on without it (a warning) when it
 *    is held too long or cannot be created, or out of memory.
 * 2. passes with a fake candidate runner: the fastest candidate chosen, a
 *    candidate that fails recorded with its reason and never run again, an
 *    out-of-memory scratch recorded for every candidate, mode cached reads
 *    only, a runner error ends the pass with the cache unsaved.
 * 3. [tuning] in the config: values, ranges, a cache required unless off,
 *    unknown keys; the struct form checked the same way.
 * 4. contexts: CPU contexts accept every mode and tune nothing (no file is
 *    written); through the test hook a CPU context tunes at creation and
 *    at ssm_tune, saves the cache, installs the choices, and ssm_tune is
 *    refused while a forward is open; mode tune with a cache that cannot be
 *    written is a config error; a context that finds everything cached does
 *    not rewrite the file; three processes tuning one file at once lose no
 *    entry.
 * 5. the ticket's layout: the probe mode (tests/plugins/layout_probe.c)
 *    shows every verify of a forward and its commit run the layout chosen
 *    for the forward's bucket when it opened, two forwards of different
 *    buckets keep their own, a ticket with an altered layout is foreign and
 *    commits nothing, the test-only layout is ignored without its
 *    environment variable, and a mode without SSM_CAP_LAYOUTS gets 0. */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/tuning/tuning.h"
#include "tests/expect.h"
#include "tests/runner.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------ helpers */

static char *temp_dir(void)
{
    char template[] = "/tmp/ssm_tuning_XXXXXX";
    char *dir = mkdtemp(template);
    ck_assert_ptr_nonnull(dir);
    return strdup(dir);
}

static char *path_in(const char *dir, const char *name)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    return path;
}

/* Removes every file of dir, then dir. */
static void remove_dir(char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *p = path_in(dir, e->d_name);
            if (remove(p) != 0)
                rmdir(p);
            free(p);
        }
        closedir(d);
    }
    rmdir(dir);
    free(dir);
}

static int files_in(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *text = calloc(1, 1 << 20);
    size_t n = fread(text, 1, (1 << 20) - 1, f);
    text[n] = '\0';
    fclose(f);
    return text;
}

static const ssm_model_dims small_gdn = {.kind = SSM_MODEL_GDN, .layers = 2, .heads = 1,
                                         .value_heads = 2, .key_dim = 8, .value_dim = 8,
                                         .conv_width = 4};

/* The key a context of `mode` over small_gdn, T_max 4, f32/f32, on the
 * hook's device "fake" has (what core/tuning/context.c builds). */
static tuning_key context_key(const char *mode, int32_t family, int32_t bucket)
{
    tuning_key k;
    memset(&k, 0, sizeof k);
    snprintf(k.device, sizeof k.device, "fake");
    snprintf(k.library, sizeof k.library, "%d.%d.%d", SSMSTATE_VERSION_MAJOR,
             SSMSTATE_VERSION_MINOR, SSMSTATE_VERSION_PATCH);
    k.kind = small_gdn.kind;
    k.layers = small_gdn.layers;
    k.heads = small_gdn.heads;
    k.value_heads = small_gdn.value_heads;
    k.key_dim = small_gdn.key_dim;
    k.value_dim = small_gdn.value_dim;
    k.conv_width = small_gdn.conv_width;
    k.max_tokens = 4;
    k.state_dtype = SSM_DTYPE_F32;
    k.activation_dtype = SSM_DTYPE_F32;
    snprintf(k.mode, sizeof k.mode, "%s", mode);
    k.family = family;
    k.bucket = bucket;
    return k;
}

static tuning_entry full_entry(void)
{
    tuning_entry e;
    memset(&e, 0, sizeof e);
    snprintf(e.key.device, sizeof e.key.device, "NVIDIA H200 (MIG 1g.18gb) 100%% = ok|x");
    e.key.cc_major = 9;
    e.key.cc_minor = 0;
    e.key.driver = 13000;
    snprintf(e.key.library, sizeof e.key.library, "0.1.0");
    e.key.kind = SSM_MODEL_KDA;
    e.key.layers = 20;
    e.key.heads = 32;
    e.key.value_heads = 32;
    e.key.key_dim = 128;
    e.key.value_dim = 128;
    e.key.conv_width = 4;
    e.key.has_lower_bound = 1;
    e.key.lower_bound = -5.25f;
    e.key.max_tokens = 4;
    e.key.state_dtype = SSM_DTYPE_BF16;
    e.key.activation_dtype = SSM_DTYPE_F32;
    snprintf(e.key.mode, sizeof e.key.mode, "compact");
    e.key.family = SSM_TUNE_VERIFY;
    e.key.bucket = 6;
    snprintf(e.choice, sizeof e.choice, "blocks=6");
    e.ms = 0.0123456;
    e.failed_count = 2;
    snprintf(e.failed[0], TUNING_NAME_LEN, "blocks=1");
    snprintf(e.why[0], TUNING_WHY_LEN, "launch: too many resources requested for launch");
    snprintf(e.failed[1], TUNING_NAME_LEN, "no-overlap");
    snprintf(e.why[1], TUNING_WHY_LEN, "out of memory; 50%% = a=b|c\ttab");
    return e;
}

static void assert_entries_equal(const tuning_entry *a, const tuning_entry *b)
{
    ck_assert_msg(tuning_key_equal(&a->key, &b->key), "keys differ");
    ck_assert_str_eq(a->choice, b->choice);
    ck_assert_msg(a->ms == b->ms || (a->ms > 0 && b->ms / a->ms > 0.99999 && b->ms / a->ms < 1.00001),
                  "ms %g vs %g", a->ms, b->ms);
    ck_assert_int_eq(a->failed_count, b->failed_count);
    for (int32_t i = 0; i < a->failed_count; i++) {
        ck_assert_str_eq(a->failed[i], b->failed[i]);
        ck_assert_str_eq(a->why[i], b->why[i]);
    }
}

/* ========================================================= 1. the file */

START_TEST(test_entry_round_trip)
{
    tuning_entry e = full_entry(), back;
    char line[2048], why[96];
    ck_assert(tuning_entry_format(&e, line, sizeof line));
    ck_assert_msg(!strchr(line, '\n') && !strchr(line, '\t'), "a line holds no line end or tab");
    EXPECT(tuning_entry_parse(line, &back, why, sizeof why), SSM_OK);
    assert_entries_equal(&e, &back);
    /* No choice (every candidate failed), no bound, GDN. */
    e.choice[0] = '\0';
    e.ms = 0;
    e.key.has_lower_bound = 0;
    e.key.kind = SSM_MODEL_GDN;
    ck_assert(tuning_entry_format(&e, line, sizeof line));
    EXPECT(tuning_entry_parse(line, &back, why, sizeof why), SSM_OK);
    assert_entries_equal(&e, &back);
    ck_assert(!back.key.has_lower_bound);
    /* Too small a buffer is refused, not cut. */
    ck_assert(!tuning_entry_format(&e, line, 40));
}
END_TEST

START_TEST(test_file_round_trip)
{
    char *dir = temp_dir(), *path = path_in(dir, "tuning.cache");
    tuning_cache cache = {0}, back = {0};
    tuning_entry e = full_entry();
    for (int32_t b = 0; b < 5; b++) {
        e.key.bucket = b;
        e.ms = 0.5 + b;
        EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    }
    EXPECT(tuning_cache_put(&cache, &e), SSM_OK); /* the same key: replaced */
    ck_assert_int_eq(cache.count, 5);
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    int missing = 1;
    EXPECT(tuning_cache_load(path, &back, &missing), SSM_OK);
    ck_assert_int_eq(missing, 0);
    ck_assert_int_eq(back.count, 5);
    ck_assert_int_eq(back.skipped_lines, 0);
    for (int32_t i = 0; i < 5; i++) {
        const tuning_entry *found = tuning_cache_find(&back, &cache.entries[i].key);
        ck_assert_ptr_nonnull(found);
        assert_entries_equal(&cache.entries[i], found);
    }
    /* A missing file is an empty cache, and says so. */
    char *none = path_in(dir, "absent.cache");
    EXPECT(tuning_cache_load(none, &back, &missing), SSM_OK);
    ck_assert_int_eq(missing, 1);
    ck_assert_int_eq(back.count, 0);
    free(none);
    tuning_cache_free(&cache);
    tuning_cache_free(&back);
    free(path);
    remove_dir(dir);
}
END_TEST

/* Every field of the key takes part in the match. */
START_TEST(test_keys_differing_in_one_field)
{
    tuning_entry e = full_entry();
    tuning_cache cache = {0};
    EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    const int fields = 21;
    for (int f = 0; f < fields; f++) {
        tuning_key k = e.key;
        switch (f) {
        case 0: k.device[0] = 'M'; break;
        case 1: k.cc_major = 8; break;
        case 2: k.cc_minor = 1; break;
        case 3: k.driver = 12080; break;
        case 4: snprintf(k.library, sizeof k.library, "0.2.0"); break;
        case 5: k.kind = SSM_MODEL_GDN; break;
        case 6: k.layers = 36; break;
        case 7: k.heads = 16; break;
        case 8: k.value_heads = 64; break;
        case 9: k.key_dim = 64; break;
        case 10: k.value_dim = 64; break;
        case 11: k.conv_width = 3; break;
        case 12: k.has_lower_bound = 0; break;
        case 13: k.lower_bound = -5.0f; break;
        case 14: k.max_tokens = 2; break;
        case 15: k.state_dtype = SSM_DTYPE_F32; break;
        case 16: k.activation_dtype = SSM_DTYPE_BF16; break;
        case 17: snprintf(k.mode, sizeof k.mode, "native"); break;
        case 18: k.family = SSM_TUNE_DECODE; break;
        case 19: k.bucket = 7; break;
        case 20: snprintf(k.mode, sizeof k.mode, TUNING_ANY_MODE); break;
        }
        ck_assert_msg(!tuning_key_equal(&k, &e.key), "field %d: keys still equal", f);
        ck_assert_msg(tuning_cache_find(&cache, &k) == NULL, "field %d: found", f);
    }
    ck_assert_ptr_nonnull(tuning_cache_find(&cache, &e.key));
    tuning_cache_free(&cache);
}
END_TEST

/* Bad lines, another version, not a cache, an endless line: read without a
 * crash, bad lines skipped, the good ones kept. */
START_TEST(test_corrupt_files)
{
    char *dir = temp_dir(), *path = path_in(dir, "c.cache");
    tuning_entry e = full_entry();
    char good[2048];
    ck_assert(tuning_entry_format(&e, good, sizeof good));
    const char *bad_lines[] = {
        "entry",
        "entry device=x",
        "garbage line",
        "entry device=a cc=9 driver=1",                      /* cc without a dot */
        "entry nonsense=1",                                   /* unknown field */
        "entry device=%zz",                                   /* bad escape */
        "entry device=%",                                     /* cut escape */
        "entry device=a b",                                   /* not name=value */
        "\x01\x02\xff\xfe",
    };
    size_t n = sizeof bad_lines / sizeof *bad_lines;
    char *text = calloc(1, 64 * 1024);
    strcat(text, TUNING_CACHE_MAGIC " 1\n# a comment\n\n");
    for (size_t i = 0; i < n; i++) {
        strcat(text, bad_lines[i]);
        strcat(text, "\n");
    }
    strcat(text, good);
    strcat(text, "\n");
    /* the good line with its rows field corrupted, and with one field twice */
    char broken[2100];
    snprintf(broken, sizeof broken, "%s", good);
    char *rows = strstr(broken, " rows=");
    ck_assert_ptr_nonnull(rows);
    rows[6] = '3'; /* rows=3..: not a power of two */
    strcat(text, broken);
    strcat(text, "\n");
    snprintf(broken, sizeof broken, "%s K=128", good);
    strcat(text, broken);
    strcat(text, "\n");
    write_text(path, text);
    tuning_cache cache = {0};
    int missing = 0;
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 1);
    ck_assert_int_eq(cache.skipped_lines, (int)n + 2);
    assert_entries_equal(&e, &cache.entries[0]);

    /* Another format version: the whole file is ignored. */
    snprintf(text, 64 * 1024, TUNING_CACHE_MAGIC " 2\n%s\n", good);
    write_text(path, text);
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 0);
    /* Not a cache at all (an entry before any header). */
    snprintf(text, 64 * 1024, "%s\n", good);
    write_text(path, text);
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 0);
    /* An empty file. */
    write_text(path, "");
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 0);
    /* A line longer than any entry, then a good one. */
    FILE *f = fopen(path, "w");
    fprintf(f, TUNING_CACHE_MAGIC " 1\nentry ");
    for (int i = 0; i < 10000; i++)
        fputs("device=xxxxxxxx ", f);
    fprintf(f, "\n%s\n", good);
    fclose(f);
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 1);
    ck_assert_int_eq(cache.skipped_lines, 1);
    tuning_cache_free(&cache);
    free(text);
    free(path);
    remove_dir(dir);
}
END_TEST

/* A save replaces the file whole and leaves no temporary; a save that
 * cannot complete leaves the old file as it was. */
START_TEST(test_atomic_save)
{
    char *dir = temp_dir(), *path = path_in(dir, "a.cache");
    tuning_cache cache = {0};
    tuning_entry e = full_entry();
    EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    write_text(path, "old contents\n");
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    ck_assert_int_eq(files_in(dir), 2); /* a.cache and its lock, a.cache.lock */
    char *text = read_text(path);
    ck_assert_ptr_nonnull(strstr(text, TUNING_CACHE_MAGIC " 1\n"));
    ck_assert_ptr_null(strstr(text, "old contents"));
    free(text);
    /* The target is a directory that holds a file: rename fails, the
     * temporary goes, the directory stays. */
    char *blocked = path_in(dir, "blocked");
    ck_assert_int_eq(mkdir(blocked, 0700), 0);
    char *inside = path_in(blocked, "x");
    write_text(inside, "keep\n");
    EXPECT(tuning_cache_save(blocked, &cache), SSM_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "blocked"));
    ck_assert_int_eq(files_in(dir), 4); /* a.cache, blocked/ and their locks */
    text = read_text(inside);
    ck_assert_str_eq(text, "keep\n");
    free(text);
    remove(inside);
    rmdir(blocked);
    free(inside);
    free(blocked);
    /* An entry too long for a line (eight long reasons, every blank
     * percent-encoded) is left out; the save and the other entries stand. */
    tuning_entry wide = full_entry();
    wide.key.bucket = 7;
    wide.failed_count = TUNING_MAX_FAILED;
    for (int32_t i = 0; i < TUNING_MAX_FAILED; i++) {
        snprintf(wide.failed[i], TUNING_NAME_LEN, "candidate-%d", (int)i);
        memset(wide.why[i], ' ', TUNING_WHY_LEN - 1);
        wide.why[i][TUNING_WHY_LEN - 1] = '\0';
    }
    char big[8192];
    ck_assert(tuning_entry_format(&wide, big, sizeof big));
    ck_assert_int_gt((int)strlen(big), TUNING_LINE_MAX);
    EXPECT(tuning_cache_put(&cache, &wide), SSM_OK);
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    ck_assert_int_eq(files_in(dir), 3); /* no temporary */
    tuning_cache back = {0};
    int missing = 0;
    EXPECT(tuning_cache_load(path, &back, &missing), SSM_OK);
    ck_assert_int_eq(back.count, 1);
    ck_assert_int_eq(back.skipped_lines, 0);
    assert_entries_equal(&e, &back.entries[0]);
    tuning_cache_free(&back);
    /* A directory that does not exist. */
    char *nowhere = path_in(dir, "no/such/dir/c.cache");
    EXPECT(tuning_cache_save(nowhere, &cache), SSM_ERR_CONFIG);
    free(nowhere);
    tuning_cache_free(&cache);
    free(path);
    remove_dir(dir);
}
END_TEST

/* `line` with field `name`'s value replaced by `value` (the field dropped
 * when value is NULL), into out. The field must be in the line. */
static void with_field(char *out, size_t len, const char *line, const char *name,
                       const char *value)
{
    char pattern[32];
    snprintf(pattern, sizeof pattern, " %s=", name);
    const char *at = strstr(line, pattern);
    ck_assert_msg(at != NULL, "no field %s in the line", name);
    const char *end = strchr(at + 1, ' ');
    if (!end)
        end = at + strlen(at);
    if (value)
        snprintf(out, len, "%.*s%s%s%s", (int)(at - line), line, pattern, value, end);
    else
        snprintf(out, len, "%.*s%s", (int)(at - line), line, end);
}

/* A value the writer never produces is refused, field by field, and so is
 * a line missing any one key field; the values at the edges of each range
 * are read. */
START_TEST(test_bad_values_refused)
{
    tuning_entry e = full_entry(), back;
    char good[2048], line[4096], why[96];
    ck_assert(tuning_entry_format(&e, good, sizeof good));
    char long_name[TUNING_NAME_LEN + 8], long_why[TUNING_WHY_LEN + 8], long_device[128];
    snprintf(long_name, sizeof long_name, "%0*d|why", TUNING_NAME_LEN, 0);
    snprintf(long_why, sizeof long_why, "x|%0*d", TUNING_WHY_LEN, 0);
    snprintf(long_device, sizeof long_device, "%0*d", (int)sizeof e.key.device, 0);
    const struct {
        const char *field, *value;
    } bad[] = {
        {"device", "NVIDIA%00H200"},   /* an escaped NUL */
        {"device", "NVIDIA\tH200"},    /* a byte that must be escaped */
        {"choice", "blocks=6"},        /* '=' must be escaped too */
        {"device", long_device},       /* one byte too long */
        {"layers", "20x"},             /* a number and more */
        {"H", "32.0"},
        {"driver", "2147483648"},      /* past INT32_MAX */
        {"kind", "mamba"},
        {"lb", "inf"},
        {"lb", "-inf"},
        {"lb", "nan"},
        {"ms", "-1"},
        {"ms", "nan"},
        {"choice", ""},
        {"mode", ""},
        {"rows", "131072"},            /* 2^SSM_TUNE_BUCKETS: past the last bucket */
        {"rows", "0"},
        {"failed", "|no-name"},
        {"failed", long_name},         /* a name one byte too long */
        {"failed", long_why},          /* a reason one byte too long */
        {"failed", "no-bar"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        with_field(line, sizeof line, good, bad[i].field, bad[i].value);
        ck_assert_msg(tuning_entry_parse(line, &back, why, sizeof why) == SSM_ERR_INVALID_ARGUMENT,
                      "%s=%s was read", bad[i].field, bad[i].value);
    }
    static const char *const key_fields[] = {"device", "cc",   "driver", "lib",    "kind",
                                             "layers", "H",    "HV",     "K",      "V",
                                             "W",      "lb",   "T",      "state",  "act",
                                             "mode",   "family", "rows"};
    for (size_t i = 0; i < sizeof key_fields / sizeof *key_fields; i++) {
        with_field(line, sizeof line, good, key_fields[i], NULL);
        why[0] = '\0';
        ssm_status st = tuning_entry_parse(line, &back, why, sizeof why);
        ck_assert_msg(st == SSM_ERR_INVALID_ARGUMENT && strstr(why, "missing") != NULL,
                      "a line without %s: %s (%s)", key_fields[i], ssm_status_name(st), why);
    }
    /* More failed candidates than an entry keeps: refused; as many: read. */
    tuning_entry full = full_entry();
    full.failed_count = TUNING_MAX_FAILED;
    for (int32_t i = 0; i < TUNING_MAX_FAILED; i++) {
        snprintf(full.failed[i], TUNING_NAME_LEN, "c%d", (int)i);
        snprintf(full.why[i], TUNING_WHY_LEN, "r%d", (int)i);
    }
    ck_assert(tuning_entry_format(&full, line, sizeof line));
    EXPECT(tuning_entry_parse(line, &back, why, sizeof why), SSM_OK);
    assert_entries_equal(&full, &back);
    strcat(line, " failed=one-more|r");
    ck_assert_msg(tuning_entry_parse(line, &back, why, sizeof why) == SSM_ERR_INVALID_ARGUMENT,
                  "%d failed candidates were read", TUNING_MAX_FAILED + 1);

    /* The edges: the last bucket, the largest driver, the longest device
     * name, candidate name and reason, a zero time. */
    tuning_entry edge = full_entry();
    edge.key.bucket = SSM_TUNE_BUCKETS - 1;
    edge.key.driver = INT32_MAX;
    edge.key.cc_major = 1000;
    edge.key.cc_minor = 0;
    memset(edge.key.device, 'd', sizeof edge.key.device - 1);
    edge.key.device[sizeof edge.key.device - 1] = '\0';
    memset(edge.failed[0], 'n', TUNING_NAME_LEN - 1);
    edge.failed[0][TUNING_NAME_LEN - 1] = '\0';
    memset(edge.why[1], 'w', TUNING_WHY_LEN - 1);
    edge.why[1][TUNING_WHY_LEN - 1] = '\0';
    edge.ms = 0;
    ck_assert(tuning_entry_format(&edge, line, sizeof line));
    ck_assert_ptr_nonnull(strstr(line, " rows=65536 "));
    ssm_status st = tuning_entry_parse(line, &back, why, sizeof why);
    ck_assert_msg(st == SSM_OK, "the edge values were refused: %s", why);
    assert_entries_equal(&edge, &back);
    ck_assert_int_eq(back.key.bucket, SSM_TUNE_BUCKETS - 1);
}
END_TEST

/* Families and buckets outside their ranges have no name and no line. */
START_TEST(test_format_ranges)
{
    ck_assert_ptr_null(tuning_family_name(-1));
    ck_assert_ptr_null(tuning_family_name(-2));
    ck_assert_ptr_null(tuning_family_name(INT32_MIN));
    ck_assert_ptr_null(tuning_family_name(SSM_TUNE_FAMILIES));
    ck_assert_str_eq(tuning_family_name(SSM_TUNE_FAMILIES - 1), "prefill");
    ck_assert_int_eq(tuning_family_of("nope"), -1);
    ck_assert_int_eq(tuning_family_of("layout"), SSM_TUNE_LAYOUT);
    tuning_entry e = full_entry();
    char line[2048];
    const int32_t buckets[] = {-1, SSM_TUNE_BUCKETS, SSM_TUNE_BUCKETS + 5};
    for (size_t i = 0; i < sizeof buckets / sizeof *buckets; i++) {
        e.key.bucket = buckets[i];
        ck_assert_msg(!tuning_entry_format(&e, line, sizeof line), "bucket %d formatted",
                      buckets[i]);
    }
    e = full_entry();
    e.key.family = -1;
    ck_assert(!tuning_entry_format(&e, line, sizeof line));
    e.key.family = SSM_TUNE_FAMILIES;
    ck_assert(!tuning_entry_format(&e, line, sizeof line));
}
END_TEST

/* A file as an editor may leave it: CRLF line ends, no newline after the
 * last entry. Every entry is read. A header other than exactly the line
 * save writes (more after the version, no space or two, "+1", "01") is
 * not this format: the file is ignored whole. */
START_TEST(test_line_ends_and_header)
{
    char *dir = temp_dir(), *path = path_in(dir, "e.cache");
    tuning_entry a = full_entry(), b = full_entry();
    b.key.bucket = 2;
    char la[2048], lb[2048], text[8192];
    ck_assert(tuning_entry_format(&a, la, sizeof la));
    ck_assert(tuning_entry_format(&b, lb, sizeof lb));
    tuning_cache cache = {0};
    int missing = 0;
    snprintf(text, sizeof text, TUNING_CACHE_MAGIC " 1\r\n# comment\r\n\r\n%s\r\n%s\r\n", la, lb);
    write_text(path, text);
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 2);
    ck_assert_int_eq(cache.skipped_lines, 0);
    assert_entries_equal(&a, tuning_cache_find(&cache, &a.key));
    assert_entries_equal(&b, tuning_cache_find(&cache, &b.key));
    snprintf(text, sizeof text, TUNING_CACHE_MAGIC " 1\n%s\n%s", la, lb);
    write_text(path, text);
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 2);
    ck_assert_int_eq(cache.skipped_lines, 0);
    ck_assert_ptr_nonnull(tuning_cache_find(&cache, &b.key));
    const char *headers[] = {TUNING_CACHE_MAGIC " 1x", TUNING_CACHE_MAGIC " 1.0",
                             TUNING_CACHE_MAGIC " 1 2", TUNING_CACHE_MAGIC " 10",
                             TUNING_CACHE_MAGIC, TUNING_CACHE_MAGIC "1",
                             TUNING_CACHE_MAGIC "  1", TUNING_CACHE_MAGIC " +1",
                             TUNING_CACHE_MAGIC " 01"};
    for (size_t i = 0; i < sizeof headers / sizeof *headers; i++) {
        snprintf(text, sizeof text, "%s\n%s\n", headers[i], la);
        write_text(path, text);
        EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
        ck_assert_msg(cache.count == 0, "header '%s': %d entries read", headers[i],
                      (int)cache.count);
    }
    tuning_cache_free(&cache);
    free(path);
    remove_dir(dir);
}
END_TEST

/* An entry whose line is `chars` long: full_entry's failed candidates
 * padded with reasons (blanks, 3 bytes encoded, then letters). */
static tuning_entry entry_of_length(int32_t bucket, size_t chars)
{
    tuning_entry e = full_entry();
    e.key.bucket = bucket;
    e.failed_count = TUNING_MAX_FAILED;
    for (int32_t i = 0; i < TUNING_MAX_FAILED; i++) {
        snprintf(e.failed[i], TUNING_NAME_LEN, "c%d", (int)i);
        e.why[i][0] = '\0';
    }
    static char line[8192];
    for (int32_t i = 0; i < TUNING_MAX_FAILED; i++)
        for (size_t n = 0; n < TUNING_WHY_LEN - 1; n++) {
            ck_assert(tuning_entry_format(&e, line, sizeof line));
            size_t now = strlen(line);
            if (now >= chars)
                break;
            e.why[i][n] = chars - now >= 3 ? ' ' : 'a';
            e.why[i][n + 1] = '\0';
        }
    ck_assert(tuning_entry_format(&e, line, sizeof line));
    ck_assert_int_eq((int)strlen(line), (int)chars);
    return e;
}

/* The longest line a save writes is the longest the reader takes whole: an
 * entry of TUNING_LINE_MAX - 2 characters is saved and read back, one of a
 * character more is left out of the file (never written to be skipped). */
START_TEST(test_longest_line)
{
    char *dir = temp_dir(), *path = path_in(dir, "w.cache");
    tuning_entry fits = entry_of_length(1, TUNING_LINE_MAX - 2);
    tuning_entry over = entry_of_length(2, TUNING_LINE_MAX - 1);
    tuning_cache cache = {0}, back = {0};
    EXPECT(tuning_cache_put(&cache, &fits), SSM_OK);
    EXPECT(tuning_cache_put(&cache, &over), SSM_OK);
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    int missing = 0;
    EXPECT(tuning_cache_load(path, &back, &missing), SSM_OK);
    ck_assert_int_eq(back.skipped_lines, 0);
    ck_assert_int_eq(back.count, 1);
    const tuning_entry *found = tuning_cache_find(&back, &fits.key);
    ck_assert_ptr_nonnull(found);
    assert_entries_equal(&fits, found);
    tuning_cache_free(&cache);
    tuning_cache_free(&back);
    free(path);
    remove_dir(dir);
}
END_TEST

/* An entry of the fake device told apart by its layer count. */
static tuning_entry numbered_entry(int32_t layers, const char *choice)
{
    tuning_entry e;
    memset(&e, 0, sizeof e);
    e.key = context_key("native", SSM_TUNE_VERIFY, 0);
    e.key.layers = layers;
    snprintf(e.choice, sizeof e.choice, "%s", choice);
    e.ms = 1.5;
    return e;
}

/* The choice of numbered entry `layers` in the file at path, or NULL when
 * the file lacks it; *count = the file's entries. */
static const char *file_choice(const char *path, int32_t layers, int32_t *count)
{
    static char choice[TUNING_NAME_LEN];
    tuning_cache back = {0};
    int missing = 0;
    EXPECT(tuning_cache_load(path, &back, &missing), SSM_OK);
    tuning_entry probe = numbered_entry(layers, "");
    const tuning_entry *e = tuning_cache_find(&back, &probe.key);
    if (e)
        snprintf(choice, sizeof choice, "%s", e->choice);
    *count = back.count;
    tuning_cache_free(&back);
    return e ? choice : NULL;
}

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A put marks what it adds or changes; putting an entry the same as the
 * one there is no change; a load starts with nothing changed. */
START_TEST(test_put_marks_changes)
{
    tuning_cache cache = {0};
    tuning_entry a = numbered_entry(1, "fast");
    EXPECT(tuning_cache_put(&cache, &a), SSM_OK);
    ck_assert_int_eq(cache.changes, 1);
    ck_assert(cache.entries[0].changed);
    EXPECT(tuning_cache_put(&cache, &a), SSM_OK);
    ck_assert_int_eq(cache.changes, 1);
    a.changed = 0; /* not part of the comparison */
    ck_assert(tuning_entry_same(&a, &cache.entries[0]));
    a.ms = 2.5;
    ck_assert(!tuning_entry_same(&a, &cache.entries[0]));
    EXPECT(tuning_cache_put(&cache, &a), SSM_OK);
    ck_assert_int_eq(cache.changes, 2);
    ck_assert_int_eq(cache.count, 1);
    a.failed_count = 1;
    snprintf(a.failed[0], TUNING_NAME_LEN, "slow");
    snprintf(a.why[0], TUNING_WHY_LEN, "x");
    ck_assert(!tuning_entry_same(&a, &cache.entries[0]));
    /* Only a failure's reason differs: a change too. */
    EXPECT(tuning_cache_put(&cache, &a), SSM_OK);
    ck_assert_int_eq(cache.changes, 3);
    a.changed = 0;
    snprintf(a.why[0], TUNING_WHY_LEN, "y");
    ck_assert(!tuning_entry_same(&a, &cache.entries[0]));
    EXPECT(tuning_cache_put(&cache, &a), SSM_OK);
    ck_assert_int_eq(cache.changes, 4);
    ck_assert_str_eq(cache.entries[0].why[0], "y");
    char *dir = temp_dir(), *path = path_in(dir, "p.cache");
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    int missing = 0;
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.changes, 0);
    ck_assert(!cache.entries[0].changed);
    tuning_cache_free(&cache);
    free(path);
    remove_dir(dir);
}
END_TEST

/* No lost entries: two processes' caches saved one after the other
 * keep both; a changed entry wins over the file's, an unchanged one (as
 * loaded) never reverts the file's newer result. */
START_TEST(test_merged_saves_keep_every_entry)
{
    char *dir = temp_dir(), *path = path_in(dir, "m.cache");
    tuning_entry a = numbered_entry(1, "fast"), b = numbered_entry(2, "fast"),
                 c = numbered_entry(3, "fast");
    tuning_cache one = {0}, two = {0};
    EXPECT(tuning_cache_put(&one, &a), SSM_OK);
    EXPECT(tuning_cache_put(&two, &b), SSM_OK);
    EXPECT(tuning_cache_merge_save(path, &one), SSM_OK);
    EXPECT(tuning_cache_merge_save(path, &two), SSM_OK);
    int32_t count = 0;
    ck_assert_str_eq(file_choice(path, 1, &count), "fast");
    ck_assert_str_eq(file_choice(path, 2, &count), "fast");
    ck_assert_int_eq(count, 2);
    /* The saves left the caches as they were. */
    ck_assert_int_eq(one.count, 1);
    ck_assert_int_eq(one.changes, 1);
    ck_assert(tuning_entry_same(&one.entries[0], &a));

    /* Both load the file; one re-times a, two adds c still holding the
     * old a: a's new result stays. */
    int missing = 0;
    EXPECT(tuning_cache_load(path, &one, &missing), SSM_OK);
    EXPECT(tuning_cache_load(path, &two, &missing), SSM_OK);
    snprintf(a.choice, sizeof a.choice, "slow");
    EXPECT(tuning_cache_put(&one, &a), SSM_OK);
    EXPECT(tuning_cache_put(&two, &c), SSM_OK);
    EXPECT(tuning_cache_merge_save(path, &one), SSM_OK);
    EXPECT(tuning_cache_merge_save(path, &two), SSM_OK);
    ck_assert_str_eq(file_choice(path, 1, &count), "slow");
    ck_assert_str_eq(file_choice(path, 2, &count), "fast");
    ck_assert_str_eq(file_choice(path, 3, &count), "fast");
    ck_assert_int_eq(count, 3);
    /* The same key changed here: this save's entry wins. */
    snprintf(a.choice, sizeof a.choice, "auto");
    EXPECT(tuning_cache_put(&two, &a), SSM_OK);
    EXPECT(tuning_cache_merge_save(path, &two), SSM_OK);
    ck_assert_str_eq(file_choice(path, 1, &count), "auto");
    ck_assert_int_eq(count, 3);
    /* tuning_cache_save replaces the file whole; a merging save then
     * writes back what it holds, the entry it loaded and did not change
     * (b) included. */
    tuning_cache only_c = {0};
    EXPECT(tuning_cache_put(&only_c, &c), SSM_OK);
    EXPECT(tuning_cache_save(path, &only_c), SSM_OK);
    ck_assert_ptr_null(file_choice(path, 2, &count));
    ck_assert_int_eq(count, 1);
    EXPECT(tuning_cache_merge_save(path, &two), SSM_OK);
    ck_assert_str_eq(file_choice(path, 2, &count), "fast");
    ck_assert_int_eq(count, 3);
    /* A file that is not a cache is replaced by this process's entries. */
    write_text(path, "not a cache\n");
    EXPECT(tuning_cache_merge_save(path, &one), SSM_OK);
    ck_assert_str_eq(file_choice(path, 1, &count), "slow");
    ck_assert_int_eq(count, 2);
    ck_assert_int_eq(files_in(dir), 2); /* the cache and its lock; no temporary */
    char *lock = path_in(dir, "m.cache.lock");
    ck_assert_int_eq(access(lock, F_OK), 0);
    free(lock);
    tuning_cache_free(&one);
    tuning_cache_free(&two);
    tuning_cache_free(&only_c);
    free(path);
    remove_dir(dir);
}
END_TEST

/* The lock: a save waits while another process holds it; one held too long
 * or one that cannot be created is a warning and the save goes on (merged
 * all the same). */
START_TEST(test_save_lock)
{
    char *dir = temp_dir(), *path = path_in(dir, "l.cache"), *lock = path_in(dir, "l.cache.lock");
    tuning_entry a = numbered_entry(1, "fast"), b = numbered_entry(2, "fast");
    tuning_cache one = {0}, two = {0};
    EXPECT(tuning_cache_put(&one, &a), SSM_OK);
    EXPECT(tuning_cache_put(&two, &b), SSM_OK);
    EXPECT(tuning_cache_merge_save(path, &one), SSM_OK);

    /* Held by a child for 0.3 s: the save waits for it, then merges. */
    int ready[2];
    ck_assert_int_eq(pipe(ready), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        int fd = open(lock, O_RDWR);
        int ok = fd >= 0 && flock(fd, LOCK_EX) == 0;
        ok = write(ready[1], "x", 1) == 1 && ok;
        usleep(300 * 1000);
        _exit(ok ? 0 : 1);
    }
    char byte;
    ck_assert_int_eq(read(ready[0], &byte, 1), 1);
    double start = seconds_now();
    EXPECT(tuning_cache_merge_save(path, &two), SSM_OK);
    double waited = seconds_now() - start;
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ck_assert_msg(waited > 0.2, "the save did not wait for the lock (%.3f s)", waited);
    int32_t count = 0;
    ck_assert_ptr_nonnull(file_choice(path, 1, &count));
    ck_assert_int_eq(count, 2);
    close(ready[0]);
    close(ready[1]);

    /* Held for longer than the save waits: saved without it. */
    tuning_cache_lock_wait_ms = 100;
    int held = open(lock, O_RDWR);
    ck_assert_int_eq(flock(held, LOCK_EX), 0);
    tuning_entry c = numbered_entry(3, "fast");
    EXPECT(tuning_cache_put(&one, &c), SSM_OK);
    start = seconds_now();
    EXPECT(tuning_cache_merge_save(path, &one), SSM_OK);
    ck_assert(seconds_now() - start >= 0.1);
    ck_assert_ptr_nonnull(file_choice(path, 3, &count));
    ck_assert_int_eq(count, 3);
    close(held);
    tuning_cache_lock_wait_ms = 10000;

    /* A lock file that cannot be created (a link into no directory). */
    char *other = path_in(dir, "n.cache"), *other_lock = path_in(dir, "n.cache.lock");
    ck_assert_int_eq(symlink("/no/such/dir/n.cache.lock", other_lock), 0);
    EXPECT(tuning_cache_merge_save(other, &one), SSM_OK);
    EXPECT(tuning_cache_merge_save(other, &two), SSM_OK);
    ck_assert_ptr_nonnull(file_choice(other, 1, &count));
    ck_assert_ptr_nonnull(file_choice(other, 2, &count));
    ck_assert_int_eq(count, 3);
    remove(other_lock);
    tuning_cache_free(&one);
    tuning_cache_free(&two);
    free(other);
    free(other_lock);
    free(lock);
    free(path);
    remove_dir(dir);
}
END_TEST

/* Out of memory at any allocation of a merging save: SSM_OK (perhaps saved
 * without the lock, with a warning) with both processes' entries in the
 * file, or SSM_ERR_OUT_OF_MEMORY with the file as it was (never this
 * process's entries alone, which would drop the other's); the cache
 * untouched either way. */
START_TEST(test_merge_save_out_of_memory)
{
    char *dir = temp_dir(), *path = path_in(dir, "o.cache");
    tuning_entry a = numbered_entry(1, "fast"), b = numbered_entry(2, "fast");
    tuning_cache mine = {0}, theirs = {0};
    EXPECT(tuning_cache_put(&mine, &a), SSM_OK);
    EXPECT(tuning_cache_put(&theirs, &b), SSM_OK);
    int oks = 0, fails = 0;
    for (int64_t n = 1; n <= 12; n++) {
        EXPECT(tuning_cache_save(path, &theirs), SSM_OK);
        int64_t injected = ssm_fault_injected();
        ssm_fault_fail_allocation(n);
        ssm_status st = tuning_cache_merge_save(path, &mine);
        ssm_fault_fail_allocation(0);
        int32_t count = 0;
        if (st == SSM_OK) {
            ck_assert_ptr_nonnull(file_choice(path, 1, &count));
            ck_assert_ptr_nonnull(file_choice(path, 2, &count));
            oks++;
        } else {
            ck_assert_int_eq(st, SSM_ERR_OUT_OF_MEMORY);
            ck_assert_ptr_null(file_choice(path, 1, &count));
            ck_assert_ptr_nonnull(file_choice(path, 2, &count));
            fails++;
        }
        ck_assert_int_eq(mine.count, 1);
        ck_assert_int_eq(mine.changes, 1);
        ck_assert(tuning_entry_same(&mine.entries[0], &a));
        if (ssm_fault_injected() == injected)
            break; /* every allocation has had its turn */
    }
    ck_assert_int_gt(oks, 0);
    ck_assert_int_gt(fails, 0);
    tuning_cache_free(&mine);
    tuning_cache_free(&theirs);
    free(path);
    remove_dir(dir);
}
END_TEST

/* ====================================================== 2. fake runner */

/* Three candidates of "verify" and two of "decode". Times are fixed per
 * candidate; candidate "fails" never launches; at rows >= oom_rows the
 * scratch cannot be had; after `die_after` runs the device is lost. */
typedef struct fake {
    int runs[SSM_TUNE_FAMILIES][4];
    int begins, ends, applies, open;
    int32_t oom_rows, die_after, total_runs;
    ssm_tune_choice_v1 applied[64];
    int32_t applied_count;
} fake;

static fake the_fake;
static const char *const fake_verify_names[] = {"auto", "slow", "fast", "fails"};
static const char *const fake_decode_names[] = {"auto", "quick"};
static const ssm_tune_family_v1 fake_families[] = {{SSM_TUNE_VERIFY, 4, fake_verify_names},
                                                   {SSM_TUNE_DECODE, 2, fake_decode_names}};

static ssm_status fake_space(void *user, const ssm_tune_family_v1 **families, int32_t *count)
{
    (void)user;
    *families = fake_families;
    *count = 2;
    return SSM_OK;
}

static ssm_status fake_begin(void *user, int32_t max_rows, void *stream)
{
    fake *f = user;
    (void)stream;
    ck_assert_msg(!f->open, "begin twice without end");
    if (f->oom_rows && max_rows >= f->oom_rows)
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "fake: out of memory for %d rows",
                             (int)max_rows);
    f->begins++;
    f->open = 1;
    return SSM_OK;
}

static ssm_status fake_run(void *user, ssm_tune_trial_v1 *trial)
{
    fake *f = user;
    ck_assert_msg(f->open, "run outside begin/end");
    ck_assert_int_eq(trial->struct_size, sizeof *trial);
    ck_assert_int_gt(trial->budget_ms, 0);
    if (f->die_after && f->total_runs >= f->die_after)
        return ssm_error_set(SSM_ERR_DEVICE, "fake: the device is gone");
    f->total_runs++;
    f->runs[trial->family][trial->candidate]++;
    if (trial->family == SSM_TUNE_VERIFY) {
        static const double ms[] = {2.0, 3.0, 1.0, 0.5};
        if (trial->candidate == 3) {
            snprintf(trial->why, sizeof trial->why, "launch: too many resources requested");
            return SSM_OK;
        }
        trial->ms = ms[trial->candidate] * (1 + trial->bucket);
    } else {
        trial->ms = trial->candidate == 1 ? 0.1 : 0.2;
    }
    return SSM_OK;
}

static void fake_end(void *user)
{
    fake *f = user;
    ck_assert_msg(f->open, "end without begin");
    f->open = 0;
    f->ends++;
}

static ssm_status fake_apply(void *user, const ssm_tune_choice_v1 *choices, int32_t count)
{
    fake *f = user;
    f->applies++;
    f->applied_count = count;
    memcpy(f->applied, choices, sizeof *choices * (size_t)count);
    return SSM_OK;
}

static const ssm_tune_runner fake_runner = {&the_fake, fake_space, fake_begin, fake_run,
                                            fake_end, fake_apply};

static tuning_pass make_pass(const tuning_key *base, ssm_tuning_mode mode, int32_t max_bucket)
{
    tuning_pass p;
    memset(&p, 0, sizeof p);
    p.base = base;
    p.runner = &fake_runner;
    p.mode = mode;
    p.max_bucket = max_bucket;
    p.budget_ms = 5;
    return p;
}

static int32_t applied_candidate(const tuning_pass *p, int32_t family, int32_t bucket)
{
    for (int32_t i = 0; i < p->choice_count; i++)
        if (p->choices[i].family == family && p->choices[i].bucket == bucket)
            return p->choices[i].candidate;
    return 0;
}

START_TEST(test_pass_failed_recorded_and_skipped)
{
    memset(&the_fake, 0, sizeof the_fake);
    tuning_key base = context_key("native", 0, 0);
    tuning_cache cache = {0};
    tuning_pass p = make_pass(&base, SSM_TUNING_TUNE, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(p.report.tuned, 8); /* 2 families x 4 buckets */
    ck_assert_int_eq(p.report.failed, 4);
    ck_assert_int_eq(p.report.cached, 0);
    ck_assert_int_eq(p.report.skipped_failed, 0);
    ck_assert(p.changed);
    ck_assert_int_eq(the_fake.begins, 4); /* one scratch per bucket */
    ck_assert_int_eq(the_fake.ends, 4);
    for (int32_t b = 0; b <= 3; b++) {
        ck_assert_int_eq(applied_candidate(&p, SSM_TUNE_VERIFY, b), 2); /* "fast" */
        ck_assert_int_eq(applied_candidate(&p, SSM_TUNE_DECODE, b), 1); /* "quick" */
        tuning_key k = base;
        k.family = SSM_TUNE_VERIFY;
        k.bucket = b;
        const tuning_entry *e = tuning_cache_find(&cache, &k);
        ck_assert_ptr_nonnull(e);
        ck_assert_str_eq(e->choice, "fast");
        ck_assert_int_eq(e->failed_count, 1);
        ck_assert_str_eq(e->failed[0], "fails");
        ck_assert_str_eq(e->why[0], "launch: too many resources requested");
    }
    ck_assert_int_eq(the_fake.runs[SSM_TUNE_VERIFY][3], 4);

    /* Through the file: the same cache read back serves everything. */
    char *dir = temp_dir(), *path = path_in(dir, "t.cache");
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    tuning_cache back = {0};
    int missing;
    EXPECT(tuning_cache_load(path, &back, &missing), SSM_OK);
    memset(&the_fake, 0, sizeof the_fake);
    p = make_pass(&base, SSM_TUNING_TUNE, 3);
    EXPECT(tuning_run_pass(&p, &back), SSM_OK);
    ck_assert_int_eq(p.report.cached, 8);
    ck_assert_int_eq(p.report.tuned, 0);
    ck_assert_int_eq(the_fake.total_runs, 0);
    ck_assert_int_eq(the_fake.begins, 0);
    ck_assert(!p.changed);
    ck_assert_int_eq(applied_candidate(&p, SSM_TUNE_VERIFY, 2), 2);

    /* Entries without a choice (as after a candidate list grew) are timed
     * again, but the failed candidate is never run again. */
    for (int32_t i = 0; i < back.count; i++)
        back.entries[i].choice[0] = '\0';
    memset(&the_fake, 0, sizeof the_fake);
    p = make_pass(&base, SSM_TUNING_TUNE, 3);
    EXPECT(tuning_run_pass(&p, &back), SSM_OK);
    ck_assert_int_eq(p.report.tuned, 8);
    ck_assert_int_eq(p.report.skipped_failed, 4);
    ck_assert_int_eq(p.report.failed, 0);
    ck_assert_int_eq(the_fake.runs[SSM_TUNE_VERIFY][3], 0);
    ck_assert_int_eq(the_fake.runs[SSM_TUNE_VERIFY][2], 4);
    tuning_cache_free(&back);
    tuning_cache_free(&cache);
    free(path);
    remove_dir(dir);
}
END_TEST

START_TEST(test_pass_out_of_memory_and_errors)
{
    memset(&the_fake, 0, sizeof the_fake);
    the_fake.oom_rows = 4; /* buckets 2 and 3 cannot have their scratch */
    tuning_key base = context_key("compact", 0, 0);
    tuning_cache cache = {0};
    tuning_pass p = make_pass(&base, SSM_TUNING_TUNE, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(p.report.tuned, 4);
    ck_assert_int_eq(p.report.untuned, 4);
    tuning_key k = base;
    k.family = SSM_TUNE_VERIFY;
    k.bucket = 3;
    const tuning_entry *e = tuning_cache_find(&cache, &k);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->choice, "");
    ck_assert_int_eq(e->failed_count, 4);
    ck_assert_str_eq(e->why[0], "out of memory");
    ck_assert_int_eq(applied_candidate(&p, SSM_TUNE_VERIFY, 3), 0); /* built-in */
    /* Next time nothing of those buckets is tried again. */
    the_fake.oom_rows = 0;
    int before = the_fake.total_runs;
    p = make_pass(&base, SSM_TUNING_TUNE, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(the_fake.total_runs, before);
    ck_assert_int_eq(p.report.skipped_failed, 4 * 2 + 2 * 2);

    /* A runner error ends the pass: the scratch is released. */
    tuning_cache_free(&cache);
    memset(&the_fake, 0, sizeof the_fake);
    the_fake.die_after = 3;
    p = make_pass(&base, SSM_TUNING_TUNE, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_ERR_DEVICE);
    ck_assert_int_eq(the_fake.begins, the_fake.ends);
    ck_assert(!the_fake.open);
    tuning_cache_free(&cache);

    /* Mode cached never times: absent entries stay built-in. */
    memset(&the_fake, 0, sizeof the_fake);
    p = make_pass(&base, SSM_TUNING_CACHED, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(the_fake.total_runs + the_fake.begins, 0);
    ck_assert_int_eq(p.report.untuned, 8);
    ck_assert_int_eq(p.choice_count, 0);
    ck_assert(!p.changed);
    /* An unknown cached candidate name is not applied. */
    tuning_entry odd;
    memset(&odd, 0, sizeof odd);
    odd.key = base;
    odd.key.family = SSM_TUNE_DECODE;
    odd.key.bucket = 1;
    snprintf(odd.choice, sizeof odd.choice, "from-a-newer-version");
    EXPECT(tuning_cache_put(&cache, &odd), SSM_OK);
    p = make_pass(&base, SSM_TUNING_CACHED, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(p.choice_count, 0);
    tuning_cache_free(&cache);
}
END_TEST

/* Layout entries are shared by every mode ("*"), read and never timed; the
 * test-only layout needs its switch. */
START_TEST(test_pass_layouts)
{
    memset(&the_fake, 0, sizeof the_fake);
    tuning_key base = context_key("native", 0, 0);
    tuning_cache cache = {0};
    tuning_entry e;
    memset(&e, 0, sizeof e);
    e.key = context_key(TUNING_ANY_MODE, SSM_TUNE_LAYOUT, 0);
    snprintf(e.choice, sizeof e.choice, "fma2-rev");
    EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    e.key.bucket = 2;
    snprintf(e.choice, sizeof e.choice, "no-such-layout");
    EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    tuning_pass p = make_pass(&base, SSM_TUNING_CACHED, 3);
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(p.layout[0], 0); /* test-only, not switched on */
    p = make_pass(&base, SSM_TUNING_CACHED, 3);
    p.test_layouts = 1;
    EXPECT(tuning_run_pass(&p, &cache), SSM_OK);
    ck_assert_int_eq(p.layout[0], 1);
    ck_assert_int_eq(p.layout[1], 0);
    ck_assert_int_eq(p.layout[2], 0); /* unknown name */
    ck_assert_int_eq(the_fake.total_runs, 0);
    tuning_cache_free(&cache);
}
END_TEST

/* ======================================================== 3. the config */

static ssm_status parse(const char *tuning_section, ssm_config **out)
{
    char text[2048];
    snprintf(text, sizeof text,
             "[model]\nkind = gdn\nlayers = 2\nheads = 1\nvalue_heads = 2\nkey_dim = 8\n"
             "value_dim = 8\nconv_width = 4\n[state]\nmode = native\nstate_dtype = f32\n"
             "max_requests = 4\n%s",
             tuning_section);
    return ssm_config_parse_text(text, "t.ini", out);
}

static void expect_config_error(const char *section, const char *phrase)
{
    ssm_config *c = NULL;
    EXPECT(parse(section, &c), SSM_ERR_CONFIG);
    ck_assert_msg(strstr(ssm_last_error(), phrase), "'%s': message '%s' lacks '%s'", section,
                  ssm_last_error(), phrase);
    ck_assert_ptr_null(c);
}

START_TEST(test_config_tuning)
{
    ssm_config *c = NULL;
    EXPECT(parse("", &c), SSM_OK);
    ck_assert_int_eq(c->tuning.mode, SSM_TUNING_OFF);
    ssm_config_free(c);
    EXPECT(parse("[tuning]\nmode = tune\ncache = /tmp/x.cache\nbudget_ms = 50\n", &c), SSM_OK);
    ck_assert_int_eq(c->tuning.mode, SSM_TUNING_TUNE);
    ck_assert_str_eq(c->tuning.cache, "/tmp/x.cache");
    ck_assert_int_eq(c->tuning.budget_ms, 50);
    /* The clone a context keeps owns its own copy. */
    ssm_config *copy = NULL;
    EXPECT(ssm_config_clone(c, &copy), SSM_OK);
    ck_assert_ptr_ne(copy->tuning.cache, c->tuning.cache);
    ck_assert_str_eq(copy->tuning.cache, "/tmp/x.cache");
    ssm_config_free(copy);
    ssm_config_free(c);
    /* A relative cache is relative to where the text was read (cwd here). */
    EXPECT(parse("[tuning]\nmode = cached\ncache = rel.cache\n", &c), SSM_OK);
    ck_assert_msg(c->tuning.cache[0] == '/' && strstr(c->tuning.cache, "/rel.cache"),
                  "cache %s", c->tuning.cache);
    ssm_config_free(c);
    EXPECT(parse("[tuning]\nmode = off\n", &c), SSM_OK);
    ssm_config_free(c);

    expect_config_error("[tuning]\nmode = fast\n",
                        "t.ini:14: [tuning] mode = 'fast' is not valid (allowed: off, cached, tune)");
    expect_config_error("[tuning]\nmode = tune\n",
                        "t.ini:14: [tuning] cache is required with mode = tune");
    expect_config_error("[tuning]\nmode = cached\ncache =\n",
                        "t.ini:15: [tuning] cache is required with mode = cached");
    expect_config_error("[tuning]\nbudget_ms = 20000\n",
                        "t.ini:14: [tuning] budget_ms = 20000 is out of range (allowed: 0..10000)");
    expect_config_error("[tuning]\nbudget_ms = -1\n", "[tuning] budget_ms = -1 is out of range");
    expect_config_error("[tuning]\nbudget_ms = 5ms\n", "[tuning] budget_ms = '5ms' is not valid");
    expect_config_error("[tuning]\ncaches = x\n",
                        "unknown key 'caches' in [tuning] (known keys: mode, cache, budget_ms)");
    expect_config_error("[tuning]\nmode = off\n[tuning]\n", "duplicate section [tuning]");
    expect_config_error("[tuning]\nmode = off\nmode = tune\n", "duplicate key 'mode' in [tuning]");

    /* The struct form, checked at creation without lines. */
    ssm_config s;
    test_config(&s, &small_gdn, "native", SSM_DTYPE_F32, SSM_DTYPE_F32, 2, 3);
    s.tuning.mode = SSM_TUNING_TUNE;
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(&s, &ctx), SSM_ERR_CONFIG);
    ck_assert_str_eq(ssm_last_error(), "[tuning] cache is required with mode = tune (a file the "
                                       "tuned choices are kept in)");
    s.tuning.mode = (ssm_tuning_mode)7;
    EXPECT(ssm_ctx_create(&s, &ctx), SSM_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "[tuning] mode = 7 is not a tuning mode"));
    ck_assert_ptr_null(ctx);
}
END_TEST

/* ========================================================== 4. contexts */

static void small_config(ssm_config *c, const char *mode, ssm_tuning_mode tuning,
                         const char *cache)
{
    test_config(c, &small_gdn, mode, SSM_DTYPE_F32, SSM_DTYPE_F32, 4, 3);
    c->tuning.mode = tuning;
    c->tuning.cache = cache;
    if (!strcmp(mode, "layout_probe"))
        c->plugin_dir = getenv("SSM_TEST_PLUGIN_DIR");
}

/* A CPU context has no launch choices: every mode is accepted, nothing is
 * read or written, ssm_tune reports zeros. */
START_TEST(test_cpu_context_is_a_no_op)
{
    char *dir = temp_dir(), *path = path_in(dir, "cpu.cache");
    const ssm_tuning_mode modes[] = {SSM_TUNING_OFF, SSM_TUNING_CACHED, SSM_TUNING_TUNE};
    const char *plugins[] = {"native", "compact", "replay"};
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 3; p++) {
            ssm_config c;
            small_config(&c, plugins[p], modes[m], path);
            ssm_ctx *ctx = NULL;
            EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
            ssm_tune_report r;
            memset(&r, 0xff, sizeof r);
            EXPECT(ssm_tune(ctx, NULL, &r), SSM_OK);
            ssm_tune_report zero;
            memset(&zero, 0, sizeof zero);
            ck_assert(!memcmp(&r, &zero, sizeof r));
            EXPECT(ssm_ctx_tune_report(ctx, &r), SSM_OK);
            ck_assert(!memcmp(&r, &zero, sizeof r));
            EXPECT(ssm_tune(ctx, NULL, NULL), SSM_OK);
            ssm_ctx_destroy(ctx);
        }
    ck_assert_int_eq(files_in(dir), 0);
    /* mode tune with a cache nobody could write: still nothing to do here. */
    ssm_config c;
    small_config(&c, "native", SSM_TUNING_TUNE, "/no/such/dir/x.cache");
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    ssm_ctx_destroy(ctx);
    EXPECT(ssm_tune(NULL, NULL, NULL), SSM_ERR_INVALID_ARGUMENT);
    free(path);
    remove_dir(dir);
}
END_TEST

/* A native context that tunes into `path` through the fake runner (the_fake
 * set up by the caller): its config in *c, its creation's report in *r. */
static ssm_ctx *fake_tuned_context(const char *path, ssm_config *c, ssm_tune_report *r)
{
    ssm_tuning_test_hook(&fake_runner, "fake");
    small_config(c, "native", SSM_TUNING_TUNE, path);
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(c, &ctx), SSM_OK);
    EXPECT(ssm_ctx_tune_report(ctx, r), SSM_OK);
    return ctx;
}

/* Through the test hook a CPU context tunes like a CUDA one. */
START_TEST(test_context_tunes_through_the_hook)
{
    char *dir = temp_dir(), *path = path_in(dir, "ctx.cache");
    memset(&the_fake, 0, sizeof the_fake);
    ssm_config c;
    ssm_tune_report r;
    ssm_ctx *ctx = fake_tuned_context(path, &c, &r);
    /* capacity 4: buckets 0..2, two families */
    ck_assert_int_eq(r.tuned, 6);
    ck_assert_int_eq(r.failed, 3);
    ck_assert_int_eq(r.saved, 1);
    ck_assert_int_eq(the_fake.applies, 1);
    ck_assert_int_eq(the_fake.applied_count, 6);
    ck_assert_int_eq(files_in(dir), 2); /* the cache and its lock */
    char *text = read_text(path);
    ck_assert_ptr_nonnull(strstr(text, "mode=native family=verify rows=4 choice=fast"));
    ck_assert_ptr_nonnull(strstr(text, "failed=fails|launch:%20too%20many%20resources"));
    ck_assert_ptr_nonnull(strstr(text, "device=fake cc=0.0 driver=0 lib="));
    free(text);

    /* ssm_tune again: everything cached, nothing timed, cache not rewritten. */
    int runs = the_fake.total_runs;
    EXPECT(ssm_tune(ctx, NULL, &r), SSM_OK);
    ck_assert_int_eq(r.cached, 6);
    ck_assert_int_eq(r.tuned, 0);
    ck_assert_int_eq(r.saved, 0);
    ck_assert_int_eq(the_fake.total_runs, runs);
    ck_assert_int_eq(the_fake.applies, 2);

    /* Refused while a forward is open; the choices stay as they were. */
    int32_t slot;
    EXPECT(ssm_slot_acquire(ctx, &slot), SSM_OK);
    float buffer[4096] = {0};
    ssm_layer_weights w = {buffer, NULL, buffer, buffer};
    ssm_step_io io = {buffer, buffer, buffer, buffer};
    ssm_batch batch = {1, 1, &slot, NULL};
    ssm_ticket t = SSM_TICKET_INIT;
    EXPECT(ssm_verify(ctx, 0, &batch, &w, &io, &t, NULL), SSM_OK);
    EXPECT(ssm_tune(ctx, NULL, &r), SSM_ERR_VERIFY_PENDING);
    ck_assert_int_eq(the_fake.applies, 2);
    EXPECT(ssm_verify(ctx, 1, &batch, &w, &io, &t, NULL), SSM_OK);
    int32_t one = 1;
    EXPECT(ssm_commit(ctx, &t, &one, NULL), SSM_OK);
    EXPECT(ssm_tune(ctx, NULL, &r), SSM_OK);
    ssm_ctx_destroy(ctx);

    /* Another mode is another key: tuned anew, the file keeps both. */
    small_config(&c, "compact", SSM_TUNING_TUNE, path);
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    EXPECT(ssm_ctx_tune_report(ctx, &r), SSM_OK);
    ck_assert_int_eq(r.tuned, 6);
    ssm_ctx_destroy(ctx);
    tuning_cache cache = {0};
    int missing;
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.count, 12);
    tuning_cache_free(&cache);

    /* Mode cached with no file: the built-in choices, and a context. */
    char *absent = path_in(dir, "absent.cache");
    small_config(&c, "native", SSM_TUNING_CACHED, absent);
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    EXPECT(ssm_ctx_tune_report(ctx, &r), SSM_OK);
    ck_assert_int_eq(r.untuned, 6);
    ck_assert_int_eq(the_fake.applied_count, 0);
    ssm_ctx_destroy(ctx);
    ck_assert_int_eq(files_in(dir), 2);

    /* Mode tune whose directory cannot take the file: a config error. */
    small_config(&c, "native", SSM_TUNING_TUNE, "/no/such/dir/x.cache");
    ctx = NULL;
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(),
                                 "[tuning] cache = '/no/such/dir/x.cache': mode = tune cannot "
                                 "write the cache"));
    ck_assert_ptr_null(ctx);
    ssm_tuning_test_hook(NULL, NULL);
    free(absent);
    free(path);
    remove_dir(dir);
}
END_TEST

/* No needless re-saves: a context that finds every entry in the
 * cache, entries whose every candidate failed included, writes nothing and
 * asks for no scratch; the file keeps its inode and time. */
START_TEST(test_no_save_when_nothing_changed)
{
    char *dir = temp_dir(), *path = path_in(dir, "same.cache");
    memset(&the_fake, 0, sizeof the_fake);
    the_fake.oom_rows = 2; /* buckets 1 and 2: every candidate out of memory */
    ssm_config c;
    ssm_tune_report r;
    ssm_ctx *ctx = fake_tuned_context(path, &c, &r);
    ck_assert_int_eq(r.tuned, 2);
    ck_assert_int_eq(r.untuned, 4);
    ck_assert_int_eq(r.saved, 1);
    ssm_ctx_destroy(ctx);
    struct stat before, after;
    ck_assert_int_eq(stat(path, &before), 0);

    the_fake.oom_rows = 0;
    int begins = the_fake.begins, runs = the_fake.total_runs;
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    EXPECT(ssm_ctx_tune_report(ctx, &r), SSM_OK);
    ck_assert_int_eq(r.cached, 2);
    ck_assert_int_eq(r.tuned, 0);
    ck_assert_int_eq(r.untuned, 4);
    ck_assert_int_eq(r.skipped_failed, 2 * (4 + 2));
    ck_assert_int_eq(r.saved, 0);
    ck_assert_int_eq(the_fake.begins, begins);
    ck_assert_int_eq(the_fake.total_runs, runs);
    EXPECT(ssm_tune(ctx, NULL, &r), SSM_OK);
    ck_assert_int_eq(r.saved, 0);
    ssm_ctx_destroy(ctx);
    ck_assert_int_eq(stat(path, &after), 0);
    ck_assert_msg(after.st_ino == before.st_ino, "the cache was rewritten (new inode)");
    ck_assert(after.st_mtim.tv_sec == before.st_mtim.tv_sec &&
              after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    ck_assert_int_eq(files_in(dir), 2);

    /* A change (another mode's entries) is saved. */
    small_config(&c, "compact", SSM_TUNING_TUNE, path);
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    EXPECT(ssm_ctx_tune_report(ctx, &r), SSM_OK);
    ck_assert_int_eq(r.saved, 1);
    ssm_ctx_destroy(ctx);
    ck_assert_int_eq(stat(path, &after), 0);
    ck_assert(after.st_ino != before.st_ino);
    ssm_tuning_test_hook(NULL, NULL);
    free(path);
    remove_dir(dir);
}
END_TEST

enum { TUNERS = 3, TUNER_ROUNDS = 12 };

/* A child's work: TUNER_ROUNDS contexts of `mode` in mode tune, each of
 * its own layer count (its own six entries), each saving the cache. The
 * exit status: 0, or which check failed. */
static int tune_rounds(const char *mode, const char *path)
{
    if (!freopen("/dev/null", "w", stderr))
        return 9;
    for (int32_t i = 0; i < TUNER_ROUNDS; i++) {
        ssm_model_dims m = small_gdn;
        m.layers = 1 + i;
        ssm_config c;
        test_config(&c, &m, mode, SSM_DTYPE_F32, SSM_DTYPE_F32, 4, 3);
        c.tuning.mode = SSM_TUNING_TUNE;
        c.tuning.cache = path;
        ssm_ctx *ctx = NULL;
        if (ssm_ctx_create(&c, &ctx) != SSM_OK)
            return 1;
        ssm_tune_report r;
        int ok = ssm_ctx_tune_report(ctx, &r) == SSM_OK && r.tuned == 6 && r.saved == 1;
        ssm_ctx_destroy(ctx);
        if (!ok)
            return 2;
    }
    return 0;
}

/* Three processes tune one cache file at once, through contexts whose
 * passes load, tune and save over and over: every entry is in the file. */
START_TEST(test_concurrent_tuners_lose_nothing)
{
    char *dir = temp_dir(), *path = path_in(dir, "shared.cache");
    memset(&the_fake, 0, sizeof the_fake);
    ssm_tuning_test_hook(&fake_runner, "fake");
    const char *modes[TUNERS] = {"native", "compact", "replay"};
    pid_t pids[TUNERS];
    for (int t = 0; t < TUNERS; t++) {
        pids[t] = fork();
        ck_assert_int_ge(pids[t], 0);
        if (pids[t] == 0)
            _exit(tune_rounds(modes[t], path));
    }
    for (int t = 0; t < TUNERS; t++) {
        int status = 0;
        ck_assert_int_eq(waitpid(pids[t], &status, 0), pids[t]);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "tuner %s: status %d",
                      modes[t], status);
    }
    tuning_cache cache = {0};
    int missing = 0;
    EXPECT(tuning_cache_load(path, &cache, &missing), SSM_OK);
    ck_assert_int_eq(cache.skipped_lines, 0);
    ck_assert_int_eq(cache.count, TUNERS * TUNER_ROUNDS * 6);
    for (int t = 0; t < TUNERS; t++)
        for (int32_t i = 0; i < TUNER_ROUNDS; i++) {
            tuning_key k = context_key(modes[t], SSM_TUNE_VERIFY, 2);
            k.layers = 1 + i;
            const tuning_entry *e = tuning_cache_find(&cache, &k);
            ck_assert_msg(e != NULL, "%s, %d layers: lost", modes[t], (int)(1 + i));
            ck_assert_str_eq(e->choice, "fast");
        }
    ck_assert_int_eq(files_in(dir), 2); /* no temporary left */
    tuning_cache_free(&cache);
    ssm_tuning_test_hook(NULL, NULL);
    free(path);
    remove_dir(dir);
}
END_TEST

/* ===================================================== 5. ticket layout */

typedef struct probe_call {
    char kind;
    int32_t rows;
    uint32_t layout;
} probe_call;

typedef struct probe_log {
    int32_t count;
    probe_call calls[256];
    int32_t applied;
    ssm_tune_choice_v1 choices[64];
} probe_log;

static probe_log *probe_of(ssm_ctx *ctx)
{
    void *handle = dlopen(ssm_ctx_plugin_path(ctx), RTLD_NOW | RTLD_NOLOAD);
    ck_assert_msg(handle != NULL, "%s is not loaded", ssm_ctx_plugin_path(ctx));
    probe_log *log = dlsym(handle, "layout_probe_log");
    ck_assert_ptr_nonnull(log);
    dlclose(handle);
    return log;
}

/* The cache of the probe's contexts: layouts (every mode's) for 1 row:
 * the test-only "fma2-rev", for 2 rows "fma2", for 4 rows "fma2-rev". */
static void write_layout_cache(const char *path)
{
    tuning_cache cache = {0};
    const char *names[] = {"fma2-rev", "fma2", "fma2-rev"};
    for (int32_t b = 0; b < 3; b++) {
        tuning_entry e;
        memset(&e, 0, sizeof e);
        e.key = context_key(TUNING_ANY_MODE, SSM_TUNE_LAYOUT, b);
        snprintf(e.choice, sizeof e.choice, "%s", names[b]);
        EXPECT(tuning_cache_put(&cache, &e), SSM_OK);
    }
    EXPECT(tuning_cache_save(path, &cache), SSM_OK);
    tuning_cache_free(&cache);
}

static ssm_ctx *probe_context(const char *mode, const char *path)
{
    ssm_config c;
    small_config(&c, mode, SSM_TUNING_CACHED, path);
    ssm_ctx *ctx = NULL;
    EXPECT(ssm_ctx_create(&c, &ctx), SSM_OK);
    return ctx;
}

static float io_buffer[1 << 14];
static const ssm_layer_weights probe_w = {io_buffer, NULL, io_buffer, io_buffer};
static const ssm_step_io probe_io = {io_buffer, io_buffer, io_buffer, io_buffer};

static void verify_layers(ssm_ctx *ctx, ssm_batch *b, ssm_ticket *t)
{
    for (int32_t l = 0; l < small_gdn.layers; l++)
        EXPECT(ssm_verify(ctx, l, b, &probe_w, &probe_io, t, NULL), SSM_OK);
}

/* The calls of `kind` logged since `from`: all with `layout`, and how many. */
static int calls_with(const probe_log *log, int32_t from, char kind, uint32_t layout)
{
    int n = 0;
    for (int32_t i = from; i < log->count; i++)
        if (log->calls[i].kind == kind) {
            ck_assert_msg(log->calls[i].layout == layout, "%c call %d: layout %u, want %u", kind,
                          (int)i, log->calls[i].layout, layout);
            n++;
        }
    return n;
}

START_TEST(test_ticket_layout_into_commit)
{
    char *dir = temp_dir(), *path = path_in(dir, "layouts.cache");
    write_layout_cache(path);
    setenv(TUNING_TEST_LAYOUTS_ENV, "1", 1);
    ssm_tuning_test_hook(&fake_runner, "fake");
    memset(&the_fake, 0, sizeof the_fake);
    ssm_ctx *ctx = probe_context("layout_probe", path);
    probe_log *log = probe_of(ctx);
    log->count = 0;
    int32_t s[4];
    for (int i = 0; i < 4; i++)
        EXPECT(ssm_slot_acquire(ctx, &s[i]), SSM_OK);

    /* Two forwards open side by side: 1 row (layout 1) and 2 rows (0). */
    int32_t one[1] = {s[0]}, two[2] = {s[1], s[2]};
    ssm_batch b1 = {1, 3, one, NULL}, b2 = {2, 2, two, NULL};
    ssm_ticket t1 = SSM_TICKET_INIT, t2 = SSM_TICKET_INIT;
    verify_layers(ctx, &b1, &t1);
    ck_assert_int_eq(t1.layout, 1);
    ck_assert_int_eq(calls_with(log, 0, 'v', 1), small_gdn.layers);
    int32_t mark = log->count;
    verify_layers(ctx, &b2, &t2);
    ck_assert_int_eq(t2.layout, 0);
    ck_assert_int_eq(calls_with(log, mark, 'v', 0), small_gdn.layers);

    /* A ticket whose layout was altered is foreign: nothing is committed. */
    int32_t acc[2] = {2, 1};
    ssm_ticket forged = t1;
    forged.layout = 0;
    mark = log->count;
    EXPECT(ssm_commit(ctx, &forged, acc, NULL), SSM_ERR_TICKET_FOREIGN);
    ck_assert_ptr_nonnull(strstr(ssm_last_error(), "layout"));
    forged = t2;
    forged.layout = 1;
    EXPECT(ssm_commit(ctx, &forged, acc, NULL), SSM_ERR_TICKET_FOREIGN);
    ck_assert_int_eq(log->count, mark);
    /* A layer verified with an altered ticket is refused too. */
    ssm_batch b1_again = b1;
    forged = t1;
    forged.layout = 0;
    EXPECT(ssm_verify(ctx, 0, &b1_again, &probe_w, &probe_io, &forged, NULL),
           SSM_ERR_TICKET_FOREIGN);

    /* Each commits with its own forward's layout, in either order. */
    EXPECT(ssm_commit(ctx, &t2, acc, NULL), SSM_OK);
    ck_assert_int_eq(calls_with(log, mark, 'c', 0), 1);
    mark = log->count;
    EXPECT(ssm_commit(ctx, &t1, acc, NULL), SSM_OK);
    ck_assert_int_eq(calls_with(log, mark, 'c', 1), 1);
    /* The old tickets stay rejected as before. */
    EXPECT(ssm_commit(ctx, &t1, acc, NULL), SSM_ERR_TICKET_REPEATED);

    /* 3 or 4 rows: bucket 2, layout 1; decodes take their bucket's. */
    int32_t four[4] = {s[0], -1, s[2], s[3]};
    ssm_batch b4 = {4, 1, four, NULL};
    ssm_ticket t4 = SSM_TICKET_INIT;
    mark = log->count;
    verify_layers(ctx, &b4, &t4);
    ck_assert_int_eq(t4.layout, 1);
    int32_t acc4[4] = {1, 1, 1, 1};
    EXPECT(ssm_commit(ctx, &t4, acc4, NULL), SSM_OK);
    ck_assert_int_eq(calls_with(log, mark, 'c', 1), 1);
    mark = log->count;
    EXPECT(ssm_decode(ctx, 0, &b2, &probe_w, &probe_io, NULL), SSM_ERR_INVALID_ARGUMENT);
    ssm_batch d2 = {2, 1, two, NULL};
    EXPECT(ssm_decode(ctx, 0, &d2, &probe_w, &probe_io, NULL), SSM_OK);
    ck_assert_int_eq(calls_with(log, mark, 'd', 0), 1);
    mark = log->count;
    ssm_batch d1 = {1, 1, one, NULL};
    EXPECT(ssm_decode(ctx, 0, &d1, &probe_w, &probe_io, NULL), SSM_OK);
    ck_assert_int_eq(calls_with(log, mark, 'd', 1), 1);
    ssm_ctx_destroy(ctx);

    /* Without the switch the test-only layout is not honoured. */
    unsetenv(TUNING_TEST_LAYOUTS_ENV);
    ctx = probe_context("layout_probe", path);
    log = probe_of(ctx);
    EXPECT(ssm_slot_acquire(ctx, &s[0]), SSM_OK);
    ssm_ticket t = SSM_TICKET_INIT;
    mark = log->count;
    verify_layers(ctx, &b1, &t);
    ck_assert_int_eq(t.layout, 0);
    ck_assert_int_eq(calls_with(log, mark, 'v', 0), small_gdn.layers);
    EXPECT(ssm_commit(ctx, &t, acc, NULL), SSM_OK);
    ssm_ctx_destroy(ctx);

    /* A mode without SSM_CAP_LAYOUTS (replay) always gets layout 0. */
    setenv(TUNING_TEST_LAYOUTS_ENV, "1", 1);
    ctx = probe_context("replay", path);
    EXPECT(ssm_slot_acquire(ctx, &s[0]), SSM_OK);
    t = (ssm_ticket)SSM_TICKET_INIT;
    verify_layers(ctx, &b1, &t);
    ck_assert_int_eq(t.layout, 0);
    EXPECT(ssm_commit(ctx, &t, acc, NULL), SSM_OK);
    ssm_ctx_destroy(ctx);
    unsetenv(TUNING_TEST_LAYOUTS_ENV);
    ssm_tuning_test_hook(NULL, NULL);
    free(path);
    remove_dir(dir);
}
END_TEST

/* A CPU context without the hook keeps layout 0, whatever the cache says:
 * tuning is a no-op there. */
START_TEST(test_cpu_context_layout_zero)
{
    char *dir = temp_dir(), *path = path_in(dir, "layouts.cache");
    write_layout_cache(path);
    setenv(TUNING_TEST_LAYOUTS_ENV, "1", 1);
    ssm_ctx *ctx = probe_context("layout_probe", path);
    int32_t slot;
    EXPECT(ssm_slot_acquire(ctx, &slot), SSM_OK);
    ssm_batch b = {1, 2, &slot, NULL};
    ssm_ticket t = SSM_TICKET_INIT;
    verify_layers(ctx, &b, &t);
    ck_assert_int_eq(t.layout, 0);
    int32_t acc = 2;
    EXPECT(ssm_commit(ctx, &t, &acc, NULL), SSM_OK);
    ssm_ctx_destroy(ctx);
    unsetenv(TUNING_TEST_LAYOUTS_ENV);
    free(path);
    remove_dir(dir);
}
END_TEST

Suite *make_suite(void)
{
    Suite *s = suite_create("tuning");
    TCase *file = tcase_create("cache file");
    tcase_add_test(file, test_entry_round_trip);
    tcase_add_test(file, test_file_round_trip);
    tcase_add_test(file, test_keys_differing_in_one_field);
    tcase_add_test(file, test_corrupt_files);
    tcase_add_test(file, test_bad_values_refused);
    tcase_add_test(file, test_format_ranges);
    tcase_add_test(file, test_line_ends_and_header);
    tcase_add_test(file, test_longest_line);
    tcase_add_test(file, test_atomic_save);
    tcase_add_test(file, test_put_marks_changes);
    tcase_add_test(file, test_merged_saves_keep_every_entry);
    tcase_add_test(file, test_save_lock);
    tcase_add_test(file, test_merge_save_out_of_memory);
    suite_add_tcase(s, file);
    TCase *pass = tcase_create("passes");
    tcase_add_test(pass, test_pass_failed_recorded_and_skipped);
    tcase_add_test(pass, test_pass_out_of_memory_and_errors);
    tcase_add_test(pass, test_pass_layouts);
    suite_add_tcase(s, pass);
    TCase *config = tcase_create("config");
    tcase_add_test(config, test_config_tuning);
    suite_add_tcase(s, config);
    TCase *ctx = tcase_create("contexts");
    tcase_set_timeout(ctx, 60);
    tcase_add_test(ctx, test_cpu_context_is_a_no_op);
    tcase_add_test(ctx, test_context_tunes_through_the_hook);
    tcase_add_test(ctx, test_no_save_when_nothing_changed);
    tcase_add_test(ctx, test_concurrent_tuners_lose_nothing);
    tcase_add_test(ctx, test_ticket_layout_into_commit);
    tcase_add_test(ctx, test_cpu_context_layout_zero);
    suite_add_tcase(s, ctx);
    return s;
}
