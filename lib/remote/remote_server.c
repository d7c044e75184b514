/* SPDX-License-Identifier: MIT */
/*
 * remote_server.c - the server of remote producers (docs/REMOTE.md): one
 * ZeroMQ ROUTER, R attached segments, one thread.
 *
 * Each round of cistern_server_run() reads the socket monitor (to learn of
 * dropped connections), the ZAP requests (to admit CurveZMQ clients), then
 * every message waiting on the ROUTER into per-producer queues, closes the
 * connections it stopped taking whose time came (cut_due()), then moves
 * queued samples into their segments with non-blocking puts, in order per
 * producer, and acknowledges what went in. A queue never holds more than its
 * producer's window, since a producer sends only under credit, and a full
 * segment holds up only the producers whose next sample goes to it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include "cistern.h"
#include "cistern/remote.h"
#include "remote/remote_wire.h"

enum prod_state { P_LIVE, P_CLOSING, P_DEAD };

/* Connections remembered to be closed (struct cistern_server's cuts). */
#define CUTS 64

/*
 * The socket behind a connection, so that serve can cut a connection it
 * dropped (cut_now()). ZeroMQ names a message's connection by its
 * descriptor only (ZMQ_SRCFD), and its I/O thread closes and reuses
 * descriptors as connections come and go: the socket's inode tells the
 * connection from a later one given the same descriptor.
 */
struct connid {
	int fd;    /* -1: not known (yet) */
	bool gone; /* its connection ended: never cut, never learnt again */
	dev_t dev;
	ino_t ino;
};

/*
 * A received frame with samples not yet settled: a PUT's one sample, or a
 * PUTS's run of them. The queue holds frames as they came, without a copy;
 * the samples leave it from the front.
 */
struct qframe {
	zmq_msg_t msg;
	const unsigned char *pay; /* the next sample's bytes */
	const unsigned char *rec; /* its PUTS record; NULL in a PUT */
	size_t recsz;             /* bytes of a record: cistern__wire_rec() of its producer */
	uint32_t left;            /* samples of the frame not yet settled */
	uint64_t seq;             /* the next sample's number */
	size_t len;               /* a PUT's length */
	struct cistern_meta meta; /* a PUT's meta */
	uint32_t wflags;          /* a PUT's sample flags (CISTERN__WIRE_*) */
	uint64_t prio;            /* and its priority's bits */
};

struct rprod {
	unsigned char rid[256];
	size_t rid_len;
	uint64_t id;
	int fd;             /* the connection's descriptor, matched against monitor events */
	struct connid conn; /* its socket, learnt at HELLO (learn_conn()) */
	uint32_t repeats;   /* DONE and BYE messages it repeated */
	uint32_t window;
	uint8_t version;  /* the protocol of its HELLO, which every answer carries */
	struct qframe *q; /* ring of `window` frames: each holds one sample or more */
	uint32_t fhead, flen;
	uint32_t qlen;     /* samples queued in those frames */
	uint64_t qbytes;   /* bytes of those frames not yet settled: at most held_max() */
	uint64_t received; /* last sample number received */
	uint64_t settled;  /* every sample up to it is in a segment or failed */
	uint64_t acked;    /* last ACK sent */
	uint8_t *touched;  /* ranks it sent a sample to */
	bool done_req, done;
	bool dropped; /* broke the protocol: nothing it sends any more is taken */
	uint64_t done_seq;
	enum prod_state state;
	char addr[64];
};

