/* SPDX-License-Identifier: MIT */
/*
 * segment.c - names, layout, header validation, create, attach, detach, unlink.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/open.h"
#include "core/liveness.h"
#include "core/policy.h"
#include "sys/clock.h"
#include "sys/fence.h"
#include "sys/cpu.h"

int cistern_name_valid(const char *name)
{
	if (!name || !name[0])
		return -EINVAL;
	size_t n = strnlen(name, CISTERN_NAME_MAX + 1);
	if (n > CISTERN_NAME_MAX)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < n; i++) {
		char ch = name[i];
		bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			     (ch >= '0' && ch <= '9');
		if (alnum)
			continue;
		/* '.', '_' and '-' are allowed but never first: no "..", no hidden names. */
		if (i > 0 && (ch == '.' || ch == '_' || ch == '-'))
			continue;
		return -EINVAL;
	}
	return 0;
}

int cistern__shm_name(const char *name, char *buf, size_t size)
{
	int r = cistern_name_valid(name);
	if (r < 0)
		return r;
	int n = snprintf(buf, size, "%s%s", CISTERN_SHM_PREFIX, name);
	if (n < 0 || (size_t)n >= size)
		return -ENAMETOOLONG;
	return 0;
}

/* FNV-1a over the sizes and offsets of every shared structure. */
static uint32_t fnv(uint32_t h, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		h ^= (uint8_t)(v >> (8 * i));
		h *= 16777619u;
	}
	return h;
}

uint32_t cistern__layout_signature(void)
{
	uint32_t h = 2166136261u;
	h = fnv(h, sizeof(struct cistern_hdr));
	h = fnv(h, offsetof(struct cistern_hdr, name));
	h = fnv(h, offsetof(struct cistern_hdr, id_base));
	h = fnv(h, offsetof(struct cistern_hdr, index_off));
	h = fnv(h, offsetof(struct cistern_hdr, rl_gets));
	h = fnv(h, offsetof(struct cistern_hdr, rl_stuck));
	h = fnv(h, offsetof(struct cistern_hdr, vacated));
	h = fnv(h, offsetof(struct cistern_hdr, seen_log));
	h = fnv(h, offsetof(struct cistern_hdr, tail));
	h = fnv(h, offsetof(struct cistern_hdr, head));
	h = fnv(h, offsetof(struct cistern_hdr, data_futex));
	h = fnv(h, offsetof(struct cistern_hdr, space_futex));
	h = fnv(h, offsetof(struct cistern_hdr, closed));
	h = fnv(h, offsetof(struct cistern_hdr, producers_died));
	h = fnv(h, offsetof(struct cistern_proc, producing));
	h = fnv(h, offsetof(struct cistern_hdr, counts_unsure));
	h = fnv(h, offsetof(struct cistern_hdr, auto_producer));
	h = fnv(h, offsetof(struct cistern_proc, auto_busy));
	h = fnv(h, offsetof(struct cistern_proc, wait_cpu));
	h = fnv(h, offsetof(struct cistern_hdr, retired));
	h = fnv(h, sizeof(struct cistern_proc));
	h = fnv(h, offsetof(struct cistern_proc, ctr));
	h = fnv(h, sizeof(struct cistern_counters));
	h = fnv(h, sizeof(struct cistern_slotmeta));
	h = fnv(h, offsetof(struct cistern_slotmeta, seen));
	h = fnv(h, CISTERN_SEEN_BUCKETS);
	h = fnv(h, offsetof(struct cistern_hdr, meta_stride));
	h = fnv(h, offsetof(struct cistern_hdr, schema));
	h = fnv(h, CISTERN_SCHEMA_MAX);
	h = fnv(h, offsetof(struct cistern_hdr, restore_mark));
	return h;
}

int cistern__compute_layout(uint32_t policy, uint64_t slot_size, uint64_t slot_count,
			    uint64_t procs, uint64_t index_count, struct cistern_layout *out)
{
	const struct cistern__policy *p = cistern__policy_of(policy);
	if (!p)
		return -EINVAL;
	if (slot_size == 0 || slot_size > CISTERN_SLOT_SIZE_MAX)
		return -EINVAL;
	if (slot_count == 0 || slot_count > CISTERN_SLOT_COUNT_MAX)
		return -EINVAL;
	if (procs == 0 || procs > CISTERN_PROCS_MAX)
		return -EINVAL;
	/* The largest index: the prioritized policy's, 5 entries a slot and a few. */
	if (index_count > 8 * CISTERN_SLOT_COUNT_MAX)
		return -EINVAL;
	/*
	 * Every policy but the FIFO reads slots in random order: there each
	 * slot is its line of metadata followed by its payload, so that the
	 * state word and the first payload bytes of a random sample sit in
	 * adjacent lines of one page, where two separate arrays put them in
	 * two pages (two TLB entries, two unrelated misses); random reads
	 * gained by it where they were measured, never lost.
	 * The FIFO walks both arrays in order, where the prefetchers follow
	 * either; it keeps its metadata in one array, so that creating a ring
	 * writes only that array's pages and not every page of the payloads.
	 * The limits keep every product below 2^64: (2^30 + 64) * 2^28 < 2^59.
	 */
	bool interleave = !p->reads_in_order;
	uint64_t payload = cistern__align_up(slot_size, CISTERN_CACHELINE);
	uint64_t stride = payload + (interleave ? sizeof(struct cistern_slotmeta) : 0);
	if (payload * slot_count > CISTERN_ARENA_MAX)
		return -EINVAL;
	uint64_t off = cistern__align_up(sizeof(struct cistern_hdr), CISTERN_CACHELINE);
	out->slot_stride = stride;
	out->meta_stride = interleave ? stride : sizeof(struct cistern_slotmeta);
	out->procs_off = off;
	off += procs * sizeof(struct cistern_proc);
	if (!interleave) {
		out->meta_off = off;
		off += slot_count * sizeof(struct cistern_slotmeta);
	}
	out->index_off = off;
	off += index_count * sizeof(uint64_t);
	/* The slots start on a page. */
	off = cistern__align_up(off, 4096);
	if (interleave) {
		out->meta_off = off;
		off += sizeof(struct cistern_slotmeta);
	}
	out->arena_off = off;
	off += stride * slot_count;
	out->total_size = cistern__align_up(off, 4096);
	return 0;
}

