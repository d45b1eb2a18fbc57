#!/usr/bin/env python3
"""Every section of docs/DESIGN.md that the tree cites exists there.

What counts as a citation (no other document in this project is cited with a section sign, so
to cite another one's section write "section 4.1" or "RFC 6902 4.1", never the sign):
  - every section sign (U+00A7) followed by a number, anywhere: "DESIGN §4", "DESIGN.md §6",
    "(DESIGN §2, §4)", "§9–§11", and a citation wrapped onto the next line ("(DESIGN\n// §10)");
  - "DESIGN section N", "DESIGN.md, Section N" and the like;
  - a section sign followed by no number is an error too: it cites nothing a reader can find.
Each cited N needs a heading "## N." in docs/DESIGN.md. The appendix is cited by its name
("DESIGN, appendix"), which this does not check.

Which files: every regular file under SOURCE_ROOT (the source, scripts, unit files, man pages,
README, docs/, DESIGN.md's own cross-references included), except .git, build directories
(any directory holding meson-private), tests/fuzz/corpus (fuzzer inputs are bytes, not
prose), symbolic links, and files that are not UTF-8 text.

Usage: design_refs.py SOURCE_ROOT. Prints each bad citation as FILE:LINE: why, and exits 1 if
there is any; otherwise says how many citations it checked.
"""
import os
import re
import sys

DESIGN = os.path.join("docs", "DESIGN.md")
SKIP_DIRS = {".git", os.path.join("tests", "fuzz", "corpus")}
HEADING = re.compile(r"^## (\d+)\. ", re.M)
SIGN = "\u00a7"
CITATION = re.compile(SIGN + r"\s*(\d+)|DESIGN(?:\.md)?,? (?i:section) (\d+)|" + SIGN)


def files(root):
    for top, dirs, names in os.walk(root):
        rel_top = os.path.relpath(top, root)
        keep = []
        for d in sorted(dirs):
            rel = os.path.normpath(os.path.join(rel_top, d))
            if rel in SKIP_DIRS or os.path.exists(os.path.join(top, d, "meson-private")):
                continue
            keep.append(d)
        dirs[:] = keep
        for n in sorted(names):
            path = os.path.join(top, n)
            if os.path.isfile(path) and not os.path.islink(path):
                yield os.path.normpath(os.path.join(rel_top, n)), path


def text_of(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
        if b"\0" in data:
            return None
        return data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def main():
    if len(sys.argv) != 2:
        print("usage: design_refs.py SOURCE_ROOT", file=sys.stderr)
        return 2
    root = sys.argv[1]
    design = text_of(os.path.join(root, DESIGN))
    if design is None:
        print(f"design_refs: cannot read {DESIGN} under {root}", file=sys.stderr)
        return 2
    sections = {int(n) for n in HEADING.findall(design)}
    if not sections:
        print(f"design_refs: {DESIGN} has no '## N.' heading", file=sys.stderr)
        return 2
    have = ", ".join(f"{SIGN}{n}" for n in sorted(sections))
    bad, checked, cited_files = 0, 0, set()
    for rel, path in files(root):
        text = text_of(path)
        if text is None or (SIGN not in text and "DESIGN" not in text):
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            for m in CITATION.finditer(line):
                number = m.group(1) or m.group(2)
                if number is None:
                    print(f"{rel}:{lineno}: a {SIGN} with no section number after it")
                    bad += 1
                    continue
                checked += 1
                cited_files.add(rel)
                if int(number) not in sections:
                    print(f"{rel}:{lineno}: cites DESIGN {SIGN}{int(number)}, which {DESIGN} "
                          f"lacks (it has {have})")
                    bad += 1
    if bad:
        return 1
    print(f"design-refs: {checked} citations in {len(cited_files)} files, each of a section "
          f"{DESIGN} has ({have})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
