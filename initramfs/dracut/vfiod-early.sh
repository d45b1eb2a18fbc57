#!/bin/sh
# vfiod's early overrides (docs/DESIGN.md §14), as dracut's cmdline hook 00: before udevd starts
# and before rd.driver.pre modules load (cmdline 01). Sourced by dracut, so run in a shell of its
# own.
[ -x @applyscript@ ] && @applyscript@