/* Entries of the policy's index (struct cistern__policy). */
static uint64_t index_entries(const struct cistern__policy *p, uint64_t slot_count,
			      uint32_t sweep_size, uint32_t nb_time_steps)
{
	return p->index_entries ? p->index_entries(slot_count, sweep_size, nb_time_steps) : 0;
}

/* Bytes of the cold tier's area of a segment of policy p (tiers.md); 0 without one. */
static uint64_t tier_bytes(const struct cistern__policy *p, uint64_t cold_slots, uint64_t procs,
			   uint64_t slot_size)
{
	if (!cold_slots || !p || !p->tiering)
		return 0;
	const struct cistern__tiering *t = p->tiering;
	return t->area_bytes(cold_slots, procs) +
	       (t->stage_bytes ? t->stage_bytes(cold_slots, slot_size) : 0);
}

/* What is wrong with a config's cold tier (defaults filled in), or NULL. */
static const char *tier_problem(const struct cistern__policy *p, const struct cistern_config *cfg)
{
	static _Thread_local char why[160];
	bool dir = cfg->cold_dir && cfg->cold_dir[0];
	if (cfg->cold_slots == 0)
		return dir ? "cold_dir needs cold_slots above 0" : NULL;
	if (!dir)
		return "cold_slots needs a cold_dir";
	if (strlen(cfg->cold_dir) > CISTERN_COLD_DIR_MAX)
		return "cold_dir is longer than CISTERN_COLD_DIR_MAX (255 bytes)";
	if (cfg->cold_slots > CISTERN_SLOT_COUNT_MAX)
		return "cold_slots is above CISTERN_SLOT_COUNT_MAX (2^28)";
	if (!p->tiering && p->no_tier_why)
		return p->no_tier_why;
	if (!p->tiering) {
		snprintf(why, sizeof(why),
			 "%s takes no cold tier yet: fifo, reservoir, batch-reservoir, firo and "
			 "fifo-evict-reservoir take one "
			 "(docs/protocol/tiers.md)",
			 p->name);
		return why;
	}
	return p->tiering->config_problem(cfg);
}

static int check_config(const struct cistern_config *cfg);
static void config_of(const struct cistern_fixed *f, struct cistern_config *cfg);

void cistern__fixed_of(const struct cistern_hdr *h, struct cistern_fixed *f)
{
	memset(f, 0, sizeof(*f));
	f->total_size = h->total_size;
	f->slot_size = h->slot_size;
	f->slot_count = h->slot_count;
	f->slot_stride = h->slot_stride;
	f->meta_stride = h->meta_stride;
	f->procs_off = h->procs_off;
	f->procs_count = h->procs_count;
	f->meta_off = h->meta_off;
	f->index_off = h->index_off;
	f->index_count = h->index_count;
	f->arena_off = h->arena_off;
	f->policy = h->policy;
	f->flags = h->flags;
	f->watermark = h->watermark;
	f->pseudo_epochs = h->pseudo_epochs;
	f->sweep_size = h->sweep_size;
	f->nb_time_steps = h->nb_time_steps;
	f->batch_size = h->batch_size;
	f->max_times_sampled = h->max_times_sampled;
	f->seed = h->seed;
	f->expected_producers = h->expected_producers;
	f->mode = h->mode;
	f->reads_per_put = h->reads_per_put;
	f->rate_slack = h->rate_slack;
	f->alpha = h->alpha;
	f->beta = h->beta;
	f->epsilon = h->epsilon;
	f->created_ns = h->created_ns;
	f->creator_pid = h->creator_pid;
	f->creator_uid = h->creator_uid;
	memcpy(f->name, h->name, sizeof(f->name));
	memcpy(f->schema, h->schema, sizeof(f->schema));
	f->cold_slots = h->cold_slots;
	f->cold_nonce = h->cold_nonce;
	memcpy(f->cold_dir, h->cold_dir, sizeof(f->cold_dir));
	f->cold_off = h->total_size - tier_bytes(cistern__policy_of(h->policy), h->cold_slots,
						 h->procs_count, h->slot_size);
}

/* Write the immutable fields of *f into a header being created. */
static void header_of(const struct cistern_fixed *f, struct cistern_hdr *h)
{
	h->total_size = f->total_size;
	h->slot_size = f->slot_size;
	h->slot_count = f->slot_count;
	h->slot_stride = f->slot_stride;
	h->meta_stride = f->meta_stride;
	h->procs_off = f->procs_off;
	h->procs_count = f->procs_count;
	h->meta_off = f->meta_off;
	h->index_off = f->index_off;
	h->index_count = f->index_count;
	h->arena_off = f->arena_off;
	h->policy = f->policy;
	h->flags = f->flags;
	h->watermark = f->watermark;
	h->pseudo_epochs = f->pseudo_epochs;
	h->sweep_size = f->sweep_size;
	h->nb_time_steps = f->nb_time_steps;
	h->batch_size = f->batch_size;
	h->max_times_sampled = f->max_times_sampled;
	h->seed = f->seed;
	h->expected_producers = f->expected_producers;
	h->mode = f->mode;
	h->reads_per_put = f->reads_per_put;
	h->rate_slack = f->rate_slack;
	h->alpha = f->alpha;
	h->beta = f->beta;
	h->epsilon = f->epsilon;
	h->created_ns = f->created_ns;
	h->creator_pid = f->creator_pid;
	h->creator_uid = f->creator_uid;
	memcpy(h->name, f->name, sizeof(h->name));
	memcpy(h->schema, f->schema, sizeof(h->schema));
	h->cold_slots = f->cold_slots;
	h->cold_nonce = f->cold_nonce;
	memcpy(h->cold_dir, f->cold_dir, sizeof(h->cold_dir));
}

