#!/usr/bin/env bash
# The test command (README, CI): install every Debian package the build and the tests need,
# build with -Werror, and run every test suite. Exit status is the verdict.
#
#   scripts/test.sh                 everything (unit, integration, fuzz-replay, the bench suite's
#                                   smoke runs, real-kernel VM tests, then the sanitizer build
#                                   and the bounded fuzz runs)
#   VFIOD_SUITES="unit" scripts/test.sh     only the named meson test suites; "sanitize",
#                                   "fuzz" and "package" name the three extra steps at the end
#                                   (package: the .debs, and the VM scenario that installs them)
#   BUILD_DIR=build-x scripts/test.sh       another build directory (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  # build
  g++ meson ninja-build pkg-config libsystemd-dev libsdbus-c++-dev libsdbus-c++-bin libudev-dev
  libtomlplusplus-dev libspdlog-dev libfmt-dev libgtest-dev libgmock-dev
  uuid-dev  # libuuid: the name-based UUIDs of vfiod's mediated devices (DESIGN §12)
  libyaml-cpp-dev  # vfioctl doctor --kubevirt-cr reads the KubeVirt CR (YAML or JSON)
  # man pages (man/*.scd) and the vfioctl completion (bash-completion.pc, its test)
  scdoc bash-completion
  # vfiod-device-plugin (meson option device_plugin): gRPC and protobuf, code generated at build
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  # vfiod-dra-plugin (meson option dra_plugin): the API server over HTTPS (libcurl with OpenSSL),
  # its JSON, --kubeconfig's YAML (libyaml-cpp-dev, above); the fake API server's test CA is
  # made with openssl
  libcurl4-openssl-dev nlohmann-json3-dev openssl
  # integration tests: a private dbus-daemon, busctl, setpriv, udevadm; a polkitd stand-in
  dbus systemd udev util-linux kmod python3-dbusmock libxml2-utils
  python3-yaml  # the deploy-manifests test: tests/deploy/check_manifests.py parses the YAML
  # the systemd guest runs Debian's real polkitd from this machine's /usr (daemon-polkit, daemon-access)
  polkitd
  # the Debian packages (debian/): dpkg-buildpackage, debhelper's meson build, lintian
  debhelper dpkg-dev fakeroot lintian
  # one compile for the tests and the packages (see "build" below); meson uses it where installed
  ccache
  # the systemd guest runs this machine's own /usr over 9p: ip and mkfs.ext4 come from here;
  # ip also makes the links, addresses and routes of the host-tables-live test
  iproute2 e2fsprogs
  # bench/run.sh --smoke (integration suite): the tools vfioctl plan is compared with
  driverctl pciutils
  # real-kernel VM tests (the kernel package itself is fetched by tests/vm with apt-get download)
  qemu-system-x86 busybox-static cpio python3
  # vm-initramfs-early: Debian's mkinitramfs and dracut build the guest's initramfs in a private
  # mount namespace. The -core packages build no initramfs for this machine on install (no
  # kernel postinst hook, no update-initramfs trigger).
  initramfs-tools-core dracut-core
  # the sample mdev parents (tests/vm/mdev-samples.sh; headers and source come below)
  make xz-utils
  # fuzzing: libFuzzer is in clang's runtime library
  clang libclang-rt-14-dev
)
# install_missing SPEC...: installs each package (NAME, or NAME=VERSION for that very version)
# that is not installed yet; as another user than root, names them and fails.
install_missing() {
  local p have missing=()
  for p in "$@"; do
    have=$(dpkg-query -W -f='${Status} ${Version}' "${p%%=*}" 2>/dev/null || true)
    if [[ $p == *=* ]]; then
      [[ $have == "install ok installed ${p#*=}" ]] || missing+=("$p")
    else
      [[ $have == "install ok installed "* ]] || missing+=("$p")
    fi
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "test.sh: missing Debian packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
  echo "test.sh: installing ${missing[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}
install_missing "${packages[@]}"

# took STEP START: how long STEP, begun when $SECONDS was START, took (CI time is a budget).
took() { echo "test.sh: $1: $((SECONDS - $2)) s"; }
# wanted STEP: the whole run, or STEP is named in VFIOD_SUITES.
wanted() { [[ -z ${VFIOD_SUITES:-} || " $VFIOD_SUITES " == *" $1 "* ]]; }
took "packages" 0

build=${BUILD_DIR:-build}
# One compile serves the tests and the packages. The main build takes the Debian build's flags
# (dpkg-buildflags with debian/rules' hardening, buildtype plain), and ccache, which meson puts in
# front of the compiler wherever it is installed, hands the package step (dpkg-buildpackage from
# a clean export under $PWD) every object the main build made: about 10 minutes of compiling on
# two cores. The trees differ only where the cache is told to look past: their place (BASEDIR,
# the -ffile-prefix-map each tree gets, NOHASHDIR) and -Werror, which changes no object. The
# locale is hashed too: both compile under debhelper's LC_ALL=C.UTF-8.
export CCACHE_DIR=${CCACHE_DIR:-$(realpath -m "$build")-ccache} CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1 \
    CCACHE_IGNOREOPTIONS=-Werror
deb_flags() { DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get "$1"; }
# The VM suite's guest kernel, and the kernel's sample mdev parents built for it (the real-kernel
# mediated-device checks need them): tests/vm/prepare.sh fetches the kernel and names what the
# samples build from (the kernel's headers and the kernel source of its very Debian version),
# installed here; prepare.sh then builds them (tests/vm/mdev-samples.sh), cached by kernel
# version outside the clone. The first run took about a minute here (160 MB of packages, then
# 14-29 s to unpack the source and build on a busy machine), a cached one under a second.
# Without them the scenarios that need them would skip; under CI=true the run fails here.
if wanted vm; then
  start=$SECONDS
  vm_cache=$build/tests/vm/cache
  kernel_packages=$(tests/vm/prepare.sh --mdev-packages "$vm_cache")
  # shellcheck disable=SC2086 # one package per word
  install_missing $kernel_packages
  tests/vm/prepare.sh "$vm_cache" >/dev/null
  if [[ -f $vm_cache/mdev-samples.missing ]]; then
    cat "$vm_cache/mdev-samples.log" >&2
    if [[ ${CI:-} == true ]]; then
      echo "test.sh: the sample mdev parents did not build (CI=true: no scenario may skip)" >&2
      exit 1
    fi
    echo "test.sh: the sample mdev parents did not build: their scenarios will skip" >&2
  fi
  took "VM guest kernel and sample mdev parents" "$start"
fi

start=$SECONDS
# Debian's layout (DESIGN §7): the VM tests install this very build into the guest.
layout=(-Dwerror=true -Dprefix=/usr -Dsysconfdir=/etc -Dbuildtype=plain
        "-Dcpp_args=$(deb_flags CXXFLAGS) $(deb_flags CPPFLAGS)"
        "-Dcpp_link_args=$(deb_flags LDFLAGS)")
if [[ -f $build/build.ninja ]]; then
  meson configure "$build" "${layout[@]}" >/dev/null
else
  meson setup "$build" "${layout[@]}"
fi
LC_ALL=C.UTF-8 ninja -C "$build"
took "build" "$start"

# The sanitizer build (step "sanitize" below) is -O0, where ASan's compile costs a fifth of what
# it costs at -O2, with line tables only (-g1: the reports still name file and line, and each
# compile takes a fifth less), and builds only what its suites run: every test's depends, not
# the plugins' benchmarks or the VM harness. In a whole run it is built beside the VM tests.
san=${build}-sanitize
san_setup() {
  local opts=(-Dwerror=true -Dbuildtype=debug -Dcpp_args=-g1 -Db_sanitize=address,undefined
              -Db_lundef=false)
  if [[ -f $san/build.ninja ]]; then
    meson configure "$san" "${opts[@]}" >/dev/null
  else
    meson setup "$san" "${opts[@]}" >/dev/null
  fi
}
# san_targets: the files of every target a test of the sanitizer's suites depends on.
san_targets() {
  python3 - "$san" <<'EOF'
import json, os, sys
info = os.path.join(sys.argv[1], "meson-info")
tests = json.load(open(os.path.join(info, "intro-tests.json")))
files = {t["id"]: t["filename"] for t in json.load(open(os.path.join(info, "intro-targets.json")))}
suites = {"vfiod:unit", "vfiod:integration", "vfiod:fuzz-replay"}
deps = {d for t in tests if suites & set(t["suite"]) for d in t["depends"]}
for f in sorted({f for d in deps for f in files[d]}):
    print(os.path.relpath(f, sys.argv[1]))
EOF
}
# san_build [exec]: configure the sanitizer build and build those targets (exec: as this process,
# so that killing it stops ninja, which stops its compilers).
san_build() {
  local targets
  san_setup
  san_targets >"$san/targets"
  mapfile -t targets <"$san/targets"
  if [[ ${1:-} == exec ]]; then
    exec ninja -C "$san" "${targets[@]}"
  fi
  ninja -C "$san" "${targets[@]}"
}

suites=()
for s in ${VFIOD_SUITES:-}; do
  case $s in sanitize|fuzz|package) ;; *) suites+=(--suite "$s") ;; esac
