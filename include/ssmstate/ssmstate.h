/* ssmstate: the engine API.
 *
 * A context owns the recurrent state of every linear-attention layer for a
 * pool of request slots, in one state mode (a plugin chosen by the config).
 * Per forward the engine calls, per layer, ssm_prefill / ssm_decode /
 * ssm_verify, and after a verify, once acceptance is known, ssm_commit for all
 * layers at once.
 *
 * Conventions:
 * - Every fallible call returns ssm_status; SSM_OK is 0. On error nothing the
 *   call touched has changed, and ssm_last_error() (thread-local) says why.
 * - Threads: a context is not thread-safe (one context must not be used by two
 *   threads at once; calls on it from several threads need the caller's own
 *   lock); separate contexts may be used from separate threads concurrently,
 *   whatever their modes. Creating and destroying contexts (which load and
 *   unload mode plugins), ssm_config_load, ssm_config_plan, ssm_plugins_list
 *   and ssm_page_inspect are safe from any thread at any time. The error message
 *   is per thread: ssm_last_error() is the calling thread's own last error
 *   (tests/threads/check_threads).
 * - Step calls are stream-ordered on `stream` (a cudaStream_t for a CUDA
 *   context, NULL on the CPU): they enqueue work and return; they never
 *   allocate or synchronize. On the CPU they run to completion.
 * - Batch metadata and tensors are caller-owned and live in the context's
 *   memory space (see ssm_device in types.h).
 * - The library never calls abort() or exit(). */
#ifndef SSMSTATE_SSMSTATE_H
#define SSMSTATE_SSMSTATE_H

#include "ssmstate/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares is
 * its exported interface. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#define SSMSTATE_VERSION_MAJOR 0
#define SSMSTATE_VERSION_MINOR 1
#define SSMSTATE_VERSION_PATCH 0

typedef struct ssm_ctx ssm_ctx;

/* ---------------------------------------------------------------- config */

/* One `key = value` of the config section named after a mode. */
typedef struct ssm_mode_option {
    const char *key;
    const char *value;
    int32_t line; /* 0 when not from a file */
} ssm_mode_option;

/* A resolved configuration. Strings are owned by whoever filled the struct;
 * ssm_config_load() returns one that ssm_config_free() releases. */
/* Tensor parallelism: the value heads a context holds of a larger model.
 * A context of rank r holds value heads [first, first + model.value_heads)
 * of a model of `value_heads` value heads and `heads` key heads; its own
 * `model` dims are the rank's (model.heads = model.value_heads / group, the
 * group value_heads / heads the same), and its tensors (x, gate, beta, out,
 * weights) carry the rank's channels only. Pages name the slice, so a page
 * of the whole model imports into a rank and ranks' pages merge back
 * (docs/pages.md). All zero: the context holds the whole model. */
typedef struct ssm_head_slice {
    int32_t heads;       /* H of the whole model */
    int32_t value_heads; /* HV of the whole model */
    int32_t first;       /* the first value head held; a multiple of the group */
} ssm_head_slice;

/* [tuning] (docs/tuning.md): autotuned launch configurations. */
typedef enum ssm_tuning_mode {
    SSM_TUNING_OFF = 0,    /* the built-in launch choices (the default) */
    SSM_TUNING_CACHED = 1, /* choices read from `cache`; nothing is timed or written */
    SSM_TUNING_TUNE = 2    /* entries missing from `cache` are timed, then saved */
} ssm_tuning_mode;

typedef struct ssm_tuning_config {
    ssm_tuning_mode mode;
    const char *cache;  /* the cache file; required unless mode is off */
    int32_t budget_ms;  /* time spent timing one candidate, at most (1..10000; 0: 20) */
} ssm_tuning_config;

/* How a prefill may form its products (docs/numerics.md). FAST allows
 * tensor-core products on bf16 operands with fp32 accumulation: a prefill's
 * outputs and final state within relative RMS 5e-3 of fp64. HIGH keeps
 * fp32-level products: with an fp32 state, the CPU's and a device's states
 * after a prefill within 1e-5 of each other. The CPU meets both. */
