/* SPDX-License-Identifier: MIT */
/*
 * remote.c - a remote producer: a ZeroMQ DEALER connected to a server's
 * ROUTER (docs/REMOTE.md). Calls read what the server sent
 * (acknowledgements, failures, goodbye) and the socket monitor's events
 * before they decide, so a call that waits for credit waits in zmq_poll()
 * on both.
 *
 * Small puts are gathered: each appends its sample to an open PUTS frame,
 * which leaves when it is full, when a call must wait or flush, or `linger`
 * after its first sample. One message then carries many samples, and the
 * server puts them with one cistern_put_batch(): per-message costs on both
 * sides (a ZeroMQ message, a wake of the segment's readers) are paid once
 * per frame instead of once per sample. A put on a connection idle for a
 * linger leaves at once, so a slow producer's samples are not delayed. The
 * connection's one thread of its own, the flusher, sends a frame whose
 * linger ran out while its producer computes. A mutex orders the two
 * threads' use of the socket, as ZeroMQ requires of a socket that changes
 * threads.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "cistern.h"
#include "cistern/remote.h"
#include "remote/remote_wire.h"

/*
 * Buffers handed to ZeroMQ come back from its I/O thread once sent, into a
 * pool, and serve the next messages. Reused, they stay mapped: a buffer
 * allocated afresh for each message comes from mmap(), or from a heap that
 * glibc trims once it is freed, and faults on every page it is copied into,
 * which costs more than the copy. A pool keeps at most POOL_MAX buffers and
 * POOL_BYTES of them.
 */
#define POOL_MAX 16
#define POOL_BYTES ((size_t)64 << 20)

struct pool {
	pthread_mutex_t lock;
	size_t size; /* of each buffer */
	unsigned n, cap;
	void *b[POOL_MAX];
};

struct cistern_remote {
	void *ctx;
	void *sock;
	void *mon; /* PAIR receiving the DEALER's monitor events */
	uint64_t id;
	uint64_t slot_size;
	uint32_t ranks;
	uint32_t window;
	uint32_t prio_ranks; /* the WELCOME's CISTERN__WELCOME_PRIO_* */
	uint64_t sent;       /* samples handed to the socket; the last seq */
	uint64_t settled;    /* every sample up to it is acked or failed */
	uint64_t failed;
	uint64_t next_read; /* a put reads the socket once sent reaches it */
	int pending_err;    /* an error the server reported, not yet returned */
	int gone;           /* the session is over: -ECONNRESET from now on */
	int done;           /* producer_done() went through: puts are -EPIPE */
	int welcomed;
	int done_ok;  /* DONE_OK received */
	int done_err; /* its status */
	pid_t pid;    /* the process that connected: a fork()ed child must not use it */
	size_t schema_len;
	char schema[CISTERN_SCHEMA_MAX];

	/* Gathering: every field below, and the socket, under `lock`. */
	pthread_mutex_t lock;
	pthread_cond_t wake; /* the flusher's: a frame opened, or close */
	pthread_t flusher;
	bool has_flusher;
	bool flusher_idle; /* waiting without a deadline: an opened frame signals */
	bool stopping;
	int64_t linger_ns;     /* < 0: no gathering */
	uint32_t gmax;         /* samples a frame may gather: a quarter window */
	uint32_t gn;           /* samples in the open frame; the last gn of `sent` */
	size_t gbytes;         /* their payload bytes */
	unsigned char *gb;     /* the open frame: header, payloads, room for records */
	unsigned char *grec;   /* its records, gmax of them, copied in at send */
	uint64_t gfirst_ns;    /* when the open frame's first sample came */
	uint64_t last_send_ns; /* when a frame or a lone sample last left */

	struct pool frames; /* gathered frames: header, payloads, records */
	struct pool large;  /* large samples, header + slot_size each */
};

/* Payload bytes a frame gathers at most, and the largest sample gathered. */
#define GATHER_BYTES CISTERN__WIRE_GATHER_BYTES
#define GATHER_SAMPLE_MAX (GATHER_BYTES / 4)
#define LINGER_DEFAULT_US 1000

/*
 * getpid() is a system call; a put asks for it every time, to refuse a
 * fork() child's use of its parent's connection. The cache is reset in
 * every child by a pthread_atfork() handler; relaxed, since a process reads
 * and writes it from the thread that forked or the one that asks, and
 * fork() itself orders the child's handler before anything else it runs.
 */
static _Atomic pid_t cached_pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_forget(void)
{
	atomic_store_explicit(&cached_pid, 0, memory_order_relaxed);
}

