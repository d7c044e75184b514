/* SPDX-License-Identifier: MIT */
/*
 * fifo64.c - sections 1 and 2: producers and readers in separate processes move
 * 64-byte samples, copied in and out, through cistern and through the peers.
 */
#include "bench.h"
#include "peer_boost.h"

#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ck_ring.h>
#include <rte_ring.h>
#include <zmq.h>

#include <cistern.h>

#include "core/prefetch.h"
#include "core/policy.h"
#include "sys/cpu.h"
#include "sys/crc32c.h" /* cistern__prefetch_for_write(), as the library's producer uses it */

#define QCAP 1024 /* capacity of every queue, in samples, where it can be chosen */
/*
 * Samples a reader takes per call in the rows that read in batches (cistern's
 * get_batch, rte_ring's dequeue_burst); each is then checked one by one from
 * the reader's own array, as every other row checks what it receives.
 */
#define READ_BURST 32
/* The batched no-library ring publishes its indices once per this many samples. */
#define BARE_BATCH 16
#define STR_(x) #x
#define STR(x) STR_(x)

struct s64 {
	unsigned char b[BENCH_MSG];
};
CK_RING_PROTOTYPE(s64, s64)

enum kind {
	K_CIS_SOLE,
	K_CIS,
	K_CIS_FENCED,
	K_CIS_SPIN,
	K_CIS_BATCH,
	K_CIS_BATCHES,
	K_CK,
	K_RTE,
	K_RTE_RTS,
	K_RTE_BURST,
	K_RTE_BURSTS,
	K_PIPE,
	K_MQ,
	K_BOOST,
	K_ZMQ,
	K_BARE,
	K_BARE_STORES,
	K_BARE_ROUNDS,
	K_BARE_PREFETCH,
	K_BARE_BATCHED,
	K_COUNT
};

struct f64 {
	enum kind kind;
	struct run_ctl *c;
	int oversub;
	char name[96];
	struct cistern *ph; /* parent's cistern handle */
	void *mem;          /* ck_ring / rte_ring mapping */
	size_t memlen;
	int pfd[2]; /* pipe */
	mqd_t mq;
	long mq_cap;
	void *bq; /* parent's boost queue */
	char zep[BENCH_MAX_PROCS][108];
};

static const char *kind_label(enum kind k, int mpmc, long mq_cap)
{
	static char buf[96];
	switch (k) {
	case K_CIS_SOLE:
		return "cistern FIFO put/get (blocking, SINGLE_PRODUCER + SINGLE_READER)";
	case K_CIS:
		return "cistern FIFO put/get (blocking)";
	case K_CIS_FENCED:
		return "cistern FIFO put/get (blocking, CISTERN_FENCED_WAKES=1)";
	case K_CIS_SPIN:
		return "cistern FIFO put/get (timeout 0 + retry)";
	case K_CIS_BATCH:
		return "cistern FIFO put/get_batch of up to " STR(
			READ_BURST) " (blocking, both flags)";
	case K_CIS_BATCHES:
		return "cistern FIFO put_batch/get_batch of up to " STR(
			READ_BURST) " (blocking, both flags)";
	case K_CK:
		return mpmc ? "ck_ring MPMC (shared mmap)" : "ck_ring SPSC (shared mmap)";
	case K_RTE:
		return mpmc ? "DPDK rte_ring MP/MC (shared mmap)"
			    : "DPDK rte_ring SP/SC (shared mmap)";
	case K_RTE_RTS:
		return "DPDK rte_ring MP/MC RTS (shared mmap)";
	case K_RTE_BURST:
		return "DPDK rte_ring SP/SC, dequeue_burst of up to " STR(
			READ_BURST) " (shared mmap)";
	case K_RTE_BURSTS:
		return "DPDK rte_ring SP/SC, enqueue_burst/dequeue_burst of up to " STR(
			READ_BURST) " (shared mmap)";
	case K_PIPE:
		return "pipe";
	case K_MQ:
		snprintf(buf, sizeof buf, "POSIX mq (mq_maxmsg %ld)", mq_cap);
		return buf;
	case K_BOOST:
		return "Boost.Interprocess message_queue";
	case K_ZMQ:
		return "ZeroMQ ipc PUSH/PULL";
	case K_BARE:
		return "no-library ring: a sequence word per slot (shared mmap, pause spin)";
	case K_BARE_STORES:
		return "the same + 16 stores per sample by the producer to its own memory";
	case K_BARE_ROUNDS:
		return "no-library ring, the reader looking again after " STR(
			BARE_ROUND_PAUSES) " pauses";
	case K_BARE_PREFETCH:
		return "the same, the producer prefetching for writing " STR(
			BARE_PUT_AHEAD) " slots ahead";
	case K_BARE_BATCHED:
		return "no-library ring, indices published per " STR(
			BARE_BATCH) " samples (not a queue)";
	default:
		return "?";
	}
}

static inline void waitspin(int oversub)
{
	if (oversub)
		sched_yield();
	else
		cpu_relax();
}

static inline int all_produced(struct run_ctl *c)
{
	return atomic_load_explicit(&c->producers_done, memory_order_acquire) == c->nprod;
}

/* ---- generic loops, inlined into each transport --------------------------------- */

typedef int (*send_fn)(void *h, const void *msg);
/* 1 = a sample, 0 = end of data (time it), 2 = end seen late (do not time it), <0 = -errno */
typedef int (*recv_fn)(void *h, void *msg);

static inline __attribute__((always_inline)) int produce(struct f64 *f, int idx, void *h,
							 send_fn send)
{
	_Alignas(64) unsigned char msg[BENCH_MSG];
	uint64_t n = f->c->per_producer;
	ctl_child_ready(f->c);
	for (uint64_t s = 0; s < n; s++) {
		msg_fill(msg, make_tag(idx, s));
		int rc = send(h, msg);
		if (rc < 0) {
			ctl_error(f->c, idx, "send: %s", strerror(-rc));
			return 1;
		}
	}
	atomic_fetch_add_explicit(&f->c->producers_done, 1, memory_order_release);
	return 0;
}

