/* SPDX-License-Identifier: MIT */
/*
 * dump_format.c - the dump file's meta block, encoded and decoded by one
 * description, and the checks of a file's frame (dump_format.h).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "admin/dump_format.h"
#include "sys/crc32c.h"
#include "core/policy.h"
#include "cistern/admin.h"

/* A cursor that encodes or decodes the meta block field by field, in one order. */
struct cur {
	uint8_t *p;
	size_t off;
	bool dec; /* decoding: read into the fields instead of writing them */
};

static void f64(struct cur *c, uint64_t *v)
{
	if (c->dec)
		*v = get64(c->p + c->off);
	else
		put64(c->p + c->off, *v);
	c->off += 8;
}

static void f32(struct cur *c, uint32_t *v)
{
	if (c->dec)
		*v = get32(c->p + c->off);
	else
		put32(c->p + c->off, *v);
	c->off += 4;
}

/* The one description of the meta block, used both ways. */
static void meta_code(struct cur *c, struct dump_meta *m)
{
	f64(c, &m->samples_off);
	f64(c, &m->samples_size);
	f64(c, &m->sample_count);
	f64(c, &m->payload_bytes);
	f64(c, &m->bitmap_off);
	f64(c, &m->bitmap_size);
	f64(c, &m->skipped);
	f64(c, &m->next_id);
	f64(c, &m->created_ns);
	f64(c, &m->dumped_ns);
	f32(c, &m->closed);
	f32(c, &m->producers_done);
	uint32_t policy = (uint32_t)m->cfg.policy, zero = 0;
	f64(c, &m->cfg.slot_size);
	f64(c, &m->cfg.slot_count);
	f32(c, &policy);
	m->cfg.policy = (enum cistern_policy)policy;
	f32(c, &m->cfg.mode);
	f64(c, &m->cfg.watermark);
	f32(c, &m->cfg.pseudo_epochs);
	f32(c, &m->cfg.sweep_size);
	f32(c, &m->cfg.nb_time_steps);
	f32(c, &m->cfg.batch_size);
	f64(c, &m->cfg.seed);
	f32(c, &m->cfg.max_procs);
	f32(c, &m->cfg.expected_producers);
	f32(c, &m->cfg.flags);
	/* Zero in the files written before it was kept: off. */
	f32(c, &m->cfg.max_times_sampled);
	/* Doubles travel as their IEEE 754 bits. */
	uint64_t rpp, slack;
	memcpy(&rpp, &m->cfg.reads_per_put, sizeof(rpp));
	memcpy(&slack, &m->cfg.rate_slack, sizeof(slack));
	f64(c, &rpp);
	f64(c, &slack);
	memcpy(&m->cfg.reads_per_put, &rpp, sizeof(rpp));
	memcpy(&m->cfg.rate_slack, &slack, sizeof(slack));
	if (c->dec)
		memcpy(m->name, c->p + c->off, sizeof(m->name));
	else
		memcpy(c->p + c->off, m->name, sizeof(m->name));
	c->off += 72; /* 65 bytes of name, padded to 8 */
	uint64_t *st64[] = {
		&m->st.population,   &m->st.puts,           &m->st.gets,
		&m->st.evictions,    &m->st.evicted_unseen, &m->st.redeliveries,
		&m->st.reclaimed,    &m->st.producer_waits, &m->st.producer_wait_ns,
		&m->st.reader_waits, &m->st.reader_wait_ns,
	};
	for (size_t i = 0; i < sizeof(st64) / sizeof(st64[0]); i++)
		f64(c, st64[i]);
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		f64(c, &m->st.seen_hist[i]);
	f32(c, &m->st.procs_attached);
	f32(c, &m->st.reception_closed);
	f32(c, &m->samples_crc);
	f32(c, &m->bitmap_crc);
	/* Bytes 416-419, zero in the files written before it was kept. */
	f32(c, &m->producers_died);
	/* Version 2: bytes 424-443, after 4 zero bytes that keep them 8-aligned. */
	f32(c, &zero);
	f64(c, &m->schema_off);
	f64(c, &m->schema_size);
	f32(c, &m->schema_crc);
	/* Bytes 448-471: the prioritized policy's alpha, beta, epsilon; zero before it. */
	f32(c, &zero);
	uint64_t prio[3];
	memcpy(&prio[0], &m->cfg.alpha, sizeof(prio[0]));
	memcpy(&prio[1], &m->cfg.beta, sizeof(prio[1]));
	memcpy(&prio[2], &m->cfg.epsilon, sizeof(prio[2]));
	for (int i = 0; i < 3; i++)
		f64(c, &prio[i]);
	memcpy(&m->cfg.alpha, &prio[0], sizeof(prio[0]));
	memcpy(&m->cfg.beta, &prio[1], sizeof(prio[1]));
	memcpy(&m->cfg.epsilon, &prio[2], sizeof(prio[2]));
	/* Bytes 472-507, version 3: the cold section; zero without one and before it. */
	f64(c, &m->cold_off);
	f64(c, &m->cold_size);
	f64(c, &m->cold_count);
	f64(c, &m->cold_payload);
	f32(c, &m->cold_crc);
}

