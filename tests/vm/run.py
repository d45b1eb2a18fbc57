#!/usr/bin/python3
"""Boots one guest for one or more scenarios and turns its serial result lines into a verdict."""
# Host side of the VM harness. The guest writes "ok NAME" / "not ok NAME detail" / "time NAME S" /
# "req ..." lines to its second serial port (a file here); requests are answered on the third
# port (a socket). The test fails on any "not ok", on a check named in the scenario's
# "# checks:" header that never reported, and when the guest does not finish in time.
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Header keys that shape the guest: scenarios sharing one boot must agree on each of them.
SHARED_KEYS = ("topology", "overlay", "memory", "install", "nvme-subsys", "nvme-sriov",
               "initramfs")


def parse_header(path):
    meta = {"checks": [], "needs": [], "topology": "default", "overlay": None, "memory": None,
            "install": "build", "nvme-subsys": None, "nvme-sriov": None, "initramfs": "harness"}
    with open(path) as f:
        for line in f:
            if not line.startswith("#"):
                if line.strip():
                    break
                continue
            key, _, value = line[1:].strip().partition(":")
            if key == "checks":
                meta["checks"] += value.split()
            elif key == "needs":
                meta["needs"] += value.split()
            elif key in SHARED_KEYS:
                meta[key] = value.strip()
    return meta


def scenario_name(path):
    return os.path.splitext(os.path.basename(path))[0]


def parse_scenarios(paths):
    """The guest settings of one or more scenarios that share a boot: several must agree on
    everything but their checks, which are then named "SCENARIO/CHECK" (lib.sh's VMTEST_PREFIX).
    VMTEST_ONLY="NAME ..." keeps only the named scenarios (to run one of a shared boot alone)."""
    only = os.environ.get("VMTEST_ONLY", "").split()
    if only:
        unknown = [n for n in only if n not in map(scenario_name, paths)]
        if unknown:
            raise RuntimeError(f"VMTEST_ONLY names no scenario of this test: {' '.join(unknown)}")
        paths = [p for p in paths if scenario_name(p) in only]
    metas = [parse_header(p) for p in paths]
    if len(paths) == 1:
        return metas[0], paths
    for p, m in zip(paths[1:], metas[1:]):
        for key in SHARED_KEYS:
            if m[key] != metas[0][key]:
                raise RuntimeError(f"{p}: '# {key}: {m[key]}' differs from {paths[0]}'s "
                                   f"'{metas[0][key]}': scenarios that share a boot share it")
    meta = dict(metas[0])
    meta["checks"] = [f"{scenario_name(p)}/{c}" for p, m in zip(paths, metas) for c in m["checks"]]
    return meta, paths


# What a scenario's "# needs:" may name, and the file of prepare.sh's output that says why it is
# missing (absent when it is there).
NEEDS = {"mdev-samples": "mdev-samples.missing"}