struct cistern_server {
	void *ctx, *router, *mon, *zap;
	uint32_t ranks;
	struct cistern **seg;
	struct cistern_config *cfg;
	uint8_t *full;              /* ranks found full this round */
	struct cistern_meta *metas; /* a run's metas for cistern_put_batch(), `window` of them */
	uint64_t slot_size;
	char schema[CISTERN_SCHEMA_MAX];
	size_t schema_len;
	uint32_t window;
	uint32_t prio_ranks; /* CISTERN__WELCOME_PRIO_*: which ranks take priorities */
	int64_t max_msg;     /* the largest message taken in (ZMQ_MAXMSGSIZE) */
	cistern_route_fn route;
	void *route_arg;
	cistern_log_fn log;
	void *log_arg;
	uint8_t (*keys)[32]; /* admitted client keys, binary */
	size_t nkeys;
	bool curve;
	bool closing;
	struct rprod **prods;
	size_t nprods, capprods;
	/*
	 * Connections accepted lately and their peers' addresses, by
	 * descriptor: a handshake that fails names only the descriptor, in the
	 * disconnection that follows it.
	 */
	struct {
		int fd;
		char addr[64];
	} accepted[64];
	size_t naccepted;
	/*
	 * Connections told by an ERROR that nothing more of theirs is taken
	 * (producers dropped, connections never welcomed), the last CUTS of
	 * them (a ring): each is answered once, so that a peer that sends
	 * without reading cannot grow the server's outgoing queue (which has
	 * no high-water mark), and its connection is cut (cut_now()) once its
	 * ERROR had time to leave or once it sent more than a window since.
	 */
	struct cut {
		unsigned char rid[256];
		size_t len;
		struct connid conn;
		uint64_t due;    /* cut then at the latest */
		uint64_t thrown; /* bytes of it thrown away since its ERROR */
		uint64_t budget; /* cut as soon as thrown passes it */
	} cuts[CUTS];
	size_t ncuts;
	/* When the monitor last reported a connection on each descriptor ended. */
	uint64_t *ended;
	size_t nended;
	uint64_t ended_unknown; /* when a report could not be kept: every descriptor in doubt */
	const char *refusing;   /* why the handshake that the next disconnection ends failed */
	uint64_t refusal_since; /* when this period of rate-limited refusal lines began */
	unsigned refusal_lines; /* lines logged in it */
	uint64_t refusals_unlogged;
	size_t rr; /* where the next round of puts starts, for fairness */
	atomic_int stop;
	struct cistern_server_stats st;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Messages read from the ROUTER per round, at most. */
#define READ_PER_ROUND 64

/*
 * A dropped connection is cut this long after its ERROR at the latest: time
 * for ZeroMQ's I/O thread to write the ERROR before the socket is shut.
 */
#define CUT_DELAY_MS 2000

/*
 * A message's descriptor is not trusted while a connection on it ended
 * less than this long ago: the message may be one that the ended
 * connection sent before, read only now (learn_conn()).
 */
#define FD_QUIET_MS 1000

/* Refusals logged one by one per period; those beyond are counted in one line. */
#define REFUSAL_LINES 5
#define REFUSAL_PERIOD_MS 10000

static int zerr(void)
{
	int e = zmq_errno();
	return e > 0 ? -e : -EIO;
}

__attribute__((format(printf, 3, 4))) static void slog(const struct cistern_server *s, int level,
						       const char *fmt, ...)
{
	if (!s->log)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->log(level, line, s->log_arg);
}

/* A new period of refusal lines once the last one is over, or at stop (`force`). */
static void refusals_flush(struct cistern_server *s, uint64_t now, bool force)
{
	if (!force && now - s->refusal_since < REFUSAL_PERIOD_MS)
		return;
	if (s->refusals_unlogged)
		slog(s, 1, "%llu more clients refused in the last %llu s, not logged one by one",
		     (unsigned long long)s->refusals_unlogged,
		     (unsigned long long)(now - s->refusal_since + 999) / 1000);
	s->refusal_since = now;
	s->refusal_lines = 0;
	s->refusals_unlogged = 0;
}

/*
 * Count a refused client and log it, at most REFUSAL_LINES lines per
 * REFUSAL_PERIOD_MS: a flood of refused clients fills no disk.
 */
__attribute__((format(printf, 2, 3))) static void refusal(struct cistern_server *s, const char *fmt,
							  ...)
{
	s->st.refused++;
	refusals_flush(s, now_ms(), false);
	if (s->refusal_lines >= REFUSAL_LINES) {
		s->refusals_unlogged++;
		return;
	}
	s->refusal_lines++;
	if (!s->log)
		return;
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	s->log(1, line, s->log_arg);
}

int cistern__endpoint_is_local(const char *ep)
{
	/* An abstract socket (ipc://@name) has no file permissions: any local user connects. */
	if (strncmp(ep, "ipc://", 6) == 0)
		return ep[6] != '@';
	if (strncmp(ep, "tcp://", 6) != 0)
		return 0;
	const char *h = ep + 6;
	if (strncmp(h, "127.", 4) == 0) {
		/* 127.a.b.c:port, digits and dots only up to the colon */
		for (const char *p = h + 4; *p && *p != ':'; p++)
			if (!((*p >= '0' && *p <= '9') || *p == '.'))
				return 0;
		return strchr(h, ':') != NULL;
	}
	return strncmp(h, "[::1]:", 6) == 0 || strncmp(h, "localhost:", 10) == 0;
}

static int send_to(struct cistern_server *s, const struct rprod *p, const struct cistern__wire *w,
		   const void *extra, size_t extra_len, bool with_extra)
{
	unsigned char hdr[CISTERN__WIRE_HDR];
	cistern__wire_encode(w, hdr);
	if (zmq_send(s->router, p->rid, p->rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
		return zerr();
	s->st.bytes_out += p->rid_len;
	if (zmq_send(s->router, hdr, sizeof(hdr), (with_extra ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT) <
	    0)
		return zerr();
	s->st.bytes_out += sizeof(hdr);
	if (with_extra && zmq_send(s->router, extra, extra_len, ZMQ_DONTWAIT) < 0)
		return zerr();
	s->st.bytes_out += with_extra ? extra_len : 0;
	return 0;
}

static void send_kind(struct cistern_server *s, const struct rprod *p, uint8_t kind, uint64_t seq,
		      uint32_t a)
{
	/* A connection without a producer yet is answered in the newest version. */
	uint8_t v = p->version ? p->version : CISTERN_REMOTE_PROTOCOL;
	struct cistern__wire w = {.kind = kind, .version = v, .seq = seq, .a = a};
	(void)send_to(s, p, &w, NULL, 0, false);
}

static void read_monitor(struct cistern_server *s);

/* The bytes a window of `window` samples holds, each a slot and a record at most. */
static uint64_t window_bytes(const struct cistern_server *s, uint32_t window)
{
	return (uint64_t)window * (s->slot_size + CISTERN__WIRE_HDR + CISTERN__WIRE_REC);
}

/* The monitor reported a connection on descriptor fd ended. */
static void note_ended(struct cistern_server *s, int fd)
{
	if (fd < 0)
		return;
	if ((size_t)fd >= s->nended) {
		size_t n = (size_t)fd + 64;
		uint64_t *e = realloc(s->ended, n * sizeof(*e));
		if (!e) {
			s->ended_unknown = now_ms();
			return;
		}
		memset(e + s->nended, 0, (n - s->nended) * sizeof(*e));
		s->ended = e;
		s->nended = n;
	}
	s->ended[fd] = now_ms();
}

/*
 * Learn the socket of a message's connection, if it is not known yet:
 * its descriptor (ZMQ_SRCFD: none when ZeroMQ gives no metadata) and that
 * descriptor's inode now.
 *
 * The descriptor may already name another connection: the message's may
 * have ended, and its descriptor gone to a newer one, before the message
 * was read. The monitor is read first, so that an end reported before the
 * message was received is known (ZeroMQ reports it before closing the
 * descriptor, so before any reuse of it); a descriptor on which a
 * connection ended within FD_QUIET_MS is not trusted, and a later message
 * of the connection tries again. A message read later than that after its
 * connection ended (serve that far behind its socket) is the one case
 * that can still name the wrong socket.
 */
static void learn_conn(struct cistern_server *s, struct connid *c, zmq_msg_t *msg)
{
	if (c->fd >= 0 || c->gone)
		return;
	int fd = zmq_msg_get(msg, ZMQ_SRCFD);
	if (fd < 0)
		return;
	read_monitor(s);
	uint64_t now = now_ms();
	if (now - s->ended_unknown < FD_QUIET_MS ||
	    ((size_t)fd < s->nended && s->ended[fd] && now - s->ended[fd] < FD_QUIET_MS))
		return;
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	c->fd = fd;
	c->dev = st.st_dev;
	c->ino = st.st_ino;
}

/*
 * Cut a connection: shut its socket both ways. ZeroMQ's I/O thread owns
 * the descriptor and closes it: it reads the end of the stream and ends
 * the connection as if the peer had hung up. Over ipc the peer's writes
 * fail at once. Over TCP the socket lingers 0 s, so that its close resets
 * the connection: closed gently, it would wait in FIN_WAIT2 with the
 * window it last advertised, which is 0 if the peer filled it, and a peer
 * that still sends would wait on it without being told.
 *
 * The descriptor is duplicated first and the inode checked on the
 * duplicate: the duplicate names one socket whatever the I/O thread does
 * meanwhile, so a descriptor closed and given to another connection since
 * the inode was learnt shows another inode and is left alone (a socket's
 * inode is not reused while the socket is open).
 */
static void cut_now(struct connid *c)
{
	if (c->fd < 0 || c->gone)
		return;
	int d = fcntl(c->fd, F_DUPFD_CLOEXEC, 0);
	if (d < 0) {
		if (errno == EBADF)
			c->gone = true;
		return; /* no descriptor free: tried again next round */
	}
	struct stat st;
	if (fstat(d, &st) == 0 && st.st_dev == c->dev && st.st_ino == c->ino) {
		struct linger reset = {.l_onoff = 1, .l_linger = 0};
		(void)setsockopt(d, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
		(void)shutdown(d, SHUT_RDWR);
	}
	close(d);
	c->gone = true;
}

static struct cut *cut_of(struct cistern_server *s, const void *rid, size_t len)
{
	for (size_t i = 0; i < CUTS && i < s->ncuts; i++)
		if (s->cuts[i].len == len && memcmp(s->cuts[i].rid, rid, len) == 0)
			return &s->cuts[i];
	return NULL;
}

/*
 * A connection was told nothing more of it is taken: it is to be cut. The
 * oldest entry makes room, cut at once if it was still waiting.
 */
static struct cut *cut_later(struct cistern_server *s, const void *rid, size_t len,
			     const struct connid *conn, uint64_t budget)
{
	struct cut *c = &s->cuts[s->ncuts++ % CUTS];
	if (c->len)
		cut_now(&c->conn);
	memcpy(c->rid, rid, len);
	c->len = len;
	c->conn = conn ? *conn : (struct connid){.fd = -1};
	c->due = now_ms() + CUT_DELAY_MS;
	c->thrown = 0;
	c->budget = budget;
	return c;
}

/* A message of `bytes` of a connection to be cut was thrown away. */
static void thrown_away(struct cistern_server *s, zmq_msg_t *ridm, zmq_msg_t *hdrm, uint64_t bytes)
{
	struct cut *c = cut_of(s, zmq_msg_data(ridm), zmq_msg_size(ridm));
	if (!c)
		return;
	learn_conn(s, &c->conn, hdrm);
	c->thrown += bytes;
	if (c->thrown > c->budget || now_ms() >= c->due)
		cut_now(&c->conn);
}

/* Cut the connections whose ERROR had its time. */
static void cut_due(struct cistern_server *s)
{
	uint64_t now = now_ms();
	for (size_t i = 0; i < CUTS && i < s->ncuts; i++)
		if (now >= s->cuts[i].due)
			cut_now(&s->cuts[i].conn);
}

/*
 * ERROR `err` (none if 0) to a connection that has no producer, unless it
 * was answered already; its connection is then cut. It may send up to a window of the
 * server's before it is cut early: a producer whose server restarted has
 * that much on its way.
 */
static void answer_unknown(struct cistern_server *s, zmq_msg_t *ridm, zmq_msg_t *hdrm, uint32_t err)
{
	size_t len = zmq_msg_size(ridm);
	if (cut_of(s, zmq_msg_data(ridm), len))
		return;
	struct rprod tmp = {0};
	memcpy(tmp.rid, zmq_msg_data(ridm), len);
	tmp.rid_len = len;
	if (err)
		send_kind(s, &tmp, CISTERN__W_ERROR, 0, err);
	struct cut *c = cut_later(s, tmp.rid, len, NULL, window_bytes(s, s->window));
	learn_conn(s, &c->conn, hdrm);
}

static struct rprod *find(struct cistern_server *s, const void *rid, size_t len)
{
	for (size_t i = 0; i < s->nprods; i++) {
		struct rprod *p = s->prods[i];
		if (p->rid_len == len && memcmp(p->rid, rid, len) == 0 && p->state != P_DEAD)
			return p;
	}
	/* a dead producer's messages that were on their way still count */
	for (size_t i = 0; i < s->nprods; i++) {
		struct rprod *p = s->prods[i];
		if (p->rid_len == len && memcmp(p->rid, rid, len) == 0)
			return p;
	}
	return NULL;
}

static void free_prod(struct rprod *p)
{
	for (uint32_t i = 0; i < p->flen; i++)
		zmq_msg_close(&p->q[(p->fhead + i) % p->window].msg);
	free(p->q);
	free(p->touched);
	free(p);
}

static void set_dead(struct cistern_server *s, struct rprod *p, const char *why)
{
	if (p->state == P_DEAD)
		return;
	bool was_closing = p->state == P_CLOSING;
	p->state = P_DEAD;
	if (was_closing || p->done)
		return; /* it said goodbye or was done: a clean end */
	slog(s, 1, "producer %016llx (%s) lost: %s; %u samples of it queued",
	     (unsigned long long)p->id, p->addr, why, p->qlen);
}

/*
 * A producer that broke the protocol: it is told (ERROR, EPROTO) and
 * nothing it sends from now on is taken, while the samples it sent before
 * are put as those of a producer that died. A ROUTER cannot close a
 * connection: serve cuts it (cut_later()), and reads and throws away what
 * comes until then, up to what its window held.
 */
static void drop(struct cistern_server *s, struct rprod *p, const char *why)
{
	if (p->dropped)
		return;
	p->dropped = true;
	slog(s, 1, "producer %016llx (%s) dropped: %s; the %u samples it sent before are still put",
	     (unsigned long long)p->id, p->addr, why, p->qlen);
	p->state = P_DEAD;
	send_kind(s, p, CISTERN__W_ERROR, p->settled, EPROTO);
	(void)cut_later(s, p->rid, p->rid_len, &p->conn, window_bytes(s, p->window));
}

/* The end of a producer whose queue is empty: count it done or died as a local one. */
static void finish(struct cistern_server *s, size_t idx)
{
	struct rprod *p = s->prods[idx];
	if (!p->done && p->state == P_DEAD) {
		s->st.died++;
		for (uint32_t r = 0; r < s->ranks; r++) {
			if (!p->touched[r] || s->cfg[r].expected_producers == 0)
				continue;
			int left = cistern_producer_died(s->seg[r]);
			if (s->cfg[r].flags & CISTERN_DEAD_PRODUCER_DONE) {
				slog(s, 1,
				     "producer %016llx died before done: counted died, so ended, "
				     "on rank %u (%d still expected)",
				     (unsigned long long)p->id, r, left);
			} else {
				slog(s, 1,
				     "producer %016llx died before done: counted died on rank %u, "
				     "which waits for a replacement",
				     (unsigned long long)p->id, r);
			}
		}
	} else if (!p->done) {
		slog(s, 0, "producer %016llx closed after %llu samples", (unsigned long long)p->id,
		     (unsigned long long)p->settled);
	}
	free_prod(p);
	s->prods[idx] = s->prods[--s->nprods];
}

static void hello(struct cistern_server *s, zmq_msg_t *ridm, zmq_msg_t *hdrm,
		  const struct cistern__wire *w)
{
	struct rprod *known = find(s, zmq_msg_data(ridm), zmq_msg_size(ridm));
	if (known) {
		/* A connection says HELLO once: one that repeats it could loop for ever. */
		if (known->state != P_DEAD)
			drop(s, known, "a second HELLO");
		return;
	}
	if (cut_of(s, zmq_msg_data(ridm), zmq_msg_size(ridm)))
		return; /* a connection refused once is not welcomed after */
	struct rprod tmp = {0};
	memcpy(tmp.rid, zmq_msg_data(ridm), zmq_msg_size(ridm));
	tmp.rid_len = zmq_msg_size(ridm);
	if (w->version < CISTERN__REMOTE_PROTOCOL_MIN || w->version > CISTERN_REMOTE_PROTOCOL ||
	    w->zero) {
		refusal(s,
			"refused a producer speaking protocol %u%s (this server speaks %u to %u)",
			w->version, w->zero ? " with non-zero reserved bytes" : "",
			CISTERN__REMOTE_PROTOCOL_MIN, CISTERN_REMOTE_PROTOCOL);
		answer_unknown(s, ridm, hdrm, EPROTONOSUPPORT);
		return;
	}
	if (s->closing) {
		answer_unknown(s, ridm, hdrm, ECONNRESET);
		return;
	}
	struct rprod *p = calloc(1, sizeof(*p));
	if (!p)
		return;
	*p = tmp;
	p->id = w->seq;
	p->version = w->version;
	p->fd = zmq_msg_get(hdrm, ZMQ_SRCFD);
	p->conn.fd = -1;
	const char *addr = zmq_msg_gets(hdrm, "Peer-Address");
	snprintf(p->addr, sizeof(p->addr), "%s", addr ? addr : "local");
	p->window = w->a && w->a < s->window ? w->a : s->window;
	p->q = calloc(p->window, sizeof(*p->q));
	p->touched = calloc(s->ranks, 1);
	if (s->nprods == s->capprods) {
		size_t cap = s->capprods ? 2 * s->capprods : 16;
		struct rprod **np = realloc(s->prods, cap * sizeof(*np));
		if (np) {
			s->prods = np;
			s->capprods = cap;
		}
	}
	if (!p->q || !p->touched || s->nprods == s->capprods) {
		free(p->q);
		free(p->touched);
		free(p);
		send_kind(s, &tmp, CISTERN__W_ERROR, 0, ENOMEM);
		return;
	}
	s->prods[s->nprods++] = p;
	/*
	 * Learnt once it is listed: the monitor read meanwhile finds it if its
	 * connection already ended, as the next round's read would.
	 */
	learn_conn(s, &p->conn, hdrm);
	s->st.producers++;
	s->st.credits_granted += p->window; /* the WELCOME's window: credits for as many samples */
	struct cistern__wire wel = {.kind = CISTERN__W_WELCOME,
				    .version = p->version,
				    .a = p->window,
				    .b = s->slot_size,
				    .sim_id = s->ranks,
				    .time_step = p->version >= 3 ? s->prio_ranks : 0};
	(void)send_to(s, p, &wel, s->schema, s->schema_len, true);
	slog(s, 0, "producer %016llx connected from %s (window %u, protocol %u)",
	     (unsigned long long)p->id, p->addr, p->window, p->version);
}

/* Throw away the rest of a message; the bytes it held. */
static uint64_t drop_rest(void *sock)
{
	int64_t more = 0;
	size_t ml = sizeof(more);
	uint64_t bytes = 0;
	while (zmq_getsockopt(sock, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, sock, 0) >= 0)
			bytes += zmq_msg_size(&m);
		zmq_msg_close(&m);
	}
	return bytes;
}

/*
 * The bytes a producer's queue may hold: its window of samples, each at
 * most a slot and a record, in as many frames (docs/REMOTE.md, "Memory").
 */
static uint64_t held_max(const struct cistern_server *s, const struct rprod *p)
{
	return window_bytes(s, p->window);
}

/* A version 3 sample's flags and priority bits: known flags, and a priority only if flagged. */
static bool wire_flags_ok(uint32_t flags, uint64_t prio)
{
	return !(flags & ~CISTERN__WIRE_FLAGS) && ((flags & CISTERN__WIRE_PRIORITY) || prio == 0);
}

/*
 * Queue a PUT or PUTS frame of k samples as it is: the frame moves into the
 * queue, no byte is copied. A frame out of sequence, beyond the window or
 * the bytes a window holds, after DONE, or whose records do not add up to
 * its size drops its producer.
 */
static void queue_frame(struct cistern_server *s, struct rprod *p, zmq_msg_t *frame,
			const struct cistern__wire *w)
{
	size_t size = zmq_msg_size(frame);
	const unsigned char *d = zmq_msg_data(frame);
	uint64_t k = w->kind == CISTERN__W_PUT ? 1 : w->a;
	char why[128];
	if (p->done_req) {
		drop(s, p, "a sample after its DONE");
		return;
	}
	if (w->seq != p->received + 1) {
		snprintf(why, sizeof(why), "sample %llu out of sequence (%llu expected)",
			 (unsigned long long)w->seq, (unsigned long long)p->received + 1);
		drop(s, p, why);
		return;
	}
	if (k == 0) {
		drop(s, p, "a batch of no samples");
		return;
	}
	if (k > p->window - p->qlen) {
		snprintf(why, sizeof(why), "%llu samples with %u queued, beyond its window of %u",
			 (unsigned long long)k, p->qlen, p->window);
		drop(s, p, why);
		return;
	}
	if (p->qbytes + size > held_max(s, p)) {
		snprintf(why, sizeof(why),
			 "more bytes in flight than its window of slots holds (%llu)",
			 (unsigned long long)held_max(s, p));
		drop(s, p, why);
		return;
	}
	const unsigned char *recs = NULL;
	size_t recsz = cistern__wire_rec(p->version);
	if (w->kind == CISTERN__W_PUT && p->version >= 3 && !wire_flags_ok(w->a, w->b)) {
		drop(s, p, "a sample with unknown flags, or a priority it does not flag");
		return;
	}
	if (w->kind == CISTERN__W_PUTS) {
		if (k > (size - CISTERN__WIRE_HDR) / recsz) {
			drop(s, p, "a batch shorter than its records");
			return;
		}
		recs = d + size - k * recsz;
		uint64_t need = CISTERN__WIRE_HDR + k * recsz;
		bool ok = true;
		for (uint64_t j = 0; j < k && need <= size; j++) {
			const unsigned char *rec = recs + j * recsz;
			need += cistern__wire_get32(rec);
			/* Version 2: the fourth field is reserved; version 3: the flags. */
			ok = ok && (p->version >= 3 ? wire_flags_ok(cistern__wire_get32(rec + 12),
								    cistern__wire_get64(rec + 16))
						    : cistern__wire_get32(rec + 12) == 0);
		}
		if (need != size || !ok) {
			drop(s, p,
			     need != size      ? "a batch whose records do not add up to its size"
			     : p->version >= 3 ? "a batch record with unknown flags, or a priority "
						 "it does not flag"
					       : "a batch record with non-zero reserved bytes");
			return;
		}
	}
	struct qframe *f = &p->q[(p->fhead + p->flen) % p->window];
	zmq_msg_init(&f->msg);
	zmq_msg_move(&f->msg, frame);
	f->pay = (const unsigned char *)zmq_msg_data(&f->msg) + CISTERN__WIRE_HDR;
	f->rec = recs ? (const unsigned char *)zmq_msg_data(&f->msg) + (recs - d) : NULL;
	f->recsz = recsz;
	f->left = (uint32_t)k;
	f->seq = w->seq;
	f->len = size - CISTERN__WIRE_HDR;
	/* Version 2 has no flags: its PUT's a and b were never given a meaning. */
	f->wflags = p->version >= 3 && w->kind == CISTERN__W_PUT ? w->a : 0;
	f->prio = f->wflags & CISTERN__WIRE_PRIORITY ? w->b : 0;
	f->meta = (struct cistern_meta){.sim_id = w->sim_id,
					.time_step = w->time_step,
					.flags = f->wflags & CISTERN__WIRE_END_OF_EPISODE};
	p->flen++;
	p->qlen += (uint32_t)k;
	p->qbytes += size;
	p->received = w->seq + k - 1;
	s->st.received += k;
	s->st.queued += k;
	if (s->st.queued > s->st.queued_max)
		s->st.queued_max = s->st.queued;
}

/* Read one message from the ROUTER; 0 when there is none. */
static int read_one(struct cistern_server *s)
{
	zmq_msg_t ridm, hdrm;
	zmq_msg_init(&ridm);
	if (zmq_msg_recv(&ridm, s->router, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&ridm);
		return 0;
	}
	s->st.bytes_in += zmq_msg_size(&ridm);
	zmq_msg_init(&hdrm);
	if (!zmq_msg_more(&ridm) || zmq_msg_recv(&hdrm, s->router, 0) < 0) {
		zmq_msg_close(&hdrm);
		zmq_msg_close(&ridm);
		return 1;
	}
	s->st.bytes_in += zmq_msg_size(&hdrm);
	/* Taken now: a PUT's frame moves into the queue. */
	bool more = zmq_msg_more(&hdrm);
	struct cistern__wire w;
	struct rprod *p = find(s, zmq_msg_data(&ridm), zmq_msg_size(&ridm));
	if (p && p->dropped)
		goto out; /* nothing more of it is taken */
	if (cistern__wire_decode(zmq_msg_data(&hdrm), zmq_msg_size(&hdrm), &w) < 0) {
		if (p)
			drop(s, p, "a message shorter than a header");
		else
			answer_unknown(s, &ridm, &hdrm, EPROTO);
		goto out;
	}
	if (w.kind == CISTERN__W_HELLO) {
		hello(s, &ridm, &hdrm, &w);
		goto out;
	}
	if (!p) {
		/*
		 * A connection this server never welcomed (it restarted, say),
		 * or whose producer ended: cut, and told unless it says BYE.
		 */
		answer_unknown(s, &ridm, &hdrm, w.kind == CISTERN__W_BYE ? 0 : ECONNRESET);
		goto out;
	}
	if (w.version != p->version || w.zero) {
		char why[96] = "a message with non-zero reserved bytes";
		if (!w.zero)
			snprintf(why, sizeof(why),
				 "a message of protocol version %u (its HELLO said %u)", w.version,
				 p->version);
		drop(s, p, why);
		goto out;
	}
	switch (w.kind) {
	case CISTERN__W_PUT:
	case CISTERN__W_PUTS:
		/* After BYE was decided nothing is put: its producer counts it failed. */
		if (!s->closing)
			queue_frame(s, p, &hdrm, &w);
		break;
	case CISTERN__W_DONE:
	case CISTERN__W_BYE:
		/*
		 * A producer repeats DONE after a wait for DONE_OK that timed
		 * out: one that repeats them more than its window loops, and is
		 * dropped.
		 */
		if ((w.kind == CISTERN__W_DONE ? p->done_req : p->state != P_LIVE) &&
		    ++p->repeats > p->window) {
			drop(s, p, "more repeated DONE and BYE messages than its window");
			break;
		}
		if (w.kind == CISTERN__W_BYE) {
			if (p->state == P_LIVE)
				p->state = P_CLOSING;
			break;
		}
		p->done_req = true;
		p->done_seq = w.seq;
		break;
	default:
		drop(s, p, "a message of an unknown kind");
		break;
	}
out:;
	/* A frame that says it is the last spares asking the socket. */
	uint64_t bytes = zmq_msg_size(&ridm) + zmq_msg_size(&hdrm) +
			 (more ? drop_rest(s->router) : 0);
	s->st.bytes_in += bytes - zmq_msg_size(&ridm) - zmq_msg_size(&hdrm);
	/* Counted against the connection's cut: a message of one dropped or never welcomed. */
	if (!p || p->dropped)
		thrown_away(s, &ridm, &hdrm, bytes);
	zmq_msg_close(&hdrm);
	zmq_msg_close(&ridm);
	return 1;
}

/* The peer address of an accepted connection's descriptor, as "ip:port". */
static void peer_name(int fd, char *out, size_t cap)
{
	struct sockaddr_storage a;
	socklen_t al = sizeof(a);
	char ip[INET6_ADDRSTRLEN] = "";
	snprintf(out, cap, "a local process");
	if (getpeername(fd, (struct sockaddr *)&a, &al) < 0)
		return;
	if (a.ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)&a;
		inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
		snprintf(out, cap, "%s:%u", ip, ntohs(in->sin_port));
	} else if (a.ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&a;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
		snprintf(out, cap, "[%s]:%u", ip, ntohs(in6->sin6_port));
	}
}

static const char *handshake_failure(uint16_t event, int32_t value)
{
	if (event == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL)
		return "its handshake did not complete";
	switch (value) {
	case ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
		return "it speaks another security mechanism (CurveZMQ on one side only)";
	case ZMQ_PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
		return "its CurveZMQ handshake failed (a wrong server key?)";
	default:
		return "its handshake broke the ZeroMQ protocol";
	}
}

/*
 * Read the socket monitor: connections accepted (their peers' addresses
 * kept), handshakes that failed (the client refused, logged once its
 * disconnection names it; a refused key is logged by read_zap()), and
 * disconnections (a producer lost).
 */
static void read_monitor(struct cistern_server *s)
{
	for (;;) {
		zmq_msg_t ev;
		zmq_msg_init(&ev);
		if (zmq_msg_recv(&ev, s->mon, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&ev);
			return;
		}
		uint16_t event = 0;
		int32_t value = -1;
		if (zmq_msg_size(&ev) >= 6) {
			memcpy(&event, zmq_msg_data(&ev), sizeof(event));
			memcpy(&value, (const char *)zmq_msg_data(&ev) + 2, sizeof(value));
		}
		zmq_msg_close(&ev);
		/* the second frame, the local endpoint, is not needed */
		char ep[256];
		(void)zmq_recv(s->mon, ep, sizeof(ep), 0);
		switch (event) {
		case ZMQ_EVENT_ACCEPTED: {
			size_t slot = s->naccepted++ %
				      (sizeof(s->accepted) / sizeof(s->accepted[0]));
			s->accepted[slot].fd = value;
			peer_name(value, s->accepted[slot].addr, sizeof(s->accepted[slot].addr));
			break;
		}
		case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
		case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
			s->refusing = handshake_failure(event, value);
			break;
		case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
			s->refusing = NULL; /* read_zap() logged it with its key */
			break;
		case ZMQ_EVENT_DISCONNECTED: {
			if (s->refusing) {
				const char *addr = "an unknown address";
				for (size_t i = 0; i < sizeof(s->accepted) / sizeof(s->accepted[0]);
				     i++)
					if (s->accepted[i].fd == value && s->accepted[i].addr[0])
						addr = s->accepted[i].addr;
				refusal(s, "refused a client from %s: %s", addr, s->refusing);
				s->refusing = NULL;
			}
			for (size_t i = 0; i < s->nprods; i++) {
				if (s->prods[i]->conn.fd == value)
					s->prods[i]->conn.gone = true;
				if (s->prods[i]->fd == value && s->prods[i]->state != P_DEAD)
					set_dead(s, s->prods[i], "connection dropped");
			}
			/* The connection on it ended: nothing to cut, and the descriptor may be reused. */
			for (size_t i = 0; i < CUTS; i++)
				if (s->cuts[i].len && s->cuts[i].conn.fd == value)
					s->cuts[i].conn.gone = true;
			note_ended(s, value);
			break;
		}
		default:
			break;
		}
	}
}

/* Answer the ZAP requests: admit the listed CurveZMQ client keys only. */
static void read_zap(struct cistern_server *s)
{
	if (!s->zap)
		return;
	for (;;) {
		char frames[7][256];
		size_t len[7] = {0};
		int nf = 0;
		int more = 1;
		while (more) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, s->zap, nf == 0 ? ZMQ_DONTWAIT : 0) < 0) {
				zmq_msg_close(&m);
				if (nf == 0)
					return;
				break;
			}
			if (nf < 7) {
				size_t l = zmq_msg_size(&m) < 255 ? zmq_msg_size(&m) : 255;
				memcpy(frames[nf], zmq_msg_data(&m), l);
				frames[nf][l] = '\0';
				len[nf] = l;
			}
			nf++;
			more = zmq_msg_more(&m);
			zmq_msg_close(&m);
		}
		bool ok = false;
		char z85[CISTERN_KEY_LEN + 1] = "?";
		if (nf >= 7 && len[6] == 32 && strcmp(frames[5], "CURVE") == 0) {
			zmq_z85_encode(z85, (const uint8_t *)frames[6], 32);
			for (size_t k = 0; k < s->nkeys && !ok; k++)
				ok = memcmp(s->keys[k], frames[6], 32) == 0;
		}
		if (!ok)
			refusal(s, "refused a client from %s: key %s is not admitted",
				nf >= 4 ? frames[3] : "?", z85);
		const char *code = ok ? "200" : "400";
		const char *text = ok ? "OK" : "key not admitted";
		zmq_send(s->zap, "1.0", 3, ZMQ_SNDMORE);
		zmq_send(s->zap, frames[1], nf >= 2 ? len[1] : 0, ZMQ_SNDMORE);
		zmq_send(s->zap, code, 3, ZMQ_SNDMORE);
		zmq_send(s->zap, text, strlen(text), ZMQ_SNDMORE);
		zmq_send(s->zap, ok ? z85 : "", ok ? strlen(z85) : 0, ZMQ_SNDMORE);
		zmq_send(s->zap, "", 0, 0);
	}
}

