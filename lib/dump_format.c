/* SPDX-License-Identifier: MIT */
/*
 * dump_format.c - the dump file's meta block, encoded and decoded by one
 * description, and the checks of a file's frame (dump_format.h).
 */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dump_format.h"

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
	f32(c, &zero);
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
		&m->st.population, &m->st.puts, &m->st.gets, &m->st.evictions,
		&m->st.evicted_unseen, &m->st.redeliveries, &m->st.reclaimed,
		&m->st.producer_waits, &m->st.producer_wait_ns, &m->st.reader_waits,
		&m->st.reader_wait_ns,
	};
	for (size_t i = 0; i < sizeof(st64) / sizeof(st64[0]); i++)
		f64(c, st64[i]);
	for (int i = 0; i < CISTERN_SEEN_BUCKETS; i++)
		f64(c, &m->st.seen_hist[i]);
	f32(c, &m->st.procs_attached);
	f32(c, &m->st.reception_closed);
	f32(c, &m->samples_crc);
	f32(c, &m->bitmap_crc);
	f32(c, &m->producers_died);
}

void dump_meta_encode(struct dump_meta *m, uint8_t out[META_SIZE])
{
	memset(out, 0, META_SIZE);
	struct cur c = {out, 0, false};
	meta_code(&c, m);
	put32(out + META_SIZE - 4, cistern__crc32c(0, out, META_SIZE - 4));
}

int dump_meta_decode(const uint8_t in[META_SIZE], struct dump_meta *m)
{
	if (cistern__crc32c(0, in, META_SIZE - 4) != get32(in + META_SIZE - 4))
		return -EBADMSG;
	memset(m, 0, sizeof(*m));
	struct cur c = {(uint8_t *)in, 0, true};
	meta_code(&c, m);
	m->name[CISTERN_NAME_MAX] = '\0';
	return 0;
}

void dump_info_from_meta(const struct dump_meta *m, uint64_t file_size, struct cistern_dump_info *info)
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
	info->samples = m->sample_count;
	info->payload_bytes = m->payload_bytes;
	info->skipped = m->skipped;
	info->next_id = m->next_id;
	info->created_ns = m->created_ns;
	info->dumped_ns = m->dumped_ns;
	info->file_size = file_size;
	info->format_version = CISTERN_DUMP_VERSION;
	info->closed = m->closed;
}

/* Read and check preamble, trailer and meta: everything decided before creating anything. */
int dump_read_frame(int fd, uint64_t *size, struct dump_meta *m)
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
	if (get32(pre + 8) != CISTERN_DUMP_VERSION)
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
	int r = dump_meta_decode(mb, m);
	if (r < 0)
		return r;
	/* The sections must tile the file exactly. */
	if (m->samples_off != PREAMBLE_SIZE || m->bitmap_off != m->samples_off + m->samples_size ||
	    m->bitmap_off + m->bitmap_size != get64(tr + 16) ||
	    m->sample_count > m->cfg.slot_count || m->samples_size < m->sample_count * REC_HDR ||
	    m->cfg.policy >= CISTERN_POLICY_COUNT || m->next_id < m->sample_count)
		return -EBADMSG;
	/*
	 * A config that create would refuse, under a meta checksum that holds:
	 * refused here, where verify and restore both read it, so that they
	 * agree (restore would otherwise fail later, at create, with -EINVAL).
	 */
	if (cistern_config_problem(&m->cfg) != NULL)
		return -EBADMSG;
	return 0;
}