int cistern__validate_header(const void *buf, size_t len, uint64_t file_size)
{
	static const char zero[8];
	const struct cistern_hdr *h = buf;

	if (len < sizeof(*h) || file_size < sizeof(*h))
		return file_size == 0 ? -EAGAIN : -EPROTO;
	/* [hdr-magic] read on a copy made after the attacher's own mmap. */
	if (memcmp(h->magic, zero, sizeof(zero)) == 0)
		return -EAGAIN;
	if (memcmp(h->magic, CISTERN_MAGIC, sizeof(h->magic)) != 0)
		return -EPROTO;
	if (h->abi_version != CISTERN_ABI_VERSION || h->layout_sig != cistern__layout_signature())
		return -EPROTONOSUPPORT;
	const struct cistern__policy *p = cistern__policy_of(h->policy);
	if (!p)
		return -EPROTO;
	struct cistern_layout l;
	/* Before a policy sizes its index from it: a count no create makes is refused here. */
	if (h->slot_count == 0 || h->slot_count > CISTERN_SLOT_COUNT_MAX)
		return -EPROTO;
	if (h->index_count != index_entries(p, h->slot_count, h->sweep_size, h->nb_time_steps))
		return -EPROTO;
	if (cistern__compute_layout(h->policy, h->slot_size, h->slot_count, h->procs_count,
				    h->index_count, &l) < 0)
		return -EPROTO;
	if (l.slot_stride != h->slot_stride || l.meta_stride != h->meta_stride ||
	    l.procs_off != h->procs_off || l.meta_off != h->meta_off ||
	    l.index_off != h->index_off || l.arena_off != h->arena_off ||
	    h->cold_slots > CISTERN_SLOT_COUNT_MAX || (h->cold_slots && !p->tiering) ||
	    l.total_size + tier_bytes(p, h->cold_slots, h->procs_count, h->slot_size) !=
		    h->total_size)
		return -EPROTO;
	if (memchr(h->cold_dir, '\0', sizeof(h->cold_dir)) == NULL)
		return -EPROTO;
	if (h->total_size > file_size)
		return -EPROTO;
	if (memchr(h->name, '\0', sizeof(h->name)) == NULL)
		return -EPROTO;
	/* config_of() hands the schema to check_config(), which parses it. */
	if (memchr(h->schema, '\0', sizeof(h->schema)) == NULL)
		return -EPROTO;
	if (h->watermark > h->slot_count || h->pseudo_epochs == 0)
		return -EPROTO;
	/*
	 * The policy parameters must be ones create would have accepted: the
	 * policies index their tables with them (batch_size <= slot_count, ...).
	 */
	struct cistern_fixed f;
	struct cistern_config cfg;
	cistern__fixed_of(h, &f);
	config_of(&f, &cfg);
	if (check_config(&cfg) < 0)
		return -EPROTO;
	return 0;
}

/* The one sentence about a schema larger than the slots, in a per-thread buffer. */
static const char *schema_too_big(uint64_t size, uint64_t slot_size)
{
	static _Thread_local char why[128];
	snprintf(why, sizeof(why), "schema needs %llu bytes a sample, more than slot_size (%llu)",
		 (unsigned long long)size, (unsigned long long)slot_size);
	return why;
}

/*
 * What is wrong with a config whose defaults are filled in, as a sentence in
 * the terms of struct cistern_config; NULL if create would take it. One
 * list, so that create, attach (a header must hold a config create would
 * have taken) and cistern_config_problem() cannot drift apart.
 */
static const char *config_problem(const struct cistern_config *cfg)
{
	const uint32_t sole = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER;
	if (cfg->flags & ~(uint32_t)(CISTERN_LOSSY | sole | CISTERN_DEAD_PRODUCER_DONE))
		return "flags has bits other than CISTERN_LOSSY, CISTERN_SINGLE_PRODUCER, "
		       "CISTERN_SINGLE_READER and CISTERN_DEAD_PRODUCER_DONE";
	if ((cfg->flags & CISTERN_DEAD_PRODUCER_DONE) && cfg->expected_producers == 0)
		return "CISTERN_DEAD_PRODUCER_DONE needs expected_producers above 0";
	const struct cistern__policy *p = cistern__policy_of((uint32_t)cfg->policy);
	if (!p)
		return "unknown policy";
	if (cfg->mode & ~07777u)
		return "mode has bits other than permission bits (07777)";
	if (cfg->slot_size > CISTERN_SLOT_SIZE_MAX)
		return "slot_size is above CISTERN_SLOT_SIZE_MAX (1 GiB)";
	if (cfg->slot_count > CISTERN_SLOT_COUNT_MAX)
		return "slot_count is above CISTERN_SLOT_COUNT_MAX (2^28)";
	if (cfg->max_procs > CISTERN_PROCS_MAX)
		return "max_procs is above CISTERN_PROCS_MAX (1024)";
	if (cistern__align_up(cfg->slot_size, CISTERN_CACHELINE) * cfg->slot_count >
	    CISTERN_ARENA_MAX)
		return "slot_count slots of slot_size bytes exceed CISTERN_ARENA_MAX (64 GiB)";
	if (cfg->watermark > cfg->slot_count)
		return "watermark is above slot_count";
	/* NaN fails both comparisons. */
	if (!(cfg->reads_per_put >= 0 && cfg->reads_per_put <= 1e9))
		return "reads_per_put must be a number from 0 to 1e9";
	if (!(cfg->rate_slack >= 0 && cfg->rate_slack <= 1e18))
		return "rate_slack must be a number from 0 to 1e18";
	/* NaN fails every comparison: these read "is not 0". */
	if ((cfg->alpha != 0 || cfg->beta != 0 || cfg->epsilon != 0) && !p->prio)
		return "alpha, beta and epsilon apply to the prioritized policy only";
	if (cfg->reads_per_put > 0 && !p->limiter)
		return "reads_per_put applies to the reservoir policies only";
	/*
	 * Once full, such a buffer takes a put only in place of a sample that
	 * was read, and a read makes at most one sample read: fewer reads than
	 * puts can never be kept up (docs/POLICIES.md, "Rate limiter").
	 */
	if (cfg->reads_per_put > 0 && cfg->reads_per_put < 1 && p->evicts_seen &&
	    !(cfg->flags & CISTERN_LOSSY))
		return "reads_per_put must be 0 (off) or at least 1 for this policy: once the "
		       "buffer is full a put must evict a sample that was read, and a read "
		       "makes at most one sample read, so fewer reads than puts would stop "
		       "the puts (only a CISTERN_LOSSY FIFOEvictReservoir takes less than 1)";
	if (cfg->max_times_sampled && !p->caps_reads)
		return "max_times_sampled applies to the reservoir kinds only: FIFO reads each "
		       "sample once and FIRO pseudo_epochs times";
	if (cfg->max_times_sampled && cfg->cold_slots)
		return "max_times_sampled does not combine with cold_slots: cold samples have no "
		       "read count";
	/* A put yields at most max_times_sampled reads: a higher ratio would hold every put back. */
	if (cfg->max_times_sampled && cfg->reads_per_put > cfg->max_times_sampled)
		return "reads_per_put is above max_times_sampled: each sample gives at most "
		       "max_times_sampled reads, so the limiter could never keep that ratio";
	const char *why = p->config_problem ? p->config_problem(cfg) : NULL;
	if (why)
		return why;
	why = tier_problem(p, cfg);
	if (why)
		return why;
	/* The sentences name the policies whose descriptors take each flag. */
	if ((cfg->flags & CISTERN_LOSSY) && !(p->flags & CISTERN_LOSSY))
		return "CISTERN_LOSSY applies to FIFOEvictReservoir only";
	/* One producer: the FIFO's claims. One reader: the FIFO's, and the reservoirs' pins. */
	if ((cfg->flags & CISTERN_SINGLE_PRODUCER) && !(p->flags & CISTERN_SINGLE_PRODUCER))
		return "CISTERN_SINGLE_PRODUCER applies to the FIFO only";
	if ((cfg->flags & CISTERN_SINGLE_READER) && !(p->flags & CISTERN_SINGLE_READER))
		return "CISTERN_SINGLE_READER does not apply to FIRO";
	if (cfg->schema) {
		uint64_t size;
		why = cistern__schema_scan(cfg->schema, NULL, 0, NULL, &size, NULL);
		if (why)
			return why;
		if (size > cfg->slot_size)
			return schema_too_big(size, cfg->slot_size);
	}
	return NULL;
}

