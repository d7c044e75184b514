/* SPDX-License-Identifier: MIT */
/*
 * crc32c.h - CRC-32C, as dumps carry it (crc32c.c) (internal).
 */
#ifndef CISTERN_CRC32C_H
#define CISTERN_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc32c.c: CRC-32C continued from `crc` (0 to start); _soft never uses SSE4.2. */
uint32_t cistern__crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t cistern__crc32c_soft(uint32_t crc, const void *buf, size_t len);

#endif
