/* SPDX-License-Identifier: MIT */
/*
 * http.h - the small HTTP/1.x server behind `cistern exporter` and
 * `cistern serve --metrics`: one connection at a time, GET only, a bounded
 * request, and deadlines on reading and writing so that a slow or silent
 * client cannot hold it.
 */
#ifndef CISTERN_HTTP_H
#define CISTERN_HTTP_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/socket.h>

/* The largest request head taken (request line and headers). */
#define HTTP_REQUEST_MAX 8192

/* A parsed ADDR:PORT: "127.0.0.1:9731", "[::1]:9731", "localhost:9731". */
struct http_addr {
	struct sockaddr_storage ss;
	socklen_t len;
	bool loopback; /* 127.0.0.0/8 or ::1 */
};

/* Parse ADDR:PORT into *a. Returns 0, or -EINVAL for a malformed one. */
int http_parse_addr(const char *text, struct http_addr *a);

/* A listening socket (non-blocking, close-on-exec) on *a: its fd, or -errno. */
int http_listen(const struct http_addr *a);

/* The port a listening socket is bound to (for --listen 127.0.0.1:0). */
int http_port(int fd);

/* What a route answers: a status, a content type and a body (in memory). */
struct http_reply {
	int status;       /* 200, 404 ... */
	const char *type; /* Content-Type */
	char *body;       /* malloc'ed by the route, freed by http_serve_one() */
	size_t len;
};

/*
 * Fill *reply with a copy of the NUL-terminated text: the fixed pages of a
 * route (its index, its 404). Returns 0, or -ENOMEM.
 */
int http_reply_text(struct http_reply *reply, int status, const char *type, const char *text);

/*
 * The route: fills *reply for the path (query string removed). Returning
 * nonzero answers 500 instead.
 */
typedef int (*http_route_fn)(const char *path, struct http_reply *reply, void *arg);

/* Write the metrics in Prometheus' text format to f: 0 or -errno. */
typedef int (*http_metrics_fn)(FILE *f, void *arg);

/*
 * The route of a metrics endpoint: index_html at "/", what write_fn(f, arg)
 * writes at "/metrics" (Prometheus' text format, version 0.0.4), a 404
 * that points there elsewhere. 0 or -errno, as a route returns.
 */
int http_route_metrics(const char *path, struct http_reply *reply, const char *index_html,
		       http_metrics_fn write_fn, void *arg);

/*
 * Accept one waiting connection on listening socket lfd, read its request
 * (at most HTTP_REQUEST_MAX bytes, within timeout_ms), answer it through
 * route (GET only; others get 405, a bad or too large request 400 or 431),
 * write the answer within timeout_ms, and close it. *stop set by a signal
 * ends the exchange early. Returns 0 when a request was answered, or -errno
 * with *why naming what went wrong with that client (the caller logs it).
 */
int http_serve_one(int lfd, int timeout_ms, http_route_fn route, void *arg,
		   volatile sig_atomic_t *stop, const char **why);

#endif
