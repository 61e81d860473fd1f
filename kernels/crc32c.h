/* CRC32C (Castagnoli), the state page's checksum (docs/pages.md): the
 * polynomial and the arithmetic that the host (core/pages/page.c) and the device
 * (kernels/cuda/crc32c.cuh) share, so that both compute the same function
 * from one definition.
 *
 * A CRC here is the conditioned one of iSCSI and ext4: register preset to
 * all ones, reflected polynomial 0x82F63B78, result inverted; "123456789"
 * gives 0xE3069283. The combine rule (after zlib's crc32_combine) gives the
 * CRC of A followed by B from the CRCs of A and B and the length of B, so a
 * long payload can be checksummed in parallel segments:
 *     crc(A B) = (crc(A) x^(8 |B|) mod P) xor crc(B)
 * with the product in GF(2)[x] modulo the polynomial, in the reflected bit
 * order (bit 31 is x^0). */
#ifndef SSM_KERNELS_CRC32C_H
#define SSM_KERNELS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/hostdevice.h"

#define SSM_CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define SSM_CRC32C_PRESET 0xFFFFFFFFu

/* Entry `byte` of the byte-at-a-time table: the register after shifting
 * `byte` through it bit by bit. */
SSM_HD uint32_t ssm_crc32c_table_entry(uint32_t byte)
{
    uint32_t c = byte;
    for (int k = 0; k < 8; k++)
        c = (c & 1) ? (c >> 1) ^ SSM_CRC32C_POLY : c >> 1;
    return c;
}

/* Entry `byte` of table `k` (0..7) of the eight-bytes-at-a-time form: table
 * 0 is the byte table, table k the byte table followed by k zero bytes. */
SSM_HD uint32_t ssm_crc32c_slice_entry(int k, uint32_t byte)
{
    uint32_t c = ssm_crc32c_table_entry(byte);
    for (int i = 0; i < k; i++)
        c = (c >> 8) ^ ssm_crc32c_table_entry(c & 0xFF);
    return c;
}

/* The CRC of `bytes` bytes, bit by bit, with no table: for short inputs
 * (the page header) where a table is not at hand. */
SSM_HD uint32_t ssm_crc32c_bitwise(const unsigned char *p, size_t bytes)
{
    uint32_t c = SSM_CRC32C_PRESET;
    for (size_t i = 0; i < bytes; i++)
        c = (c >> 8) ^ ssm_crc32c_table_entry((c ^ p[i]) & 0xFF);
    return c ^ SSM_CRC32C_PRESET;
}

/* Continues the register `c` (not inverted) over `words` little-endian
 * 8-byte words, with the eight tables t[k][256] of ssm_crc32c_slice_entry. */
SSM_HD uint32_t ssm_crc32c_slice8(const uint32_t (*t)[256], uint32_t c, const uint64_t *words,
                                  size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t w = words[i];
        uint32_t lo = (uint32_t)w ^ c, hi = (uint32_t)(w >> 32);
        c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
            t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    }
    return c;
}

/* a(x) b(x) modulo the polynomial (reflected: bit 31 is x^0). */
SSM_HD uint32_t ssm_crc32c_multiply(uint32_t a, uint32_t b)
{
    uint32_t product = 0;
    for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
        if (a & m)
            product ^= b;
        b = (b & 1) ? (b >> 1) ^ SSM_CRC32C_POLY : b >> 1;
    }
    return product;
}

/* x^(8 bytes) modulo the polynomial: the operator that moves a CRC past
 * `bytes` zero bytes, by squaring. */
SSM_HD uint32_t ssm_crc32c_shift(uint64_t bytes)
{
    uint32_t result = 1u << 31; /* x^0 */
    uint32_t square = 1u << 23; /* x^8 */
    for (; bytes != 0; bytes >>= 1) {
        if (bytes & 1)
            result = ssm_crc32c_multiply(square, result);
        square = ssm_crc32c_multiply(square, square);
    }
    return result;
}

/* The CRC of A followed by B, from crc(A), crc(B) and |B| in bytes. */
SSM_HD uint32_t ssm_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t bytes_b)
{
    return ssm_crc32c_multiply(ssm_crc32c_shift(bytes_b), crc_a) ^ crc_b;
}

#endif