typedef enum ssm_prefill_precision {
    SSM_PREFILL_PRECISION_FAST = 0,
    SSM_PREFILL_PRECISION_HIGH = 1
} ssm_prefill_precision;

typedef struct ssm_config {
    ssm_model_dims model;
    const char *mode;            /* "native", "compact", "replay" or a vendor mode */
    ssm_dtype state_dtype;
    ssm_dtype activation_dtype;
    ssm_device device;
    int32_t max_requests;        /* slots in the pool */
    int32_t max_draft_tokens;    /* verify rows carry up to 1 + this many tokens */
    const char *plugin_dir;      /* searched first; NULL or "" to skip; else a directory */
    /* options of every mode section present ([native], [replay], ...), as
     * text. Any section other than [model], [state] and [tuning] lands
     * here; each must name a mode plugin that accepts it, except
     * [workload], the `ssmstate` command's own, kept and not interpreted: */
    int32_t mode_sections_count;
    const char *const *mode_section_names; /* [mode_sections_count] */
    const int32_t *mode_section_lines;     /* line of each section header */
    const int32_t *mode_options_count;     /* [mode_sections_count] */
    const ssm_mode_option *const *mode_options;
    const char *source;          /* file name for messages, or NULL */
    ssm_head_slice head_slice;   /* tensor parallelism; zero: the whole model */
    ssm_tuning_config tuning;    /* zero: off */
    ssm_prefill_precision prefill_precision;
} ssm_config;

/* Parses and validates an INI file (docs/config.md). Unknown sections or keys,
 * missing required keys, bad values and impossible combinations fail with
 * SSM_ERR_CONFIG and a "file:line: message" error; *out is then untouched.
 * Mode sections are checked by their plugin when a context is created. */
ssm_status ssm_config_load(const char *path, ssm_config **out);

/* Releases a config from ssm_config_load(). NULL is fine. */
void ssm_config_free(ssm_config *config);

/* Fills `config` with defaults (no model: dims zero, mode "native", fp32
 * state, fp32 activations, CPU, 1 request, no drafts, prefill precision
 * high). */
void ssm_config_defaults(ssm_config *config);

/* --------------------------------------------------------------- context */

/* Creates a context: validates the config, checks its device
 * (ssm_device_check), validates the mode's section through its plugin,
 * loads the mode plugin, allocates the whole pool. Errors: SSM_ERR_CONFIG,
 * SSM_ERR_PLUGIN, SSM_ERR_UNSUPPORTED, SSM_ERR_OUT_OF_MEMORY, SSM_ERR_DEVICE.
 * Nothing is left behind on failure. */
ssm_status ssm_ctx_create(const ssm_config *config, ssm_ctx **out);

/* Whether a context can be made on `device` now: the CPU always; cuda:N when
 * this build has CUDA and GPU N is visible. ssm_ctx_create asks it before
 * anything else touches the device, and the command's run, bench and serve
 * report its message, so a missing GPU reads the same everywhere. Errors:
 * SSM_ERR_INVALID_ARGUMENT (NULL, not a device), SSM_ERR_DEVICE
 * ("cuda:0: no GPU visible (CUDA: ...)", "cuda:2: no such GPU (1 visible:
 * cuda:0)"), SSM_ERR_UNSUPPORTED ("cuda:0: this build has no CUDA support
 * (configure --with-cuda)"). */
ssm_status ssm_device_check(const ssm_device *device);

/* ssm_config_load + ssm_ctx_create. */
ssm_status ssm_ctx_create_from_file(const char *path, ssm_ctx **out);

/* Destroys a context and everything it owns. Waits for nothing: the caller
 * synchronizes its streams first. NULL is fine. */
void ssm_ctx_destroy(ssm_ctx *ctx);

/* What a configuration costs. Per-slot numbers cover all layers. */
typedef struct ssm_plan {
    uint64_t state_bytes_per_slot;
    uint64_t conv_bytes_per_slot;
    uint64_t scratch_bytes_per_slot;
    uint64_t bytes_per_slot;  /* sum of the three above */
    uint64_t shared_bytes;    /* per context */
    uint64_t pool_bytes;      /* capacity * bytes_per_slot + shared_bytes */
    int32_t capacity;
} ssm_plan;

