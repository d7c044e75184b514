#!/usr/bin/env bash
# check.sh - check the sources' format, then run the test suite again under
# the checking tools, each in a build directory of its own. scripts/test.sh
# calls it; it can also run alone (after setup.sh has installed clang,
# clang-format, libclang-rt-14-dev and valgrind):
#
#   format      scripts/format.sh --check: the C sources as .clang-format lays them
#               out (clang-format 14), the other text files as .editorconfig says;
#               bash scripts/format.sh fixes what it finds
#   build-asan  clang, AddressSanitizer + UndefinedBehaviorSanitizer: every test program
#               (also proves the tree builds warning-free with clang)
#   build-tsan  gcc, ThreadSanitizer: the multithreaded and multi-process tests,
#               linked with tests/shim (Criterion cannot run under TSan)
#   valgrind    memcheck over the single-process tests (api/test_api, from ./build);
#               it runs beside the TSan run when both are picked
#   fuzz        scripts/fuzz.sh, the short run, if clang's fuzzer runtime is there
#
# In the ASan and TSan runs the longest programs run one after the other
# beside the rest (the machine has two cores); their results come last.
#
# CHECKS="format asan tsan valgrind fuzz" (the default) picks which run;
# CHECKS=none runs nothing. Closes with "check: N passed, N failed": Criterion
# tests count one by one, the format check, the valgrind run and each fuzz
# target count as one each.
set -uo pipefail
cd "$(dirname "$0")/.."
checks=" ${CHECKS:-format asan tsan valgrind fuzz} "

passed=0 failed=0

# Add the counts of a Criterion "Synthesis" line (or of the shim's, same format).
count() { # output status
  local line p f
  line=$(printf '%s\n' "$1" | grep 'Synthesis: Tested' | tail -n 1)
  p=$(sed -nE 's/.*Passing: ([0-9]+).*/\1/p' <<<"$line"); p=${p:-0}
  f=$(sed -nE 's/.*Failing: ([0-9]+) \| Crashing: ([0-9]+).*/\1+\2/p' <<<"$line"); f=$((${f:-0}))
  if [ "$2" -ne 0 ] || [ -z "$line" ]; then [ "$f" -eq 0 ] && f=1; fi
  passed=$((passed + p)); failed=$((failed + f))
}

# The output without progress lines or sanitizer stack frames, trimmed; after
# a failure, its own lines first (criterion prints them as [----] lines, with
# the seed of a randomized test).
show() {
  if printf '%s\n' "$1" | grep -q '^\[FAIL\]'; then
    printf '%s\n' "$1" | grep -E '^\[----\] .*(Assertion|seed)' | head -n 20
  fi
  printf '%s\n' "$1" | grep -vE '^\[(----|RUN |PASS)\]' | grep -vE '^    #[0-9]+ ' | tail -n 40
}

# Run programs one after the other in the background (a second lane beside
# the caller's), each with the given arguments; beside_results waits for them
# and shows and counts their results.
lane_progs="" lane_dir="" lane_pid=""
beside() { # "programs" args...
  local progs=$1; shift
  lane_progs=$(echo $progs) lane_dir=$(mktemp -d)
  (for t in $lane_progs; do
     [ -f "$t" ] && [ -x "$t" ] || continue
     start=$SECONDS
     "$t" "$@" >"$lane_dir/$(basename "$t").out" 2>&1
     echo "$? $((SECONDS - start))" >"$lane_dir/$(basename "$t").status"
   done) &
  lane_pid=$!
}
beside_results() {
  local t n status secs out
  wait "$lane_pid"
  for t in $lane_progs; do
    [ -f "$t" ] && [ -x "$t" ] || continue
    n=$(basename "$t")
    echo "-- $n (beside the others)"
    read -r status secs <"$lane_dir/$n.status" || { status=1 secs=0; }
    out=$(cat "$lane_dir/$n.out" 2>/dev/null)
    show "$out"; count "$out" "$status"
    echo "   ($secs s)"
  done
  rm -rf "$lane_dir"
  lane_progs="" lane_dir="" lane_pid=""
}

# valgrind memcheck over build/tests/api/test_api, in the background: its
# output and exit status go to vg_dir. Criterion sees valgrind and runs the
# tests one by one without early exit; errors in its workers do not change
# their exit status, so the valgrind section reads the log.
vg_pid="" vg_dir="" vg_start=""
valgrind_start() {
  command -v valgrind >/dev/null || return 0
  vg_dir=$(mktemp -d) vg_start=$SECONDS
  (valgrind -q --trace-children=yes --leak-check=full --errors-for-leak-kinds=definite \
     build/tests/api/test_api --jobs=1 >"$vg_dir/out" 2>&1
   echo $? >"$vg_dir/status") &
  vg_pid=$!
}

build() { # dir compiler meson-options...
  local dir=$1 cc=$2; shift 2
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    CC=$cc meson setup "$dir" "$@" >/dev/null
  fi && ninja -C "$dir" >/dev/null
}

if [[ $checks == *" format "* ]]; then
  echo "== format (clang-format 14, .editorconfig)"
  if bash scripts/format.sh --check; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
