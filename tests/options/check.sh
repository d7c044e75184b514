#!/usr/bin/env bash
# check.sh - `meson setup -Dtests=false` configures without the test suite:
# criterion is never looked up (a machine without it can build cistern), and
# no test program is among the targets. Configures a scratch build directory
# and builds nothing.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
meson setup "$dir/build" "$src" -Dtests=false >"$dir/setup.log" 2>&1 || {
  cat "$dir/setup.log" >&2
  echo "options check: meson setup -Dtests=false failed" >&2
  exit 1
}
log="$dir/build/meson-logs/meson-log.txt"
if grep -qi criterion "$log"; then
  grep -i criterion "$log" | head -n 5 >&2
  echo "options check: -Dtests=false still looked for criterion" >&2
  exit 1
fi
targets=$(meson introspect --targets "$dir/build")
if grep -q '"name": "test_' <<<"$targets"; then
  echo "options check: -Dtests=false still defines test programs" >&2
  exit 1
fi
# The control: the same check sees criterion and the test programs by default.
meson setup --reconfigure "$dir/build" "$src" -Dtests=true >/dev/null
if ! grep -qi criterion "$log" || ! meson introspect --targets "$dir/build" | grep -q '"name": "test_'; then
  echo "options check: the check itself is blind (default build shows no criterion)" >&2
  exit 1
fi
echo "options check: -Dtests=false configures without criterion and without test programs"