static void pid_hook(void)
{
	pthread_atfork(NULL, NULL, pid_forget);
}

static pid_t getpid_cached(void)
{
	pid_t p = atomic_load_explicit(&cached_pid, memory_order_relaxed);
	if (p == 0) {
		pthread_once(&pid_once, pid_hook);
		p = getpid();
		atomic_store_explicit(&cached_pid, p, memory_order_relaxed);
	}
	return p;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t now_ms(void)
{
	return now_ns() / 1000000u;
}

static int zerr(void)
{
	int e = zmq_errno();
	return e > 0 ? -e : -EIO;
}

static uint64_t random_id(void)
{
	uint64_t id = 0;
	FILE *f = fopen("/dev/urandom", "rb");
	if (f) {
		if (fread(&id, sizeof(id), 1, f) != 1)
			id = 0;
		fclose(f);
	}
	if (id == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		id = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
		     ((uint64_t)getpid() << 40);
		id |= 1;
	}
	return id;
}

static int send_hdr(void *sock, const struct cistern__wire *w, int more)
{
	unsigned char hdr[CISTERN__WIRE_HDR];
	cistern__wire_encode(w, hdr);
	if (zmq_send(sock, hdr, sizeof(hdr), (more ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) < 0)
		return zerr();
	return 0;
}

/* Read one monitor event; a disconnection after WELCOME ends the session. */
static void read_monitor(struct cistern_remote *r)
{
	for (;;) {
		zmq_msg_t ev, addr;
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, r->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return;
		}
		uint16_t event = 0;
		if (zmq_msg_size(&ev) >= 2)
			memcpy(&event, zmq_msg_data(&ev), sizeof(event));
		int more = zmq_msg_more(&ev);
		zmq_msg_close(&ev);
		if (more) { /* the second frame, the address */
			zmq_msg_init(&addr);
			(void)zmq_msg_recv(&addr, r->mon, 0);
			zmq_msg_close(&addr);
		}
		if (event == ZMQ_EVENT_DISCONNECTED && r->welcomed)
			r->gone = 1;
	}
}

/* Drop the rest of a multipart message. */
static void skip_rest(void *sock)
{
	int more = 1;
	while (more) {
		int64_t m = 0;
		size_t ml = sizeof(m);
		if (zmq_getsockopt(sock, ZMQ_RCVMORE, &m, &ml) < 0 || !m)
			return;
		zmq_msg_t part;
		zmq_msg_init(&part);
		(void)zmq_msg_recv(&part, sock, 0);
		zmq_msg_close(&part);
		more = 1;
	}
}

static void handle(struct cistern_remote *r, const struct cistern__wire *w)
{
	switch (w->kind) {
	case CISTERN__W_WELCOME: {
		if (r->welcomed)
			break;
		r->window = w->a ? w->a : 1;
		r->slot_size = w->b;
		r->ranks = w->sim_id;
		r->prio_ranks = w->time_step;
		int64_t m = 0;
		size_t ml = sizeof(m);
		r->schema_len = 0;
		r->schema[0] = '\0';
		if (zmq_getsockopt(r->sock, ZMQ_RCVMORE, &m, &ml) == 0 && m) {
			int n = zmq_recv(r->sock, r->schema, sizeof(r->schema) - 1, 0);
			if (n > 0) {
				size_t len = (size_t)n < sizeof(r->schema) - 1
						     ? (size_t)n
						     : sizeof(r->schema) - 1;
				r->schema[len] = '\0';
				r->schema_len = strlen(r->schema);
			}
		}
		r->welcomed = 1;
		break;
	}
	case CISTERN__W_ACK:
		if (w->seq > r->settled && w->seq <= r->sent)
			r->settled = w->seq;
		break;
	case CISTERN__W_FAIL:
		r->failed++;
		if (r->pending_err == 0)
			r->pending_err = w->a > 0 && w->a < 4096 ? -(int)w->a : -EIO;
		break;
	case CISTERN__W_DONE_OK:
		r->done_ok = 1;
		r->done_err = w->a > 0 && w->a < 4096 ? -(int)w->a : 0;
		break;
	case CISTERN__W_BYE:
		/*
		 * The server stopped: it settled every sample up to seq and will
		 * put none after it, so those are failed, not in doubt.
		 */
		if (w->seq >= r->settled && w->seq <= r->sent) {
			r->failed += r->sent - w->seq;
			r->settled = r->sent;
		}
		r->gone = 1;
		break;
	case CISTERN__W_ERROR:
		if (w->a == EPROTONOSUPPORT && !r->welcomed)
			r->pending_err = -EPROTONOSUPPORT;
		r->gone = 1;
		break;
	default:
		break;
	}
}

/*
 * Puts read the socket only now and then: each ZeroMQ read costs system
 * calls (a poll of its mailbox), and a credit counted on acks read a little
 * late is only a smaller one. After each read, the next comes after a
 * quarter of the credit then left has been used (at most 1024 puts later),
 * so acks are read more often as the window fills and before it runs dry.
 * Errors and goodbyes wait at most that long to be seen; their accounting
 * does not depend on when.
 */
static void plan_read(struct cistern_remote *r)
{
	uint64_t quarter = (r->window - (r->sent - r->settled)) / 4;
	r->next_read = r->sent + (quarter < 1 ? 1 : quarter < 1024 ? quarter : 1024);
}

/* Read every message waiting now, and plan the next read. */
static void drain(struct cistern_remote *r)
{
	read_monitor(r);
	for (;;) {
		unsigned char hdr[CISTERN__WIRE_HDR + 1];
		int n = zmq_recv(r->sock, hdr, sizeof(hdr), ZMQ_DONTWAIT);
		if (n < 0)
			break;
		struct cistern__wire w;
		if (cistern__wire_decode(hdr, (size_t)n, &w) == 0 &&
		    w.version == CISTERN_REMOTE_PROTOCOL)
			handle(r, &w);
		else if (cistern__wire_decode(hdr, (size_t)n, &w) == 0 &&
			 w.kind == CISTERN__W_ERROR)
			handle(r, &w);
		skip_rest(r->sock);
	}
	read_monitor(r);
	plan_read(r);
}

/* Wait until cond(r) holds, the session ends, or the time is up. */
static int wait_for(struct cistern_remote *r, int (*cond)(const struct cistern_remote *),
		    int timeout_ms)
{
	uint64_t deadline = timeout_ms > 0 ? now_ms() + (uint64_t)timeout_ms : 0;
	for (;;) {
		drain(r);
		if (r->gone)
			return -ECONNRESET;
		if (cond(r))
			return 0;
		if (timeout_ms == 0)
			return -EAGAIN;
		long wait = -1;
		if (timeout_ms > 0) {
			uint64_t t = now_ms();
			if (t >= deadline)
				return -ETIMEDOUT;
			wait = (long)(deadline - t);
		}
		zmq_pollitem_t items[2] = {
			{.socket = r->sock, .events = ZMQ_POLLIN},
			{.socket = r->mon, .events = ZMQ_POLLIN},
		};
		if (zmq_poll(items, 2, wait) < 0 && zmq_errno() != EINTR)
			return zerr();
	}
}

static int has_credit(const struct cistern_remote *r)
{
	return r->sent - r->settled < r->window;
}

static int all_settled(const struct cistern_remote *r)
{
	return r->settled == r->sent;
}

static int is_welcomed(const struct cistern_remote *r)
{
	return r->welcomed || r->pending_err != 0;
}

static int is_done_ok(const struct cistern_remote *r)
{
	return r->done_ok;
}

static int valid_key(const char *k)
{
	uint8_t bin[32];
	return k && strlen(k) == CISTERN_KEY_LEN && zmq_z85_decode(bin, k) != NULL;
}

static void pool_init(struct pool *p)
{
	pthread_mutex_init(&p->lock, NULL);
}

/* Buffers of `size` bytes from now on (known once the server welcomed us). */
static void pool_size(struct pool *p, size_t size)
{
	size_t fit = POOL_BYTES / size;
	p->size = size;
	p->cap = fit < 1 ? 1 : fit < POOL_MAX ? (unsigned)fit : POOL_MAX;
}

static void pool_free(struct pool *p)
{
	for (unsigned i = 0; i < p->n; i++)
		free(p->b[i]);
	pthread_mutex_destroy(&p->lock);
}

/* ZeroMQ's I/O thread is done with a buffer (a zmq_free_fn): keep it for the next. */
static void pool_put(void *data, void *hint)
{
	struct pool *p = hint;
	pthread_mutex_lock(&p->lock);
	if (p->n < p->cap) {
		p->b[p->n++] = data;
		data = NULL;
	}
	pthread_mutex_unlock(&p->lock);
	free(data);
}

static void *pool_get(struct pool *p)
{
	void *b = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->n)
		b = p->b[--p->n];
	pthread_mutex_unlock(&p->lock);
	return b ? b : malloc(p->size);
}