def drop_unmet(paths, cache):
    """The scenarios whose "# needs:" prepare.sh met, and a line per one it did not. Under
    CI=true an unmet need is an error (RuntimeError): CI never skips a scenario."""
    kept, skipped = [], []
    for path in paths:
        why = []
        for need in parse_header(path)["needs"]:
            if need not in NEEDS:
                raise RuntimeError(f"{path}: '# needs: {need}': one of {' '.join(NEEDS)}")
            marker = os.path.join(cache, NEEDS[need])
            if os.path.exists(marker):
                why.append(f"{need}: {open(marker).read().strip()}")
        if not why:
            kept.append(path)
            continue
        line = f"{scenario_name(path)} needs {'; '.join(why)}"
        if os.environ.get("CI") == "true":
            raise RuntimeError(f"{line} (CI=true: no scenario may skip)")
        skipped.append(line)
    return kept, skipped


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def copy_binary_with_libs(binary, dest_root, dest_path):
    """Copies a dynamically linked program and the shared libraries it loads into dest_root."""
    target = os.path.join(dest_root, dest_path.lstrip("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copy2(binary, target)
    out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        lib = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if not lib.startswith("/"):
            continue
        for path in {lib, os.path.realpath(lib)}:
            dst = os.path.join(dest_root, path.lstrip("/"))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.realpath(lib), dst)


def usr_install(build_root, source_root, work):
    """DESTDIR-installs the project as Debian lays it out (prefix /usr, sysconfdir /etc)."""
    opts = json.loads(subprocess.run(["meson", "introspect", "--buildoptions", build_root],
                                     capture_output=True, text=True, check=True).stdout)
    values = {o["name"]: o["value"] for o in opts}
    build = build_root
    if values.get("prefix") != "/usr" or values.get("sysconfdir") not in ("/etc", "etc"):
        # The guest runs the units and the D-Bus policy from their real places, so a build for
        # another prefix is rebuilt once, for /usr, beside the work dirs.
        build = os.path.join(os.path.dirname(work), "usr-build")
        if not os.path.exists(os.path.join(build, "build.ninja")):
            sh(["meson", "setup", "--prefix=/usr", "--sysconfdir=/etc", build, source_root],
               stdout=subprocess.DEVNULL)
        sh(["ninja", "-C", build], stdout=subprocess.DEVNULL)
    dest = os.path.join(work, "destdir")
    shutil.rmtree(dest, ignore_errors=True)
    sh(["meson", "install", "-C", build, "--no-rebuild", "--quiet", "--destdir", dest],
       stdout=subprocess.DEVNULL)
    return dest


MASKED_UNITS = [
    "postgresql.service", "e2scrub_reap.service", "apt-daily.timer", "apt-daily-upgrade.timer",
    "man-db.timer", "e2scrub_all.timer", "fstrim.timer", "logrotate.timer", "dpkg-db-backup.timer",
    "systemd-timesyncd.service", "getty@tty1.service", "systemd-networkd-wait-online.service",
    "networking.service", "ssh.service", "cron.service", "docker.service", "containerd.service",
    "systemd-tmpfiles-clean.timer", "remote-fs.target", "systemd-update-utmp.service",
    "systemd-binfmt.service", "systemd-firstboot.service", "ldconfig.service",
    "serial-getty@ttyS0.service", "systemd-user-sessions.service", "systemd-pstore.service",
    "dev-hugepages.mount", "sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount",
    "modprobe@drm.service", "modprobe@fuse.service", "modprobe@loop.service",
    "modprobe@efi_pstore.service",
]

# Drivers udev would load at boot for q35's own chipset and the CPU, which no scenario uses: on
# the guest's one emulated CPU each costs boot time before the scenario starts.
UNUSED_MODULES = [
    "ahci", "lpc_ich", "i2c_i801", "iTCO_wdt", "iTCO_vendor_support", "pcspkr", "kvm", "kvm_amd",
    "kvm_intel", "powernow_k8", "joydev", "serio_raw",
]

TEST_UNIT = """[Unit]
Description=vfiod VM scenario
After=basic.target dbus.service systemd-udevd.service
[Service]
Type=oneshot
ExecStart=/bin/sh -c '. /vmtest/scenario.sh; echo done >/dev/ttyS1'
ExecStopPost=/bin/systemctl poweroff --no-block
StandardOutput=journal+console
StandardError=journal+console
TimeoutStartSec=infinity
"""


def copy_debs(src, dest):
    """Copies the built .deb files (no debug symbols) of directory src to dest."""
    try:
        debs = sorted(n for n in os.listdir(src) if n.endswith(".deb") and "-dbgsym_" not in n)
    except OSError as e:
        raise RuntimeError(f"VFIOD_DEB_DIR: {e}")
    if not any(n.startswith("vfiod_") for n in debs):
        raise RuntimeError(f"VFIOD_DEB_DIR={src} holds no vfiod_*.deb (scripts/build-deb.sh DIR "
                           "builds them)")
    os.makedirs(dest)
    for name in debs:
        shutil.copy2(os.path.join(src, name), dest)


def merge_usr(tree):
    """Moves /lib, /bin, ... of an install tree under /usr: the guest's root is merged-/usr, where
    those are symlinks that a copy into the overlay must not replace."""
    for top in ("bin", "sbin", "lib", "lib64"):
        src = os.path.join(tree, top)
        if os.path.isdir(src) and not os.path.islink(src):
            shutil.copytree(src, os.path.join(tree, "usr", top), symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(src)


# Several scenarios in one guest: each runs in its own subshell, in order, its checks reported as
# "SCENARIO/CHECK". The parts are in DIR: /payload/parts in the busybox guest, /vmtest/parts (the
# overlay) in the systemd guest; LIB is where that guest has lib.sh.
SHARED_BOOT = """. {lib}
for _part in {parts}; do
    note "scenario $_part"
    (VMTEST_PREFIX="$_part/"; . "{dir}/$_part.sh") </dev/null
done
"""


def build_payload(args, meta, scenarios, work):
    root = os.path.join(work, "payload-root")
    shutil.rmtree(root, ignore_errors=True)
    pay = os.path.join(root, "payload")
    os.makedirs(pay)
    if len(scenarios) == 1:
        shutil.copy2(scenarios[0], os.path.join(pay, "scenario.sh"))
    else:
        guest_lib, guest_dir, host_dir = (
            ("/payload/lib.sh", "/payload/parts", os.path.join(pay, "parts"))
            if args.mode == "busybox" else
            ("/vmtest/lib.sh", "/vmtest/parts", os.path.join(pay, "overlay/vmtest/parts")))
        os.makedirs(host_dir)
        for path in scenarios:
            shutil.copy2(path, os.path.join(host_dir, scenario_name(path) + ".sh"))
        with open(os.path.join(pay, "scenario.sh"), "w") as f:
            f.write(SHARED_BOOT.format(lib=guest_lib, dir=guest_dir,
                                       parts=" ".join(map(scenario_name, scenarios))))
    shutil.copy2(os.path.join(HERE, "lib.sh"), os.path.join(pay, "lib.sh"))
    shutil.copy2(os.path.join(HERE, "guest-root.sh"), os.path.join(pay, "guest-root.sh"))
    if args.mode == "busybox":
        for prog in args.binary:
            copy_binary_with_libs(prog, root, "/usr/bin/" + os.path.basename(prog))
    else:
        overlay = os.path.join(pay, "overlay")
        if meta["install"] == "debs":
            # Nothing installed: the scenario installs the packages from /vmtest/debs itself.
            copy_debs(os.environ["VFIOD_DEB_DIR"], os.path.join(overlay, "vmtest/debs"))
        else:
            dest = usr_install(args.build_root, args.source_root, work)
            shutil.copytree(dest, overlay, symlinks=True, dirs_exist_ok=True)
            merge_usr(overlay)
        system = os.path.join(overlay, "etc/systemd/system")
        os.makedirs(os.path.join(system, "multi-user.target.wants"), exist_ok=True)
        for unit in MASKED_UNITS:
            os.symlink("/dev/null", os.path.join(system, unit))
        with open(os.path.join(system, "vmtest.service"), "w") as f:
            f.write(TEST_UNIT)
        os.symlink("../vmtest.service", os.path.join(system, "multi-user.target.wants/vmtest.service"))
        # Test programs the scenario runs (never part of the install), on the guest's PATH; the
        # libraries they need come with the host's /.
        for prog in args.binary:
            os.makedirs(os.path.join(overlay, "usr/bin"), exist_ok=True)
            shutil.copy2(prog, os.path.join(overlay, "usr/bin", os.path.basename(prog)))
        if meta["overlay"]:
            extra = os.path.join(os.path.dirname(scenarios[0]), meta["overlay"])
            shutil.copytree(extra, overlay, symlinks=True, dirs_exist_ok=True)
        with open(os.path.join(pay, "kmods"), "w") as f:
            kver = open(os.path.join(args.cache, "kver")).read().strip()
            f.write(os.path.join(os.path.realpath(args.cache), "kernel/lib/modules", kver))
    base_image = os.path.join(args.cache, "base.cpio.gz")
    if meta["initramfs"] == "debian":
        base_image = debian_initramfs(args, work, os.path.join(pay, "overlay"))
    archive = os.path.join(work, "initrd.img")
    with open(archive, "wb") as out:
        with open(base_image, "rb") as base:
            shutil.copyfileobj(base, out)
        files = subprocess.run("find . -print0 | LC_ALL=C sort -z", shell=True, cwd=root,
                               capture_output=True, check=True).stdout
        cpio = subprocess.run(["cpio", "--null", "-o", "-H", "newc", "--quiet"], cwd=root,
                              input=files, capture_output=True, check=True).stdout
        out.write(subprocess.run(["gzip", "-1"], input=cpio, capture_output=True,
                                 check=True).stdout)
    return archive


def debian_initramfs(args, work, overlay):
    """"# initramfs: debian": the guest boots an initramfs built by Debian's mkinitramfs with
    vfiod's hook from the install tree in the overlay and the overlay's /etc/vfiod/vfiod.toml
    (build-initramfs.sh; a dracut image beside it, for its contents). What the guest checks of
    both builds goes to /vmtest/host. Returns the image."""
    out = os.path.join(work, "initramfs")
    started = time.monotonic()
    sh([os.path.join(HERE, "build-initramfs.sh"), args.cache, overlay,
        os.path.join(HERE, "initramfs"), os.path.join(overlay, "etc/vfiod/vfiod.toml"), out])
    print(f"# initramfs images built in {time.monotonic() - started:.1f} s", flush=True)
    shutil.copytree(os.path.join(out, "facts"), os.path.join(overlay, "vmtest/host"))
    # The guest builds an initramfs of its own with the same configuration.
    shutil.copytree(os.path.join(HERE, "initramfs"), os.path.join(overlay, "vmtest/initramfs-conf"))
    return os.path.join(out, "initrd-debian.img")


def qemu_command(args, meta, work, initrd):
    mem = meta["memory"] or ("1024" if args.mode == "systemd" else "512")
    cmd = [
        "qemu-system-x86_64", "-accel", "tcg", "-M", "q35,kernel-irqchip=split",
        "-device", "intel-iommu,intremap=on", "-m", mem, "-smp", "1",
        "-nodefaults", "-display", "none", "-vga", "none", "-no-reboot",
        "-kernel", os.path.join(args.cache, "vmlinuz"), "-initrd", initrd,
        "-append", f"console=ttyS0 intel_iommu=on panic=-1 vmtest.mode={args.mode}"
                   + (" module_blacklist=" + ",".join(UNUSED_MODULES)
                      if args.mode == "systemd" else "")
                   + (" boot=vmtest init=/lib/systemd/systemd"
                      if meta["initramfs"] == "debian" else ""),
        "-serial", "file:" + os.path.join(work, "console.log"),
        "-serial", "file:" + os.path.join(work, "results.txt"),
        "-chardev", f"socket,id=ctl,path={os.path.join(work, 'ctl.sock')},server=on,wait=off",
        "-serial", "chardev:ctl",
        "-qmp", f"unix:{os.path.join(work, 'qmp.sock')},server=on,wait=off",
    ]
    # The management NIC sits on the root bus and carries the guest's own network.
    mgmt_model = "e1000e" if meta["topology"] == "e1000e-mgmt" else "virtio-net-pci"
    cmd += ["-netdev", "user,id=mgmt,restrict=on",
            "-device", f"{mgmt_model},netdev=mgmt,romfile=,addr=02.0"]
    # The "GPU + HDMI audio": two functions behind one root port, one IOMMU group.
    cmd += ["-device", "pcie-root-port,id=rp1,chassis=1,slot=1,addr=03.0",
            "-netdev", "user,id=gpu,restrict=on",
            "-device", "e1000e,bus=rp1,addr=00.0,multifunction=on,netdev=gpu,romfile=",
            "-device", "ich9-intel-hda,bus=rp1,addr=00.1"]
    disk = os.path.join(work, "disk.img")
    with open(disk, "wb") as f:
        f.truncate(64 << 20)
    cmd += ["-device", "pcie-root-port,id=rp2,chassis=2,slot=2,addr=04.0",
            "-drive", f"if=none,id=d0,file={disk},format=raw",
            "-device", "nvme,bus=rp2,serial=vmtest-nvme,drive=d0"]
    # Empty ports for hot-plug, and a spare backend for a hot-plugged NIC.
    cmd += ["-device", "pcie-root-port,id=rp3,chassis=3,slot=3,addr=05.0",
            "-device", "pcie-root-port,id=rp4,chassis=4,slot=4,addr=06.0",
            "-netdev", "user,id=hp,restrict=on"]
    # "# nvme-subsys: yes": a second NVMe controller in an NVMe subsystem, behind a root port of
    # its own after the others (the BDFs above stay). Its namespace is then a native-multipath
    # head under sys/devices/virtual/nvme-subsystem, away from the controller; Intel's ID
    # (8086:5845) keeps a 1b36:0010 selector off it. Only for a guest where no other NVMe does
    # I/O: beside the mounted $NVME of a systemd boot, that one lost I/O completions under TCG
    # with interrupt remapping (commit cdf743e).
    if meta["nvme-subsys"] == "yes":
        disk2 = os.path.join(work, "disk-subsys.img")
        with open(disk2, "wb") as f:
            f.truncate(16 << 20)
        cmd += ["-device", "pcie-root-port,id=rp5,chassis=5,slot=5,addr=08.0",
                "-device", "nvme-subsys,id=subsys0,nqn=vmtest-subsys",
                "-device", "nvme,bus=rp5,serial=vmtest-mpath,subsys=subsys0,use-intel-id=on",
                "-drive", f"if=none,id=d1,file={disk2},format=raw",
                "-device", "nvme-ns,drive=d1,nsid=1"]
    if meta["nvme-sriov"] == "yes":
        cmd += sriov_devices(work)
    if args.mode == "systemd":
        cmd += ["-fsdev", "local,id=fs0,path=/,security_model=none,readonly=on",
                "-device", "virtio-9p-pci,fsdev=fs0,mount_tag=hostroot,addr=07.0"]
    return cmd


def sriov_devices(work):
    """"# nvme-sriov: yes": an SR-IOV NVMe PF (two VFs) behind root port rp6 at 00:09.0, after
    every other port, so the BDFs above stay (lib.sh's SRIOV_PF finds its bus). QEMU's NVMe
    SR-IOV needs a subsystem and flexible queue and interrupt resources for its VFs; the
    namespace is detached, so no I/O ever runs beside $NVME's. The PF and its VFs carry $NVME's ID
    (1b36:0010): configs select them by address. A second, empty subsystem is there for a PF that
    a scenario hot-adds (device_add refuses nvme-subsys; see SRIOV_HOTPLUG_PF in lib.sh)."""
    disk = os.path.join(work, "disk-sriov.img")
    with open(disk, "wb") as f:
        f.truncate(16 << 20)
    return ["-device", "pcie-root-port,id=rp6,chassis=6,slot=6,addr=09.0",
            "-device", "nvme-subsys,id=sriovsubsys,nqn=vmtest-sriov",
            "-device", "nvme,id=sriovpf,bus=rp6,serial=vmtest-sriov,subsys=sriovsubsys,"
                       "sriov_max_vfs=2,sriov_vq_flexible=4,sriov_vi_flexible=2",
            "-drive", f"if=none,id=d2,file={disk},format=raw",
            "-device", "nvme-ns,drive=d2,bus=sriovpf,nsid=1,shared=false,detached=true",
            "-device", "nvme-subsys,id=sriovhpsubsys,nqn=vmtest-sriov-hp"]


class Qmp:
    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.file = self.sock.makefile("rw")
        self._read()  # greeting
        self.execute("qmp_capabilities")

    def _read(self):
        while True:
            msg = json.loads(self.file.readline())
            if "event" not in msg:
                return msg

    def execute(self, command, arguments=None):
        req = {"execute": command}
        if arguments:
            req["arguments"] = arguments
        self.file.write(json.dumps(req) + "\n")
        self.file.flush()
        return self._read()


def connect_unix(path, deadline):
    while time.monotonic() < deadline:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            return s
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"cannot connect to {path}")


def answer(qmp_path, words, state):
    """Serves one guest request; returns the answer line."""
    if words[:1] == ["qmp"] and len(words) >= 2:
        if state.get("qmp") is None:
            state["qmp"] = Qmp(qmp_path)
        arguments = json.loads(" ".join(words[2:])) if len(words) > 2 else None
        started = time.monotonic()
        reply = state["qmp"].execute(words[1], arguments)
        took = time.monotonic() - started
        if "error" in reply:
            return f"err {reply['error'].get('desc', reply)}"
        return f"ok {took:.3f}"
    return "err unknown request"


def run(args):
    if args.mode == "systemd" and os.geteuid() != 0:
        # The guest's root is this machine's / exported over 9p: as another user, files such as
        # /etc/shadow or root-only units are unreadable and the guest is not a faithful host.
        print("SKIP: the systemd guest needs root on the host")
        return 77
    try:
        meta, scenarios = parse_scenarios(args.scenario)
    except RuntimeError as e:
        print(f"error: {e}")
        return 1
    debian = meta["initramfs"] == "debian"
    if meta["initramfs"] not in ("harness", "debian") or (
            debian and (args.mode != "systemd" or meta["install"] != "build")):
        print(f"{scenarios[0]}: '# initramfs: {meta['initramfs']}': harness, or debian for a "
              "systemd guest with the build installed")
        return 1
    if meta["install"] not in ("build", "debs"):
        print(f"{scenarios[0]}: '# install: {meta['install']}': build or debs")
        return 1
    if meta["install"] == "debs":
        debs = os.environ.get("VFIOD_DEB_DIR", "")
        if not debs:
            # Built once, by scripts/test.sh's package step, which runs this scenario itself
            # with them (and fails on this skip).
            print("SKIP: this scenario installs the Debian packages: set VFIOD_DEB_DIR to the "
                  "output directory of scripts/build-deb.sh (scripts/test.sh's package step does)")
            return 77
        if not os.path.isabs(debs):
            print(f"error: VFIOD_DEB_DIR={debs}: an absolute path, please (meson test runs this "
                  "from another directory)")
            return 1
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sh([os.path.join(HERE, "prepare.sh"), args.cache], stdout=subprocess.DEVNULL)
    try:
        kept, skipped = drop_unmet(scenarios, args.cache)
    except RuntimeError as e:
        print(f"error: {e}")
        return 1
    for line in skipped:
        print(f"# SKIP {line}")
    if not kept:
        print("SKIP: " + "; ".join(skipped))
        return 77
    if skipped:
        meta, scenarios = parse_scenarios(kept)
    try:
        initrd = build_payload(args, meta, scenarios, work)
    except RuntimeError as e:
        print(f"error: {e}")
        return 1
    cmd = qemu_command(args, meta, work, initrd)
    with open(os.path.join(work, "qemu-cmd.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n")

    started = time.monotonic()
    qemu = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=open(os.path.join(work, "qemu.log"), "w"),
                            stderr=subprocess.STDOUT)
    deadline = started + args.timeout
    results_path = os.path.join(work, "results.txt")
    ctl = connect_unix(os.path.join(work, "ctl.sock"), started + 30)
    seen, lines, state, pos, timed_out = {}, [], {}, 0, False
    first_line_at = None
    while True:
        exited = qemu.poll() is not None
        if os.path.exists(results_path):
            with open(results_path, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            # Only complete lines: the rest is read again next round.
            complete = chunk[:chunk.rfind(b"\n") + 1]
            pos += len(complete)
            for raw in complete.decode(errors="replace").splitlines():
                line = raw.strip("\r\x00 ")
                if not line:
                    continue
                if first_line_at is None:
                    first_line_at = time.monotonic() - started
                lines.append(line)
                print(line, flush=True)
                if line.startswith("req "):
                    reply = answer(os.path.join(work, "qmp.sock"), line.split()[1:], state)
                    print(f"  -> {reply}", flush=True)
                    ctl.sendall((reply + "\n").encode())
                elif line.startswith("not ok "):
                    seen[line.split()[2]] = False
                elif line.startswith("ok "):
                    name = line.split()[1]
                    seen[name] = seen.get(name, True)
        if exited:
            break
        if time.monotonic() > deadline:
            timed_out = True
            qemu.kill()
            qemu.wait()
            break
        time.sleep(0.02)
    wall = time.monotonic() - started

    missing = [c for c in meta["checks"] if c not in seen]
    failed = [n for n, good in seen.items() if not good]
    done = "done" in lines
    passed = sum(1 for good in seen.values() if good)
    print(f"# wall {wall:.1f} s; first result line after {first_line_at or 0:.1f} s")
    for name in missing:
        print(f"not ok {name} # never reported")
    if timed_out:
        print(f"# guest timed out after {args.timeout} s")
    elif not done:
        print("# guest stopped before the scenario finished")
    print(f"{passed} passed, {len(failed) + len(missing)} failed")
    good = not failed and not missing and done and not timed_out
    if good and not args.keep:
        for name in ("initrd.img", "disk.img", "disk-subsys.img", "disk-sriov.img", "payload-root",
                     "destdir", "initramfs"):
            path = os.path.join(work, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else \
                (os.path.exists(path) and os.remove(path))
    elif not good:
        print(f"# console log kept: {os.path.join(work, 'console.log')}")
        try:
            with open(os.path.join(work, "console.log"), errors="replace") as f:
                tail = f.readlines()[-40:]
            sys.stdout.write("".join("#   " + l for l in tail))
        except OSError:
            pass
    return 0 if good else 1


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--mode", choices=["busybox", "systemd"], required=True)
    p.add_argument("--scenario", action="append", required=True,
                   help="a scenario script; several share one boot, run in the order given")
    p.add_argument("--cache", required=True, help="prepare.sh output (kernel, base initramfs)")
    p.add_argument("--work", required=True, help="this run's directory (logs kept on failure)")
    p.add_argument("--binary", action="append", default=[], help="program for the busybox guest")
    p.add_argument("--build-root", help="meson build dir to DESTDIR-install (systemd guest)")
    p.add_argument("--source-root", help="meson source dir (to rebuild for prefix /usr)")
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--keep", action="store_true", help="keep the work dir even on success")
    sys.exit(run(p.parse_args()))


if __name__ == "__main__":
    main()
