/* SPDX-License-Identifier: MIT */
/*
 * cistern/remote.h - remote producers and the server that puts what they send into segments.
 *
 * These calls live in libcistern-remote, the one cistern library that links
 * ZeroMQ (pkg-config cistern-remote, or the CMake target cistern::remote).
 * A program that uses only cistern.h links libcistern alone and needs no
 * ZeroMQ. The conventions of cistern.h hold here too.
 */
#ifndef CISTERN_REMOTE_H
#define CISTERN_REMOTE_H

#include <cistern.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* Remote producers and the server (lib/remote*.c, docs/REMOTE.md)          */
/* ======================================================================== */

/*
 * Producers on other machines put samples into segments through a server
 * (`cistern serve`, or cistern_server_run() in a program of one's own) over
 * ZeroMQ: the server binds a ROUTER socket on tcp:// or ipc:// endpoints and
 * puts what it receives into R local segments, one per learner rank; each
 * remote producer is a DEALER. docs/REMOTE.md gives the wire protocol and
 * what is guaranteed.
 *
 * Credits: the server grants each connection a window of samples in flight
 * (sent but not yet in a segment); a put waits, up to its timeout, while the
 * window is full, so a full segment slows its remote producers and neither
 * side holds more than the window. Acknowledgements are cumulative: a sample
 * is acknowledged once it is in its segment (whole, exactly once).
 *
 * Gathering: small puts (up to 16 KiB) that follow each other closely share
 * one ZeroMQ message of up to 64 KiB, which the server puts with one
 * cistern_put_batch(). The message leaves when it is full, when a call must
 * wait for credit, on flush, producer_done and close, or at the latest a
 * linger (cistern_remote_opts.linger_us, 1 ms by default) after its first
 * sample, sent by the connection's own thread. A put on a connection idle
 * for a linger leaves at once.
 *
 * Routing: the sample with sim_id s goes to rank s mod R, unless a
 * cistern_route_fn says otherwise, so every simulation stays on one rank.
 *
 * Security: a server binds loopback (tcp://127.0.0.1, tcp://[::1],
 * tcp://localhost, ipc://) without keys; any other endpoint needs CurveZMQ
 * keys (its secret key and the public keys of the clients it admits), or the
 * server refuses to start. Keys are 40-character Z85 strings.
 *
 * A struct cistern_remote belongs to one thread at a time, as a struct
 * cistern does (the connection's own thread, which sends a gathered message
 * when its linger runs out, takes a lock the calls take too); after fork()
 * the child must not use its parent's connection (it may
 * cistern_remote_connect() its own).
 */

/** Length of a CurveZMQ key in its Z85 text form, without the terminating NUL. */
#define CISTERN_KEY_LEN 40
/**
 * The protocol version that HELLO carries (see docs/REMOTE.md). Version 3
 * carries each sample's end-of-episode mark and priority. A server of
 * version 3 also welcomes producers of version 2; a server of version 2
 * refuses a producer of version 3, whose connect then fails
 * -EPROTONOSUPPORT.
 */
#define CISTERN_REMOTE_PROTOCOL 3
/**
 * Default window, the samples a connection may have in flight: at most
 * this many, and at most as many as fit in CISTERN_REMOTE_WINDOW_BYTES of
 * slots (at least 16).
 */
#define CISTERN_REMOTE_WINDOW 4096
/** Bytes of slot_size the default window may cover. */
#define CISTERN_REMOTE_WINDOW_BYTES (UINT64_C(64) << 20)

/** An opaque connection of a remote producer to a server. */
struct cistern_remote;

/**
 * Options of cistern_remote_connect(). Zero-initialise, then set `size` to
 * sizeof(struct cistern_remote_opts): fields a later version appends are
 * then read as 0 by it. NULL opts is all defaults (no CurveZMQ).
 */
struct cistern_remote_opts {
	size_t size; /**< sizeof(struct cistern_remote_opts) */
	/** the server's public key (Z85), or NULL for a server without CurveZMQ */
	const char *server_key;
	/** this client's key pair (Z85), needed with server_key; NULL: a fresh pair */
	const char *public_key;
	const char *secret_key;
	/** how long connect waits for the server's answer; 0 = 5000 ms, < 0 forever */
	int connect_timeout_ms;
	/** ZeroMQ heartbeat interval on the connection; 0 = 1000 ms */
	int heartbeat_ivl_ms;
	/** a peer silent this long is taken for dead; 0 = 5 * heartbeat_ivl_ms */
	int heartbeat_timeout_ms;
	/** samples in flight asked for; 0 = what the server grants (it may grant fewer) */
	uint32_t window;
	/**
	 * how long a small put may wait to leave with the puts after it (see
	 * cistern_remote_put()); 0 = 1000 us; < 0: every put leaves by itself
	 */
	int32_t linger_us;
};

