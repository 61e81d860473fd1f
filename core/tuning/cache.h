/* The tuning cache file (docs/tuning.md): entries keyed by the device, the
 * library, the model shape, dtypes, mode, kernel family and batch bucket,
 * each holding the chosen candidate, its time, and the candidates that
 * failed with their reasons. A versioned text format, one entry a line;
 * lines it cannot read are skipped with a log line, never an error; saves
 * are atomic (a temporary file renamed over the cache) and serialized
 * between processes by an advisory lock on PATH.lock; a pass's save merges
 * with the file as it is then, so concurrent tuners lose no entries.
 * Host-only, no knowledge of contexts or plugins. */
#ifndef SSM_CORE_TUNING_CACHE_H
#define SSM_CORE_TUNING_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* The first line of every cache file; the number is the format version. */
#define TUNING_CACHE_MAGIC "ssmstate-tuning-cache"
#define TUNING_CACHE_VERSION 1
#define TUNING_MAX_FAILED 8   /* failed candidates kept per entry */
#define TUNING_NAME_LEN 32    /* a candidate name, NUL included */
#define TUNING_WHY_LEN 160    /* a failure reason, NUL included */
#define TUNING_LINE_MAX 2048 /* the reader's line buffer: lines of 2 KiB at most */
#define TUNING_ANY_MODE "*"   /* the mode of entries every mode shares (the layout) */

/* What an entry is for, every field part of the match. */
typedef struct tuning_key {
    char device[96];      /* the device's name ("NVIDIA H200") */
    int32_t cc_major, cc_minor;
    int32_t driver;       /* CUDA driver version (13000) */
    char library[16];     /* ssmstate's version ("0.1.0") */
    ssm_model_kind kind;
    int32_t layers, heads, value_heads, key_dim, value_dim, conv_width;
    int32_t has_lower_bound;
    float lower_bound;
    int32_t max_tokens;   /* T_max */
    ssm_dtype state_dtype, activation_dtype;
    char mode[49];        /* the mode's name, or TUNING_ANY_MODE */
    int32_t family;       /* SSM_TUNE_* */
    int32_t bucket;       /* batches of up to 2^bucket rows */
} tuning_key;

typedef struct tuning_entry {
    tuning_key key;
    char choice[TUNING_NAME_LEN]; /* the chosen candidate; "" when none could run */
    double ms;                    /* its time per launch sequence */
    int32_t failed_count;
    char failed[TUNING_MAX_FAILED][TUNING_NAME_LEN];
    char why[TUNING_MAX_FAILED][TUNING_WHY_LEN];
    int32_t changed;              /* in memory only, never in the file: tuning_cache_put
                                     added or changed it since the cache was loaded */
} tuning_entry;

typedef struct tuning_cache {
    tuning_entry *entries;
    int32_t count, capacity;
    int32_t skipped_lines; /* lines the last load could not read */
    int32_t changes;       /* puts that added or changed an entry since the load */
} tuning_cache;

/* How long a save waits for another process's lock before it saves without
 * it (with a warning); 10000 ms. Tests may lower it. */
extern int32_t tuning_cache_lock_wait_ms;

/* Name of a family ("verify"), or NULL; the family of a name, or -1. */
const char *tuning_family_name(int32_t family);
int32_t tuning_family_of(const char *name);

/* 1 when two keys are the same in every field. */
int tuning_key_equal(const tuning_key *a, const tuning_key *b);

/* Writes entry e as one line (no newline) into buf; 0 when it does not fit. */
int tuning_entry_format(const tuning_entry *e, char *buf, size_t len);

/* Reads one entry line (without its newline). SSM_OK, or
 * SSM_ERR_INVALID_ARGUMENT with why (a word or two) and *e unspecified. */
ssm_status tuning_entry_parse(const char *line, tuning_entry *e, char *why, size_t why_len);

/* 1 when two entries hold the same key and result (their `changed` aside). */
int tuning_entry_same(const tuning_entry *a, const tuning_entry *b);

/* Replaces the entry with e's key, or appends e; either marks it changed
 * and counts it in cache->changes, unless an entry the same as e was there
 * already (then nothing happens). SSM_ERR_OUT_OF_MEMORY leaves the cache as
 * it was. */
ssm_status tuning_cache_put(tuning_cache *cache, const tuning_entry *e);

/* The entry with this key, or NULL. */
tuning_entry *tuning_cache_find(const tuning_cache *cache, const tuning_key *key);

/* Reads `path` into *cache (emptied first; no entry marked changed,
 * cache->changes 0). A missing file: SSM_OK, an
 * empty cache and *missing = 1. A file of another format version, or one
 * that is not a cache: SSM_OK, an empty cache, a log line. Lines that
 * cannot be read are skipped with a log line each (cache->skipped_lines).
 * An unreadable file (permissions): SSM_ERR_CONFIG with the reason. */
ssm_status tuning_cache_load(const char *path, tuning_cache *cache, int *missing);

/* Writes the whole cache to `path` atomically, replacing what the file
 * held: into a temporary file in the same directory, flushed, then renamed
 * over `path`, all under the lock on PATH.lock (a lock that cannot be had
 * is a warning and the save goes on without it). On any failure the old
 * file is untouched and the temporary removed. SSM_ERR_CONFIG with the
 * reason on failure. The cache is never modified. */
ssm_status tuning_cache_save(const char *path, const tuning_cache *cache);

/* A pass's save: under the lock, re-reads `path` as it is now and writes,
 * atomically as tuning_cache_save, every key of either: the cache's entry
 * when it is marked changed, else the file's, else the cache's (loaded
 * earlier, since removed from the file). The file's entries keep their
 * order, new ones follow. A file that cannot be re-read (or out of memory
 * for the merge) is an error and nothing is written: writing the cache
 * alone would drop what other processes saved. Errors and the cache as
 * tuning_cache_save. */
ssm_status tuning_cache_merge_save(const char *path, const tuning_cache *cache);

void tuning_cache_free(tuning_cache *cache);

#endif
