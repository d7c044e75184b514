#!/usr/bin/env bash
# table.sh - BENCHMARKS.md's table is what scripts/bench-table.py makes of
# the run it names (bench/last-run.out, written by bash bench/run.sh --doc):
# nobody edited it by hand, and the generator still reads that output. Needs
# no build and runs no benchmark.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
if python3 "$src/scripts/bench-table.py" --check "$src/BENCHMARKS.md" "$src/bench/last-run.out"; then
  echo "table: BENCHMARKS.md's table is bench/last-run.out's"
else
  echo "table: BENCHMARKS.md's table differs from what bench/last-run.out makes"
  exit 1
fi
