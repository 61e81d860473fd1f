/* ssmstate plugin ABI, version 1. FROZEN: every struct, field, constant
 * and method here, and the shared types of ssmstate/types.h they hold, stay
 * as they are in every later release (tests/check_abi_frozen.c pins them).
 * An addition is a new ABI version with its own header and entry symbol;
 * the loader adapts older tables to it (docs/abi.md, "Freeze").
 *
 * A mode plugin is a shared module that exports exactly one symbol,
 * `ssm_plugin_entry_v1` (SSM_PLUGIN_V1_SYMBOL), a const ssm_plugin_v1.
 * The core dlopen()s the module, checks abi_version == 1 and
 * struct_size >= SSM_PLUGIN_V1_MIN_SIZE (a table that ends with
 * materialize), reads entries past a shorter table as NULL, and from then on
 * calls only through the table. A plugin never links against libssmstate: what it needs from the core
 * (memory, logging, errors, flags) comes through the services table it is
 * handed at create().
 *
 * Calls the core makes are already validated: slots are in range or -1,
 * lengths are within the limits the plugin declared, tickets are current, and
 * accepted lengths are in [1, T] (host metadata; device metadata is checked by
 * the plugin's kernels, which skip the row and raise SSM_FLAG_BAD_*). On a
 * CUDA context the core checked the engine's host copy of the slots; the
 * kernels still skip a slot outside [0, capacity) (SSM_FLAG_BAD_SLOT), since
 * a replayed CUDA graph may carry other device values.
 * A plugin method returns SSM_OK or an error after calling services->error()
 * with a message; on error it must leave its state as it was.
 *
 * Methods that may be NULL say so; the core answers SSM_ERR_UNSUPPORTED for
 * them. Structs with a struct_size may be read shorter than this header
 * declares (what they lack reads as 0 or NULL), so a plugin checks
 * struct_size before it reads an optional field. */
#ifndef SSMSTATE_PLUGIN_V1_H
#define SSMSTATE_PLUGIN_V1_H

#include "ssmstate/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SSM_PLUGIN_V1_ABI_VERSION 1u
#define SSM_PLUGIN_V1_SYMBOL "ssm_plugin_entry_v1"

/* capabilities bits */
#define SSM_CAP_CPU        (1ull << 0) /* runs with state in host memory */
#define SSM_CAP_CUDA       (1ull << 1) /* runs with state in CUDA device memory */
#define SSM_CAP_GDN        (1ull << 2)
#define SSM_CAP_KDA        (1ull << 3)
#define SSM_CAP_STATE_F32  (1ull << 4)
#define SSM_CAP_STATE_BF16 (1ull << 5)
#define SSM_CAP_ACT_F32    (1ull << 6)
#define SSM_CAP_ACT_BF16   (1ull << 7)
#define SSM_CAP_PAGES      (1ull << 8) /* export_slot / import_slot / copy_slot work */
/* The plugin runs steps and commits with the update layout the core
 * hands it (ssm_step_v1.layout, ssm_commit_v1.layout; docs/tuning.md).
 * Without it the core hands every call layout 0. */
#define SSM_CAP_LAYOUTS    (1ull << 9)

/* Tuning (docs/tuning.md). Kernel families a launch choice is tuned
 * for, and batch-size buckets: bucket b holds batches of
 * (2^(b-1), 2^b] rows (bucket 0: one row), up to SSM_TUNE_BUCKETS - 1
 * (65536 rows, more than a launch takes). */
enum {
    SSM_TUNE_LAYOUT = 0,   /* the update layout (rounding); chosen by the core, never timed */
    SSM_TUNE_DECODE = 1,   /* one-token recurrence jobs (decode) */
    SSM_TUNE_VERIFY = 2,   /* multi-token recurrence jobs (verify, folds, prefill pieces) */
    SSM_TUNE_COMMIT = 3,   /* commits that replay records (compact) */
    SSM_TUNE_OUTPUTS = 4,  /* output-only reads: outputs computed without a state update */
    SSM_TUNE_PREFILL = 5,  /* the chunked prefill's scan */
    SSM_TUNE_FAMILIES = 6
};
#define SSM_TUNE_BUCKETS 17

/* One `key = value` from the config section named after the mode. */
typedef struct ssm_option_v1 {
    const char *key;
    const char *value;
    int32_t line; /* line in the config file, 0 when the config came from a struct */
} ssm_option_v1;

