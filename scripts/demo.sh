#!/usr/bin/env bash
# demo.sh - set everything up and run cistern's main job: simulations of the 2D
# heat equation stream into a segment while a PyTorch learner trains a surrogate
# from it, once per policy (FIFO, FIRO, Reservoir); writes heat.png and heat.json.
# Options go to demo/heat.py (see demo/README.md), e.g. --sims 24 --batches 2000.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CISTERN_BUILD=build exec /usr/bin/python3 demo/heat.py "$@"
