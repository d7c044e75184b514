/* SPDX-License-Identifier: MIT */
/*
 * bench.h - shared pieces of the cistern benchmark program: options, timing,
 * process control, payload work and the result table.
 */
#ifndef CISTERN_BENCH_H
#define CISTERN_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define BENCH_MAX_PROCS 8
#define BENCH_CACHELINE 64
#define BENCH_MSG 64 /* bytes of a small sample */

/* ---- options ------------------------------------------------------------- */

struct bench_opts {
	int quick;               /* --quick */
	int reps;                /* measured repetitions per contender */
	double target_s;         /* wall time aimed at per measured run */
	const char *only;        /* comma-separated list of sections, NULL = all */
	const char *py;          /* path of sample_peers.py, NULL = built-in default */
	const char *py_transfer; /* path of transfer_peers.py, NULL = built-in default */
	const char *python;      /* interpreter */
	int ncpu;                /* online CPUs */
};
extern struct bench_opts g_opt;

int bench_section_enabled(const char *id);

/* ---- time ------------------------------------------------------------------ */

uint64_t now_ns(void);
void sleep_ns(uint64_t ns);
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#else
	atomic_signal_fence(memory_order_seq_cst);
#endif
}

/* ---- processes ------------------------------------------------------------- */

/* Pin the calling process to one CPU (modulo the CPU count); ignore failure. */
void pin_cpu(int cpu);

/* A control block shared by the parent and the children of one run. */
struct rd_res {
	_Alignas(BENCH_CACHELINE) uint64_t count; /* samples received */
	uint64_t tagsum;                          /* sum of tags received */
	uint64_t bad;                             /* payload/ordering errors */
	uint64_t t_end; /* when it saw the last sample (0 = not the last) */
	uint64_t aux[4];
	_Atomic uint64_t progress; /* samples so far, updated now and then */
};

struct run_ctl {
	_Alignas(BENCH_CACHELINE) _Atomic int ready;
	_Alignas(BENCH_CACHELINE) _Atomic int go;
	_Alignas(BENCH_CACHELINE) _Atomic int producers_done;
	_Alignas(BENCH_CACHELINE) _Atomic uint64_t total; /* shared receive count (zmq) */
	_Atomic int stop;
	_Atomic int bound; /* readers that have bound their endpoint (zmq) */
	int timed_out;     /* set by run_children when it gave up */
	uint64_t t_stop;   /* when it gave up */
	int nprod, nread;
	uint64_t per_producer; /* samples each producer sends */
	struct rd_res rd[BENCH_MAX_PROCS];
	char err[BENCH_MAX_PROCS * 2][112]; /* first error of each child, "" if none */
};

struct run_ctl *ctl_new(int nprod, int nread, uint64_t per_producer);
void ctl_free(struct run_ctl *c);

/* Child side of the start barrier: announce readiness, wait for go. */
void ctl_child_ready(struct run_ctl *c);
/* Record the first error of child slot `slot` (producers 0.., readers BENCH_MAX_PROCS..). */
void ctl_error(struct run_ctl *c, int slot, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Shared anonymous memory (MAP_SHARED), rounded to pages, zeroed. */
void *shm_anon(size_t len);
void shm_anon_free(void *p, size_t len);
/* A /dev/shm object's memory, as a cistern segment's (its pages as /dev/shm's mount gives them). */
void *shm_tmpfs(size_t len);
/* /dev/shm's huge= mount option: whether segments get 2 MiB pages. */
void shm_huge_option(char *out, size_t cap);

/*
 * The parent side of a multi-process run. Forks c->nprod producer and c->nread
 * reader children running fn(role, index, arg) (role 'p' or 'r'); a child exits
 * with fn's return. after_fork(arg) runs in the parent once all are forked (may
 * be NULL). The parent waits for every child to call ctl_child_ready(), settles
 * settle_ns, releases them and returns the release time in *t0. When all the
 * producers have exited it calls after_producers(arg) once (may be NULL). It
 * gives up after timeout_ns, killing the children it started. Returns 0 if every
 * child exited 0.
 */
typedef int (*child_fn)(int role, int index, void *arg);
struct run_hooks {
	child_fn fn;
	void *arg;
	void (*after_fork)(void *arg);
	int (*after_producers)(void *arg);
	uint64_t settle_ns;
	uint64_t timeout_ns;
};
int run_children(struct run_ctl *c, const struct run_hooks *h, uint64_t *t0);

/* ---- payload work ------------------------------------------------------------ */

#define TAG_SENTINEL UINT64_MAX
#define FILL_K UINT64_C(0x9E3779B97F4A7C15)

static inline uint64_t make_tag(int producer, uint64_t seq)
{
	return ((uint64_t)(producer + 1) << 40) | seq;
}

/* A 64-byte sample: word 0 = tag, words 1..7 derived from the tag. */
static inline void msg_fill(void *buf, uint64_t tag)
{
	uint64_t *w = buf;
	w[0] = tag;
	for (int i = 1; i < 8; i++)
		w[i] = tag * FILL_K + (uint64_t)i;
}

/* 0 if the sample is intact; sets *tag. */
static inline int msg_check(const void *buf, uint64_t *tag)
{
	const uint64_t *w = buf;
	uint64_t t = w[0], acc = 0;
	for (int i = 1; i < 8; i++)
		acc |= w[i] ^ (t * FILL_K + (uint64_t)i);
	*tag = t;
	return acc != 0;
}

/* Sum of the tags one producer sends: n samples, seq 0..n-1. */
uint64_t tagsum_expected(int nprod, uint64_t per_producer);

/* Large samples: word i = seq*K + i; checksum = sum of the words. */
void big_fill(void *buf, size_t len, uint64_t seq);
uint64_t big_sum(const void *buf, size_t len);
uint64_t big_sum_expected(size_t len, uint64_t seq);
/* The raw ZeroMQ PULL reader's loop over such samples (common.c). */
int zmq_pull_checked(struct run_ctl *c, int slot, void *s, const char *ep, size_t len, int hwm,
		     uint64_t *count, uint64_t *bad);

/* xorshift64* */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * UINT64_C(2685821657736338717);
}

