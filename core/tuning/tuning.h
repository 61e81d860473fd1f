/* Tuning (docs/tuning.md): a pass over the kernel families a mode offers and
 * the batch buckets of its pool, choices read from the cache or timed on the
 * plugin's scratch, the cache updated; the context's side of it (when a pass
 * runs, the update layout per bucket that verifies put in their tickets);
 * and the internal test hook that lets a CPU test drive a pass with a fake
 * candidate runner. */
#ifndef SSM_CORE_TUNING_H
#define SSM_CORE_TUNING_H

#include "core/tuning/cache.h"

/* What a pass drives: the plugin's tune_* entries on a CUDA context, or a
 * test's fake. `space` lists the families; begin/run/end time candidates on
 * scratch (run: SSM_OK with trial->why set when a candidate cannot run; an
 * error stops the pass); apply installs the choices. */
typedef struct ssm_tune_runner {
    void *user;
    ssm_status (*space)(void *user, const ssm_tune_family_v1 **families, int32_t *count);
    ssm_status (*begin)(void *user, int32_t max_rows, void *stream);
    ssm_status (*run)(void *user, ssm_tune_trial_v1 *trial);
    void (*end)(void *user);
    ssm_status (*apply)(void *user, const ssm_tune_choice_v1 *choices, int32_t count);
} ssm_tune_runner;

/* The update layouts (SSM_TUNE_LAYOUT), chosen by the core, never timed:
 * 0 "fma2" (the built-in), 1 "fma2-rev" (test-only: honoured only when
 * $SSMSTATE_TUNING_TEST_LAYOUTS is 1 when the context is created). */
#define TUNING_LAYOUTS 2
extern const char *const tuning_layout_names[TUNING_LAYOUTS];
#define TUNING_TEST_LAYOUTS_ENV "SSMSTATE_TUNING_TEST_LAYOUTS"

/* One pass: inputs, then what it found. */
typedef struct tuning_pass {
    const tuning_key *base;  /* everything but mode-sharing, family and bucket */
    const ssm_tune_runner *runner;
    ssm_tuning_mode mode;    /* cached: read only; tune: time what is missing */
    int32_t max_bucket;      /* buckets 0 .. max_bucket */
    int32_t budget_ms;
    void *stream;
    int test_layouts;        /* the test-only layout may be honoured */
    /* out */
    ssm_tune_choice_v1 choices[SSM_TUNE_FAMILIES * SSM_TUNE_BUCKETS]; /* candidates != 0 */
    int32_t choice_count;
    uint8_t layout[SSM_TUNE_BUCKETS];
    ssm_tune_report report;
    int changed;             /* the cache gained or changed entries (tuning_cache_put
                                changed something: an entry timed again to the same
                                result is no change) */
} tuning_pass;

/* Runs a pass against `cache` (entries are added or updated in memory;
 * saving is the caller's). An error (the runner's, or out of memory) ends
 * the pass: the caller then drops the cache and keeps its choices. */
ssm_status tuning_run_pass(tuning_pass *pass, tuning_cache *cache);

/* Bucket of a batch of `rows` rows: the least b with rows <= 2^b. */
int32_t tuning_bucket(int64_t rows);

/* The context's side (struct ssm_ctx holds one). */
typedef struct ssm_tuning_state {
    uint8_t layout[SSM_TUNE_BUCKETS]; /* update layout per bucket, 0 unless tuned */
    ssm_tune_report report;           /* of the latest pass */
    int test_layouts;
} ssm_tuning_state;

struct ssm_ctx;

/* At context creation, after the plugin instance exists: a pass as the
 * config's [tuning] says (nothing for off, or on a CPU context without the
 * test hook). SSM_ERR_CONFIG when mode = tune cannot write the cache's
 * directory; other errors as ssm_tune. */
ssm_status ssm_tuning_create(struct ssm_ctx *ctx);

/* The layout a verify or decode of `rows` rows runs with (0 for a mode
 * without SSM_CAP_LAYOUTS). */
uint32_t ssm_tuning_layout(const struct ssm_ctx *ctx, int32_t rows);

/* Test hook (tests only; not thread-safe): while set, every context created
 * and every ssm_tune, CPU contexts included, tunes through `runner` with
 * `device` as the device's name (compute capability 0.0, driver 0) instead
 * of the plugin's entries. NULL removes it. */
void ssm_tuning_test_hook(const ssm_tune_runner *runner, const char *device);

/* The device side (core/tuning/device.c): the key's device fields; whether
 * a stream is being captured (1), not (0), or the query failed (-1); make
 * the context's device current, returning the one that was (restore it
 * with ssm_tuning_leave_device). Without CUDA: the key names "cpu",
 * nothing is ever captured, the device calls do nothing. */
void ssm_tuning_device_key(const ssm_device *device, tuning_key *key);
int ssm_tuning_stream_capturing(void *stream);
int ssm_tuning_enter_device(const ssm_device *device);
void ssm_tuning_leave_device(int previous);

#endif
