// SPDX-License-Identifier: MIT
//
// cistern.hpp - C++20 wrappers of cistern.h and cistern_sim.h: handles that
// detach, close or abort when they go out of scope, reserved slots as
// std::span, and errors as std::system_error (its code() is the errno; its
// what() is cistern's sentence). Header-only: link libcistern as for C, and
// libcistern-remote (cistern::remote) for cistern_cpp::sim.
//
//     cistern_cpp::segment seg("heat");
//     {
//             cistern_cpp::reservation r = seg.reserve();
//             std::span<double> u = r.span<double>();
//             solve(u);
//             r.commit(u.size_bytes(), sim_id, t);   // or out of scope: aborted
//     }
//     cistern_cpp::sim s("tcp://127.0.0.1:5555", sim_id);
//     int f = s.field("u", CISTERN_FLOAT64, n);
//     s.write(f, u.data()); s.send(t); s.done();
#ifndef CISTERN_HPP
#define CISTERN_HPP

#include <cistern.h>
#include <cistern_sim.h>

#include <cstddef>
#include <span>
#include <string>
#include <system_error>
#include <utility>

namespace cistern_cpp
{

/** Throw the error of a negative result, naming the call; return a count as it is. */
inline long long check(long long rc, const char *what)
{
	if (rc < 0)
		throw std::system_error(static_cast<int>(-rc), std::generic_category(),
					std::string(what) + ": " + cistern_strerror(static_cast<int>(rc)));
	return rc;
}

class segment;

/** A reserved slot: commit() publishes it; destroyed before that, it is aborted. */
class reservation
{
public:
	reservation(reservation &&o) noexcept : c_(std::exchange(o.c_, nullptr)), slot_(o.slot_) {}
	reservation &operator=(reservation &&) = delete;
	reservation(const reservation &) = delete;
	~reservation()
	{
		if (c_)
			cistern_abort(c_, &slot_);
	}

	/** The slot's memory as elements of T (as many as fit in its capacity). */
	template <typename T = std::byte> std::span<T> span() const
	{
		return {static_cast<T *>(slot_.data), slot_.capacity / sizeof(T)};
	}

	/** Publish the first `len` bytes with the given ids (cistern_commit()); returns the sample id. */
	uint64_t commit(std::size_t len, uint32_t sim_id = 0, uint32_t time_step = 0)
	{
		cistern_meta meta{0, sim_id, time_step};
		check(cistern_commit(c_, &slot_, len, &meta), "cistern_commit");
		c_ = nullptr;
		return meta.sample_id;
	}

private:
	friend class segment;
	explicit reservation(struct ::cistern *c) : c_(c), slot_() {}
	struct ::cistern *c_;
	cistern_slot slot_;
};

/** An attached segment (cistern_attach()), detached when destroyed. */
class segment
{
public:
	explicit segment(const std::string &name)
	{
		check(cistern_attach(name.c_str(), &c_), "cistern_attach");
	}
	segment(segment &&o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
	segment &operator=(segment &&) = delete;
	segment(const segment &) = delete;
	~segment()
	{
		if (c_)
			cistern_detach(c_);
	}

	/** Reserve a slot, waiting as timeout_ms says (cistern_reserve()). */
	reservation reserve(int timeout_ms = -1)
	{
		reservation r(c_);
		int rc = cistern_reserve(c_, &r.slot_, timeout_ms);
		if (rc < 0) {
			r.c_ = nullptr;
			check(rc, "cistern_reserve");
		}
		return r;
	}

	/** Copy bytes in as one sample (cistern_put()). */
	void put(std::span<const std::byte> data, uint32_t sim_id = 0, uint32_t time_step = 0,
		 int timeout_ms = -1)
	{
		cistern_meta meta{0, sim_id, time_step};
		check(cistern_put(c_, data.data(), data.size(), &meta, timeout_ms), "cistern_put");
	}

	/** Declare one expected producer done; returns how many are still expected. */
	int producer_done() { return static_cast<int>(check(cistern_producer_done(c_), "cistern_producer_done")); }

	struct ::cistern *get() const { return c_; }

private:
	struct ::cistern *c_ = nullptr;
};

/** A simulation client (cistern_sim_open()), closed when destroyed. */
class sim
{
public:
	sim(const std::string &target, uint32_t sim_id)
	{
		int rc = cistern_sim_open(target.c_str(), sim_id, &s_);
		if (rc < 0)
			throw std::system_error(-rc, std::generic_category(), cistern_sim_problem(nullptr));
	}
	sim(sim &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
	sim &operator=(sim &&) = delete;
	sim(const sim &) = delete;
	~sim() { cistern_sim_close(s_); }

	/** Declare a field of the schema; returns its index. */
	int field(const std::string &name, cistern_dtype dtype, uint64_t count)
	{
		return fail(cistern_sim_field(s_, name.c_str(), dtype, count));
	}
	/** Write a declared field's value. */
	void write(int field, const void *data) { fail(cistern_sim_write(s_, field, data)); }
	/** A declared field's place in the staged sample, as elements of T (then written at every send). */
	template <typename T> std::span<T> field_span(int field)
	{
		uint32_t itemsize = 0;
		int64_t bytes = cistern_sim_field_bytes(s_, field, &itemsize);
		fail(bytes < 0 ? static_cast<int>(bytes) : 0);
		return {static_cast<T *>(cistern_sim_field_data(s_, field)),
			static_cast<std::size_t>(bytes) / sizeof(T)};
	}
	/** Send the staged step. */
	void send(uint32_t time_step, int timeout_ms = -1) { fail(cistern_sim_send(s_, time_step, timeout_ms)); }
	/** Mark the simulation done. */
	void done(int timeout_ms = -1) { fail(cistern_sim_done(s_, timeout_ms)); }

	struct cistern_sim *get() const { return s_; }

private:
	int fail(int rc)
	{
		if (rc < 0)
			throw std::system_error(-rc, std::generic_category(), cistern_sim_problem(s_));
		return rc;
	}
	struct cistern_sim *s_ = nullptr;
};

} // namespace cistern_cpp

#endif // CISTERN_HPP