static inline __attribute__((always_inline)) int consume(struct f64 *f, int idx, void *h,
							 recv_fn recv)
{
	_Alignas(64) unsigned char msg[BENCH_MSG];
	struct rd_res *r = &f->c->rd[idx];
	uint64_t count = 0, sum = 0, bad = 0, last[BENCH_MAX_PROCS];
	int rc;

	for (int i = 0; i < BENCH_MAX_PROCS; i++)
		last[i] = UINT64_MAX;
	ctl_child_ready(f->c);
	for (;;) {
		rc = recv(h, msg);
		if (rc != 1)
			break;
		uint64_t tag;
		if (msg_check(msg, &tag)) {
			bad++;
			continue;
		}
		uint64_t p = (tag >> 40) - 1, seq = tag & ((UINT64_C(1) << 40) - 1);
		if (p >= BENCH_MAX_PROCS) {
			bad++;
			continue;
		}
		if (last[p] != UINT64_MAX && seq <= last[p])
			bad++; /* out of order for its producer */
		last[p] = seq;
		count++;
		sum += tag;
		if ((count & 15) == 0)
			atomic_store_explicit(&r->progress, count, memory_order_relaxed);
	}
	uint64_t t = now_ns();
	r->count = count;
	r->tagsum = sum;
	r->bad = bad;
	r->t_end = rc == 0 ? t : 0;
	if (rc < 0) {
		ctl_error(f->c, BENCH_MAX_PROCS + idx, "receive: %s", strerror(-rc));
		return 1;
	}
	return 0;
}

/* ---- cistern -------------------------------------------------------------------- */

static int cis_send(void *h, const void *msg)
{
	return cistern_put(h, msg, BENCH_MSG, NULL, -1);
}

static int cis_recv(void *h, void *msg)
{
	struct cistern_meta m;
	ssize_t n = cistern_get(h, msg, BENCH_MSG, &m, -1);
	if (n == BENCH_MSG)
		return 1;
	if (n == CISTERN_EOD)
		return 0;
	return n < 0 ? (int)n : -EBADMSG;
}

/* A reader's array of samples taken in one call, handed to consume() one at a time. */
struct burst {
	struct s64 buf[READ_BURST];
	unsigned have, next;
};

struct batch_h {
	struct cistern *c;
	struct burst b;
};

static int cis_recv_batch(void *h, void *msg)
{
	struct batch_h *k = h;
	if (k->b.next == k->b.have) {
		int n = cistern_get_batch(k->c, k->b.buf, BENCH_MSG, READ_BURST, NULL, NULL, -1);
		if (n == CISTERN_EOD)
			return 0;
		if (n < 0)
			return n;
		k->b.have = (unsigned)n;
		k->b.next = 0;
	}
	memcpy(msg, &k->b.buf[k->b.next++], BENCH_MSG);
	return 1;
}

/*
 * A producer that puts its samples in batches of READ_BURST (and its last,
 * shorter one): each sample waits in the producer's array until the batch
 * is full, as in a producer that makes its samples a batch at a time.
 */
struct send_batch_h {
	struct run_ctl *ctl;
	uint64_t sent;
	struct burst b;
	int (*flush)(void *h, struct send_batch_h *k);
	void *h;
};

static int send_batched(void *h, const void *msg)
{
	struct send_batch_h *k = h;
	memcpy(&k->b.buf[k->b.have++], msg, BENCH_MSG);
	if (++k->sent == k->ctl->per_producer || k->b.have == READ_BURST) {
		int rc = k->flush(k->h, k);
		k->b.have = 0;
		return rc;
	}
	return 0;
}

static int cis_flush(void *h, struct send_batch_h *k)
{
	for (unsigned off = 0; off < k->b.have;) {
		int n = cistern_put_batch(h, &k->b.buf[off], BENCH_MSG, k->b.have - off, NULL, NULL,
					  -1);
		if (n < 0)
			return n;
		off += (unsigned)n;
	}
	return 0;
}

struct spin_h {
	struct cistern *c;
	int oversub;
};

static int cis_send_spin(void *h, const void *msg)
{
	struct spin_h *s = h;
	for (;;) {
		int rc = cistern_put(s->c, msg, BENCH_MSG, NULL, 0);
		if (rc != -EAGAIN)
			return rc;
		waitspin(s->oversub);
	}
}

static int cis_recv_spin(void *h, void *msg)
{
	struct spin_h *s = h;
	struct cistern_meta m;
	for (;;) {
		ssize_t n = cistern_get(s->c, msg, BENCH_MSG, &m, 0);
		if (n == BENCH_MSG)
			return 1;
		if (n == CISTERN_EOD)
			return 0;
		if (n != -EAGAIN)
			return n < 0 ? (int)n : -EBADMSG;
		waitspin(s->oversub);
	}
}

static int cis_child(struct f64 *f, int role, int idx)
{
	struct cistern *c;
	if (f->kind == K_CIS_FENCED)
		setenv("CISTERN_FENCED_WAKES", "1", 1); /* read when the handle is made */
	int rc = cistern_attach(f->name, &c), ret;
	if (rc < 0) {
		ctl_error(f->c, role == 'p' ? idx : BENCH_MAX_PROCS + idx, "cistern_attach: %s",
			  cistern_strerror(rc));
		return 1;
	}
	struct spin_h sh = {c, f->oversub};
	static struct batch_h bh; /* a child's own copy after fork */
	static struct send_batch_h pb;
	bh.c = c;
	pb = (struct send_batch_h){.ctl = f->c, .flush = cis_flush, .h = c};
	if (role == 'p') {
		ret = f->kind == K_CIS_SPIN      ? produce(f, idx, &sh, cis_send_spin)
		      : f->kind == K_CIS_BATCHES ? produce(f, idx, &pb, send_batched)
						 : produce(f, idx, c, cis_send);
		if (ret == 0 && (rc = cistern_producer_done(c)) < 0) {
			ctl_error(f->c, idx, "cistern_producer_done: %s", cistern_strerror(rc));
			ret = 1;
		}
	} else {
		ret = f->kind == K_CIS_SPIN ? consume(f, idx, &sh, cis_recv_spin)
		      : f->kind == K_CIS_BATCH || f->kind == K_CIS_BATCHES
			      ? consume(f, idx, &bh, cis_recv_batch)
			      : consume(f, idx, c, cis_recv);
	}
	cistern_detach(c);
	return ret;
}

/* ---- ck_ring ---------------------------------------------------------------------- */

struct ck_shared {
	struct ck_ring ring;
	_Alignas(64) struct s64 buf[QCAP];
};

struct ck_h {
	struct ck_shared *s;
	struct run_ctl *c;
	int oversub;
};

