#!/usr/bin/env bash
# Builds the Debian packages (debian/) from a clean export of the source, never from this
# checkout's own build directories, and copies the .deb, .buildinfo and .changes files to OUT_DIR.
#
#   scripts/build-deb.sh [--head] OUT_DIR
#     --head   export the committed HEAD (git archive), as CI does; without it, the files git
#              knows here (tracked and untracked, not ignored) with their working-tree content
#   DEB_BUILD_OPTIONS (e.g. nocheck, parallel=2) is passed on to dpkg-buildpackage.
#   VFIOD_DEB_WORK: where the export and the build happen (default /tmp), e.g. under a ccache
#   base directory shared with another build of the same source (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

head=false
if [[ ${1:-} == --head ]]; then head=true; shift; fi
out=${1:?usage: build-deb.sh [--head] OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

work=$(mktemp -d "${VFIOD_DEB_WORK:-/tmp}/vfiod-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
src=$work/vfiod
mkdir -p "$src"
if $head; then
    git archive --format=tar HEAD | tar -x -C "$src"
else
    git ls-files -z -c -o --exclude-standard | while IFS= read -r -d '' f; do
        [[ -e $f || -L $f ]] && printf '%s\0' "$f"
    done | tar -c --null -T - | tar -x -C "$src"
fi

(cd "$src" && dpkg-buildpackage -us -uc -b) >"$work/build.log" 2>&1 || {
    tail -n 60 "$work/build.log" >&2
    echo "build-deb.sh: dpkg-buildpackage failed (log above)" >&2
    exit 1
}
version=$(cd "$src" && dpkg-parsechangelog -S Version)
arch=$(dpkg --print-architecture)
for f in "$work"/*_"$version"_*.deb "$work"/vfiod_"$version"_"$arch".{buildinfo,changes}; do
    cp "$f" "$out/"
done
cp "$work/build.log" "$out/build.log"
ls "$out"/*.deb