static int check_config(const struct cistern_config *cfg)
{
	return config_problem(cfg) ? -EINVAL : 0;
}

/* Fill defaults into a copy of the user's config. */
static void fill_defaults(struct cistern_config *cfg)
{
	/* "" is no schema, as NULL is. */
	if (cfg->schema && !cfg->schema[0])
		cfg->schema = NULL;
	if (cfg->cold_dir && !cfg->cold_dir[0])
		cfg->cold_dir = NULL;
	/* A schema's segment holds its samples by default (a bad schema is judged later). */
	uint64_t sample = 0;
	if (!cfg->slot_size && cfg->schema &&
	    !cistern__schema_scan(cfg->schema, NULL, 0, NULL, &sample, NULL) && sample)
		cfg->slot_size = sample;
	if (!cfg->slot_size)
		cfg->slot_size = CISTERN_DEFAULT_SLOT_SIZE;
	if (!cfg->slot_count)
		cfg->slot_count = CISTERN_DEFAULT_SLOT_COUNT;
	if (!cfg->mode)
		cfg->mode = 0600;
	if (!cfg->pseudo_epochs)
		cfg->pseudo_epochs = 1;
	if (!cfg->max_procs)
		cfg->max_procs = CISTERN_DEFAULT_MAX_PROCS;
	if (!cfg->seed)
		cfg->seed = (uint64_t)cistern__now_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 32);
}

/*
 * A second open of the object open on fd, through its name: a description of
 * its own, to map the object by while fd takes the locks (fork.c says why).
 * The descriptor, or -errno; -ESTALE if the name now names another object.
 */
static int open_again(const char *shm, int fd, int oflag)
{
	int m = shm_open(shm, oflag | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0);
	if (m < 0)
		return -errno;
	struct stat a, b;
	int r = 0;
	if (fstat(fd, &a) < 0 || fstat(m, &b) < 0)
		r = -errno;
	else if (a.st_dev != b.st_dev || a.st_ino != b.st_ino)
		r = -ESTALE;
	if (r < 0) {
		close(m);
		return r;
	}
	return m;
}

/*
 * Everything the handle derives from c->fixed (set by the caller, validated),
 * and the policy's own state of it (new_state): 0, or -ENOMEM with nothing
 * of the policy's allocated. Runs before the handle publishes anything.
 */
static int handle_setup(struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	char *base = (char *)c->hdr;
	c->procs = (struct cistern_proc *)(base + f->procs_off);
	c->index = (_Atomic uint64_t *)(base + f->index_off);
	c->meta0 = base + f->meta_off;
	c->meta_stride = f->meta_stride;
	c->arena = base + f->arena_off;
	c->slot_count = f->slot_count;
	c->slot_mask = (f->slot_count & (f->slot_count - 1)) == 0 ? f->slot_count - 1 : 0;
	if (f->slot_count == 1)
		c->slot_mask = 0; /* pos % 1 == 0; a mask of 0 would mean "use %" anyway */
	c->slot_stride = f->slot_stride;
	c->slot_size = f->slot_size;
	c->put_len_min = 0; /* cistern__schema_load() narrows both to a schema's size */
	c->put_len_span = f->slot_size;
	c->policy = cistern__policy_of(f->policy);
	/* A segment with a cold tier runs its policy's tiered ops. */
	c->ops = f->cold_slots && c->policy->tiering ? c->policy->tiering->ops : c->policy->ops;
	c->wide_copies = cistern__wide_copies();
	c->write_prefetch = cistern__has_prefetchw();
	/* Before the handle can publish anything (see cistern__publish_word). */
	cistern__register_light_wakes();
	return c->policy->new_state ? c->policy->new_state(c) : 0;
}

static void proc_name(char out[16])
{
	memset(out, 0, 16);
	FILE *f = fopen("/proc/self/comm", "re");
	if (!f)
		return;
	if (fgets(out, 16, f)) {
		char *nl = strchr(out, '\n');
		if (nl)
			*nl = '\0';
	}
	fclose(f);
}

/* 2^64 / golden ratio, odd: the attachments' seeds differ, each from the next in many bits. */
#define SEED_STRIDE UINT64_C(0x9e3779b97f4a7c15)

/* Map, claim an attachment entry and seed the generator. */
static int finish_attach(struct cistern *c, bool producer)
{
	int r = cistern__claim_entry(c, producer);
	if (r < 0)
		return r;
	c->me->pid = (uint32_t)getpid();
	c->me->uid = (uint32_t)getuid();
	c->me->attached_ns = (uint64_t)cistern__now_ns(CLOCK_REALTIME);
	proc_name(c->me->comm);
	uint64_t seed = c->fixed.seed + SEED_STRIDE * c->owner;
	cistern__rng_seed(&c->rng, seed);
	cistern__set_steps(c);
	return 0;
}