static size_t sample_len(const struct qframe *f, uint32_t i)
{
	return f->rec ? cistern__wire_get32(f->rec + (size_t)i * f->recsz) : f->len;
}

/* Sample i's flags (CISTERN__WIRE_*): 0 in version 2. */
static uint32_t sample_wflags(const struct qframe *f, uint32_t i)
{
	if (!f->rec)
		return f->wflags;
	return f->recsz >= CISTERN__WIRE_REC
		       ? cistern__wire_get32(f->rec + (size_t)i * f->recsz + 12)
		       : 0;
}

static struct cistern_meta sample_meta(const struct qframe *f, uint32_t i)
{
	if (!f->rec)
		return f->meta;
	const unsigned char *r = f->rec + (size_t)i * f->recsz;
	return (struct cistern_meta){.sim_id = cistern__wire_get32(r + 4),
				     .time_step = cistern__wire_get32(r + 8),
				     .flags = sample_wflags(f, i) & CISTERN__WIRE_END_OF_EPISODE};
}

/* Sample i's priority, if it was given one (CISTERN__WIRE_PRIORITY). */
static bool sample_prio(const struct qframe *f, uint32_t i, double *prio)
{
	if (!(sample_wflags(f, i) & CISTERN__WIRE_PRIORITY))
		return false;
	*prio = cistern__wire_prio(f->rec ? cistern__wire_get64(f->rec + (size_t)i * f->recsz + 16)
					  : f->prio);
	return true;
}

