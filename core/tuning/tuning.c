/* Tuning passes (core/tuning/tuning.h, docs/tuning.md): for every family the mode
 * offers and every bucket of the pool, the cache's choice, or in mode tune
 * the candidates timed on the plugin's scratch (those recorded as failed
 * skipped, new failures recorded with their reason) and the fastest kept;
 * then the update layouts, which are read, never timed. */
#include <stdio.h>
#include <string.h>

#include "core/tuning/tuning.h"

const char *const tuning_layout_names[TUNING_LAYOUTS] = {"fma2", "fma2-rev"};

int32_t tuning_bucket(int64_t rows)
{
    int32_t b = 0;
    while (b < SSM_TUNE_BUCKETS - 1 && ((int64_t)1 << b) < rows)
        b++;
    return b;
}

static int32_t candidate_of(const ssm_tune_family_v1 *f, const char *name)
{
    for (int32_t c = 0; c < f->candidates; c++)
        if (f->names[c] && !strcmp(f->names[c], name))
            return c;
    return -1;
}

static int has_failed(const tuning_entry *e, const char *name)
{
    for (int32_t i = 0; i < e->failed_count; i++)
        if (!strcmp(e->failed[i], name))
            return 1;
    return 0;
}

/* 1 when every candidate of f is recorded as failed in e: nothing to time. */
static int all_failed(const ssm_tune_family_v1 *f, const tuning_entry *e)
{
    for (int32_t c = 0; c < f->candidates; c++)
        if (!has_failed(e, f->names[c]))
            return 0;
    return 1;
}

static void record_failure(tuning_entry *e, const char *name, const char *why)
{
    if (e->failed_count >= TUNING_MAX_FAILED || has_failed(e, name))
        return;
    snprintf(e->failed[e->failed_count], TUNING_NAME_LEN, "%s", name);
    snprintf(e->why[e->failed_count], TUNING_WHY_LEN, "%s", why[0] ? why : "failed");
    e->failed_count++;
}

static void choose(tuning_pass *p, int32_t family, int32_t bucket, int32_t candidate)
{
    if (candidate > 0)
        p->choices[p->choice_count++] = (ssm_tune_choice_v1){family, bucket, candidate};
}

/* Times every candidate of family f at bucket b not recorded as failed into
 * e. The scratch for the bucket is up (begun). */
static ssm_status time_candidates(tuning_pass *p, const ssm_tune_family_v1 *f, int32_t b,
                                  tuning_entry *e, int32_t *best)
{
    double best_ms = 0;
    *best = -1;
    for (int32_t c = 0; c < f->candidates; c++) {
        const char *name = f->names[c];
        if (has_failed(e, name)) {
            p->report.skipped_failed++;
            continue;
        }
        ssm_tune_trial_v1 trial;
        memset(&trial, 0, sizeof trial);
        trial.struct_size = sizeof trial;
        trial.family = f->family;
        trial.bucket = b;
        trial.candidate = c;
        trial.budget_ms = p->budget_ms;
        trial.stream = p->stream;
        ssm_status st = p->runner->run(p->runner->user, &trial);
        if (st != SSM_OK)
            return st;
        trial.why[sizeof trial.why - 1] = '\0';
        if (trial.why[0]) {
            ssm_log(1, "tuning: %s candidate %s at %ld rows failed: %s",
                    tuning_family_name(f->family), name, 1L << b, trial.why);
            record_failure(e, name, trial.why);
            p->report.failed++;
            continue;
        }
        if (*best < 0 || trial.ms < best_ms) {
            *best = c;
            best_ms = trial.ms;
        }
    }
    if (*best >= 0) {
        snprintf(e->choice, sizeof e->choice, "%s", f->names[*best]);
        e->ms = best_ms;
    }
    return SSM_OK;
}

/* The scratch of bucket b could not be had: every candidate not yet failed
 * fails with that reason. */
static void fail_all(tuning_pass *p, const ssm_tune_family_v1 *f, tuning_entry *e,
                     const char *why)
{
    for (int32_t c = 0; c < f->candidates; c++) {
        if (has_failed(e, f->names[c])) {
            p->report.skipped_failed++;
            continue;
        }
        record_failure(e, f->names[c], why);
        p->report.failed++;
    }
}

