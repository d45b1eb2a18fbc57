#!/usr/bin/python3
"""The man pages, --help and the README do not drift apart.

Every verb and option that `vfioctl --help` (and each `vfioctl VERB --help`) names is in
vfioctl(1), each verb's options in that verb's entry; every option of `vfiod --help` is in
vfiod(8); every configuration table and key that the config loader accepts - learnt from the
loader itself, by feeding it an unknown key in each table - is in vfiod.toml(5) under its
table's section and in the README's key table; each kubelet plugin's options are in its man
page (vfiod-device-plugin(8), vfiod-dra-plugin(8)) when the plugin is built.

usage: docs_test.py --vfioctl P --vfiod P --man DIR --readme README [--plugin P]...
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

failures = 0


def check(name, good, detail=""):
    global failures
    if good:
        print(f"ok - {name}")
    else:
        failures += 1
        print(f"not ok - {name}" + (f": {detail}" if detail else ""))


def run(*cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def man_text(path):
    """The roff source with font escapes removed and \\- as '-': what a reader sees, line by
    line, with section headings (.SH) kept as '# NAME' lines."""
    out = []
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(".SH "):
                out.append("# " + line[4:].strip().strip('"'))
                continue
            if line.startswith(".") or line.startswith("'"):
                continue
            line = re.sub(r"\\f[BIRP]", "", line).replace("\\-", "-").replace("\\(aq", "'")
            line = line.replace("\\&", "").replace("\\e", "\\")
            out.append(line)
    return "\n".join(out)


def sections(text):
    """{heading: body} of a man_text()."""
    result, current = {}, None
    for line in text.splitlines():
        if line.startswith("# "):
            current = line[2:]
            result[current] = ""
        elif current:
            result[current] += line + "\n"
    return result


def bold_words(path):
    """Every bold word of the page (\\fBword\\fR), the way options and verbs are set."""
    with open(path) as f:
        src = f.read().replace("\\-", "-")
    return set(re.findall(r"\\fB([^\\]+)\\f[RP]", src))


FLAG = re.compile(r"(?<![\w-])(--?[a-zA-Z][a-zA-Z0-9-]*)")


def flags_of(text):
    return set(FLAG.findall(text))


def help_verbs(help_text):
    """The verbs of a --help's 'Commands:' section: lines '  VERB ...' up to the next heading."""
    verbs, inside = [], False
    for line in help_text.splitlines():
        if line.rstrip().endswith(":") and not line.startswith(" "):
            inside = line.strip() == "Commands:"
            continue
        m = re.match(r"^  ([a-z][a-z-]*)(\s|$)", line)
        if inside and m:
            verbs.append(m.group(1))
    return verbs


def check_vfioctl(vfioctl, page):
    rc, top = run(vfioctl, "--help")
    check("vfioctl --help exits 0", rc == 0, top)
    verbs = help_verbs(top)
    check("vfioctl --help lists commands", len(verbs) >= 5, ", ".join(verbs))
    text = man_text(page)
    secs = sections(text)
    bold = bold_words(page)
    commands = secs.get("COMMANDS", "")
    for flag in sorted(flags_of(top)):
        check(f"vfioctl(1) has {flag} (vfioctl --help)", flag in bold, f"not bold in {page}")
    for verb in verbs:
        rc, out = run(vfioctl, verb, "--help")
        check(f"vfioctl {verb} --help exits 0", rc == 0, out)
        usage = out.splitlines()[0] if out else ""
        # The verb's entry in COMMANDS: its first line starts with the verb, and it lists every
        # option the verb's usage line names.
        entry = next((l for l in commands.splitlines() if l.split(" ", 1)[0] == verb), None)
        check(f"vfioctl(1) COMMANDS has {verb}", entry is not None, "no entry line")
        for flag in sorted(flags_of(usage)):
            check(f"vfioctl(1) {verb} entry has {flag}", entry is not None and flag in flags_of(entry),
                  f"usage: {usage!r}; entry: {entry!r}")
        if entry is not None:
            for flag in sorted(flags_of(entry) - flags_of(usage)):
                check(f"vfioctl(1) {verb} entry has no {flag} that {verb} refuses", False,
                      f"usage: {usage!r}")