/* The plan of a configuration, without allocating the pool (loads the plugin
 * to ask it). Errors as ssm_ctx_create minus out-of-memory. */
ssm_status ssm_config_plan(const ssm_config *config, ssm_plan *out);

/* The plan of a live context. */
ssm_status ssm_ctx_plan(const ssm_ctx *ctx, ssm_plan *out);

/* The configuration the context was created from (owned by the context). */
const ssm_config *ssm_ctx_config(const ssm_ctx *ctx);

/* The file the mode plugin was loaded from (owned by the context). */
const char *ssm_ctx_plugin_path(const ssm_ctx *ctx);

/* ----------------------------------------------------------------- slots */

/* Takes a fresh slot (zero state, empty history, zero conv window) from the
 * pool. Errors: SSM_ERR_POOL_EXHAUSTED. */
ssm_status ssm_slot_acquire(ssm_ctx *ctx, int32_t *slot);

/* Returns a slot to the pool, made fresh before anyone gets it again. On a
 * CUDA context it waits for the work queued on the device, resets the slot
 * and waits for that too, so it never overlaps a step on any stream (it is
 * not a step call; do not call it while capturing a graph). Errors:
 * SSM_ERR_SLOT_RANGE, SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING (the
 * slot is in an uncommitted forward: commit or abort it first),
 * SSM_ERR_DEVICE. */
ssm_status ssm_slot_release(ssm_ctx *ctx, int32_t slot);

/* Makes an acquired slot fresh (zero state, empty history, zero conv window).
 * Stream-ordered. Errors: SSM_ERR_SLOT_RANGE, SSM_ERR_SLOT_NOT_ACQUIRED,
 * SSM_ERR_VERIFY_PENDING (the slot is in an uncommitted forward). */
ssm_status ssm_slot_reset(ssm_ctx *ctx, int32_t slot, void *stream);

typedef struct ssm_pool_stats {
    int32_t capacity;
    int32_t used;
    int32_t free; /* used + free == capacity, always */
} ssm_pool_stats;

/* Pool accounting; never fails for a valid ctx and out. Errors:
 * SSM_ERR_INVALID_ARGUMENT (NULL ctx or out; *out untouched). */
ssm_status ssm_pool_query(const ssm_ctx *ctx, ssm_pool_stats *out);

/* ------------------------------------------------------------------ steps */

/* Rows of a decode or verify: `tokens` per row (1 for decode, 1..1+max draft
 * for verify); slots[r] == -1 marks a padding row, skipped and never written. */
typedef struct ssm_batch {
    int32_t rows;
    int32_t tokens;
    const int32_t *slots;      /* [rows] in the context's memory space; the kernels read it */
    /* CUDA contexts: the same slots in host memory, for the protocol's
     * bookkeeping (pending forwards, duplicates, ranges), which runs on the
     * host without reading device memory. Required there, ignored on the
     * CPU. Like `slots`, it must not change until the commit. A CUDA graph
     * replayed with other device slots bypasses the host checks; the kernels
     * still skip rows whose slot is outside the pool (SSM_FLAG_BAD_SLOT), but
     * cannot see a slot named twice: two rows would race on one state. */
    const int32_t *slots_host;
} ssm_batch;

/* Rows of a prefill: row r holds tokens token_offsets[r] .. token_offsets[r+1]-1
 * (token_offsets has rows+1 entries, starts at 0 and never decreases; a row
 * may be empty). max_row_tokens bounds the longest row. */
typedef struct ssm_prefill_batch {
    int32_t rows;
    const int32_t *slots;
    const int32_t *token_offsets;
    int32_t max_row_tokens;
    /* CUDA contexts: host copies of slots and token_offsets (required there,
     * ignored on the CPU); see ssm_batch. The device token_offsets must hold
     * the same values: the kernels index the tensors by them. */
    const int32_t *slots_host;
    const int32_t *token_offsets_host;
} ssm_prefill_batch;

/* Proof of a verify, presented at commit. Zero-initialize (SSM_TICKET_INIT)
 * before the forward: the first ssm_verify of the forward fills it, the
 * verifies of the other layers present it unchanged. `layout` is the
 * verify's update layout: every launch choice that can change rounding, as
 * chosen for the batch's bucket when the forward opened (docs/tuning.md);
 * the commit replays the verified tokens with it. Like the other fields it
 * is checked at commit: a ticket whose layout was altered is foreign. */
