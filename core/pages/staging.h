/* Host pages of a CUDA context (docs/pages.md): the payload passes through a
 * staging buffer in the context's device memory, because a mode's
 * export_slot and import_slot read and write canonical forms in the
 * context's memory space (plugin_v1.h). core/pages/page.c checks and seals the
 * page on the host; this file moves bytes between host and device.
 *
 * Everything here is synchronous and takes no stream: opening waits for all
 * work queued on the context's device (any stream: the slot's last step may
 * be on any), the mode then runs on the legacy default stream (NULL), and
 * each copy waits for it. Not for the step path, nor while a stream of the
 * device is being captured into a graph. Without CUDA every call answers
 * SSM_ERR_UNSUPPORTED (a CUDA context cannot exist in such a build). */
#ifndef SSM_CORE_PAGE_DEVICE_H
#define SSM_CORE_PAGE_DEVICE_H

#include <stddef.h>

#include "core/context.h"

typedef struct ssm_page_staging {
    const ssm_ctx *ctx;
    unsigned char *device; /* `bytes` bytes on the context's device */
    size_t bytes;
    int caller; /* the caller's current device, made current again by close */
} ssm_page_staging;

/* Makes the context's device current, waits for all work queued on it and
 * allocates `bytes` bytes of staging there. On an error (SSM_ERR_DEVICE,
 * SSM_ERR_OUT_OF_MEMORY) nothing is held and the caller's device is current
 * again. */
ssm_status ssm_page_staging_open(const ssm_ctx *ctx, size_t bytes, ssm_page_staging *s);

/* Copies staging bytes [offset, offset + bytes) to host memory `host`, after
 * the work queued on the default stream, and waits for the copy. */
ssm_status ssm_page_staging_read(const ssm_page_staging *s, size_t offset, void *host,
                                 size_t bytes);

/* Copies `bytes` bytes of host memory into the staging at `offset` and waits
 * for the copy. */
ssm_status ssm_page_staging_write(const ssm_page_staging *s, size_t offset, const void *host,
                                  size_t bytes);

/* Waits for the default stream (the mode's work on the staging) and reports
 * any error the device raised. */
ssm_status ssm_page_staging_wait(const ssm_page_staging *s);

/* Frees the staging and makes the caller's device current again. A zeroed
 * or closed staging is fine. */
void ssm_page_staging_close(ssm_page_staging *s);

#endif
