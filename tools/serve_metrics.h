/* SPDX-License-Identifier: MIT */
/* serve_metrics.h - `cistern serve --metrics`: the server's own figures for Prometheus. */
#ifndef CISTERN_SERVE_METRICS_H
#define CISTERN_SERVE_METRICS_H

#include <signal.h>
#include <stdbool.h>

#include <cistern.h>
#include <cistern/remote.h>

/*
 * Listen for scrapes on ADDR:PORT (loopback unless allow_remote): the
 * socket, or a negative value after a message on stderr (-EINVAL: bad
 * usage, anything else: a failure).
 */
int serve_metrics_listen(const char *listen_on, bool allow_remote);

/*
 * cistern_server_run() until *stop is set, in slices of at most 100 ms,
 * answering a scrape of /metrics on lfd between two slices (each exchange
 * bounded to one second). segs[i] is rank i's segment. Returns what
 * cistern_server_run() returned.
 */
int serve_metrics_run(struct cistern_server *s, int lfd, const char *const *segs, size_t nsegs,
		      volatile sig_atomic_t *stop);

#endif
