/* `ssmstate serve` (docs/serve.md): a streamed serving benchmark of the state
 * modes through the public API. The options, and what one run of a mode
 * yields; the pieces are in serve_*.c, one idea each. */
#ifndef SSM_TOOLS_SERVE_H
#define SSM_TOOLS_SERVE_H

#include <signal.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "tools/compare.h"
#include "serve_workload.h"

enum {
    SERVE_MAX_LIST = 16,   /* entries of a comma-separated option */
    SERVE_MAX_POINTS = 40, /* concurrency levels of one mode */
    SERVE_DRAFTS = 3,      /* max_draft_tokens: an MTP round verifies T = 4 */
    SERVE_MAX_SLOTS = 65536 /* slots a run gives one mode, whatever its budget holds */
};

/* What to run, from the command line. */
typedef struct serve_options {
    serve_workload workload; /* seed, lengths, acceptance, T; rate set per level */
    double rate;             /* arrivals per step; 0: auto (serve_auto_rate) */
    int32_t chunk;           /* prefill tokens per step, shared by the prefilling rows */
    int32_t steps;           /* measured steps per concurrency level */
    int32_t warmup_steps;    /* the most warm-up steps per level */
    int32_t check;           /* requests cross-checked (0: none) */
    const char *check_layers;/* their layers (serve_check_layers); NULL: "ends" */
    int32_t check_threads;   /* threads replaying the check; 0: one per usable CPU */
    uint64_t budget;         /* state bytes; 0: the device's default */
    ssm_dtype states[2];
    int32_t states_count;
    const char *modes[SERVE_MAX_LIST];
    int32_t modes_count;
    int32_t concurrency[SERVE_MAX_LIST]; /* extra levels; 0 entries: powers of two */
    int32_t concurrency_count;
    const char *device;      /* --device, or NULL */
    int quiet;
} serve_options;

/* Set by SIGINT (Ctrl-C) while a run is under way (serve_catch_interrupt):
 * the stream stops at the end of its step, the level measured so far is
 * kept, nothing more runs, and what was measured is printed and written
 * (docs/serve.md, "Interrupting a run"). A second Ctrl-C ends the process. */
extern volatile sig_atomic_t serve_interrupted;
void serve_catch_interrupt(void);  /* installs the handler (one shot) */
void serve_release_interrupt(void); /* puts the default back */

/* Seconds between progress lines of a level that runs on (unless --quiet). */
#define SERVE_PROGRESS_SECONDS 5.0

/* The arrival rate that keeps `concurrency` slots full: twice the most
 * requests per step that many slots can finish (a request lives at least
 * one prefill step and ceil(output_min / T) rounds). */
double serve_auto_rate(const serve_options *o, int32_t concurrency);

/* One concurrency level of one mode. Times are of the measured steps. */
typedef struct serve_point {
    int32_t concurrency;       /* the cap on requests holding a slot */
    double rate;               /* arrivals per step */
    int64_t warmup_steps;      /* steps run before measuring */
    int64_t steps;             /* measured steps (with work: see idle_steps) */
    int64_t idle_steps;        /* steps with no row to run while measuring, not timed */
    double seconds;            /* their wall time (sum of step times) */
    int64_t tokens;            /* output tokens accepted in them (up to each output length) */
    int64_t verify_rows;       /* MTP rounds run in them */
    int64_t prefill_tokens;    /* prompt tokens prefilled in them */
    int64_t finished;          /* requests finished in them */
    int64_t folds;             /* replay: (slot, layer) folds in them; -1: not replay */
    double tokens_per_second;  /* tokens / seconds */
    double folds_per_second;   /* folds / seconds; NaN: not replay */
    double p50_ms, p99_ms;     /* step wall time */
    double device_p50_ms;      /* step device time (CUDA events); NaN on the CPU */
    double mean_rows;          /* verify rows per step */
    double mean_busy;          /* requests holding a slot, per step */
} serve_point;

/* The cross-check of one mode. */
typedef struct serve_check_result {
    int ran;                   /* 0: --check 0, or the mode did not run */
    char against[96];          /* "cpu compact", "cpu native" */
    int outputs_bitwise;       /* outputs held to bit identity (else the bound) */
    int states_bitwise;        /* final states held to bit identity (else the bound) */
    bound_relation relation;   /* the bounds: the run on a GPU, or on the CPU (bound.h) */
    int32_t requests;          /* requests whose outputs were compared */
    int32_t finished;          /* of them, finished with their final state compared */
    compare_difference diff;
    int pass;
    char error[256];           /* the check could not run */
} serve_check_result;

/* One mode under one (config, state dtype). */
typedef struct serve_mode_result {
    char mode[64];
    ssm_plan plan;             /* capacity 1 on the run's device */
    int64_t budget_holds;      /* floor((budget - shared) / bytes per slot) */
    int32_t max_concurrent;    /* the run's slots: budget_holds, at most SERVE_MAX_SLOTS */
    serve_point points[SERVE_MAX_POINTS];
    int32_t points_count;
    serve_check_result check;
    uint32_t status_flags;     /* ssm_ctx_status() after the run */
    char error[256];           /* non-empty: the mode could not run */
} serve_mode_result;

/* Everything one (config, state dtype) yields. */
typedef struct serve_table {
    const char *config_path;
    ssm_model_dims model;
    ssm_dtype state_dtype, act;
    char device_name[256];
    ssm_device device;
    uint64_t budget;
    int32_t history;           /* replay's L */
    serve_mode_result modes[SERVE_MAX_LIST];
    int32_t modes_count;
} serve_table;

/* The point of a mode at `concurrency`, or NULL. */
const serve_point *serve_find_point(const serve_mode_result *m, int32_t concurrency);

/* The mode of that name in a table, or NULL. */
const serve_mode_result *serve_find_mode(const serve_table *t, const char *mode);

/* The point at the mode's largest concurrency, or NULL. */
const serve_point *serve_max_point(const serve_mode_result *m);

#endif
