# A scenario that cannot share a boot with broken.sh: its guest differs.
# topology: e1000e-mgmt
# checks: reports-ok
. /payload/lib.sh
ok reports-ok
