/* SPDX-License-Identifier: MIT */
/*
 * remote.c - a remote producer: a ZeroMQ DEALER connected to a server's
 * ROUTER (docs/REMOTE.md). The connection has no thread of its own: every
 * call reads what the server sent (acknowledgements, failures, goodbye) and
 * the socket monitor's events before it decides, so a call that waits for
 * credit waits in zmq_poll() on both.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <zmq.h>

#include "cistern.h"
#include "remote_wire.h"

struct cistern_remote {
	void *ctx;
	void *sock;
	void *mon; /* PAIR receiving the DEALER's monitor events */
	uint64_t id;
	uint64_t slot_size;
	uint32_t ranks;
	uint32_t window;
	uint64_t sent;    /* samples handed to the socket; the last seq */
	uint64_t settled; /* every sample up to it is acked or failed */
	uint64_t failed;
	int pending_err; /* an error the server reported, not yet returned */
	int gone;        /* the session is over: -ECONNRESET from now on */
	int done;        /* producer_done() went through: puts are -EPIPE */
	int welcomed;
	int done_ok;  /* DONE_OK received */
	int done_err; /* its status */
	pid_t pid;    /* the process that connected: a fork()ed child must not use it */
	size_t schema_len;
	char schema[CISTERN_SCHEMA_MAX];
};

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

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
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

/* Read every message waiting now. */
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

static void free_remote(struct cistern_remote *r)
{
	if (r->mon)
		zmq_close(r->mon);
	if (r->sock) {
		int linger = 0;
		zmq_setsockopt(r->sock, ZMQ_LINGER, &linger, sizeof(linger));
		zmq_close(r->sock);
	}
	if (r->ctx)
		zmq_ctx_term(r->ctx);
	free(r);
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
		if (opts->size < offsetof(struct cistern_remote_opts, reserved_) + sizeof(uint32_t))
			return -EINVAL;
		memcpy(&o, opts, sizeof(o));
		if (o.reserved_ != 0)
			return -EINVAL;
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
	*out = r;
	return 0;
fail:
	free_remote(r);
	return rc;
}

/* What every call checks first; takes the error the server reported, once. */
static int usable(struct cistern_remote *r)
{
	if (!r)
		return -EINVAL;
	if (r->pid != getpid_cached())
		return -EBADF;
	drain(r);
	if (r->pending_err) {
		int e = r->pending_err;
		r->pending_err = 0;
		return e;
	}
	return r->gone ? -ECONNRESET : 0;
}

static int send_one(struct cistern_remote *r, const void *buf, size_t len,
		    const struct cistern_meta *meta)
{
	struct cistern__wire w = {.kind = CISTERN__W_PUT,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .seq = r->sent + 1,
				  .sim_id = meta ? meta->sim_id : 0,
				  .time_step = meta ? meta->time_step : 0};
	/*
	 * Header and payload in one frame: one copy, as zmq_send() would make,
	 * and one message for ZeroMQ to move, which delivers it whole or not at all.
	 */
	zmq_msg_t m;
	if (zmq_msg_init_size(&m, CISTERN__WIRE_HDR + len) < 0)
		return zerr();
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
	return 0;
}

/*
 * A put that needs no wait skips reading the socket but every 64th time:
 * each ZeroMQ call costs system calls, and a credit counted on acks read
 * a little late is only a smaller one. Errors and goodbyes wait at most
 * that long to be seen; their accounting does not depend on when.
 */
static bool fast_put(const struct cistern_remote *r)
{
	return r->pid == getpid_cached() && !r->pending_err && !r->gone && !r->done &&
	       (r->sent & 63) != 0 && has_credit(r);
}

int cistern_remote_put(struct cistern_remote *r, const void *buf, size_t len,
		       const struct cistern_meta *meta, int timeout_ms)
{
	if (r && (buf || !len) && len <= r->slot_size && fast_put(r))
		return send_one(r, buf, len, meta);
	int rc = usable(r);
	if (rc < 0)
		return rc;
	if (!buf && len)
		return -EINVAL;
	if (r->done)
		return -EPIPE;
	if (len > r->slot_size)
		return -EMSGSIZE;
	rc = wait_for(r, has_credit, timeout_ms);
	if (rc < 0)
		return rc;
	return send_one(r, buf, len, meta);
}

int cistern_remote_put_batch(struct cistern_remote *r, const void *buf, size_t stride, size_t n,
			     const size_t *len, const struct cistern_meta *meta, int timeout_ms)
{
	int rc = r && fast_put(r) ? 0 : usable(r);
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
	rc = has_credit(r) ? 0 : wait_for(r, has_credit, timeout_ms);
	if (rc < 0)
		return rc;
	/* As many as the credit admits, up to a sample too long (the call that meets it first says why). */
	const unsigned char *p = buf;
	uint64_t credit = r->window - (r->sent - r->settled);
	size_t k = 0, bytes = 0;
	for (; k < n && k < credit; k++) {
		size_t l = len ? len[k] : stride;
		if (l > stride || l > r->slot_size)
			break;
		bytes += l;
	}
	if (k == 1)
		return (rc = send_one(r, p, first, meta)) < 0 ? rc : 1;
	/* One frame for the k samples: one ZeroMQ message, delivered whole. */
	zmq_msg_t m;
	if (zmq_msg_init_size(&m, CISTERN__WIRE_HDR + k * CISTERN__WIRE_REC + bytes) < 0)
		return zerr();
	unsigned char *d = zmq_msg_data(&m);
	struct cistern__wire w = {.kind = CISTERN__W_PUTS,
				  .version = CISTERN_REMOTE_PROTOCOL,
				  .a = (uint32_t)k,
				  .seq = r->sent + 1};
	cistern__wire_encode(&w, d);
	unsigned char *rec = d + CISTERN__WIRE_HDR;
	unsigned char *pay = rec + k * CISTERN__WIRE_REC;
	for (size_t i = 0; i < k; i++, rec += CISTERN__WIRE_REC) {
		size_t l = len ? len[i] : stride;
		cistern__wire_put32(rec, (uint32_t)l);
		cistern__wire_put32(rec + 4, meta ? meta[i].sim_id : 0);
		cistern__wire_put32(rec + 8, meta ? meta[i].time_step : 0);
		cistern__wire_put32(rec + 12, 0);
		if (l)
			memcpy(pay, p + i * stride, l);
		pay += l;
	}
	if (zmq_msg_send(&m, r->sock, ZMQ_DONTWAIT) < 0) {
		rc = zerr();
		zmq_msg_close(&m);
		return rc;
	}
	r->sent += k;
	return (int)k;
}

int cistern_remote_flush(struct cistern_remote *r, int timeout_ms)
{
	int rc = usable(r);
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

int cistern_remote_producer_done(struct cistern_remote *r, int timeout_ms)
{
	if (r && r->done)
		return 0;
	int rc = cistern_remote_flush(r, timeout_ms);
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
		/* A fork() child's copy: the parent's ZeroMQ context is not ours to close. */
		free(r);
		return 0;
	}
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
