/* SPDX-License-Identifier: MIT */
/*
 * serve_metrics.c - `cistern serve --metrics ADDR:PORT`: the server's counts
 * (cistern_server_stats_read()) at /metrics, under the prefix cistern_serve_.
 * The scrape is answered by the thread that runs the server, between two
 * slices of cistern_server_run(), so the counts are read where they are
 * written and no lock is needed; a scrape holds the server at most one
 * second (the exchange's deadline), a slow client no longer.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "http.h"
#include "prom.h"
#include "serve_metrics.h"
#include <cistern/remote.h>

struct scrape_arg {
	struct cistern_server *s;
	const char *const *segs;
	size_t nsegs;
};

static void counter(FILE *f, const char *name, const char *help, uint64_t v)
{
	prom_family(f, name, "counter", help);
	fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(FILE *f, const char *name, const char *help, uint64_t v)
{
	prom_family(f, name, "gauge", help);
	fprintf(f, "%s %llu\n", name, (unsigned long long)v);
}

static void write_metrics(FILE *f, const struct scrape_arg *a)
{
	struct cistern_server_stats st;
	memset(&st, 0, sizeof(st));
	cistern_server_stats_read(a->s, &st, sizeof(st));
	prom_family(f, "cistern_serve_rank_info", "gauge",
		    "The segment each learner rank's samples go to (value 1).");
	for (size_t i = 0; i < a->nsegs; i++) {
		fprintf(f, "cistern_serve_rank_info{rank=\"%zu\",segment=", i);
		prom_label(f, a->segs[i]);
		fputs("} 1\n", f);
	}
	counter(f, "cistern_serve_producers_total", "Remote producers that said hello.",
		st.producers);
	gauge(f, "cistern_serve_connected_producers", "Remote producers connected now.", st.live);
	counter(f, "cistern_serve_producers_done_total",
		"Remote producers that said they are done.", st.done);
	counter(f, "cistern_serve_producers_lost_total",
		"Remote producers lost before they were done (dead, or their network dropped).",
		st.died);
	counter(f, "cistern_serve_refused_clients_total",
		"Clients refused: their key is not admitted.", st.refused);
	counter(f, "cistern_serve_received_samples_total", "Samples received.", st.received);
	counter(f, "cistern_serve_put_samples_total",
		"Samples put into a segment and acknowledged.", st.put);
	counter(f, "cistern_serve_failed_samples_total",
		"Samples refused; their producer was told why.", st.failed);
	gauge(f, "cistern_serve_queued_samples",
	      "Samples in doubt: received and not yet in a segment.", st.queued);
	gauge(f, "cistern_serve_queued_samples_max", "The most samples ever queued at once.",
	      st.queued_max);
	counter(f, "cistern_serve_credits_granted_total",
		"Credits granted to producers: each window at hello, then one per sample "
		"acknowledged.",
		st.credits_granted);
	gauge(f, "cistern_serve_credits_outstanding",
	      "Credits the connected producers may still use: their windows less the samples "
	      "in flight.",
	      st.credits_outstanding);
	counter(f, "cistern_serve_received_bytes_total",
		"Bytes of the messages received, every frame (not ZeroMQ's framing).", st.bytes_in);
	counter(f, "cistern_serve_sent_bytes_total",
		"Bytes of the messages sent, every frame (not ZeroMQ's framing).", st.bytes_out);
}

static const char index_page[] =
	"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>cistern "
	"serve</title></head>\n<body><h1>cistern serve</h1>\n<p>The server's "
	"figures, for Prometheus: <a href=\"/metrics\">/metrics</a>.</p>\n"
	"</body></html>\n";

static int write_to(FILE *f, void *arg)
{
	write_metrics(f, arg);
	return 0;
}

static int route(const char *path, struct http_reply *rep, void *arg)
{
	return http_route_metrics(path, rep, index_page, write_to, arg);
}

int serve_metrics_listen(const char *listen_on, bool allow_remote)
{
	struct http_addr a;
	if (http_parse_addr(listen_on, &a) < 0) {
		fprintf(stderr,
			"cistern serve: bad --metrics '%s': give ADDR:PORT, such as "
			"127.0.0.1:9732\nTry 'cistern serve --help'.\n",
			listen_on);
		return -EINVAL;
	}
	if (!a.loopback && !allow_remote) {
		fprintf(stderr,
			"cistern serve: --metrics %s is not a loopback address: anyone who can "
			"reach it would see the server's figures; add --metrics-allow-remote "
			"to mean it\nTry 'cistern serve --help'.\n",
			listen_on);
		return -EINVAL;
	}
	int fd = http_listen(&a);
	if (fd < 0) {
		fprintf(stderr, "cistern serve: %s: cannot listen for metrics: %s\n", listen_on,
			cistern_strerror(fd));
		return fd == -EINVAL ? -EIO : fd;
	}
	fprintf(stderr, "cistern serve: metrics at http://%.*s:%d/metrics\n",
		(int)(strrchr(listen_on, ':') - listen_on), listen_on, http_port(fd));
	return fd;
}

int serve_metrics_run(struct cistern_server *s, int lfd, const char *const *segs, size_t nsegs,
		      volatile sig_atomic_t *stop)
{
	struct scrape_arg a = {.s = s, .segs = segs, .nsegs = nsegs};
	while (!*stop) {
		int r = cistern_server_run(s, 100);
		if (r < 0)
			return r;
		struct pollfd p = {.fd = lfd, .events = POLLIN};
		if (*stop || poll(&p, 1, 0) <= 0)
			continue;
		const char *why;
		if (http_serve_one(lfd, 1000, route, &a, stop, &why) < 0 && why)
			fprintf(stderr, "cistern serve: metrics: %s\n", why);
	}
	return 0;
}
