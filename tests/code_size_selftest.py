#!/usr/bin/env python3
"""code_size.py must be able to fail: on a copy of a few real files it passes as they are, then
fails on a function planted one line over the limit and on a class planted one data member
over it, naming the file, the line and the name; a function or class exactly at the limit, or a
long one only in a comment or a string, passes; an allowed offender passes, and an allowed one
that is gone fails (the list only shrinks).
Usage: code_size_selftest.py SOURCE_ROOT CODE_SIZE_PY
"""
import os
import sys

from selftest_tree import CopiedTree, root_and_check

# Real files, one a directory the check reads.
COPIED = ["daemon/core/planner.cpp", "plugin-common/model.hpp", "device-plugin/allocation.cpp",
          "dra-plugin/prepare.cpp"]
LIMIT_LINES = 60
LIMIT_MEMBERS = 10

def function(name, lines):
    """A function of exactly `lines` lines, a lambda and a local block inside."""
    body = [f"int {name}(int x) {{", "    auto f = [&](int y) {", "        return y + 1;",
            "    };", "    if (x) {", "        x = f(x);", "    }"]
    while len(body) < lines - 2:
        body.append("    x += 1;")
    return "\n".join(body + ["    return x;", "}"]) + "\n"


def klass(name, members):
    """A class with `members` data members, besides functions, types and statics."""
    out = [f"class {name} {{", "public:", "    int get() const { return a0_; }",
           "    struct Inner { int p, q, r; };", "    static int counted_not;",
           "    using Alias = int;", "private:"]
    out += [f"    int a{i}_ = 0;" for i in range(members)]
    return "\n".join(out + ["};"]) + "\n"


def main():
    root, check = root_and_check("code_size_selftest.py")
    with CopiedTree(root, COPIED) as copied:
        tree, copy, fail = copied.path, copied.copy, copied.fail

        def plant(rel, text):
            """Appends `text` to `rel`; returns the line it starts on."""
            path = os.path.join(tree, rel)
            with open(path) as f:
                start = f.read().count("\n") + 1
            with open(path, "a") as f:
                f.write(text)
            return start

        def run(*extra):
            return copied.run(check, *extra)

        def expect_pass(what, *extra):
            copied.expect_pass(check, what, *extra)

        def expect_fail(what, needle, *extra):
            copied.expect_fail(check, what, needle, *extra)

        copy()
        expect_pass("the real files")

        line = plant("dra-plugin/prepare.cpp", function("planted_long", LIMIT_LINES + 1))
        expect_fail("a function one line over the limit",
                    f"dra-plugin/prepare.cpp:{line}: function planted_long is "
                    f"{LIMIT_LINES + 1} lines")
        expect_pass("that function allowed", "--allow", "dra-plugin/prepare.cpp:planted_long")

        copy()
        plant("daemon/core/planner.cpp", function("at_the_limit", LIMIT_LINES))
        plant("daemon/core/planner.cpp", "// " + function("in_a_comment", 80).replace(
            "\n", "\n// ") + "\n")
        plant("daemon/core/planner.cpp", 'const char* s = R"(\n' +
              function("in_a_string", 80) + ')";\n')
        expect_pass("a function at the limit, and long ones in a comment and a string")

        copy()
        line = plant("plugin-common/model.hpp", klass("Planted", LIMIT_MEMBERS + 1))
        expect_fail("a class one data member over the limit",
                    f"plugin-common/model.hpp:{line}: class Planted has {LIMIT_MEMBERS + 1} "
                    "data members")
        copy()
        plant("plugin-common/model.hpp", klass("AtLimit", LIMIT_MEMBERS))
        expect_pass("a class at the limit (functions, types and statics not counted)")

        copy()
        expect_fail("an allowed offender that is not over the limit",
                    "device-plugin/allocation.cpp:Chooser: allowed as a known offender, but no "
                    "longer over the limit", "--allow", "device-plugin/allocation.cpp:Chooser")
    if copied.failures:
        print(f"{copied.failures} failure(s)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
