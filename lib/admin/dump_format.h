/* SPDX-License-Identifier: MIT */
/*
 * dump_format.h - the dump file format, shared by dump.c (the writer) and
 * restore.c (verify and restore); internal.
 *
 * File format, version 4. Every integer is little-endian, whatever the host.
 *
 *   preamble  16 bytes   "CISTDUMP", u32 format version, u32 preamble size (16)
 *   samples   records back to back, in ascending sample id order:
 *               u64 sample_id, u32 sim_id, u32 time_step, u64 len,
 *               u32 seen, u32 source slot index,          (32 bytes)
 *               u32 flags, u32 0                          (8 bytes, version 4)
 *               len payload bytes, zero padding to a multiple of 8
 *             flags are the sample's cistern_meta.flags as the segment kept
 *             them: CISTERN_META_END_OF_EPISODE or 0, and 0 under a policy
 *             that keeps none. A reader refuses any other bit, and a
 *             nonzero last word, as damage.
 *   seen set  a CRoaring bitmap, portable serialization
 *             (roaring_bitmap_portable_serialize), of the SOURCE SLOT INDICES
 *             of the records whose seen count is >= 1. Slot indices, not
 *             sample ids: they are below 2^28, so they fit the 32-bit bitmap
 *             whatever the ids are. It repeats what the records say, so a
 *             restore checks that both agree (parsing the bytes itself:
 *             cistern__dump_seen_set_check()).
 *   schema    the segment's schema text (docs/SCHEMA.md), without its NUL;
 *             empty for a segment without one (always under 1024 bytes).
 *   cold      version 3: the cold tier's samples (docs/protocol/tiers.md);
 *             absent (0 bytes) for a segment without a cold tier:
 *               header, 40 bytes: u64 cold_slots, u64 spilled, u64
 *                 cold_reads, u64 cold_evictions (the tier's counters), u32
 *                 dir_len, u32 CRC-32C of the header's first 36 bytes and
 *                 of the dir;
 *               dir: the cold_dir, dir_len bytes without a NUL, then zero
 *                 padding to a multiple of 8;
 *               records back to back, in ascending cold slot order: u64
 *                 sample_id, u64 len, u32 seen, u32 source cold slot, the
 *                 entry's 24 bytes of meta (sim_id and time_step first)
 *                 (48 bytes), then len payload bytes, zero padding to a
 *                 multiple of 8. No flags: the policies with a cold tier
 *                 keep none (cistern__kept_flags()), so a cold sample reads
 *                 back with flags 0 before a dump as after a restore.
 *   meta      512 bytes: section offsets and sizes, counts, next sample id,
 *             times, reception state, the config (its max_times_sampled
 *             where files from before it have zero: off), the statistics, the CRC-32C
 *             of the samples section and of the seen set, the producers that
 *             died before done (bytes 416-419; zero in files from before it
 *             was kept, which zeroed the rest of the block), the schema
 *             section's offset, size and CRC-32C (bytes 424-443), the
 *             prioritized policy's alpha, beta and epsilon as IEEE 754 bits
 *             (bytes 448-471; zero for the other policies and in files from
 *             before it), the cold section's offset, size, record count,
 *             payload bytes and CRC-32C (bytes 472-507; zero without a cold
 *             section and in files of version 1 and 2), and last the CRC-32C
 *             of the meta block's first 508 bytes.
 *   trailer   32 bytes: "CISTEND1", u64 file size, u64 meta offset,
 *             u32 CRC-32C of every byte of the file before this field, u32 0.
 *
 * The meta block comes last because a dump of a live segment only knows what
 * it wrote when it is done (samples that move while copied are left out), and
 * so every byte is produced in file order: the whole-file CRC is computed on
 * the way, and a reader finds the trailer and meta at fixed distances from the
 * end. A truncated file has no trailer there, a damaged one fails a CRC.
 *
 * Version 1, written before schemas, is version 2 without the schema
 * section: its meta block has zeros where the schema's offset, size and CRC
 * go, and the seen set ends where the meta block starts. Version 2 is version
 * 3 without the cold section. Version 3 is version 4 with 32-byte sample
 * records, without flags: its samples restore with flags 0. A dump is
 * written in the oldest version that holds the segment whole, so that older
 * builds read it: version 4 for a policy that keeps flags (the
 * end-of-episode marks of a SimPairedReservoir or a prioritized segment), else version 3 for a segment
 * with a cold tier, else version 2. All four are read.
 */
#ifndef CISTERN_DUMP_FORMAT_H
#define CISTERN_DUMP_FORMAT_H

#include <roaring/roaring.h>
#include <string.h>

#include "core/handle.h"
#include "cistern/admin.h"

#define DUMP_MAGIC "CISTDUMP"
#define TRAILER_MAGIC "CISTEND1"
#define PREAMBLE_SIZE 16
#define META_SIZE 512
#define TRAILER_SIZE 32
#define REC_HDR 32    /* a sample record's header, versions 1 to 3 */
#define REC_HDR_V4 40 /* and from version 4 on, with the flags */
#define COLD_HDR 40
#define COLD_REC_HDR 48
#define COLD_META 24

