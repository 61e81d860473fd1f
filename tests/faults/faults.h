/* Shared parts of the fault-injection suite (docs/reliability.md): the walk
 * over allocation faults, the per-operation tally and a decode probe. */
#ifndef SSM_TESTS_FAULTS_H
#define SSM_TESTS_FAULTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/faults.h"
#include "tests/testutil.h"

/* The operations tallied in the summary line. */
typedef enum fault_op {
    OP_CREATE_STRUCT, /* ssm_ctx_create from a struct (with mode sections) */
    OP_CREATE_INI,    /* ssm_ctx_create_from_file (config load + create) */
    OP_EXPORT_PAGE,
    OP_EXPORT_PAGES,
    OP_IMPORT_PAGE,
    OP_IMPORT_SLICE, /* a whole-model page into a rank's context */
    OP_IMPORT_PAGES,
    OP_SLOT_COPY,
    OP_CTX_STATUS,
    OP_PAGE_MERGE,
    OP_PLUGINS_LIST,
    OP_COUNT
} fault_op;

extern const char *const fault_op_names[OP_COUNT];

/* The tally of faults per operation, shared by every forked test: init maps
 * it (call before the runner forks), tally adds, tallied reads (-1: none). */
void faults_tally_init(void);
void faults_tally(fault_op op, int64_t faults);
int64_t faults_tallied(fault_op op);

/* Runs op(arg) with the nth allocation of the core failing, n = 1, 2, ...
 * until a run reaches no nth allocation; that run must succeed. Every run
 * with a fault must fail with SSM_ERR_OUT_OF_MEMORY and a message about
 * memory, and leave as many live allocations as it found; check(arg, status)
 * runs after every run (fault disarmed) to judge the objects. Tallies and
 * returns the faults injected. */
int64_t faults_walk(fault_op op, const char *what, ssm_status (*run)(void *arg),
                    void (*check)(void *arg, ssm_status status), void *arg);

/* Small shapes: the whole model, and its rank holding value heads [2, 4). */
ssm_model_dims faults_dims(int kda);
ssm_model_dims faults_rank_dims(int kda);

/* Fixed inputs for LAYERS layers of a 7-token prompt, and what a fresh
 * slot's prefill writes for them. */
#define FAULTS_LAYERS 2
typedef struct faults_probe {
    ssm_model_dims m;
    test_weights w[FAULTS_LAYERS];
    test_io io[FAULTS_LAYERS];
    size_t out_bytes; /* per layer */
} faults_probe;
void faults_probe_make(faults_probe *p, const ssm_model_dims *m);
void faults_probe_free(faults_probe *p);
/* Prefills a fresh slot of ctx with p's inputs, copies every layer's
 * outputs into out (FAULTS_LAYERS * out_bytes) and releases the slot. */
void faults_probe_run(faults_probe *p, ssm_ctx *ctx, unsigned char *out);

/* Every page and slot walk for one mode and kind (faults_pages.c). */
void faults_pages_run(const char *mode, int kda);

#endif
