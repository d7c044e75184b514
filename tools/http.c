/* SPDX-License-Identifier: MIT */
/*
 * http.c - a small HTTP/1.x server for metrics (see http.h). It serves one
 * connection at a time: metrics scrapes are rare and short, and a single
 * exchange bounded in size and time cannot be used to exhaust the process.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "http.h"

int http_parse_addr(const char *text, struct http_addr *a)
{
	memset(a, 0, sizeof(*a));
	if (!text)
		return -EINVAL;
	const char *colon = strrchr(text, ':');
	if (!colon || colon == text || !colon[1])
		return -EINVAL;
	char host[64];
	size_t hl = (size_t)(colon - text);
	if (text[0] == '[') { /* [IPv6]:PORT */
		if (hl < 3 || text[hl - 1] != ']')
			return -EINVAL;
		text++;
		hl -= 2;
	}
	if (hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, text, hl);
	host[hl] = '\0';
	char *end;
	errno = 0;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (*end || errno || port > 65535 || colon[1] < '0' || colon[1] > '9')
		return -EINVAL;
	if (strcmp(host, "localhost") == 0)
		snprintf(host, sizeof(host), "127.0.0.1");
	struct sockaddr_in *in4 = (struct sockaddr_in *)&a->ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&a->ss;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		a->len = sizeof(*in4);
		a->loopback = (ntohl(in4->sin_addr.s_addr) >> 24) == 127;
		return 0;
	}
	if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		a->len = sizeof(*in6);
		a->loopback = IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
		return 0;
	}
	return -EINVAL;
}

int http_listen(const struct http_addr *a)
{
	int fd = socket(a->ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	/* A restarted exporter rebinds at once, past the old socket's TIME_WAIT. */
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (a->ss.ss_family == AF_INET6)
		setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(fd, (const struct sockaddr *)&a->ss, a->len) < 0 || listen(fd, 16) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int http_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
		return -errno;
	if (ss.ss_family == AF_INET)
		return ntohs(((struct sockaddr_in *)&ss)->sin_port);
	return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * Wait until fd is ready for `events` or the deadline passes: 0, -ETIMEDOUT,
 * -EINTR once *stop is set, or -errno.
 */
static int wait_fd(int fd, short events, int64_t deadline, volatile sig_atomic_t *stop)
{
	for (;;) {
		if (stop && *stop)
			return -EINTR;
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int send_all(int fd, const char *buf, size_t len, int64_t deadline,
		    volatile sig_atomic_t *stop)
{
	while (len) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n > 0) {
			buf += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		int r = wait_fd(fd, POLLOUT, deadline, stop);
		if (r < 0)
			return r;
	}
	return 0;
}

static const char *reason(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 431:
		return "Request Header Fields Too Large";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Internal Server Error";
	}
}

static int answer(int fd, const struct http_reply *rep, int64_t deadline,
		  volatile sig_atomic_t *stop)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
			 "%sCache-Control: no-store\r\nConnection: close\r\n\r\n",
			 rep->status, reason(rep->status), rep->type, rep->len,
			 rep->status == 405 ? "Allow: GET\r\n" : "");
	int r = send_all(fd, head, (size_t)n, deadline, stop);
	if (r == 0 && rep->len)
		r = send_all(fd, rep->body, rep->len, deadline, stop);
	return r;
}

/* A plain-text error answer: its status, with the sentence as the body. */
static int refuse(int fd, int status, const char *text, int64_t deadline,
		  volatile sig_atomic_t *stop)
{
	struct http_reply rep = {.status = status,
				 .type = "text/plain; charset=utf-8",
				 .body = (char *)(uintptr_t)text,
				 .len = strlen(text)};
	return answer(fd, &rep, deadline, stop);
}

/* Read the request head into buf: its length, or -errno (-EMSGSIZE: too large). */
static ssize_t read_head(int fd, char *buf, size_t cap, int64_t deadline,
			 volatile sig_atomic_t *stop)
{
	size_t len = 0;
	for (;;) {
		if (len == cap)
			return -EMSGSIZE;
		ssize_t n = recv(fd, buf + len, cap - len, 0);
		if (n == 0)
			return -ECONNRESET; /* closed before a whole head */
		if (n < 0) {
			if (errno != EAGAIN && errno != EINTR)
				return -errno;
			int r = wait_fd(fd, POLLIN, deadline, stop);
			if (r < 0)
				return r;
			continue;
		}
		len += (size_t)n;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
			return (ssize_t)len;
	}
}

