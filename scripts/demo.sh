#!/usr/bin/env bash
# demo.sh - set everything up and run cistern's main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/examples/fifo_demo "$@"