typedef struct ssm_ticket {
    uint64_t context_id;
    uint64_t forward;
    int32_t rows;
    int32_t tokens;
    uint32_t layout;
} ssm_ticket;
#define SSM_TICKET_INIT {0, 0, 0, 0, 0}

/* Runs a chunk of prompt for one layer: each row continues from its slot's
 * state (zero for a fresh slot) and leaves the slot in the mode's canonical
 * form; writes io->out for every token. Slots must be acquired and have no
 * pending verify. Errors: SSM_ERR_INVALID_ARGUMENT, SSM_ERR_SLOT_RANGE,
 * SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING. */
ssm_status ssm_prefill(ssm_ctx *ctx, int32_t layer, const ssm_prefill_batch *batch,
                       const ssm_layer_weights *weights, const ssm_step_io *io,
                       void *stream);

/* One token per row for one layer (batch->tokens == 1), committed at once:
 * a verify of T = 1 with an implicit commit of 1. Same errors as prefill. */
ssm_status ssm_decode(ssm_ctx *ctx, int32_t layer, const ssm_batch *batch,
                      const ssm_layer_weights *weights, const ssm_step_io *io,
                      void *stream);

/* Verifies T = batch->tokens tokens per row for one layer and writes all T
 * outputs per row; the state change waits for ssm_commit. With a zero ticket
 * it opens a forward over the rows (none may have a pending verify) and fills
 * the ticket; with a filled ticket it adds this layer to that forward (same
 * rows, slots and T; each layer once). Errors: SSM_ERR_INVALID_ARGUMENT,
 * SSM_ERR_SLOT_RANGE, SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING (second
 * verify over uncommitted slots, or a layer verified twice),
 * SSM_ERR_TICKET_FOREIGN / _STALE / _REPEATED. */
ssm_status ssm_verify(ssm_ctx *ctx, int32_t layer, const ssm_batch *batch,
                      const ssm_layer_weights *weights, const ssm_step_io *io,
                      ssm_ticket *ticket, void *stream);

/* Keeps, for every layer, the first accepted[r] verified tokens of row r
 * (1 <= accepted[r] <= T; padding rows ignored) and closes the forward. The
 * ticket must be the latest verify's for those rows, with every layer
 * verified. `accepted` is in the context's memory space: on the CPU it is
 * checked before any work; on a CUDA context the kernel checks it, skips a
 * row outside [1, T] and raises SSM_FLAG_BAD_ACCEPTED on its slot (that
 * slot's state is then undefined until reset: an engine that sees the flag
 * resets it). `accepted` may be NULL when every row is padding (CPU).
 * Errors: SSM_ERR_INVALID_ARGUMENT (NULL arguments, no accepted lengths,
 * a slot buffer changed since the verify), SSM_ERR_TICKET_FOREIGN (also an
 * empty SSM_TICKET_INIT ticket), SSM_ERR_TICKET_STALE,
 * SSM_ERR_TICKET_REPEATED, SSM_ERR_TICKET_INCOMPLETE, SSM_ERR_ACCEPTED_RANGE;
 * on any of them nothing is written and the forward stays open. */
ssm_status ssm_commit(ssm_ctx *ctx, const ssm_ticket *ticket, const int32_t *accepted,
                      void *stream);

/* Ends an open forward without committing it: every slot of the forward is
 * made fresh (a verify may already have overwritten a slot's current state,
 * so nothing else can be promised), and the ticket becomes stale. For an
 * engine that cannot finish a forward (a failed layer); a forward that
 * finished is committed instead (a >= 1 always exists). Stream-ordered.
 * Errors: SSM_ERR_TICKET_FOREIGN / _STALE / _REPEATED. */
ssm_status ssm_forward_abort(ssm_ctx *ctx, const ssm_ticket *ticket, void *stream);

/* -------------------------------------------------------------- transfers */

