/* SPDX-License-Identifier: MIT */
/*
 * cistern_sim.h - the simulation client of cistern. It lives in
 * libcistern-remote, beside the remote producers its remote mode uses: link
 * it with `pkg-config --libs cistern-remote`, or the CMake target
 * cistern::remote.
 *
 * A simulation code (C, C++ or Fortran, usually under MPI) instruments its
 * time loop with a handful of calls: open a segment or a server, declare the
 * fields a time step holds, write them, send the step, say it is done, close.
 * The segment's schema (docs/SCHEMA.md) says what a sample holds; the client
 * checks every declared field against it, fills the sample field by field and
 * puts it as one sample with the simulation's sim_id and the step's
 * time_step. docs/SIMULATIONS.md shows the calls in C, C++ and Fortran.
 *
 *     struct cistern_sim *s;
 *     cistern_sim_open("heat", rank, &s);                 // or "tcp://host:5555"
 *     int u = cistern_sim_field(s, "u", CISTERN_FLOAT64, nx * ny);
 *     for (int t = 0; t < steps; t++) {
 *             solve(field);
 *             cistern_sim_write(s, u, field);
 *             cistern_sim_send(s, (uint32_t)t, -1);
 *     }
 *     cistern_sim_done(s, -1);
 *     cistern_sim_close(s);
 *
 * Under MPI, either every rank opens its own client and sends its part of the
 * field (the schema then describes a part, and a field such as `rank:int32[]`
 * says which), or the ranks gather their parts on one rank that sends the
 * whole field (cistern_mpi.h, in the small libcistern_mpi library, so that
 * the other libraries need no MPI).
 *
 * The conventions are those of cistern.h: every call returns 0 (or a count,
 * or an index) or a negative errno, never aborts and never prints. After a
 * failed call, cistern_sim_problem() gives a sentence that says what is
 * wrong. A struct cistern_sim belongs to one thread at a time.
 */
#ifndef CISTERN_SIM_H
#define CISTERN_SIM_H

#include <cistern.h>