static uint32_t rank_of(const struct cistern_server *s, const struct cistern_meta *m)
{
	return s->route ? s->route(m, s->ranks, s->route_arg) : m->sim_id % s->ranks;
}

/* The first n samples of p's head frame left the queue, put or failed. */
static void pop_head(struct cistern_server *s, struct rprod *p, uint32_t n, size_t bytes)
{
	struct qframe *f = &p->q[p->fhead];
	f->pay += bytes;
	p->qbytes -= bytes;
	if (f->rec) {
		f->rec += (size_t)n * f->recsz;
		p->qbytes -= (size_t)n * f->recsz;
	}
	f->left -= n;
	f->seq += n;
	p->settled = f->seq - 1;
	p->qlen -= n;
	s->st.queued -= n;
	if (f->left == 0) {
		p->qbytes -= CISTERN__WIRE_HDR;
		zmq_msg_close(&f->msg);
		p->fhead = (p->fhead + 1) % p->window;
		p->flen--;
	}
}

static void fail_head(struct cistern_server *s, struct rprod *p, int err)
{
	struct qframe *f = &p->q[p->fhead];
	send_kind(s, p, CISTERN__W_FAIL, f->seq, (uint32_t)-err);
	s->st.failed++;
	pop_head(s, p, 1, sample_len(f, 0));
}

