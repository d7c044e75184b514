/* SPDX-License-Identifier: MIT */
/*
 * cistern_mpi.h - gathering a field's parts across MPI ranks into one
 * simulation client (libcistern_mpi: link it with -lcistern_mpi, or the CMake
 * target cistern::mpi; the other libraries need no MPI).
 *
 * Every rank of `comm` holds a part of a field; the root rank holds the
 * client (cistern_sim_open()) and sends whole time steps:
 *
 *     int u = rank == 0 ? cistern_sim_field(s, "u", CISTERN_FLOAT64, nx * ny) : 0;
 *     for (int t = 0; t < steps; t++) {
 *             solve(part);
 *             cistern_mpi_gather(s, u, part, part_count, MPI_COMM_WORLD, 0);
 *             if (rank == 0)
 *                     cistern_sim_send(s, (uint32_t)t, -1);
 *     }
 */
#ifndef CISTERN_MPI_H
#define CISTERN_MPI_H

#include <mpi.h>

#include <cistern_sim.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Gather the parts of a declared field, in rank order, into the root's
 * staged sample, in place (so the field counts as written at every send, as
 * after cistern_sim_field_data()). Collective over `comm`:
 * every rank calls it with its part of `count` elements (the counts may
 * differ, and add up to the field's count); `s` and `field` are used on the
 * root only (other ranks may pass NULL and 0). Every rank returns the same
 * result.
 * @return 0; -EINVAL on the root for a NULL handle or an undeclared field;
 *         -EMSGSIZE if the parts do not add up to the field; -EIO if MPI
 *         failed.
 */
CISTERN_API int cistern_mpi_gather(struct cistern_sim *s, int field, const void *part, int count,
				   MPI_Comm comm, int root);

/**
 * cistern_mpi_gather() for the Fortran module: the client by reference (the
 * module's type(cistern_sim) holds the pointer) and a Fortran communicator.
 */
CISTERN_API int cistern_mpi_gather_f(struct cistern_sim *const *s, int field, const void *part,
				     int count, MPI_Fint comm, int root);

#ifdef __cplusplus
}
#endif

#endif /* CISTERN_MPI_H */