static void stop_flusher(struct cistern_remote *r)
{
	if (!r->has_flusher)
		return;
	pthread_mutex_lock(&r->lock);
	r->stopping = true;
	pthread_cond_signal(&r->wake);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->flusher, NULL);
	r->has_flusher = false;
}

static void free_remote(struct cistern_remote *r)
{
	stop_flusher(r);
	free(r->gb);
	free(r->grec);
	pthread_cond_destroy(&r->wake);
	pthread_mutex_destroy(&r->lock);
	if (r->mon)
		zmq_close(r->mon);
	if (r->sock) {
		int linger = 0;
		zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_close(r->sock);
	}
	/* Returns once ZeroMQ gave back every buffer it held: the pools are ours again. */
	if (r->ctx)
		zmq_ctx_term(r->ctx);
	pool_free(&r->frames);
	pool_free(&r->large);
	free(r);
}

static int send_gathered(struct cistern_remote *r);

/*
 * The flusher: sends the open frame once its first sample has waited a
 * linger. While frames keep opening it wakes once per linger without being
 * signalled; after a linger with none it waits until a put opens one.
 */
static void *flusher_main(void *arg)
{
	struct cistern_remote *r = arg;
	uint64_t linger = (uint64_t)r->linger_ns;
	pthread_mutex_lock(&r->lock);
	uint64_t busy = now_ns(); /* when a frame was last open */
	while (!r->stopping) {
		uint64_t t = now_ns(), due;
		if (r->gn) {
			busy = t;
			due = r->gfirst_ns + linger;
			if (t >= due) {
				(void)send_gathered(r);
				continue;
			}
		} else if (t - busy >= linger) {
			r->flusher_idle = true;
			pthread_cond_wait(&r->wake, &r->lock);
			r->flusher_idle = false;
			busy = now_ns();
			continue;
		} else {
			due = busy + linger;
		}
		struct timespec ts = {.tv_sec = (time_t)(due / 1000000000u),
				      .tv_nsec = (long)(due % 1000000000u)};
		pthread_cond_timedwait(&r->wake, &r->lock, &ts);
	}
	pthread_mutex_unlock(&r->lock);
	return NULL;
}

