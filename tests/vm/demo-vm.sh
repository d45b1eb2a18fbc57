#!/bin/bash
# The live part of scripts/demo.sh: boots the full systemd guest (a Debian kernel under QEMU with
# real IOMMU groups), installs this build into it and narrates vfiod at work; the guest then
# powers off. About a minute once the build is done.
#
# usage: tests/vm/demo-vm.sh [BUILD_DIR]    (default: build; configure it with --prefix=/usr
#        --sysconfdir=/etc, or the harness builds a second copy for that layout)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=$(cd "${1:-build}" && pwd)

# The guest runs the host's own /usr over 9p, so the host needs what the guest runs.
packages=(qemu-system-x86 busybox-static cpio kmod python3 systemd udev dbus util-linux iproute2)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || { echo "demo-vm: missing packages (run as root): ${missing[*]}" >&2; exit 1; }
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

ninja -C "$build" >/dev/null
echo "Booting the guest (software emulation; the first run also downloads the kernel package)..."
"$here/run.py" --mode systemd --scenario "$here/scenarios/demo.sh" \
    --cache "$build/tests/vm/cache" --work "$build/tests/vm/work/demo-live" \
    --build-root "$build" --source-root "$src" --timeout 300 |
    sed -u -e 's/^## \(.*\)/\n\x1b[1m-- \1\x1b[0m/' -e 's/^#   //' -e 's/^#$//' \
        -e 's/^req qmp \(.*\)/   (host) QMP \1/' -e '/^  -> /d' -e '/^time /d' -e '/^done$/d'