/* Copies a slot's canonical form into caller buffers in the context's memory
 * space: for each layer l, conv[l] receives the conv window [W-1][D] in the
 * activation dtype and state[l] the materialized matrix state [HV][V][K] in
 * the state dtype (pending history folded into the copy, never into the
 * slot). The slot must be acquired with no pending verify. Stream-ordered.
 * Errors: SSM_ERR_INVALID_ARGUMENT, SSM_ERR_SLOT_RANGE,
 * SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING, SSM_ERR_UNSUPPORTED. */
ssm_status ssm_slot_export_canonical(ssm_ctx *ctx, int32_t slot, void *const *conv,
                                     void *const *state, void *stream);

/* Makes acquired slot `dst` a copy of acquired slot `src` (prefix sharing):
 * windows and states of every layer through the canonical form, so a copy
 * in replay starts with its history folded; src does not change. dst
 * takes src's flags (a copy of a flagged slot is flagged too). src == dst
 * changes nothing.
 * Stream-ordered. Errors: SSM_ERR_INVALID_ARGUMENT, SSM_ERR_SLOT_RANGE,
 * SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING (either slot),
 * SSM_ERR_UNSUPPORTED; on any of them dst is as it was. */
ssm_status ssm_slot_copy(ssm_ctx *ctx, int32_t src, int32_t dst, void *stream);

/* ------------------------------------------------------------------ pages */

/* A state page (docs/pages.md): a header (magic, format version,
 * model, dtypes, the value-head slice it holds, payload size, CRC32C of
 * header and payload), then each layer's conv window [W-1][D] and state
 * [HV][V][K]. Little-endian; mode-independent: a page exported in one mode
 * imports into any other bit for bit. */
#define SSM_PAGE_FORMAT_VERSION 1

typedef struct ssm_page_info {
    uint32_t format_version;
    uint32_t library_version; /* of the writer, 0x00MMmmpp */
    ssm_model_dims model;
    ssm_dtype state_dtype;
    ssm_dtype activation_dtype;
    int32_t head_first, head_end; /* the value heads [first, end) it holds */
    uint64_t payload_bytes;
    uint64_t page_bytes;          /* header + payload */
    uint32_t payload_crc;
} ssm_page_info;

/* Bytes of one slot's page in this context (0 for NULL). */
size_t ssm_page_bytes(const ssm_ctx *ctx);

/* Writes `slot`'s page to host memory `page` (`capacity` >= ssm_page_bytes).
 * Never changes the slot (replay's history is folded into the page).
 * Host pages of a CUDA context are synchronous and take no stream: the call
 * waits for all work queued on the context's device, exports into a staging
 * buffer there (payload bytes, from the device allocator) on the default
 * stream, copies it to `page` and waits for the copy. Not for the step path,
 * nor during graph capture; it makes the context's device current and then
 * the caller's again. Errors: SSM_ERR_INVALID_ARGUMENT, SSM_ERR_SLOT_RANGE,
 * SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING, SSM_ERR_UNSUPPORTED,
 * SSM_ERR_OUT_OF_MEMORY, SSM_ERR_DEVICE (CUDA). */
ssm_status ssm_slot_export_page(ssm_ctx *ctx, int32_t slot, void *page, size_t capacity);

/* Loads a page of exactly `bytes` bytes (its header and payload, nothing
 * after) into acquired `slot`, replacing its state,
 * window and the mode's scratch for it, and clearing its flags. The page
 * must hold the context's value heads (all of them, or more: a rank takes
 * its heads from a whole page). Everything is checked first
 * (ssm_page_inspect, then the page against the context) on the host; a CUDA
 * context then copies the payload into a staging buffer on its device, as
 * export does (synchronous, no stream), and only then loads. On any error
 * the slot is as it was, save an SSM_ERR_DEVICE raised by the load itself.
 * Errors: those of ssm_slot_export_page, SSM_ERR_PAGE_INVALID (naming the
 * field or checksum that failed). */
ssm_status ssm_slot_import_page(ssm_ctx *ctx, int32_t slot, const void *page, size_t bytes);

