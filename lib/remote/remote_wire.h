/* SPDX-License-Identifier: MIT */
/*
 * remote_wire.h - the message header that remote producers and the server
 * exchange over ZeroMQ (docs/REMOTE.md, "Wire protocol"). Fields are encoded
 * little-endian byte by byte, so that both ends agree whatever their CPUs.
 */
#ifndef CISTERN_REMOTE_WIRE_H
#define CISTERN_REMOTE_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CISTERN__WIRE_HDR 32

/*
 * The oldest protocol version a server still welcomes (CISTERN_REMOTE_PROTOCOL
 * is the newest). It answers a producer in the version of its HELLO; a
 * version 2 producer's samples carry no flags and no priority.
 */
#define CISTERN__REMOTE_PROTOCOL_MIN 2

enum cistern__wire_kind {
	CISTERN__W_HELLO = 1,
	CISTERN__W_WELCOME = 2,
	CISTERN__W_PUT = 3,
	CISTERN__W_ACK = 4,
	CISTERN__W_FAIL = 5,
	CISTERN__W_DONE = 6,
	CISTERN__W_DONE_OK = 7,
	CISTERN__W_BYE = 8,
	CISTERN__W_ERROR = 9,
	CISTERN__W_PUTS = 10,
};

/*
 * PUTS: after the header the `a` payloads back to back, then `a` records of
 * this many bytes: u32 length, sim_id, time_step and sample flags, then the
 * priority (u64, IEEE 754 bits; 0 without CISTERN__WIRE_PRIORITY). Version
 * 2 records are the first 16 bytes, their flags 0. Records last, so that a
 * producer appends payloads as puts come and writes the records once it
 * sends; payloads contiguous, so that the server puts a run of equal
 * lengths with one cistern_put_batch().
 */
#define CISTERN__WIRE_REC 24
#define CISTERN__WIRE_REC_V2 16

/* The record size of a producer speaking `version`. */
static inline size_t cistern__wire_rec(unsigned version)
{
	return version >= 3 ? CISTERN__WIRE_REC : CISTERN__WIRE_REC_V2;
}

/*
 * Sample flags (version 3): a PUT's `a`, a PUTS record's fourth field. Any
 * other bit, or a priority without CISTERN__WIRE_PRIORITY, breaks the
 * protocol.
 */
#define CISTERN__WIRE_END_OF_EPISODE 1u /* CISTERN_META_END_OF_EPISODE */
#define CISTERN__WIRE_PRIORITY 2u       /* the priority field holds one */
#define CISTERN__WIRE_FLAGS (CISTERN__WIRE_END_OF_EPISODE | CISTERN__WIRE_PRIORITY)

/*
 * WELCOME's time_step (version 3): which of the server's segments take
 * priorities. A producer refuses a priority at once when none does.
 */
#define CISTERN__WELCOME_PRIO_SOME 1u
#define CISTERN__WELCOME_PRIO_ALL 2u

/*
 * Payload bytes a producer gathers into one PUTS at most (docs/REMOTE.md,
 * "Gathering small puts"): with the slot size and the window it bounds the
 * size of every message the server takes in (ZMQ_MAXMSGSIZE).
 */
#define CISTERN__WIRE_GATHER_BYTES ((size_t)64 << 10)

struct cistern__wire {
	uint8_t kind;
	uint8_t version;
	uint16_t zero; /* bytes 2-3: 0 in this version; a decoded frame says what it held */
	uint32_t a;
	uint64_t seq;
	uint64_t b;
	uint32_t sim_id;
	uint32_t time_step;
};

static inline void cistern__wire_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void cistern__wire_put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint64_t cistern__wire_get64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint32_t cistern__wire_get32(const unsigned char *p)
{
	uint32_t v = 0;
	for (int i = 3; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline void cistern__wire_encode(const struct cistern__wire *w,
					unsigned char out[CISTERN__WIRE_HDR])
{
	out[0] = w->kind;
	out[1] = w->version;
	out[2] = 0;
	out[3] = 0;
	cistern__wire_put32(out + 4, w->a);
	cistern__wire_put64(out + 8, w->seq);
	cistern__wire_put64(out + 16, w->b);
	cistern__wire_put32(out + 24, w->sim_id);
	cistern__wire_put32(out + 28, w->time_step);
}

/*
 * Decode the header at the start of a frame; -1 if the frame is too short.
 * A PUT's payload follows its header in the same frame.
 */
static inline int cistern__wire_decode(const void *buf, size_t len, struct cistern__wire *w)
{
	const unsigned char *p = buf;
	if (len < CISTERN__WIRE_HDR)
		return -1;
	w->kind = p[0];
	w->version = p[1];
	w->zero = (uint16_t)(p[2] | p[3] << 8);
	w->a = cistern__wire_get32(p + 4);
	w->seq = cistern__wire_get64(p + 8);
	w->b = cistern__wire_get64(p + 16);
	w->sim_id = cistern__wire_get32(p + 24);
	w->time_step = cistern__wire_get32(p + 28);
	return 0;
}

/* A priority's IEEE 754 bits, as the wire carries them. */
static inline uint64_t cistern__wire_prio_bits(double d)
{
	uint64_t v;
	memcpy(&v, &d, sizeof(v));
	return v;
}

static inline double cistern__wire_prio(uint64_t v)
{
	double d;
	memcpy(&d, &v, sizeof(d));
	return d;
}

/* Whether a tcp:// or ipc:// endpoint stays on this machine (no CurveZMQ needed). */
int cistern__endpoint_is_local(const char *endpoint);

#endif
