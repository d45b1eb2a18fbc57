# The full guest itself: real systemd, udevd and system bus over the host's /usr, the guest
# kernel's modules loaded by udev, and the project installed into the overlay.
# checks: pid1-systemd udevd-running udev-loaded-gpu-driver system-bus vfioctl-installed
# checks: vfiod-config-installed
. /vmtest/lib.sh

measure boot-to-test-unit "$(uptime_s)"
expect_eq pid1-systemd systemd "$(cat /proc/1/comm)"
# The system is still "starting" while this unit runs, so ask for the pieces, not the whole.
check udevd-running systemctl is-active --quiet systemd-udevd.service
udevadm settle -t 60
expect_eq udev-loaded-gpu-driver "e1000e snd_hda_intel" "$(driver_of $GPU) $(driver_of $AUDIO)"
check system-bus busctl --system list --no-pager
check vfioctl-installed test -x /usr/bin/vfioctl
check vfiod-config-installed test -f /etc/vfiod/vfiod.toml
note "failed units: $(systemctl --failed --plain --no-legend | cut -d' ' -f1 | xargs)"
measure boot-to-checks "$(uptime_s)"
