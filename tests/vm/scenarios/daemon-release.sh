# Scenario 3, release: Release gives the group back (e1000e and snd_hda_intel return, overrides
# cleared, State released and sticky across a restart); Bind (through the other function) binds
# it again.
# overlay: overlays/e1000e-any
# checks: bound-at-boot release-call release-gpu-e1000e release-audio-hda release-overrides-cleared
# checks: release-state released-sticky-restart bind-call bind-again-vfio bind-again-state
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq bound-at-boot "vfio-pci vfio-pci" "$(driver_of $GPU) $(driver_of $AUDIO)"

check release-call manager Release s $GPU
expect_eq release-gpu-e1000e e1000e "$(driver_of $GPU)"
expect_eq release-audio-hda snd_hda_intel "$(driver_of $AUDIO)"
expect_eq release-overrides-cleared "(null) (null)" \
    "$(cat "$(pci_dev $GPU)/driver_override") $(cat "$(pci_dev $AUDIO)/driver_override")"
expect_eq release-state released "$(group_state "$grp")"

systemctl restart vfiod.service
wait_for 30 state_is "$grp" released
expect_eq released-sticky-restart "released e1000e snd_hda_intel" \
    "$(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"

check bind-call manager Bind s $AUDIO
expect_eq bind-again-vfio "vfio-pci vfio-pci" "$(driver_of $GPU) $(driver_of $AUDIO)"
expect_eq bind-again-state bound "$(group_state "$grp")"
journalctl -u vfiod -q --no-pager -o short-monotonic | while read -r line; do note "$line"; done
