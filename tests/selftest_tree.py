"""What the checks' self-tests share: a copy of a few real files in a temporary tree, made
afresh before each planted fault, and a run of the check on it."""
import os
import shutil
import subprocess
import sys
import tempfile


def root_and_check(script):
    """SOURCE_ROOT and the check's script from the command line; exits 2 on anything else."""
    if len(sys.argv) != 3:
        print(f"usage: {script} SOURCE_ROOT CHECK_PY", file=sys.stderr)
        sys.exit(2)
    return sys.argv[1], sys.argv[2]


class CopiedTree:
    """A context: the temporary directory goes when it ends."""

    def __init__(self, root, files):
        self.root, self.files = root, files
        self._tmp = tempfile.TemporaryDirectory()
        self.failures = 0
        self.path = os.path.join(self._tmp.name, "src")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._tmp.cleanup()

    def copy(self):
        """The tree again as the real files are, with nothing planted."""
        shutil.rmtree(self.path, ignore_errors=True)
        for rel in self.files:
            os.makedirs(os.path.dirname(os.path.join(self.path, rel)), exist_ok=True)
            shutil.copyfile(os.path.join(self.root, rel), os.path.join(self.path, rel))

    def run(self, check, *args):
        """(exit code, stdout and stderr) of `check` (a script) on the tree."""
        p = subprocess.run([sys.executable, check, self.path, *args], capture_output=True,
                           text=True)
        return p.returncode, p.stdout + p.stderr

    def fail(self, msg):
        self.failures += 1
        print(f"FAIL: {msg}")

    def expect_pass(self, check, what, *args):
        """`check` passes the tree as it is now."""
        code, out = self.run(check, *args)
        if code != 0:
            self.fail(f"{os.path.basename(check)} fails on {what}: {out.strip()}")
        else:
            print(f"ok: {what} passes")

    def expect_fail(self, check, what, needle, *args):
        """`check` fails the tree as it is now, saying `needle`."""
        code, out = self.run(check, *args)
        name = os.path.basename(check)
        if code == 0:
            self.fail(f"{name} passes {what}")
        elif needle not in out:
            self.fail(f"{name} fails on {what} without saying '{needle}': {out.strip()}")
        else:
            print(f"ok: {what} fails: {out.strip().splitlines()[0]}")