/*
 * Put the head of p's queue, a sample with a priority, into rank's segment
 * by cistern_put_prioritized(), as put_head() puts a run. A segment that is
 * not prioritized fails it with -ENOTSUP: the priority is not dropped
 * silently. A priority that is not finite and >= 0 fails it with -EINVAL.
 */
static int put_prioritized(struct cistern_server *s, struct rprod *p, uint32_t rank, double prio,
			   int timeout_ms)
{
	struct qframe *f = &p->q[p->fhead];
	size_t len = sample_len(f, 0);
	if (s->cfg[rank].policy != CISTERN_PRIORITIZED) {
		fail_head(s, p, -ENOTSUP);
		return 1;
	}
	if (s->full[rank] && timeout_ms == 0)
		return 0;
	int rc = cistern_put_prioritized(s->seg[rank], f->pay, len, &s->metas[0], prio, timeout_ms);
	if (rc == -EAGAIN || rc == -ETIMEDOUT || rc == -EBUSY) {
		s->full[rank] = 1;
		return 0;
	}
	if (rc < 0) {
		fail_head(s, p, rc);
		return 1;
	}
	p->touched[rank] = 1;
	s->st.put++;
	pop_head(s, p, 1, len);
	return 1;
}

/*
 * Put the head of p's queue into its segment, waiting up to timeout_ms for
 * room: the first sample and those after it in the same frame that have its
 * length and rank, in one cistern_put_batch() (one wake of the segment's
 * readers for the run, not one per sample). 1: samples left the queue (put,
 * or failed and reported); 0: the segment is full (marked in s->full).
 */
