# Scenario 6: on the real system bus with the installed policy, an unprivileged caller may read
# but Bind, Release and Reload are refused, and nothing changes. The guest runs this machine's
# /usr: without polkitd the refusal is AccessDenied (root only); with Debian's polkitd and the
# shipped policy (auth_admin) it is InteractiveAuthorizationRequired, a challenge vfiod cannot
# pose. Both are denials (vfioctl exit 4); daemon-polkit covers who polkit lets in.
# overlay: overlays/e1000e-any
# checks: bound-at-boot nobody-can-read nobody-bind-denied nobody-release-denied
# checks: nobody-reload-denied nothing-changed root-can-call
. /vmtest/lib.sh

grp=$(group_of $GPU)
wait_for 60 state_is "$grp" bound
expect_eq bound-at-boot bound "$(group_state "$grp")"
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@" 2>&1; }
expect_eq nobody-can-read 's "bound"' \
    "$(nobody busctl get-property org.vfiod1 /org/vfiod1/group/$grp org.vfiod1.Group State)"
denied() { # NAME OUTPUT
    note "$1: $2"
    case $2 in
        *"Access denied"*|*AccessDenied*|*"only after authentication"*) ok "$1" ;;
        *) not_ok "$1" "$2" ;;
    esac
}
denied nobody-bind-denied "$(nobody busctl call org.vfiod1 /org/vfiod1 org.vfiod1.Manager Bind s $GPU)"
denied nobody-release-denied "$(nobody busctl call org.vfiod1 /org/vfiod1 org.vfiod1.Manager Release s $GPU)"
denied nobody-reload-denied "$(nobody busctl call org.vfiod1 /org/vfiod1 org.vfiod1.Manager Reload)"
expect_eq nothing-changed "bound vfio-pci vfio-pci" \
    "$(group_state "$grp") $(driver_of $GPU) $(driver_of $AUDIO)"
check root-can-call manager Reload