void cistern__dump_meta_encode(struct dump_meta *m, uint8_t out[META_SIZE])
{
	memset(out, 0, META_SIZE);
	struct cur c = {out, 0, false};
	meta_code(&c, m);
	put32(out + META_SIZE - 4, cistern__crc32c(0, out, META_SIZE - 4));
}

int cistern__dump_meta_decode(const uint8_t in[META_SIZE], struct dump_meta *m)
{
	if (cistern__crc32c(0, in, META_SIZE - 4) != get32(in + META_SIZE - 4))
		return -EBADMSG;
	memset(m, 0, sizeof(*m));
	/* Decoding only reads through c.p: the encoder and decoder share one walk. */
	struct cur c = {(uint8_t *)(uintptr_t)in, 0, true};
	meta_code(&c, m);
	m->name[CISTERN_NAME_MAX] = '\0';
	return 0;
}

void cistern__dump_info_from_meta(const struct dump_meta *m, uint64_t file_size,
				  struct cistern_dump_info *info)
{
	if (!info)
		return;
	memset(info, 0, sizeof(*info));
	memcpy(info->name, m->name, sizeof(info->name));
	info->config = m->cfg;
	info->stats = m->st;
	/* Not in the statistics part of the block: from the config and the counts kept apart. */
	info->stats.producers_expected = m->cfg.expected_producers;
	info->stats.producers_done = m->producers_done;
	info->stats.producers_died = m->producers_died;
	info->samples = m->sample_count + m->cold_count;
	info->payload_bytes = m->payload_bytes + m->cold_payload;
	info->cold_samples = m->cold_count;
	if (m->cfg.cold_slots) {
		snprintf(info->cold_dir, sizeof(info->cold_dir), "%s", m->cold_dir);
		info->config.cold_dir = info->cold_dir;
		info->stats.cold_slots = m->cfg.cold_slots;
		info->stats.cold_population = m->cold_count;
		info->stats.cold_spilled = m->cold_spilled;
		info->stats.cold_reads = m->cold_reads;
		info->stats.cold_evictions = m->cold_evictions;
	}
	info->skipped = m->skipped;
	info->next_id = m->next_id;
	info->created_ns = m->created_ns;
	info->dumped_ns = m->dumped_ns;
	info->file_size = file_size;
	info->format_version = m->version;
	info->closed = m->closed;
	if (m->cfg.schema) {
		snprintf(info->schema, sizeof(info->schema), "%s", m->cfg.schema);
		info->config.schema = info->schema;
	}
}

/*
 * The cold section's header and dir, checked by their own CRC: they give the
 * config its cold_slots and cold_dir, which create reads.
 */