static int put_head(struct cistern_server *s, struct rprod *p, int timeout_ms)
{
	struct qframe *f = &p->q[p->fhead];
	size_t len = sample_len(f, 0);
	s->metas[0] = sample_meta(f, 0);
	uint32_t rank = rank_of(s, &s->metas[0]);
	if (rank >= s->ranks) {
		fail_head(s, p, -ERANGE);
		return 1;
	}
	double prio;
	if (sample_prio(f, 0, &prio))
		return put_prioritized(s, p, rank, prio, timeout_ms);
	if (s->full[rank] && timeout_ms == 0)
		return 0;
	uint32_t n = 1;
	double unused;
	while (len && n < f->left && sample_len(f, n) == len && !sample_prio(f, n, &unused)) {
		s->metas[n] = sample_meta(f, n);
		if (rank_of(s, &s->metas[n]) != rank)
			break;
		n++;
	}
	int rc = cistern_put_batch(s->seg[rank], f->pay, len, n, NULL, s->metas, timeout_ms);
	if (rc == -EAGAIN || rc == -ETIMEDOUT || rc == -EBUSY) {
		s->full[rank] = 1;
		return 0;
	}
	if (rc < 0) {
		fail_head(s, p, rc);
		return 1;
	}
	uint32_t put = (uint32_t)rc;
	p->touched[rank] = 1;
	s->st.put += put;
	pop_head(s, p, put, (size_t)put * len);
	/* Fewer than the run: the segment is full for now. */
	if (put < n)
		s->full[rank] = 1;
	return 1;
}

/*
 * Every producer has samples queued, all waiting for full segments, and
 * nothing is to be read: sleep in a put of the first waiting head, which
 * the segment's learners wake as soon as they free a slot, instead of
 * sleeping a fixed time and retrying. While one producer has nothing
 * queued its next message may be for a segment with room, which must not
 * wait for this one: then the caller polls the sockets as before. The wait
 * is short (as the retry's was), since the socket is not watched meanwhile;
 * returns whether it waited.
 */
static bool wait_room(struct cistern_server *s, long wait_ms)
{
	for (size_t i = 0; i < s->nprods; i++)
		if (s->prods[i]->qlen == 0)
			return false;
	zmq_pollitem_t items[3] = {
		{.socket = s->router, .events = ZMQ_POLLIN},
		{.socket = s->mon, .events = ZMQ_POLLIN},
		{.socket = s->zap, .events = ZMQ_POLLIN},
	};
	if (wait_ms <= 0 || zmq_poll(items, s->zap ? 3 : 2, 0) != 0)
		return false;
	for (size_t i = 0; i < s->nprods; i++) {
		struct rprod *p = s->prods[(s->rr + i) % s->nprods];
		if (p->qlen) {
			(void)put_head(s, p, (int)wait_ms);
			return true;
		}
	}
	return false;
}

/* Move queued samples into their segments; returns how many are still queued. */
static uint64_t move(struct cistern_server *s)
{
	memset(s->full, 0, s->ranks);
	size_t n = s->nprods;
	for (size_t k = 0; k < n; k++) {
		struct rprod *p = s->prods[(s->rr + k) % n];
		/*
		 * A quarter window acknowledged as soon as it is in, so that the
		 * producer sends its next samples while this round puts the rest.
		 */
		uint64_t step = p->window / 4 ? p->window / 4 : 1;
		while (p->qlen && put_head(s, p, 0)) {
			if (p->settled - p->acked >= step && p->state != P_DEAD) {
				send_kind(s, p, CISTERN__W_ACK, p->settled, 0);
				s->st.credits_granted += p->settled - p->acked;
				p->acked = p->settled;
			}
		}
	}
	if (n)
		s->rr = (s->rr + 1) % n;
	for (size_t i = 0; i < s->nprods; i++) {
		struct rprod *p = s->prods[i];
		if (p->settled != p->acked && p->state != P_DEAD) {
			send_kind(s, p, CISTERN__W_ACK, p->settled, 0);
			s->st.credits_granted += p->settled - p->acked;
			p->acked = p->settled;
		}
		if (p->done_req && !p->done && p->qlen == 0 && p->settled >= p->done_seq) {
			int err = 0;
			for (uint32_t r = 0; r < s->ranks; r++) {
				if (!p->touched[r] || s->cfg[r].expected_producers == 0)
					continue;
				int left = cistern_producer_done(s->seg[r]);
				if (left < 0 && err == 0)
					err = left;
			}
			p->done = true;
			s->st.done++;
			send_kind(s, p, CISTERN__W_DONE_OK, p->settled, (uint32_t)-err);
			slog(s, 0, "producer %016llx done after %llu samples",
			     (unsigned long long)p->id, (unsigned long long)p->settled);
		}
	}
	return s->st.queued;
}

/* Free the producers that ended and hold nothing queued. */
static void reap(struct cistern_server *s)
{
	for (size_t i = 0; i < s->nprods;) {
		struct rprod *p = s->prods[i];
		if (p->state != P_LIVE && p->qlen == 0)
			finish(s, i);
		else
			i++;
	}
	uint64_t live = 0;
	for (size_t i = 0; i < s->nprods; i++)
		live += s->prods[i]->state == P_LIVE;
	s->st.live = live;
}

static void pump(struct cistern_server *s, bool read_router)
{
	read_monitor(s);
	read_zap(s);
	/*
	 * A bounded number per round, so that a busy socket cannot starve the
	 * puts, and acknowledgements (credits) go back while more arrive.
	 */
	for (int i = 0; read_router && i < READ_PER_ROUND && read_one(s); i++)
		;
	read_monitor(s);
	cut_due(s);
	refusals_flush(s, now_ms(), false);
}

int cistern_server_run(struct cistern_server *s, int timeout_ms)
{
	if (!s)
		return -EINVAL;
	uint64_t deadline = timeout_ms >= 0 ? now_ms() + (uint64_t)timeout_ms : 0;
	/*
	 * Relaxed: the flag only asks for a return; the loop's state is this
	 * thread's own, nothing else is published through it.
	 */
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		pump(s, true);
		uint64_t queued = move(s);
		reap(s);
		long wait = queued ? 2 : 100; /* a full segment is retried soon */
		if (timeout_ms >= 0) {
			uint64_t t = now_ms();
			if (t >= deadline)
				break;
			if ((uint64_t)wait > deadline - t)
				wait = (long)(deadline - t);
		}
		if (queued && wait_room(s, wait))
			continue;
		zmq_pollitem_t items[3] = {
			{.socket = s->router, .events = ZMQ_POLLIN},
			{.socket = s->mon, .events = ZMQ_POLLIN},
			{.socket = s->zap, .events = ZMQ_POLLIN},
		};
		if (zmq_poll(items, s->zap ? 3 : 2, wait) < 0 && zmq_errno() != EINTR)
			return zerr();
	}
	atomic_store_explicit(&s->stop, 0, memory_order_relaxed);
	return 0;
}

void cistern_server_stop(struct cistern_server *s)
{
	if (s)
		atomic_store_explicit(&s->stop, 1, memory_order_relaxed);
}

int cistern_server_stats_get(const struct cistern_server *s, struct cistern_server_stats *st)
{
	if (!s || !st)
		return -EINVAL;
	/* The fields of the first version only: a caller built then has room for no more. */
	memcpy(st, &s->st, CISTERN_SERVER_STATS_SIZE_V1);
	return 0;
}

