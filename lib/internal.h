/* SPDX-License-Identifier: MIT */
/*
 * internal.h - the process-local handle and the policy interface (internal).
 */
#ifndef CISTERN_INTERNAL_H
#define CISTERN_INTERNAL_H

#include <errno.h>
#include <stdbool.h>

#include <roaring/roaring.h>

#include "segment.h"
#include "rng.h"
#include "slotword.h"

struct cistern;

/*
 * What a policy implements. Every hook returns 0 or a negative errno; the
 * try_* hooks never wait and return -EAGAIN when they would have to, leaving
 * waiting, timeouts and end-of-data detection to api.c.
 */
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

/*
 * A process-local set of candidate slots for uniform random picks (pick.c).
 * The shared slot words are the truth; this is a snapshot of them in a Roaring
 * bitmap, refreshed from the words when it runs dry or goes stale.
 */
struct cistern_picker {
	roaring_bitmap_t *set;
	uint64_t misses;    /* picks from the set that no longer qualified */
	uint64_t uses;      /* picks served since the last refresh */
	uint64_t refreshes; /* full scans done (statistics, tests) */
	/*
	 * A log that the owner merges into the set between refreshes (the
	 * reservoirs' evictable picker: reservoir.c), or NULL. A refresh
	 * notes how far the log went before it scanned: log_pos.
	 */
	const _Atomic uint64_t *log_next;
	uint64_t log_pos;
	bool stale;     /* the owner lost track of the log: refresh next time */
	uint64_t ahead; /* pick.c: the next probe, drawn and prefetched early, + 1; 0: none */
};

/* This handle's extra pins on slots it already pins (pins.c). */
struct cistern_pindups {
	uint32_t *slot;
	uint32_t *count;
	size_t cap;
	size_t used;
};

/*
 * A scratch set of slot indices for one batch (distinct members): open
 * addressing over entries stamped with the batch they belong to, so that a
 * reset is O(1) and a lookup touches one cache line.
 */
struct cistern_scratch_entry {
	uint32_t stamp;
	uint32_t key;
};
struct cistern_scratch {
	struct cistern_scratch_entry *e;
	uint32_t cap;
	uint32_t now;
};

/*
 * A descriptor of a segment that may carry OFD locks, listed so that a fork()
 * child closes its copy (fork.c). It lives where *fd does: in its handle, or
 * on the stack of a call that holds the gc lock by a bare descriptor.
 */
struct cistern__lockfd {
	int *fd;
	struct cistern *handle; /* the handle whose c->fd it is, or NULL */
	struct cistern__lockfd *prev, *next;
	bool listed;
	/* Under the list's mutex: */
	uint32_t entry;       /* the attachment entry it holds, + 1; 0: none */
	uint32_t intent_held; /* the entry whose intent lock a fork took, + 1 */
};

struct cistern {
	struct cistern_hdr *hdr;
	size_t map_size;
	int fd; /* takes the locks; nothing maps it (fork.c) */
	bool readonly;
	bool inherited;                /* a fork() child's copy: every call but detach is -EBADF */
	struct cistern__lockfd lockfd; /* lists fd for fork() children to close */
	uint32_t owner;                /* attachment index + 1; 0 when read-only */
	struct cistern_proc *me;
	const struct cistern_ops *ops;
	char *meta0; /* slot 0's metadata; slot i's is meta_stride * i on */
	char *arena; /* slot 0's payload; slot i's is slot_stride * i on */
	uint64_t meta_stride;
	uint64_t slot_count;
	uint64_t slot_mask; /* slot_count - 1 if a power of two, else 0 */
	uint64_t slot_stride;
	uint64_t slot_size;
	uint64_t id_base; /* FIFO: sample id = ring position + id_base (segment.h) */
	uint32_t role;    /* roles already published in me->role */
	struct cistern_rng rng;
	int pin_bit; /* reservoir pin bit, -1 until first needed */
	struct cistern_pindups dups;
	struct cistern_picker pick_read;  /* samples a reader may take */
	struct cistern_picker pick_evict; /* samples a producer may evict */
	struct cistern_picker pick_empty; /* empty slots */
	uint64_t fill_next; /* reservoir.c: next slot a fill looks at, + 1; 0: unset */
	int64_t next_drain_look_ns; /* reservoir.c: earliest next look at every slot in cistern__rs_drained() */
	int64_t next_fill_look_ns; /* reservoir.c: earliest next look for an empty slot past `filled` */
	struct cistern_scratch scratch;
	bool reserve_polling;      /* FIFO: the last reserve found the ring full */
	bool acquire_polling;      /* FIFO: the last acquire found nothing */
	bool sole_producing;       /* sole.c: this handle holds the producer role */
	bool sole_reading;         /* sole.c: this handle holds the reader role */
	bool auto_producing;       /* sole.c: this handle holds the producer role automatically */
	bool auto_reading;         /* sole.c: this handle holds the reader role automatically */
	bool auto_shared_producer; /* sole.c: counted among several producers */
	bool auto_shared_reader;   /* sole.c: counted among several readers */
	bool auto_read_calls;      /* sole.c: a reservoir reader in the automatic role */
	bool close_fenced;         /* fifo.c: fenced against plain claims after close */
	bool gathering;            /* in cistern_get_batch(): it prefetches payloads */
	bool wide_copies;          /* fifo_copy.c: the one-step put and get copy with AVX2 */
	uint64_t small_fit; /* fifo_copy.c: the longest sample copied inline, min(64, slot_size) */
	/*
	 * cistern__fifo_steps(): what cistern_put() and cistern_get() call for
	 * arguments they checked, so that they decide in one load whether the
	 * FIFO's one step applies. The callee falls back itself.
	 */
	int (*put_step)(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
			int timeout_ms);
	ssize_t (*get_step)(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
			    int timeout_ms);
	bool write_prefetch;       /* the processor has PREFETCHW (cistern__has_prefetchw()) */
	uint32_t put_ahead;        /* fifo.c: how many slots ahead the sole producer prefetches */
	uint64_t put_quiet;        /* fifo.h: puts left before the sole producer prefetches again */
	uint64_t holding;          /* api.c: reservations and acquisitions outstanding */
	uint64_t gets_at_wait;     /* wait.c: our gets count when a wait for data last ended */
	uint64_t cpu_shared_waits; /* wait.c: waits that yielded to a counterpart on our CPU */
	/*
	 * schema.c: the segment's schema, copied out of fixed.schema (the
	 * validated copy) and parsed once at open (NULL and 0 without one), so
	 * that no call reads the shared text again.
	 */
	char *schema;
	struct cistern_field *fields;
	uint32_t nfields;
	uint64_t sample_size;
	/*
	 * The header's immutable part as validated (segment.h): every size,
	 * offset, count and policy parameter the library uses comes from here
	 * (or from the copies above), never from the segment again.
	 */
	struct cistern_fixed fixed;
	struct cistern_proc *procs; /* the attachment table: fixed.procs_count entries */
	_Atomic uint64_t *index;    /* the policy index: fixed.index_count entries */
	int64_t sweep_due_ns;       /* wait.c: when this handle's next sweep for the dead is due */
};

