#!/usr/bin/env bash
# check.sh - model-check model/fifo.pml, auto_roles.pml and limiter.pml with spin
# (installs Debian's spin if missing). The FIFO's searches are not run by CI (the
# state space is large); scripts/test.sh runs --limiter.
#
#   bash model/check.sh                 swarm search: SEEDS (8) randomised bitstate
#                                       searches of SECONDS_PER_SEED (30) each;
#                                       partial, but finds the head-passes-tail
#                                       wedge (with 'h >= t' put back to 'h == t')
#                                       within a minute
#   bash model/check.sh --exhaustive    full search (-DCOLLAPSE); more than 10 GB
#                                       of memory and the better part of an hour
#
#   bash model/check.sh --auto          the FIFO's automatic roles (auto_roles.pml):
#                                       whole state space, 1.5 * 10^8 states
#                                       with one kill, 9 GB and about 5 minutes
#
#   bash model/check.sh --limiter       the reservoirs' rate limiter (limiter.pml):
#                                       whole state space of each configuration
#                                       below, a few minutes in all; --limiter-quick
#                                       (scripts/test.sh) the smaller ones, in seconds
#
#   MAXKILLS=2 (default 1) kills at most that many processes in a run;
#   SOLE=1 checks a CISTERN_SINGLE_PRODUCER | CISTERN_SINGLE_READER segment;
#   A_PUTS=2 (default 1) makes producer A put two samples, so the ring wraps;
#   HANDBACK=1 lets the reader hand a sample back unread (cistern_unacquire)
#   that many times a run instead of releasing it.
#
# Checks every interleaving searched for assertion violations (lost or damaged
# samples, duplicates beyond redeliveries, a waiter woken twice by its timer with
# nothing changed: a wedge) and invalid end states (deadlocks), and prints the
# counter-example if one is found.
set -euo pipefail
cd "$(dirname "$0")"
mode=${1:-swarm}
defs="-DMAXKILLS=${MAXKILLS:-1} -DA_PUTS=${A_PUTS:-1}"
if [ -n "${SOLE:-}" ] && [ "$SOLE" != 0 ]; then
  defs="$defs -DSOLE"
fi
if [ -n "${HANDBACK:-}" ] && [ "$HANDBACK" != 0 ]; then
  defs="$defs -DHANDBACK=$HANDBACK"
fi
if ! command -v spin >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "model: spin is missing; apt-get install spin" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq spin >/dev/null
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp fifo.pml auto_roles.pml limiter.pml "$work/"
cd "$work"

