#!/bin/sh
# The include rule of README "Layout", enforced: each layer includes only the layers below it.
#   daemon/core     nothing but itself and the C++ library (no I/O, no D-Bus, no logging)
#   daemon/io       core
#   daemon/exec     core, io
#   daemon/service  core, io, exec (and sdbus-c++, spdlog, libudev, libsystemd)
#   client          core, io
#   cli             core, io, exec, client; never the daemon's service layer
#   device-plugin   core, io, client, and of the service layer logging.hpp and loop.hpp only
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

forbid daemon/core 'io/|exec/|service/|sdbus-c\+\+|spdlog|toml\+\+|libudev|systemd/' \
    'is the pure core: no I/O, D-Bus or logging'
forbid daemon/io 'exec/|service/|sdbus-c\+\+|spdlog' 'may include core only'
forbid daemon/exec 'service/|sdbus-c\+\+|spdlog' 'may include core and io only'
forbid client 'exec/|service/' 'may include core and io only'
forbid cli 'service/' 'is a client of the daemon, not part of it'
forbid device-plugin 'exec/|service/' 'may use the client, core, io, logging and the loop only' \
    'service/logging\.hpp|service/loop\.hpp'
# A quoted include is found next to the including file first, so "../service/x.hpp" from exec
# would reach the service layer without naming it: every include names its header from the
# include root (daemon/) or its own directory, never through "..".
for d in daemon/core daemon/io daemon/exec daemon/service client cli device-plugin; do
    forbid "$d" '[^">]*\.\.' 'names a header through "..", which the rules above cannot see'
done
# Every layer directory must still exist, or the rule would pass by checking nothing.
for d in daemon/core daemon/io daemon/exec daemon/service client cli; do
    ls "$d"/*.cpp >/dev/null 2>&1 || { echo "layering.sh: no sources in $d"; bad=1; }
done
[ "$bad" -eq 0 ] && echo "layering: every #include follows the rule"
exit "$bad"