static void read_layouts(tuning_pass *p, const tuning_cache *cache)
{
    tuning_key key = *p->base;
    snprintf(key.mode, sizeof key.mode, "%s", TUNING_ANY_MODE);
    key.family = SSM_TUNE_LAYOUT;
    for (int32_t b = 0; b <= p->max_bucket; b++) {
        key.bucket = b;
        const tuning_entry *e = tuning_cache_find(cache, &key);
        if (!e || !e->choice[0])
            continue;
        int32_t layout = -1;
        for (int32_t l = 0; l < TUNING_LAYOUTS; l++)
            if (!strcmp(tuning_layout_names[l], e->choice))
                layout = l;
        if (layout < 0 || (layout > 0 && !p->test_layouts)) {
            ssm_log(1, "tuning: layout '%s' at %ld rows is %s; the built-in layout runs",
                    e->choice, 1L << b,
                    layout < 0 ? "unknown" : "test-only (" TUNING_TEST_LAYOUTS_ENV " is not 1)");
            continue;
        }
        p->layout[b] = (uint8_t)layout;
        p->report.cached++;
    }
}

ssm_status tuning_run_pass(tuning_pass *p, tuning_cache *cache)
{
    p->choice_count = 0;
    memset(p->layout, 0, sizeof p->layout);
    memset(&p->report, 0, sizeof p->report);
    p->changed = 0;
    int32_t changes = cache->changes;
    const ssm_tune_family_v1 *families = NULL;
    int32_t count = 0;
    if (p->runner && p->runner->space) {
        ssm_status st = p->runner->space(p->runner->user, &families, &count);
        if (st != SSM_OK)
            return st;
    }
    int32_t begun = -1; /* the bucket whose scratch is up */
    ssm_status status = SSM_OK;
    for (int32_t b = 0; b <= p->max_bucket && status == SSM_OK; b++) {
        for (int32_t i = 0; i < count && status == SSM_OK; i++) {
            const ssm_tune_family_v1 *f = &families[i];
            if (f->family <= SSM_TUNE_LAYOUT || f->family >= SSM_TUNE_FAMILIES ||
                f->candidates < 1 || !f->names)
                continue;
            tuning_key key = *p->base;
            key.family = f->family;
            key.bucket = b;
            tuning_entry *found = tuning_cache_find(cache, &key);
            int32_t chosen = found && found->choice[0] ? candidate_of(f, found->choice) : -1;
            if (found && found->choice[0] && chosen < 0)
                ssm_log(1, "tuning: cached %s choice '%s' at %ld rows is not a candidate here",
                        tuning_family_name(f->family), found->choice, 1L << b);
            if (chosen >= 0) {
                p->report.cached++;
                choose(p, f->family, b, chosen);
                continue;
            }
            if (p->mode != SSM_TUNING_TUNE) {
                p->report.untuned++;
                continue;
            }
            tuning_entry e;
            if (found)
                e = *found;
            else {
                memset(&e, 0, sizeof e);
                e.key = key;
            }
            e.choice[0] = '\0';
            e.ms = 0;
            int32_t best = -1;
            if (all_failed(f, &e)) {
                /* Nothing left to time: no scratch, and the entry stays. */
                p->report.skipped_failed += f->candidates;
                p->report.untuned++;
                status = tuning_cache_put(cache, &e);
                continue;
            }
            if (begun != b) {
                if (begun >= 0)
                    p->runner->end(p->runner->user);
                begun = -1;
                int64_t rows = (int64_t)1 << b;
                status = p->runner->begin(p->runner->user, (int32_t)(rows > 65535 ? 65535 : rows),
                                          p->stream);
                if (status == SSM_ERR_OUT_OF_MEMORY) {
                    status = SSM_OK;
                    fail_all(p, f, &e, "out of memory");
                } else if (status == SSM_OK) {
                    begun = b;
                }
            }
            if (status == SSM_OK && begun == b)
                status = time_candidates(p, f, b, &e, &best);
            if (status != SSM_OK)
                break;
            if (best >= 0) {
                p->report.tuned++;
                choose(p, f->family, b, best);
            } else {
                p->report.untuned++;
            }
            status = tuning_cache_put(cache, &e);
        }
    }
    p->changed = cache->changes != changes;
    if (begun >= 0)
        p->runner->end(p->runner->user);
    if (status != SSM_OK)
        return status;
    read_layouts(p, cache);
    return SSM_OK;
}
