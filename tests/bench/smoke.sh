#!/usr/bin/env bash
# smoke.sh BUILDDIR - the benchmark program, built with -Dbench=enabled in
# BUILDDIR, runs every contender of every section once (--smoke) and exits 0:
# each ran and every sample it passed arrived whole and in order (the
# program's own payload checks). No time is asserted: these numbers come
# from one short repetition on a machine running other tests. Then it must
# exit 1 when a contender cannot run (section 4 with its Python peers'
# script missing), so that a failure is not taken for a pass.
set -uo pipefail
bench="$1/bench/cistern-bench"
src=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT

"$bench" --smoke --python /usr/bin/python3 --py "$src/bench/sample_peers.py" >"$out" 2>"$err"
status=$?
if [ $status -ne 0 ]; then
  echo "smoke: cistern-bench --smoke exited $status"
  grep -E '^cistern-bench: ' "$err" | head -n 20
  exit 1
fi
for s in "0. machine" "1. 1P/1R" "2. 4P/4R" "3. 1P/1R 1 MiB" "4. batch" "5. latency" "6a." "6b." "6c." "7. Python"; do
  if ! grep -qF "| $s" "$out"; then
    echo "smoke: no rows for section '$s'"
    exit 1
  fi
done
rows=$(grep -cE '^\| ' "$out")
echo "smoke: $rows table lines, every contender ran and passed its checks"

"$bench" --smoke --only 4 --python /usr/bin/python3 --py /nonexistent/sample_peers.py >"$out" 2>"$err"
status=$?
if [ $status -ne 1 ] || ! grep -q 'did not run' "$err"; then
  echo "smoke: with its Python peers missing, cistern-bench exited $status, not 1 naming the failed row"
  exit 1
fi
echo "smoke: a contender that cannot run makes cistern-bench exit 1"