const char *cistern_config_problem(const struct cistern_config *ucfg)
{
	struct cistern_config cfg = {0};
	if (ucfg)
		cfg = *ucfg;
	fill_defaults(&cfg);
	return config_problem(&cfg);
}

int cistern_create(const char *name, const struct cistern_config *ucfg, struct cistern **out)
{
	char shm[96];
	struct cistern_config cfg = {0};
	struct cistern_layout l;
	int r;

	if (!out)
		return -EINVAL;
	*out = NULL;
	r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	if (ucfg)
		cfg = *ucfg;
	fill_defaults(&cfg);
	r = check_config(&cfg);
	if (r < 0)
		return r;
	uint64_t index_count = index_entries(cistern__policy_of((uint32_t)cfg.policy),
					     cfg.slot_count, cfg.sweep_size, cfg.nb_time_steps);
	r = cistern__compute_layout(cfg.policy, cfg.slot_size, cfg.slot_count, cfg.max_procs,
				    index_count, &l);
	if (r < 0)
		return r;
	/* The cold tier's area follows everything else (tier/tiered.h). */
	uint64_t cold_off = l.total_size;
	const struct cistern__policy *cp = cistern__policy_of((uint32_t)cfg.policy);
	l.total_size += tier_bytes(cp, cfg.cold_slots, cfg.max_procs, cfg.slot_size);

	struct cistern *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	/*
	 * Two opens of the object (fork.c): c->fd takes the locks, the other
	 * makes the mapping. Owner read-write until the second open is made,
	 * whatever the umask and the mode asked for.
	 */
	r = cistern__lockfd_open(&c->lockfd, &c->fd, c, shm, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (r < 0) {
		free(c);
		return r;
	}
	int fd = c->fd;
	bool named = true; /* the name is still ours to unlink on failure */
	int mfd = -1;
	if (fchmod(fd, 0600) < 0) {
		r = -errno;
		goto fail_unlink;
	}
	mfd = open_again(shm, fd, O_RDWR);
	if (mfd < 0) {
		/* -ESTALE: someone removed our name and made another object under it. */
		r = mfd == -ESTALE ? -EEXIST : mfd;
		named = mfd != -ESTALE;
		goto fail_unlink;
	}
	/* shm_open's mode is masked by the umask; the segment's mode is what was asked. */
	if (fchmod(fd, cfg.mode & 0777) < 0 || ftruncate(fd, (off_t)l.total_size) < 0) {
		r = -errno;
		goto fail_unlink;
	}
	/* Allocate the memory now: a full /dev/shm is an error here, not a SIGBUS later. */
	r = posix_fallocate(fd, 0, (off_t)l.total_size);
	if (r != 0 && r != EOPNOTSUPP) {
		r = -r;
		goto fail_unlink;
	}
	void *p = mmap(NULL, l.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED) {
		r = -errno;
		goto fail_unlink;
	}
	close(mfd);
	mfd = -1;
	/*
	 * The handle's copy of the immutable part comes from the config, not
	 * from the header it is written to: the object is open to others of
	 * its mode already, and what we read back could be theirs.
	 */
	struct cistern_fixed *f = &c->fixed;
	f->total_size = l.total_size;
	f->slot_size = cfg.slot_size;
	f->slot_count = cfg.slot_count;
	f->slot_stride = l.slot_stride;
	f->meta_stride = l.meta_stride;
	f->procs_off = l.procs_off;
	f->procs_count = cfg.max_procs;
	f->meta_off = l.meta_off;
	f->index_off = l.index_off;
	f->index_count = index_count;
	f->arena_off = l.arena_off;
	f->policy = cfg.policy;
	f->flags = cfg.flags;
	f->watermark = cfg.watermark;
	f->pseudo_epochs = cfg.pseudo_epochs;
	f->sweep_size = cfg.sweep_size;
	f->nb_time_steps = cfg.nb_time_steps;
	f->batch_size = cfg.batch_size;
	f->max_times_sampled = cfg.max_times_sampled;
	f->seed = cfg.seed;
	f->expected_producers = cfg.expected_producers;
	f->mode = cfg.mode;
	f->reads_per_put = cfg.reads_per_put;
	f->rate_slack = cfg.rate_slack;
	f->alpha = cfg.alpha;
	f->beta = cfg.beta;
	f->epsilon = cfg.epsilon;
	f->created_ns = (uint64_t)cistern__now_ns(CLOCK_REALTIME);
	f->creator_pid = (uint32_t)getpid();
	f->creator_uid = (uint32_t)getuid();
	snprintf(f->name, sizeof(f->name), "%s", name);
	/* check_config() parsed it: it fits, canonical or not. */
	if (cfg.schema)
		cistern__schema_scan(cfg.schema, NULL, 0, NULL, NULL, f->schema);
	f->cold_slots = cfg.cold_slots;
	f->cold_off = cold_off;
	if (cfg.cold_dir)
		snprintf(f->cold_dir, sizeof(f->cold_dir), "%s", cfg.cold_dir);
	/* Tells this segment's cold file from one of an earlier segment of the name. */
	f->cold_nonce = f->created_ns ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)c;
	struct cistern_hdr *h = p;
	/* ftruncate zero-filled everything; set the immutable part. */
	h->abi_version = CISTERN_ABI_VERSION;
	h->layout_sig = cistern__layout_signature();
	header_of(f, h);
	c->hdr = h;
	c->map_size = l.total_size;
	c->fd = fd;
	r = handle_setup(c);
	if (r < 0) {
		munmap(p, l.total_size);
		goto fail_unlink;
	}
	c->ops->init(c);
	if (f->cold_slots && (r = cp->tiering->create(c)) < 0) {
		munmap(p, l.total_size);
		if (cp->free_state)
			cp->free_state(c);
		goto fail_unlink;
	}
	/*
	 * [hdr-magic] Publish the magic last, with release order: an attacher that reads the
	 * magic (after its own mapping, through the page cache) sees a complete
	 * header. Attachers treat an all-zero magic as "still being created".
	 */
	atomic_thread_fence(memory_order_release);
	memcpy(h->magic, CISTERN_MAGIC, sizeof(h->magic));
	r = cistern__schema_load(c);
	if (r == 0)
		r = finish_attach(c, false);
	if (r < 0) {
		cistern__schema_free(c);
		munmap(p, l.total_size);
		if (c->tier) {
			cp->tiering->unlink(f->cold_dir, f->name);
			cp->tiering->release(c);
		}
		if (cp->free_state)
			cp->free_state(c);
		goto fail_unlink;
	}
	*out = c;
	return 0;

fail_unlink:
	if (named)
		shm_unlink(shm);
	if (mfd >= 0)
		close(mfd);
	cistern__lockfd_close(&c->lockfd);
	free(c);
	return r;
}