static int ck_send_spsc(void *h, const void *msg)
{
	struct ck_h *k = h;
	while (!ck_ring_enqueue_spsc_s64(&k->s->ring, k->s->buf, (struct s64 *)(uintptr_t)msg))
		waitspin(k->oversub);
	return 0;
}

static int ck_recv_spsc(void *h, void *msg)
{
	struct ck_h *k = h;
	for (;;) {
		if (ck_ring_dequeue_spsc_s64(&k->s->ring, k->s->buf, msg))
			return 1;
		if (all_produced(k->c))
			return ck_ring_dequeue_spsc_s64(&k->s->ring, k->s->buf, msg) ? 1 : 0;
		waitspin(k->oversub);
	}
}

static int ck_send_mpmc(void *h, const void *msg)
{
	struct ck_h *k = h;
	while (!ck_ring_enqueue_mpmc_s64(&k->s->ring, k->s->buf, (struct s64 *)(uintptr_t)msg))
		waitspin(k->oversub);
	return 0;
}

static int ck_recv_mpmc(void *h, void *msg)
{
	struct ck_h *k = h;
	for (;;) {
		if (ck_ring_dequeue_mpmc_s64(&k->s->ring, k->s->buf, msg))
			return 1;
		if (all_produced(k->c))
			return ck_ring_dequeue_mpmc_s64(&k->s->ring, k->s->buf, msg) ? 1 : 0;
		waitspin(k->oversub);
	}
}

static int ck_child(struct f64 *f, int role, int idx)
{
	struct ck_h k = {f->mem, f->c, f->oversub};
	int mpmc = f->c->nprod > 1 || f->c->nread > 1;
	if (role == 'p')
		return mpmc ? produce(f, idx, &k, ck_send_mpmc) : produce(f, idx, &k, ck_send_spsc);
	return mpmc ? consume(f, idx, &k, ck_recv_mpmc) : consume(f, idx, &k, ck_recv_spsc);
}

/* ---- a ring with no library and no crash safety ------------------------------------ */

/*
 * What a single-producer, single-reader ring over shared memory does per
 * 64-byte sample at the least: slot i's word says which position may use it
 * next (2p: free for position p; 2p + 1: holds position p), one load and one
 * release store per side, the payload copied in and out, a `pause` between
 * looks. The words sit one per cache line beside the payloads, as cistern's
 * slot metadata does; among the layouts tried on the development machine (a
 * word beside each payload in one 128-byte slot, Lamport's head and tail
 * with cached copies, published every sample or every 16) it was the
 * fastest. No owner, no crash recovery, no wake-ups; not a bound either:
 * how a side waits (cistern's readers back off before they sleep, so the
 * other side fills several slots undisturbed) moves it as much as what it
 * does per sample.
 */
struct bare_shared {
	struct {
		_Alignas(64) _Atomic uint64_t word;
	} seq[QCAP];
	_Alignas(64) struct s64 buf[QCAP];
};

struct bare_h {
	struct bare_shared *s;
	struct run_ctl *c;
	uint64_t pos;
	unsigned pace;  /* pauses between the reader's looks at a slot not yet written */
	uint64_t quiet; /* K_BARE_PREFETCH: puts left before the producer prefetches again */
};

/*
 * K_BARE_PREFETCH: the lines of the slot BARE_PUT_AHEAD ahead, asked for
 * with ownership with the library's own helpers, so that the ring prefetches
 * exactly as cistern's sole producer does (put_prefetch() in lib/policy/fifo/fifo.h).
 */
static bool bare_prefetchw;

static int bare_send(void *h, const void *msg)
{
	struct bare_h *b = h;
	uint64_t p = b->pos++, i = p % QCAP;
	/* Acquire: the reader's release of the slot follows its copy out. */
	while (atomic_load_explicit(&b->s->seq[i].word, memory_order_acquire) != 2 * p)
		cpu_relax();
	memcpy(&b->s->buf[i], msg, BENCH_MSG);
	atomic_store_explicit(&b->s->seq[i].word, 2 * p + 1, memory_order_release);
	return 0;
}

/* K_BARE_PREFETCH's producer: bare_send() with the write prefetches ahead. */
static int bare_send_ahead(void *h, const void *msg)
{
	struct bare_h *b = h;
	uint64_t p = b->pos++, i = p % QCAP;
	/* Acquire: the reader's release of the slot follows its copy out. */
	if (atomic_load_explicit(&b->s->seq[i].word, memory_order_acquire) != 2 * p) {
		b->quiet = BARE_PUT_QUIET; /* the ring is full: no prefetches for a while */
		while (atomic_load_explicit(&b->s->seq[i].word, memory_order_acquire) != 2 * p)
			cpu_relax();
	}
	if (b->quiet) {
		b->quiet--;
	} else {
		uint64_t j = (p + BARE_PUT_AHEAD) % QCAP;
		cistern__prefetch_for_write(&b->s->seq[j].word, bare_prefetchw);
		cistern__prefetch_for_write(&b->s->buf[j], bare_prefetchw);
	}
	memcpy(&b->s->buf[i], msg, BENCH_MSG);
	atomic_store_explicit(&b->s->seq[i].word, 2 * p + 1, memory_order_release);
	return 0;
}

static int bare_recv(void *h, void *msg)
{
	struct bare_h *b = h;
	uint64_t p = b->pos, i = p % QCAP;
	for (;;) {
		/* Acquire: pairs with the producer's release; the payload is complete. */
		if (atomic_load_explicit(&b->s->seq[i].word, memory_order_acquire) == 2 * p + 1)
			break;
		if (all_produced(b->c) &&
		    atomic_load_explicit(&b->s->seq[i].word, memory_order_acquire) != 2 * p + 1)
			return 0;
		for (unsigned k = 0; k < b->pace; k++)
			cpu_relax();
	}
	memcpy(msg, &b->s->buf[i], BENCH_MSG);
	atomic_store_explicit(&b->s->seq[i].word, 2 * (p + QCAP), memory_order_release);
	b->pos = p + 1;
	return 1;
}

/*
 * The no-library ring with a producer that also stores 16 words per sample
 * to memory only it touches (always in its cache). The stores themselves
 * cost a few cycles; the row shows what they cost a producer whose stores to
 * the shared slots wait for cache lines held by the reader. The likely
 * reason: x86 makes stores visible in program order, so each store waits
 * in the store buffer behind the slower ones before it, and once the buffer
 * is full the producer stops. cistern's put makes about that many more than
 * this ring's producer (the slot's metadata, the claim mark, a counter, a
 * stack frame), though a put stripped of most of them measured no faster:
 * the row measures, it does not explain.
 */
