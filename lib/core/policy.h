/* SPDX-License-Identifier: MIT */
/*
 * policy.h - the policy interface: what each policy implements for the calls,
 * what it offers the read-only tools, and the one descriptor that says all
 * shared code knows of it (internal).
 */
#ifndef CISTERN_POLICY_H
#define CISTERN_POLICY_H

#include "core/handle.h"
#include "cistern/admin.h"

/* Where cistern_get_batch() puts a batch: see its documentation in cistern.h. */
struct cistern_gather {
	char *dst;
	size_t stride;
	size_t *len;
	struct cistern_meta *meta;
};

/* What cistern_put_batch() puts: see its documentation in cistern.h. */
struct cistern_scatter {
	const char *src;
	size_t stride;
	const size_t *len; /* NULL: every sample is stride bytes */
	struct cistern_meta *meta;
};

/* The length of sample i of a scatter. */
static inline size_t cistern__scatter_len(const struct cistern_scatter *s, size_t i)
{
	return s->len ? s->len[i] : s->stride;
}

/*
 * What a policy implements. Every hook returns 0 or a negative errno; the
 * try_* hooks never wait and return -EAGAIN when they would have to, leaving
 * waiting, timeouts and end-of-data detection to api.c.
 */
struct cistern_ops {
	/* Set up slot states in a freshly created segment. */
	void (*init)(struct cistern *c);
	int (*try_reserve)(struct cistern *c, struct cistern_slot *slot);
	int (*commit)(struct cistern *c, struct cistern_slot *slot, size_t len,
		      struct cistern_meta *meta);
	int (*abort)(struct cistern *c, struct cistern_slot *slot);
	int (*try_acquire)(struct cistern *c, struct cistern_sample *s);
	int (*release)(struct cistern *c, struct cistern_sample *s);
	/*
	 * Optional: release n samples, each as release() would, returning the
	 * first error; NULL = release() one by one.
	 */
	int (*release_batch)(struct cistern *c, struct cistern_sample *s, size_t n);
	/* Hand an acquired sample back as if never read (a get whose buffer was too small). */
	int (*unacquire)(struct cistern *c, struct cistern_sample *s);
	/* Optional: pairs (SimPairedReservoir) and batches (reservoirs); NULL = -EINVAL. */
	int (*try_acquire_pair)(struct cistern *c, struct cistern_sample pair[2]);
	int (*try_acquire_batch)(struct cistern *c, struct cistern_sample *out, size_t n);
	/*
	 * Optional: windows of `length` members `step` time steps apart
	 * (SimPairedReservoir; prioritized, by priority, on a segment with a
	 * sweep_size); NULL = -EINVAL. windows_drained() is drained()
	 * for a reader of such windows: reception closed, nothing in flight, no
	 * complete window of that shape left.
	 */
	int (*try_acquire_window)(struct cistern *c, struct cistern_sample *out, size_t length,
				  size_t step);
	bool (*windows_drained)(struct cistern *c, size_t length, size_t step);
	/*
	 * Optional: cistern_get_batch() of n samples in one step, with tmp[n] to
	 * work in; -EAGAIN = take the general path (acquire, copy, release).
	 */
	int (*gather_now)(struct cistern *c, struct cistern_sample *tmp, size_t n,
			  const struct cistern_gather *g);
	/* True when reception is closed and nothing is left to hand out. */
	bool (*drained)(struct cistern *c);
	/* Give back everything attachment `owner` holds; it is dead or detaching. */
	void (*reclaim)(struct cistern *c, uint32_t owner);
	/* Samples held now, given the summed counters. */
	uint64_t (*population)(const struct cistern *c, const struct cistern_stats *st);
};

/* ---- Inspection, gc and snapshots (inspect.c, dump.c, restore.c) ------- */