/* v rounded up to a multiple of a, a power of two. */
static inline uint64_t cistern__align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) & ~(a - 1);
}

/* Slot index of ring position pos. */
static inline uint64_t cistern__slot_of(const struct cistern *c, uint64_t pos)
{
	return c->slot_mask ? (pos & c->slot_mask) : (pos % c->slot_count);
}

/* The slot `ahead` places after slot idx in a ring of n (ahead < n). */
static inline uint64_t cistern__slot_ahead(uint64_t idx, uint64_t ahead, uint64_t n)
{
	uint64_t i = idx + ahead;
	return i >= n ? i - n : i;
}

/* The attachment table, fixed.procs_count entries long. */
static inline struct cistern_proc *cistern__procs(const struct cistern *c)
{
	return c->procs;
}

/* The policy index (SimPairedReservoir's), fixed.index_count entries long. */
static inline _Atomic uint64_t *cistern__index(const struct cistern *c)
{
	return c->index;
}

static inline void *cistern__payload(const struct cistern *c, uint64_t index)
{
	return c->arena + index * c->slot_stride;
}

/*
 * Gathering copies samples that sit in random places (cistern_get_batch(),
 * api.c and gather.c): prefetch the first CISTERN_GATHER_AHEAD, then the one
 * CISTERN_GATHER_AHEAD places on while copying each, up to
 * CISTERN_GATHER_LINES cache lines of it (beyond that the hardware prefetcher
 * follows the copy). The distance is the one, of those tried from 0 to 256,
 * that gathered the benchmark's 256-byte samples fastest (its section 4).
 */
#define CISTERN_GATHER_AHEAD 16
#define CISTERN_GATHER_LINES 8

/*
 * A read prefetch of one line that the compiler keeps. With the loop below
 * unrolled, gcc 12 left none of its __builtin_prefetch() calls in the object
 * code of the one-pass gather, which then ran slower, its misses no longer
 * started ahead; an asm statement is not dropped.
 */
static inline void cistern__prefetch_line(const char *p)
{
#if defined(__x86_64__) || defined(__i386__)
	__asm__ volatile("prefetcht0 %0" : : "m"(*p));
#else
	__builtin_prefetch(p, 0, 3);
#endif
}

/*
 * Prefetch the line at p for writing: fetched with ownership, so that the
 * store that follows finds it ready, where a read prefetch (what gcc makes
 * of __builtin_prefetch(p, 1, ...) unless built for a processor with
 * PREFETCHW) brings in a shared copy and the store must then ask for the
 * line a second time, invalidating the other core's copy. `prefetchw` is
 * the handle's write_prefetch: the processor has the instruction.
 */
static inline __attribute__((always_inline)) void cistern__prefetch_for_write(const void *p,
									      bool prefetchw)
{
#if defined(__x86_64__) || defined(__i386__)
	if (prefetchw) {
		__asm__ volatile("prefetchw %0" : : "m"(*(const char *)p));
		return;
	}
#else
	(void)prefetchw;
#endif
	__builtin_prefetch(p, 1, 3);
}

/*
 * `lines` lines from p. Four, the lines of a 256-byte sample, the common
 * case of batched reads, are asked for with no loop to count: a loop of one
 * prefetch a step spends more instructions on its own control than on the
 * prefetches, and a loop of four a step, its bound the length clamped on
 * every call, measured slower than this too.
 */
static inline __attribute__((always_inline)) void cistern__prefetch_lines(const char *p,
									  unsigned lines)
{
	if (lines == 4) {
		cistern__prefetch_line(p);
		cistern__prefetch_line(p + CISTERN_CACHELINE);
		cistern__prefetch_line(p + 2 * CISTERN_CACHELINE);
		cistern__prefetch_line(p + 3 * CISTERN_CACHELINE);
		return;
	}
	for (unsigned l = 0; l < lines; l++)
		cistern__prefetch_line(p + (size_t)l * CISTERN_CACHELINE);
}