done
status=0
prebuild=
if [[ -z ${VFIOD_SUITES:-} ]]; then
  # The whole run. The VM tests' guests have one CPU (TCG, where there is no KVM) and run one at
  # a time, so the other CPU builds the sanitizer's tests meanwhile, niced so that the guests'
  # timing stays theirs.
  start=$SECONDS
  meson test -C "$build" --print-errorlogs --num-processes 2 --no-suite vm || status=1
  took "unit, integration, fuzz-replay and bench tests" "$start"
  start=$SECONDS
  mkdir -p "$san"
  (renice -n 19 -p "$BASHPID" >/dev/null; san_build exec) >"$san/prebuild.log" 2>&1 &
  prebuild=$!
  trap '[[ -n $prebuild ]] && kill -- "$prebuild" 2>/dev/null; true' EXIT
  meson test -C "$build" --print-errorlogs --num-processes 2 --suite vm || status=1
  took "VM tests" "$start"
elif ((${#suites[@]})); then
  start=$SECONDS
  meson test -C "$build" --print-errorlogs --num-processes 2 "${suites[@]}" || status=1
  took "tests (${suites[*]})" "$start"
fi
((status == 0))

# Sanitizers: the unit, integration and fuzz-replay suites again, built with ASan + UBSan.
# ASan and LSan reports of every process (vfiod and vfioctl inside the integration tests too) go
# to $logs, so any report fails the run, even one from a daemon a test merely stopped. gcc's
# UBSan beside ASan ignores log_path and prints to stderr: it aborts the process instead (a
# test notices its daemon or tool dying) and test output is searched for its reports.
if wanted sanitize; then
  start=$SECONDS
  if [[ -n $prebuild ]]; then
    rc=0
    wait "$prebuild" || rc=$?
    prebuild=
    if ((rc != 0)); then
      cat "$san/prebuild.log" >&2
      echo "test.sh: the sanitizer build failed ($rc)" >&2
      exit 1
    fi
    tail -n 1 "$san/prebuild.log"
  fi
  san_build
  took "sanitizer build (after the VM tests)" "$start"
  logs=$PWD/$san/sanitizer-logs
  rm -rf "$logs" && mkdir -p "$logs" && chmod 1777 "$logs"  # uid 65534 callers log here too
  status=0
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$logs/asan" \
  UBSAN_OPTIONS="halt_on_error=1:abort_on_error=1:print_stacktrace=1" \
    meson test -C "$san" --print-errorlogs --num-processes 2 \
      --suite unit --suite integration --suite fuzz-replay || status=1
  if compgen -G "$logs/*" >/dev/null; then
    echo "test.sh: sanitizer reports:" >&2
    cat "$logs"/* >&2
    status=1
  fi
  if grep -n 'runtime error:' "$san/meson-logs/testlog.txt" >&2; then
    echo "test.sh: UBSan reports in $san/meson-logs/testlog.txt" >&2
    status=1
  fi
  echo "test.sh: sanitizer step: $((SECONDS - start)) s"
  ((status == 0))
fi

# Fuzzing: a bounded libFuzzer run per target (tests/fuzz/fuzz.sh), 20 s each here: a smoke run
# that catches a shallow regression within the CI budget; the corpora replay in every suite run
# (fuzz-replay) and FUZZ_SECONDS=600 tests/fuzz/fuzz.sh searches deeper.
if wanted fuzz; then
  start=$SECONDS
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} FUZZ_BUILD_DIR=${build}-fuzz tests/fuzz/fuzz.sh
  echo "test.sh: fuzz step: $((SECONDS - start)) s"
fi

# Debian packages: dpkg-buildpackage from a clean export of HEAD, with nocheck (debian/rules then
# compiles no test: the unit suite its dh_auto_test would run has passed twice above), lintian with no error and no warning, the contents
# checked against DESIGN §7; then these very .debs on a real system: the systemd guest installs,
# uses, removes, purges and reinstalls them (vm-package-lifecycle, under the machine-wide VM
# lock). In the vm suite that scenario skips for want of .debs, so they are built once; here a
# skip fails the step.
if wanted package; then
  start=$SECONDS
  debs=${build}-deb
  rm -rf "$debs"
  ccache --zero-stats >/dev/null
  DEB_BUILD_OPTIONS="parallel=2 nocheck ${DEB_BUILD_OPTIONS:-}" VFIOD_DEB_WORK=$PWD \
    scripts/build-deb.sh --head "$debs"
  ccache --print-stats | awk -F'\t' '{ n[$1] = $2 } END {
    printf "test.sh: package build: %d compiles from the main build, %d compiled again\n",
           n["direct_cache_hit"] + n["preprocessed_cache_hit"], n["cache_miss"] }'
  lintian --fail-on error,warning --tag-display-limit 0 "$debs"/*.changes
  tests/package/check_deb.sh "$debs" .
  echo "test.sh: package step, build and checks: $((SECONDS - start)) s"
  vm_start=$SECONDS
  VFIOD_DEB_DIR=$(cd "$debs" && pwd) flock /tmp/vm.lock \
    meson test -C "$build" --print-errorlogs vm-package-lifecycle
  python3 - "$build/meson-logs/testlog.json" <<'EOF'
import json, sys
runs = [t for t in map(json.loads, open(sys.argv[1]))
        if t["name"].split(" / ")[-1] == "vm-package-lifecycle"]
if [t["result"] for t in runs] != ["OK"]:
    why = runs[0]["stdout"].strip().splitlines()[-1:] if runs else ["not run"]
    sys.exit(f"test.sh: vm-package-lifecycle did not pass: {[t['result'] for t in runs]} {why}")
EOF
  echo "test.sh: package-lifecycle scenario: $((SECONDS - vm_start)) s"
  echo "test.sh: package step: $((SECONDS - start)) s"
fi