if [ "$mode" = --limiter ] || [ "$mode" = --limiter-quick ]; then
  # Policy (FIFO_EVICT or Reservoir's), reads per put, slack, batch, readers, puts;
  # MAXKILLS (default 1) where a configuration does not set it.
  configs=(
    "-DNPUTS=3"
    "-DNPUTS=3 -DFIFO_EVICT"
    "-DNPUTS=3 -DBATCH=2 -DFIFO_EVICT -DMAXKILLS=0"
    "-DNPUTS=3 -DFIFO_EVICT -DRPP_NUM=2 -DMAXKILLS=0"
    "-DNPUTS=3 -DRPP_NUM=3 -DRPP_DEN=2 -DMAXKILLS=0"
    "-DNPUTS=3 -DBATCH=2 -DRPP_NUM=2 -DSLACK=3 -DMAXKILLS=0"
  )
  if [ "$mode" = --limiter ]; then
    configs+=(
      "-DNPUTS=3 -DBATCH=2 -DFIFO_EVICT"
      "-DNPUTS=3 -DFIFO_EVICT -DRPP_NUM=2"
      "-DNPUTS=3 -DRPP_NUM=3 -DRPP_DEN=2"
      "-DNPUTS=3 -DBATCH=2 -DRPP_NUM=2"
      "-DNPUTS=3 -DBATCH=2 -DRPP_NUM=2 -DSLACK=3"
      "-DNPUTS=4"
      "-DNPUTS=4 -DFIFO_EVICT"
      "-DNPUTS=4 -DFIFO_EVICT -DRPP_NUM=2"
      "-DNPUTS=4 -DRPP_NUM=3 -DRPP_DEN=2"
      "-DNPUTS=3 -DNREAD=2 -DMAXKILLS=0"
      "-DNPUTS=3 -DNREAD=2 -DFIFO_EVICT -DMAXKILLS=0"
    )
  fi
  # One configuration's search, in a directory of its own (spin and pan write
  # their files beside the model); its verdict goes to result, 1 on a violation.
  limiter_one() { # dir defs
    local ldefs=$2
    mkdir "$1" && cp limiter.pml "$1/" && cd "$1" || return 2
    spin $ldefs -a limiter.pml
    gcc -O2 -w -DSAFETY -DCOLLAPSE -o pan pan.c
    ./pan -m1000000 -w26 >pan.out 2>&1 || true
    if [ -f limiter.pml.trail ] || ! grep -q 'errors: 0' pan.out; then
      {
        echo "model: counter-example (limiter, $ldefs):"
        grep -E 'error|violat' pan.out | head -n 5
        spin $ldefs -t -p -g limiter.pml | tail -n 150
      } >result
      return 1
    fi
    echo "model: limiter ($ldefs): no violation in $(grep -oE '[0-9]+ states, stored' pan.out)" >result
  }
  # Each search is one process on one core: MODEL_JOBS (default: the cores
  # online) run at a time. The verdicts print in the configurations' order.
  njobs=${MODEL_JOBS:-$(nproc)}
  pids=()
  for i in "${!configs[@]}"; do
    c=${configs[$i]}
    ldefs=$c
    [[ $c == *MAXKILLS* ]] || ldefs="-DMAXKILLS=${MAXKILLS:-1} $c"
    while [ "$(jobs -rp | wc -l)" -ge "$njobs" ]; do
      wait -n || true
    done
    (limiter_one "lim$i" "$ldefs") &
    pids+=($!)
  done
  status=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || status=1
    if [ -f "lim$i/result" ]; then
      cat "lim$i/result"
    else
      echo "model: limiter (${configs[$i]}): the search did not run"
    fi
  done
  [ $status -eq 0 ] || exit 1
  exit 0
fi

if [ "$mode" = --auto ]; then
  adefs="-DMAXKILLS=${MAXKILLS:-1}"
  spin $adefs -a auto_roles.pml
  # -w: gcc's array-bounds notes on pan.c's generated undo code are not ours.
  gcc -O2 -w -DSAFETY -DCOLLAPSE -o pan pan.c
  ./pan -m1000000 -w28 | tee pan.out | grep -vE '^Depth='
  if [ -f auto_roles.pml.trail ]; then
    echo "model: counter-example (auto roles):"
    spin $adefs -t -p -g auto_roles.pml | tail -n 150
    exit 1
  fi
  grep -q 'errors: 0' pan.out
  echo "model: no violation in the whole state space of auto_roles.pml ($adefs)"
  exit 0
fi
spin $defs -a fifo.pml

trail() {
  echo "model: counter-example ($1):"
  spin $defs -t -p -g fifo.pml | tail -n 150
  exit 1
}

if [ "$mode" = --exhaustive ]; then
  gcc -O2 -DSAFETY -DCOLLAPSE -o pan pan.c
  ./pan -m2000000 -w29 | tee pan.out | grep -vE '^Depth='
  [ -f fifo.pml.trail ] && trail "exhaustive"
  grep -q 'errors: 0' pan.out
  echo "model: no violation in the whole state space ($defs)"
else
  gcc -O2 -DSAFETY -DBITSTATE -DT_RAND -DP_RAND -o pan pan.c
  for seed in $(seq 1 "${SEEDS:-8}"); do
    timeout "${SECONDS_PER_SEED:-30}" ./pan -RS"$seed" -m2000000 -w28 >pan.out 2>&1 || true
    [ -f fifo.pml.trail ] && trail "seed $seed"
    echo "model: seed $seed: no violation ($(grep -oE 'States= *[0-9.e+]+' pan.out | tail -n 1))"
  done
  echo "model: no violation found by ${SEEDS:-8} randomised searches ($defs); partial, see --exhaustive"
fi
