"""Data for `dg-lsp eval`'s tests: a source tree to cut cases from, and HumanEval-shaped rows."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from dg_lsp.measure.eval.humaneval import SUITES

ROWS = [
    {"task_id": f"SingleLineInfilling/Toy/{i}/L0", "entry_point": "add",
     "prompt": "def add(a, b):\n", "suffix": "",
     "canonical_solution": "    return a + b\n",
     "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}
    for i in range(5)
]


def write_sources(folder: Path) -> Path:
    lines = [f"def f{i}(x):\n    y = x * {i}\n    return y + {i}\n\n\n" for i in range(12)]
    (folder / "a.py").write_text("".join(lines[:6]))
    (folder / "pkg").mkdir()
    (folder / "pkg" / "b.py").write_text("".join(lines[6:]))
    (folder / "notes.txt").write_text("not a source file\n" * 50)
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "c.py").write_text("secret = 1\n" * 50)
    return folder


def write_rows(folder: Path) -> Path:
    """`folder`, made, with ROWS as every suite's file."""
    folder.mkdir()
    for filename, _kind in SUITES.values():
        with gzip.open(folder / filename, "wt", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in ROWS)
    return folder