/* Batched forms: page k of slots[k] at pages + k * stride (stride >=
 * ssm_page_bytes; a page may be shorter than its stride). Every slot (and for
 * import every page) is checked before any is exported or loaded; a slot
 * named twice is refused. Import loads all the pages or, on any error, none
 * (the message names the page). On a CUDA context both are synchronous like
 * the one-slot forms; export stages one payload at a time, import stages
 * all `count` payloads on the device before loading any. Errors: those of
 * the one-slot forms. */
ssm_status ssm_slots_export_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots, void *pages,
                                  size_t stride);
ssm_status ssm_slots_import_pages(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                  const void *pages, size_t stride);

/* Pages in device memory (docs/pages.md, "Device pages"): the same bytes
 * as host pages, moved stream-ordered on `stream` (a cudaStream_t of the
 * context's device) with no host synchronization and no allocation, so a
 * prefill GPU can export while it computes and a decode GPU import while it
 * decodes (hand the pages over with NCCL or peer copies in between). Only on
 * CUDA contexts: a CPU context answers SSM_ERR_UNSUPPORTED once the
 * arguments pass.
 *
 * `slots` is host memory; page k of slots[k] lies at pages + k * stride in
 * the context's device memory (`count` pages of `stride` bytes each). Both
 * calls check on the host, before anything is queued, what ssm_slots_export_
 * pages checks: non-NULL pointers, 1 <= count <= the pool, stride >=
 * ssm_page_bytes, no slot named twice, every slot acquired with no pending
 * verify; and that `pages` and `stride` are multiples of 8 bytes. On any
 * error nothing is queued and nothing changes. The call makes the context's
 * device current and then the caller's again. Batches of any size are one
 * call; the kernels take up to 64 pages per launch and loop (the mode's
 * copies likewise). Errors: SSM_ERR_INVALID_ARGUMENT, SSM_ERR_SLOT_RANGE,
 * SSM_ERR_SLOT_NOT_ACQUIRED, SSM_ERR_VERIFY_PENDING, SSM_ERR_UNSUPPORTED
 * (a CPU context, a mode without page moves), SSM_ERR_DEVICE (a launch
 * failed). */

/* Writes each slot's page into device memory: byte for byte the page
 * ssm_slots_export_pages writes to host memory for the same slot. The mode
 * writes the canonical form straight into the pages' payloads (replay folds
 * its history into the page, never into the slot), then one kernel
 * checksums every payload and writes every header. No slot changes. */
ssm_status ssm_slots_export_pages_device(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                         void *pages, size_t stride, void *stream);

/* Why a device page was or was not loaded: status[k] of
 * ssm_slots_import_pages_device, written on the stream. A page gets the
 * first that applies, checked in this order, except that whether the page
 * fits in its stride (SSM_PAGE_BAD_LENGTH) is checked after its fields and
 * heads: a page of other dims is SSM_PAGE_BAD_MODEL whatever its size. */
typedef enum ssm_page_status {
    SSM_PAGE_ACCEPTED = 0,         /* loaded: the slot holds the page */
    SSM_PAGE_BAD_MAGIC = 1,        /* not a state page */
    SSM_PAGE_BAD_VERSION = 2,      /* another format version or header length */
    SSM_PAGE_HEADER_CHECKSUM = 3,  /* the header's CRC32C does not match */
    SSM_PAGE_MALFORMED = 4,        /* a header that checksums but describes no valid
                                      page (dims outside the limits, dtypes, head slice) */
    SSM_PAGE_BAD_LENGTH = 5,       /* the payload length field disagrees with the
                                      dims, or the page does not fit in its stride */
    SSM_PAGE_BAD_MODEL = 6,        /* another model kind, layers, H, HV, K, V, W or
                                      lower bound than the context's */
    SSM_PAGE_BAD_DTYPE = 7,        /* another state or activation dtype */
    SSM_PAGE_BAD_HEADS = 8,        /* the page lacks some of the context's value heads */
    SSM_PAGE_PAYLOAD_CHECKSUM = 9, /* the payload's CRC32C does not match */
    SSM_PAGE_NOT_LOADED = 10       /* a valid page whose batch was refused for another */
} ssm_page_status;

