#!/bin/bash
# The vfioctl bash completion, driven as bash drives it (COMP_WORDS, COMP_CWORD, COMP_LINE):
# verbs, each verb's options, directories for --root, files for --config and check-config, and
# for bind/release the allowlisted functions of a running vfiod (on a private bus), or the PCI
# functions in sysfs when vfiod is not running - without starting it by D-Bus activation.
# Usage: completion_test.sh VFIOCTL VFIOD MKFIXTURE COMPLETION POLICY_CONF
set -u

VFIOCTL=$1 VFIOD=$2 MKFIXTURE=$3 COMPLETION=$4 POLICY=$5
for f in /usr/share/bash-completion/bash_completion "$COMPLETION"; do
    [ -r "$f" ] || { echo "not ok - $f is readable (apt-get install bash-completion)"; exit 1; }
done
for tool in dbus-daemon busctl; do
    command -v "$tool" >/dev/null || { echo "not ok - $tool is installed"; exit 1; }
done

source "$(dirname "$0")/lib.sh"
it_setup vfiod-completion

# complete WORD...: what the completion offers for the last WORD, sorted, one line. The words
# are as bash splits them (':' and '=' are words of their own); COMP_LINE joins them back.
complete_words() {
    bash -c '
        source /usr/share/bash-completion/bash_completion
        source "$0"
        COMP_WORDS=("$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        line= last=
        for w in "$@"; do
            if [[ -z $line ]]; then line=$w
            elif [[ $w == [:=] || $last == [:=] ]]; then line+=$w
            else line+=" $w"; fi
            last=$w
        done
        COMP_LINE=$line COMP_POINT=${#line}
        complete -p vfioctl >/dev/null || { echo "no completion registered"; exit 1; }
        _vfioctl
        printf "%s\n" "${COMPREPLY[@]}" | LC_ALL=C sort | paste -sd" "
    ' "$COMPLETION" "$VFIOCTL" "$@" 2>&1
}

# --- verbs: exactly those `vfioctl --help` lists (read here with sed, not the script's awk) ---
help_verbs=$("$VFIOCTL" --help | sed -n '/^Commands:/,/^[^ ]/s/^  \([a-z][a-z-]*\).*/\1/p' |
    LC_ALL=C sort | paste -sd" ")
for v in plan apply doctor check-config status bind release; do
    check_contains "vfioctl --help lists $v" " $v " " $help_verbs "
done
check "verbs" "$help_verbs" "$(complete_words "")"
check "verb prefix pl" "plan" "$(complete_words pl)"
check "verb prefix che" "check-config" "$(complete_words che)"
check "verb after a global option" "status" "$(complete_words --root /tmp stat)"

# --- options per verb ---
check "plan options" "--config --help --json --root" "$(complete_words plan --)"
check "apply options" "--config --help --json --root" "$(complete_words apply --)"
check "status options" "--config --help --json --offline --root" "$(complete_words status --)"
check "check-config options" "--help --json" "$(complete_words check-config --)"
check "bind options" "--help" "$(complete_words bind --)"
check "release options" "--help" "$(complete_words release -)"
check "options after the verb's options" "--json" "$(complete_words plan --root /tmp --j)"
check "kubevirt options" "--config --external --help --json --json-patch --root --yaml" \
    "$(complete_words kubevirt --)"
check "doctor options" "--config --help --json --kubevirt-cr --root" "$(complete_words doctor --)"
check "initramfs options" "--config --help --image --json --kernel --output --root" \
    "$(complete_words initramfs --)"
check "options before a verb" \
    "--config --external --help --image --json --json-patch --kernel --kubevirt-cr --offline \
--output --root --version --yaml" "$(complete_words --)"

# --- paths ---
mkdir -p "$WORK/tree/sub.d" "$WORK/tree/subdir"
touch "$WORK/tree/file.toml" "$WORK/tree/notes.txt"
check "--root offers directories only" "$WORK/tree/sub.d $WORK/tree/subdir" \
    "$(complete_words plan --root "$WORK/tree/")"
check "--root=DIR offers directories only" "$WORK/tree/sub.d $WORK/tree/subdir" \
    "$(complete_words doctor --root = "$WORK/tree/")"
check "--config offers files" \
    "$WORK/tree/file.toml $WORK/tree/notes.txt $WORK/tree/sub.d $WORK/tree/subdir" \
    "$(complete_words plan --config "$WORK/tree/")"
check "--kubevirt-cr offers files" \
    "$WORK/tree/file.toml $WORK/tree/notes.txt $WORK/tree/sub.d $WORK/tree/subdir" \
    "$(complete_words doctor --kubevirt-cr "$WORK/tree/")"
check "a verb after --kubevirt-cr FILE" "--config --help --json --kubevirt-cr --root" \
    "$(complete_words --kubevirt-cr "$WORK/tree/notes.txt" doctor --)"
check "--output offers files" \
    "$WORK/tree/file.toml $WORK/tree/notes.txt $WORK/tree/sub.d $WORK/tree/subdir" \
    "$(complete_words initramfs --output "$WORK/tree/")"
check "a verb after --kernel VERSION" "--config --help --image --json --kernel --output --root" \
    "$(complete_words --kernel 6.1.0-27-amd64 initramfs --)"
check "check-config offers .toml files and directories" \
    "$WORK/tree/file.toml $WORK/tree/sub.d $WORK/tree/subdir" \
    "$(complete_words check-config "$WORK/tree/")"

# --- addresses without vfiod: sysfs, and no D-Bus activation ---
# A bus on which org.vfiod1 is activatable: activation would run the Exec line and leave a mark.
mkdir -p "$WORK/services"
cat >"$WORK/services/org.vfiod1.service" <<EOF
[D-BUS Service]
Name=org.vfiod1
Exec=/bin/sh -c 'touch $WORK/activated; sleep 30'
EOF
own_rule=
[ "$(id -u)" -ne 0 ] && own_rule="<allow own=\"org.vfiod1\"/>"  # a developer not running as root
start_private_bus "$POLICY" "$own_rule" "$WORK/services"
activatable=$(busctl --system list --activatable --no-legend 2>&1 | awk '{print $1}' | paste -sd" ")
check_contains "org.vfiod1 is activatable on the test bus" "org.vfiod1" "$activatable"

sysfs=$(ls /sys/bus/pci/devices | LC_ALL=C sort | paste -sd" ")
[ -n "$sysfs" ] || fail "this host lists PCI functions in /sys/bus/pci/devices"
check "bind without vfiod offers the PCI functions in sysfs" "$sysfs" "$(complete_words bind "")"
sleep 0.5
if [ -e "$WORK/activated" ]; then fail "completion does not start vfiod by D-Bus activation"
else pass "completion does not start vfiod by D-Bus activation"; fi
rm -f "$WORK/services/org.vfiod1.service"
busctl --system call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
    ReloadConfig >/dev/null 2>&1

# --- addresses from a running vfiod: its allowlisted functions only ---
"$MKFIXTURE" gpu-host "$WORK/root" || { fail "fixture"; exit 1; }
"$VFIOD" --root "$WORK/root" --observe >"$WORK/vfiod.log" 2>&1 &
VFIOD_PID=$!
for _ in $(seq 100); do
    busctl --system status org.vfiod1 >/dev/null 2>&1 && break
    sleep 0.1
done
want=$("$VFIOCTL" status --offline --root "$WORK/root" --json | tr -d ' \n' |
    grep -oE '"address":"[^"]*","vendor":"[^"]*","device":"[^"]*","class":"[^"]*","driver":[^,]*,"target":[^,]*,"role":"allowlisted"' |
    cut -d'"' -f4 | LC_ALL=C sort | paste -sd" ")
check "the fixture has 4 allowlisted functions" 4 "$(wc -w <<<"$want")"
check "bind offers vfiod's allowlisted functions" "$want" "$(complete_words bind "")"
check "release offers vfiod's allowlisted functions" "$want" "$(complete_words release "")"
# bash splits 0000:01:00.0 at the colons; the completion answers the last piece.
check "an address split at its colons" "00.0" "$(complete_words bind 0000 : 01 : 0)"
check "one address only" "" "$(complete_words bind 0000:01:00.0 "")"
check "plan takes no operand" "" "$(complete_words plan "")"

echo "# $failures failure(s)"
[ "$failures" -eq 0 ]
