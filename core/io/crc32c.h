/* crc32c.h: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum of TFRecord framing (TensorBoard event files). */
#ifndef ACCEL_CRC32C_H
#define ACCEL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* CRC-32C of n bytes, continuing from crc (0 to start):
 * crc32c(0, "123456789", 9) == 0xE3069283. */
uint32_t crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked form: ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32). */
uint32_t crc32c_mask(uint32_t crc);

#endif
