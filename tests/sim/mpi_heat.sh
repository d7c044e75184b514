#!/usr/bin/env bash
# mpi_heat.sh BUILDDIR - the MPI heat example at toy size, as the README runs
# it: examples/heat_mpi on 2 ranks under mpirun, with demo/heat_mpi.py's
# learner training from the segment. Twice: every rank sending its part into
# a local segment, and the gathered field through `cistern serve`. Under FIFO,
# --check fails unless every step of every part arrived exactly once, with
# its simulation's parameters, and the validation loss went down.
set -euo pipefail
build=$(cd "$1" && pwd)
cd "$(dirname "$0")/../.."
if [ ! -x "$build/examples/heat_mpi" ]; then
  echo "mpi heat check: $build/examples/heat_mpi was not built (no gfortran or MPI at configure time; scripts/setup.sh installs them)" >&2
  exit 1
fi
export CISTERN_BUILD=$build PYTHONPATH=$build/python:python
toy=(--policy fifo --sims 2 --val-sims 1 --steps 10 --batches 20 --batch-size 8 --lr 5e-3 --step-cost 2 --check)
/usr/bin/python3 demo/heat_mpi.py "${toy[@]}" --mode parts
/usr/bin/python3 demo/heat_mpi.py "${toy[@]}" --mode gather --remote
echo "mpi heat check: 2 ranks sent their parts to a segment, and their gathered fields through cistern serve; every step arrived once and the learner trained from them"
