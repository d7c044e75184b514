#!/usr/bin/env bash
# check.sh BUILDDIR - the exporter's output passes `promtool check metrics`
# without a word, so does `cistern serve --metrics`'s; the alerting rules pass
# `promtool check rules`; and every metric the Grafana dashboard and the rules
# name is one the exporter or serve gives.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
cistern=$build/tools/cistern
dir=$(mktemp -d)
tag=mon-$$
segs=("$tag-fifo" "$tag-res" "$tag-evict" "$tag-prio")
serve_pid=
cleanup() {
  if [ -n "$serve_pid" ]; then kill "$serve_pid" 2>/dev/null; wait "$serve_pid" 2>/dev/null || true; fi
  for s in "${segs[@]}"; do "$cistern" rm --force "$s" >/dev/null 2>&1 || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "monitoring check: $*" >&2; exit 1; }

# Segments of several kinds, so that every family shows: counted producers,
# a rate limiter, evictions, priorities.
"$cistern" create "${segs[0]}" --slots 16 --slot-size 64 --producers 2 >/dev/null
"$cistern" create "${segs[1]}" --policy reservoir --slots 16 --watermark 4 --slot-size 64 \
  --reads-per-put 2 >/dev/null
"$cistern" create "${segs[2]}" --policy fifo-evict-reservoir --slots 4 --watermark 2 \
  --slot-size 64 --lossy >/dev/null
"$cistern" create "${segs[3]}" --policy prioritized --slots 16 --watermark 1 --slot-size 64 \
  --alpha 0.6 --beta 0.4 --epsilon 0.01 >/dev/null
for s in "${segs[@]}"; do seq 1 8 | "$cistern" put "$s" --lines --timeout 0 >/dev/null 2>&1 || true; done

# A dump's progress, as `cistern dump --textfile` keeps it while it runs.
mkdir "$dir/dumps"
printf '%s\n' '# HELP cistern_dump_written_samples x' '# TYPE cistern_dump_written_samples gauge' \
  "cistern_dump_written_samples{segment=\"${segs[0]}\"} 3" \
  "cistern_dump_samples{segment=\"${segs[0]}\"} 8" \
  "cistern_dump_start_time_seconds{segment=\"${segs[0]}\"} 1700000000.000" \
  >"$dir/dumps/cistern-dump-${segs[0]}.prom"
"$cistern" exporter --textfile "$dir" --once --occupancy --dumps "$dir/dumps" "${segs[@]}"
out=$dir/cistern.prom
grep -q "^cistern_dump_progress_ratio{segment=\"${segs[0]}\"} 0.375" "$out" ||
  fail "no dump progress of ${segs[0]} in $out"
grep -q "^cistern_puts_total{segment=\"${segs[0]}\"} " "$out" || fail "no puts of ${segs[0]} in $out"
grep -q "^cistern_priority_mass{segment=\"${segs[3]}\"} " "$out" ||
  fail "no priority mass of ${segs[3]} in $out"
lint=$(promtool check metrics <"$out" 2>&1) || fail "promtool check metrics failed: $lint"
[ -z "$lint" ] || fail "promtool check metrics on the exporter's output: $lint"

# serve's own metrics, from a server on ports of the kernel's choice.
"$cistern" serve --segment "${segs[0]}" --bind tcp://127.0.0.1:0 --metrics 127.0.0.1:0 \
  2>"$dir/serve.err" &
serve_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -nE 's|.*metrics at http://127.0.0.1:([0-9]+)/metrics.*|\1|p' "$dir/serve.err")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fail "serve never said where its metrics are: $(cat "$dir/serve.err")"
/usr/bin/python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
  "http://127.0.0.1:$port/metrics" >"$dir/serve.prom"
kill "$serve_pid"; wait "$serve_pid" || fail "serve did not stop cleanly on SIGTERM"
serve_pid=
for fam in cistern_serve_credits_granted_total cistern_serve_credits_outstanding \
  cistern_serve_received_bytes_total cistern_serve_sent_bytes_total; do
  grep -q "^$fam " "$dir/serve.prom" || fail "serve gives no $fam: $(cat "$dir/serve.prom")"
done
lint=$(promtool check metrics <"$dir/serve.prom" 2>&1) || fail "promtool check metrics failed: $lint"
[ -z "$lint" ] || fail "promtool check metrics on serve's output: $lint"

rules=$src/docs/monitoring/cistern-rules.yml
promtool check rules "$rules" >"$dir/rules.log" 2>&1 || fail "promtool check rules: $(cat "$dir/rules.log")"

# Every metric named in the dashboard's queries and in the rules' expressions.
/usr/bin/python3 - "$src/docs/monitoring/cistern-dashboard.json" "$rules" "$out" "$dir/serve.prom" <<'PY'
import json, re, sys

dash, rules, *outputs = sys.argv[1:]
NAME = re.compile(r"\bcistern_[a-z0-9_]+")
exprs = []
def walk(x):
    if isinstance(x, dict):
        if isinstance(x.get("expr"), str):
            exprs.append(x["expr"])
        if isinstance(x.get("query"), dict) and isinstance(x["query"].get("query"), str):
            exprs.append(x["query"]["query"])
        for v in x.values():
            walk(v)
    elif isinstance(x, list):
        for v in x:
            walk(v)
walk(json.load(open(dash)))
# The rules: every line of an `expr:` (block scalars run until the next key).
inexpr = False
for line in open(rules):
    key = re.match(r"\s*-?\s*([a-z_]+):", line)
    if key:
        inexpr = key.group(1) == "expr"
        line = line.split(":", 1)[1]
    if inexpr:
        exprs.append(line)
named = {n for e in exprs for n in NAME.findall(e)}
given = set()
for path in outputs:
    for line in open(path):
        if not line.startswith("#"):
            given.add(re.split(r"[{ ]", line, 1)[0])
if not {"cistern_population", "cistern_puts_total", "cistern_serve_put_samples_total"} <= named:
    sys.exit(f"monitoring check: the name search is blind: found {sorted(named)}")
missing = sorted(named - given)
if missing:
    sys.exit(f"monitoring check: named in the dashboard or rules, given by no exporter: {missing}")
print(f"monitoring check: {len(named)} metrics named by the dashboard and rules, all given")
PY