/** What a connection knows of its server, and its counts (cistern_remote_info_get()). */
struct cistern_remote_info {
	uint64_t slot_size; /**< largest payload: the smallest slot_size of the server's segments */
	uint64_t producer_id; /**< this connection's random 64-bit id, in the server's log */
	uint32_t ranks;       /**< segments the server routes to */
	uint32_t window;      /**< samples in flight granted */
	uint64_t sent;        /**< samples handed to the connection */
	uint64_t acked;       /**< of those, acknowledged: in their segment */
	uint64_t failed;      /**< of those, refused by the server (see cistern_remote_put()) */
};

/**
 * Connect to a server and say HELLO; returns once the server answered.
 * @param endpoint "tcp://HOST:PORT" or "ipc://PATH"
 * @param opts     may be NULL
 * @return 0; -EINVAL (bad endpoint or options, a key that is not Z85);
 *         -ETIMEDOUT if no answer came in time (a client the server refuses
 *         for its key gets no answer: ZeroMQ drops it silently);
 *         -EPROTONOSUPPORT if the server speaks another protocol version;
 *         -ENOTSUP for keys without CurveZMQ in libzmq; -ENOMEM.
 */
CISTERN_API int cistern_remote_connect(const char *endpoint, const struct cistern_remote_opts *opts,
				       struct cistern_remote **out);

/**
 * Send `len` bytes as one sample, as cistern_put() puts one: meta->sim_id
 * (which picks the rank), time_step and flags (CISTERN_META_END_OF_EPISODE,
 * which a SimPairedReservoir keeps) are taken; meta may be NULL (sim_id
 * 0). meta->sample_id is not written: the segment assigns it later. Returns
 * once the sample is handed to the connection under a credit, waiting while
 * the window is full: sent, or gathered to leave within the linger (see
 * "Gathering" above); either way `buf` may be reused at once. An error the server met with an earlier sample (the
 * segment's -EPIPE once reception closed, -ERANGE) is returned by the next
 * call, once; that sample counts as failed, not acked.
 * @return 0; -EMSGSIZE if len > slot_size; -EAGAIN/-ETIMEDOUT while the
 *         window stays full; -ECONNRESET once the server is gone or stopped
 *         (close and connect again; docs/REMOTE.md says which samples are in
 *         doubt); -EPIPE, -ERANGE as above; -EINVAL.
 */
CISTERN_API int cistern_remote_put(struct cistern_remote *r, const void *buf, size_t len,
				   const struct cistern_meta *meta, int timeout_ms);

/**
 * Send one sample with priority `priority`, as cistern_put_prioritized()
 * puts one, into a prioritized segment (CISTERN_PRIORITIZED); otherwise as
 * cistern_remote_put(). A sample sent without a priority gets the largest
 * seen so far, as cistern_put() gives it.
 * @return the returns of cistern_remote_put(); -EINVAL for a priority that
 *         is NaN, infinite or negative (nothing is sent); -ENOTSUP if none
 *         of the server's segments is prioritized (nothing is sent). A
 *         sample routed to a segment that is not prioritized, when some
 *         others are, fails with -ENOTSUP on the server, returned by a
 *         later call as any error of an earlier sample.
 */
CISTERN_API int cistern_remote_put_prioritized(struct cistern_remote *r, const void *buf,
					       size_t len, const struct cistern_meta *meta,
					       double priority, int timeout_ms);

/**
 * Send up to `n` samples, laid out as for cistern_put_batch(): sample i is the
 * len[i] bytes at buf + i * stride (len NULL: stride bytes each), meta[i] its
 * meta (may be NULL). Sends as many as the window admits now, or, if none,
 * waits for the first as cistern_remote_put() does. The samples are gathered
 * as puts are, even with gathering off for puts; on an idle connection, or
 * with gathering off, the last message leaves before the call returns.
 * @return the number sent (1 to n); the errors of cistern_remote_put();
 *         -EINVAL (n = 0 or above INT_MAX, buf NULL, len[i] > stride).
 */