/* ---- results ------------------------------------------------------------------ */

#define BENCH_MAX_VALS 64

enum better { HIGHER_BETTER, LOWER_BETTER };

struct row {
	char section[48];
	char contender[80];
	char metric[24];
	char unit[16];
	double v[BENCH_MAX_VALS];
	int n;
	char note[120]; /* replaces the numbers when set ("n/a: ...", "ERR: ...") */
	enum better better;
	int ref;        /* row index this row is compared to; -1 = none */
	int ratio_kind; /* 0 = advantage of the reference (cistern) over this row, 1 = this / ref */
};

int row_add(const char *section, const char *contender, const char *metric, const char *unit,
	    enum better better);
struct row *row_get(int i);
int row_count(void);
void row_push(int i, double v);
void row_note(int i, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void row_ref(int i, int ref, int kind);
double row_median(const struct row *r);
double row_min(const struct row *r);
double row_max(const struct row *r);
void table_print(void);

/* Round to a multiple of m, at least m. */
uint64_t round_to(uint64_t n, uint64_t m);

/* Progress (stderr). */
void progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Names of cistern segments and other named objects to remove at exit. */
void bench_name(char *out, size_t cap, const char *what);
void cleanup_register(const char *cistern_name);
void cleanup_register_kind(char kind, const char *name); /* 'c' cistern, 'm' mq, 'b' Boost */
void cleanup_forget(const char *cistern_name);
void cleanup_all(void);

/* ---- sections ------------------------------------------------------------------ */

/* Rows the pass/miss summary reads (-1 = not measured). */
struct bar_rows {
	int s1_cis_sole, s1_cis, s1_cis_spin, s1_ck, s1_rte, s1_pipe, s1_mq, s1_boost, s1_zmq,
		s1_bare, s1_bare_stores, s1_bare_rounds, s1_bare_prefetch, s1_bare_batched;
	int s3_cis, s3_bound, s3_bound_1, s3_cis_1cpu, s3_cis_busy, s3_handoff, s3_handoff_1cpu;
	int s4_zc, s4_gather, s4_zc_any, s4_gather_any, s4_zc_two, s4_gather_two, s4_floor_zc,
		s4_floor_gather, s4_pass_zc, s4_pass_gather, s4_opt_gather, s4_opt_apart,
		s4_opt_words, s4_gather_rs, s4_torch, s4_torch_fixed;
	int s6_op[3];
	int s7_cis_batch, s7_cis_one, s7_queue;
	int s8_ack[3], s8_zmq[3]; /* 64 B, 4 KiB, 1 MiB */
};
extern struct bar_rows g_bars;

void sec_machine(void);                /* 0 */
void sec_fifo64(int nprod, int nread); /* 1 and 2 */
void sec_big(void);                    /* 3 */
void sec_sample(void);                 /* 4 */
void sec_latency(void);                /* 5 */
void sec_scale(void);                  /* 6 */
void sec_pyxfer(void);                 /* 7 */
void sec_remote(void);                 /* 8 */
void bars_print(void);

/*
 * Section 1: pauses between the looks of the no-library ring's reader that
 * waits in rounds (fifo64.c, K_BARE_ROUNDS) once it caught up: as many as
 * cistern's reader makes in a round then (lib/core/wait.c, ahead_round(): half
 * the slot count, at most 512).
 */
#define BARE_ROUND_PAUSES 512
/*
 * Section 1: slots ahead of its own that the producer of the no-library
 * ring that prefetches asks for (fifo64.c, K_BARE_PREFETCH): as many as
 * cistern's sole producer does in a ring of 1024 (lib/policy/fifo/fifo.c,
 * FIFO_PUT_AHEAD).
 */
#define BARE_PUT_AHEAD 16
/* ... and the puts it makes without them after finding the ring full (FIFO_PUT_QUIET). */
#define BARE_PUT_QUIET 256

#endif
