# A scenario that never finishes: the runner must kill the guest at its timeout.
# checks: reports-ok
. /payload/lib.sh
ok reports-ok
while :; do sleep 10; done
