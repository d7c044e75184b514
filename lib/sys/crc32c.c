/* SPDX-License-Identifier: MIT */
/*
 * crc32c.c - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
 * checksum of dump files. CRC-32C rather than a hash: it detects every burst
 * error up to 32 bits and every odd number of flipped bits, which is what a
 * damaged file looks like, and x86 computes it in hardware (SSE4.2 crc32
 * instruction, 8 bytes a cycle or so). Elsewhere, or on an old CPU, a
 * slicing-by-8 table does 8 bytes a step.
 *
 * The running value is the finished CRC of what came before (0 for nothing),
 * so cistern__crc32c(cistern__crc32c(0, a, n), b, m) == CRC of a||b.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "sys/crc32c.h"

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static atomic_int table_state; /* 0 not built, 1 building, 2 ready */

static void build_table(void)
{
	int expected = 0;
	if (!atomic_compare_exchange_strong(&table_state, &expected, 1)) {
		/* Someone else builds it: wait (it takes microseconds). [crc-table] */
		while (atomic_load(&table_state) != 2)
			;
		return;
	}
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (POLY & (0u - (c & 1)));
		table[0][i] = c;
	}
	/* table[k][i]: the CRC of byte i followed by k zero bytes. */
	for (uint32_t i = 0; i < 256; i++)
		for (int k = 1; k < 8; k++)
			table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xff];
	/* [crc-table] seq_cst (so release): the table is written before it reads ready. */
	atomic_store(&table_state, 2);
}

static uint32_t crc_soft(uint32_t c, const uint8_t *p, size_t n)
{
	/* [crc-table] acquire: a ready table is a complete one. */
	if (atomic_load_explicit(&table_state, memory_order_acquire) != 2)
		build_table();
	while (n && ((uintptr_t)p & 7)) {
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
		n--;
	}
	while (n >= 8) {
		/* Assemble little-endian words byte by byte: correct on any host. */
		uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				   (uint32_t)p[3] << 24);
		uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 |
			      (uint32_t)p[7] << 24;
		c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
		    table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
		    table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
		p += 8;
		n -= 8;
	}
	while (n--)
		c = (c >> 8) ^ table[0][(c ^ *p++) & 0xff];
	return c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
#include <pthread.h>

/*
 * One crc32 instruction takes three cycles before the next one on the same
 * register can start, but the CPU starts one a cycle. So long buffers go
 * in blocks of three lanes of LANE bytes each, one register a lane, and
 * the three CRCs are then joined. The CRC register is linear: running it
 * from state x over bytes B gives shift(x, |B|) ^ (the run from state 0
 * over B), where shift(x, n) runs x over n zero bytes. shift(x, LANE) is
 * four table lookups, one a byte of x.
 */
enum { LANE = 1360 }; /* a multiple of 8; three lanes fit a 4 KiB sample */

static uint32_t shift_tab[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint64_t run8(uint64_t c, const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		c = _mm_crc32_u64(c, v);
	}
	return c;
}

/* shift() is linear: the table of byte k holds the shifts of its 256 values. */
__attribute__((target("sse4.2"))) static void build_shift(void)
{
	static const uint8_t zeros[LANE];
	uint32_t bit[32];
	for (int b = 0; b < 32; b++)
		bit[b] = (uint32_t)run8(UINT32_C(1) << b, zeros, LANE);
	for (int k = 0; k < 4; k++)
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t t = 0;
			for (int i = 0; i < 8; i++)
				if (v >> i & 1)
					t ^= bit[8 * k + i];
			shift_tab[k][v] = t;
		}
}

static uint32_t shift(uint32_t c)
{
	return shift_tab[0][c & 0xff] ^ shift_tab[1][(c >> 8) & 0xff] ^
	       shift_tab[2][(c >> 16) & 0xff] ^ shift_tab[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
	while (n && ((uintptr_t)p & 7)) {
		c = _mm_crc32_u8(c, *p++);
		n--;
	}
	if (n >= 3 * LANE) {
		pthread_once(&shift_once, build_shift);
		while (n >= 3 * LANE) {
			uint64_t a = c, b = 0, d = 0;
			for (size_t i = 0; i < LANE; i += 8) {
				uint64_t x, y, z;
				memcpy(&x, p + i, 8);
				memcpy(&y, p + LANE + i, 8);
				memcpy(&z, p + 2 * LANE + i, 8);
				a = _mm_crc32_u64(a, x);
				b = _mm_crc32_u64(b, y);
				d = _mm_crc32_u64(d, z);
			}
			c = shift((uint32_t)a) ^ (uint32_t)b;
			c = shift(c) ^ (uint32_t)d;
			p += 3 * LANE;
			n -= 3 * LANE;
		}
	}
	size_t whole = n & ~(size_t)7;
	c = (uint32_t)run8(c, p, whole);
	p += whole;
	n -= whole;
	while (n--)
		c = _mm_crc32_u8(c, *p++);
	return c;
}

static bool have_hw(void)
{
	static atomic_int cached = -1; /* racing writers all store the same value */
	int v = atomic_load_explicit(&cached, memory_order_relaxed);
	if (v < 0) {
		v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
		atomic_store_explicit(&cached, v, memory_order_relaxed);
	}
	return v;
}
#endif

uint32_t cistern__crc32c(uint32_t crc, const void *buf, size_t len)
{
	uint32_t c = ~crc;
#if defined(__x86_64__)
	if (have_hw())
		return ~crc_hw(c, buf, len);
#endif
	return ~crc_soft(c, buf, len);
}

uint32_t cistern__crc32c_soft(uint32_t crc, const void *buf, size_t len)
{
	return ~crc_soft(~crc, buf, len);
}
