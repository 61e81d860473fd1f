/* `ssmstate bench`: the parts that need no GPU. The options, one measured
 * row, the byte model (bench_bytes.c), the table and JSON lines
 * (bench_report.c) and fla's timings (bench_fla.c). The CUDA side is in
 * bench_cuda.h. docs/bench.md describes the command and its output. */
#ifndef SSM_TOOLS_BENCH_H
#define SSM_TOOLS_BENCH_H

#include <stdint.h>
#include <stdio.h>

#include "ssmstate/ssmstate.h"

/* Exit code when there is nothing to measure on: a build without CUDA, or no
 * GPU visible. Automake's test driver reads 77 as SKIP. */
enum { BENCH_EXIT_NO_GPU = 77 };

enum {
    BENCH_MAX_LIST = 16,      /* entries of one comma-separated option */
    BENCH_DRAFT_TOKENS = 3,   /* max_draft_tokens: an MTP round verifies T = 4 */
    BENCH_LAYERS_CHAIN = -1   /* in bench_options.layers: the config's layer count */
};

/* What to measure, from the command line. */
typedef struct bench_options {
    ssm_dtype states[2];
    int32_t states_count;
    const char *modes[BENCH_MAX_LIST]; /* native first when measured at all */
    int32_t modes_count;
    int32_t batches[BENCH_MAX_LIST];
    int32_t batches_count;
    int32_t layers[BENCH_MAX_LIST];    /* a count, or BENCH_LAYERS_CHAIN */
    int32_t layers_count;
    int32_t accepted[BENCH_MAX_LIST];  /* accepted lengths of the MTP rounds, 1..T */
    int32_t accepted_count;
    int32_t samples;                   /* timing samples per measurement */
    int32_t warmup;                    /* untimed launches before them */
    double min_sample_us;              /* repeat short work until a sample lasts this long */
    int quiet;                         /* no progress lines on stderr */
} bench_options;

typedef enum bench_op {
    BENCH_OP_COPY = 0,   /* cudaMemcpyAsync of the states: the ceiling */
    BENCH_OP_DECODE = 1, /* one decode step of every layer */
    BENCH_OP_ROUND = 2   /* MTP round: verify T tokens on every layer, commit a */
} bench_op;

/* What replay's outputs read from each committed record ([replay] outputs). */
typedef enum bench_replay_reads {
    BENCH_REPLAY_RAW = 0,      /* exact: the raw record, re-applied by native's update */
    BENCH_REPLAY_IDENTITY = 1  /* identity, matrix: the key, u and the cumulative gate */
} bench_replay_reads;

/* The shape every row of one table shares. */
typedef struct bench_shape {
    ssm_model_dims model;  /* model.layers: the chain's layer count */
    ssm_dtype state_dtype;
    ssm_dtype activation_dtype;
    int32_t tokens;        /* T of an MTP round */
    int32_t history;       /* L of replay's ring */
    bench_replay_reads replay_reads;
    int32_t fold_rows;     /* replay: decodes of at most this many rows fold every step */
    int commit_in_step;    /* compact: the next step applies the commit (the GPU) */
} bench_shape;

/* One measurement. Times are per decode step, MTP round or copy. */
typedef struct bench_row {
    bench_op op;
    char mode[64];             /* "copy" for copy rows */
    int32_t layers;
    int32_t batch;
    int32_t tokens;            /* 1 for decode and copy, T for a round */
    int32_t accepted;          /* rounds: a; 0 otherwise */
    int32_t steps_per_launch;  /* decode: P steps captured per graph; 1 otherwise */
    int32_t launches_per_sample;
    int32_t samples;
    int graph;                 /* 1: CUDA graph launches; 0: plain calls */
    char capture_error[160];   /* why capture failed, when graph == 0 */
    double median_us, p10_us, p90_us;
    uint64_t bytes;            /* the floor, bench_floor_bytes() */
    uint64_t io_bytes;         /* per-token I/O and conv window, not in bytes */
    double gbps;               /* bytes / median */
    double copy_fraction;      /* gbps / the copy's gbps at the same layers and B; NaN: none */
    double speedup;            /* native's median / this median; NaN: no native row */
    double fla_us;             /* fla's median for the same decode; NaN: none */
    char fla_variant[32];      /* which of fla's kernels that was */
    char error[256];           /* non-empty: the measurement failed, numbers unset */
} bench_row;

