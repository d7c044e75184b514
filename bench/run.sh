#!/usr/bin/env bash
# run.sh - install the benchmark peers (Debian packages, only what is missing),
# build cistern with -Dbench=enabled in ./build-bench and run the benchmark,
# which prints one table (stdout) and its progress (stderr).
#
#   bash bench/run.sh            # full run, under ~10 minutes on 2 cores
#   bash bench/run.sh --quick    # about a minute
#   bash bench/run.sh --only 1,3 # any cistern-bench options pass through
#
# Benchmarks report numbers; they assert no times. Run it on an otherwise idle
# machine: the table prints /proc/loadavg at its start and end.
set -euo pipefail
cd "$(dirname "$0")/.."

# The peers and the Python side of section 4 (bench/peers, which the test
# suite's smoke run of the benchmark installs too); scripts/setup.sh installs
# the rest of what cistern's build needs and builds it.
peers=$(cat bench/peers)
EXTRA_PACKAGES="$peers" BUILDDIR=build-bench MESON_OPTIONS="-Dbench=enabled" bash scripts/setup.sh >&2

# BENCH_NICE=-20 (as root) lets the run take the CPUs from other work on a shared
# machine; by default it runs at normal priority.
nice_cmd=()
if [ -n "${BENCH_NICE:-}" ]; then
  nice_cmd=(nice -n "$BENCH_NICE")
fi
status=0
"${nice_cmd[@]}" ./build-bench/bench/cistern-bench --python /usr/bin/python3 --py bench/sample_peers.py "$@" || status=$?
echo
# What the per-process Roaring snapshots buy (BENCHMARKS.md, "Uniform picks").
"${nice_cmd[@]}" ./build-bench/bench/cistern-pick || status=$?
exit $status
