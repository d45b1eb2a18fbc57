#!/bin/bash
# Runs test_async (asynchronous methods on the fake kernel) against a private dbus-daemon with
# the shipped policy. Usage: async_test.sh TEST_ASYNC POLICY_CONF
set -u
TEST=$1 POLICY=$2
command -v dbus-daemon >/dev/null || { echo "SKIP: dbus-daemon not installed"; exit 77; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: needs root (it owns org.vfiod1 on the private bus)"; exit 77; }
source "$(dirname "$0")/lib.sh"
it_setup vfiod-async
start_private_bus "$POLICY"
"$TEST" || failures=1
[ "$failures" -eq 0 ]