/* Set up gathering and the pool of large buffers for the window and slot size granted. */
static int start_gathering(struct cistern_remote *r, int32_t linger_us)
{
	r->gmax = r->window / 4 ? r->window / 4 : 1;
	pool_size(&r->large, CISTERN__WIRE_HDR + r->slot_size);
	pool_size(&r->frames,
		  CISTERN__WIRE_HDR + GATHER_BYTES + (size_t)r->gmax * CISTERN__WIRE_REC);
	r->grec = malloc((size_t)r->gmax * CISTERN__WIRE_REC);
	if (!r->grec)
		return -ENOMEM;
	if (linger_us < 0) {
		/* puts leave alone; a put_batch()'s samples still share frames */
		r->linger_ns = -1;
		return 0;
	}
	r->linger_ns = (int64_t)(linger_us ? linger_us : LINGER_DEFAULT_US) * 1000;
	/*
	 * The flusher blocks every signal, as ZeroMQ's own threads do: the
	 * program's handlers run on its threads, and the flusher's waits are
	 * never interrupted.
	 */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int e = pthread_create(&r->flusher, NULL, flusher_main, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e)
		return -e;
	pthread_setname_np(r->flusher, "cistern-flush");
	r->has_flusher = true;
	return 0;
}

int cistern_remote_connect(const char *endpoint, const struct cistern_remote_opts *opts,
			   struct cistern_remote **out)
{
	struct cistern_remote_opts o = {0};
	if (!endpoint || !out)
		return -EINVAL;
	*out = NULL;
	if (strncmp(endpoint, "tcp://", 6) != 0 && strncmp(endpoint, "ipc://", 6) != 0)
		return -EINVAL;
	if (opts) {
		if (opts->size < offsetof(struct cistern_remote_opts, window) + sizeof(uint32_t))
			return -EINVAL;
		memcpy(&o, opts, opts->size < sizeof(o) ? opts->size : sizeof(o));
	}
	if (o.server_key) {
		if (!zmq_has("curve"))
			return -ENOTSUP;
		if (!valid_key(o.server_key))
			return -EINVAL;
		if ((o.public_key || o.secret_key) &&
		    (!valid_key(o.public_key) || !valid_key(o.secret_key)))
			return -EINVAL;
	} else if (o.public_key || o.secret_key) {
		return -EINVAL;
	}
	int connect_ms = o.connect_timeout_ms ? o.connect_timeout_ms : 5000;
	int ivl = o.heartbeat_ivl_ms > 0 ? o.heartbeat_ivl_ms : 1000;
	int hb_timeout = o.heartbeat_timeout_ms > 0 ? o.heartbeat_timeout_ms : 5 * ivl;

