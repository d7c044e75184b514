/* SPDX-License-Identifier: MIT */
/*
 * rng.h - a small, fast, seedable generator (xoshiro256** seeded by splitmix64),
 * one per handle, so random choices need no shared state and a run with a fixed
 * seed is reproducible.
 */
#ifndef CISTERN_RNG_H
#define CISTERN_RNG_H

#include <stdint.h>

struct cistern_rng {
	uint64_t s[4];
};

static inline uint64_t cistern__splitmix64(uint64_t *x)
{
	uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

static inline void cistern__rng_seed(struct cistern_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = cistern__splitmix64(&seed);
}

static inline uint64_t cistern__rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

static inline uint64_t cistern__rng_next(struct cistern_rng *r)
{
	uint64_t *s = r->s;
	uint64_t result = cistern__rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = cistern__rotl(s[3], 45);
	return result;
}

/* Uniform integer in [0, n), n > 0, without modulo bias (Lemire's method). */
static inline uint64_t cistern__rng_below(struct cistern_rng *r, uint64_t n)
{
	__uint128_t m = (__uint128_t)cistern__rng_next(r) * n;
	uint64_t low = (uint64_t)m;
	if (low < n) {
		uint64_t threshold = -n % n;
		while (low < threshold) {
			m = (__uint128_t)cistern__rng_next(r) * n;
			low = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

/*
 * Uniform draws in [0, n), 0 < n < 2^32, two from each 64-bit output: a pool of
 * 32-bit halves (Lemire's method on 32 bits, rejection included).
 */
struct cistern_rng32 {
	uint64_t pool;
	unsigned left;
};

static inline uint32_t cistern__rng32_bits(struct cistern_rng *r, struct cistern_rng32 *p)
{
	if (p->left == 0) {
		p->pool = cistern__rng_next(r);
		p->left = 2;
	}
	uint32_t x = (uint32_t)p->pool;
	p->pool >>= 32;
	p->left--;
	return x;
}

static inline uint32_t cistern__rng32_below(struct cistern_rng *r, struct cistern_rng32 *p,
					    uint32_t n)
{
	uint64_t m = (uint64_t)cistern__rng32_bits(r, p) * n;
	uint32_t low = (uint32_t)m;
	if (low < n) {
		uint32_t threshold = (uint32_t)-n % n;
		while (low < threshold) {
			m = (uint64_t)cistern__rng32_bits(r, p) * n;
			low = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

/*
 * rng.c: 64 bits nobody else can guess, for the temporary names of a dump
 * file and of a restore's segment: a name made of a pid and a counter can be
 * taken first by anyone, and would make the dump or restore fail.
 */
uint64_t cistern__unguessable(void);

#endif