int http_reply_text(struct http_reply *reply, int status, const char *type, const char *text)
{
	reply->status = status;
	reply->type = type;
	reply->len = strlen(text);
	reply->body = strdup(text);
	return reply->body ? 0 : -ENOMEM;
}

int http_route_metrics(const char *path, struct http_reply *reply, const char *index_html,
		       http_metrics_fn write_fn, void *arg)
{
	if (strcmp(path, "/") == 0)
		return http_reply_text(reply, 200, "text/html; charset=utf-8", index_html);
	if (strcmp(path, "/metrics") != 0)
		return http_reply_text(reply, 404, "text/plain; charset=utf-8",
				       "Not found: the metrics are at /metrics.\n");
	FILE *f = open_memstream(&reply->body, &reply->len);
	if (!f)
		return -ENOMEM;
	int r = write_fn(f, arg);
	if (fclose(f) != 0 && r == 0)
		r = -ENOMEM;
	reply->status = 200;
	reply->type = "text/plain; version=0.0.4; charset=utf-8";
	return r;
}

int http_serve_one(int lfd, int timeout_ms, http_route_fn route, void *arg,
		   volatile sig_atomic_t *stop, const char **why)
{
	static char buf[HTTP_REQUEST_MAX + 1];
	*why = NULL;
	int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0) {
		*why = "cannot accept a connection";
		return -errno;
	}
	int64_t deadline = now_ms() + timeout_ms;
	int r = 0;
	ssize_t n = read_head(fd, buf, HTTP_REQUEST_MAX, deadline, stop);
	if (n == -EMSGSIZE) {
		*why = "refused a request larger than 8 KiB";
		refuse(fd, 431, "The request is too large.\n", deadline, stop);
		r = -EMSGSIZE;
		goto out;
	}
	if (n < 0) {
		*why = n == -ETIMEDOUT ? "dropped a client that did not send a request in time"
		       : n == -EINTR   ? "dropped a client at stop"
				       : "lost a client before its request";
		if (n == -ETIMEDOUT)
			refuse(fd, 408, "No request came in time.\n", now_ms() + 100, stop);
		r = (int)n;
		goto out;
	}
	/* The request line: METHOD SP TARGET SP HTTP/1.x */
	char *eol = strpbrk(buf, "\r\n");
	*eol = '\0';
	char *sp1 = strchr(buf, ' ');
	char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1[1] != '/' || strchr(sp2 + 1, ' ')) {
		*why = "refused a malformed request";
		refuse(fd, 400, "The request line is malformed.\n", deadline, stop);
		r = -EPROTO;
		goto out;
	}
	*sp1 = *sp2 = '\0';
	if (strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
		*why = "refused a request of another HTTP version";
		refuse(fd, 505, "Only HTTP/1.0 and HTTP/1.1 are spoken here.\n", deadline, stop);
		r = -EPROTO;
		goto out;
	}
	if (strcmp(buf, "GET") != 0) {
		*why = "refused a request other than GET";
		refuse(fd, 405, "Only GET is answered here.\n", deadline, stop);
		r = -EPROTO;
		goto out;
	}
	char *path = sp1 + 1;
	path[strcspn(path, "?#")] = '\0';
	struct http_reply rep = {0};
	if (route(path, &rep, arg) != 0) {
		free(rep.body);
		*why = "could not build an answer";
		refuse(fd, 500, "The answer could not be built.\n", deadline, stop);
		r = -ENOMEM;
		goto out;
	}
	r = answer(fd, &rep, deadline, stop);
	free(rep.body);
	if (r < 0)
		*why = r == -ETIMEDOUT ? "dropped a client that did not read its answer in time"
				       : "lost a client while answering it";
out:
	close(fd);
	return r;
}