#ifdef __cplusplus
extern "C" {
#endif

/** An opaque simulation client: a segment or a server connection, and one staged sample. */
struct cistern_sim;

/**
 * Open a client. `target` is either a segment name (attached as
 * cistern_attach() does) or a server endpoint, "tcp://HOST:PORT" or
 * "ipc://PATH" (connected as cistern_remote_connect() does, without keys).
 * The segment, or the server's segments, must have a schema. The sample
 * starts zeroed, and `sim_id` goes with every step this client sends.
 * @return 0; -EINVAL for a NULL argument, a bad target or a segment without
 *         a schema; -ENOMEM; the errors of cistern_attach() and
 *         cistern_remote_connect(). cistern_sim_problem(NULL) says why.
 */
CISTERN_API int cistern_sim_open(const char *target, uint32_t sim_id, struct cistern_sim **out);

/**
 * Declare a field that this client's steps carry: `name` must be a field of
 * the schema, of dtype `dtype` and of `count` elements in all (the product
 * of its shape; 1 for a scalar). Fields of the schema left undeclared stay
 * zero in every sample. Declaring a field again gives the same index.
 * @return the field's index (0 or more) for cistern_sim_write(); -EINVAL for
 *         a NULL argument; -ENOENT if the schema has no such field; -EPROTOTYPE
 *         for another dtype; -EMSGSIZE for another count.
 */
CISTERN_API int cistern_sim_field(struct cistern_sim *s, const char *name, enum cistern_dtype dtype,
				  uint64_t count);

/**
 * Copy a declared field's value (all its elements, C order, host byte order)
 * into the staged sample; the field counts as written for the next send.
 * @return 0; -EINVAL for a NULL argument or an index that no
 *         cistern_sim_field() gave.
 */
CISTERN_API int cistern_sim_write(struct cistern_sim *s, int field, const void *data);

/**
 * Where a declared field lies in the staged sample, to write it in place
 * instead of with cistern_sim_write() (or to gather into it). The pointer
 * stays valid until cistern_sim_close(). The client cannot see writes
 * through it, so once a field's place was taken, every send counts that
 * field as written.
 * @return the address; NULL for a NULL handle or an undeclared index.
 */
CISTERN_API void *cistern_sim_field_data(struct cistern_sim *s, int field);

/**
 * The size of a declared field.
 * @param itemsize if not NULL, receives the bytes of one element
 * @return the field's bytes; -EINVAL for a NULL handle or an undeclared index.
 */
CISTERN_API int64_t cistern_sim_field_bytes(const struct cistern_sim *s, int field,
					    uint32_t *itemsize);

/**
 * Send the staged sample as one time step: put into the segment (as
 * cistern_put() with timeout_ms) or handed to the server connection (as
 * cistern_remote_put()), with this client's sim_id and `time_step`. Every
 * declared field must have been written with cistern_sim_write() since the
 * last send, unless its place was taken with cistern_sim_field_data(); the
 * sample keeps its values, so a field may stay as it was by being written
 * again. On an error nothing was sent and the sample stays staged.
 * @return 0; -ENODATA if a declared field was not written since the last
 *         send; -EPIPE once reception is closed (or this client is done); the
 *         errors of cistern_put() or cistern_remote_put().
 */
CISTERN_API int cistern_sim_send(struct cistern_sim *s, uint32_t time_step, int timeout_ms);

/**
 * Mark this simulation done: on a segment, cistern_producer_done() (nothing
 * if the segment counts no producers); through a server,
 * cistern_remote_producer_done(), which first waits up to timeout_ms until
 * the server has every step in a segment. Later sends fail with -EPIPE.
 * @return 0; the errors of cistern_remote_producer_done().
 */
CISTERN_API int cistern_sim_done(struct cistern_sim *s, int timeout_ms);

/**
 * Close the client: detach from the segment or close the connection (flush
 * with cistern_sim_done() first: a connection closed with steps in flight
 * may lose them). Call it before MPI_Finalize(). NULL is allowed.
 * @return 0.
 */
CISTERN_API int cistern_sim_close(struct cistern_sim *s);

/** The size in bytes of one sample (the schema's sample size), or 0 for NULL. */
CISTERN_API uint64_t cistern_sim_sample_size(const struct cistern_sim *s);

/**
 * A sentence saying why the last failed call on `s` failed; with s NULL, why
 * this thread's last cistern_sim_open() failed. Never NULL ("" if nothing
 * failed).
 */
CISTERN_API const char *cistern_sim_problem(const struct cistern_sim *s);

/*
 * Reserve and commit without C structs, for callers in other languages (the
 * Fortran module): the slot lives on the heap and is freed by the commit or
 * the abort. A C program uses cistern_reserve() and cistern_commit().
 */

/** An opaque reserved slot of cistern_sim_reserve(). */
struct cistern_sim_slot;

/**
 * Reserve a slot of segment `c`, as cistern_reserve() does.
 * @param data     receives the slot's payload address
 * @param capacity receives its size in bytes (the segment's slot_size)
 * @return 0; -ENOMEM; the errors of cistern_reserve().
 */
CISTERN_API int cistern_sim_reserve(struct cistern *c, struct cistern_sim_slot **slot, void **data,
				    uint64_t *capacity, int timeout_ms);

/**
 * Commit `len` bytes of a slot of cistern_sim_reserve() with the given ids,
 * as cistern_commit() does, and free it. On an error the slot stays
 * reserved (commit it again, or abort it).
 * @return 0; the errors of cistern_commit().
 */
CISTERN_API int cistern_sim_commit(struct cistern *c, struct cistern_sim_slot *slot, uint64_t len,
				   uint32_t sim_id, uint32_t time_step);

/** Give a slot of cistern_sim_reserve() back unpublished and free it. @return 0 or -EINVAL. */
CISTERN_API int cistern_sim_abort(struct cistern *c, struct cistern_sim_slot *slot);

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_SIM_H */