/* The rows of one (model, state dtype). */
typedef struct bench_table {
    const char *config_path;
    const char *device_name;
    bench_shape shape;
    bench_row *rows;
    int32_t count, capacity;
} bench_table;

/* Appends a zeroed row (NaN ratios); NULL when out of memory. */
bench_row *bench_table_add(bench_table *t);
void bench_table_free(bench_table *t);

/* ------------------------------------------------------- the byte model */

/* One matrix state of one layer for one request: HV V K state bytes. */
uint64_t bench_state_bytes(const bench_shape *s);

/* Bytes a measurement had to move through device memory for `batch`
 * requests and `layers` layers: the state and history traffic of
 * docs/modes.md, "Bytes each operation moves" (docs/bench.md gives each
 * formula). Copy: read + write of the states. `accepted` only matters for
 * rounds. 0 for a mode it has no model of. */
uint64_t bench_floor_bytes(const bench_shape *s, const char *mode, bench_op op, int32_t batch,
                           int32_t layers, int32_t accepted);

/* Bytes of per-token inputs and outputs and of the conv window, the same in
 * every mode and left out of the floor; reported next to it. */
uint64_t bench_io_bytes(const bench_shape *s, bench_op op, int32_t batch, int32_t layers);

/* Rounds between two folds of replay when every round of T tokens commits
 * `accepted` (the fold rule: fold before a step when n + 2T > L). With T = 1
 * and accepted 1 this is L - 1, the decode period. */
int32_t bench_fold_period(int32_t history, int32_t tokens, int32_t accepted);

/* -------------------------------------------------------- fla's timings */

/* One timing of bench/fla_bench.py. */
typedef struct bench_fla_entry {
    ssm_model_kind model;
    ssm_dtype state_dtype;   /* "state" key, f32 when absent */
    int32_t batch;
    int32_t tokens;
    double median_us;
    char variant[32];        /* "variant" key, "" when absent */
} bench_fla_entry;

typedef struct bench_fla {
    bench_fla_entry *entries;
    int32_t count;
} bench_fla;

/* Reads fla's timings: every flat JSON object in the file with keys model
 * ("gdn"/"kda"), batch, tokens and median_us (optional variant, state
 * "f32"/"bf16"; other keys ignored), one per line or inside a document.
 * Returns 0, or -1 with the reason in error and *out untouched (also when
 * the file holds no timing at all). */
int bench_fla_load(const char *path, bench_fla *out, char *error, size_t len);
void bench_fla_free(bench_fla *fla);

/* fla's fastest timing for (model, state dtype, batch, tokens) over its
 * variants (the strongest peer); NULL when there is none. */
const bench_fla_entry *bench_fla_find(const bench_fla *fla, ssm_model_kind model,
                                      ssm_dtype state_dtype, int32_t batch, int32_t tokens);

/* ------------------------------------------------------------- reports */

/* Fills each row's gbps, copy_fraction, speedup and (fla not NULL, one-layer
 * fp32 decode rows) fla_us from the other rows of the table. */
void bench_report_derive(bench_table *t, const bench_fla *fla);

/* Prints the table to stdout, sorted by layers, op, accepted, batch and the
 * order of `modes`, with footnotes for failed captures and the byte model. */
void bench_report_print(const bench_table *t, const char *const *modes, int32_t modes_count);

/* Writes one JSON object per row to `out`. */
void bench_report_json(const bench_table *t, FILE *out);

#endif