/*
 * What the read-only tools need from a policy, kept apart from cistern_ops so
 * that the hot-path table stays as it is. Each policy has one (fifo.c;
 * reservoir_snap.c for FIRO and the reservoirs), named by its descriptor
 * (struct cistern__policy, below). A policy without one gets no
 * occupancy in inspect, -ENOTSUP from dump and restore, and a gc that
 * reclaims its dead but cannot say what they held.
 *
 * What else the tools rely on, for every policy:
 *  - cistern_ops.reclaim works for a caller that is not attached (c->owner
 *    is 0, c->me is NULL): cistern_gc() sweeps without taking an entry.
 *  - a reader's reservoir pins are bits of cistern_slotmeta.pins at the
 *    owner's cistern_proc.reader_bit (gc counts the pins a dead reader held).
 *  - slotmeta.sample_id/sim_id/time_step/len/seen describe a held sample;
 *    ids come from ring positions + id_base or from hdr->next_sample_id
 *    (a dump records max(tail + id_base, next_sample_id, max held id + 1)).
 *  - any index a policy keeps besides the slot words (population, a
 *    (sim_id, time_step) table, ...) is rebuilt by .restore from slot metadata.
 */
struct cistern_slot_view {
	enum cistern_slot_class cls; /* CISTERN_SLOT_* (public, cistern.h) */
	uint32_t owner;              /* attachment index + 1 holding it, 0 if none */
};
struct cistern_snap_ops {
	/*
	 * Classify a slot from its state word alone (a pure function: it may be
	 * called on a read-only mapping, on a word that changes right after).
	 * Held samples are CISTERN_SLOT_COMMITTED or CISTERN_SLOT_REDELIVER:
	 * those are what a dump saves. `owner` names the attachment that holds a
	 * RESERVED or ACQUIRED slot, so gc can say what a dead process held.
	 */
	struct cistern_slot_view (*classify)(uint64_t word);
	/*
	 * Make slots 0..n-1 of a freshly created, never used segment (init ran)
	 * hold committed samples: payload, len, sample_id, sim_id, time_step and
	 * seen are already written there, in ascending sample_id order. Set the
	 * state words and whatever index the policy keeps, so that new samples
	 * get ids >= next_id. n <= slot_count. Returns 0 or -errno.
	 */
	int (*restore)(struct cistern *c, uint64_t n, uint64_t next_id);
};

/* ---- The policies ------------------------------------------------------ */

/*
 * Everything the shared code knows of one policy, in one place: each
 * policy's file defines its descriptor, and policy.c lists them all in
 * cistern__policies[]. Shared code asks a descriptor's questions below,
 * never which policy it is.
 */
