/* SPDX-License-Identifier: MIT */
/*
 * mpi.c - cistern_mpi_gather(): the parts of a field on every rank gathered
 * into the root's simulation client (cistern_mpi.h).
 */
#include "cistern_mpi.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The field's geometry as the root sees it, sent to every rank first. */
struct geometry {
	int err;      /* 0, or the root's error */
	int itemsize; /* bytes of one element */
};

int cistern_mpi_gather(struct cistern_sim *s, int field, const void *part, int count, MPI_Comm comm,
		       int root)
{
	int rank, size;
	if (MPI_Comm_rank(comm, &rank) != MPI_SUCCESS || MPI_Comm_size(comm, &size) != MPI_SUCCESS)
		return -EIO;
	/* The root tells every rank the item size, or that it cannot take the field. */
	struct geometry g = {0, 0};
	unsigned char *to = NULL;
	uint64_t field_bytes = 0;
	if (rank == root) {
		uint32_t itemsize = 0;
		int64_t n = cistern_sim_field_bytes(s, field, &itemsize);
		if (n < 0) {
			g.err = (int)n;
		} else {
			to = cistern_sim_field_data(s, field);
			field_bytes = (uint64_t)n;
			g.itemsize = (int)itemsize;
		}
	}
	if (MPI_Bcast(&g, 2, MPI_INT, root, comm) != MPI_SUCCESS)
		return -EIO;
	if (g.err)
		return g.err;
	/* A part that no int counts in bytes is refused below, as one of a negative size. */
	long long want = (long long)count * g.itemsize;
	int bytes = count < 0 || want > INT_MAX ? -1 : (int)want;
	int *counts = NULL, *displs = NULL;
	int err = 0;
	if (rank == root) {
		counts = calloc((size_t)size, sizeof(int));
		displs = calloc((size_t)size, sizeof(int));
		if (!counts || !displs)
			err = -ENOMEM;
	}
	if (MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, root, comm) != MPI_SUCCESS)
		err = -EIO;
	if (rank == root && !err) {
		uint64_t total = 0;
		for (int i = 0; i < size; i++) {
			if (counts[i] < 0)
				err = -EMSGSIZE;
			displs[i] = (int)total;
			total += (uint64_t)(counts[i] < 0 ? 0 : counts[i]);
		}
		if (total != field_bytes)
			err = -EMSGSIZE;
	}
	/* Agree on going on before moving data, so that no rank waits for a gather that never comes. */
	if (MPI_Bcast(&err, 1, MPI_INT, root, comm) != MPI_SUCCESS)
		err = -EIO;
	if (!err && MPI_Gatherv(part, bytes, MPI_BYTE, to, counts, displs, MPI_BYTE, root, comm) !=
			    MPI_SUCCESS)
		err = -EIO;
	free(counts);
	free(displs);
	return err;
}

int cistern_mpi_gather_f(struct cistern_sim *const *s, int field, const void *part, int count,
			 MPI_Fint comm, int root)
{
	return cistern_mpi_gather(s ? *s : NULL, field, part, count, MPI_Comm_f2c(comm), root);
}
