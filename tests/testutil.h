/* Helpers shared by the test suites: a seeded generator, realistic random
 * layer inputs, and relative-RMS and bitwise comparisons. */
#ifndef SSM_TESTS_TESTUTIL_H
#define SSM_TESTS_TESTUTIL_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"

/* xorshift64* seeded by tools/rng.h's splitmix64 (its numbers in [0, 1)
 * too); fresh seed per run unless SSM_TEST_SEED is set. Fixed seeds (the
 * fault suites') give the same numbers on every run. */
typedef struct test_rng { uint64_t s; } test_rng;
uint64_t test_seed(void);           /* prints the seed once to stderr */
void test_rng_init(test_rng *r, uint64_t seed);
uint64_t test_rng_next(test_rng *r);
double test_rng_uniform(test_rng *r);  /* [0, 1) */
double test_rng_normal(test_rng *r);   /* N(0, 1) */
int32_t test_rng_int(test_rng *r, int32_t lo, int32_t hi); /* [lo, hi] */

/* Fills n elements of dtype t with N(mean, std) values (rounded to t). */
void test_fill_normal(test_rng *r, void *dst, ssm_dtype t, int64_t n, double mean, double std);

/* Layer weights with realistic statistics: conv weights ~ N(0, 1/W), small
 * bias, A_log in [log 1, log 16], dt_bias ~ N(-2, 0.5) so gates land where real
 * models put them. Owned: free with test_weights_free. */
typedef struct test_weights {
    ssm_layer_weights w;
    float *conv_weight, *conv_bias, *a_log, *dt_bias;
} test_weights;
void test_weights_make(test_rng *r, const ssm_model_dims *m, int with_bias, test_weights *out);
void test_weights_free(test_weights *tw);

/* Inputs for n tokens in dtype act: x ~ N(0, 1), gate ~ N(0, 1),
 * beta ~ N(0, 1.5). Owned: free with test_io_free (out is allocated, zeroed). */
typedef struct test_io {
    ssm_step_io io;
    void *x, *gate, *beta, *out;
    int64_t tokens;
} test_io;
void test_io_make(test_rng *r, const ssm_model_dims *m, ssm_dtype act, int64_t n, test_io *out);
void test_io_free(test_io *t);

/* ||a - b|| / ||b|| over n elements (a, b in dtypes ta, tb); +inf if any value
 * is not finite or ||b|| == 0 while ||a - b|| > 0. */
double test_rel_rms(const void *a, ssm_dtype ta, const void *b, ssm_dtype tb, int64_t n);
/* Same for double arrays against a reference in doubles. */
double test_rel_rms_f64(const void *a, ssm_dtype ta, const double *ref, int64_t n);

/* Relative RMS of several tensors taken as one: the sums of squared errors
 * and of squared reference values; a value that is not finite makes the
 * error sum infinite. Start from {0, 0}. */
typedef struct test_rms_sum {
    double error2, reference2;
} test_rms_sum;
void test_rms_sum_add(test_rms_sum *s, const void *a, ssm_dtype ta, const void *b, ssm_dtype tb,
                      int64_t n);
void test_rms_sum_add_f64(test_rms_sum *s, const void *a, ssm_dtype ta, const double *ref,
                          int64_t n);
/* The sums' relative RMS, by test_rel_rms's rule. */
double test_rms_sum_value(const test_rms_sum *s);

/* 1 when n elements of two buffers of dtype t are identical bit for bit. */
int test_bitwise_equal(const void *a, const void *b, ssm_dtype t, int64_t n);
/* Element index of the first difference of two such buffers, or -1. */
int64_t test_first_difference(const void *a, const void *b, ssm_dtype t, int64_t n);

/* Rows of a batch: `count` distinct lanes among the `lanes` whose
 * eligible[lane] is set (fewer when fewer are), in random order, then `pads`
 * padding rows (-1) at random positions, max_rows rows at most. Writes the
 * lanes of the rows into out and returns how many rows there are. */
int32_t test_pick_rows(test_rng *r, const int *eligible, int32_t lanes, int32_t count,
                       int32_t pads, int32_t max_rows, int32_t *out);

/* A small random GDN or KDA shape (GVA included when gva != 0). */
void test_random_dims(test_rng *r, ssm_model_kind kind, int gva, ssm_model_dims *m);


/* A config struct for a CPU context of mode `mode` (plugins are found through
 * $SSMSTATE_PLUGIN_PATH, which `make check` sets to the build's plugins). */
void test_config(ssm_config *c, const ssm_model_dims *m, const char *mode, ssm_dtype state,
                 ssm_dtype act, int32_t capacity, int32_t max_draft);

/* Canonical copy of a slot (all layers), for before/after comparisons. */
typedef struct test_snapshot {
    int32_t layers;
    void **conv;
    void **state;
    size_t conv_bytes, state_bytes; /* per layer */
} test_snapshot;
/* Zeroed host buffers for a snapshot of one slot of ctx (what
 * test_snapshot_take fills, and a device export is copied into). */
void test_snapshot_alloc(const ssm_ctx *ctx, test_snapshot *out);
/* Exports `slot` of ctx into a new snapshot; returns the export's status. */
ssm_status test_snapshot_take(ssm_ctx *ctx, int32_t slot, test_snapshot *out);
int test_snapshot_equal(const test_snapshot *a, const test_snapshot *b);
void test_snapshot_free(test_snapshot *s);

/* One prefill of a prompt of 3 + 9 k tokens into slots[k] (count of them),
 * every layer, random weights and bf16 inputs from r: slots that then hold
 * distinct, nonzero states. SSM_OK or the first failing prefill's status. */
ssm_status test_prefill_prompts(ssm_ctx *ctx, const int32_t *slots, int32_t count,
                                const ssm_model_dims *m, test_rng *r);

/* `text` with its line `line` (1-based) replaced by `replacement`, which may
 * hold several lines; NULL deletes the line. The result lives until the
 * fourth call after this one (copy it to keep it longer). A missing line
 * or a result past 16 KiB aborts the test. */
const char *test_edit_line(const char *text, int line, const char *replacement);

/* The path of `relative` in the source tree: under SSM_TOP_SRCDIR when make
 * check sets it, else found from this file's own path (a direct run). */
void test_source_path(char *out, size_t len, const char *relative);

#endif
