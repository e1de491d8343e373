"""A small repository for batch mode's tests: Python and JavaScript files with targets of each
action, a file with a syntax error, and files batch mode must skip (ignored by .gitignore,
vendored, not code)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SHAPES = '''import math


def area(radius):
    return math.pi * radius ** 2


def circumference(radius):
    pass


class Circle:
    """A circle of a given radius."""

    def __init__(self, radius):
        self.radius = radius

    def diameter(self):
        return 2 * self.radius
'''
DONE = '''def double(x):
    """Twice x."""
    return 2 * x
'''
BROKEN = "values = [1, 2\ntotal = sum(values)\n"
UTIL_JS = '''/** The sum of a and b. */
function add(a, b) {
  return a + b;
}

function later() {
  // TODO
}
'''
REPO = {
    "src/shapes.py": SHAPES,
    "src/done.py": DONE,
    "src/broken.py": BROKEN,
    "src/util.js": UTIL_JS,
    "notes.txt": "def not_code():\n    pass\n",
    ".gitignore": "build/\n*.log\n",
    "build/generated.py": "def generated():\n    pass\n",
    "debug.log": "def f():\n    pass\n",
    "node_modules/pkg/index.js": "function f() {}\n",
    "vendor/lib.py": "def g():\n    pass\n",
}
SEEN = [".gitignore", "notes.txt", "src/broken.py", "src/done.py", "src/shapes.py",
        "src/util.js"]


def make_repo(root: Path, git: bool = True) -> Path:
    for name, text in REPO.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if git:
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}
