/* SPDX-License-Identifier: MIT */
/* peer_boost.h - C interface to the Boost.Interprocess message_queue peer. */
#ifndef CISTERN_BENCH_PEER_BOOST_H
#define CISTERN_BENCH_PEER_BOOST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* All return 0 (or a length) on success and a negative errno value on failure. */
int bq_create(const char *name, size_t max_msgs, size_t msg_size, void **out);
int bq_open(const char *name, void **out);
int bq_send(void *q, const void *buf, size_t len); /* blocking */
long bq_recv(void *q, void *buf, size_t cap);      /* blocking */
void bq_close(void *q);
void bq_remove(const char *name);

#ifdef __cplusplus
}
#endif

#endif