static int read_cold_header(int fd, struct dump_meta *m)
{
	uint8_t h[COLD_HDR + CISTERN_COLD_DIR_MAX];
	if (m->cold_size < COLD_HDR ||
	    pread(fd, h, COLD_HDR, (off_t)m->cold_off) != (ssize_t)COLD_HDR)
		return -EBADMSG;
	uint64_t slots = get64(h);
	uint32_t dir_len = get32(h + 32);
	if (slots == 0 || slots > CISTERN_SLOT_COUNT_MAX || dir_len == 0 ||
	    dir_len > CISTERN_COLD_DIR_MAX)
		return -EBADMSG;
	m->cold_hdr_size = COLD_HDR + cistern__align_up(dir_len, 8);
	if (m->cold_size < m->cold_hdr_size + m->cold_count * COLD_REC_HDR ||
	    m->cold_count > slots ||
	    pread(fd, h + COLD_HDR, dir_len, (off_t)(m->cold_off + COLD_HDR)) != (ssize_t)dir_len)
		return -EBADMSG;
	uint32_t crc = cistern__crc32c(0, h, 36);
	if (cistern__crc32c(crc, h + COLD_HDR, dir_len) != get32(h + 36) ||
	    memchr(h + COLD_HDR, '\0', dir_len) != NULL)
		return -EBADMSG;
	m->cfg.cold_slots = slots;
	m->cold_spilled = get64(h + 8);
	m->cold_reads = get64(h + 16);
	m->cold_evictions = get64(h + 24);
	memcpy(m->cold_dir, h + COLD_HDR, dir_len);
	m->cold_dir[dir_len] = '\0';
	m->cfg.cold_dir = m->cold_dir;
	return 0;
}

void cistern__dump_cold_header(const struct dump_meta *m, uint8_t *out, size_t *len)
{
	size_t dir_len = strlen(m->cold_dir);
	size_t n = COLD_HDR + cistern__align_up(dir_len, 8);
	memset(out, 0, n);
	put64(out, m->cfg.cold_slots);
	put64(out + 8, m->cold_spilled);
	put64(out + 16, m->cold_reads);
	put64(out + 24, m->cold_evictions);
	put32(out + 32, (uint32_t)dir_len);
	memcpy(out + COLD_HDR, m->cold_dir, dir_len);
	uint32_t crc = cistern__crc32c(0, out, 36);
	put32(out + 36, cistern__crc32c(crc, out + COLD_HDR, dir_len));
	*len = n;
}

int cistern__dump_cold_rec_check(const struct dump_meta *m, const struct dump_cold_rec *r,
				 const struct dump_cold_rec *prev)
{
	if (r->len > m->cfg.slot_size || r->id >= m->next_id || r->slot >= m->cfg.cold_slots ||
	    (prev && r->slot <= prev->slot))
		return -EBADMSG;
	return 0;
}

