#!/usr/bin/env python3
"""design_refs.py must be able to fail: on a copy of a few real files (docs/DESIGN.md among
them) it passes as they are, then fails on each kind of bad citation planted in them, named by
file and line; what it must not read (a build directory, the fuzz corpus) it does not.
Usage: design_refs_selftest.py SOURCE_ROOT DESIGN_REFS_PY
"""
import os
import sys

from selftest_tree import CopiedTree, root_and_check

SIGN = "\u00a7"
# Real files: the docs, and a source file whose citation is wrapped onto its second line.
COPIED = ["docs/DESIGN.md", "README.md", "bench/README.md", "dra-plugin/main.cpp"]

def main():
    root, check = root_and_check("design_refs_selftest.py")
    with CopiedTree(root, COPIED) as copied:
        tree, copy, fail = copied.path, copied.copy, copied.fail

        def plant(rel, line):
            """Puts `line` in as line 2 of `rel` (made when missing)."""
            path = os.path.join(tree, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            lines = open(path).read().splitlines(True) if os.path.exists(path) else ["x\n"]
            lines.insert(1, line + "\n")
            with open(path, "w") as f:
                f.writelines(lines)

        def run():
            return copied.run(check)

        def expect_pass(what, *extra):
            copied.expect_pass(check, what, *extra)

        def expect_violation(rel, line, where=None):
            copy()
            plant(rel, line)
            copied.expect_fail(check, f"{line!r} in {rel}", where or f"{rel}:2:")

        copy()
        expect_pass("the copied files as they are")
        # A section that does not exist (numbers far past the last), cited the usual ways.
        expect_violation("daemon/core/planner.cpp", f"// device health (DESIGN {SIGN}90).")
        expect_violation("daemon/core/planner.cpp", f"// (DESIGN {SIGN}4, {SIGN}90)")
        expect_violation("bench/README.md", "are fixed by DESIGN " + "section 91.")
        expect_violation("tests/vm/README.md", "see DESIGN.md, " + "Section 90")
        expect_violation("systemd/vfiod.service.in", f"# DESIGN.md {SIGN}0")
        # Wrapped: the line with the number does not say DESIGN.
        expect_violation("dra-plugin/main.cpp", f"// {SIGN}99). This file parses the command line")
        # The docs cite without saying DESIGN; a sign with no number cites nothing.
        expect_violation("README.md", f"the sticky rule ({SIGN}15) says so")
        expect_violation("docs/ARCHITECTURE.md", f"see {SIGN} below")
        # Renumbering DESIGN without the citations: the real wrapped citation of §10 breaks.
        copy()
        design = os.path.join(tree, "docs/DESIGN.md")
        text = open(design).read().replace("\n## 10. ", "\n## Ten. ")
        open(design, "w").write(text)
        code, out = run()
        if code == 0 or "dra-plugin/main.cpp:2:" not in out:
            fail(f"design_refs.py did not name dra-plugin/main.cpp:2 without a '## 10.': {out}")
        else:
            print(f"ok: without DESIGN's '## 10.' heading: {out.strip().splitlines()[0]}")
        # Not read: a build directory and the fuzz corpus.
        copy()
        plant("build/meson-logs/testlog.txt", f"DESIGN {SIGN}99")
        os.makedirs(os.path.join(tree, "build/meson-private"))
        plant("tests/fuzz/corpus/config/seed", f"{SIGN}{SIGN}99")
        expect_pass("a build directory and the fuzz corpus with bad citations")
    return 1 if copied.failures else 0


if __name__ == "__main__":
    sys.exit(main())