/* How many of a payload of len bytes the batched reads prefetch: CISTERN_GATHER_LINES at most. */
static inline unsigned cistern__payload_lines(uint64_t len)
{
	if (len > CISTERN_GATHER_LINES * CISTERN_CACHELINE)
		len = CISTERN_GATHER_LINES * CISTERN_CACHELINE;
	return (unsigned)((len + CISTERN_CACHELINE - 1) / CISTERN_CACHELINE);
}

/* The first CISTERN_GATHER_LINES lines of a sample's payload. */
static inline void cistern__prefetch_payload(const struct cistern_sample *s)
{
	cistern__prefetch_lines(s->data, cistern__payload_lines(s->len));
}

/* Slot i's metadata, from a base and stride a hot loop keeps in locals. */
static inline struct cistern_slotmeta *cistern__slotmeta_in(char *meta0, uint64_t stride,
							    uint64_t i)
{
	return (struct cistern_slotmeta *)(meta0 + i * stride);
}

/* Slot i's metadata (segment.h: in an array, or the line just before its payload). */
static inline struct cistern_slotmeta *cistern__slotmeta(const struct cistern *c, uint64_t i)
{
	return cistern__slotmeta_in(c->meta0, c->meta_stride, i);
}

/* Hand slot `idx`, claimed for ring position (or generation) pos, to a reserver. */
static inline void cistern__set_slot(struct cistern_slot *slot, const struct cistern *c,
				     uint64_t idx, uint64_t pos)
{
	slot->data = cistern__payload(c, idx);
	slot->capacity = c->slot_size;
	slot->pos_ = pos;
	slot->index_ = (uint32_t)idx;
	slot->live_ = 1;
}

/*
 * Owner-only counter bump: only the attachment's own process writes its
 * counters, so a relaxed load and store suffice (no locked instruction); other
 * processes read them with relaxed loads for statistics.
 */