fi

if [[ $checks == *" asan "* ]]; then
  echo "== asan+ubsan (clang, build-asan)"
  section=$SECONDS
  if build build-asan clang -Db_sanitize=address,undefined -Db_lundef=false; then
    # SIGBUS is what one test expects of a truncated mapping: leave it to the kernel.
    export ASAN_OPTIONS=handle_sigbus=0:halt_on_error=1:detect_leaks=1
    export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
    # The loops that wait for a rare signal (tests/admin/test_foreign.c) run fewer times here.
    export CISTERN_TEST_RUNS=20
    # The chaos tests kill fewer here: the plain run makes their full count.
    export CISTERN_CHAOS_KILLS=15
    # test_remote spends most of its time waiting out its peers' timeouts, and
    # test_chaos and test_cli are the longest of the rest: they run one after
    # the other beside the others (two cores), and their results come last.
    beside "build-asan/tests/remote/test_remote build-asan/tests/api/test_chaos
      build-asan/tests/tools/test_cli" --jobs=1
    for t in build-asan/tests/*/test_*; do
      [ -f "$t" ] && [ -x "$t" ] || continue
      [[ " $lane_progs " == *" $t "* ]] && continue
      echo "-- $(basename "$t")"
      start=$SECONDS
      out=$("$t" --jobs=1 2>&1); status=$?
      show "$out"; count "$out" $status
      echo "   ($((SECONDS - start)) s)"
    done
    beside_results
    unset ASAN_OPTIONS UBSAN_OPTIONS CISTERN_TEST_RUNS CISTERN_CHAOS_KILLS
  else
    echo "asan: build failed"; failed=$((failed + 1))
  fi
  echo "   (asan: $((SECONDS - section)) s)"
fi

if [[ $checks == *" tsan "* ]]; then
  echo "== tsan (gcc, build-tsan)"
  section=$SECONDS
  if build build-tsan gcc -Db_sanitize=thread; then
    # valgrind's run (its section below) starts now, beside this one: both
    # are mostly one busy process on a two-core machine.
    [[ $checks == *" valgrind "* ]] && valgrind_start
    # The shim runs each test in a child forked from a one-thread runner, and the
    # tests fork only from one-thread processes, so TSan's fork rules hold.
    export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
    export CISTERN_CHAOS_KILLS=15
    # test_chaos, the longest by far, runs beside the five others.
    beside "build-tsan/tests/api/test_chaos"
    for t in api/test_threads policy/test_fifo_mp policy/test_crash_points policy/test_prioritized \
      policy/test_prio_windows; do
      echo "-- $(basename "$t")"
      start=$SECONDS
      out=$("build-tsan/tests/$t" 2>&1); status=$?
      show "$out"; count "$out" $status
      echo "   ($((SECONDS - start)) s)"
    done
    beside_results
    unset TSAN_OPTIONS CISTERN_CHAOS_KILLS
  else
    echo "tsan: build failed"; failed=$((failed + 1))
  fi
  echo "   (tsan: $((SECONDS - section)) s)"
fi

if [[ $checks == *" valgrind "* ]]; then
  echo "== valgrind memcheck (build/tests/api/test_api)"
  section=${vg_start:-$SECONDS}
  if command -v valgrind >/dev/null; then
    [ -n "$vg_pid" ] || valgrind_start
    wait "$vg_pid"
    read -r status <"$vg_dir/status" || status=1
    out=$(cat "$vg_dir/out")
    rm -rf "$vg_dir"
    errors=$(printf '%s\n' "$out" | grep -cE '^==[0-9]+== ')
    show "$out"
    if [ $status -eq 0 ] && [ "$errors" -eq 0 ] && printf '%s\n' "$out" | grep -q 'Failing: 0 | Crashing: 0'; then
      echo "valgrind: clean"; passed=$((passed + 1))
    else
      echo "valgrind: $errors report lines, status $status"; failed=$((failed + 1))
    fi
  else
    echo "valgrind: not installed"; failed=$((failed + 1))
  fi
  echo "   (valgrind: $((SECONDS - section)) s)"
fi

if [[ $checks == *" fuzz "* ]]; then
  echo "== fuzz (short run)"
  section=$SECONDS
  rt=$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a 2>/dev/null)
  if [ -n "$rt" ] && [ -f "$rt" ]; then
    out=$(bash scripts/fuzz.sh 2>&1)
    printf '%s\n' "$out"
    line=$(printf '%s\n' "$out" | grep -E '^fuzz: [0-9]+ passed, [0-9]+ failed' | tail -n 1)
    p=$(sed -nE 's/^fuzz: ([0-9]+) passed.*/\1/p' <<<"$line")
    f=$(sed -nE 's/.* ([0-9]+) failed/\1/p' <<<"$line")
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-1}))
  else
    echo "fuzz: skipped, clang's fuzzer runtime (libclang-rt-14-dev) is not installed"
  fi
  echo "   (fuzz: $((SECONDS - section)) s)"
fi

echo "check: $passed passed, $failed failed"
[ $failed -eq 0 ]
