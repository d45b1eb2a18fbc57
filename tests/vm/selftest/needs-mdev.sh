# A scenario that needs the sample mdev parents: skipped without them, refused under CI=true.
# needs: mdev-samples
# checks: reports-ok
. /payload/lib.sh
ok reports-ok