struct cistern__policy {
	/* As cistern_policy_name() prints it and cistern_policy_parse() reads it. */
	const char *name;
	enum cistern_policy value;
	const struct cistern_ops *ops;
	const struct cistern_snap_ops *snap; /* NULL: see struct cistern_snap_ops */
	/*
	 * What create refuses in a config of this policy (defaults filled in)
	 * beyond the checks every policy shares, as a sentence in the terms of
	 * struct cistern_config; NULL if it takes it. NULL: nothing more.
	 */
	const char *(*config_problem)(const struct cistern_config *cfg);
	/* Entries (uint64_t) of its index after the attachment table; NULL: none. */
	uint64_t (*index_entries)(uint64_t slot_count, uint32_t sweep_size, uint32_t nb_time_steps);
	/* Which of CISTERN_LOSSY, CISTERN_SINGLE_PRODUCER and CISTERN_SINGLE_READER it takes. */
	uint32_t flags;
	/*
	 * Set the handle's put_step and get_step (handle.h), which the caller
	 * set to NULL; NULL: cistern_put() and cistern_get() take the ops.
	 */
	void (*set_steps)(struct cistern *c);
	/*
	 * Its own cistern_get_batch() for a writable handle, n checked, which
	 * waits for a first sample through get_one (cistern_get()); NULL: the
	 * ops' acquire, copy and release (with gather_now if it has one).
	 */
	int (*get_batch)(struct cistern *c, char *buf, size_t stride, size_t n, size_t *len,
			 struct cistern_meta *meta, int timeout_ms, cistern__get_fn *get_one);
	/*
	 * Optional: of a cistern_put_batch() of n samples, put those there is
	 * room for now, stopping before one longer than the stride or a slot:
	 * how many (0: none, the caller waits for the first); -EPIPE if
	 * reception closed while the first was claimed. Called only on a handle
	 * that has a put_step, or that runs its tier's ops (writable, attached),
	 * n and the handle checked.
	 * NULL: cistern_put() of each sample without waiting.
	 */
	ssize_t (*put_batch_now)(struct cistern *c, size_t n, const struct cistern_scatter *s);
	/*
	 * The clean detach of attachment p, which holds no slot: give back
	 * what its entry keeps besides (a reader's pin bit, and the pins of
	 * that bit); the reclaim of anyone else runs ops->reclaim instead.
	 * NULL: nothing.
	 */
	void (*reclaim_idle)(struct cistern *c, struct cistern_proc *p);
	/*
	 * Attachment `owner` waits for the other side no more (it detached,
	 * died, or its call that slept ended): clear what it marked as
	 * waiting (the rate limiter's mark). NULL: nothing.
	 */
	void (*forget)(struct cistern *c, uint32_t owner);
	/*
	 * Make the policy's own state of a handle being set up (c->fixed and
	 * c->policy set, nothing published yet) and set c->pstate to it: 0,
	 * or -ENOMEM with nothing allocated. NULL: the policy keeps none
	 * (c->pstate stays NULL).
	 */
	int (*new_state)(struct cistern *c);
	/*
	 * Free what new_state and the calls allocated in the handle (its
	 * pickers, its pin tables, c->pstate itself), as the handle goes;
	 * NULL: nothing. It may run on a handle whose hooks never ran, and
	 * whose c->pstate is NULL.
	 */
	void (*free_state)(struct cistern *c);
	/*
	 * Its cold tier on disk (docs/protocol/tiers.md); NULL: it refuses
	 * one, saying why in no_tier_why (NULL: that it takes none yet).
	 */
	const struct cistern__tiering *tiering;
	const char *no_tier_why;
	/*
	 * What its tier does its own way (policy/reservoir/tiered.h); NULL:
	 * the tiering's defaults.
	 */
	const struct cistern__tier_rules *tier_rules;
	/* Does it walk the slots in ring order? Else the layout puts each slot's metadata by its payload. */
	bool reads_in_order;
	/* Its rate limiter, where reads_per_put applies; NULL: it has none. */
	const struct cistern__limiter *limiter;
	/* Does every read take exactly batch_size samples? */
	bool reads_whole_batches;
	/* Does it read pairs (x_t, x_t+1), keeping an index of (sim_id, time_step)? */
	bool has_pairs;
	/* Does it evict the oldest sample by ring position (no log of evictable ones)? */
	bool evicts_oldest;
	/* Can a producer evict a sample once read, so that only the unseen are unread? */
	bool evicts_seen;
	/* Does slotmeta.seen count reads (the dead's unreleased ones undone on reclaim)? */
	bool counts_reads;
	/* Do readers share samples by pins, and run each read call in the reader role's bracket? */
	bool readers_pin;
	/* Does it take max_times_sampled (a sample leaves after that many reads: reservoir.c)? */
	bool caps_reads;
	/*
	 * Its draws by priority, which also mean that it takes alpha, beta and
	 * epsilon; NULL: it has none (the calls of cistern_put_prioritized()'s
	 * family refuse the segment).
	 */
	const struct cistern__priorities *prio;
};

/*
 * The cistern_meta.flags a put on policy p keeps (the rest are dropped):
 * CISTERN_META_END_OF_EPISODE for the policies with windows
 * (SimPairedReservoir, prioritized), none for the others. The commit, the
 * dump's format and the restore's check follow it.
 */