static inline void cistern__count(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_store_explicit(ctr, atomic_load_explicit(ctr, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/*
 * CISTERN_SINGLE_* (sole.c): take the producer or reader role if the segment
 * allows only one holder; 0, -EBUSY while another live handle has it, or
 * -EPROTO (a holder word naming no entry of the table).
 */
int cistern__take_sole(struct cistern *c, uint32_t role);
/* Give back the roles `owner` holds, after its slots were cleaned up. */
void cistern__drop_sole(struct cistern_hdr *h, uint32_t owner);

/*
 * The automatic roles of a segment without the CISTERN_SINGLE_* flags (the
 * producer's under FIFO, the reader's under FIFO and the reservoirs; sole.c):
 * enter the role (take it if nobody acts in it, else be counted, taking it
 * from its holder if there is one); 0, -EBUSY (a holder could not be made to
 * give it up) or -EPROTO (a damaged mode word).
 */
int cistern__enter_auto(struct cistern *c, uint32_t role);
/* Mode word fields (the layout is in sole.c): the holder; one handle counted; revoking. */
#define CISTERN_AUTO_OWNER UINT64_C(0xffff)
#define CISTERN_AUTO_ONE (UINT64_C(1) << 32)
#define CISTERN_AUTO_REVOKING (UINT64_C(1) << 16)
/* The holder found its role taken away (cistern__auto_begin() said no). */
void cistern__auto_lost(struct cistern *c, uint32_t role);
/* A counted handle that is the only one left takes the role; true if it did. */
bool cistern__auto_regain(struct cistern *c, uint32_t role);
/* The owner holding `role` alone (flag or automatic role), or 0 (sole.c). */
uint32_t cistern__lone_holder(const struct cistern *c, uint32_t role);
/* Give back what entry `owner` (p) holds or is counted for, at its reclaim. */
void cistern__leave_auto(struct cistern_hdr *h, struct cistern_proc *p, uint32_t owner);
/*
 * A reservoir reader's bracket around one read call (api.c): while the
 * automatic role holds, the call runs the sole reader's paths (sole_reading
 * is true inside it only). True: the role holds, call cistern__auto_read_end()
 * after the call; false: the call takes the shared paths.
 */
bool cistern__auto_read_begin(struct cistern *c);
void cistern__auto_read_end(struct cistern *c);

/*
 * The automatic holder's bracket around one plain claim (the handshake is
 * described in sole.c). The store of the role bit and the load of the mode
 * word are kept in this order by a compiler fence only: a revoker's
 * membarrier supplies the store-load fence at run time. False if the role
 * was taken away: the caller then owes a cistern__auto_lost() (kept apart
 * so that a claim's fast path makes no call of its own).
 */
static inline bool cistern__auto_try_begin(struct cistern *c, uint32_t role, _Atomic uint64_t *mode)
{
	atomic_store_explicit(&c->me->auto_busy, role, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	if (atomic_load_explicit(mode, memory_order_relaxed) == c->owner)
		return true;
	atomic_store_explicit(&c->me->auto_busy, 0, memory_order_relaxed);
	return false;
}

/* As cistern__auto_try_begin(), and a refusal turns us into a counted handle at once. */
static inline bool cistern__auto_begin(struct cistern *c, uint32_t role, _Atomic uint64_t *mode)
{
	if (cistern__auto_try_begin(c, role, mode))
		return true;
	cistern__auto_lost(c, role);
	return false;
}

/* Release: the claim's plain stores come before a revoker's CAS (sole.c). */
static inline void cistern__auto_end_of(struct cistern_proc *me)
{
	atomic_store_explicit(&me->auto_busy, 0, memory_order_release);
}

static inline void cistern__auto_end(struct cistern *c)
{
	cistern__auto_end_of(c->me);
}

/*
 * api.c: expected producers. A handle taking the producer role becomes a
 * counted producer (unless it already said it is done); a reclaim calls
 * cistern__producer_gone() for every entry it frees, `died` false for an
 * owner's own detach, and counts a counted producer that died before done.
 */
void cistern__count_producer(struct cistern *c);
void cistern__producer_gone(struct cistern *c, struct cistern_proc *p, bool died);

/* Publish that this handle acts as `role`; 0, -EBUSY or -EPROTO (see cistern__take_sole). */
static inline int cistern__add_role(struct cistern *c, uint32_t role)
{
	if (!(c->role & role)) {
		int r = cistern__take_sole(c, role);
		if (r == 0)
			r = cistern__enter_auto(c, role);
		if (r < 0)
			return r;
		c->role |= role;
		atomic_fetch_or_explicit(&c->me->role, role, memory_order_relaxed);
		if (role == CISTERN_ROLE_PRODUCER && c->fixed.expected_producers)
			cistern__count_producer(c);
	}
	return 0;
}

/*
 * Move a ring index (tail or head) from p to p+1 unless someone already did.
 * Anyone may: a process that claimed position p and died before moving the
 * index leaves that to the next one that finds p claimed. seq_cst: ordered
 * with the close and end-of-data checks (fifo.c).
 */
static inline void cistern__help_advance(_Atomic uint64_t *idx, uint64_t p)
{
	atomic_compare_exchange_strong_explicit(idx, &p, p + 1, memory_order_seq_cst,
						memory_order_relaxed);
}

/*
 * The slot of ring position p already serves position p + d (d >= 0): help
 * the index *idx past p, or answer -EPROTO when the word is over a lap ahead
 * of an index that has not moved. No run of a ring's protocol leaves that (a
 * slot reaches position p + n only after p was claimed; a FIFOEvictReservoir
 * removal after close moves a claimed slot one lap on), only damage does, and
 * helping would walk the index for ever. The load is only a value check.
 */
static inline int cistern__help_or_refuse(const struct cistern *c, _Atomic uint64_t *idx,
					  uint64_t p, int64_t d)
{
	if (d > (int64_t)c->slot_count && atomic_load(idx) == p)
		return -EPROTO;
	cistern__help_advance(idx, p);
	return 0;
}

/* Bucket of the seen histogram for a count. */
static inline unsigned cistern__seen_bucket(uint32_t seen)
{
	if (seen <= 4)
		return seen;
	if (seen <= 8)
		return 5;
	if (seen <= 16)
		return 6;
	return 7;
}

/* wait.c */
/*
 * Asymmetric fences (wait.c): a process that registered for global expedited
 * membarriers may publish with a plain release store and check for sleepers
 * with no store-load fence, because every sleeper issues the membarrier,
 * which runs a full barrier on each CPU where such a process runs, between
 * registering itself and re-checking. cistern__light_wakes stays false when
 * the kernel refuses, and every publish then pays for its own fence.
 */
void cistern__register_light_wakes(void);
extern _Atomic bool cistern__light_wakes; /* set by it: this process is registered */

static inline bool cistern__light(void)
{
	return atomic_load_explicit(&cistern__light_wakes, memory_order_relaxed);
}
/*
 * The heavy half: a full barrier on every CPU that runs a registered process,
 * before this returns. False if the kernel refused.
 */
bool cistern__fence_others(void);

/*
 * Publish a slot word that only the caller may change now (an owner's commit
 * or release), as the store half of the wake handshake in wait.c. With light
 * wakes: a release store (payload and metadata written before it are seen by
 * whoever acquires the word) and a compiler-only fence that keeps the
 * following check for sleepers after it in program order; the sleeper's
 * membarrier supplies the store-load ordering at run time. Otherwise a
 * seq_cst exchange: release plus the store-load fence, paid on every call.
 * The exchange is a locked instruction that stalls until the line, usually
 * read by the other side meanwhile, comes back; the store does not.
 */
static inline void cistern__publish_word(_Atomic uint64_t *word, uint64_t w)
{
	if (cistern__light()) {
		atomic_store_explicit(word, w, memory_order_release);
		atomic_signal_fence(memory_order_seq_cst);
	} else {
		atomic_exchange_explicit(word, w, memory_order_seq_cst);
	}
}

/* Bump a futex word and wake its sleepers (the slow half of the wakes below). */
void cistern__wake_futex(_Atomic uint32_t *word);

/*
 * Wake the readers (producers) that sleep, if any: the waker's side of the
 * handshake in wait.c. Inline, so that the common case, nobody asleep, costs
 * one load of a line that stays shared in every cache. seq_cst: pairs with
 * the sleeper's registration.
 */
static inline bool cistern__readers_wait(struct cistern *c)
{
	return atomic_load_explicit(&c->hdr->readers_waiting, memory_order_seq_cst) != 0;
}

static inline bool cistern__producers_wait(struct cistern *c)
{
	return atomic_load_explicit(&c->hdr->producers_waiting, memory_order_seq_cst) != 0;
}

static inline void cistern__wake_readers(struct cistern *c)
{
	if (cistern__readers_wait(c))
		cistern__wake_futex(&c->hdr->data_futex);
}

static inline void cistern__wake_producers(struct cistern *c)
{
	if (cistern__producers_wait(c))
		cistern__wake_futex(&c->hdr->space_futex);
}
void cistern__wake_all(struct cistern_hdr *h);
/* A dead sleeper's registration would make every waker enter the kernel: undo it. */
void cistern__forget_waiter(struct cistern_hdr *h, struct cistern_proc *p);

enum cistern_wait_kind { CISTERN_WAIT_DATA, CISTERN_WAIT_SPACE };
struct cistern_waiter {
	enum cistern_wait_kind kind;
	int timeout_ms;
	bool registered;
	bool fenced; /* the membarrier after registering succeeded */
	bool here;   /* wait.c: what we wait for runs on our CPU */
	uint32_t spins;
	uint32_t pace;  /* wait.c: 0 before the first spin, pauses of a starved
					 * reader's next short round, then CISTERN_SPIN_USUAL */
	uint32_t round; /* wait.c: pauses of a usual round */
	uint32_t seq;
	int64_t start_ns;
	int64_t deadline_ns;
	int64_t next_sweep_ns;
};
void cistern__wait_init(struct cistern_waiter *w, enum cistern_wait_kind kind, int timeout_ms);
/* Called after a failed attempt: 0 means "try again", else -EAGAIN/-ETIMEDOUT. */
int cistern__wait(struct cistern *c, struct cistern_waiter *w);
void cistern__wait_done(struct cistern *c, struct cistern_waiter *w);
int64_t cistern__now_ns(int clock);

/*
 * schema.c: check a schema's text (see there), giving the first `cap` fields,
 * their count, the sample size and the canonical text (out pointers may be
 * NULL); NULL if it is good, else why not, in a per-thread buffer.
 */
const char *cistern__schema_scan(const char *text, struct cistern_field *out, size_t cap,
				 size_t *count, uint64_t *size, char canon[CISTERN_SCHEMA_MAX]);
/* Copy and parse c->fixed.schema into the handle: 0, -ENOMEM or -EPROTO. */
int cistern__schema_load(struct cistern *c);
void cistern__schema_free(struct cistern *c);

/*
 * segment.c: open the existing object of segment `name` for `access`
 * (O_RDONLY or O_RDWR), never waiting and never following a link; anything
 * but a regular file (a FIFO, socket, directory, device or link that anyone
 * may make under the name) is -EPROTO, "not a cistern segment". On success
 * *fd is open and *st is its fstat; on failure *fd is -1 and *st is what
 * lstat saw of the name (all zero if nothing), so that its owner can be told.
 */
struct stat;
int cistern__shm_open_existing(const char *name, int access, int *fd, struct stat *st);
/*
 * 0 if an object owned as *st says may be written by this process: its owner
 * is our effective uid or root, or any_owner is set; else -EACCES. Another
 * user's object under the name could be a trap that collects what we put in.
 */
int cistern__owner_check(const struct stat *st, bool any_owner);
/*
 * segment.c: open and map a segment by name, validated, without attaching.
 * Unless any_owner, an object of another user than us or root is -EACCES
 * (see cistern__owner_check()), before anything of it is read.
 */
int cistern__open_mapped(const char *name, bool readonly, bool any_owner, struct cistern **out);

/*
 * rate_limit.c: the largest read (in samples) that a rate limiter with this
 * reads_per_put and a rate_slack set by hand always admits in the end, and
 * -EDEADLK if a read of n on this segment never could be (0 otherwise).
 */
uint64_t cistern__rate_grant(double reads_per_put, double slack);
int cistern__rate_refuses(const struct cistern_fixed *f, uint64_t n);

/* liveness.c */
int cistern__claim_entry(struct cistern *c);
void cistern__release_entry(struct cistern *c);
/* Reclaim every dead attachment; returns how many were reclaimed. */
int cistern__sweep(struct cistern *c);
/*
 * True while some entry is being reclaimed (by a sweeper or a detaching owner),
 * or is dead and not reclaimed yet: samples may be about to come back for
 * redelivery, so end of data must wait (and sweep again).
 */
bool cistern__reclaim_under_way(struct cistern *c);
/* The same for entry i alone (RECLAIMING, or its intent lock held). */
bool cistern__entry_reclaiming(struct cistern *c, uint32_t i);
/* 1 if attachment index i is held by a live process, 0 if not, <0 on error. */
int cistern__entry_alive(int fd, uint32_t index);
/* Take (hold) or let go of entry index's intent lock by fd, never waiting; 0 or -errno. */
int cistern__hold_intent(int fd, uint32_t index, bool hold);

/* pick.c: uniform picks among slots that satisfy `ok` */
typedef bool (*cistern_qualify_fn)(struct cistern *c, uint64_t index, void *arg);
int cistern__pick(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok, void *arg,
		  uint64_t *out);
void cistern__picker_free(struct cistern_picker *pk);
/*
 * How many random probes cistern__pick() makes before it turns to the
 * snapshot, or 0 when the snapshot says candidates are sparse and it goes
 * there at once. Callers that draw probes themselves (batched reads) use the
 * same rule, so their picks stay what cistern__pick() would make.
 */
uint64_t cistern__pick_probes(const struct cistern *c, const struct cistern_picker *pk);
/* Refresh the snapshot and return its members as a malloc'd array. */
int cistern__snapshot(struct cistern *c, struct cistern_picker *pk, cistern_qualify_fn ok,
		      void *arg, uint32_t **out, uint64_t *count);
/* scratch set: start a batch, then add() returns false for an index already in it */
int cistern__scratch_reset(struct cistern *c, size_t n);

/*
 * The helpers below take the set itself, not the handle: a loop that keeps a
 * copy of the set in a local sees no store through another pointer that
 * could change it (a store to a uint32_t of a sample could, to the compiler).
 */
/*
 * Spreads slot indices over the set's table (Knuth's multiplicative hash,
 * about 2^32 / golden ratio): odd, so indices that differ modulo the table's
 * size land on different entries, and neighbouring indices far apart.
 */
#define CISTERN__SCRATCH_SPREAD 2654435761u

/* Whether index is in the batch's set; if not, *at is where put() would add it. */
static inline bool cistern__scratch_find(const struct cistern_scratch *s, uint32_t index,
					 uint32_t *at)
{
	uint32_t mask = s->cap - 1;
	for (uint32_t h = (index * CISTERN__SCRATCH_SPREAD) & mask;; h = (h + 1) & mask) {
		if (s->e[h].stamp != s->now) {
			*at = h;
			return false;
		}
		if (s->e[h].key == index)
			return true;
	}
}

/* Add index at the place find() gave, with no other put() in between. */
static inline void cistern__scratch_put(struct cistern_scratch *s, uint32_t at, uint32_t index)
{
	s->e[at] = (struct cistern_scratch_entry){s->now, index};
}

/*
 * Take index out of the batch's set. Its entry stays as a tombstone (a key
 * no slot has, slot indices being below CISTERN_SLOT_COUNT_MAX) so that
 * lookups still probe past it.
 */
static inline void cistern__scratch_forget(struct cistern_scratch *s, uint32_t index)
{
	uint32_t mask = s->cap - 1;
	for (uint32_t h = (index * CISTERN__SCRATCH_SPREAD) & mask; s->e[h].stamp == s->now;
	     h = (h + 1) & mask) {
		if (s->e[h].key == index) {
			s->e[h].key = UINT32_MAX;
			return;
		}
	}
}

static inline bool cistern__scratch_add(struct cistern_scratch *s, uint32_t index)
{
	uint32_t at;
	if (cistern__scratch_find(s, index, &at))
		return false;
	cistern__scratch_put(s, at, index);
	return true;
}

/* pins.c */
int cistern__pin_bit(struct cistern *c);
bool cistern__pin_again(struct cistern *c, uint64_t index);
void cistern__pin_undo(struct cistern *c, uint64_t index);
/*
 * A full barrier (store-load included). gcc refuses thread fences under
 * -fsanitize=thread; there a seq_cst RMW on a local stands in, which is a
 * full barrier on x86, where the TSan build runs (TSan checks happens-before,
 * which no fence gives, so it loses nothing by it).
 */
static inline void cistern__full_fence(void)
{
#if defined(__SANITIZE_THREAD__)
	_Atomic int here = 0;
	atomic_fetch_add_explicit(&here, 0, memory_order_seq_cst);
#else
	atomic_thread_fence(memory_order_seq_cst);
#endif
}

/*
 * A store-load barrier between a reader's plain stores (the sole reader's
 * pins and seen counts) and its look at producers_waiting before a wake: with
 * light wakes the sleeper's membarrier supplies it at run time and a
 * compiler-only fence keeps the order in the program; otherwise a seq_cst
 * fence. See wait.c.
 */
static inline void cistern__fence_before_wake(void)
{
	if (cistern__light())
		atomic_signal_fence(memory_order_seq_cst);
	else
		cistern__full_fence();
}

/*
 * The sole reader's pin (CISTERN_SINGLE_READER, sole.c): no other handle
 * writes this slot's pins word while it holds the role (the previous holder's
 * pins were dropped by its reclaim before the role passed on), so a load and
 * a relaxed store set the bit, with no locked instruction. The pin holds only
 * once a seq_cst fence follows the store and the slot word, read after the
 * fence, is still the one seen before (pins.c): cistern__pin() fences each
 * pin, batched reads (reservoir_read.c) fence once for all of theirs.
 * 1: the bit was set now; 0: this handle already pinned the slot (an extra
 * pin, counted locally); -1: no memory to count it.
 */
static inline int cistern__pin_sole_store(struct cistern *c, uint64_t index)
{
	_Atomic uint64_t *pins = &cistern__slotmeta(c, index)->pins;
	uint64_t bit = UINT64_C(1) << c->pin_bit;
	uint64_t old = atomic_load_explicit(pins, memory_order_relaxed);
	if (old & bit)
		return cistern__pin_again(c, index) ? 0 : -1;
	atomic_store_explicit(pins, old | bit, memory_order_relaxed);
	return 1;
}

/*
 * The sole reader's unpin: a release store, so that its reads of the payload
 * are done before an evictor that sees the bit clear (a seq_cst load,
 * acquiring) takes the slot. The caller fences before it wakes producers.
 */
static inline void cistern__unpin_sole_store(struct cistern *c, uint64_t index)
{
	_Atomic uint64_t *pins = &cistern__slotmeta(c, index)->pins;
	uint64_t bit = UINT64_C(1) << c->pin_bit;
	atomic_store_explicit(pins, atomic_load_explicit(pins, memory_order_relaxed) & ~bit,
			      memory_order_release);
}

/*
 * Pin slot `index` for this handle (cistern__pin_bit() done) if its state is
 * held_state; *word gets its word. False: not in that state (or no memory for
 * a repeated pin). The handshake with evictors is described in pins.c; the
 * rare paths live there too. Inline: batched reads pin every member.
 */
static inline bool cistern__pin(struct cistern *c, uint64_t index, unsigned held_state,
				uint64_t *word)
{
	struct cistern_slotmeta *m = cistern__slotmeta(c, index);
	if (c->sole_reading) {
		/* Acquire: the metadata the caller reads next is the sample's. */
		uint64_t before = atomic_load_explicit(&m->word, memory_order_acquire);
		if (sw_state(before) != held_state)
			return false;
		int r = cistern__pin_sole_store(c, index);
		if (r <= 0) {
			*word = before;
			return r == 0;
		}
		/* seq_cst fence, then the look again: the reader's half of the handshake. */
		cistern__full_fence();
		if (atomic_load_explicit(&m->word, memory_order_relaxed) != before) {
			cistern__pin_undo(c, index);
			return false;
		}
		*word = before;
		return true;
	}
	uint64_t bit = UINT64_C(1) << c->pin_bit;
	/* seq_cst, then a seq_cst load: the reader's half of the Dekker handshake (pins.c). */
	uint64_t old = atomic_fetch_or_explicit(&m->pins, bit, memory_order_seq_cst);
	uint64_t w = atomic_load_explicit(&m->word, memory_order_seq_cst);
	if (old & bit) {
		/* Already pinned by this handle, so it cannot have changed under us. */
		if (!cistern__pin_again(c, index))
			return false;
		*word = w;
		return true;
	}
	if (sw_state(w) != held_state) {
		cistern__pin_undo(c, index);
		return false;
	}
	*word = w;
	return true;
}
int cistern__unpin(struct cistern *c, uint64_t index);
/* 0 if this handle pins `index` more than once (one repeat dropped), else 1. */
int cistern__unpin_repeated(struct cistern *c, uint64_t index);
/*
 * cistern__unpin() without waking producers: 1 when the shared pin bit was
 * cleared (the caller owes cistern__wake_producers(), after its last unpin,
 * behind cistern__fence_before_wake() if this handle is the sole reader),
 * 0 when only a repeated pin of this handle was dropped, or -EINVAL.
 */
static inline int cistern__unpin_quiet(struct cistern *c, uint64_t index)
{
	if (c->pin_bit < 0)
		return -EINVAL;
	if (c->dups.used && cistern__unpin_repeated(c, index) == 0)
		return 0;
	uint64_t bit = UINT64_C(1) << c->pin_bit;
	if (c->sole_reading) {
		if (!(atomic_load_explicit(&cistern__slotmeta(c, index)->pins,
					   memory_order_relaxed) &
		      bit))
			return -EINVAL;
		cistern__unpin_sole_store(c, index);
		return 1;
	}
	/* seq_cst: our reads of the payload are done before the slot can be evicted. */
	uint64_t old = atomic_fetch_and_explicit(&cistern__slotmeta(c, index)->pins, ~bit,
						 memory_order_seq_cst);
	return old & bit ? 1 : -EINVAL;
}

/*
 * Count one more read of a sample this handle pins or holds: seen += 1, the
 * old count back. The sole reader is the only writer of seen while it pins
 * (producers set it only on a slot they reserved), so a load and a store do.
 */
static inline uint32_t cistern__seen_add(struct cistern *c, uint64_t index)
{
	_Atomic uint32_t *seen = &cistern__slotmeta(c, index)->seen;
	if (c->sole_reading) {
		uint32_t old = atomic_load_explicit(seen, memory_order_relaxed);
		atomic_store_explicit(seen, old + 1, memory_order_relaxed);
		return old;
	}
	return atomic_fetch_add_explicit(seen, 1, memory_order_relaxed);
}

/* Take back a read counted by cistern__seen_add() (a read given back unread). */
static inline void cistern__seen_sub(struct cistern *c, uint64_t index)
{
	_Atomic uint32_t *seen = &cistern__slotmeta(c, index)->seen;
	if (c->sole_reading)
		atomic_store_explicit(seen, atomic_load_explicit(seen, memory_order_relaxed) - 1,
				      memory_order_relaxed);
	else
		atomic_fetch_sub_explicit(seen, 1, memory_order_relaxed);
}
/*
 * A dead reader's read given back by a reclaim: seen -= 1, but never below 0
 * (the reader may have died before it raised it). True if it was lowered.
 */
static inline bool cistern__seen_take_back(struct cistern_slotmeta *m)
{
	uint32_t seen = atomic_load_explicit(&m->seen, memory_order_relaxed);
	while (seen > 0 &&
	       !atomic_compare_exchange_weak_explicit(&m->seen, &seen, seen - 1,
						      memory_order_relaxed, memory_order_relaxed))
		;
	return seen > 0;
}
void cistern__drop_pins(struct cistern *c, struct cistern_proc *p);
void cistern__pins_free(struct cistern *c);

/* policies */
extern const struct cistern_ops cistern__fifo_ops;
/*
 * fifo_copy.c: set the handle's put_step and get_step: cistern_put() and
 * cistern_get() on a FIFO, in one step when the slot is ready, else through
 * cistern__put_slow()/cistern__get_slow() (api.c: reserve or acquire,
 * waiting as needed), with the copies this processor runs best; NULL for a
 * handle of another policy, a read-only one or one without its attachment.
 */
void cistern__fifo_steps(struct cistern *c);
/*
 * fifo_copy.c: the samples of a cistern_put_batch() on a FIFO there is room
 * for now, stopping before one longer than the stride or a slot: how many
 * (0: none, the caller waits for the first); -EPIPE if reception closed
 * while the first was claimed. The caller checked the handle and n.
 */
ssize_t cistern__fifo_put_now(struct cistern *c, size_t n, const struct cistern_scatter *s);
/* fifo_copy.c: cistern_get_batch() on a FIFO; the caller checked the handle and n. */
int cistern__fifo_get_batch(struct cistern *c, char *buf, size_t stride, size_t n, size_t *len,
			    struct cistern_meta *meta, int timeout_ms);
/* fifo_copy.c: whether this processor runs the one-step put and get compiled for AVX2. */
bool cistern__wide_copies(void);
/* fifo.c: whether this processor has PREFETCHW (see cistern__prefetch_for_write()). */
bool cistern__has_prefetchw(void);
/* fifo.c: how many slots ahead of its claim the sole producer prefetches, for slot_count slots. */
uint32_t cistern__put_ahead(uint64_t slot_count);
int cistern__put_slow(struct cistern *c, const void *buf, size_t len, struct cistern_meta *meta,
		      int timeout_ms);
ssize_t cistern__get_slow(struct cistern *c, void *buf, size_t cap, struct cistern_meta *meta,
			  int timeout_ms);
extern const struct cistern_ops cistern__firo_ops;
extern const struct cistern_ops cistern__reservoir_ops;
extern const struct cistern_ops cistern__fifo_evict_ops;
extern const struct cistern_ops cistern__sim_paired_ops;
extern const struct cistern_ops cistern__batch_ops;
const struct cistern_ops *cistern__ops_for(uint32_t policy);

/* ---- Inspection, gc and snapshots (inspect.c, dump.c, restore.c) ------- */

/*
 * What the read-only tools need from a policy, kept apart from cistern_ops so
 * that the hot-path table stays as it is. Each policy has one (fifo.c;
 * reservoir_snap.c for FIRO and the reservoirs), found through
 * cistern__snap_ops_for() in inspect.c. A policy without one gets no
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
extern const struct cistern_snap_ops cistern__fifo_snap_ops;
/* reservoir_snap.c: FIRO and the four reservoirs */
extern const struct cistern_snap_ops cistern__reservoir_snap_ops;
struct cistern_slot_view cistern__fifo_classify(uint64_t word);
const struct cistern_snap_ops *cistern__snap_ops_for(uint32_t policy);

/*
 * inspect.c, for a segment nobody alive is attached to: whether a slot whose
 * word is `word` holds a sample once the dead are reclaimed (held, acquired
 * by a dead reader, or being evicted by a dead producer), and its seen count
 * then (the reads dead readers never released taken off, as their reclaim
 * does). gc's count of unread samples and its dump share these.
 */
bool cistern__held_once_reclaimed(const struct cistern_snap_ops *so, uint64_t word);
uint32_t cistern__seen_once_reclaimed(const struct cistern *c, const struct cistern_slotmeta *m,
				      uint64_t word, const struct cistern_snap_ops *so);

/*
 * restore.c: the restore-in-progress mark of an object named `name`
 * (cistern_hdr.restore_mark): a tag in the high half, the CRC-32C of the
 * name in the low half, so never 0.
 */
uint64_t cistern__restore_mark(const char *name);
/* Whether the header mapped or copied from object `name` is an unfinished restore's. */
bool cistern__restore_unfinished(const struct cistern_hdr *h, const char *name);

/*
 * fork.c: shm_open(shm, oflag | O_CLOEXEC, mode) into *fd, listed in l so
 * that a fork() child closes it and, if `handle` is set, makes its copy of
 * the handle inherited (cistern__disown()); 0 or -errno. Close it with
 * cistern__lockfd_close(), which closes the descriptor too.
 */
int cistern__lockfd_open(struct cistern__lockfd *l, int *fd, struct cistern *handle,
			 const char *shm, int oflag, mode_t mode);
/*
 * fork.c: cistern__shm_open_existing() (segment.c) into *fd, listed as
 * cistern__lockfd_open() lists its descriptor.
 */
int cistern__lockfd_open_existing(struct cistern__lockfd *l, int *fd, struct cistern *handle,
				  const char *name, int access, struct stat *st);
void cistern__lockfd_close(struct cistern__lockfd *l);
/*
 * fork.c: entry `index` is l's now (claimed, marked ACTIVE): let go of its
 * intent lock under the list's mutex, so that not while a fork is under way.
 */
void cistern__lockfd_claimed(struct cistern__lockfd *l, uint32_t index);
/* fork.c: l's entry is being given up (a detach): forks no longer mark it. */
void cistern__lockfd_released(struct cistern__lockfd *l);
/* segment.c: in a fork() child, make its copy of c refuse every call but detach. */
void cistern__disown(struct cistern *c);

/* liveness.c: sweep, telling `fn` about each dead entry just before reclaiming it. */
typedef void (*cistern__reclaim_observer)(struct cistern *c, uint32_t index, void *arg);
int cistern__sweep_observed(struct cistern *c, cistern__reclaim_observer fn, void *arg);
/* Byte 0 gc lock: shared while attaching, exclusive while deciding to unlink. */
int cistern__gc_lock(int fd, short type, bool wait);

/* crc32c.c: CRC-32C continued from `crc` (0 to start); _soft never uses SSE4.2. */
uint32_t cistern__crc32c(uint32_t crc, const void *buf, size_t len);
uint32_t cistern__crc32c_soft(uint32_t crc, const void *buf, size_t len);

/*
 * dump.c: the dump engine. For the benchmark: CISTERN__DUMP_PLAIN writes with a
 * pwrite() loop, CISTERN__DUMP_BUFFERED keeps io_uring but without O_DIRECT.
 * CISTERN__DUMP_NOREPLACE (gc): an existing file at the path is never
 * replaced, the dump fails with -EEXIST instead. CISTERN__DUMP_DEAD_HELD
 * (gc, on a segment nobody alive is attached to): the samples dead
 * processes held are saved too, as their reclaim would leave them
 * (cistern__held_once_reclaimed()).
 */
enum {
	CISTERN__DUMP_PLAIN = 1u << 0,
	CISTERN__DUMP_BUFFERED = 1u << 1,
	CISTERN__DUMP_NOREPLACE = 1u << 2,
	CISTERN__DUMP_DEAD_HELD = 1u << 3,
};
/* dump_io.c: tests set this to take the paths used where io_uring is unavailable. */
extern bool cistern__no_uring;
int cistern__dump_ex(const char *name, const char *path, unsigned flags,
		     cistern_progress_fn progress, void *arg, struct cistern_dump_info *info);
/* The same from a handle already open on segment `name` (read-only or not; gc's own). */
int cistern__dump_handle(struct cistern *c, const char *name, const char *path, unsigned flags,
			 cistern_progress_fn progress, void *arg, struct cistern_dump_info *info);

#endif
