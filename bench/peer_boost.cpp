// SPDX-License-Identifier: MIT
// peer_boost.cpp - a C interface to Boost.Interprocess message_queue for the
// benchmark (the queue lives in a named shared-memory object under /dev/shm).
#include "peer_boost.h"

#include <boost/interprocess/ipc/message_queue.hpp>

#include <cerrno>
#include <cstdio>
#include <new>

namespace bip = boost::interprocess;

namespace
{
int last_errno(const bip::interprocess_exception &e)
{
	int n = e.get_native_error();
	return n > 0 ? n : EIO;
}
} // namespace

extern "C" int bq_create(const char *name, size_t max_msgs, size_t msg_size, void **out)
{
	try {
		bip::message_queue::remove(name);
		*out = new bip::message_queue(bip::create_only, name, max_msgs, msg_size);
		return 0;
	} catch (const bip::interprocess_exception &e) {
		std::fprintf(stderr, "boost message_queue create: %s\n", e.what());
		return -last_errno(e);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" int bq_open(const char *name, void **out)
{
	try {
		*out = new bip::message_queue(bip::open_only, name);
		return 0;
	} catch (const bip::interprocess_exception &e) {
		return -last_errno(e);
	} catch (const std::bad_alloc &) {
		return -ENOMEM;
	}
}

extern "C" int bq_send(void *q, const void *buf, size_t len)
{
	try {
		static_cast<bip::message_queue *>(q)->send(buf, len, 0);
		return 0;
	} catch (const bip::interprocess_exception &e) {
		return -last_errno(e);
	}
}

extern "C" long bq_recv(void *q, void *buf, size_t cap)
{
	try {
		bip::message_queue::size_type got = 0;
		unsigned int prio = 0;
		static_cast<bip::message_queue *>(q)->receive(buf, cap, got, prio);
		return static_cast<long>(got);
	} catch (const bip::interprocess_exception &e) {
		return -last_errno(e);
	}
}

extern "C" void bq_close(void *q)
{
	delete static_cast<bip::message_queue *>(q);
}

extern "C" void bq_remove(const char *name)
{
	bip::message_queue::remove(name);
}