CISTERN_API int cistern_remote_put_batch(struct cistern_remote *r, const void *buf, size_t stride,
					 size_t n, const size_t *len,
					 const struct cistern_meta *meta, int timeout_ms);

/**
 * Wait until every sample sent so far is acknowledged or failed.
 * @return 0; -ETIMEDOUT/-EAGAIN; -ECONNRESET once the server is gone or
 *         stopped (as every call on the connection from then on:
 *         cistern_remote_info_get() says which samples are in); the first
 *         error the server reported since the last call that returned one.
 */
CISTERN_API int cistern_remote_flush(struct cistern_remote *r, int timeout_ms);

/**
 * Flush, then declare this producer done, as cistern_producer_done() does:
 * the server counts it done on every rank it sent a sample to whose segment
 * expects producers (cfg.expected_producers > 0). Further puts fail -EPIPE.
 * @return 0; the errors of cistern_remote_flush().
 */
CISTERN_API int cistern_remote_producer_done(struct cistern_remote *r, int timeout_ms);

/** The server's parameters and this connection's counts. @return 0 or -EINVAL. */
CISTERN_API int cistern_remote_info_get(const struct cistern_remote *r,
					struct cistern_remote_info *info);

/**
 * The schema of the server's segments (they all have the same), as
 * cistern_schema_get() gives it.
 * @return its length (0 without a schema); -ERANGE if cap is too small; -EINVAL.
 */
CISTERN_API ssize_t cistern_remote_schema_get(const struct cistern_remote *r, char *buf,
					      size_t cap);

/**
 * Say goodbye and free the connection. Samples not yet acknowledged are not
 * waited for (flush first); those already sent still reach their segment if
 * the server can put them (close lets them leave for up to a second). On a
 * fork() child's copy it frees the copy and leaves the parent's connection
 * alone. A producer that closes without
 * cistern_remote_producer_done() detached cleanly: neither done nor died.
 * @return 0, or -EINVAL for NULL.
 */
CISTERN_API int cistern_remote_close(struct cistern_remote *r);

/**
 * Make a CurveZMQ key pair in Z85 text.
 * @param public_key receives CISTERN_KEY_LEN characters and a NUL
 * @param secret_key receives CISTERN_KEY_LEN characters and a NUL
 * @return 0; -ENOTSUP if libzmq was built without CurveZMQ.
 */
CISTERN_API int cistern_remote_keygen(char public_key[CISTERN_KEY_LEN + 1],
				      char secret_key[CISTERN_KEY_LEN + 1]);

/**
 * Pick the rank of a sample: return a number below `ranks`. Called by the
 * server's thread for every sample; a result >= ranks fails that sample
 * with -ERANGE (reported to its producer).
 */
typedef uint32_t (*cistern_route_fn)(const struct cistern_meta *meta, uint32_t ranks, void *arg);

/** A line of the server's log (no newline), and its level: 0 info, 1 warning, 2 error. */
typedef void (*cistern_log_fn)(int level, const char *line, void *arg);

/** An opaque server. */
struct cistern_server;

/** Options of cistern_server_create(); zero-initialise, then set `size`. */
struct cistern_server_opts {
	size_t size; /**< sizeof(struct cistern_server_opts) */
	/** endpoints to bind ("tcp://127.0.0.1:5555", "ipc:///run/x"), n_endpoints of them */
	const char *const *endpoints;
	size_t n_endpoints;
	/** segments, existing, attached by name: segments[i] is rank i */
	const char *const *segments;
	uint32_t ranks;
	/** samples in flight granted per producer; 0 = the default (see CISTERN_REMOTE_WINDOW) */
	uint32_t window;
	/** NULL: sim_id mod ranks */
	cistern_route_fn route;
	void *route_arg;
	/** log lines go here; NULL: no log (the library never prints) */
	cistern_log_fn log;
	void *log_arg;
	/**
	 * The server's CurveZMQ key pair (Z85). secret_key NULL: no CurveZMQ
	 * (loopback only). public_key is not needed by the server (clients
	 * are given it) and may be NULL.
	 */
	const char *public_key;
	const char *secret_key;
	/** the client public keys admitted (Z85), n_client_keys of them */
	const char *const *client_keys;
	size_t n_client_keys;
	/** heartbeats, as in struct cistern_remote_opts */
	int heartbeat_ivl_ms;
	int heartbeat_timeout_ms;
	/** CISTERN_ATTACH_ANY_OWNER to attach other users' segments */
	uint32_t attach_flags;
	uint32_t reserved_; /**< must be 0 */
};