static inline uint32_t cistern__kept_flags(const struct cistern__policy *p)
{
	return p && p->ops->try_acquire_window ? CISTERN_META_END_OF_EPISODE : 0;
}

/*
 * A policy's draws by priority (policy/reservoir/prioritized.c), as the
 * public calls of api/prioritized.c make them once their arguments are
 * checked. Priorities given here are finite and >= 0.
 */
struct cistern__priorities {
	/*
	 * Draw up to n samples by priority, each pinned (reception open, with
	 * replacement) or taken (after close), with their ids and weights
	 * (either may be NULL). The count, or -EAGAIN (nothing to draw now;
	 * open: fewer than n), or -errno. Never waits. The caller runs it in
	 * the reader's bracket.
	 */
	int (*draw)(struct cistern *c, struct cistern_sample *out, size_t n, uint64_t *ids,
		    double *weights);
	/*
	 * Draw up to n windows of `length` members `step` time steps apart,
	 * each by its last member's priority, pinned or taken as draw() does:
	 * window j in out[j * length .. (j + 1) * length), that member's id in
	 * ids[j] and the window's weight in weights[j] (either may be NULL).
	 * The count (1 to n, fewer when no more are there now), -EAGAIN (no
	 * complete window now), -EINVAL (a shape or a segment without
	 * windows), or -errno. Never waits; in the reader's bracket.
	 */
	int (*draw_windows)(struct cistern *c, struct cistern_sample *out, size_t n, size_t length,
			    size_t step, uint64_t *ids, double *weights);
	/* Give slot->index_, reserved by this handle, priority q for its commit. */
	int (*set_reserved)(struct cistern *c, const struct cistern_slot *slot, double q);
	/* Apply q[i] to ids[i]: how many applied; the rest are counted as stale. */
	int (*update)(struct cistern *c, const uint64_t *ids, const double *q, size_t n);
	int (*set_beta)(struct cistern *c, double beta);
	void (*info)(const struct cistern *c, struct cistern_prio_info *info);
};

/* A priority a caller may give: finite and >= 0. */
static inline bool cistern__prio_ok(double q)
{
	return q >= 0 && q <= 1.7976931348623157e308; /* NaN fails both */
}

/*
 * A policy's rate limiter (policy/reservoir/rate_limit.c), as the API's
 * checks ask it before a read waits. Shared code calls these through the
 * descriptor only.
 */
struct cistern__limiter {
	/* -EDEADLK if a read of n on the segment f never could start, else 0. */
	int (*refuses)(const struct cistern_fixed *f, uint64_t n);
	/* The largest read it always admits in the end with this reads_per_put and slack. */
	uint64_t (*grant)(double reads_per_put, double slack);
};

/* What inspect shows of a cold tier. */
struct cistern__tier_view {
	uint64_t slots, population, disk_bytes, spilled, cold_reads, cold_evictions;
	/* The I/O of the cold file (tier/cold.h, struct cistern__cold_io). */
	uint64_t bytes_written, bytes_read, write_wait_ns, read_wait_ns;
	/*
	 * A FIFO's staging runs (0 for other tiers): their bytes in the
	 * segment, the groups staged there and not yet written, the groups
	 * being written, and the times a put waited for a group's write.
	 */
	uint64_t stage_bytes, groups_staged, groups_writing, write_waits;
};

/* One cold sample as dump and restore carry it (admin/dump.c, restore.c). */
struct cistern__cold_sample {
	uint64_t id;
	uint32_t len, seen;
	uint64_t slot;    /* its cold slot */
	uint8_t meta[24]; /* the entry's meta (tier/cold.h) */
	const void *data; /* len bytes */
};
/* Called on each cold sample a dump saves: 0 to go on, or an error that stops the walk. */
typedef int (*cistern__cold_fn)(const struct cistern__cold_sample *s, void *arg);
/* The tier's counters a dump saves and a restore gives back. */
struct cistern__tier_counts {
	uint64_t spilled, cold_reads, cold_evictions;
};

