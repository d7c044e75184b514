#!/usr/bin/env bash
# fuzz.sh - build cistern's libFuzzer targets (clang, ASan + UBSan) in ./build-fuzz
# and run each one over its seed corpus (fuzz/corpus/<target>/, kept in the repo).
#
#   bash scripts/fuzz.sh              short run, FUZZ_SECONDS (default 20) per target (CI)
#   bash scripts/fuzz.sh --long       long run, FUZZ_SECONDS (default 1800) per target
#   bash scripts/fuzz.sh [--long] header attach     only the targets named
#
# New inputs go to build-fuzz/corpus/<target>/ (never into the repository; copy
# the interesting ones to fuzz/corpus/ by hand). A crash, a hang (over 10 s) or a
# leak leaves its input in build-fuzz/artifacts/; replay it with
#   build-fuzz/fuzz/fuzz_<target> build-fuzz/artifacts/<file>
# FUZZ_JOBS targets run at a time (default: the cores online), each on a core.
# Ends with a "fuzz: N passed, N failed" line (one per target).
set -uo pipefail
cd "$(dirname "$0")/.."

long=0
targets=()
for a in "$@"; do
  case "$a" in
    --long) long=1 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) targets+=("$a") ;;
  esac
done
((${#targets[@]})) || targets=(header attach dump)
seconds=${FUZZ_SECONDS:-$([ $long = 1 ] && echo 1800 || echo 20)}

# clang and its fuzzer runtime, from Debian; setup.sh installs what is missing.
EXTRA_PACKAGES="${EXTRA_PACKAGES:-} clang libclang-rt-14-dev" bash scripts/setup.sh >/dev/null || exit 1

dir=build-fuzz
opts="-Dfuzz=enabled -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized"
if [ -f "$dir/build.ninja" ]; then
  meson setup --reconfigure "$dir" $opts >/dev/null || exit 1
else
  CC=clang meson setup "$dir" $opts >/dev/null || exit 1
fi
ninja -C "$dir" $(printf 'fuzz/fuzz_%s ' "${targets[@]}") >/dev/null || exit 1

# A SIGBUS is a finding here, not something for ASan to turn into a report of its own.
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:halt_on_error=1:print_stacktrace=1"

passed=0 failed=0
mkdir -p "$dir/artifacts"
# One target's run; its exit status goes to $dir/fuzz_<target>.status.
fuzz_one() { # target
  local t=$1
  mkdir -p "$dir/corpus/$t"
  "$dir/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
    "$dir/corpus/$t" "fuzz/corpus/$t" >"$dir/fuzz_$t.log" 2>&1
  echo $? >"$dir/fuzz_$t.status"
  # libFuzzer exits without the target's clean-up: drop the objects its inputs made.
  rm -f /dev/shm/cistern.fuzz-"$t"-* /dev/shm/fuzz-"$t"-*
}
# Each target is one process on one core for its seconds: FUZZ_JOBS (default:
# the cores online) run at a time, so each still has a core to itself. The
# results print in the targets' order.
njobs=${FUZZ_JOBS:-$(nproc)}
pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do
    wait -n
  done
  rm -f "$dir/fuzz_$t.status"
  fuzz_one "$t" &
  pids+=($!)
done
wait "${pids[@]}"
for t in "${targets[@]}"; do
  log="$dir/fuzz_$t.log"
  echo "== fuzz_$t: ${seconds}s"
  status=$(cat "$dir/fuzz_$t.status" 2>/dev/null || echo 1)
  grep -E '^(stat::number_of_executed_units|stat::new_units_added)|^Done ' "$log" | sed 's/^/   /'
  if [ "$status" -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "   FAILED (status $status); the last lines of $log:"
    tail -n 30 "$log" | sed 's/^/   /'
  fi
done
echo "fuzz: $passed passed, $failed failed"
[ $failed -eq 0 ]
