# bash completion for vfioctl (installed to bash-completion's completionsdir, loaded on demand).
# The verbs and each verb's options come from the vfioctl being completed (`vfioctl --help`,
# `vfioctl VERB --help`), so they cannot drift from the program. Addresses for bind/release are
# the allowlisted functions of the running daemon, asked only when org.vfiod1 already has an
# owner (never starting vfiod by D-Bus activation), else the PCI functions in sysfs.

# The verbs of the "Commands:" section of `vfioctl --help`.
_vfioctl_verbs() {
    "$1" --help 2>/dev/null | awk '
        /^[^ ].*:$/ { inside = ($0 == "Commands:"); next }
        inside && /^  [a-z]/ { print $1 }'
}

# The options a verb takes (its usage line), or without a verb those of the "Options:" section.
_vfioctl_options() {
    if [[ -n $2 ]]; then
        "$1" "$2" --help 2>/dev/null | head -n1 | grep -oE -- '--[a-z][a-z-]*'
        echo --help
    else
        # The first column of "  -h, --help           Show this help ...".
        "$1" --help 2>/dev/null | awk '
            /^[^ ].*:$/ { inside = ($0 == "Options:"); next }
            inside && /^  -/ { sub(/^  /, ""); sub(/  .*/, ""); print }' |
            grep -oE -- '--?[a-z][a-z-]*'
    fi
}

# Allowlisted functions: the daemon's inventory when it runs, else every PCI function.
_vfioctl_addresses() {
    local owner
    owner=$(busctl --system --timeout=2 call org.freedesktop.DBus /org/freedesktop/DBus \
        org.freedesktop.DBus NameHasOwner s org.vfiod1 2>/dev/null)
    if [[ $owner == "b true" ]]; then
        "$1" status --json 2>/dev/null | tr -d ' \n' |
            grep -oE '"address":"[0-9a-f:.]+"[^{}]*"role":"allowlisted"' |
            sed -E 's/^"address":"([^"]*)".*/\1/'
    else
        local d
        for d in /sys/bus/pci/devices/*; do
            [[ -e $d ]] && echo "${d##*/}"
        done
    fi
}

_vfioctl() {
    local cur prev words cword split
    _init_completion -s -n : || return
    local prog=${words[0]} verb= i

    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --root | --config | --kubevirt-cr | --kernel | --output) ((i++)) ;;
            -*) ;;
            *) verb=${words[i]}; break ;;
        esac
    done

    case $prev in
        --root) _filedir -d; return ;;
        --config | --kubevirt-cr | --output) _filedir; return ;;
        --kernel)
            local kernels=(/lib/modules/*/)
            kernels=("${kernels[@]%/}")
            COMPREPLY=($(compgen -W "${kernels[*]##*/}" -- "$cur"))
            return ;;
    esac
    $split && return

    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_vfioctl_options "$prog" "$verb")" -- "$cur"))
        [[ ${COMPREPLY-} == *= ]] && compopt -o nospace
        return
    fi
    case $verb in
        "") COMPREPLY=($(compgen -W "$(_vfioctl_verbs "$prog")" -- "$cur")) ;;
        bind | release)
            # One operand: nothing more once it is there.
            local n=0
            for ((i = i + 1; i < cword; i++)); do [[ ${words[i]} != -* ]] && ((n++)); done
            if ((n == 0)); then
                COMPREPLY=($(compgen -W "$(_vfioctl_addresses "$prog")" -- "$cur"))
                __ltrim_colon_completions "$cur"
            fi
            ;;
        check-config) _filedir toml ;;
    esac
} && complete -F _vfioctl vfioctl