static volatile uint64_t bare_scratch[16];

static int bare_send_stores(void *h, const void *msg)
{
	int rc = bare_send(h, msg);
	uint64_t v = ((const uint64_t *)msg)[0];
	for (int i = 0; i < 16; i++)
		bare_scratch[i] = v + (uint64_t)i;
	return rc;
}

/*
 * A ring that is not a queue, to size what per-sample publication costs: a
 * head and a tail index, each in a line of its own, both sides keeping the
 * other's last value and publishing their own once per BARE_BATCH samples
 * (the producer also after its last sample). A sample may wait for
 * BARE_BATCH - 1 more before a reader can see it, which no queue of
 * samples can allow, cistern's or any peer's here; the row says how fast
 * the cache lines move when they move in batches.
 */
struct batched_shared {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) struct s64 buf[QCAP];
};

struct batched_h {
	struct batched_shared *s;
	struct run_ctl *c;
	uint64_t pos, seen; /* own position; the other side's, as last read */
};

static int batched_send(void *h, const void *msg)
{
	struct batched_h *b = h;
	uint64_t p = b->pos;
	/* Acquire: the reader's copies out of the slots before head are done. */
	while (p - b->seen >= QCAP) {
		b->seen = atomic_load_explicit(&b->s->head, memory_order_acquire);
		if (p - b->seen >= QCAP)
			cpu_relax();
	}
	memcpy(&b->s->buf[p % QCAP], msg, BENCH_MSG);
	b->pos = ++p;
	/* Release: the samples before tail are written. */
	if (p % BARE_BATCH == 0 || p == b->c->per_producer)
		atomic_store_explicit(&b->s->tail, p, memory_order_release);
	return 0;
}

static int batched_recv(void *h, void *msg)
{
	struct batched_h *b = h;
	uint64_t p = b->pos;
	while (p >= b->seen) {
		/* Acquire: pairs with the producer's release of tail. */
		b->seen = atomic_load_explicit(&b->s->tail, memory_order_acquire);
		if (p < b->seen)
			break;
		if (all_produced(b->c) &&
		    p >= atomic_load_explicit(&b->s->tail, memory_order_acquire))
			return 0;
		cpu_relax();
	}
	memcpy(msg, &b->s->buf[p % QCAP], BENCH_MSG);
	b->pos = ++p;
	if (p % BARE_BATCH == 0)
		atomic_store_explicit(&b->s->head, p, memory_order_release);
	return 1;
}

static int bare_child(struct f64 *f, int role, int idx)
{
	if (f->kind == K_BARE_BATCHED) {
		struct batched_h b = {f->mem, f->c, 0, 0};
		return role == 'p' ? produce(f, idx, &b, batched_send)
				   : consume(f, idx, &b, batched_recv);
	}
	/*
	 * K_BARE_ROUNDS: a reader that catches up looks again only after
	 * BARE_ROUND_PAUSES pauses, as cistern's reader does in its rounds
	 * (lib/core/wait.c), so that the producer fills slots undisturbed, which the
	 * reader then takes in a row; one pause otherwise.
	 */
	bool rounds = f->kind == K_BARE_ROUNDS || f->kind == K_BARE_PREFETCH;
	struct bare_h b = {f->mem, f->c, 0, rounds ? BARE_ROUND_PAUSES : 1, 0};
	bare_prefetchw = cistern__has_prefetchw();
	if (role == 'p')
		return produce(f, idx, &b,
			       f->kind == K_BARE_STORES     ? bare_send_stores
			       : f->kind == K_BARE_PREFETCH ? bare_send_ahead
							    : bare_send);
	return consume(f, idx, &b, bare_recv);
}

/* ---- DPDK rte_ring ---------------------------------------------------------------- */

struct rte_h {
	struct rte_ring *r;
	struct run_ctl *c;
	int oversub;
};

static int rte_send_sp(void *h, const void *msg)
{
	struct rte_h *k = h;
	while (rte_ring_sp_enqueue_elem(k->r, (void *)(uintptr_t)msg, BENCH_MSG) != 0)
		waitspin(k->oversub);
	return 0;
}

static int rte_recv_sc(void *h, void *msg)
{
	struct rte_h *k = h;
	for (;;) {
		if (rte_ring_sc_dequeue_elem(k->r, msg, BENCH_MSG) == 0)
			return 1;
		if (all_produced(k->c))
			return rte_ring_sc_dequeue_elem(k->r, msg, BENCH_MSG) == 0 ? 1 : 0;
		waitspin(k->oversub);
	}
}

struct rte_burst_h {
	struct rte_h k;
	struct burst b;
};

static int rte_recv_burst(void *h, void *msg)
{
	struct rte_burst_h *r = h;
	while (r->b.next == r->b.have) {
		/* Read before the dequeue: an empty ring after the last put is the end. */
		int done = all_produced(r->k.c);
		r->b.have = rte_ring_sc_dequeue_burst_elem(r->k.r, r->b.buf, BENCH_MSG, READ_BURST,
							   NULL);
		r->b.next = 0;
		if (r->b.have)
			break;
		if (done)
			return 0;
		waitspin(r->k.oversub);
	}
	memcpy(msg, &r->b.buf[r->b.next++], BENCH_MSG);
	return 1;
}

static int rte_flush(void *h, struct send_batch_h *k)
{
	struct rte_h *r = h;
	for (unsigned off = 0; off < k->b.have;) {
		unsigned n = rte_ring_sp_enqueue_burst_elem(r->r, &k->b.buf[off], BENCH_MSG,
							    k->b.have - off, NULL);
		off += n;
		if (off < k->b.have)
			waitspin(r->oversub);
	}
	return 0;
}

static int rte_send_mp(void *h, const void *msg)
{
	struct rte_h *k = h;
	while (rte_ring_mp_enqueue_elem(k->r, (void *)(uintptr_t)msg, BENCH_MSG) != 0)
		waitspin(k->oversub);
	return 0;
}

static int rte_recv_mc(void *h, void *msg)
{
	struct rte_h *k = h;
	for (;;) {
		if (rte_ring_mc_dequeue_elem(k->r, msg, BENCH_MSG) == 0)
			return 1;
		if (all_produced(k->c))
			return rte_ring_mc_dequeue_elem(k->r, msg, BENCH_MSG) == 0 ? 1 : 0;
		waitspin(k->oversub);
	}
}

