#!/usr/bin/env bash
# setup.sh - install what cistern needs from Debian's archive (as root, only what
# is missing) and build it in ./build. Safe to run again.
#   EXTRA_PACKAGES="..." adds packages (the test and demo scripts use it).
set -euo pipefail
cd "$(dirname "$0")/.."

# The Python binding and the demo use Debian's interpreter, numpy, torch and matplotlib.
# The package builds as a wheel with meson-python (python3-build runs it; it
# asks for patchelf on Linux) and installs into a venv; mypy checks its types.
# The remote demo's --netns (and its test) makes a network namespace with ip.
# Simulation codes: gfortran builds the Fortran module, OpenMPI the MPI gather
# and the MPI example, cmake the find_package(cistern) check.
packages="build-essential meson ninja-build pkg-config liburing-dev libroaring-dev libcriterion-dev libzmq3-dev iproute2
  gfortran openmpi-bin libopenmpi-dev cmake
  python3-dev python3-numpy python3-torch python3-matplotlib python3-pytest
  python3-mesonpy python3-build python3-venv python3-mypy patchelf ${EXTRA_PACKAGES:-}"
missing=()
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" != 0 ]; then
    echo "setup: missing packages: ${missing[*]}; run as root (or install them) first" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

builddir=${BUILDDIR:-build}
options="-Dpython=enabled ${MESON_OPTIONS:-}"
if [ -f "$builddir/build.ninja" ]; then
  meson setup --reconfigure "$builddir" $options >/dev/null
else
  meson setup "$builddir" $options >/dev/null
fi
ninja -C "$builddir" >/dev/null
echo "setup: built in $builddir"