/* Everything a mode needs to size and build its storage. */
typedef struct ssm_mode_params_v1 {
    uint32_t struct_size;
    ssm_model_dims model;
    ssm_dtype state_dtype;
    ssm_dtype activation_dtype;
    ssm_device device;
    int32_t capacity;        /* slots in the pool */
    int32_t max_tokens;      /* T_max = 1 + max draft tokens, per verify row */
    int32_t options_count;   /* options from the section [<mode name>] */
    const ssm_option_v1 *options;
} ssm_mode_params_v1;

/* What a mode keeps per slot, in bytes, for the plan (all layers). */
typedef struct ssm_mode_plan_v1 {
    uint64_t state_bytes;   /* matrix states the mode keeps (all snapshots / checkpoint) */
    uint64_t conv_bytes;    /* conv windows incl. the verify tail */
    uint64_t scratch_bytes; /* records, rings, cursors, indices */
    uint64_t shared_bytes;  /* per-context, not per slot (workspaces) */
} ssm_mode_plan_v1;

/* Services the core hands to a plugin instance. `core` is opaque and is
 * passed back as the first argument of every service. */
typedef struct ssm_services_v1 {
    uint32_t struct_size;
    void *core;
    /* printf-style; level 0 error, 1 warning, 2 info, 3 debug */
    void (*log)(void *core, int level, const char *fmt, ...);
    /* Records the thread-local error message; returns `code` for tail calls. */
    ssm_status (*error)(void *core, ssm_status code, const char *fmt, ...);
    /* Memory in the context's memory space (host or device), aligned to 256
     * bytes, zero-filled. NULL on failure (the plugin returns
     * SSM_ERR_OUT_OF_MEMORY). Only allowed in create(), never in a step. */
    void *(*alloc)(void *core, size_t bytes);
    void (*release)(void *core, void *ptr);
    /* Host scratch (always host memory, zero-filled); same rules as alloc. */
    void *(*alloc_host)(void *core, size_t bytes);
    void (*release_host)(void *core, void *ptr);
    /* Raises SSM_FLAG_* bits for a slot (host path; kernels use flag words). */
    void (*flag_slot)(void *core, int32_t slot, uint32_t flags);
    /* Optional (check struct_size): CUDA contexts only, else NULL.
     * Device memory, capacity + 1 words: word s holds slot s's SSM_FLAG_*
     * bits, word `capacity` the bits of rows whose slot lies outside the
     * pool. Kernels atomicOr into it; the core reads it for ssm_ctx_status. */
    uint32_t *device_flags;
    /* Note: alloc and alloc_host may also be called from tune_begin,
     * for the tuning scratch, which tune_end releases. */
} ssm_services_v1;

/* One decode, verify or prefill call for one layer. */
typedef struct ssm_step_v1 {
    uint32_t struct_size;
    int32_t layer;
    int32_t rows;
    int32_t tokens;               /* T for decode (1) and verify; 0 for prefill */
    const int32_t *slots;         /* [rows], -1 = padding */
    const int32_t *token_offsets; /* prefill: [rows+1] cumulative; else NULL */
    int32_t max_row_tokens;       /* prefill: longest row; else T */
    const ssm_layer_weights *weights;
    ssm_step_io io;
    void *stream;                 /* cudaStream_t for CUDA contexts; NULL on the CPU */
    /* Optional (check struct_size; absent reads as 0): the update
     * layout (SSM_CAP_LAYOUTS). A verify's is its forward's (the ticket's),
     * a decode's the one chosen for its bucket, a prefill's 0. */
    uint32_t layout;
} ssm_step_v1;

/* The commit of one forward, for every layer at once. */
typedef struct ssm_commit_v1 {
    uint32_t struct_size;
    int32_t rows;
    int32_t tokens;           /* T of the verify */
    const int32_t *slots;     /* [rows] as verified */
    const int32_t *accepted;  /* [rows], each in [1, T] (padding rows ignored) */
    void *stream;
    /* Optional (check struct_size; absent reads as 0): the layout of
     * the forward's verify, from its ticket. A mode that replays verified
     * tokens at commit (compact) replays them with this layout, never a
     * fresh choice, so the state matches what the verify computed. */
    uint32_t layout;
} ssm_commit_v1;

