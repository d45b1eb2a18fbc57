#!/usr/bin/env python3
"""No function over 60 lines and no class over 10 data members, in the daemon and the kubelet
plugins (daemon/, plugin-common/, device-plugin/, dra-plugin/): a function that long, or a
class holding that much state, does several things, and each of them should have a name.

How it reads C++ (a brace matcher, not a compiler): comments, string and character literals and
preprocessor lines are blanked out, then the braces are matched. A brace block is
  - a function body when, at namespace or class scope, the declaration before it has a
    parameter list; its length is the lines from the line its declaration starts on to the
    line of its closing brace. Lambdas and local blocks count towards the function around them;
    a local class's member functions are functions of their own;
  - a class body after `class`, `struct` or `union` (local classes too); its data members are
    the names it declares at its own level that are neither functions, types, nor static.
Each function and class is named as FILE:LINE: NAME, the line being where it starts.

Usage: code_size.py SOURCE_ROOT [--allow FILE:NAME ...] [--report N]
  --allow FILE:NAME  a known offender (daemon/service/service.cpp:Service::run), still allowed;
                     one that is no longer over the limit is an error, so the list only shrinks
  --report N         also print the N longest functions and largest classes of each directory
Prints each violation as FILE:LINE: what, and exits 1 if there is any.
"""
import os
import re
import sys

