#!/bin/sh
# The link-time layer checks (daemon/meson.build, layer_checks, and plugin-common/meson.build's)
# must be able to fail: each check's own link command, as ninja runs it, passes as it is and
# fails once an object that calls into a higher layer is added to it (a core file calling io,
# the service calling the D-Bus objects, what both plugins share calling into one of them). A
# check that cannot fail checks nothing.
# Usage: layering_link_selftest.sh BUILD_ROOT SOURCE_ROOT NINJA
build=${1:?usage: layering_link_selftest.sh BUILD_ROOT SOURCE_ROOT NINJA}
src=${2:?usage: layering_link_selftest.sh BUILD_ROOT SOURCE_ROOT NINJA}
ninja=${3:?usage: layering_link_selftest.sh BUILD_ROOT SOURCE_ROOT NINJA}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
fail=0

# The check of LAYER, as a path in the build directory.
check_of() {
    case "$1" in
    plugin-common) echo "plugin-common/liblayer-check-$1.so" ;;
    *) echo "daemon/liblayer-check-$1.so" ;;
    esac
}

# The last command ninja would run for the check of LAYER: its link, writing to $tmp instead.
link_command() {
    lib=$(check_of "$1")
    "$ninja" -C "$build" -t commands "$lib" | tail -n 1 | sed "s|-o $lib|-o $tmp/check.so|"
}

# expect_refused LAYER CALL: the check of LAYER links as it is, and refuses an object whose
# function makes CALL (C++ source, with the headers named in $includes).
expect_refused() {
    cmd=$(link_command "$1")
    [ -n "$cmd" ] || { echo "FAIL: no link command for the $1 check"; fail=1; return; }
    if ! (cd "$build" && eval "$cmd") >"$tmp/out" 2>&1; then
        echo "FAIL: the $1 check does not link as it is:"; cat "$tmp/out"; fail=1; return
    fi
    printf '%s\nnamespace vfiod {\nvoid layering_probe() { %s; }\n}\n' "$includes" "$2" \
        >"$tmp/probe.cpp"
    ${CXX:-c++} -std=c++20 -fPIC -I"$src/daemon" -c "$tmp/probe.cpp" -o "$tmp/probe.o" ||
        { echo "FAIL: the probe for $1 does not compile"; fail=1; return; }
    if (cd "$build" && eval "$cmd $tmp/probe.o") >"$tmp/out" 2>&1; then
        echo "FAIL: the $1 check links with a call to $2"; fail=1
    elif ! grep -q "undefined reference" "$tmp/out"; then
        echo "FAIL: the $1 check failed, but not on the call to $2:"; cat "$tmp/out"; fail=1
    else
        echo "ok: the $1 check refuses $2"
    fi
}

[ -f "$build/daemon/liblayer-check-core.so" ] || { echo "no layer checks in this build"; exit 77; }
includes='#include "io/proc_parsers.hpp"'
expect_refused core 'parse_swaps("")'
includes='#include "dbus/call_log.hpp"'
expect_refused service 'CallLog().flush()'
includes='#include <libudev.h>'
expect_refused service 'udev_unref(udev_new())'
includes='#include "app/udev_match.hpp"'
expect_refused exec 'run_udev_match("/", "")'
# What both plugins share, calling into the DRA plugin or the device plugin (declared here: the
# probe is compiled with the daemon's headers only).
if [ -f "$build/$(check_of plugin-common)" ]; then
    includes='#include <string>
namespace vfiod::dra { std::string query_escape(const std::string& s); }'
    expect_refused plugin-common 'dra::query_escape("")'
    includes='#include <string>
namespace vfiod::plugin { struct DeviceId { static DeviceId parse(const std::string&); }; }'
    expect_refused plugin-common 'plugin::DeviceId::parse("")'
fi
exit "$fail"