/*
 * A policy's cold tier: its ops on a segment with one, and what create,
 * attach, stats, unlink, dump, restore and gc ask of the tier. Shared code
 * calls these through the descriptor only.
 */
struct cistern__tiering {
	const struct cistern_ops *ops;
	/* Bytes of the tier's area after the rest of the segment. */
	uint64_t (*area_bytes)(uint64_t cold_slots, uint64_t procs);
	/* Bytes the tier adds after that area for slots of slot_size; NULL: none. */
	uint64_t (*stage_bytes)(uint64_t cold_slots, uint64_t slot_size);
	/* What is wrong with cfg's cold_slots and cold_dir (cold_slots > 0), or NULL. */
	const char *(*config_problem)(const struct cistern_config *cfg);
	/* Make the cold file of a segment being created (c->fixed set): 0 or -errno, nothing left. */
	int (*create)(struct cistern *c);
	/* Close the handle's cold file and free its side (c->tier). */
	void (*release)(struct cistern *c);
	/* Remove the cold file of segment `name` whose cold_dir is dir: 0 if none is there. */
	int (*unlink)(const char *dir, const char *name);
	void (*view)(const struct cistern *c, struct cistern__tier_view *v);
	/*
	 * Dump: call fn on each whole cold sample of a handle's segment, in
	 * cold slot order, read from the cold file in batches through io_uring
	 * and checked against its CRC. A sample whose entry moved during its
	 * read is left out and counted in *skipped; one whose entry did not move
	 * and whose bytes fail the CRC is -EIO. dead_held (nobody alive is
	 * attached): the samples dead evictors held count too, as their reclaim
	 * leaves them. 0 or the first error.
	 */
	int (*dump)(struct cistern *c, bool dead_held, cistern__cold_fn fn, void *arg,
		    uint64_t *skipped);
	/*
	 * Restore, on the segment being built (its cold file open since
	 * create): put cold sample s into cold slot s->slot; slots come in
	 * ascending order and are written in batches. restore_end writes what
	 * is left, publishes the entries and sets the counters: 0 or -errno.
	 */
	int (*restore_put)(struct cistern *c, const struct cistern__cold_sample *s);
	int (*restore_end)(struct cistern *c, const struct cistern__tier_counts *n);
	/*
	 * Give the cold file of the segment being restored (open since create,
	 * under the temporary name `from`) the segment's final name `to`: its
	 * header first, then the file's name, never over an existing file.
	 */
	int (*rename)(struct cistern *c, const char *dir, const char *from, const char *to);
	/* The counters a dump saves. */
	void (*counts)(const struct cistern *c, struct cistern__tier_counts *n);
	/* gc: the cold samples never seen, counted as a dead reclaim leaves them. */
	uint64_t (*unread)(const struct cistern *c);
};

extern const struct cistern__policy cistern__fifo_policy;
extern const struct cistern__policy cistern__firo_policy;
extern const struct cistern__policy cistern__reservoir_policy;
extern const struct cistern__policy cistern__fifo_evict_policy;
extern const struct cistern__policy cistern__sim_paired_policy;
extern const struct cistern__policy cistern__batch_policy;
extern const struct cistern__policy cistern__prioritized_policy;

/* policy.c: every policy, at its enum cistern_policy value. */
extern const struct cistern__policy *const cistern__policies[CISTERN_POLICY_COUNT];
/* The descriptor of policy `value` (an enum cistern_policy); NULL if there is none. */
const struct cistern__policy *cistern__policy_of(uint32_t value);
/* policy.c: put_step and get_step of a handle as its policy and attachment make them. */
void cistern__set_steps(struct cistern *c);

#endif
