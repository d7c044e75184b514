#!/usr/bin/env bash
# mpi_gather.sh BUILDDIR - cistern_mpi_gather() across 2 MPI ranks
# (tests/sim/mpi_gather.c says what it checks), under mpirun.
set -euo pipefail
build=$(cd "$1" && pwd)
prog=$build/tests/sim/mpi_gather
if [ ! -x "$prog" ]; then
  echo "mpi gather check: $prog was not built (no MPI at configure time; scripts/setup.sh installs OpenMPI)" >&2
  exit 1
fi
name=mpigather-$$
"$build/tools/cistern" create "$name" --slots 4 --schema 'u:int32[4]'
trap '"$build/tools/cistern" rm --force "$name" >/dev/null 2>&1 || true' EXIT
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np 2 --oversubscribe --mca mpi_yield_when_idle 1 "$prog" "$name"
echo "mpi gather check: parts of unequal sizes gathered in rank order; parts that do not add up refused on every rank"