	struct cistern_remote *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&r->lock, NULL);
	pool_init(&r->frames);
	pool_init(&r->large);
	pthread_cond_init(&r->wake, &ca);
	pthread_condattr_destroy(&ca);
	r->pid = getpid_cached();
	r->id = random_id();
	int rc = -ENOMEM;
	r->ctx = zmq_ctx_new();
	if (!r->ctx)
		goto fail;
	r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
	if (!r->sock) {
		rc = zerr();
		goto fail;
	}
	/*
	 * The window bounds what is queued: a high-water mark above it never
	 * refuses a send that a credit allowed.
	 */
	int hwm = 0; /* no limit: the window is the limit */
	int linger = 0;
	int ttl = hb_timeout;
	zmq_setsockopt(r->sock, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(r->sock, ZMQ_RCVHWM, &hwm, sizeof(hwm));
	zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger));
	zmq_setsockopt(r->sock, ZMQ_HEARTBEAT_IVL, &ivl, sizeof(ivl));
	zmq_setsockopt(r->sock, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof(hb_timeout));
	zmq_setsockopt(r->sock, ZMQ_HEARTBEAT_TTL, &ttl, sizeof(ttl));
	/*
	 * The server's largest message is a WELCOME's schema: a larger one
	 * is refused before it is stored. An IPv6 address needs ZMQ_IPV6.
	 */
	int64_t max_msg = CISTERN_SCHEMA_MAX + 1024;
	int ipv6 = strncmp(endpoint, "tcp://[", 7) == 0;
	zmq_setsockopt(r->sock, ZMQ_MAXMSGSIZE, &max_msg, sizeof(max_msg));
	zmq_setsockopt(r->sock, ZMQ_IPV6, &ipv6, sizeof(ipv6));
	if (o.server_key) {
		char pub[CISTERN_KEY_LEN + 1], sec[CISTERN_KEY_LEN + 1];
		if (o.public_key) {
			snprintf(pub, sizeof(pub), "%s", o.public_key);
			snprintf(sec, sizeof(sec), "%s", o.secret_key);
		} else if (zmq_curve_keypair(pub, sec) < 0) {
			rc = -ENOTSUP;
			goto fail;
		}
		if (zmq_setsockopt(r->sock, ZMQ_CURVE_SERVERKEY, o.server_key, CISTERN_KEY_LEN) <
			    0 ||
		    zmq_setsockopt(r->sock, ZMQ_CURVE_PUBLICKEY, pub, CISTERN_KEY_LEN) < 0 ||
		    zmq_setsockopt(r->sock, ZMQ_CURVE_SECRETKEY, sec, CISTERN_KEY_LEN) < 0) {
			rc = zerr();
			goto fail;
		}
	}
	char monaddr[64];
	snprintf(monaddr, sizeof(monaddr), "inproc://cistern-remote-mon-%p", (void *)r);
	if (zmq_socket_monitor(r->sock, monaddr, ZMQ_EVENT_DISCONNECTED) < 0) {
		rc = zerr();
		goto fail;
	}
	r->mon = zmq_socket(r->ctx, ZMQ_PAIR);
	if (!r->mon || zmq_connect(r->mon, monaddr) < 0) {
		rc = zerr();
		goto fail;
	}
	if (zmq_connect(r->sock, endpoint) < 0) {
		rc = zmq_errno() == EPROTONOSUPPORT ? -EINVAL : zerr();
		goto fail;
	}
	struct cistern__wire hello = {.kind = CISTERN__W_HELLO,
				      .version = CISTERN_REMOTE_PROTOCOL,
				      .a = o.window,
				      .seq = r->id};
	rc = send_hdr(r->sock, &hello, 0);
	if (rc < 0)
		goto fail;
	rc = wait_for(r, is_welcomed, connect_ms);
	if (rc == -ECONNRESET)
		rc = r->pending_err ? r->pending_err : -ECONNRESET;
	if (rc == 0 && !r->welcomed)
		rc = r->pending_err;
	if (rc < 0)
		goto fail;
	rc = start_gathering(r, o.linger_us);
	if (rc < 0)
		goto fail;
	*out = r;
	return 0;
fail:
	free_remote(r);
	return rc;
}

/* What every call checks first; takes the error the server reported, once. */
static int usable(struct cistern_remote *r)
{
	drain(r);
	if (r->pending_err) {
		int e = r->pending_err;
		r->pending_err = 0;
		return e;
	}
	return r->gone ? -ECONNRESET : 0;
}

/*
 * Take the connection's lock for a call. A fork() child's copy is refused
 * before the lock, which the parent's flusher may have held when it forked.
 */
