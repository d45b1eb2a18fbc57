#!/bin/sh
# layering.sh must be able to fail: on a copy of the layered sources it passes as they are, then
# fails on each kind of wrong include, named by file and line (a rule that cannot fail checks
# nothing). Usage: layering_selftest.sh SOURCE_ROOT LAYERING_SH
root=${1:?usage: layering_selftest.sh SOURCE_ROOT LAYERING_SH}
check=${2:?usage: layering_selftest.sh SOURCE_ROOT LAYERING_SH}
tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
fail=0
copy() {
    rm -rf "$tmp/src" && mkdir -p "$tmp/src/daemon" || exit 2
    cp "$root"/daemon/*.cpp "$tmp/src/daemon/" || exit 2
    for d in daemon/core daemon/infra daemon/io daemon/exec daemon/service daemon/dbus daemon/app \
        client cli plugin-common device-plugin dra-plugin; do
        cp -r "$root/$d" "$tmp/src/$d" || exit 2
    done
}
# expect_violation FILE INCLUDE: with INCLUDE added to FILE, layering.sh fails and names FILE:2.
expect_violation() {
    copy
    sed -i "1a $2" "$tmp/src/$1"
    if out=$(sh "$check" "$tmp/src" 2>&1); then
        echo "FAIL: layering.sh passed with $2 in $1"; fail=1
    elif ! printf '%s\n' "$out" | grep -qF "$1:2:"; then
        echo "FAIL: layering.sh failed but did not name $1:2: $out"; fail=1
    else
        echo "ok: $1 with $2 is refused"
    fi
}
copy
sh "$check" "$tmp/src" >/dev/null || { echo "FAIL: layering.sh fails on the tree as it is"; fail=1; }
expect_violation cli/text.cpp '#include "service/service.hpp"'
expect_violation daemon/core/state.cpp '#include <spdlog/spdlog.h>'
expect_violation daemon/exec/journal.cpp '#include "../infra/logging.hpp"'
expect_violation daemon/io/host_fs.cpp '#  include "core/../exec/journal.hpp"'
expect_violation device-plugin/allocation.cpp '#include "service/service.hpp"'
# What both plugins share never reaches into either plugin, nor gRPC; a plugin never into the
# other one (their headers are told apart by name).
expect_violation plugin-common/follower.cpp '#include "server.hpp"'
expect_violation plugin-common/model.cpp '#include "prepare.hpp"'
expect_violation plugin-common/watches.cpp '#include "dra.grpc.pb.h"'
expect_violation dra-plugin/devices.cpp '#include "allocation.hpp"'
expect_violation device-plugin/plugin.cpp '#include "kube_api.hpp"'
expect_violation daemon/service/inventory.cpp '#include "dbus/objects.hpp"'
expect_violation daemon/service/host_model.cpp '#include <libudev.h>'
expect_violation daemon/infra/workers.cpp '#include "core/state.hpp"'
expect_violation daemon/dbus/call_log.cpp '#include "app/daemon.hpp"'
expect_violation daemon/main.cpp '#include "fake_kernel.hpp"'
expect_violation daemon/app/daemon.cpp '#include "../../tests/support/scenarios.hpp"'
exit "$fail"
