#!/usr/bin/env bash
# run.sh - install the benchmark peers (Debian packages, only what is missing),
# build cistern with -Dbench=enabled in ./build-bench and run the benchmark,
# which prints one table (stdout) and its progress (stderr).
#
#   bash bench/run.sh            # full run, under ~10 minutes on 2 cores
#   bash bench/run.sh --doc      # full run, then BENCHMARKS.md's table from it
#   bash bench/run.sh --quick    # about a minute
#   bash bench/run.sh --only 1,3 # any cistern-bench options pass through
#
# Benchmarks report numbers; they assert no times. Run it on an otherwise idle
# machine: the table prints /proc/loadavg at its start and end. The output
# (stdout) is kept in build-bench/bench-output.txt. With --doc, a full run
# that every row passed becomes bench/last-run.out, and
# scripts/bench-table.py rewrites BENCHMARKS.md's table from it.
set -euo pipefail
cd "$(dirname "$0")/.."

doc=0
args=()
for a in "$@"; do
  if [ "$a" = --doc ]; then doc=1; else args+=("$a"); fi
done

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
out=build-bench/bench-output.txt
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then commit="$commit with local changes"; fi
status=0
# Which build, when and how: scripts/bench-table.py puts this line above the table.
echo "run: commit $commit on $(date -u '+%Y-%m-%d %H:%M UTC'), ${BENCH_NICE:+BENCH_NICE=$BENCH_NICE }bash bench/run.sh${args[*]:+ ${args[*]}}" | tee "$out"
set +e
"${nice_cmd[@]}" ./build-bench/bench/cistern-bench --python /usr/bin/python3 --py bench/sample_peers.py ${args[@]+"${args[@]}"} | tee -a "$out"
s=${PIPESTATUS[0]}; [ "$s" -eq 0 ] || status=$s
echo | tee -a "$out"
# What the per-process Roaring snapshots buy (the last table of BENCHMARKS.md).
"${nice_cmd[@]}" ./build-bench/bench/cistern-pick | tee -a "$out"
s=${PIPESTATUS[0]}; [ "$s" -eq 0 ] || status=$s
echo | tee -a "$out"
# Prioritized draws and updates with a million samples held, beside C and numpy sum trees.
"${nice_cmd[@]}" ./build-bench/bench/cistern-prio | tee -a "$out"
s=${PIPESTATUS[0]}; [ "$s" -eq 0 ] || status=$s
# The cold store's batch reads against the disk's random-read bound. Kept out
# of $out: BENCHMARKS.md's table does not carry it yet.
echo
"${nice_cmd[@]}" ./build-bench/bench/cistern-cold "${COLD_DIR:-/var/tmp}" | tee build-bench/cold-output.txt
s=${PIPESTATUS[0]}; [ "$s" -eq 0 ] || status=$s
# The cold tier in a job: a reservoir all in memory, half and 70 % cold, with
# producers and a learner; its verdict lines (BENCHMARKS.md, "Cold tier").
echo
"${nice_cmd[@]}" ./build-bench/bench/cistern-tier --dir "${COLD_DIR:-/var/tmp}" | tee build-bench/tier-output.txt
s=${PIPESTATUS[0]}; [ "$s" -eq 0 ] || status=$s
# A FIFO whose cold tier absorbs a burst four times its hot ring, beside the
# same FIFO without a tier and one all in memory (BENCHMARKS.md, "FIFO burst").
echo
"${nice_cmd[@]}" ./build-bench/bench/cistern-fifo-burst --dir "${COLD_DIR:-/var/tmp}" | tee build-bench/fifo-burst-output.txt
s=${PIPESTATUS[0]}; [ "$s" -eq 0 ] || status=$s
set -e

if [ $doc = 1 ]; then
  if [ $status -ne 0 ]; then
    echo "run.sh: a row failed; BENCHMARKS.md is left as it was" >&2
  elif python3 scripts/bench-table.py --update BENCHMARKS.md "$out"; then
    cp "$out" bench/last-run.out
    echo "run.sh: BENCHMARKS.md's table and bench/last-run.out are this run's; the prose around them is yours to check" >&2
  else
    status=1
  fi
fi
exit $status
