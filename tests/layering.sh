#!/bin/sh
# The include rule of README "Layout", enforced: each layer includes only the layers below it.
#   daemon/core     nothing but itself and the C++ library (no I/O, no D-Bus, no logging)
#   daemon/infra    nothing of the project's but itself: the loop, logging, workers, Fd
#   daemon/io       core, and infra/fd.hpp (header-only)
#   daemon/exec     core, io, and infra/fd.hpp
#   daemon/service  core, io, exec, infra: the event cycle only, no libudev, sd-bus or sd_notify
#                   (the adapters to those are daemon/app's); never dbus/
#   daemon/dbus     core, io, exec, infra, service (and sdbus-c++, sd-bus)
#   daemon/app      every layer above: vfiod put together (the Daemon, the event loop, the udev
#                   monitor, --udev-match); nothing includes it but main() and the tests; it
#                   never includes tests/ (the fake kernel has its own main there)
#   client          core, io, infra/fd.hpp
#   cli             core, io, exec, client, infra/fd.hpp; never the daemon's service or dbus
#   plugin-common   core, io, client, infra: what both kubelet plugins share; never a header of
#                   either plugin, and no gRPC (each plugin's generated API is its own)
#   device-plugin   core, io, client, infra, plugin-common; never the DRA plugin's headers
#   dra-plugin      core, io, client, infra, plugin-common; never the device plugin's headers
# The calls between the daemon's layers are checked again at link time (daemon/meson.build's
# layer checks: a call into a higher layer fails the build); this script is what linking cannot
# see, header-only includes and the programs outside daemon/ (plugin-common has a link check of
# its own, in plugin-common/meson.build).
# Usage: layering.sh SOURCE_ROOT. Prints each violation as FILE:LINE: include; exit 1 if any.
root=${1:?usage: layering.sh SOURCE_ROOT}
cd "$root" || exit 2
bad=0

# forbid DIR PATTERN WHY [ALLOWED]: an #include in DIR's sources matching the extended regex
# PATTERN, unless it names one of the files ALLOWED (an extended regex too) exactly.
forbid() {
    hits=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($2)" \
        "$1"/*.cpp "$1"/*.hpp 2>/dev/null)
    if [ -n "$hits" ] && [ -n "${4:-}" ]; then
        hits=$(printf '%s\n' "$hits" | grep -vE "include[[:space:]]*[<\"]($4)[>\"]")
    fi
    if [ -n "$hits" ]; then
        printf '%s\n' "$hits" | sed "s|\$|   <- $1 $3|"
        bad=1
    fi
}

forbid daemon/core \
    'io/|exec/|infra/|service/|dbus/|app/|sdbus-c\+\+|spdlog|toml\+\+|libudev|systemd/' \
    'is the pure core: no I/O, D-Bus or logging'
forbid daemon/infra 'core/|io/|exec/|service/|dbus/|app/|client/|toml\+\+|libudev' \
    'is the generic infrastructure: it knows nothing of PCI'
forbid daemon/io 'exec/|infra/|service/|dbus/|app/|sdbus-c\+\+|spdlog' \
    'may include core (and infra/fd.hpp) only' 'infra/fd\.hpp'
forbid daemon/exec 'infra/|service/|dbus/|app/|sdbus-c\+\+|spdlog' \
    'may include core and io (and infra/fd.hpp) only' 'infra/fd\.hpp'
forbid daemon/service 'dbus/|app/|libudev|sdbus-c\+\+|systemd/' \
    'is the event cycle: below the D-Bus objects, and its adapters (udev, the bus) are in app/'
forbid daemon/dbus 'app/' 'is below daemon/app: it never names it'
# The test support's headers (fake kernel, scenarios) are found by name alone: vfiod never
# includes them, nor anything through tests/.
forbid daemon/app 'tests/|fake_|scenarios\.hpp|exec_world|private_bus|scripted_events' \
    'is production code: the test builds have their own main() in tests/support'
forbid daemon 'tests/|fake_|scenarios\.hpp' 'is production code: it never includes tests/'
forbid client 'exec/|infra/|service/|dbus/|app/' 'may include core and io (and infra/fd.hpp) only' \
    'infra/fd\.hpp'
forbid cli 'service/|dbus/|infra/|app/' 'is a client of the daemon, not part of it' 'infra/fd\.hpp'
# headers_of DIR OTHER: the headers in DIR that OTHER has no file of that name of, as an
# extended regex of exact names ("follower\.hpp|model\.hpp"); the plugins' headers are included
# by name alone, so a name is what tells one plugin's header from another's.
headers_of() {
    for h in "$1"/*.hpp; do
        [ -e "$h" ] || continue
        n=${h##*/}
        [ -e "$2/$n" ] || printf '%s\n' "$n"
    done | sed 's/\./\\./g' | paste -sd'|' -
}
plugin_headers=$(printf '%s\n' "$(headers_of device-plugin plugin-common)" \
    "$(headers_of dra-plugin plugin-common)" | grep -v '^$' | paste -sd'|' -)
forbid plugin-common \
    "exec/|service/|dbus/|app/|tests/|fake_|grpc|[^\">]*\\.pb\\.h|($plugin_headers)[\">]" \
    'is what both plugins share: the client, core, io and infra only, never a plugin, no gRPC'
forbid device-plugin "exec/|service/|dbus/|app/|($(headers_of dra-plugin device-plugin))[\">]" \
    'may use the client, core, io, infra and plugin-common only'
forbid dra-plugin \
    "exec/|service/|dbus/|app/|tests/|fake_|($(headers_of device-plugin dra-plugin))[\">]" \
    'may use the client, core, io, infra and plugin-common only'
# A quoted include is found next to the including file first, so "../service/x.hpp" from exec
# would reach the service layer without naming it: every include names its header from the
# include root (daemon/) or its own directory, never through "..".
for d in daemon daemon/core daemon/infra daemon/io daemon/exec daemon/service daemon/dbus \
    daemon/app client cli plugin-common device-plugin dra-plugin; do
    forbid "$d" '[^">]*\.\.' 'names a header through "..", which the rules above cannot see'
done
# Every layer directory must still exist, or the rule would pass by checking nothing.
for d in daemon/core daemon/infra daemon/io daemon/exec daemon/service daemon/dbus daemon/app \
    client cli plugin-common device-plugin dra-plugin; do
    ls "$d"/*.cpp >/dev/null 2>&1 || { echo "layering.sh: no sources in $d"; bad=1; }
done
[ "$bad" -eq 0 ] && echo "layering: every #include follows the rule"
exit "$bad"
