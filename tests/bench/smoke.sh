#!/usr/bin/env bash
# smoke.sh BUILDDIR - the benchmark program, built with -Dbench=enabled in
# BUILDDIR, runs every contender of every section once (--smoke) and exits 0:
# each ran and every sample it passed arrived whole and in order (the
# program's own payload checks). No time is asserted: these numbers come
# from one short repetition on a machine running other tests. Then it must
# exit 1 when a contender cannot run (section 4 with its Python peers'
# script missing), so that a failure is not taken for a pass. The output
# also goes through scripts/bench-table.py, which makes BENCHMARKS.md's
# table from a full run's. Meanwhile, the cold tier's benchmark (cistern-tier)
# runs in its tiny mode (a few seconds) and must print every row and verdict,
# and so must the FIFO burst benchmark (cistern-fifo-burst) after it. Last,
# the prioritized replay benchmark (cistern-prio) runs in its tiny mode.
set -uo pipefail
bench="$1/bench/cistern-bench"
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp) err=$(mktemp) doc=$(mktemp)
tier_out=$(mktemp) tier_err=$(mktemp) burst_out=$(mktemp) burst_err=$(mktemp)

# cistern-tier and cistern-fifo-burst (checked last) run beside cistern-bench,
# one after the other: the three spend most of their time waiting on their
# children, and none of them asserts a time.
tier="$1/bench/cistern-tier" burst="$1/bench/cistern-fifo-burst"
("$tier" --tiny --dir "${COLD_DIR:-/var/tmp}" >"$tier_out" 2>"$tier_err"
 echo $? >"$tier_err.status"
 "$burst" --tiny --dir "${COLD_DIR:-/var/tmp}" >"$burst_out" 2>"$burst_err"
 echo $? >"$burst_err.status") &
beside=$!
# An early exit still waits for them: they remove their own segments and files.
files=("$out" "$err" "$doc" "$tier_out" "$tier_err" "$burst_out" "$burst_err" "$tier_err.status"
  "$burst_err.status")
trap 'wait; rm -f "${files[@]}"' EXIT

"$bench" --smoke --python /usr/bin/python3 --py "$src/bench/sample_peers.py" >"$out" 2>"$err"
status=$?
if [ $status -ne 0 ]; then
  echo "smoke: cistern-bench --smoke exited $status"
  grep -E '^cistern-bench: ' "$err" | head -n 20
  exit 1
fi
for s in "0. machine" "1. 1P/1R" "2. 4P/4R" "3. 1P/1R 1 MiB" "4. batch" "5. latency" "6a." "6b." "6c." "7. Python" "8a. remote 64 B" "8b. remote 4 KiB" "8c. remote 1 MiB"; do
  if ! grep -qF "| $s" "$out"; then
    echo "smoke: no rows for section '$s'"
    exit 1
  fi
done
rows=$(grep -cE '^\| ' "$out")
echo "smoke: $rows table lines, every contender ran and passed its checks"

# BENCHMARKS.md's table is made from this output by scripts/bench-table.py:
# it must find every section and every row, and refuse to make the
# reference table of a run that is not a full one.
md=$(python3 "$src/scripts/bench-table.py" "$out") || { echo "smoke: bench-table.py failed on the smoke output"; exit 1; }
for s in 0 1 2 3 4 5 6a 6b 6c 8a 8b 8c; do
  if ! grep -qE "^\| \*\*$s\. " <<<"$md"; then
    echo "smoke: bench-table.py made no heading for section $s"
    exit 1
  fi
done
in_rows=$(grep -cE '^\|' "$out")   # the rows, the header and the rule
# The main table's lines but for its section headings.
md_rows=$(awk '/^\| contender \|/ { on = 1 } on && !/^\|/ { exit } on && !/^\| \*\*/' <<<"$md" | wc -l)
if [ "$md_rows" -ne "$in_rows" ]; then
  echo "smoke: bench-table.py made $md_rows table lines of the program's $in_rows"
  exit 1