int cistern__shm_open_existing(const char *name, int access, int *fdp, struct stat *st)
{
	char shm[96], path[128];
	*fdp = -1;
	memset(st, 0, sizeof(*st));
	int r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), CISTERN_SHM_DIR "%s", shm);
	/* Look before opening: a device is never opened, whatever opening it would do. */
	if (lstat(path, st) == 0 && !S_ISREG(st->st_mode))
		return -EPROTO;
	/*
	 * O_NONBLOCK: a FIFO put there after the look must not keep us waiting
	 * for a writer. O_NOFOLLOW (shm_open adds it too): a link is refused,
	 * never followed. O_NOCTTY: a terminal does not become ours.
	 */
	int fd = shm_open(shm, access | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		/* A socket (ENXIO), a link (ELOOP), a directory (EISDIR) put there meanwhile. */
		struct stat now;
		if (lstat(path, &now) == 0) {
			*st = now;
			if (!S_ISREG(now.st_mode))
				return -EPROTO;
		}
		return r;
	}
	if (fstat(fd, st) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return -EPROTO;
	}
	/* A regular file: let the descriptor behave as a plain one again. */
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
		r = -errno;
		close(fd);
		return r;
	}
	*fdp = fd;
	return 0;
}

int cistern__owner_check(const struct stat *st, bool any_owner)
{
	if (any_owner)
		return 0;
	uid_t me = geteuid();
	return st->st_uid == me || st->st_uid == 0 ? 0 : -EACCES;
}

/*
 * Map the object open on fd, whose header copy validated, through a second
 * open of shm, and check the mapping: 0 and *map, or -errno (-ESTALE if the
 * name no longer names that object).
 */
static int map_validated(const char *shm, int fd, bool readonly, const struct cistern_hdr *copy,
			 void **map)
{
	int mfd = open_again(shm, fd, readonly ? O_RDONLY : O_RDWR);
	if (mfd < 0)
		return mfd;
	void *p = mmap(NULL, copy->total_size, PROT_READ | (readonly ? 0 : PROT_WRITE), MAP_SHARED,
		       mfd, 0);
	int r = p == MAP_FAILED ? -errno : 0;
	close(mfd); /* the mapping keeps the object open */
	if (r < 0)
		return r;
	/*
	 * Touching a page past the end of the object raises SIGBUS: make sure it
	 * was not shrunk between the check and the mapping. The mapping must also
	 * say what the validated copy said (no swap in between).
	 */
	struct stat st;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < copy->total_size ||
	    memcmp(p, copy, offsetof(struct cistern_hdr, tail)) != 0) {
		munmap(p, copy->total_size);
		return -EPROTO;
	}
	*map = p;
	return 0;
}

/*
 * Whether only we could shrink the object fstat() described as *st: it is
 * ours, and its mode lets nobody else write it (an ACL that lets another
 * user write shows in the group bits, its mask). Root could too, but root
 * is trusted here as everywhere (docs/protocol/trust.md).
 */
static bool ours_alone(const struct stat *st)
{
	return st->st_uid == geteuid() && !(st->st_mode & 022);
}

/*
 * The private copy a copied handle reads instead of the object: the header
 * and the attachment table where the object has them, then the metadata
 * lines of the slots packed one after another (the payloads are never
 * copied, so the lines that lie among them need not be spread out as in the
 * object). Where the tables end, and the whole copy's size.
 */
static uint64_t copy_tables_end(uint64_t procs_off, uint64_t procs_count)
{
	return cistern__align_up(procs_off + procs_count * sizeof(struct cistern_proc),
				 CISTERN_CACHELINE);
}

static uint64_t copy_size(uint64_t procs_off, uint64_t procs_count, uint64_t slot_count)
{
	return copy_tables_end(procs_off, procs_count) +
	       slot_count * sizeof(struct cistern_slotmeta);
}

