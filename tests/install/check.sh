#!/usr/bin/env bash
# check.sh BUILDDIR - `meson install` into a scratch root, then build and run
# programs against the installed headers, libraries and pkg-config files: one
# on the core alone (cistern.pc), which must not need libzmq, and one that
# uses the remote calls (cistern-remote.pc).
set -euo pipefail
build=$(cd "$1" && pwd)
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
meson install -C "$build" --destdir "$root" >/dev/null
pc=$(dirname "$(find "$root" -name cistern.pc | head -n 1)")
export PKG_CONFIG_PATH="$pc" PKG_CONFIG_SYSROOT_DIR="$root"
cat > "$root/hello.c" <<'C'
#include <cistern.h>
#include <stdio.h>
#include <unistd.h>
int main(void)
{
	char name[64];
	snprintf(name, sizeof(name), "install-check-%d", (int)getpid());
	struct cistern *c;
	if (cistern_create(name, NULL, &c) < 0)
		return 1;
	char out[8];
	int ok = cistern_put(c, "ok", 2, NULL, 0) == 0 && cistern_get(c, out, sizeof(out), NULL, 0) == 2;
	cistern_detach(c);
	cistern_unlink(name);
	return ok ? 0 : 1;
}
C
cat > "$root/remote.c" <<'C'
#include <cistern.h>
#include <cistern/admin.h>
#include <cistern/remote.h>
#include <errno.h>
int main(void)
{
	/* NULL endpoint and path are refused before any socket or file is touched. */
	struct cistern_remote *r;
	struct cistern_dump_info info;
	return cistern_remote_connect(NULL, NULL, &r) == -EINVAL &&
		       cistern_dump_verify(NULL, &info) == -EINVAL
		       ? 0
		       : 1;
}
C
# The core program, dynamically linked, then statically with --static as before.
cc -std=c11 -Wall -Wextra -Werror "$root/hello.c" -o "$root/hello_dyn" $(pkg-config --cflags --libs cistern)
cc -std=c11 -Wall -Wextra -Werror "$root/hello.c" -o "$root/hello" $(pkg-config --cflags --static --libs cistern) -static-libgcc
cc -std=c11 -Wall -Wextra -Werror "$root/remote.c" -o "$root/remote" $(pkg-config --cflags --libs cistern-remote)
libdir=$(dirname "$(find "$root" -name 'libcistern.so' | head -n 1)")
LD_LIBRARY_PATH="$libdir" "$root/hello_dyn"
LD_LIBRARY_PATH="$libdir" "$root/hello"
LD_LIBRARY_PATH="$libdir" "$root/remote"
# The core links no ZeroMQ: neither the library nor a program on it needs libzmq.
for f in "$libdir/libcistern.so" "$root/hello_dyn"; do
  if readelf -d "$f" | grep -q 'libzmq'; then
    echo "install check: $(basename "$f") needs libzmq" >&2
    exit 1
  fi
done
if pkg-config --static --libs cistern | grep -q -- '-lzmq'; then
  echo "install check: cistern.pc names libzmq" >&2
  exit 1
fi
if ! readelf -d "$root/remote" | grep -q 'libcistern-remote'; then
  echo "install check: the remote program does not need libcistern-remote" >&2
  exit 1
fi
# The shared libraries export the public API and nothing else.
for lib in libcistern.so libcistern-remote.so; do
  extra=$(nm -D --defined-only "$libdir/$lib" | awk '{print $3}' | grep -v '^cistern_[a-z]' || true)
  if [ -n "$extra" ]; then
    echo "install check: $lib exports internal symbols: $extra" >&2
    exit 1
  fi
done
# The static library exports no name outside cistern's: internal functions carry
# cistern__, so a program that links libcistern.a keeps its own names to itself.
for a in libcistern.a libcistern-remote.a; do
  archive=$(find "$root" -name "$a" | head -n 1)
  if [ -z "$archive" ]; then
    echo "install check: meson install wrote no $a" >&2
    exit 1
  fi
  foreign=$(nm -g --defined-only "$archive" | awk 'NF == 3 {print $3}' | grep -v '^cistern_' || true)
  if [ -n "$foreign" ]; then
    echo "install check: $a defines names without the cistern prefix: $foreign" >&2
    exit 1
  fi
done
echo "install check: headers, libraries and pkg-config files work from an installed tree; the core needs no libzmq; only cistern_* is exported, and both archives define only cistern_ names"
