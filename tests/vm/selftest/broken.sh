# A scenario that fails on purpose: one check passes, one fails, one never reports.
# checks: reports-ok reports-not-ok never-reports
. /payload/lib.sh
ok reports-ok
not_ok reports-not-ok deliberate failure
