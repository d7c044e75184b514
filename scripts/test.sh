#!/usr/bin/env bash
# test.sh - set everything up and run the whole test suite.
# Prints each test program's results and seconds, then scripts/check.sh's (sanitizers,
# valgrind, fuzzing), and a closing "N passed, N failed" line counting both.
set -uo pipefail
cd "$(dirname "$0")/.."
# clang, clang-format, clang's fuzzer runtime and valgrind serve scripts/check.sh,
# run at the end; the benchmark's peers (bench/peers) its smoke run; prometheus
# (with promtool) the monitoring checks; spin the rate limiter's model.
# ./build holds the benchmark programs too (-Dbench=enabled), for the smoke
# run below: a build of their own would compile the library and every test
# program a second time.
EXTRA_PACKAGES="${EXTRA_PACKAGES:-} clang clang-format libclang-rt-14-dev valgrind prometheus spin $(cat bench/peers)" \
  MESON_OPTIONS="${MESON_OPTIONS:-} -Dbench=enabled" bash scripts/setup.sh || exit 1

passed=0 failed=0 rc=0
# Print one criterion program's results and add its counts.
result() { # name output status seconds
  printf '%s\n' "$2" | grep -vE '^\[----\]' | tail -n 40
  echo "   ($4 s)"
  local line p f
  line=$(printf '%s\n' "$2" | grep 'Synthesis: Tested' | tail -n 1)
  p=$(sed -nE 's/.*Passing: ([0-9]+).*/\1/p' <<<"$line"); p=${p:-0}
  f=$(sed -nE 's/.*Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1+\2/p' <<<"$line"); f=$((${f:-1}))
  passed=$((passed + p)); failed=$((failed + f))
  if [ "$3" -ne 0 ] || [ -z "$line" ]; then rc=1; [ "$f" -eq 0 ] && failed=$((failed + 1)); fi
}
# test_remote mostly waits out its peers' timeouts, and test_chaos is one long
# program of its own: they run one after the other beside the rest (the
# machine has two cores), and their results come last.
beside="build/tests/remote/test_remote build/tests/api/test_chaos"
lane=$(mktemp -d)
(for t in $beside; do
   [ -f "$t" ] && [ -x "$t" ] || continue
   start=$SECONDS
   "$t" --jobs=1 >"$lane/$(basename "$t").out" 2>&1
   echo "$? $((SECONDS - start))" >"$lane/$(basename "$t").status"
 done) &
lane_pid=$!
# The criterion programs, in the folders of tests/ (build/tests/<folder>/test_*).
for t in build/tests/*/test_*; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  [[ " $beside " == *" $t "* ]] && continue
  echo "== $(basename "$t")"
  start=$SECONDS
  out=$("$t" --jobs=1 2>&1); status=$?
  result "$(basename "$t")" "$out" $status $((SECONDS - start))
done
wait $lane_pid
for t in $beside; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  n=$(basename "$t")
  echo "== $n (beside the others)"
  read -r status secs <"$lane/$n.status" || { status=1 secs=0; }
  result "$n" "$(cat "$lane/$n.out" 2>/dev/null)" "$status" "$secs"
done
rm -rf "$lane"
# Checks that are whole programs rather than criterion suites: one pass or fail each.
check() {
  local what=$1; shift
  echo "== $what"
  local start=$SECONDS
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); rc=1; echo "FAILED: $what"; fi
  echo "   ($((SECONDS - start)) s)"
}
check "install" bash tests/install/check.sh build
# find_package(cistern) from an installed tree: C, C++, Fortran and MPI consumers.
check "cmake" bash tests/install/cmake.sh build
# The Fortran heat solver on 2 MPI ranks with the Python learner, at toy size;
# and a rank killed mid-step losing none of the steps it sent.
check "mpi gather" bash tests/sim/mpi_gather.sh build
check "mpi heat" bash tests/sim/mpi_heat.sh build
check "mpi kill" /usr/bin/python3 tests/sim/mpi_kill.py build
# -Dtests=false configures without looking for criterion (configure only).
check "tests option" bash tests/options/check.sh
# BENCHMARKS.md's table, generated from the run it names (no benchmark runs here).
check "bench table" bash tests/bench/table.sh
check "ordering edges" bash scripts/check-edges.sh
# lib/ keeps its layers: no include or call up a layer or across policies.
check "layers" bash scripts/check-layers.sh build
# The exporter's and serve's metrics under promtool, the dashboard's and the
# alerting rules' metric names; and a real Prometheus scraping the exporter.
check "monitoring" bash tests/monitoring/check.sh build
check "prometheus" bash tests/monitoring/prometheus.sh build
# The rate limiter's Promela model, its smaller configurations (model/check.sh).
check "limiter model" bash model/check.sh --limiter-quick
# The benchmark programs (built in ./build above): every contender run once,
# its payload checks passed, no time asserted.
check "bench smoke" bash tests/bench/smoke.sh build

# The Python binding: pytest under Debian's interpreter (where numpy and torch live).
# test_wheel.py builds the whole project once more (a wheel, through
# meson-python) and waits on that build most of its time: it runs in a
# pytest of its own beside the other tests, its summary printed last.
echo "== python"
start=$SECONDS
run_pytest() {
  PYTHONPATH=build/python:python CISTERN_C_PRODUCER=build/python/c_producer \
    /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@" 2>&1
}
wheel=python/tests/test_wheel.py wheel_out=$(mktemp)
run_pytest "$wheel" >"$wheel_out" & wheel_pid=$!
pyout=$(run_pytest --ignore="$wheel" python/tests); pystatus=$?
wait $wheel_pid || pystatus=1
printf '%s\n' "$pyout" | tail -n 15
echo "-- $wheel (beside the others)"
tail -n 15 "$wheel_out"
pyout="$pyout
$(cat "$wheel_out")"
rm -f "$wheel_out"
echo "   ($((SECONDS - start)) s)"
pp=$(grep -E '^(=+ )?[0-9]+ (passed|failed)|^[0-9]+ .* in [0-9.]+s' <<<"$pyout" | grep -oE '[0-9]+ passed' |
  awk '{s+=$1} END {print s+0}')
pf=$(grep -oE '[0-9]+ (failed|error)' <<<"$pyout" | awk '{s+=$1} END {print s+0}')
passed=$((passed + ${pp:-0})); failed=$((failed + pf))
if [ $pystatus -ne 0 ]; then rc=1; [ "$pf" -eq 0 ] && failed=$((failed + 1)); fi

# The same tests under the sanitizers and valgrind, and the fuzz targets (CHECKS=none skips).
log=$(mktemp)
bash scripts/check.sh 2>&1 | tee "$log"; status=${PIPESTATUS[0]}
line=$(grep -E '^check: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1); rm -f "$log"
p=$(sed -nE 's/^check: ([0-9]+) passed.*/\1/p' <<<"$line")
f=$(sed -nE 's/.* ([0-9]+) failed/\1/p' <<<"$line")
passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
[ $status -eq 0 ] || rc=1

echo "tests: $passed passed, $failed failed"
exit $rc
