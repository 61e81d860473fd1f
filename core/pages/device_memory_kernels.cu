/* The core's kernels for pages in device memory (core/pages/device_memory.h): the
 * views of an export, the seal (payload checksums and headers), the check
 * of an import and its finish (statuses of a refused batch, flag words).
 *
 * Checksumming a page: grid (blocks, pages), SSM_PAGE_CRC_THREADS threads.
 * Block b of page k checksums segment b of the payload (kernels/cuda/
 * crc32c.cuh) and leaves its CRC in the slot's partials; the block that
 * finishes last (a counter per slot, the threadFenceReduction pattern)
 * combines the partials in order into the payload's CRC, then writes the
 * header (seal) or judges the page (check) with core/pages/format.h, the
 * code core/pages/page.c runs on the host. */
#include <cuda_runtime.h>

#include "core/pages/device_memory.h"
#include "kernels/cuda/crc32c.cuh"

using namespace ssm;

/* Bytes [*begin, *end) of a payload of `bytes` bytes that block b of
 * `blocks` checksums: segments of whole 8-byte words, the last shorter. */
__device__ static void segment(uint64_t bytes, int32_t blocks, int32_t b, uint64_t *begin,
                               uint64_t *end)
{
    uint64_t size = ((bytes + (uint64_t)blocks - 1) / (uint64_t)blocks + 7) / 8 * 8;
    *begin = (uint64_t)b * size < bytes ? (uint64_t)b * size : bytes;
    *end = *begin + size < bytes ? *begin + size : bytes;
}

/* This block's part of the CRC of the payload of page blockIdx.y (`bytes`
 * bytes; `read` false: the page is not read, its partial is 0). Returns
 * true in thread 0 of the block that finished last, with the payload's CRC
 * in *crc; false everywhere else. */
__device__ static bool payload_crc(const ssm_page_launch &a, int32_t slot,
                                   const unsigned char *payload, uint64_t bytes, bool read,
                                   uint32_t *crc)
{
    __shared__ crc_tables tables;
    __shared__ crc_pieces<SSM_PAGE_CRC_THREADS> pieces;
    __shared__ bool last;
    uint64_t begin, end;
    segment(bytes, a.blocks, (int32_t)blockIdx.x, &begin, &end);
    uint32_t part = 0;
    if (read) { /* the same for every thread of the block */
        crc_tables_fill(tables);
        part = crc_block<SSM_PAGE_CRC_THREADS>(tables, pieces, payload, begin, end);
    }
    uint32_t *parts = a.scratch.crc + (int64_t)slot * SSM_PAGE_CRC_BLOCKS;
    if (threadIdx.x == 0) {
        parts[blockIdx.x] = part;
        __threadfence(); /* the partial is visible before the count says so */
        unsigned done = atomicAdd(a.scratch.done + slot, 1u);
        last = done == (unsigned)a.blocks - 1;
    }
    __syncthreads();
    if (!last || threadIdx.x != 0)
        return false;
    __threadfence();
    const volatile uint32_t *seen = parts; /* written by other blocks: not from L1 */
    uint32_t c = 0;                        /* the CRC of no bytes */
    for (int32_t b = 0; b < a.blocks; b++) {
        segment(bytes, a.blocks, b, &begin, &end);
        c = ssm_crc32c_combine(c, seen[b], end - begin);
    }
    a.scratch.done[slot] = 0; /* ready for the slot's next page */
    *crc = c;
    return true;
}

__global__ void __launch_bounds__(SSM_PAGE_CRC_THREADS) page_seal_kernel(ssm_page_launch a)
{
    int32_t k = (int32_t)blockIdx.y, slot = a.slots[k];
    unsigned char *page = a.pages + (uint64_t)k * a.stride;
    uint64_t bytes = ssm_page_get64(a.header + SSM_PAGE_AT_PAYLOAD_BYTES);
    uint32_t crc;
    if (!payload_crc(a, slot, page + SSM_PAGE_HEADER_BYTES, bytes, true, &crc))
        return;
    unsigned char header[SSM_PAGE_HEADER_BYTES];
    for (int i = 0; i < SSM_PAGE_HEADER_BYTES; i++)
        header[i] = a.header[i];
    ssm_page_put32(header + SSM_PAGE_AT_PAYLOAD_CRC, crc);
    ssm_page_header_seal(header);
    for (int i = 0; i < SSM_PAGE_HEADER_BYTES; i++)
        page[i] = header[i];
}