int cistern_server_stats_read(const struct cistern_server *s, struct cistern_server_stats *st,
			      size_t size)
{
	if (!s || !st || size < CISTERN_SERVER_STATS_SIZE_V1)
		return -EINVAL;
	struct cistern_server_stats now = s->st;
	/* Credits the connected producers may still use: each one's window less what is in flight. */
	now.credits_outstanding = 0;
	for (size_t i = 0; i < s->nprods; i++) {
		const struct rprod *p = s->prods[i];
		uint64_t used = p->received - p->acked;
		if (p->state == P_LIVE && !p->dropped && used < p->window)
			now.credits_outstanding += p->window - used;
	}
	size_t n = size < sizeof(now) ? size : sizeof(now);
	memcpy(st, &now, n);
	return (int)n;
}

static void free_server(struct cistern_server *s)
{
	for (size_t i = 0; i < s->nprods; i++)
		free_prod(s->prods[i]);
	free(s->prods);
	/*
	 * Nothing the ZAP handler or the monitor still holds may keep
	 * zmq_ctx_term() waiting: stopping is bounded by the router's linger.
	 */
	int zero = 0;
	/*
	 * The monitor stops first: an event the router raises while it closes
	 * (a connection dropped) would go to a monitor socket already gone,
	 * and libzmq does not free an event it fails to send.
	 */
	if (s->router)
		(void)zmq_socket_monitor(s->router, NULL, 0);
	if (s->zap) {
		zmq_setsockopt(s->zap, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(s->zap);
	}
	if (s->mon) {
		zmq_setsockopt(s->mon, ZMQ_LINGER, &zero, sizeof(zero));
		zmq_close(s->mon);
	}
	if (s->router)
		zmq_close(s->router);
	if (s->ctx)
		zmq_ctx_term(s->ctx);
	if (s->seg)
		for (uint32_t r = 0; r < s->ranks; r++)
			if (s->seg[r])
				cistern_detach(s->seg[r]);
	free(s->seg);
	free(s->cfg);
	free(s->full);
	free(s->metas);
	free(s->keys);
	free(s->ended);
	free(s);
}

/* How long a stop waits, at most, for the producers it said BYE to to go. */
#define BYE_WAIT_MS 1000

/* Whether a producer's connection is still up. */
static bool producers_connected(const struct cistern_server *s)
{
	for (size_t i = 0; i < s->nprods; i++)
		if (s->prods[i]->state != P_DEAD)
			return true;
	return false;
}

int cistern_server_close(struct cistern_server *s, int drain_timeout_ms)
{
	if (!s)
		return -EINVAL;
	/*
	 * What the producers sent so far is read and put. The drain timeout
	 * bounds it all: producers that keep connecting and sending cannot
	 * hold the stop up.
	 */
	uint64_t deadline = now_ms() + (uint64_t)(drain_timeout_ms > 0 ? drain_timeout_ms : 0);
	for (;;) {
		uint64_t before = s->st.received;
		pump(s, true);
		if (s->st.received == before || now_ms() >= deadline)
			break;
	}
	s->closing = true;
	uint64_t queued;
	while ((queued = move(s)) != 0 && now_ms() < deadline) {
		pump(s, true);
		zmq_poll(NULL, 0, 2);
	}
	int rc = 0;
	if (queued) {
		rc = -ETIMEDOUT;
		slog(s, 1,
		     "stopping: %llu samples could not be put in time, their producers are told",
		     (unsigned long long)queued);
		for (size_t i = 0; i < s->nprods; i++)
			while (s->prods[i]->qlen)
				fail_head(s, s->prods[i], -ETIMEDOUT);
	}
	move(s); /* the last acknowledgements */
	for (size_t i = 0; i < s->nprods; i++) {
		struct rprod *p = s->prods[i];
		if (p->state != P_DEAD)
			send_kind(s, p, CISTERN__W_BYE, p->settled, 0);
	}
	/*
	 * The last FAILs, ACKs and BYEs leave while the socket is still open
	 * and read, for up to BYE_WAIT_MS or until every producer told has
	 * gone; then it closes without linger. Lingering in zmq_ctx_term()
	 * instead, libzmq 4.3 can abort (assertion !_io_error) or never
	 * return when a peer still sends to a socket that is closing with
	 * messages for it: a stop must neither crash nor hang.
	 */
	uint64_t bye_end = now_ms() + BYE_WAIT_MS;
	while (producers_connected(s) && now_ms() < bye_end) {
		zmq_pollitem_t items[2] = {
			{.socket = s->router, .events = ZMQ_POLLIN},
			{.socket = s->mon, .events = ZMQ_POLLIN},
		};
		(void)zmq_poll(items, 2, 10);
		pump(s, true);
	}
	refusals_flush(s, now_ms(), true);
	int linger = 0;
	zmq_setsockopt(s->router, ZMQ_LINGER, &linger, sizeof(linger));
	slog(s, 0,
	     "stopped: %llu producers served, %llu samples put, %llu failed, %llu refused clients",
	     (unsigned long long)s->st.producers, (unsigned long long)s->st.put,
	     (unsigned long long)s->st.failed, (unsigned long long)s->st.refused);
	free_server(s);
	return rc;
}

static int setup_curve(struct cistern_server *s, const struct cistern_server_opts *o)
{
	uint8_t bin[32];
	if (!o->secret_key || strlen(o->secret_key) != CISTERN_KEY_LEN ||
	    !zmq_z85_decode(bin, o->secret_key)) {
		slog(s, 2, "the server's secret key is not a 40-character Z85 key");
		return -EINVAL;
	}
	if (o->n_client_keys == 0) {
		slog(s, 2, "CurveZMQ needs at least one admitted client key");
		return -EINVAL;
	}
	s->keys = calloc(o->n_client_keys, sizeof(*s->keys));
	if (!s->keys)
		return -ENOMEM;
	for (size_t k = 0; k < o->n_client_keys; k++) {
		const char *ck = o->client_keys[k];
		if (!ck || strlen(ck) != CISTERN_KEY_LEN || !zmq_z85_decode(s->keys[k], ck)) {
			slog(s, 2, "client key %zu is not a 40-character Z85 key", k + 1);
			return -EINVAL;
		}
	}
	s->nkeys = o->n_client_keys;
	s->zap = zmq_socket(s->ctx, ZMQ_REP);
	if (!s->zap || zmq_bind(s->zap, "inproc://zeromq.zap.01") < 0)
		return zerr();
	int one = 1;
	if (zmq_setsockopt(s->router, ZMQ_CURVE_SERVER, &one, sizeof(one)) < 0 ||
	    zmq_setsockopt(s->router, ZMQ_CURVE_SECRETKEY, o->secret_key, CISTERN_KEY_LEN) < 0 ||
	    zmq_setsockopt(s->router, ZMQ_ZAP_DOMAIN, "cistern", 7) < 0)
		return zerr();
	s->curve = true;
	return 0;
}

static int attach_all(struct cistern_server *s, const struct cistern_server_opts *o)
{
	s->seg = calloc(s->ranks, sizeof(*s->seg));
	s->cfg = calloc(s->ranks, sizeof(*s->cfg));
	s->full = calloc(s->ranks, 1);
	if (!s->seg || !s->cfg || !s->full)
		return -ENOMEM;
	for (uint32_t r = 0; r < s->ranks; r++) {
		const char *name = o->segments[r];
		/*
		 * Populated: a server runs long and writes every slot, and a
		 * (re)started one should not pay a page fault per 4 KiB of its
		 * first pass while producers wait for credits.
		 */
		int rc = name ? cistern_attach_flags(
					name, o->attach_flags | CISTERN_ATTACH_POPULATE, &s->seg[r])
			      : -EINVAL;
		if (rc < 0) {
			slog(s, 2, "rank %u: cannot attach segment %s: %s", r,
			     name ? name : "(null)", cistern_strerror(rc));
			return rc;
		}
		cistern_config_get(s->seg[r], &s->cfg[r]);
		char schema[CISTERN_SCHEMA_MAX];
		ssize_t sl = cistern_schema_get(s->seg[r], schema, sizeof(schema));
		if (sl < 0)
			return (int)sl;
		if (r == 0) {
			memcpy(s->schema, schema, (size_t)sl + 1);
			s->schema_len = (size_t)sl;
			s->slot_size = s->cfg[r].slot_size;
		} else if (strcmp(schema, s->schema) != 0) {
			slog(s, 2, "rank %u: segment %s has another schema than rank 0's", r, name);
			return -EINVAL;
		}
		if (s->cfg[r].slot_size < s->slot_size)
			s->slot_size = s->cfg[r].slot_size;
		/* cfg.schema points into the handle; only its flags and counts are kept */
		s->cfg[r].schema = NULL;
		bool prio = s->cfg[r].policy == CISTERN_PRIORITIZED;
		if (prio)
			s->prio_ranks |= CISTERN__WELCOME_PRIO_SOME;
		if (r == 0 ? prio : (s->prio_ranks & CISTERN__WELCOME_PRIO_ALL) && prio)
			s->prio_ranks |= CISTERN__WELCOME_PRIO_ALL;
		else
			s->prio_ranks &= ~CISTERN__WELCOME_PRIO_ALL;
		slog(s, 0, "rank %u: segment %s (%s, %llu slots of %llu bytes)", r, name,
		     cistern_policy_name(s->cfg[r].policy),
		     (unsigned long long)s->cfg[r].slot_count,
		     (unsigned long long)s->cfg[r].slot_size);
	}
	return 0;
}

int cistern_server_create(const struct cistern_server_opts *opts, struct cistern_server **out)
{
	if (!opts || !out || opts->size < sizeof(struct cistern_server_opts))
		return -EINVAL;
	*out = NULL;
	const struct cistern_server_opts *o = opts;
	struct cistern_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->log = o->log;
	s->log_arg = o->log_arg;
	s->route = o->route;
	s->route_arg = o->route_arg;
	s->window = o->window ? o->window : CISTERN_REMOTE_WINDOW;
	s->ranks = o->ranks;
	int rc = -EINVAL;
	if (o->reserved_ || o->ranks == 0 || !o->segments || o->n_endpoints == 0 || !o->endpoints) {
		slog(s, 2, "a server needs at least one segment and one endpoint");
		goto fail;
	}
	bool keys = o->secret_key || o->public_key || o->n_client_keys;
	for (size_t i = 0; i < o->n_endpoints; i++) {
		const char *ep = o->endpoints[i];
		if (!ep || (strncmp(ep, "tcp://", 6) != 0 && strncmp(ep, "ipc://", 6) != 0)) {
			slog(s, 2, "endpoint %s: only tcp:// and ipc:// are served",
			     ep ? ep : "(null)");
			goto fail;
		}
		if (!keys && strncmp(ep, "ipc://@", 7) == 0) {
			slog(s, 2,
			     "endpoint %s is an abstract socket, which has no file permissions "
			     "(any local user can connect): binding it needs CurveZMQ keys (the "
			     "server's key pair and the admitted client keys)",
			     ep);
			rc = -EACCES;
			goto fail;
		}
		if (!keys && !cistern__endpoint_is_local(ep)) {
			slog(s, 2,
			     "endpoint %s is not loopback: binding it needs CurveZMQ keys (the "
			     "server's key pair and the admitted client keys)",
			     ep);
			rc = -EACCES;
			goto fail;
		}
	}
	if (keys && !zmq_has("curve")) {
		slog(s, 2, "this libzmq has no CurveZMQ");
		rc = -ENOTSUP;
		goto fail;
	}
	rc = attach_all(s, o);
	if (rc < 0)
		goto fail;
	if (!o->window) {
		uint64_t fit = CISTERN_REMOTE_WINDOW_BYTES / (s->slot_size ? s->slot_size : 1);
		s->window = fit < 16                      ? 16
			    : fit < CISTERN_REMOTE_WINDOW ? (uint32_t)fit
							  : CISTERN_REMOTE_WINDOW;
	}
	rc = -ENOMEM;
	s->metas = calloc(s->window, sizeof(*s->metas));
	if (!s->metas)
		goto fail;
	s->ctx = zmq_ctx_new();
	if (!s->ctx)
		goto fail;
	s->router = zmq_socket(s->ctx, ZMQ_ROUTER);
	if (!s->router) {
		rc = zerr();
		goto fail;
	}
	/*
	 * A message is at most a slot, or a PUTS of gathered samples and a
	 * window of records, with room for CurveZMQ's framing. ZeroMQ refuses
	 * a larger one from the size its frame announces, before storing any
	 * of it, and drops the connection, HELLO said or not.
	 */
	/* Records of the newest version, the largest. */
	uint64_t puts = CISTERN__WIRE_GATHER_BYTES + (uint64_t)s->window * CISTERN__WIRE_REC;
	s->max_msg = (int64_t)(CISTERN__WIRE_HDR + (s->slot_size > puts ? s->slot_size : puts) +
			       1024);
	/*
	 * No high-water marks: a producer's window bounds what goes back (its
	 * acknowledgements and failures) and what it sends. A receive mark
	 * would pause a connection's input, and libzmq 4.3 aborts (assertion
	 * !_io_error) when it then writes to a connection that dropped while
	 * paused: a peer could end the server. What a connection sends beyond
	 * its window is read as it comes and thrown away with its producer,
	 * and the connection is closed below ZeroMQ (cut_later()).
	 */
	int zero = 0;
	int ivl = o->heartbeat_ivl_ms > 0 ? o->heartbeat_ivl_ms : 1000;
	int hb_timeout = o->heartbeat_timeout_ms > 0 ? o->heartbeat_timeout_ms : 5 * ivl;
	zmq_setsockopt(s->router, ZMQ_SNDHWM, &zero, sizeof(zero));
	zmq_setsockopt(s->router, ZMQ_RCVHWM, &zero, sizeof(zero));
	zmq_setsockopt(s->router, ZMQ_MAXMSGSIZE, &s->max_msg, sizeof(s->max_msg));
	zmq_setsockopt(s->router, ZMQ_HEARTBEAT_IVL, &ivl, sizeof(ivl));
	zmq_setsockopt(s->router, ZMQ_HEARTBEAT_TIMEOUT, &hb_timeout, sizeof(hb_timeout));
	zmq_setsockopt(s->router, ZMQ_HEARTBEAT_TTL, &hb_timeout, sizeof(hb_timeout));
	if (keys) {
		rc = setup_curve(s, o);
		if (rc < 0)
			goto fail;
	}
	char monaddr[64];
	snprintf(monaddr, sizeof(monaddr), "inproc://cistern-server-mon-%p", (void *)s);
	if (zmq_socket_monitor(s->router, monaddr,
			       ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED |
				       ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
				       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
				       ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) < 0) {
		rc = zerr();
		goto fail;
	}
	s->mon = zmq_socket(s->ctx, ZMQ_PAIR);
	if (!s->mon || zmq_connect(s->mon, monaddr) < 0) {
		rc = zerr();
		goto fail;
	}
	for (size_t i = 0; i < o->n_endpoints; i++) {
		/*
		 * ZeroMQ binds addresses and interface names, not host names:
		 * localhost is bound as 127.0.0.1. An IPv6 address needs ZMQ_IPV6.
		 */
		const char *ep = o->endpoints[i];
		char local[300];
		if (strncmp(ep, "tcp://localhost:", 16) == 0) {
			snprintf(local, sizeof(local), "tcp://127.0.0.1:%s", ep + 16);
			ep = local;
		}
		int ipv6 = strncmp(ep, "tcp://[", 7) == 0;
		if (zmq_setsockopt(s->router, ZMQ_IPV6, &ipv6, sizeof(ipv6)) < 0 ||
		    zmq_bind(s->router, ep) < 0) {
			rc = zerr();
			slog(s, 2, "cannot bind %s: %s", o->endpoints[i],
			     zmq_strerror(zmq_errno()));
			goto fail;
		}
		char last[256] = "";
		size_t ll = sizeof(last);
		zmq_getsockopt(s->router, ZMQ_LAST_ENDPOINT, last, &ll);
		slog(s, 0, "listening on %s%s", last, s->curve ? " (CurveZMQ)" : "");
	}
	*out = s;
	return 0;
fail:
	free_server(s);
	return rc;
}