/* The canonical form of one slot: for each layer l, the conv window
 * [W-1][D] in the activation dtype at conv[l], and the materialized matrix
 * state [HV][V][K] in the state dtype at state[l]. Used by pages and slot
 * copy; same memory space as the context. */
typedef struct ssm_canonical_v1 {
    uint32_t struct_size;
    void *const *conv;
    void *const *state;
} ssm_canonical_v1;

/* Device pages (docs/pages.md): where one slot's canonical
 * form lies in a page payload in device memory, for export_slots and
 * import_slots. Layer l starts at payload + l * layer_bytes. Its conv window
 * is W-1 rows of row_channels channels (activation dtype); row r holds the
 * context's D channels in three runs, at channels part_at[0] (q of the
 * context's H key heads, H K channels), part_at[1] (k, H K channels) and
 * part_at[2] (v of its HV value heads, HV V channels) of the row. Its state
 * [HV][V][K] (state dtype) starts at byte state_at of the layer. A page of
 * exactly the context's heads has row_channels = D, part_at = {0, H K,
 * 2 H K} and state_at = (W-1) D times the activation size; a page holding
 * more value heads (a whole page imported into a tensor-parallel rank) has
 * its own row and offsets. Pointers and byte offsets are multiples of 8. */
typedef struct ssm_page_view_v1 {
    uint8_t *payload;
    uint64_t layer_bytes;
    uint64_t state_at;
    int64_t row_channels;
    int64_t part_at[3];
} ssm_page_view_v1;

/* Tuning (docs/tuning.md). The launch candidates of one kernel family,
 * by index; index 0 is the built-in choice. Names are short, stable words
 * ("blocks=6"): the cache file stores them. */
typedef struct ssm_tune_family_v1 {
    int32_t family;               /* SSM_TUNE_* */
    int32_t candidates;
    const char *const *names;     /* [candidates] */
} ssm_tune_family_v1;

/* One timing of one candidate, on the plugin's tuning scratch. */
typedef struct ssm_tune_trial_v1 {
    uint32_t struct_size;
    int32_t family;
    int32_t bucket;               /* rows: 2^bucket (at most tune_begin's max_rows) */
    int32_t candidate;
    int32_t budget_ms;            /* stop timing after about this long */
    void *stream;
    /* out */
    double ms;                    /* mean time of one launch sequence */
    char why[160];                /* why it failed ("launch: too many resources requested") */
} ssm_tune_trial_v1;

/* A choice in force: candidate `candidate` of `family` for `bucket`. */
typedef struct ssm_tune_choice_v1 {
    int32_t family;
    int32_t bucket;
    int32_t candidate;
} ssm_tune_choice_v1;