/** What a server did so far (cistern_server_stats_get()). */
struct cistern_server_stats {
	uint64_t producers;  /**< producers that said HELLO */
	uint64_t live;       /**< connected now */
	uint64_t done;       /**< that declared done */
	uint64_t died;       /**< lost without done (dead, or their network dropped) */
	uint64_t refused;    /**< clients refused (a key not admitted) */
	uint64_t received;   /**< samples received */
	uint64_t put;        /**< samples put into a segment (acknowledged) */
	uint64_t failed;     /**< samples refused (their producer was told why) */
	uint64_t queued;     /**< samples received and not yet in a segment, now */
	uint64_t queued_max; /**< the most ever queued at once */
	/*
	 * The fields below came later: cistern_server_stats_read() fills them,
	 * cistern_server_stats_get() does not. New fields are only ever added
	 * at the end.
	 */
	/** credits granted: each producer's window at its WELCOME, then one per sample acknowledged */
	uint64_t credits_granted;
	/**
	 * credits the producers connected now may still use, as the server
	 * sees them: each one's window less its samples received and not yet
	 * acknowledged (computed at the call)
	 */
	uint64_t credits_outstanding;
	/**
	 * bytes of the messages received and sent, every frame counted (the
	 * routing identity too), without ZeroMQ's framing and CurveZMQ's
	 * encryption; received counts what the server read of the socket
	 */
	uint64_t bytes_in;
	uint64_t bytes_out;
};

/** The size of struct cistern_server_stats in its first version (its first ten fields). */
#define CISTERN_SERVER_STATS_SIZE_V1 (10 * sizeof(uint64_t))

/**
 * Attach the segments and bind the endpoints. Refuses a non-loopback
 * endpoint without CurveZMQ keys, segments of different schemas, and a
 * ranks of 0.
 * @return 0; -EINVAL (bad options; the log says which);
 *         -EACCES for a non-loopback endpoint without keys; -EADDRINUSE;
 *         the errors of cistern_attach_flags().
 */
CISTERN_API int cistern_server_create(const struct cistern_server_opts *opts,
				      struct cistern_server **out);

/**
 * Serve: receive, put, acknowledge, until cistern_server_stop() or until
 * timeout_ms passed (negative: until stopped).
 * @return 0 when stopped or the time is up; -errno of ZeroMQ.
 */
CISTERN_API int cistern_server_run(struct cistern_server *s, int timeout_ms);

/**
 * Ask a running cistern_server_run() to return soon. Async-signal-safe:
 * call it from a SIGTERM handler.
 */
CISTERN_API void cistern_server_stop(struct cistern_server *s);

/**
 * The server's counts of the first version: fills the first
 * CISTERN_SERVER_STATS_SIZE_V1 bytes of *st only, so that a caller built
 * against that version keeps working. New code calls
 * cistern_server_stats_read().
 * @return 0 or -EINVAL.
 */
CISTERN_API int cistern_server_stats_get(const struct cistern_server *s,
					 struct cistern_server_stats *st);

/**
 * The server's counts, every field there is room for: pass
 * sizeof(struct cistern_server_stats) as the caller knows it. The call fills
 * the first min(size, the library's size) bytes and leaves the rest of *st
 * as it was, so a caller built against an older or a newer header gets the
 * fields both know. Never blocks; call it from the thread that runs the
 * server, as cistern_server_stats_get().
 * @return the number of bytes filled; -EINVAL if s or st is NULL or size is
 *         below CISTERN_SERVER_STATS_SIZE_V1.
 */
CISTERN_API int cistern_server_stats_read(const struct cistern_server *s,
					  struct cistern_server_stats *st, size_t size);

/**
 * Stop cleanly: refuse new samples, put those received (waiting up to
 * drain_timeout_ms for room; what is left then is failed and its producers
 * told), acknowledge, tell every producer that the server is going, detach
 * the segments (a clean detach: what they hold stays) and free.
 * @return 0; -ETIMEDOUT if samples had to be failed; -EINVAL.
 */
CISTERN_API int cistern_server_close(struct cistern_server *s, int drain_timeout_ms);

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_REMOTE_H */
