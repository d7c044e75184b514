#!/usr/bin/env bash
# scrape-bench.sh [BUILDDIR] [SEGMENTS] - how long `cistern exporter` takes to
# answer a scrape of SEGMENTS segments (default 16, each of 1024 slots of
# 4 KiB with samples and a process attached): prints the median and the
# slowest of 200 scrapes, as the exporter times itself
# (cistern_exporter_scrape_duration_seconds) and as the client sees the
# whole HTTP exchange; then the same with --occupancy. A measurement, not a
# test: scripts/test.sh does not run it.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
n=${2:-16}
cistern=$build/tools/cistern
dir=$(mktemp -d)
segs=()
pids=()
pid=
cleanup() {
  for p in "${pids[@]}" $pid; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
  for s in "${segs[@]}"; do "$cistern" rm --force "$s" >/dev/null 2>&1 || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
for i in $(seq 1 "$n"); do
  s=bench-$$-$i
  segs+=("$s")
  "$cistern" create "$s" --slots 1024 --slot-size 4K >/dev/null
  seq 1 100 | "$cistern" put "$s" --lines >/dev/null
done
# A reader attached to the first segment, waiting: a live entry to look at.
"$cistern" get "${segs[0]}" -n 0 --timeout -1 >/dev/null 2>&1 &
pids+=($!)

for mode in "" --occupancy; do
  "$cistern" exporter --listen 127.0.0.1:0 $mode "${segs[@]}" 2>"$dir/exporter.log" &
  pid=$!
  port=
  for _ in $(seq 100); do
    port=$(sed -nE 's|.*serving http://127.0.0.1:([0-9]+)/metrics.*|\1|p' "$dir/exporter.log")
    [ -n "$port" ] && break
    sleep 0.1
  done
  /usr/bin/python3 - "$port" "$n" "${mode:-(default)}" <<'PY'
import re, statistics, sys, time, urllib.request

port, n, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
url = f"http://127.0.0.1:{port}/metrics"
inside, outside = [], []
for i in range(220):
    t = time.perf_counter()
    body = urllib.request.urlopen(url, timeout=10).read().decode()
    dt = time.perf_counter() - t
    if i < 20:
        continue  # warm-up
    outside.append(dt)
    inside.append(float(re.search(r"^cistern_exporter_scrape_duration_seconds (\S+)$", body, re.M).group(1)))
    served = re.search(r'^cistern_exporter_segments\{state="served"\} (\d+)$', body, re.M).group(1)
assert int(served) == n, f"served {served} of {n}"
ms = lambda v: f"{v * 1e3:.2f} ms"
print(f"{n} segments, {mode}: scrape {ms(statistics.median(inside))} median, "
      f"{ms(max(inside))} slowest; HTTP exchange {ms(statistics.median(outside))} median, "
      f"{ms(max(outside))} slowest; {len(body)} bytes")
PY
  kill "$pid"; wait "$pid" || true
  pid=
done