typedef struct ssm_plugin_v1 {
    uint32_t abi_version;   /* SSM_PLUGIN_V1_ABI_VERSION */
    uint32_t struct_size;   /* sizeof(ssm_plugin_v1) as the plugin was built */
    const char *name;       /* mode name, e.g. "native"; matches the file name */
    uint32_t mode_version;  /* the plugin's own version, for logs and pages */
    uint64_t capabilities;  /* SSM_CAP_* */

    /* Validates the options and the combination of model, dtypes, device and
     * draft width. On rejection writes a one-line reason to why and, where an
     * option is at fault, its index to *bad_option (else -1). No side effects. */
    ssm_status (*check_config)(const ssm_mode_params_v1 *params, char *why, size_t why_len,
                               int32_t *bad_option);
    /* Per-slot byte counts for params (already checked). No side effects. */
    ssm_status (*plan)(const ssm_mode_params_v1 *params, ssm_mode_plan_v1 *out);
    /* Builds an instance with every slot fresh. All memory comes from svc. */
    ssm_status (*create)(const ssm_mode_params_v1 *params, const ssm_services_v1 *svc,
                         void **instance);
    void (*destroy)(void *instance);

    /* Makes a slot fresh: zero state, empty history, zero conv window. */
    ssm_status (*reset_slot)(void *instance, int32_t slot, void *stream);
    /* Chunk of prompt per row from the slot's state; leaves canonical form. */
    ssm_status (*prefill)(void *instance, const ssm_step_v1 *step);
    /* One token per row, implicitly committed. */
    ssm_status (*decode)(void *instance, const ssm_step_v1 *step);
    /* T tokens per row; outputs for all; state change deferred to commit. */
    ssm_status (*verify)(void *instance, const ssm_step_v1 *step);
    /* Keeps the first accepted[r] verified tokens of each row, all layers. */
    ssm_status (*commit)(void *instance, const ssm_commit_v1 *commit);

    /* Transfers (may be NULL when SSM_CAP_PAGES is not set). export never
     * changes the slot; import replaces it and clears the mode's scratch. */
    ssm_status (*export_slot)(void *instance, int32_t slot, const ssm_canonical_v1 *dst,
                              void *stream);
    ssm_status (*import_slot)(void *instance, int32_t slot, const ssm_canonical_v1 *src,
                              void *stream);
    ssm_status (*copy_slot)(void *instance, int32_t src_slot, int32_t dst_slot, void *stream);
    /* Folds pending history into the state of each slot (NULL: nothing to fold). */
    ssm_status (*materialize)(void *instance, const int32_t *slots, int32_t count, void *stream);

    /* Optional (the core reads a table that ends before them as if these
     * were NULL). Batched page moves between slots and
     * pages in device memory, for ssm_slots_export_pages_device and
     * ssm_slots_import_pages_device; CUDA contexts only (a plugin may leave
     * them NULL, and answer SSM_ERR_UNSUPPORTED on a CPU context). Stream-
     * ordered like a step: no allocation, no synchronization, a fixed number
     * of launches per batch (not one per slot).
     * `slots` is host memory, [count], checked (acquired, distinct, no
     * pending verify). `views` is device memory of `capacity` entries,
     * indexed by slot: views[slots[k]] says where page k's canonical form
     * lies; the core writes it on the stream before the call, and the
     * plugin's kernels read it there (ssm_page_view_v1).
     * export_slots writes every slot's canonical form into its page's
     * payload (the same bytes export_slot would give; history folded into
     * the page, never the slot). import_slots replaces each slot's window,
     * state and the mode's scratch for it, as import_slot does, unless
     * `refused` (device memory; NULL: load) holds a nonzero word when the
     * plugin's kernels run: then they change nothing at all. The core falls
     * back to one export_slot per slot without export_slots; without
     * import_slots it refuses device imports (SSM_ERR_UNSUPPORTED). */
    ssm_status (*export_slots)(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, void *stream);
    ssm_status (*import_slots)(void *instance, int32_t count, const int32_t *slots,
                               const ssm_page_view_v1 *views, const uint32_t *refused,
                               void *stream);

    /* Optional (a table that ends before them, or NULL: the mode is not
     * tuned).
     * Tuning, driven by the core outside any step (docs/tuning.md).
     * tune_space lists the families the instance can tune and their
     * candidates (count 0: nothing, e.g. a CPU context); the arrays stay
     * valid for the instance's life. tune_begin allocates scratch state
     * for batches of up to max_rows rows through the services (never the
     * pool's slots; SSM_ERR_OUT_OF_MEMORY: the core records every
     * candidate of the entry as failed "out of memory"); tune_run times
     * one candidate on it: SSM_OK with trial->ms, or SSM_OK with
     * trial->why set when the candidate cannot run (a launch error), the
     * device usable again; any error return means the pass must stop (a
     * lost device). tune_end releases the scratch (after a successful
     * tune_begin, always).
     * tune_apply installs the choices in force (every family and bucket
     * not listed: candidate 0) for the launches that follow; no
     * allocation, and it cannot fail for families and candidates that
     * tune_space listed. None of these is called during a step. */
    ssm_status (*tune_space)(void *instance, const ssm_tune_family_v1 **families,
                             int32_t *count);
    ssm_status (*tune_begin)(void *instance, int32_t max_rows, void *stream);
    ssm_status (*tune_run)(void *instance, ssm_tune_trial_v1 *trial);
    void (*tune_end)(void *instance);
    ssm_status (*tune_apply)(void *instance, const ssm_tune_choice_v1 *choices, int32_t count);
} ssm_plugin_v1;

/* The shortest table the core accepts: one that ends with materialize. */
#define SSM_PLUGIN_V1_MIN_SIZE offsetof(ssm_plugin_v1, export_slots)

#ifdef __cplusplus
}
#endif
#endif