def check_vfiod(vfiod, page):
    rc, out = run(vfiod, "--help")
    check("vfiod --help exits 0", rc == 0, out)
    bold = bold_words(page)
    opts = sections(man_text(page)).get("OPTIONS", "")
    for flag in sorted(flags_of(out)):
        check(f"vfiod(8) has {flag} (vfiod --help)", flag in bold and flag in opts,
              "not a bold word in OPTIONS")


def config_keys(vfioctl):
    """{table heading: [keys]} as the loader's own 'unknown key' messages list them."""
    probe = """[daemon]
zz_probe = 1
[[device]]
selector = "1234:5678"
zz_probe = 1
[[protect]]
address = "0000:00:01.0"
zz_probe = 1
[[sriov]]
address = "0000:00:01.0"
num_vfs = 1
zz_probe = 1
[[mdev]]
parent = "mbochs"
type = "mbochs-small"
count = 1
zz_probe = 1
[zz_table]
"""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "probe.toml")
        with open(path, "w") as f:
            f.write(probe)
        rc, out = run(vfioctl, "check-config", path)
    check("check-config rejects the probe", rc == 2, out)
    tables = {}
    for m in re.finditer(r'unknown key "zz_probe" in (\[\[?\w+\]\]?); expected ([^\n]+)', out):
        tables[m.group(1)] = [k for k in re.split(r",\s*|\s+or\s+", m.group(2).strip()) if k]
    m = re.search(r"unknown table \[zz_table\]; expected ([^\n]+)", out)
    known = re.findall(r"\[\[?\w+\]\]?", m.group(1)) if m else []
    check("the loader names its tables", set(known) == set(tables) and len(known) >= 3,
          f"tables {known} vs keyed {sorted(tables)}:\n{out}")
    return tables


def check_config_page(tables, page, readme):
    secs = sections(man_text(page))
    with open(readme) as f:
        rows = [l for l in f if l.startswith("| `[")]
    for table, keys in sorted(tables.items()):
        body = secs.get(table)
        check(f"vfiod.toml(5) has a {table} section", body is not None, f"sections: {list(secs)}")
        for key in keys:
            check(f"vfiod.toml(5) {table} documents {key}",
                  body is not None and re.search(rf"^{re.escape(key)} = ", body, re.M) is not None,
                  f"no '{key} = ...' entry under {table}")
            in_readme = any(r.startswith(f"| `{table} ") and
                            (f"`{table} {key}`" in r or f"`{key}`" in r.split("|")[1]) for r in rows)
            check(f"README key table has {table} {key}", in_readme)


def check_plugin(plugin, man):
    name = os.path.basename(plugin)
    rc, out = run(plugin, "--help")
    check(f"{name} --help exits 0", rc == 0, out)
    bold = bold_words(os.path.join(man, name + ".8"))
    flags = sorted(flags_of(out))
    check(f"{name} --help lists flags", len(flags) > 2, out)
    for flag in flags:
        check(f"{name}(8) has {flag}", flag in bold)


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--vfioctl", required=True)
    p.add_argument("--vfiod", required=True)
    p.add_argument("--man", required=True)
    p.add_argument("--readme", required=True)
    p.add_argument("--plugin", action="append", default=[],
                   help="a kubelet plugin whose --help its man page must cover (repeatable)")
    a = p.parse_args()
    check_vfioctl(a.vfioctl, os.path.join(a.man, "vfioctl.1"))
    check_vfiod(a.vfiod, os.path.join(a.man, "vfiod.8"))
    check_config_page(config_keys(a.vfioctl), os.path.join(a.man, "vfiod.toml.5"), a.readme)
    for plugin in a.plugin:
        check_plugin(plugin, a.man)
    print(f"# {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
