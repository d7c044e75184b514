#!/usr/bin/env bash
# prometheus.sh BUILDDIR - a real Prometheus scrapes `cistern exporter`: the
# server (Debian's prometheus, on a loopback port and a data directory of its
# own, scraping every second) is asked over its HTTP API for a cistern
# series, which must carry the value the segment holds.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
cistern=$build/tools/cistern
dir=$(mktemp -d)
seg=prom-$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null || true; done
  "$cistern" rm --force "$seg" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "prometheus check: $*" >&2
  for f in "$dir"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }; done
  exit 1
}
command -v prometheus >/dev/null || fail "no prometheus: scripts/test.sh installs it"

"$cistern" create "$seg" --slots 64 --slot-size 64 >/dev/null
seq 1 7 | "$cistern" put "$seg" --lines >/dev/null

"$cistern" exporter --listen 127.0.0.1:0 "$seg" 2>"$dir/exporter.log" &
pids+=($!)
eport=
for _ in $(seq 100); do
  eport=$(sed -nE 's|.*serving http://127.0.0.1:([0-9]+)/metrics.*|\1|p' "$dir/exporter.log")
  [ -n "$eport" ] && break
  sleep 0.1
done
[ -n "$eport" ] || fail "the exporter never said where it serves"

# A free loopback port for Prometheus (asked of the kernel, then released).
pport=$(/usr/bin/python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$dir/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: cistern
    static_configs:
      - targets: ["127.0.0.1:$eport"]
YML
prometheus --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/data" \
  --web.listen-address="127.0.0.1:$pport" --log.level=warn >"$dir/prometheus.log" 2>&1 &
pids+=($!)

# Ask until the series is there (a scrape a second; half a minute at most).
/usr/bin/python3 - "$pport" "$seg" <<'PY' || fail "Prometheus never gave the segment's puts"
import json, sys, time, urllib.parse, urllib.request

port, seg = sys.argv[1:]
q = urllib.parse.quote(f'cistern_puts_total{{job="cistern",segment="{seg}"}}')
url = f"http://127.0.0.1:{port}/api/v1/query?query={q}"
last = None
for _ in range(60):
    try:
        answer = json.load(urllib.request.urlopen(url, timeout=5))
        result = answer["data"]["result"]
        if result:
            last = result[0]["value"][1]
            if last == "7":
                print(f"prometheus check: Prometheus scraped cistern_puts_total = {last}")
                sys.exit(0)
    except OSError as e:
        last = str(e)
    time.sleep(0.5)
sys.exit(f"prometheus check: last answer: {last}")
PY