/* The generic calls dispatch on the sync type given at init (RTS here). */
static int rte_send_any(void *h, const void *msg)
{
	struct rte_h *k = h;
	while (rte_ring_enqueue_elem(k->r, (void *)(uintptr_t)msg, BENCH_MSG) != 0)
		waitspin(k->oversub);
	return 0;
}

static int rte_recv_any(void *h, void *msg)
{
	struct rte_h *k = h;
	for (;;) {
		if (rte_ring_dequeue_elem(k->r, msg, BENCH_MSG) == 0)
			return 1;
		if (all_produced(k->c))
			return rte_ring_dequeue_elem(k->r, msg, BENCH_MSG) == 0 ? 1 : 0;
		waitspin(k->oversub);
	}
}

static int rte_child(struct f64 *f, int role, int idx)
{
	struct rte_h k = {f->mem, f->c, f->oversub};
	int mpmc = f->c->nprod > 1 || f->c->nread > 1;
	if (f->kind == K_RTE_RTS)
		return role == 'p' ? produce(f, idx, &k, rte_send_any)
				   : consume(f, idx, &k, rte_recv_any);
	if (f->kind == K_RTE_BURST || f->kind == K_RTE_BURSTS) {
		static struct rte_burst_h rb; /* a child's own copy after fork */
		static struct send_batch_h pb;
		rb.k = k;
		pb = (struct send_batch_h){.ctl = f->c, .flush = rte_flush, .h = &rb.k};
		if (role == 'p')
			return f->kind == K_RTE_BURSTS ? produce(f, idx, &pb, send_batched)
						       : produce(f, idx, &k, rte_send_sp);
		return consume(f, idx, &rb, rte_recv_burst);
	}
	if (role == 'p')
		return mpmc ? produce(f, idx, &k, rte_send_mp) : produce(f, idx, &k, rte_send_sp);
	return mpmc ? consume(f, idx, &k, rte_recv_mc) : consume(f, idx, &k, rte_recv_sc);
}

/* ---- pipe ---------------------------------------------------------------------- */

static int pipe_send(void *h, const void *msg)
{
	int fd = *(int *)h;
	for (;;) {
		ssize_t n = write(fd, msg, BENCH_MSG);
		if (n == BENCH_MSG)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EIO;
	}
}

static int pipe_recv(void *h, void *msg)
{
	int fd = *(int *)h;
	for (;;) {
		ssize_t n = read(fd, msg, BENCH_MSG);
		if (n == BENCH_MSG)
			return 1;
		if (n == 0)
			return 0;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EBADMSG; /* short read: writes of 64 bytes are atomic */
	}
}

static int pipe_child(struct f64 *f, int role, int idx)
{
	if (role == 'p') {
		close(f->pfd[0]);
		return produce(f, idx, &f->pfd[1], pipe_send);
	}
	close(f->pfd[1]);
	return consume(f, idx, &f->pfd[0], pipe_recv);
}

/* ---- POSIX message queue ---------------------------------------------------------- */

