# Hot-plug on the real kernel through QMP: a device added to an empty root port appears and binds
# to its driver; device_del removes it. Proves the harness's QMP path the daemon scenarios use.
# checks: hotplug-added hotplug-driver hotplug-own-group hotplug-removed
. /payload/lib.sh

modprobe -a e1000e vfio-pci
HP=0000:03:00.0
host_request qmp device_add '{"driver":"e1000e","bus":"rp3","id":"hp1","netdev":"hp","romfile":""}' >/dev/null
t0=$(uptime_s)
if wait_for 10 test -e "$(pci_dev $HP)"; then ok hotplug-added; else not_ok hotplug-added "no $HP"; fi
measure hotplug-appeared "$(elapsed_since "$t0")"
wait_for 10 test -e "$(pci_dev $HP)/driver"
expect_eq hotplug-driver e1000e "$(driver_of $HP)"
measure hotplug-driver-bound "$(elapsed_since "$t0")"
check hotplug-own-group test "$(group_of $HP)" != "$(group_of $GPU)"
host_request qmp device_del '{"id":"hp1"}' >/dev/null
t0=$(uptime_s)
if wait_for 20 sh -c "! test -e $(pci_dev $HP)"; then ok hotplug-removed; else not_ok hotplug-removed "$HP still present"; fi
measure hotunplug-removed "$(elapsed_since "$t0")"
