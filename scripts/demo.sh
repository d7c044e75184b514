#!/usr/bin/env bash
# demo.sh - set everything up and run cistern's main job: simulations of the 2D
# heat equation stream into a segment while a PyTorch learner trains a surrogate
# from it, once per policy (FIFO, FIRO, Reservoir); writes heat.png and heat.json.
# Options go to demo/heat.py (see demo/README.md), e.g. --sims 24 --batches 2000.
#
# bash scripts/demo.sh --remote runs the second main job instead, demo/remote.py:
# `cistern serve` on tcp://127.0.0.1, simulation processes sending to it with
# cistern.connect(), two learner ranks training under torch.distributed (gloo,
# DistributedDataParallel), each from its own segment; writes remote.png and
# remote.json. The options after --remote go to demo/remote.py; --netns runs
# the simulations in a network namespace of their own (root), over CurveZMQ.
#
# bash scripts/demo.sh --mpi runs demo/heat_mpi.py: the heat solver in Fortran
# on 2 MPI ranks under mpirun, sending through cistern's Fortran module, with
# the learner training from the segment (options after --mpi go to it, e.g.
# --remote or --mode gather).
#
# bash scripts/demo.sh --tiers runs demo/heat_tiers.py: the heat job at one
# memory budget, as a reservoir in memory and as one with a cold tier on disk
# (in /var/tmp, or --cold-dir DIR); writes heat_tiers.png, .csv and .json.
set -euo pipefail
cd "$(dirname "$0")/.."
script=demo/heat.py
if [ "${1:-}" = --remote ]; then
  script=demo/remote.py
  shift
elif [ "${1:-}" = --mpi ]; then
  script=demo/heat_mpi.py
  shift
elif [ "${1:-}" = --tiers ]; then
  script=demo/heat_tiers.py
  shift
fi
bash scripts/setup.sh
CISTERN_BUILD=build CISTERN_CLI=build/tools/cistern exec /usr/bin/python3 "$script" "$@"
