"""What the checks' self-tests share: a copy of a few real files in a temporary tree, made
afresh before each planted fault, and a run of the check on it."""
import os
import shutil
import subprocess
import sys


class CopiedTree:
    def __init__(self, root, tmp, files):
        self.root, self.files = root, files
        self.path = os.path.join(tmp, "src")

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