static int enter(struct cistern_remote *r)
{
	if (!r)
		return -EINVAL;
	if (r->pid != getpid_cached())
		return -EBADF;
	pthread_mutex_lock(&r->lock);
	return 0;
}

static int leave(struct cistern_remote *r, int rc)
{
	pthread_mutex_unlock(&r->lock);
	return rc;
}

/*
 * Send the open frame, if any: its records go after its payloads, and the
 * buffer is handed to ZeroMQ without a copy. On a connection that is over
 * the frame is dropped: a server's BYE counted its samples failed, a lost
 * connection leaves them in doubt, as any unacknowledged sample (they are
 * in no segment). So is it when ZeroMQ refuses it, which ends the connection.
 */
static int send_gathered(struct cistern_remote *r)
{
	if (r->gn == 0)
		return 0;
	if (r->gone) {
		r->gn = 0;
		r->gbytes = 0;
		return -ECONNRESET;
	}
	struct cistern__wire w = {.kind = CISTERN__W_PUTS,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .a = r->gn,
				  .seq = r->sent - r->gn + 1};
	size_t recs = (size_t)r->gn * CISTERN__WIRE_REC;
	size_t size = CISTERN__WIRE_HDR + r->gbytes + recs;
	cistern__wire_encode(&w, r->gb);
	memcpy(r->gb + CISTERN__WIRE_HDR + r->gbytes, r->grec, recs);
	zmq_msg_t m;
	unsigned char *gb = r->gb;
	r->gb = NULL;
	r->gn = 0;
	r->gbytes = 0;
	r->last_send_ns = now_ns();
	if (zmq_msg_init_data(&m, gb, size, pool_put, &r->frames) < 0) {
		free(gb);
		r->gone = 1;
		return -ENOMEM;
	}
	if (zmq_msg_send(&m, r->sock, ZMQ_DONTWAIT) < 0) {
		int e = zerr();
		zmq_msg_close(&m);
		r->gone = 1;
		return e;
	}
	return 0;
}

/* A sample's flags on the wire: its end-of-episode mark, and whether it has a priority. */
static uint32_t wire_flags(const struct cistern_meta *meta, const double *prio)
{
	uint32_t f = meta && (meta->flags & CISTERN_META_END_OF_EPISODE)
			     ? CISTERN__WIRE_END_OF_EPISODE
			     : 0;
	return prio ? f | CISTERN__WIRE_PRIORITY : f;
}

/* A sample by itself, header and payload in one frame. prio: its priority, or NULL. */
static int send_one(struct cistern_remote *r, const void *buf, size_t len,
		    const struct cistern_meta *meta, const double *prio)
{
	struct cistern__wire w = {.kind = CISTERN__W_PUT,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .a = wire_flags(meta, prio),
				  .seq = r->sent + 1,
				  .b = prio ? cistern__wire_prio_bits(*prio) : 0,
				  .sim_id = meta ? meta->sim_id : 0,
				  .time_step = meta ? meta->time_step : 0};
	/*
	 * Header and payload in one frame: one copy, as zmq_send() would make,
	 * and one message for ZeroMQ to move, which delivers it whole or not at all.
	 */
	zmq_msg_t m;
	if (len > GATHER_SAMPLE_MAX) {
		unsigned char *d = pool_get(&r->large);
		if (!d)
			return -ENOMEM;
		if (zmq_msg_init_data(&m, d, CISTERN__WIRE_HDR + len, pool_put, &r->large) < 0) {
			free(d);
			return zerr();
		}
	} else if (zmq_msg_init_size(&m, CISTERN__WIRE_HDR + len) < 0) {
		return zerr();
	}
	unsigned char *d = zmq_msg_data(&m);
	cistern__wire_encode(&w, d);
	if (len)
		memcpy(d + CISTERN__WIRE_HDR, buf, len);
	if (zmq_msg_send(&m, r->sock, ZMQ_DONTWAIT) < 0) {
		int e = zerr();
		zmq_msg_close(&m);
		return e;
	}
	r->sent++;
	r->last_send_ns = now_ns();
	return 0;
}

/*
 * Hand one sample to the connection under a credit the caller checked:
 * appended to the open frame, or sent by itself when it is large, or, for
 * a put (`lone`), when gathering is off or the sample would open a frame
 * on a connection idle for a linger.
 */