DIRS = ["daemon", "plugin-common", "device-plugin", "dra-plugin"]
MAX_FUNCTION_LINES = 60
MAX_DATA_MEMBERS = 10
SOURCE = re.compile(r"\.(cpp|hpp|h|cc)$")
CLASS_KEYS = {"class", "struct", "union"}
# Trailing parts of a function declarator between its parameter list and its body.
QUALIFIERS = {"const", "override", "final", "noexcept", "mutable", "volatile", "&", "&&"}
TOKEN = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d[\w'.]*|::|->|&&|==|!=|<=|>=|\S")


def blank(text):
    """`text` with comments, literals and preprocessor lines turned into spaces, lines kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "\n":
            line_start = True
            out.append(c)
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        m = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if m and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:end]))
            i = end
            continue
        if c == "'" and i > 0 and re.search(r"\b\d[\w']*$", text[max(0, i - 40):i]):
            out.append(" ")  # a digit separator: 10'000
            i += 1
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def tokens(text):
    for lineno, line in enumerate(blank(text).split("\n"), 1):
        for m in TOKEN.finditer(line):
            yield m.group(0), lineno


def depth0(stmt, opening="(", closing=")"):
    """Indexes of stmt's tokens at depth 0 of the given brackets (and of angle brackets after
    `template`, which a declaration's own `<` cannot be confused with)."""
    d = 0
    for i, (t, _) in enumerate(stmt):
        if t == opening:
            d += 1
        elif t == closing:
            d -= 1
        elif d == 0:
            yield i


def strip_templates(stmt):
    """stmt without its `template <...>` heads and the `<...>` of names before any `=`."""
    out, i, angle = [], 0, 0
    seen_eq = False
    while i < len(stmt):
        t = stmt[i][0]
        if t == "=" and angle == 0:
            seen_eq = True
        if not seen_eq and t == "<" and out and (out[-1][0] == "template" or
                                                  re.match(r"\w", out[-1][0]) or angle):
            angle += 1
        elif angle and t == ">":
            angle -= 1
        elif angle and t == ">>":
            angle = max(0, angle - 2)
        elif angle == 0 and t != "template":
            out.append(stmt[i])
        i += 1
    return out


def parens_outside(stmt):
    """Whether stmt has a parameter list: a '(' at paren depth 0, before any '=' that is not
    part of `operator=`."""
    d = 0
    for i, (t, _) in enumerate(stmt):
        if t == "=" and d == 0 and not (i > 0 and stmt[i - 1][0] == "operator"):
            return False
        if t == "(":
            if d == 0:
                return True
            d += 1
        elif t == ")":
            d -= 1
    return False


def function_name(stmt):
    """The declarator's name: the qualified name before its parameter list."""
    words = [t for t, _ in stmt]
    i = words.index("(") if "(" in words else len(words)
    if "operator" in words[:i]:
        k = words.index("operator")
        i = words.index("(", k + 2) if words[k + 1] == "(" else i
        j = k
    else:
        j = i - 1
        if j >= 0 and words[j] == ">":
            return "?"
    while j > 0 and (words[j - 1] in ("::", "~") or
                     (words[j - 1][0].isalpha() or words[j - 1][0] == "_") and
                     words[j] in ("::", "~")):
        j -= 1
    return "".join(words[j:i]) or "?"


def data_members(stmt):
    """How many data members a declaration at class scope declares."""
    while len(stmt) >= 2 and stmt[0][0] in ("public", "private", "protected") and \
            stmt[1][0] == ":":
        stmt = stmt[2:]
    if not stmt:
        return 0
    first = stmt[0][0]
    if first in ("using", "typedef", "friend", "static", "enum", "template", "static_assert"):
        return 0
    if any(t == "{body}" for t, _ in stmt):
        # A nested type's definition; the names after its body are members of this class.
        after = [i for i, (t, _) in enumerate(stmt) if t == "{body}"][-1]
        rest = stmt[after + 1:]
        return 0 if not rest else 1 + sum(1 for i in depth0(rest) if rest[i][0] == ",")
    s = strip_templates(stmt)
    if parens_outside(s):
        return 0  # a function's declaration (or a deleted/defaulted one)
    if first in CLASS_KEYS and len(s) <= 3:
        return 0  # a forward declaration
    commas = 0
    d = 0
    for t, _ in s:
        if t in "([{":
            d += 1
        elif t in ")]}":
            d -= 1
        elif t == "," and d == 0:
            commas += 1
    return 1 + commas


class Scope:
    def __init__(self, kind, name, line, stmt_line):
        self.kind, self.name, self.line, self.stmt_line = kind, name, line, stmt_line
        self.members = 0


def class_head(words):
    """The class a definition's head names (`struct A::B final : C`), or None when the words
    are not one (`struct stat st`, a variable)."""
    for i, w in enumerate(words):
        if w not in CLASS_KEYS:
            continue
        if "(" in words[:i] or "=" in words[:i] or "{body}" in words:
            return None
        name, j = "", i + 1
        while j < len(words) and (words[j] == "::" or (words[j][0].isalpha() or
                                                         words[j][0] == "_")):
            if words[j] in ("final", "alignas") or (name and not name.endswith("::") and
                                                     words[j] != "::"):
                break
            name += words[j]
            j += 1
        rest = words[j:]
        if rest and rest[0] == "final":
            rest = rest[1:]
        if not rest or rest[0] == ":":
            return name or "(anonymous)"
        return None
    return None


def classify(stmt, inside_function, paren_depth, in_init):
    """What the brace after `stmt` opens: (kind, name)."""
    if paren_depth > 0 or in_init:
        return ("block" if inside_function else "init"), ""
    s = strip_templates(stmt)
    words = [t for t, _ in s]
    if words and words[0] in ("namespace", "extern") and not inside_function:
        return "namespace", ""
    if "enum" in words:
        return "enum", ""
    name = class_head(words)
    if name:
        return "class", name
    if inside_function:
        return "block", ""
    if parens_outside(s):
        i = words.index("(")
        if i > 0 and words[i - 1] == "]":
            return "init", ""  # a lambda in a variable's initializer
        return "function", function_name(s)
    return "init", ""


def measure(rel, text):
    """(functions, classes): lists of (rel, line, name, size)."""
    functions, classes = [], []
    stack = [Scope("namespace", "", 0, 0)]
    stmt = []
    paren = 0
    for t, line in tokens(text):
        top = stack[-1]
        inside_function = any(s.kind in ("function", "block") for s in stack) and \
            top.kind != "class"
        if t == "{":
            kind, name = classify(stmt, inside_function, paren, top.kind == "init")
            if kind == "init" or (kind == "block" and paren > 0 and not inside_function):
                # A brace initializer or a lambda in one: part of the statement around it.
                stack.append(Scope("init", "", line, line))
                stmt.append(("{", line))
                continue
            stmt_line = stmt[0][1] if stmt else line
            # Named within the innermost class around it (its name is qualified already).
            outer = [s.name for s in stack if s.kind == "class"][-1:]
            if kind == "class" or (kind == "function" and "::" not in name):
                name = "::".join(outer + [name])
            stack.append(Scope(kind, name, line, stmt_line))
            stmt = []
            continue
        if t == "}":
            if len(stack) == 1:
                continue  # unbalanced: a macro's doing; ignored
            s = stack.pop()
            if s.kind == "init":
                stmt.append(("}", line))
                continue
            if s.kind == "function":
                functions.append((rel, s.stmt_line, s.name, line - s.stmt_line + 1))
                stmt = []
            elif s.kind == "class":
                classes.append((rel, s.stmt_line, s.name, s.members))
                stmt = [("class", line), ("{body}", line)]
            elif s.kind == "enum":
                stmt = [("enum", line), ("{body}", line)]
            else:
                stmt = []
            continue
        if t == "(":
            paren += 1
        elif t == ")":
            paren = max(0, paren - 1)
        if t == ";" and paren == 0:
            if top.kind == "class":
                top.members += data_members(stmt)
            stmt = []
            continue
        if top.kind == "class" and t == ":" and stmt and \
                stmt[-1][0] in ("public", "private", "protected") and len(stmt) == 1:
            stmt = []
            continue
        stmt.append((t, line))
    return functions, classes


def sources(root):
    for d in DIRS:
        top = os.path.join(root, d)
        for dirpath, dirs, names in os.walk(top):
            dirs[:] = sorted(x for x in dirs
                             if not os.path.exists(os.path.join(dirpath, x, "meson-private")))
            for n in sorted(names):
                if SOURCE.search(n):
                    path = os.path.join(dirpath, n)
                    yield os.path.relpath(path, root), path


def main(argv):
    args = argv[1:]
    allow, report = set(), 0
    root = None
    while args:
        a = args.pop(0)
        if a == "--allow" and args:
            allow.add(args.pop(0))
        elif a == "--report" and args:
            report = int(args.pop(0))
        elif root is None and not a.startswith("--"):
            root = a
        else:
            print(__doc__.strip().splitlines()[-6], file=sys.stderr)
            return 2
    if root is None:
        print("usage: code_size.py SOURCE_ROOT [--allow FILE:NAME ...] [--report N]",
              file=sys.stderr)
        return 2
    functions, classes = [], []
    read = 0
    for rel, path in sources(root):
        with open(path, encoding="utf-8", errors="replace") as f:
            fs, cs = measure(rel, f.read())
        functions += fs
        classes += cs
        read += 1
    if read == 0:
        print(f"code_size.py: no sources under {root} in {', '.join(DIRS)}")
        return 1
    bad = 0
    allowed_seen = set()
    for items, limit, says in ((functions, MAX_FUNCTION_LINES, "function {} is {} lines"),
                               (classes, MAX_DATA_MEMBERS, "class {} has {} data members")):
        for rel, line, name, size in items:
            if size <= limit:
                continue
            if f"{rel}:{name}" in allow:
                allowed_seen.add(f"{rel}:{name}")
                continue
            print(f"{rel}:{line}: {says.format(name, size)} (at most {limit})")
            bad = 1
    for a in sorted(allow - allowed_seen):
        print(f"{a}: allowed as a known offender, but no longer over the limit (or gone): "
              "take it off the list")
        bad = 1
    if report:
        for d in DIRS:
            fs = sorted((f for f in functions if f[0].startswith(d + "/")), key=lambda f: -f[3])
            cs = sorted((c for c in classes if c[0].startswith(d + "/")), key=lambda c: -c[3])
            print(f"{d}: longest functions:")
            for rel, line, name, size in fs[:report]:
                print(f"  {size:4d} lines  {rel}:{line}: {name}")
            print(f"{d}: largest classes:")
            for rel, line, name, size in cs[:report]:
                print(f"  {size:4d} members  {rel}:{line}: {name}")
    if not bad:
        print(f"code_size: {len(functions)} functions of at most {MAX_FUNCTION_LINES} lines and "
              f"{len(classes)} classes of at most {MAX_DATA_MEMBERS} data members in {read} files")
    return bad


if __name__ == "__main__":
    sys.exit(main(sys.argv))