__global__ void __launch_bounds__(SSM_PAGE_CRC_THREADS) page_check_kernel(ssm_page_launch a)
{
    int32_t k = (int32_t)blockIdx.y, slot = a.slots[k];
    const unsigned char *page = a.pages + (uint64_t)k * a.stride;
    /* Every block reads as many payload bytes as the page's length field
     * says, when they fit in its room; a page that lies about its length is
     * refused by the header checks of the last block. */
    __shared__ uint64_t bytes;
    __shared__ bool read;
    if (threadIdx.x == 0) {
        uint64_t said = ssm_page_get64(page + SSM_PAGE_AT_PAYLOAD_BYTES);
        read = said <= a.stride - SSM_PAGE_HEADER_BYTES;
        bytes = read ? said : 0;
    }
    __syncthreads();
    uint32_t crc;
    if (!payload_crc(a, slot, page + SSM_PAGE_HEADER_BYTES, bytes, read, &crc))
        return;
    ssm_page_info want, got;
    ssm_page_info_read(a.header, &want);
    int32_t reason = ssm_page_check(page, &want, a.stride, crc, &got);
    a.status[k] = reason;
    if (reason != SSM_PAGE_ACCEPTED) {
        atomicOr(a.refusal, 1u);
        return;
    }
    ssm_page_cut cut; /* the context's heads in the page's */
    ssm_page_cut_of(&got, &want, &cut);
    ssm_page_view_v1 view;
    view.payload = (uint8_t *)page + SSM_PAGE_HEADER_BYTES;
    view.layer_bytes = cut.big_layer;
    view.state_at = cut.big_state_at;
    view.row_channels = cut.big_row;
    for (int p = 0; p < 3; p++)
        view.part_at[p] = cut.part_big[p];
    a.scratch.views[slot] = view;
}

/* One thread per page of the launch. */
__global__ void page_views_kernel(ssm_page_launch a)
{
    int32_t k = (int32_t)threadIdx.x;
    if (k >= a.count)
        return;
    ssm_page_view_v1 view = a.view;
    view.payload = a.pages + (uint64_t)k * a.stride + SSM_PAGE_HEADER_BYTES;
    a.scratch.views[a.slots[k]] = view;
}

__global__ void page_finish_kernel(ssm_page_launch a)
{
    int32_t k = (int32_t)threadIdx.x;
    if (k >= a.count)
        return;
    int32_t slot = a.slots[k];
    if (*a.refusal) {
        if (a.status[k] == SSM_PAGE_ACCEPTED)
            a.status[k] = SSM_PAGE_NOT_LOADED;
        if (a.flags)
            atomicOr(a.flags + slot, (uint32_t)SSM_FLAG_PAGE_REFUSED);
    } else if (a.flags) {
        a.flags[slot] = 0; /* the page replaced whatever was flagged */
    }
}

extern "C" int ssm_page_views_launch(const ssm_page_launch *l, void *stream)
{
    page_views_kernel<<<1, SSM_PAGE_LAUNCH_SLOTS, 0, (cudaStream_t)stream>>>(*l);
    return (int)cudaGetLastError();
}

extern "C" int ssm_page_seal_launch(const ssm_page_launch *l, void *stream)
{
    dim3 grid((unsigned)l->blocks, (unsigned)l->count);
    page_seal_kernel<<<grid, SSM_PAGE_CRC_THREADS, 0, (cudaStream_t)stream>>>(*l);
    return (int)cudaGetLastError();
}

extern "C" int ssm_page_check_launch(const ssm_page_launch *l, void *stream)
{
    dim3 grid((unsigned)l->blocks, (unsigned)l->count);
    page_check_kernel<<<grid, SSM_PAGE_CRC_THREADS, 0, (cudaStream_t)stream>>>(*l);
    return (int)cudaGetLastError();
}

extern "C" int ssm_page_finish_launch(const ssm_page_launch *l, void *stream)
{
    page_finish_kernel<<<1, SSM_PAGE_LAUNCH_SLOTS, 0, (cudaStream_t)stream>>>(*l);
    return (int)cudaGetLastError();
}
