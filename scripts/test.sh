#!/usr/bin/env bash
# The test command (README, CI): install every Debian package the build and the tests need,
# build with -Werror, and run every test suite. Exit status is the verdict.
#
#   scripts/test.sh                 everything (unit, integration, real-kernel VM tests)
#   VFIOD_SUITES="unit" scripts/test.sh     only the named meson test suites
#   BUILD_DIR=build-x scripts/test.sh       another build directory (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # build
  g++ meson ninja-build pkg-config libsystemd-dev libsdbus-c++-dev libsdbus-c++-bin libudev-dev
  libtomlplusplus-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  # integration tests: a private dbus-daemon, busctl, setpriv, udevadm
  dbus systemd udev util-linux kmod
  # real-kernel VM tests (the kernel package itself is fetched by tests/vm with apt-get download)
  qemu-system-x86 busybox-static cpio python3
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "test.sh: missing Debian packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
  echo "test.sh: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build=${BUILD_DIR:-build}
if [[ -f $build/build.ninja ]]; then
  meson configure "$build" -Dwerror=true >/dev/null
else
  meson setup "$build" -Dwerror=true
fi
ninja -C "$build"

suites=()
for s in ${VFIOD_SUITES:-}; do suites+=(--suite "$s"); done
meson test -C "$build" --print-errorlogs --num-processes 2 "${suites[@]}"
