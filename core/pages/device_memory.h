/* Device pages, the core's half (docs/pages.md, "Device pages"): the
 * per-slot scratch a CUDA context keeps for them, and the kernels that
 * checksum, seal and check pages in device memory
 * (core/pages/device_memory_kernels.cu). core/pages/device_memory.c drives them around
 * the mode's batched export_slots / import_slots. A C header, also read by
 * the .cu. */
#ifndef SSM_CORE_DEVICE_PAGES_H
#define SSM_CORE_DEVICE_PAGES_H

#include <stddef.h>
#include <stdint.h>

#include "core/pages/format.h"
#include "ssmstate/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Pages per launch of the core's page kernels: their slots travel by value
 * in the launch's parameters, so nothing on the host must outlive a call.
 * A larger batch is several launches. */
#define SSM_PAGE_LAUNCH_SLOTS 64
/* The most blocks that checksum one page (each a segment of its payload). */
#define SSM_PAGE_CRC_BLOCKS 32
/* Threads of those blocks. */
#define SSM_PAGE_CRC_THREADS 256

/* What a CUDA context keeps for device pages, in device memory, per slot,
 * allocated with the context (ssm_device_pages_create). Everything is
 * indexed by slot, never by position in a batch, so batches of disjoint
 * slots on different streams never share a word. */
typedef struct ssm_page_scratch {
    ssm_page_view_v1 *views; /* [capacity]: where the page of the slot's batch is */
    uint32_t *refusal;       /* [capacity]: a batch's refusal word is its first slot's */
    uint32_t *done;          /* [capacity]: checksum blocks of the slot's page finished */
    uint32_t *crc;           /* [capacity][SSM_PAGE_CRC_BLOCKS]: their partial CRCs */
} ssm_page_scratch;

/* Bytes of the scratch of `capacity` slots, and its parts in a block of that
 * size (all 8-byte aligned). */
static inline size_t ssm_page_scratch_bytes(int32_t capacity)
{
    return (size_t)capacity *
           (sizeof(ssm_page_view_v1) + (2 + SSM_PAGE_CRC_BLOCKS) * sizeof(uint32_t));
}

static inline ssm_page_scratch ssm_page_scratch_point(void *base, int32_t capacity)
{
    ssm_page_scratch s;
    s.views = (ssm_page_view_v1 *)base;
    s.crc = (uint32_t *)(s.views + capacity);
    s.refusal = s.crc + (size_t)capacity * SSM_PAGE_CRC_BLOCKS;
    s.done = s.refusal + capacity;
    return s;
}

/* One launch of the core's page kernels, passed by value. */
typedef struct ssm_page_launch {
    int32_t count;                        /* pages of this launch, 1..SSM_PAGE_LAUNCH_SLOTS */
    int32_t slots[SSM_PAGE_LAUNCH_SLOTS]; /* their slots */
    unsigned char *pages;                 /* the launch's first page */
    uint64_t stride;                      /* bytes from one page to the next, and a page's room */
    int32_t *status;                      /* import: status of the launch's first page */
    uint32_t *refusal;                    /* import: the batch's refusal word */
    uint32_t *flags;                      /* the context's flag words (device_flags.c) */
    ssm_page_scratch scratch;
    int32_t blocks;                       /* blocks that checksum one page */
    ssm_page_view_v1 view;                /* export: a page of the context's heads (payload unset) */
    /* export: the header each page gets, payload checksum zero (the kernel
     * fills both checksums); import: the header of the context's own page */
    unsigned char header[SSM_PAGE_HEADER_BYTES];
} ssm_page_launch;

/* The launches (grid shapes in the .cu). Each returns the cudaError_t of
 * its launch as an int (0: queued). Internal: hidden from libssmstate's
 * exports, which the .cu's compiler would otherwise make visible. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif
/* views[slots[k]] := `view` at page k's payload. */
int ssm_page_views_launch(const ssm_page_launch *l, void *stream);
/* Page k's header: `header` with both checksums of its payload. */
int ssm_page_seal_launch(const ssm_page_launch *l, void *stream);
/* status[k] (ssm_page_status) of page k against `header`; on a refusal
 * *refusal |= 1; an accepted page's view to views[slots[k]]. */
int ssm_page_check_launch(const ssm_page_launch *l, void *stream);
/* After every check of the batch: refused, each status 0 becomes
 * SSM_PAGE_NOT_LOADED and each slot gets SSM_FLAG_PAGE_REFUSED; else each
 * slot's flag word is cleared (its page replaced it). */
int ssm_page_finish_launch(const ssm_page_launch *l, void *stream);
#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifndef __CUDACC__
/* Host side (core/pages/device_memory.c, core/pages/page.c). */
struct ssm_ctx;

/* The scratch of a CUDA context (nothing on the CPU), with the context. */
ssm_status ssm_device_pages_create(struct ssm_ctx *ctx);
void ssm_device_pages_free(struct ssm_ctx *ctx);

/* The context's own page: its fields and its header, payload checksum 0. */
void ssm_page_context_header(const struct ssm_ctx *ctx, ssm_page_info *info,
                             unsigned char header[SSM_PAGE_HEADER_BYTES]);

/* What the batched page calls check before anything moves: the arguments
 * (`what` names the call), no slot twice, every slot acquired with no
 * pending verify, the mode able to move slots. */
ssm_status ssm_page_batch_checks(struct ssm_ctx *ctx, int32_t count, const int32_t *slots,
                                 const void *pages, size_t stride, const char *what);

/* The device-page export and import of a batch the caller has checked
 * (ssm_page_batch_checks, the alignment, a CUDA context whose device is
 * current), queued on `stream`: what core/pages/page.c's host pages of a CUDA
 * context run on their staging buffer, so a batch is one launch per
 * SSM_PAGE_LAUNCH_SLOTS pages there too. The import needs the mode's
 * import_slots. SSM_ERR_DEVICE when a launch fails. */
ssm_status ssm_device_pages_export_checked(struct ssm_ctx *ctx, int32_t count,
                                           const int32_t *slots, void *pages, size_t stride,
                                           void *stream);
ssm_status ssm_device_pages_import_checked(struct ssm_ctx *ctx, int32_t count,
                                           const int32_t *slots, const void *pages,
                                           size_t stride, int32_t *status_out, void *stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