/* Loads page k into slots[k], all or none, with every check on the device:
 * one kernel checks each page against the page this context writes
 * (magic, version, every field, both checksums; a page may hold more value
 * heads than the context: a tensor-parallel rank takes its own from a
 * whole page) and writes status[k] (ssm_page_status, int32, device memory
 * of the context's device). When every page passes, each slot's window,
 * state and mode scratch are replaced (as ssm_slot_import_page does) and
 * its flags cleared; when any page fails, no slot changes at all, the
 * passing pages get SSM_PAGE_NOT_LOADED and every slot of the batch gets
 * SSM_FLAG_PAGE_REFUSED (ssm_ctx_status, ssm_slot_flags; cleared by a
 * later load, reset or release). Nothing is known on the host at return:
 * read `status` or the flags after the stream. The pages must not change
 * until the stream has passed the call. Besides the errors above:
 * SSM_ERR_UNSUPPORTED for a mode plugin without the batched import_slots. */
ssm_status ssm_slots_import_pages_device(ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                         const void *pages, size_t stride, int32_t *status,
                                         void *stream);

/* Writes to `out` (`capacity` bytes) the page of value heads [first, end)
 * of `page`, which must hold them; first and end multiples of the model's
 * group (value_heads / heads). The window keeps the slice's channels (q and k
 * of its key heads, v of its value heads). *written gets the new page's
 * size when not NULL. Errors: SSM_ERR_INVALID_ARGUMENT (NULL, a small
 * buffer, a slice outside the page or off the group), those of
 * ssm_page_inspect. */
ssm_status ssm_page_slice(const void *page, size_t bytes, int32_t first, int32_t end, void *out,
                          size_t capacity, size_t *written);

/* Writes to `out` the page of the union of `count` pages of one model and
 * dtypes whose head slices are contiguous once sorted (tensor-parallel
 * ranks, in any order). *written as ssm_page_slice's. Errors:
 * SSM_ERR_INVALID_ARGUMENT, SSM_ERR_PAGE_INVALID (an invalid page, another
 * model or dtype, slices that overlap or leave a gap; the message names the
 * pages). */
ssm_status ssm_page_merge(const void *const *pages, const size_t *bytes, int32_t count,
                          void *out, size_t capacity, size_t *written);

/* Reads a page's header and verifies both checksums, without a context.
 * `bytes` is the page's length: a page is exactly its header and payload.
 * The one check of a page: import, slice and merge run it too (the batched
 * imports with their stride as the room a page lies in). Errors:
 * SSM_ERR_INVALID_ARGUMENT, SSM_ERR_PAGE_INVALID (bad magic, another format
 * version (both named), a header that describes no valid page (the field
 * named: a dim or dtype outside its limits, a lower bound on a gdn model, a
 * head slice off the model, a payload length its dims do not give, a
 * reserved byte that is not zero), a truncated page, bytes after the
 * payload, a checksum mismatch). */
ssm_status ssm_page_inspect(const void *page, size_t bytes, ssm_page_info *info);

/* The header checks of ssm_page_inspect alone, on the page's first `bytes`
 * (at least the header's 96) bytes: everything but the payload's length and
 * checksum. *info tells a reader how many bytes the whole page takes
 * (page_bytes) before it reads them. Errors: those of ssm_page_inspect save
 * the payload's. */
ssm_status ssm_page_read_header(const void *header, size_t bytes, ssm_page_info *info);

/* ----------------------------------------------------------------- status */

typedef struct ssm_ctx_report {
    uint32_t flags;          /* OR of every slot's SSM_FLAG_* bits */
    int32_t flagged_slots;   /* slots with any flag */
    int32_t first_flagged;   /* lowest flagged slot, or -1 */
} ssm_ctx_report;

/* Flags raised by past steps. CPU contexts: exact at return. CUDA contexts:
 * reads the kernels' flag words, which waits for the work queued on every
 * stream (a status query, not a step call: not while capturing a graph).
 * SSM_FLAG_BAD_SLOT, raised for a device slot outside the pool, belongs to
 * no slot and stays set for the context's life. Errors:
 * SSM_ERR_INVALID_ARGUMENT, SSM_ERR_DEVICE. */
ssm_status ssm_ctx_status(const ssm_ctx *ctx, ssm_ctx_report *out);

