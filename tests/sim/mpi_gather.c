/* SPDX-License-Identifier: MIT */
/*
 * mpi_gather.c SEGMENT - run under mpirun on 2 ranks by tests/sim/mpi_gather.sh:
 * cistern_mpi_gather() across the ranks into rank 0's client.
 *  1. parts of unequal counts (rank 0: 1 element, rank 1: 3) fill the field
 *     u:int32[4] in rank order, and the step sent holds them;
 *  2. parts that do not add up to the field (2 and 3 elements) give
 *     -EMSGSIZE on every rank, and the field keeps what it held.
 * Rank 0 checks the segment; the program exits 0 on every rank when all
 * held, 1 with the reason otherwise.
 */
#include <cistern_mpi.h>

#include <stdio.h>
#include <string.h>

static int fail(int rank, const char *why, int rc)
{
	fprintf(stderr, "mpi gather check: rank %d: %s (%d: %s)\n", rank, why, rc,
		cistern_strerror(rc));
	return 1;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, size;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	int bad = 0;
	struct cistern_sim *s = NULL;
	int u = 0;
	if (argc != 2 || size != 2) {
		bad = fail(rank, "run on 2 ranks with a segment name", -EINVAL);
		goto out;
	}
	if (rank == 0) {
		int rc = cistern_sim_open(argv[1], 3, &s);
		if (rc < 0) {
			bad = fail(rank, cistern_sim_problem(NULL), rc);
			MPI_Abort(MPI_COMM_WORLD, 1);
		}
		u = cistern_sim_field(s, "u", CISTERN_INT32, 4);
	}
	int32_t part[3] = {10 * rank + 1, 10 * rank + 2, 10 * rank + 3};
	int rc = cistern_mpi_gather(s, u, part, rank == 0 ? 1 : 3, MPI_COMM_WORLD, 0);
	if (rc != 0)
		bad = fail(rank, "the gather of parts that add up failed", rc);
	else if (rank == 0 && (rc = cistern_sim_send(s, 0, 0)) != 0)
		bad = fail(rank, cistern_sim_problem(s), rc);
	rc = cistern_mpi_gather(s, u, part, rank == 0 ? 2 : 3, MPI_COMM_WORLD, 0);
	if (rc != -EMSGSIZE)
		bad = fail(rank, "parts that do not add up were not refused with -EMSGSIZE", rc);
	if (rank == 0) {
		int32_t want[4] = {1, 11, 12, 13}, got[4];
		if (memcmp(cistern_sim_field_data(s, u), want, sizeof(want)) != 0)
			bad = fail(rank, "the refused gather changed the field", 0);
		struct cistern *c;
		if ((rc = cistern_attach(argv[1], &c)) != 0) {
			bad = fail(rank, "cannot attach the segment", rc);
		} else {
			struct cistern_meta m;
			ssize_t n = cistern_get(c, got, sizeof(got), &m, 0);
			if (n != (ssize_t)sizeof(got) || memcmp(got, want, sizeof(want)) != 0 ||
			    m.sim_id != 3)
				bad = fail(rank,
					   "the step sent does not hold the parts in rank order",
					   (int)n);
			cistern_detach(c);
		}
		cistern_sim_close(s);
	}
out:
	MPI_Finalize();
	return bad;
}
