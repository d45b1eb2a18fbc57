#!/usr/bin/env bash
# The main job, narrated: build vfiod, then show what it decides on a realistic GPU host and on
# this machine, without writing anything; then, when the VM harness is available, boot a real
# kernel with real IOMMU groups and let the daemon bind a GPU-like group live.
#
#   scripts/demo.sh            everything
#   VFIOD_DEMO_VM=0 scripts/demo.sh   skip the live VM part
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

packages=(g++ meson ninja-build pkg-config libsystemd-dev libsdbus-c++-dev libsdbus-c++-bin
          libudev-dev libtomlplusplus-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev uuid-dev
          libyaml-cpp-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  say "Installing build packages: ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build=${BUILD_DIR:-build}
say "Building"
[[ -f $build/build.ninja ]] || meson setup "$build" --prefix=/usr --sysconfdir=/etc >/dev/null
ninja -C "$build" cli/vfioctl tests/vfiod-mkfixture >/dev/null
vfioctl=$build/cli/vfioctl

host=$(mktemp -d)/gpu-host
trap 'rm -rf "$(dirname "$host")"' EXIT
"$build/tests/vfiod-mkfixture" gpu-host "$host"

say "A GPU server (synthetic sysfs tree under $host)"
echo "Its config, $host/etc/vfiod/vfiod.toml:"
grep -v '^#' "$host/etc/vfiod/vfiod.toml" | sed '/^$/d; s/^/    /'

say "vfioctl plan --root $host"
"$vfioctl" plan --root "$host"

say "The same plan as JSON, for scripts and device plugins (first group)"
"$vfioctl" plan --root "$host" --json | sed -n '1,/^    },$/p' | sed 's/^/    /'

say "vfioctl check-config on a config with a typo"
bad=$(dirname "$host")/bad.toml
printf '[[device]]\nselector = "10de:2331"\nresource_nmae = "nvidia.com/GPU"\n' > "$bad"
"$vfioctl" check-config "$bad" || echo "(exit status $?: nothing would be applied)"

say "vfioctl plan --root / on this machine (read-only), allowlisting every virtio device"
real=$(dirname "$host")/virtio.toml
printf '[[device]]\nselector = "1af4:*"\n' > "$real"
"$vfioctl" plan --root / --config "$real" || true

if [[ ${VFIOD_DEMO_VM:-1} != 0 && -x tests/vm/demo-vm.sh ]]; then
  say "Live: a real kernel with real IOMMU groups under QEMU"
  tests/vm/demo-vm.sh "$build"
fi