static int mq_send1(void *h, const void *msg)
{
	mqd_t q = *(mqd_t *)h;
	while (mq_send(q, msg, BENCH_MSG, 0) != 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

static int mq_recv1(void *h, void *msg)
{
	mqd_t q = *(mqd_t *)h;
	for (;;) {
		ssize_t n = mq_receive(q, msg, BENCH_MSG, NULL);
		if (n == BENCH_MSG)
			return ((uint64_t *)msg)[0] == TAG_SENTINEL ? 0 : 1;
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? -errno : -EBADMSG;
	}
}

static int mq_child(struct f64 *f, int role, int idx)
{
	return role == 'p' ? produce(f, idx, &f->mq, mq_send1) : consume(f, idx, &f->mq, mq_recv1);
}

/* ---- Boost.Interprocess ------------------------------------------------------------ */

static int bq_send1(void *h, const void *msg)
{
	return bq_send(h, msg, BENCH_MSG);
}

static int bq_recv1(void *h, void *msg)
{
	long n = bq_recv(h, msg, BENCH_MSG);
	if (n == BENCH_MSG)
		return ((uint64_t *)msg)[0] == TAG_SENTINEL ? 0 : 1;
	return n < 0 ? (int)n : -EBADMSG;
}

static int bq_child(struct f64 *f, int role, int idx)
{
	void *q;
	int rc = bq_open(f->name, &q), ret;
	if (rc < 0) {
		ctl_error(f->c, role == 'p' ? idx : BENCH_MAX_PROCS + idx, "boost open: %s",
			  strerror(-rc));
		return 1;
	}
	ret = role == 'p' ? produce(f, idx, q, bq_send1) : consume(f, idx, q, bq_recv1);
	bq_close(q);
	return ret;
}

/* ---- ZeroMQ --------------------------------------------------------------------------- */

struct zq_h {
	void *s;
	struct run_ctl *c;
	uint64_t expect;
	int last;
};

static int zq_send(void *h, const void *msg)
{
	struct zq_h *z = h;
	while (zmq_send(z->s, msg, BENCH_MSG, 0) != BENCH_MSG)
		if (zmq_errno() != EINTR)
			return -zmq_errno();
	return 0;
}

static int zq_recv(void *h, void *msg)
{
	struct zq_h *z = h;
	if (z->last)
		return 0;
	for (;;) {
		int n = zmq_recv(z->s, msg, BENCH_MSG, 0);
		if (n == BENCH_MSG) {
			/* PUSH/PULL has no end-of-stream: count globally, the last one stops all. */
			if (atomic_fetch_add(&z->c->total, 1) + 1 == z->expect) {
				z->last = 1;
				atomic_store(&z->c->stop, 1);
			}
			return 1;
		}
		if (n >= 0)
			return -EBADMSG;
		if (zmq_errno() == EAGAIN) {
			if (atomic_load(&z->c->stop))
				return 2;
			continue;
		}
		if (zmq_errno() != EINTR)
			return -zmq_errno();
	}
}

static int zq_child(struct f64 *f, int role, int idx)
{
	int slot = role == 'p' ? idx : BENCH_MAX_PROCS + idx, ret = 1;
	void *ctx = zmq_ctx_new();
	void *s = ctx ? zmq_socket(ctx, role == 'p' ? ZMQ_PUSH : ZMQ_PULL) : NULL;
	struct zq_h z = {s, f->c, (uint64_t)f->c->nprod * f->c->per_producer, 0};
	if (!s) {
		ctl_error(f->c, slot, "zmq_socket: %s", zmq_strerror(zmq_errno()));
		goto out;
	}
	int hwm = QCAP;
	if (role == 'r') {
		int tmo = 10, linger = 0;
		zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
		zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
		zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
		if (zmq_bind(s, f->zep[idx]) != 0) {
			ctl_error(f->c, slot, "zmq_bind %s: %s", f->zep[idx],
				  zmq_strerror(zmq_errno()));
			goto out;
		}
		atomic_fetch_add(&f->c->bound, 1);
		ret = consume(f, idx, &z, zq_recv);
	} else {
		zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
		while (atomic_load(&f->c->bound) < f->c->nread)
			sched_yield();
		for (int i = 0; i < f->c->nread; i++)
			if (zmq_connect(s, f->zep[i]) != 0) {
				ctl_error(f->c, slot, "zmq_connect: %s", zmq_strerror(zmq_errno()));
				goto out;
			}
		ret = produce(f, idx, &z, zq_send);
	}
out:
	if (s)
		zmq_close(s); /* producers: linger forever, so everything is delivered */
	if (ctx)
		zmq_ctx_term(ctx);
	return ret;
}

/* ---- one run ------------------------------------------------------------------------ */

static int f64_child(int role, int idx, void *arg)
{
	struct f64 *f = arg;
	pin_cpu(role == 'p' ? idx : idx + 1);
	switch (f->kind) {
	case K_CIS_SOLE:
	case K_CIS:
	case K_CIS_FENCED:
	case K_CIS_SPIN:
	case K_CIS_BATCH:
	case K_CIS_BATCHES:
		return cis_child(f, role, idx);
	case K_CK:
		return ck_child(f, role, idx);
	case K_RTE:
	case K_RTE_RTS:
	case K_RTE_BURST:
	case K_RTE_BURSTS:
		return rte_child(f, role, idx);
	case K_PIPE:
		return pipe_child(f, role, idx);
	case K_MQ:
		return mq_child(f, role, idx);
	case K_BOOST:
		return bq_child(f, role, idx);
	case K_ZMQ:
		return zq_child(f, role, idx);
	case K_BARE:
	case K_BARE_STORES:
	case K_BARE_ROUNDS:
	case K_BARE_PREFETCH:
	case K_BARE_BATCHED:
		return bare_child(f, role, idx);
	default:
		return 1;
	}
}

static void f64_after_fork(void *arg)
{
	struct f64 *f = arg;
	if (f->kind == K_PIPE) {
		close(f->pfd[0]);
		close(f->pfd[1]);
		f->pfd[0] = f->pfd[1] = -1;
	}
}

static int f64_after_producers(void *arg)
{
	struct f64 *f = arg;
	_Alignas(64) unsigned char msg[BENCH_MSG];
	memset(msg, 0xff, sizeof msg); /* tag word = TAG_SENTINEL */
	for (int i = 0; i < f->c->nread; i++) {
		if (f->kind == K_MQ) {
			while (mq_send(f->mq, (const char *)msg, BENCH_MSG, 0) != 0)
				if (errno != EINTR)
					return -1;
		} else if (f->kind == K_BOOST) {
			if (bq_send(f->bq, msg, BENCH_MSG) < 0)
				return -1;
		}
	}
	return 0;
}

static long mq_capacity_allowed(void)
{
	static long cap;
	if (cap)
		return cap;
	cap = 10;
	FILE *fp = fopen("/proc/sys/fs/mqueue/msg_max", "r");
	if (fp) {
		if (fscanf(fp, "%ld", &cap) != 1)
			cap = 10;
		fclose(fp);
	}
	return cap;
}

/* Set up the transport in the parent. 0 or -errno; err gets a sentence. */
static int f64_setup(struct f64 *f, char *err, size_t cap)
{
	int rc;
	switch (f->kind) {
	case K_CIS_SOLE:
	case K_CIS:
	case K_CIS_FENCED:
	case K_CIS_SPIN:
	case K_CIS_BATCH:
	case K_CIS_BATCHES: {
		struct cistern_config cfg = {0};
		cfg.slot_size = BENCH_MSG;
		cfg.slot_count = QCAP;
		cfg.policy = CISTERN_FIFO;
		cfg.expected_producers = (uint32_t)f->c->nprod;
		if (f->kind == K_CIS_SOLE || f->kind == K_CIS_BATCH || f->kind == K_CIS_BATCHES)
			cfg.flags = CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER;
		bench_name(f->name, sizeof f->name, "f");
		rc = cistern_create(f->name, &cfg, &f->ph);
		if (rc < 0) {
			snprintf(err, cap, "cistern_create: %s", cistern_strerror(rc));
			return rc;
		}
		cleanup_register(f->name);
		return 0;
	}
	case K_CK: {
		f->memlen = sizeof(struct ck_shared);
		f->mem = shm_anon(f->memlen);
		ck_ring_init(&((struct ck_shared *)f->mem)->ring, QCAP);
		return 0;
	}
	case K_BARE:
	case K_BARE_STORES:
	case K_BARE_ROUNDS:
	case K_BARE_PREFETCH: {
		f->memlen = sizeof(struct bare_shared);
		f->mem = shm_anon(f->memlen);
		struct bare_shared *b = f->mem;
		for (uint64_t i = 0; i < QCAP; i++)
			atomic_store_explicit(&b->seq[i].word, 2 * i, memory_order_relaxed);
		return 0;
	}
	case K_BARE_BATCHED: {
		f->memlen = sizeof(struct batched_shared);
		f->mem = shm_anon(f->memlen); /* zero-filled: head = tail = 0 */
		return 0;
	}
	case K_RTE:
	case K_RTE_RTS:
	case K_RTE_BURST:
	case K_RTE_BURSTS: {
		ssize_t sz = rte_ring_get_memsize_elem(BENCH_MSG, QCAP);
		if (sz < 0) {
			snprintf(err, cap, "rte_ring_get_memsize_elem: %s", strerror((int)-sz));
			return (int)sz;
		}
		unsigned flags = 0;
		int mpmc = f->c->nprod > 1 || f->c->nread > 1;
		if (f->kind == K_RTE_RTS)
			flags = RING_F_MP_RTS_ENQ | RING_F_MC_RTS_DEQ;
		else if (!mpmc)
			flags = RING_F_SP_ENQ | RING_F_SC_DEQ;
		f->memlen = (size_t)sz;
		f->mem = shm_anon(f->memlen);
		rc = rte_ring_init(f->mem, "bench", QCAP, flags);
		if (rc < 0) {
			snprintf(err, cap, "rte_ring_init: %s", strerror(-rc));
			return rc;
		}
		return 0;
	}
	case K_PIPE:
		if (pipe(f->pfd) != 0) {
			rc = -errno;
			snprintf(err, cap, "pipe: %s", strerror(errno));
			return rc;
		}
		/* The default 64 KiB holds QCAP samples of 64 bytes: the same capacity as the rings. */
		(void)fcntl(f->pfd[1], F_SETPIPE_SZ, QCAP * BENCH_MSG);
		return 0;
	case K_MQ: {
		struct mq_attr a = {0};
		char nm[64];
		bench_name(nm, sizeof nm, "mq");
		snprintf(f->name, sizeof f->name, "/%s", nm);
		a.mq_maxmsg = QCAP;
		a.mq_msgsize = BENCH_MSG;
		f->mq = mq_open(f->name, O_RDWR | O_CREAT | O_EXCL, 0600, &a);
		if (f->mq == (mqd_t)-1 && (errno == EINVAL || errno == EMFILE || errno == ENOMEM)) {
			a.mq_maxmsg = mq_capacity_allowed();
			f->mq = mq_open(f->name, O_RDWR | O_CREAT | O_EXCL, 0600, &a);
		}
		if (f->mq == (mqd_t)-1) {
			rc = -errno;
			snprintf(err, cap, "mq_open: %s", strerror(errno));
			return rc;
		}
		f->mq_cap = a.mq_maxmsg;
		cleanup_register_kind('m', f->name);
		return 0;
	}
	case K_BOOST:
		bench_name(f->name, sizeof f->name, "bq");
		rc = bq_create(f->name, QCAP, BENCH_MSG, &f->bq);
		if (rc < 0)
			snprintf(err, cap, "boost message_queue: %s", strerror(-rc));
		else
			cleanup_register_kind('b', f->name);
		return rc;
	case K_ZMQ: {
		char nm[64];
		bench_name(nm, sizeof nm, "zmq");
		for (int i = 0; i < f->c->nread; i++)
			snprintf(f->zep[i], sizeof f->zep[i], "ipc:///tmp/%s-%d", nm, i);
		return 0;
	}
	default:
		return -EINVAL;
	}
}

static void f64_teardown(struct f64 *f)
{
	switch (f->kind) {
	case K_CIS_SOLE:
	case K_CIS:
	case K_CIS_FENCED:
	case K_CIS_SPIN:
	case K_CIS_BATCH:
	case K_CIS_BATCHES:
		if (f->ph) {
			struct cistern_stats st;
			if (cistern_stats_get(f->ph, &st) == 0)
				progress("  cistern stats: %llu puts, %llu gets; producers waited "
					 "%llu times (%.1f ms), "
					 "readers waited %llu times (%.1f ms)",
					 (unsigned long long)st.puts, (unsigned long long)st.gets,
					 (unsigned long long)st.producer_waits,
					 (double)st.producer_wait_ns / 1e6,
					 (unsigned long long)st.reader_waits,
					 (double)st.reader_wait_ns / 1e6);
			cistern_detach(f->ph);
			cistern_unlink(f->name);
			cleanup_forget(f->name);
		}
		break;
	case K_CK:
	case K_BARE:
	case K_BARE_STORES:
	case K_BARE_ROUNDS:
	case K_BARE_PREFETCH:
	case K_BARE_BATCHED:
	case K_RTE:
	case K_RTE_RTS:
	case K_RTE_BURST:
	case K_RTE_BURSTS:
		if (f->mem)
			shm_anon_free(f->mem, f->memlen);
		break;
	case K_PIPE:
		if (f->pfd[0] >= 0)
			close(f->pfd[0]);
		if (f->pfd[1] >= 0)
			close(f->pfd[1]);
		break;
	case K_MQ:
		if (f->mq != (mqd_t)-1) {
			mq_close(f->mq);
			mq_unlink(f->name);
			cleanup_forget(f->name);
		}
		break;
	case K_BOOST:
		if (f->bq) {
			bq_close(f->bq);
			bq_remove(f->name);
			cleanup_forget(f->name);
		}
		break;
	case K_ZMQ:
		for (int i = 0; i < f->c->nread; i++)
			unlink(f->zep[i] + strlen("ipc://"));
		break;
	default:
		break;
	}
}

/* One run; *rate in samples per second. 0, or -1 with err set. */
static int f64_run(enum kind k, int nprod, int nread, uint64_t per_prod, uint64_t timeout_ns,
		   double *rate, int *partial, long *mq_cap, char *err, size_t cap)
{
	struct f64 f;
	memset(&f, 0, sizeof f);
	f.kind = k;
	f.c = ctl_new(nprod, nread, per_prod);
	f.oversub = nprod + nread > g_opt.ncpu;
	f.pfd[0] = f.pfd[1] = -1;
	f.mq = (mqd_t)-1;
	err[0] = 0;
	int rc = f64_setup(&f, err, cap);
	if (rc < 0) {
		f64_teardown(&f);
		ctl_free(f.c);
		return -1;
	}
	*mq_cap = f.mq_cap;
	struct run_hooks h = {
		.fn = f64_child,
		.arg = &f,
		.after_fork = f64_after_fork,
		.after_producers = f64_after_producers,
		.settle_ns = k == K_ZMQ ? 100000000 : 10000000,
		.timeout_ns = timeout_ns,
	};
	uint64_t t0 = 0;
	rc = run_children(f.c, &h, &t0);
	f64_teardown(&f);
	*partial = 0;
	if (f.c->timed_out) {
		/* Time-boxed: the rate is what the readers had received when time ran out. */
		uint64_t got = 0;
		for (int i = 0; i < nread; i++)
			got += atomic_load(&f.c->rd[i].progress);
		progress("  time-boxed after %.1f s: %llu of %llu samples received",
			 (double)timeout_ns / 1e9, (unsigned long long)got,
			 (unsigned long long)per_prod * (unsigned long long)nprod);
		ctl_free(f.c);
		*partial = 1; /* fewer than 16 samples in the whole time box counts as 0 */
		*rate = (double)got / ((double)timeout_ns / 1e9);
		return 0;
	}

	uint64_t count = 0, sum = 0, bad = 0, t_end = 0;
	for (int i = 0; i < nread; i++) {
		count += f.c->rd[i].count;
		sum += f.c->rd[i].tagsum;
		bad += f.c->rd[i].bad;
		if (f.c->rd[i].t_end > t_end)
			t_end = f.c->rd[i].t_end;
	}
	for (int i = 0; i < BENCH_MAX_PROCS * 2 && !err[0]; i++)
		if (f.c->err[i][0])
			snprintf(err, cap, "%s: %s", i < BENCH_MAX_PROCS ? "producer" : "reader",
				 f.c->err[i]);
	if (rc == 0 && !err[0]) {
		uint64_t want = (uint64_t)nprod * per_prod;
		if (count != want || sum != tagsum_expected(nprod, per_prod))
			snprintf(err, cap, "INVALID: received %llu of %llu samples (or wrong ones)",
				 (unsigned long long)count, (unsigned long long)want);
		else if (bad)
			snprintf(err, cap, "INVALID: %llu damaged or out-of-order samples",
				 (unsigned long long)bad);
		else if (t_end <= t0)
			snprintf(err, cap, "no end time");
	} else if (!err[0]) {
		snprintf(err, cap, "a child failed");
	}
	ctl_free(f.c);
	if (err[0])
		return -1;
	*rate = (double)count / ((double)(t_end - t0) / 1e9);
	return 0;
}

void sec_fifo64(int nprod, int nread)
{
	int mpmc = nprod > 1 || nread > 1;
	enum kind list[K_COUNT];
	int n = 0;
	char section[48];

	if (!mpmc)
		snprintf(section, sizeof section, "1. 1P/1R 64 B copy");
	else
		snprintf(section, sizeof section, "2. %dP/%dR 64 B copy (%d CPUs)", nprod, nread,
			 g_opt.ncpu);
	if (!mpmc)
		list[n++] = K_CIS_SOLE;
	list[n++] = K_CIS;
	list[n++] = K_CIS_FENCED;
	list[n++] = K_CIS_SPIN;
	list[n++] = K_CK;
	list[n++] = K_RTE;
	if (mpmc)
		list[n++] = K_RTE_RTS;
	if (!mpmc) {
		/* Readers that take their samples in batches, each checked as every row checks. */
		list[n++] = K_CIS_BATCH;
		list[n++] = K_RTE_BURST;
		/* And producers that put theirs in batches. */
		list[n++] = K_CIS_BATCHES;
		list[n++] = K_RTE_BURSTS;
	}
	list[n++] = K_PIPE;
	list[n++] = K_MQ;
	list[n++] = K_BOOST;
	list[n++] = K_ZMQ;
	if (!mpmc) {
		list[n++] = K_BARE;
		list[n++] = K_BARE_STORES;
		list[n++] = K_BARE_ROUNDS;
		list[n++] = K_BARE_PREFETCH;
		list[n++] = K_BARE_BATCHED;
	}

	int row[K_COUNT], boxed[K_COUNT] = {0};
	uint64_t per[K_COUNT];
	char err[160];
	int ref = -1;
	uint64_t probe_timeout = g_opt.quick ? 1500000000ull : 4000000000ull;
	uint64_t run_timeout = (uint64_t)(g_opt.target_s * 4e9) + 1000000000ull;
	for (int i = 0; i < n; i++) {
		double rate = 0;
		long mqc = 0;
		enum kind k = list[i];
		uint64_t probe = round_to(g_opt.quick ? 8000 : 20000, (uint64_t)nprod) /
				 (uint64_t)nprod;
		int partial = 0;
		progress("[%s] calibrating %s", section, kind_label(k, mpmc, 0));
		int rc = f64_run(k, nprod, nread, probe, probe_timeout, &rate, &partial, &mqc, err,
				 sizeof err);
		row[i] = row_add(section, kind_label(k, mpmc, mqc), "throughput", "M samples/s",
				 HIGHER_BETTER);
		if (k == list[0]) /* the single-role row in section 1 (the ck_ring SPSC peer) */
			ref = row[i];
		row_ref(row[i], ref, 0);
		if (!mpmc) {
			int *slot[K_COUNT] = {[K_CIS_SOLE] = &g_bars.s1_cis_sole,
					      [K_CIS] = &g_bars.s1_cis,
					      [K_CIS_SPIN] = &g_bars.s1_cis_spin,
					      [K_CK] = &g_bars.s1_ck,
					      [K_RTE] = &g_bars.s1_rte,
					      [K_PIPE] = &g_bars.s1_pipe,
					      [K_MQ] = &g_bars.s1_mq,
					      [K_BOOST] = &g_bars.s1_boost,
					      [K_ZMQ] = &g_bars.s1_zmq,
					      [K_BARE] = &g_bars.s1_bare,
					      [K_BARE_STORES] = &g_bars.s1_bare_stores,
					      [K_BARE_ROUNDS] = &g_bars.s1_bare_rounds,
					      [K_BARE_PREFETCH] = &g_bars.s1_bare_prefetch,
					      [K_BARE_BATCHED] = &g_bars.s1_bare_batched};
			if (slot[k])
				*slot[k] = row[i];
		}
		per[i] = 0;
		if (rc < 0) {
			row_note(row[i], "ERR: %s", err);
			continue;
		}
		double want = rate * g_opt.target_s / nprod;
		if (want < 2000)
			want = 2000;
		if (want > 5e8)
			want = 5e8;
		per[i] = (uint64_t)want;
	}
	for (int rep = 0; rep < g_opt.reps; rep++) {
		for (int i = 0; i < n; i++) {
			if (!per[i])
				continue;
			double rate = 0;
			long mqc = 0;
			int partial = 0;
			if (f64_run(list[i], nprod, nread, per[i], run_timeout, &rate, &partial,
				    &mqc, err, sizeof err) < 0) {
				row_note(row[i], "ERR: %s", err);
				per[i] = 0;
				continue;
			}
			row_push(row[i], rate / 1e6);
			boxed[i] |= partial;
			progress("[%s] rep %d/%d %s: %.3f M samples/s%s", section, rep + 1,
				 g_opt.reps, row_get(row[i])->contender, rate / 1e6,
				 partial ? " (time-boxed)" : "");
		}
	}
	for (int i = 0; i < n; i++)
		if (boxed[i]) {
			struct row *r = row_get(row[i]);
			size_t l = strlen(r->contender);
			snprintf(r->contender + l, sizeof r->contender - l, " [time-boxed]");
		}
}