/* Little-endian fields, whatever the host. */
static inline void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint32_t get32(const uint8_t *p)
{
	uint32_t v = 0;
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* The meta block's fields, decoded. */
struct dump_meta {
	uint64_t samples_off, samples_size, sample_count, payload_bytes;
	uint64_t bitmap_off, bitmap_size, skipped, next_id, created_ns, dumped_ns;
	uint32_t closed, producers_done;
	struct cistern_config cfg;
	char name[CISTERN_NAME_MAX + 1];
	struct cistern_stats st;
	uint32_t samples_crc, bitmap_crc;
	uint32_t producers_died;
	uint64_t schema_off, schema_size; /* version 2; 0 and 0 in version 1 */
	uint32_t schema_crc;
	/* Version 3: the cold section (all 0 without one). */
	uint64_t cold_off, cold_size, cold_count, cold_payload;
	uint32_t cold_crc;
	/* From the cold section's header, read with the frame. */
	uint64_t cold_spilled, cold_reads, cold_evictions;
	uint64_t cold_hdr_size; /* header, dir and its padding: where the records start */
	char cold_dir[CISTERN_COLD_DIR_MAX + 1];
	uint32_t version; /* the file's format version (not in the meta block) */
	/* The schema text, NUL-terminated; cfg.schema points here, or is NULL for none. */
	char schema[CISTERN_SCHEMA_MAX];
};

/* The size of a sample record's header in a file of format `version`. */
static inline size_t dump_rec_hdr(uint32_t version)
{
	return version >= 4 ? REC_HDR_V4 : REC_HDR;
}

/* A sample record's header, decoded. */
struct dump_rec {
	uint64_t id, len;
	uint32_t sim_id, time_step, seen, src;
	uint32_t flags, reserved; /* version 4; 0 before */
};

/* A record header of dump_rec_hdr(version) bytes at `in`. */
static inline void dump_rec_decode(const uint8_t *in, uint32_t version, struct dump_rec *r)
{
	r->id = get64(in);
	r->sim_id = get32(in + 8);
	r->time_step = get32(in + 12);
	r->len = get64(in + 16);
	r->seen = get32(in + 24);
	r->src = get32(in + 28);
	r->flags = version >= 4 ? get32(in + 32) : 0;
	r->reserved = version >= 4 ? get32(in + 36) : 0;
}

/* The header of r in dump_rec_hdr(version) bytes at `out`. */
static inline void dump_rec_encode(uint8_t *out, uint32_t version, const struct dump_rec *r)
{
	put64(out, r->id);
	put32(out + 8, r->sim_id);
	put32(out + 12, r->time_step);
	put64(out + 16, r->len);
	put32(out + 24, r->seen);
	put32(out + 28, r->src);
	if (version >= 4) {
		put32(out + 32, r->flags);
		put32(out + 36, 0);
	}
}

/* A cold record's header, decoded. */
struct dump_cold_rec {
	uint64_t id, len;
	uint32_t seen, slot;
	uint8_t meta[COLD_META];
};

static inline void dump_cold_rec_decode(const uint8_t in[COLD_REC_HDR], struct dump_cold_rec *r)
{
	r->id = get64(in);
	r->len = get64(in + 8);
	r->seen = get32(in + 16);
	r->slot = get32(in + 20);
	memcpy(r->meta, in + 24, COLD_META);
}

static inline void dump_cold_rec_encode(uint8_t out[COLD_REC_HDR], const struct dump_cold_rec *r)
{
	put64(out, r->id);
	put64(out + 8, r->len);
	put32(out + 16, r->seen);
	put32(out + 20, r->slot);
	memcpy(out + 24, r->meta, COLD_META);
}

/*
 * The check of a cold record, as cistern__dump_rec_check() for the hot ones:
 * a payload longer than a slot, an id not below next_id, a cold slot past
 * cold_slots or not above the previous record's is -EBADMSG.
 */
int cistern__dump_cold_rec_check(const struct dump_meta *m, const struct dump_cold_rec *r,
				 const struct dump_cold_rec *prev);

/*
 * The one check of a record, run on every record by the parser that serves
 * cistern_dump_verify() and cistern_restore() alike, so that they agree: a
 * record the segment could not have held (payload longer than a slot, ids
 * not ascending or not below next_id, a source slot past slot_count, a
 * SimPairedReservoir key outside sweep_size x nb_time_steps, a flag other
 * than CISTERN_META_END_OF_EPISODE or one under a policy that keeps no
 * flags, a nonzero reserved word) is damage,
 * -EBADMSG, before a restore builds anything from it. prev: the previous
 * record, NULL for the first.
 */
int cistern__dump_rec_check(const struct dump_meta *m, const struct dump_rec *r,
			    const struct dump_rec *prev);

/*
 * Check that the n bytes of a seen-set section are a well-formed portable
 * Roaring serialization holding exactly the values of `want`: 0 or -EBADMSG.
 * The bytes are parsed here, never handed to CRoaring, whose deserializer
 * prints to standard error on bad input (and the library never prints).
 */
int cistern__dump_seen_set_check(const uint8_t *p, size_t n, const roaring_bitmap_t *want);

/*
 * The cold section's header and dir of m (cfg.cold_slots, the counters,
 * cold_dir) into out (COLD_HDR + CISTERN_COLD_DIR_MAX + 8 bytes): *len bytes.
 */
void cistern__dump_cold_header(const struct dump_meta *m, uint8_t *out, size_t *len);

/* The meta block out, its CRC last. */
void cistern__dump_meta_encode(struct dump_meta *m, uint8_t out[META_SIZE]);
/* The meta block in: -EBADMSG if its CRC does not hold. */
int cistern__dump_meta_decode(const uint8_t in[META_SIZE], struct dump_meta *m);
/* What cistern_dump_info reports of a dump (info may be NULL). */
void cistern__dump_info_from_meta(const struct dump_meta *m, uint64_t file_size,
				  struct cistern_dump_info *info);
/*
 * Read and check a dump file's preamble, trailer, meta block and schema,
 * everything decided before a restore creates anything: 0 with *size and *m, or
 * -EBADMSG, -EPROTONOSUPPORT (another format version), -ENOMSG (not a
 * dump: no magic, or not a regular file), or the error of fstat() or pread().
 */
int cistern__dump_read_frame(int fd, uint64_t *size, struct dump_meta *m);

#endif
