/* CRC32C on the device: kernels/crc32c.h's function, in parallel. A block
 * builds the eight tables of the eight-bytes-at-a-time form in shared
 * memory (8 KiB) from kernels/crc32c.h's entries, each thread checksums a
 * contiguous piece of the block's range with them, and the pieces' CRCs are
 * combined pairwise (crc32c_combine's shift rule) into the range's CRC:
 * bit for bit the host's ssm_crc32c of the same bytes. */
#ifndef SSM_KERNELS_CUDA_CRC32C_CUH
#define SSM_KERNELS_CUDA_CRC32C_CUH

#include <stdint.h>

#include "kernels/crc32c.h"

namespace ssm {

struct crc_tables {
    uint32_t t[8][256];
};

/* Per thread of the block: its piece's CRC and length, for the combine. */
template <int THREADS> struct crc_pieces {
    uint32_t crc[THREADS];
    uint64_t bytes[THREADS];
};

/* Fills the tables; every thread of the block calls it. */
__device__ inline void crc_tables_fill(crc_tables &s)
{
    for (int i = threadIdx.x; i < 8 * 256; i += blockDim.x)
        s.t[i / 256][i % 256] = ssm_crc32c_slice_entry(i / 256, (uint32_t)(i % 256));
    __syncthreads();
}

/* The CRC of bytes [begin, end) of p, one thread; p + begin 8-byte aligned. */
__device__ inline uint32_t crc_range(const crc_tables &s, const unsigned char *p, uint64_t begin,
                                     uint64_t end)
{
    uint64_t words = (end - begin) / 8;
    uint32_t c = ssm_crc32c_slice8(s.t, SSM_CRC32C_PRESET, (const uint64_t *)(p + begin),
                                   (size_t)words);
    for (uint64_t i = begin + 8 * words; i < end; i++)
        c = (c >> 8) ^ s.t[0][(c ^ p[i]) & 0xFF];
    return c ^ SSM_CRC32C_PRESET;
}

/* The CRC of bytes [begin, end) of p by the whole block (THREADS threads,
 * every one calls it; p + begin 8-byte aligned): each thread a piece of
 * whole 8-byte words, the pieces combined by a tree. Every thread returns
 * the range's CRC. */
template <int THREADS>
__device__ inline uint32_t crc_block(const crc_tables &s, crc_pieces<THREADS> &pieces,
                                     const unsigned char *p, uint64_t begin, uint64_t end)
{
    const int t = threadIdx.x;
    const uint64_t n = end - begin;
    const uint64_t piece = ((n + THREADS - 1) / THREADS + 7) / 8 * 8;
    uint64_t lo = (uint64_t)t * piece < n ? (uint64_t)t * piece : n;
    uint64_t hi = lo + piece < n ? lo + piece : n;
    pieces.crc[t] = crc_range(s, p, begin + lo, begin + hi);
    pieces.bytes[t] = hi - lo;
    __syncthreads();
    for (int stride = 1; stride < THREADS; stride *= 2) {
        if (t % (2 * stride) == 0) {
            pieces.crc[t] =
                ssm_crc32c_combine(pieces.crc[t], pieces.crc[t + stride], pieces.bytes[t + stride]);
            pieces.bytes[t] += pieces.bytes[t + stride];
        }
        __syncthreads();
    }
    uint32_t crc = pieces.crc[0];
    __syncthreads(); /* the pieces may be reused at once */
    return crc;
}

} /* namespace ssm */
#endif