/* Read and check preamble, trailer and meta: everything decided before creating anything. */
int cistern__dump_read_frame(int fd, uint64_t *size, struct dump_meta *m)
{
	struct stat st;
	if (fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -ENOMSG;
	*size = (uint64_t)st.st_size;
	uint8_t pre[PREAMBLE_SIZE], tr[TRAILER_SIZE], mb[META_SIZE];
	/* Without the magic it is no dump at all; with it and short, a truncated one. */
	ssize_t got = pread(fd, pre, 8, 0);
	if (got < 0)
		return -errno;
	if (got < 8 || memcmp(pre, DUMP_MAGIC, 8) != 0)
		return -ENOMSG;
	if (*size < PREAMBLE_SIZE + META_SIZE + TRAILER_SIZE)
		return -EBADMSG;
	if (pread(fd, pre, sizeof(pre), 0) != (ssize_t)sizeof(pre))
		return -EBADMSG;
	uint32_t version = get32(pre + 8);
	if (version < 1 || version > CISTERN_DUMP_VERSION)
		return -EPROTONOSUPPORT;
	if (get32(pre + 12) != PREAMBLE_SIZE)
		return -EBADMSG;
	if (pread(fd, tr, sizeof(tr), (off_t)(*size - TRAILER_SIZE)) != (ssize_t)sizeof(tr))
		return -EBADMSG;
	if (memcmp(tr, TRAILER_MAGIC, 8) != 0 || get64(tr + 8) != *size ||
	    get64(tr + 16) != *size - TRAILER_SIZE - META_SIZE)
		return -EBADMSG;
	if (pread(fd, mb, sizeof(mb), (off_t)get64(tr + 16)) != (ssize_t)sizeof(mb))
		return -EBADMSG;
	int r = cistern__dump_meta_decode(mb, m);
	if (r < 0)
		return r;
	m->version = version;
	/*
	 * The name the segment had: a restore without a NAME creates it, and
	 * tools print it, so it must be one the naming rule allows (no bytes a
	 * terminal would obey, no path).
	 */
	if (cistern_name_valid(m->name) < 0)
		return -EBADMSG;
	/* Version 1 has no schema section: the seen set ends at the meta block. */
	uint64_t bitmap_end = m->bitmap_off + m->bitmap_size;
	if (version == 1 ? m->schema_off != 0 || m->schema_size != 0 || m->schema_crc != 0
			 : m->schema_off != bitmap_end || m->schema_size >= CISTERN_SCHEMA_MAX)
		return -EBADMSG;
	if (version == 1)
		m->schema_off = bitmap_end;
	/* Before version 3 there is no cold section, and its fields are zero. */
	uint64_t schema_end = m->schema_off + m->schema_size;
	bool cold = m->cold_size != 0;
	if (!cold && (m->cold_off || m->cold_count || m->cold_payload || m->cold_crc))
		return -EBADMSG;
	if (cold && version < 3)
		return -EBADMSG;
	uint64_t sections_end = cold ? m->cold_off + m->cold_size : schema_end;
	/* The sections must tile the file exactly. */
	if (m->samples_off != PREAMBLE_SIZE || m->bitmap_off != m->samples_off + m->samples_size ||
	    (cold && m->cold_off != schema_end) || sections_end < schema_end ||
	    sections_end != get64(tr + 16) || m->sample_count > m->cfg.slot_count ||
	    m->samples_size < m->sample_count * dump_rec_hdr(version) ||
	    !cistern__policy_of(m->cfg.policy) || m->next_id < m->sample_count)
		return -EBADMSG;
	if (cold && (r = read_cold_header(fd, m)) < 0)
		return r;
	/* Every id is below next_id: there are no more samples than that (cold_count is bounded now). */
	if (m->next_id - m->sample_count < m->cold_count)
		return -EBADMSG;
	/* The schema, checked by its own CRC before create reads it. */
	if (m->schema_size && pread(fd, m->schema, (size_t)m->schema_size, (off_t)m->schema_off) !=
				      (ssize_t)m->schema_size)
		return -EBADMSG;
	m->schema[m->schema_size] = '\0';
	if (cistern__crc32c(0, m->schema, (size_t)m->schema_size) != m->schema_crc ||
	    strlen(m->schema) != m->schema_size)
		return -EBADMSG;
	m->cfg.schema = m->schema_size ? m->schema : NULL;
	/*
	 * A config that create would refuse, under a meta checksum that holds:
	 * refused here, where verify and restore both read it, so that they
	 * agree (restore would otherwise fail later, at create, with -EINVAL).
	 */
	if (cistern_config_problem(&m->cfg) != NULL)
		return -EBADMSG;
	return 0;
}

int cistern__dump_rec_check(const struct dump_meta *m, const struct dump_rec *r,
			    const struct dump_rec *prev)
{
	if (r->len > m->cfg.slot_size || r->id >= m->next_id || (prev && r->id <= prev->id) ||
	    r->src >= m->cfg.slot_count)
		return -EBADMSG;
	/* The policy's own refusal at put time (-ERANGE), and its index's bounds on restore. */
	const struct cistern__policy *p = cistern__policy_of(m->cfg.policy);
	if (p && p->has_pairs &&
	    (r->sim_id >= m->cfg.sweep_size || r->time_step >= m->cfg.nb_time_steps))
		return -EBADMSG;
	/* Only the flags a put on this policy keeps. */
	if ((r->flags & ~cistern__kept_flags(p)) || r->reserved)
		return -EBADMSG;
	return 0;
}

/*
 * The portable Roaring format (the one roaring_bitmap_portable_serialize()
 * writes, shared by the Roaring implementations): a cookie; with run
 * containers, the container count is in the cookie and a bitset says which
 * containers are runs; then per container its key (high 16 bits) and
 * cardinality - 1; then, unless runs are present with fewer than 4
 * containers, each container's byte offset from the start; then the
 * containers: runs (count, then start and length - 1 pairs), arrays of
 * sorted values (up to 4096), or 8 KiB bitsets.
 */
#define RB_COOKIE_NO_RUNS 12346u
#define RB_COOKIE_RUNS 12347u
#define RB_OFFSETS_FROM 4
#define RB_ARRAY_MAX 4096
#define RB_BITSET_BYTES 8192

static inline uint32_t get16(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

/* Every value decoded must be in `want`: values come strictly ascending, so none twice. */
static bool wanted(const roaring_bitmap_t *want, uint32_t hi, uint32_t lo)
{
	return roaring_bitmap_contains(want, hi | lo);
}

int cistern__dump_seen_set_check(const uint8_t *p, size_t n, const roaring_bitmap_t *want)
{
	size_t off = 4;
	if (n < off)
		return -EBADMSG;
	uint32_t cookie = get32(p), size;
	const uint8_t *runs = NULL;
	if (cookie == RB_COOKIE_NO_RUNS) {
		if (n - off < 4)
			return -EBADMSG;
		size = get32(p + off);
		off += 4;
		if (size > 65536)
			return -EBADMSG;
	} else if ((cookie & 0xFFFF) == RB_COOKIE_RUNS) {
		size = (cookie >> 16) + 1;
		if (n - off < (size + 7) / 8)
			return -EBADMSG;
		runs = p + off;
		off += (size + 7) / 8;
	} else {
		return -EBADMSG;
	}
	if ((n - off) / 4 < size)
		return -EBADMSG;
	const uint8_t *keys = p + off;
	off += 4 * (size_t)size;
	const uint8_t *offsets = NULL;
	if (!runs || size >= RB_OFFSETS_FROM) {
		if ((n - off) / 4 < size)
			return -EBADMSG;
		offsets = p + off;
		off += 4 * (size_t)size;
	}
	/* Keys ascending, and no more values than wanted: that bounds the work below. */
	uint64_t total = 0;
	for (uint32_t k = 0; k < size; k++) {
		if (k && get16(keys + 4 * k) <= get16(keys + 4 * (k - 1)))
			return -EBADMSG;
		total += get16(keys + 4 * k + 2) + 1;
	}
	if (total != roaring_bitmap_get_cardinality(want))
		return -EBADMSG;
	for (uint32_t k = 0; k < size; k++) {
		if (offsets && get32(offsets + 4 * k) != off)
			return -EBADMSG;
		uint32_t hi = get16(keys + 4 * k) << 16, card = get16(keys + 4 * k + 2) + 1;
		if (runs && (runs[k / 8] >> (k % 8) & 1)) {
			if (n - off < 2)
				return -EBADMSG;
			uint32_t nruns = get16(p + off), sum = 0, from = 0;
			off += 2;
			if ((n - off) / 4 < nruns)
				return -EBADMSG;
			for (uint32_t i = 0; i < nruns; i++, off += 4) {
				uint32_t start = get16(p + off), len = get16(p + off + 2);
				/* Ascending and apart: the run may not reach back into the last one. */
				if (start < from || start + len > 0xFFFF || len + 1 > card - sum)
					return -EBADMSG;
				sum += len + 1;
				for (uint32_t v = start; v <= start + len; v++)
					if (!wanted(want, hi, v))
						return -EBADMSG;
				from = start + len + 1;
			}
			if (sum != card)
				return -EBADMSG;
		} else if (card <= RB_ARRAY_MAX) {
			if ((n - off) / 2 < card)
				return -EBADMSG;
			for (uint32_t i = 0; i < card; i++, off += 2) {
				uint32_t v = get16(p + off);
				if ((i && v <= get16(p + off - 2)) || !wanted(want, hi, v))
					return -EBADMSG;
			}
		} else {
			if (n - off < RB_BITSET_BYTES)
				return -EBADMSG;
			uint32_t ones = 0;
			for (uint32_t b = 0; b < RB_BITSET_BYTES; b++)
				for (uint32_t bit = 0; bit < 8; bit++)
					if (p[off + b] >> bit & 1) {
						if (++ones > card || !wanted(want, hi, b * 8 + bit))
							return -EBADMSG;
					}
			if (ones != card)
				return -EBADMSG;
			off += RB_BITSET_BYTES;
		}
	}
	return off == n ? 0 : -EBADMSG;
}
