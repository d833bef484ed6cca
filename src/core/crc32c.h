/* crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), incremental:
 *   crc = crc32c(0, a, na); crc = crc32c(crc, b, nb);  equals crc32c(0, a||b, na + nb).
 * crc32c(0, "123456789", 9) == 0xE3069283. The SSE4.2 crc32 instruction where the CPU has it
 * (chosen once, at run time), else a table (slicing by 8); both give the same value. */
#ifndef HPT_CORE_CRC32C_H
#define HPT_CORE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/* out[i] = crc32c(0, page i), for n_pages pages of 4096 bytes at buf: the disk tier's
 * checksums. The hardware path runs three pages at once (each its own stream: no joining) and
 * prefetches the next ones (a hardware prefetcher does not cross a 4 KiB page). */
void crc32c_pages(const void *buf, size_t n_pages, uint32_t *out);
/* The table path alone (tests compare it with the hardware path). */
uint32_t crc32c_sw(uint32_t crc, const void *data, size_t n);
/* 1: crc32c runs on the crc32 instruction. */
int crc32c_hw(void);

#endif