static int add(struct cistern_remote *r, const void *buf, size_t len,
	       const struct cistern_meta *meta, const double *prio, bool lone)
{
	int rc;
	if (len > GATHER_SAMPLE_MAX || (lone && r->linger_ns < 0)) {
		/* after the open frame's samples, to keep their order */
		if ((rc = send_gathered(r)) < 0)
			return rc;
		return send_one(r, buf, len, meta, prio);
	}
	if (r->gn && r->gbytes + len > GATHER_BYTES && (rc = send_gathered(r)) < 0)
		return rc;
	if (r->gn == 0) {
		uint64_t t = now_ns();
		if (lone && t - r->last_send_ns >= (uint64_t)r->linger_ns)
			return send_one(r, buf, len, meta, prio);
		if (!r->gb && !(r->gb = pool_get(&r->frames)))
			return -ENOMEM;
		r->gfirst_ns = t;
		if (r->flusher_idle)
			pthread_cond_signal(&r->wake);
	}
	if (len)
		memcpy(r->gb + CISTERN__WIRE_HDR + r->gbytes, buf, len);
	unsigned char *rec = r->grec + (size_t)r->gn * CISTERN__WIRE_REC;
	cistern__wire_put32(rec, (uint32_t)len);
	cistern__wire_put32(rec + 4, meta ? meta->sim_id : 0);
	cistern__wire_put32(rec + 8, meta ? meta->time_step : 0);
	cistern__wire_put32(rec + 12, wire_flags(meta, prio));
	cistern__wire_put64(rec + 16, prio ? cistern__wire_prio_bits(*prio) : 0);
	r->gn++;
	r->gbytes += len;
	r->sent++;
	if (r->gn == r->gmax)
		return send_gathered(r);
	return 0;
}

/*
 * Wait for a credit. The open frame leaves first: its samples hold credits
 * that only their acknowledgements return.
 */
static int wait_credit(struct cistern_remote *r, int timeout_ms)
{
	if (has_credit(r))
		return 0;
	int rc = send_gathered(r);
	return rc < 0 ? rc : wait_for(r, has_credit, timeout_ms);
}

/*
 * A put reads the socket only once `sent` reaches next_read (drain() sets
 * it); below that it takes the fast way.
 */
static bool fast_put(const struct cistern_remote *r)
{
	return !r->pending_err && !r->gone && !r->done && r->sent < r->next_read && has_credit(r);
}

static int put_locked(struct cistern_remote *r, const void *buf, size_t len,
		      const struct cistern_meta *meta, const double *prio, int timeout_ms)
{
	if ((buf || !len) && len <= r->slot_size && fast_put(r))
		return add(r, buf, len, meta, prio, true);
	int rc = usable(r);
	if (rc < 0)
		return rc;
	if (!buf && len)
		return -EINVAL;
	if (r->done)
		return -EPIPE;
	if (len > r->slot_size)
		return -EMSGSIZE;
	rc = wait_credit(r, timeout_ms);
	return rc < 0 ? rc : add(r, buf, len, meta, prio, true);
}

int cistern_remote_put(struct cistern_remote *r, const void *buf, size_t len,
		       const struct cistern_meta *meta, int timeout_ms)
{
	int rc = enter(r);
	return rc < 0 ? rc : leave(r, put_locked(r, buf, len, meta, NULL, timeout_ms));
}

int cistern_remote_put_prioritized(struct cistern_remote *r, const void *buf, size_t len,
				   const struct cistern_meta *meta, double priority, int timeout_ms)
{
	int rc = enter(r);
	if (rc < 0)
		return rc;
	/* Refused here, before a credit is spent: cistern_put_prioritized()'s rule. */
	if (!isfinite(priority) || priority < 0)
		return leave(r, -EINVAL);
	/* No segment of the server takes one: said now, not by a later call. */
	if (!(r->prio_ranks & CISTERN__WELCOME_PRIO_SOME))
		return leave(r, -ENOTSUP);
	return leave(r, put_locked(r, buf, len, meta, &priority, timeout_ms));
}

static int put_batch_locked(struct cistern_remote *r, const unsigned char *buf, size_t stride,
			    size_t n, const size_t *len, const struct cistern_meta *meta,
			    int timeout_ms)
{
	int rc = fast_put(r) ? 0 : usable(r);
	if (rc < 0)
		return rc;
	if (n == 0 || n > INT_MAX || !buf)
		return -EINVAL;
	if (r->done)
		return -EPIPE;
	size_t first = len ? len[0] : stride;
	if (first > stride)
		return -EINVAL;
	if (first > r->slot_size)
		return -EMSGSIZE;
	rc = wait_credit(r, timeout_ms);
	if (rc < 0)
		return rc;
	/*
	 * As many as the credit admits, up to a sample too long (the call that
	 * meets it first says why). They are gathered as puts are; without
	 * gathering, or on an idle connection, the last frame leaves at once,
	 * since nothing says more samples follow soon.
	 */
	bool idle = r->linger_ns < 0 ||
		    (r->gn == 0 && now_ns() - r->last_send_ns >= (uint64_t)r->linger_ns);
	uint64_t credit = r->window - (r->sent - r->settled);
	size_t k = 0;
	for (; k < n && k < credit; k++) {
		size_t l = len ? len[k] : stride;
		if (l > stride || l > r->slot_size)
			break;
		rc = add(r, buf + k * stride, l, meta ? &meta[k] : NULL, NULL, false);
		if (rc < 0)
			return k ? (int)k : rc;
	}
	if (idle && (rc = send_gathered(r)) < 0)
		return rc;
	return (int)k;
}

