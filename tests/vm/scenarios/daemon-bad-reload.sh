# Scenario 7: a broken config on reload is rejected as a whole: the error names FILE:LINE, the
# previous config stays in effect (the group stays bound, Plan() still lists it), vfiod keeps running.
# overlay: overlays/e1000e-any
# checks: bound-at-boot reload-rejected-logged error-has-line previous-config-active still-running
# checks: plan-still-lists-gpu nothing-half-applied
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq bound-at-boot bound "$(group_state "$grp")"
cp /etc/vfiod/vfiod.toml /tmp/good.toml
# Line 4 has an unknown key; the rest is valid and would allowlist the nvme disk instead of the
# GPU, so any half-applied state shows.
cat >/etc/vfiod/vfiod.toml <<TOML
[[device]]
selector = "$(cut -c3- "$(pci_dev $NVME)/vendor"):$(cut -c3- "$(pci_dev $NVME)/device")"
resource_name = "vmtest/disk"
colour = "blue"
TOML
mark_journal /tmp/cursor
systemctl reload vfiod.service
wait_for 30 sh -c "journalctl -u vfiod --after-cursor '$(cat /tmp/cursor)' -q | grep -q 'reload rejected'"
log=$(journal_since /tmp/cursor)
note "$log"
check reload-rejected-logged sh -c "echo '$log' | grep -q 'reload rejected'"
check error-has-line sh -c "echo '$log' | grep -q 'vfiod.toml:4:'"
expect_eq previous-config-active "bound vfio-pci vfio-pci" \
    "$(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
check still-running systemctl is-active --quiet vfiod.service
plan=$(manager Plan)  # busctl prints it as one escaped string: match plain addresses
check plan-still-lists-gpu json_has "$plan" "$GPU"
if json_has "$plan" "$NVME" || [ -n "$(group_state "$(group_of $NVME)")" ]; then
    not_ok nothing-half-applied "the nvme disk appears: $plan"
else
    ok nothing-half-applied
fi
cp /tmp/good.toml /etc/vfiod/vfiod.toml