fi
printf '%s\n%s\n' '<!-- table:begin -->' '<!-- table:end -->' >"$doc"
if python3 "$src/scripts/bench-table.py" --update "$doc" "$out" 2>/dev/null || [ "$(wc -l <"$doc")" -ne 2 ]; then
  echo "smoke: bench-table.py made a reference table of a quick run"
  exit 1
fi
echo "smoke: bench-table.py makes a table with every section and row, and refuses a quick run as the reference"

"$bench" --smoke --only 4 --python /usr/bin/python3 --py /nonexistent/sample_peers.py >"$out" 2>"$err"
status=$?
if [ $status -ne 1 ] || ! grep -q 'did not run' "$err"; then
  echo "smoke: with its Python peers missing, cistern-bench exited $status, not 1 naming the failed row"
  exit 1
fi
echo "smoke: a contender that cannot run makes cistern-bench exit 1"

wait $beside
out=$tier_out err=$tier_err
status=$(cat "$tier_err.status" 2>/dev/null || echo 1)
if [ "$status" -ne 0 ]; then
  echo "smoke: cistern-tier --tiny exited $status"
  grep -E '^tier: ' "$err" | head -n 20
  exit 1
fi
for size in "  4 KiB" "256 KiB"; do
  for pop in "in memory" "half cold" "70 % cold" "half cold, no read-ahead" "70 % cold, no read-ahead"; do
    if ! grep -qF "| $size | $pop |" "$out"; then
      echo "smoke: cistern-tier printed no row for $size, $pop"
      exit 1
    fi
  done
done
verdicts=$(grep -c '^verdict' "$out")
if [ "$verdicts" -ne 12 ]; then
  echo "smoke: cistern-tier printed $verdicts verdict lines, not 12"
  exit 1
fi
if [ "$(grep -c '^read-ahead: ' "$out")" -ne 4 ]; then
  echo "smoke: cistern-tier did not say what read-ahead changes for each tiered population"
  exit 1
fi
echo "smoke: cistern-tier ran every population and sample size and printed its verdicts"

# The FIFO burst benchmark (cistern-fifo-burst) in its tiny mode (a second or
# two): every FIFO of both sample sizes ran, every sample came in order and
# once (its exit status), and it printed its verdicts and ratios.
out=$burst_out err=$burst_err
status=$(cat "$burst_err.status" 2>/dev/null || echo 1)
if [ "$status" -ne 0 ]; then
  echo "smoke: cistern-fifo-burst --tiny exited $status"
  grep -E '^fifo-burst: ' "$err" | head -n 20
  exit 1
fi
for size in "  4 KiB" "256 KiB"; do
  for fifo in "tiered" "hot only" "in memory"; do
    if ! grep -E "^\| $size \| $fifo \|" "$out" | grep -qE '\| ok \|$'; then
      echo "smoke: cistern-fifo-burst printed no passing row for $size, $fifo"
      exit 1
    fi
  done
done
if [ "$(grep -c '^verdict' "$out")" -ne 2 ] || [ "$(grep -c '^ratio: ' "$out")" -ne 2 ]; then
  echo "smoke: cistern-fifo-burst did not print a verdict and a ratio for each sample size"
  exit 1
fi
echo "smoke: cistern-fifo-burst ran every FIFO and sample size, in order and exactly once"

# The prioritized replay benchmark (cistern-prio) in its tiny mode (about a
# second): it exits 1 when a window cistern hands out is not whole, and it
# must print both tables with every contender.
prio="$1/bench/cistern-prio"
"$prio" --tiny >"$out" 2>"$err"
status=$?
if [ $status -ne 0 ]; then
  echo "smoke: cistern-prio --tiny exited $status"
  head -n 20 "$err"
  exit 1
fi
for table in "prioritized sampling:" "prioritized windows:"; do
  if ! grep -qF "$table" "$out"; then
    echo "smoke: cistern-prio printed no table '$table'"
    exit 1
  fi
done
if [ "$(grep -cE '^(cistern|c-tree|numpy) +[0-9.]+ +[0-9.]+x$' "$out")" -ne 6 ]; then
  echo "smoke: cistern-prio did not time cistern, the C tree and numpy in both tables"
  exit 1
fi
echo "smoke: cistern-prio ran its sampling and window rounds, every window whole"
