/* The context object and the helpers the core's files share about it. */
#ifndef SSM_CORE_CONTEXT_H
#define SSM_CORE_CONTEXT_H

#include "core/loader.h"
#include "core/tickets.h"
#include "core/tuning/tuning.h"

struct ssm_ctx {
    ssm_config *config;          /* owned copy */
    ssm_loaded_plugin plugin;
    const ssm_plugin_v2 *mode;   /* == &plugin.table: every method but the three of ssm_mode_* */
    void *instance;              /* the plugin's */
    ssm_services_v1 services;
    ssm_mode_params_v2 params;
    ssm_plan plan;
    int32_t capacity;
    uint8_t *slot_acquired;      /* [capacity] */
    uint32_t *slot_flags;        /* [capacity] SSM_FLAG_* */
    int32_t *free_slots;         /* stack of free slot numbers */
    int32_t free_count;
    uint32_t *device_flags;      /* CUDA: [capacity + 1] in device memory (device_flags.c) */
    void *page_scratch;          /* CUDA: device pages' scratch (device_pages.h) */
    void **page_pointers;        /* CUDA: [2 layers] host, a canonical form's layers in a page */
    uint32_t *row_marks;         /* [capacity] duplicate detection in batches */
    uint32_t row_mark;
    ssm_ticket_book tickets;
    ssm_tuning_state tuning;     /* update layouts per bucket, the latest pass's report */
};

/* Fills the services table handed to the plugin (core/services.c). */
void ssm_services_init(ssm_ctx *ctx, ssm_services_v1 *services);

/* Memory in the context's memory space (core/services.c). */
void *ssm_device_alloc(const ssm_device *device, size_t bytes);
void ssm_device_free(const ssm_device *device, void *ptr);

/* Batch checks shared by the step calls (core/validate.c). Each returns
 * SSM_OK or the bad-input rules' error with a message (docs/reliability.md);
 * none changes anything. */
ssm_status ssm_validate_layer(const ssm_ctx *ctx, int32_t layer);
ssm_status ssm_validate_rows(ssm_ctx *ctx, int32_t rows, const int32_t *slots,
                             int allow_pending);
ssm_status ssm_validate_step_data(const ssm_ctx *ctx, const ssm_layer_weights *weights,
                                  const ssm_step_io *io);
ssm_status ssm_validate_slot(const ssm_ctx *ctx, int32_t slot);

/* The slots of a batch as the host may read them: `slots` on a CPU context,
 * the engine's host copy on a CUDA one (NULL with an error when missing). */
const int32_t *ssm_host_slots(const ssm_ctx *ctx, const int32_t *slots,
                              const int32_t *slots_host, int32_t rows);

/* The kernels' flag words on a CUDA context (core/device_flags.c); no-ops
 * on the CPU. read copies words [first, first + count) (zeros on the CPU)
 * after waiting for the device, and leaves the caller's current device as
 * it was. */
ssm_status ssm_device_flags_create(ssm_ctx *ctx);
void ssm_device_flags_free(ssm_ctx *ctx);
void ssm_device_flags_clear(ssm_ctx *ctx, int32_t slot, void *stream);
/* Slot dst's flag word becomes slot src's, ordered on `stream` after the
 * work queued there (a slot copy carries its source's flags). */
void ssm_device_flags_copy(ssm_ctx *ctx, int32_t src, int32_t dst, void *stream);
ssm_status ssm_device_flags_read(const ssm_ctx *ctx, uint32_t *words, int32_t first,
                                 int32_t count);

/* Waits for all work on the context's device (SSM_OK at once on the CPU). */
ssm_status ssm_device_sync(const ssm_ctx *ctx);

#endif