int cistern_remote_put_batch(struct cistern_remote *r, const void *buf, size_t stride, size_t n,
			     const size_t *len, const struct cistern_meta *meta, int timeout_ms)
{
	int rc = enter(r);
	return rc < 0 ? rc : leave(r, put_batch_locked(r, buf, stride, n, len, meta, timeout_ms));
}

static int flush_locked(struct cistern_remote *r, int timeout_ms)
{
	int rc = usable(r);
	if (rc < 0)
		return rc;
	rc = send_gathered(r);
	if (rc < 0)
		return rc;
	rc = wait_for(r, all_settled, timeout_ms);
	if (rc < 0)
		return rc;
	if (r->pending_err) {
		rc = r->pending_err;
		r->pending_err = 0;
	}
	return rc;
}

int cistern_remote_flush(struct cistern_remote *r, int timeout_ms)
{
	int rc = enter(r);
	return rc < 0 ? rc : leave(r, flush_locked(r, timeout_ms));
}

static int done_locked(struct cistern_remote *r, int timeout_ms)
{
	if (r->done)
		return 0;
	int rc = flush_locked(r, timeout_ms);
	if (rc < 0)
		return rc;
	struct cistern__wire w = {
		.kind = CISTERN__W_DONE, .version = CISTERN_REMOTE_PROTOCOL, .seq = r->sent};
	rc = send_hdr(r->sock, &w, 0);
	if (rc < 0)
		return rc;
	rc = wait_for(r, is_done_ok, timeout_ms);
	if (rc < 0)
		return rc;
	r->done = 1;
	return r->done_err;
}

int cistern_remote_producer_done(struct cistern_remote *r, int timeout_ms)
{
	int rc = enter(r);
	return rc < 0 ? rc : leave(r, done_locked(r, timeout_ms));
}

int cistern_remote_info_get(const struct cistern_remote *r, struct cistern_remote_info *info)
{
	if (!r || !info)
		return -EINVAL;
	memset(info, 0, sizeof(*info));
	info->slot_size = r->slot_size;
	info->producer_id = r->id;
	info->ranks = r->ranks;
	info->window = r->window;
	info->sent = r->sent;
	info->failed = r->failed;
	info->acked = r->settled - r->failed;
	return 0;
}

ssize_t cistern_remote_schema_get(const struct cistern_remote *r, char *buf, size_t cap)
{
	if (!r || !buf)
		return -EINVAL;
	if (cap <= r->schema_len)
		return -ERANGE;
	memcpy(buf, r->schema, r->schema_len + 1);
	return (ssize_t)r->schema_len;
}

int cistern_remote_close(struct cistern_remote *r)
{
	if (!r)
		return -EINVAL;
	if (r->pid != getpid_cached()) {
		/*
		 * A fork() child's copy: the parent's ZeroMQ context, thread and
		 * lock are not ours to close.
		 */
		free(r->gb);
		free(r->grec);
		free(r);
		return 0;
	}
	stop_flusher(r);
	if (!r->gone)
		(void)send_gathered(r);
	if (!r->gone) {
		struct cistern__wire w = {
			.kind = CISTERN__W_BYE, .version = CISTERN_REMOTE_PROTOCOL, .seq = r->sent};
		/* Let the goodbye, and what was sent before it, leave for a moment. */
		int linger = 1000;
		zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger));
		(void)send_hdr(r->sock, &w, 0);
		zmq_close(r->sock);
		r->sock = NULL;
	}
	free_remote(r);
	return 0;
}

int cistern_remote_keygen(char public_key[CISTERN_KEY_LEN + 1],
			  char secret_key[CISTERN_KEY_LEN + 1])
{
	if (!public_key || !secret_key)
		return -EINVAL;
	if (!zmq_has("curve") || zmq_curve_keypair(public_key, secret_key) < 0)
		return -ENOTSUP;
	return 0;
}