/* Flags of one slot (cleared when the slot is reset or released). */
ssm_status ssm_slot_flags(const ssm_ctx *ctx, int32_t slot, uint32_t *flags);

/* ----------------------------------------------------------------- tuning */

/* What one tuning pass did (docs/tuning.md). Counts are of cache entries,
 * one per (kernel family, batch-size bucket), and of candidates. */
typedef struct ssm_tune_report {
    int32_t tuned;          /* entries timed now */
    int32_t cached;         /* entries found in the cache (not timed again) */
    int32_t skipped_failed; /* candidates not run: recorded as failed before */
    int32_t failed;         /* candidates that failed now (recorded with their reason) */
    int32_t untuned;        /* entries left at the built-in choice (mode cached and absent,
                               or every candidate failed) */
    int32_t saved;          /* 1 when the cache file was written by this pass */
} ssm_tune_report;

/* Tunes the context's launch configurations now, as [tuning] says: mode
 * tune times the (family, bucket) entries the cache lacks on scratch state
 * allocated for the purpose (never the pool's slots, which are left bit for
 * bit as they were), saves the cache and applies the choices; mode cached
 * re-reads the cache and applies it; mode off, and every CPU context, do
 * nothing (a report of zeros). Not a step call: it synchronizes `stream`
 * (a cudaStream_t, or NULL for the legacy stream) and the device, so it is
 * refused while `stream` is being captured into a graph
 * (SSM_ERR_INVALID_ARGUMENT) and while any forward of the context is open
 * (SSM_ERR_VERIFY_PENDING: commit or abort it first). `report` may be NULL.
 * On error the choices in force are unchanged. Errors:
 * SSM_ERR_INVALID_ARGUMENT, SSM_ERR_VERIFY_PENDING, SSM_ERR_OUT_OF_MEMORY,
 * SSM_ERR_DEVICE. */
ssm_status ssm_tune(ssm_ctx *ctx, void *stream, ssm_tune_report *report);

/* The report of the context's latest tuning pass (at creation, or the
 * latest ssm_tune); zeros when none ran. */
ssm_status ssm_ctx_tune_report(const ssm_ctx *ctx, ssm_tune_report *out);

/* ---------------------------------------------------------------- plugins */

/* One mode plugin file found on the search path. */
typedef struct ssm_plugin_info {
    char name[64];          /* mode name from the plugin's table ("" if unreadable) */
    char path[4096];        /* the file */
    uint32_t abi_version;   /* ABI version the plugin speaks (0 if unreadable) */
    uint32_t mode_version;
    uint64_t capabilities;  /* SSM_CAP_* from plugin_v1.h */
    ssm_status status;      /* SSM_OK, or why it cannot be used */
    char error[512];        /* the reason when status != SSM_OK */
} ssm_plugin_info;

/* Lists the mode plugins on the search path: plugin_dir (if not NULL or ""),
 * then the installed plugin directory, then each directory of the colon-
 * separated $SSMSTATE_PLUGIN_PATH. Every file is loaded and checked as
 * ssm_ctx_create would; one that fails is listed with its reason. A name
 * found earlier on the path shadows later ones (those are not listed). Writes
 * up to `capacity` entries and the number found to *count. Errors:
 * SSM_ERR_INVALID_ARGUMENT (NULL count, NULL out with capacity > 0, a
 * negative capacity), SSM_ERR_PLUGIN (a plugin_dir that is missing or not a
 * directory, named; the installed directory and $SSMSTATE_PLUGIN_PATH's may
 * be missing). */
ssm_status ssm_plugins_list(const char *plugin_dir, ssm_plugin_info *out, int32_t capacity,
                            int32_t *count);

/* ------------------------------------------------------------------ errors */

/* The message of the last error on this thread ("" if none). Valid until the
 * next failing ssmstate call on this thread. */
const char *ssm_last_error(void);

/* A stable name for a status code ("SSM_ERR_TICKET_STALE"). */
const char *ssm_status_name(ssm_status status);

/* Name of a dtype ("f32", "bf16"), model kind ("gdn"), device type ("cpu"). */
const char *ssm_dtype_name(ssm_dtype dtype);
const char *ssm_model_kind_name(ssm_model_kind kind);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif
#endif