/* Anonymous and without reserve: what is not filled reads as zeros, and costs nothing. */
static void *copy_area(uint64_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

/*
 * Open, check, validate and map the object of segment `name` (shm) for c, once:
 * 0 with c->hdr mapped and *copy the validated header, or -errno (-ESTALE: the
 * name changed between our two opens, try again). Read-only, an object
 * someone else may shrink (or any, with copy_always) is not mapped: c->hdr
 * is then an empty copy area, which the caller fills (c->copied).
 */
static int open_once(struct cistern *c, const char *name, const char *shm, bool readonly,
		     bool any_owner, bool copy_always, struct cistern_hdr *copy)
{
	struct stat st;
	int r = cistern__lockfd_open_existing(&c->lockfd, &c->fd, c, name,
					      readonly ? O_RDONLY : O_RDWR, &st);
	if (r < 0)
		return r;
	int fd = c->fd;
	/* Before anything is read: another user's object is refused as it is. */
	r = cistern__owner_check(&st, any_owner);
	if (r < 0)
		goto fail;
	/* Validate a private copy of the header before mapping anything. */
	for (int tries = 0;; tries++) {
		if (fstat(fd, &st) < 0) {
			r = -errno;
			goto fail;
		}
		memset(copy, 0, sizeof(*copy));
		ssize_t got = pread(fd, copy, sizeof(*copy), 0);
		if (got < 0) {
			r = -errno;
			goto fail;
		}
		r = cistern__validate_header(copy, (size_t)got, (uint64_t)st.st_size);
		/* A creator is between shm_open and publishing the magic: give it a moment. */
		if (r != -EAGAIN || tries >= 100)
			break;
		struct timespec ts = {0, 10 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (r < 0)
		goto fail;
	void *p;
	if (readonly && (copy_always || !ours_alone(&st))) {
		/*
		 * Its owner may shrink it at any moment, and every access to a
		 * mapping of a lost page raises SIGBUS in us: read it by pread(),
		 * which answers a short count instead.
		 */
		uint64_t size = copy_size(copy->procs_off, copy->procs_count, copy->slot_count);
		p = copy_area(size);
		if (!p) {
			r = -ENOMEM;
			goto fail;
		}
		c->copied = true;
		c->hdr = p;
		c->map_size = size;
		return 0;
	}
	r = map_validated(shm, fd, readonly, copy, &p);
	if (r < 0)
		goto fail;
	c->hdr = p;
	c->map_size = copy->total_size;
	return 0;
fail:
	cistern__lockfd_close(&c->lockfd);
	return r;
}

int cistern__pread_all(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len > 0) {
		ssize_t got = pread(fd, p, len, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -EPROTO; /* shorter than its layout: shrunk, or damaged */
		p += got;
		off += (uint64_t)got;
		len -= (size_t)got;
	}
	return 0;
}

/* Slots whose lines one read brings in, at most: 1 MiB of the object at a time. */
#define COPY_CHUNK (UINT64_C(1) << 20)

/*
 * The metadata lines of the slots, each read into its place in the packed
 * copy. The FIFO's lie in one array in the object too: one read. Elsewhere
 * each slot's line sits before its payload: small slots are read a chunk of
 * whole slots at a time through a buffer (far fewer calls), larger ones
 * line by line.
 */
static int refresh_lines(const struct cistern *c)
{
	const struct cistern_fixed *f = &c->fixed;
	const uint64_t line = sizeof(struct cistern_slotmeta);
	if (f->meta_stride == line)
		return cistern__pread_all(c->fd, c->meta0, (size_t)(f->slot_count * line),
					  f->meta_off);
	int r = 0;
	if (f->slot_stride > 4096) {
		for (uint64_t i = 0; i < f->slot_count && r == 0; i++)
			r = cistern__pread_all(c->fd, cistern__slotmeta(c, i), (size_t)line,
					       f->meta_off + i * f->meta_stride);
		return r;
	}
	uint64_t per = COPY_CHUNK / f->slot_stride;
	char *buf = malloc((size_t)(per * f->slot_stride));
	if (!buf)
		return -ENOMEM;
	for (uint64_t i = 0; i < f->slot_count && r == 0; i += per) {
		uint64_t n = f->slot_count - i < per ? f->slot_count - i : per;
		/* The last slot's payload is not needed: its line ends the read. */
		r = cistern__pread_all(c->fd, buf, (size_t)((n - 1) * f->slot_stride + line),
				       f->meta_off + i * f->meta_stride);
		for (uint64_t k = 0; k < n && r == 0; k++)
			memcpy(cistern__slotmeta(c, i + k), buf + k * f->slot_stride, (size_t)line);
	}
	free(buf);
	return r;
}

int cistern__refresh(const struct cistern *c, unsigned parts)
{
	if (!c->copied)
		return 0;
	const struct cistern_fixed *f = &c->fixed;
	int r = 0;
	/*
	 * The header and the attachment table lie together at the start. The
	 * policy index is left out: only the calls of attached handles read it.
	 */
	if (parts & CISTERN__COPY_TABLES)
		r = cistern__pread_all(
			c->fd, c->hdr,
			(size_t)(f->procs_off + f->procs_count * sizeof(struct cistern_proc)), 0);
	if (r == 0 && (parts & CISTERN__COPY_SLOTS))
		r = refresh_lines(c);
	return r;
}

/*
 * Open segment `name` (see cistern__open_mapped() and cistern__open_view()):
 * a copied handle is filled with `parts` (and the tables) before it is handed out.
 */
static int open_handle(const char *name, bool readonly, bool any_owner, unsigned parts,
		       bool copy_always, struct cistern **out)
{
	char shm[96];
	int r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	struct cistern *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	struct cistern_hdr copy;
	/* The name changing between our two opens takes a remove or a restore each time. */
	for (int tries = 0;
	     (r = open_once(c, name, shm, readonly, any_owner, copy_always, &copy)) == -ESTALE &&
	     tries < 8;
	     tries++)
		;
	if (r < 0) {
		free(c);
		return r == -ESTALE ? -EAGAIN : r;
	}
	c->readonly = readonly;
	/* What was validated, not what the mapping says now (segment.h). */
	cistern__fixed_of(&copy, &c->fixed);
	c->id_base = copy.id_base;
	r = handle_setup(c);
	if (r < 0) {
		munmap(c->hdr, c->map_size);
		cistern__lockfd_close(&c->lockfd);
		free(c);
		return r;
	}
	if (c->copied) {
		/*
		 * The packed copy (copy_size()): lines one after another, and
		 * neither payloads nor the index, which no read-only call reads
		 * (a dump reads payloads from the object itself).
		 */
		c->meta0 = (char *)c->hdr +
			   copy_tables_end(c->fixed.procs_off, c->fixed.procs_count);
		c->meta_stride = sizeof(struct cistern_slotmeta);
		c->arena = NULL;
		c->index = NULL;
	}
	r = cistern__refresh(c, CISTERN__COPY_TABLES | parts);
	/* The copy must say what the validated header said (no swap in between). */
	if (r == 0 && c->copied && memcmp(c->hdr, &copy, offsetof(struct cistern_hdr, tail)) != 0)
		r = -EPROTO;
	if (r == 0)
		r = cistern__schema_load(c);
	if (r < 0) {
		if (c->policy->free_state)
			c->policy->free_state(c);
		munmap(c->hdr, c->map_size);
		cistern__lockfd_close(&c->lockfd);
		free(c);
		return r;
	}
	*out = c;
	return 0;
}

int cistern__open_mapped(const char *name, bool readonly, bool any_owner, struct cistern **out)
{
	return open_handle(name, readonly, any_owner, CISTERN__COPY_SLOTS, false, out);
}

int cistern__open_view(const char *name, unsigned parts, bool always, struct cistern **out)
{
	return open_handle(name, true, true, parts, always, out);
}

static void unmap_free(struct cistern *c)
{
	if (c->policy && c->policy->free_state)
		c->policy->free_state(c);
	cistern__schema_free(c);
	if (c->tier && c->policy && c->policy->tiering)
		c->policy->tiering->release(c);
	munmap(c->hdr, c->map_size);
	cistern__lockfd_close(&c->lockfd);
	free(c);
}

void cistern__disown(struct cistern *c)
{
	/*
	 * Stores only (the fork child handler calls this). Without an owner
	 * the calls that move samples answer -EBADF (api.c: writable()), and
	 * without steps cistern_put() and cistern_get() get there too.
	 */
	c->inherited = true;
	c->readonly = true;
	c->owner = 0;
	c->me = NULL;
	c->put_step = NULL;
	c->get_step = NULL;
}

int cistern_attach(const char *name, struct cistern **out)
{
	return cistern_attach_flags(name, 0, out);
}

int cistern_attach_flags(const char *name, uint32_t flags, struct cistern **out)
{
	if (!out)
		return -EINVAL;
	*out = NULL;
	if (flags & ~(uint32_t)(CISTERN_ATTACH_ANY_OWNER | CISTERN_ATTACH_POPULATE |
				CISTERN_ATTACH_PRODUCER))
		return -EINVAL;
	struct cistern *c;
	int r = cistern__open_mapped(name, false, flags & CISTERN_ATTACH_ANY_OWNER, &c);
	if (r < 0)
		return r;
	/*
	 * Hold the gc lock shared while joining: cistern_remove() and cistern_gc()
	 * take it exclusively around "nobody lives here" + unlink, so either they
	 * see our entry, or we see the name gone (st_nlink 0) and give up.
	 */
	r = cistern__gc_lock(c->fd, F_RDLCK, true);
	if (r == 0)
		r = finish_attach(c, flags & CISTERN_ATTACH_PRODUCER);
	if (r == 0) {
		struct stat st;
		if (fstat(c->fd, &st) < 0)
			r = -errno;
		else if (st.st_nlink == 0)
			r = -ENOENT;
		if (r < 0)
			cistern__release_entry(c);
	}
	cistern__gc_lock(c->fd, F_UNLCK, false);
	if (r < 0) {
		unmap_free(c);
		return r;
	}
	/* Recover what crashed processes left behind before joining. */
	cistern__sweep(c);
	/*
	 * A hint: the object's pages exist (create allocated them), so this
	 * only fills our page tables; a kernel without it leaves them to faults.
	 */
	if (flags & CISTERN_ATTACH_POPULATE)
		(void)madvise(c->hdr, c->map_size, MADV_POPULATE_WRITE);
	*out = c;
	return 0;
}

int cistern_detach(struct cistern *c)
{
	if (!c)
		return -EINVAL;
	/* A fork() child's copy: the attachment and all it holds are the parent's. */
	if (c->inherited) {
		unmap_free(c);
		return 0;
	}
	/*
	 * If someone shrank the object under us, the slots and the attachment
	 * table may be gone and touching them would raise SIGBUS: just let go.
	 * Closing the descriptor drops our liveness lock, so whoever still
	 * sees the table takes our entry for a dead one and reclaims it.
	 */
	struct stat st;
	bool intact = fstat(c->fd, &st) == 0 && (uint64_t)st.st_size >= c->map_size;
	if (c->owner && intact)
		cistern__release_entry(c);
	unmap_free(c);
	return 0;
}

/*
 * The cold directory of segment `name` from its header, into dir ("" if it
 * has no tier or its header cannot be read and checked).
 */
static const struct cistern__policy *cold_dir_of(const char *shm,
						 char dir[CISTERN_COLD_DIR_MAX + 1])
{
	const struct cistern__policy *p = NULL;
	dir[0] = '\0';
	int fd = shm_open(shm, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		return NULL;
	struct cistern_hdr *h = malloc(sizeof(*h));
	struct stat st;
	if (h && fstat(fd, &st) == 0 && pread(fd, h, sizeof(*h), 0) == (ssize_t)sizeof(*h) &&
	    cistern__validate_header(h, sizeof(*h), (uint64_t)st.st_size) == 0 && h->cold_slots) {
		memcpy(dir, h->cold_dir, CISTERN_COLD_DIR_MAX + 1);
		p = cistern__policy_of(h->policy);
	}
	free(h);
	close(fd);
	return p && p->tiering ? p : NULL;
}

int cistern_unlink(const char *name)
{
	char shm[96], dir[CISTERN_COLD_DIR_MAX + 1];
	int r = cistern__shm_name(name, shm, sizeof(shm));
	if (r < 0)
		return r;
	const struct cistern__policy *p = cold_dir_of(shm, dir);
	/* The segment first, then its cold file (docs/protocol/tiers.md says why). */
	if (shm_unlink(shm) < 0)
		return -errno;
	return p ? p->tiering->unlink(dir, name) : 0;
}

int cistern_config_get(const struct cistern *c, struct cistern_config *cfg)
{
	if (!c || !cfg)
		return -EINVAL;
	if (c->inherited)
		return -EBADF;
	config_of(&c->fixed, cfg);
	/* The handle's parsed copy: it lives as long as the handle does. */
	cfg->schema = c->schema;
	return 0;
}

static void config_of(const struct cistern_fixed *f, struct cistern_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->slot_size = f->slot_size;
	cfg->slot_count = f->slot_count;
	cfg->policy = (enum cistern_policy)f->policy;
	cfg->mode = f->mode;
	cfg->watermark = f->watermark;
	cfg->pseudo_epochs = f->pseudo_epochs;
	cfg->sweep_size = f->sweep_size;
	cfg->nb_time_steps = f->nb_time_steps;
	cfg->batch_size = f->batch_size;
	cfg->max_times_sampled = f->max_times_sampled;
	cfg->seed = f->seed;
	cfg->max_procs = (uint32_t)f->procs_count;
	cfg->expected_producers = f->expected_producers;
	cfg->flags = f->flags;
	cfg->reads_per_put = f->reads_per_put;
	cfg->rate_slack = f->rate_slack;
	cfg->alpha = f->alpha;
	cfg->beta = f->beta;
	cfg->epsilon = f->epsilon;
	/* Only on a copy whose schema is NUL-terminated (validated, or our own). */
	cfg->schema = f->schema[0] ? f->schema : NULL;
	cfg->cold_slots = f->cold_slots;
	cfg->cold_dir = f->cold_dir[0] ? f->cold_dir : NULL;
}
