"""Modules and functions small enough to read in one sitting: no module over 600 lines, no
function over 100 (docs/architecture.md). A module that grows past it is split by job; a
function, into the steps its comments already name."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 100


def oversized(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        if text.count("\n") > MAX_MODULE_LINES:
            found.append(f"{where}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    found.append(f"{where}:{node.lineno} {node.name}: {lines} lines")
    return found


def test_an_oversized_function_is_found(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "long.py"
    path.write_text(f"def long():\n{body}\n")
    assert oversized([path]) == [f"{path}:1 long: {MAX_FUNCTION_LINES + 1} lines"]


def test_no_module_or_function_is_too_long_to_read_in_one_sitting():
    paths = [p for package in ("dg_lsp", "engine") for p in sorted((ROOT / package).rglob("*.py"))
             if "examples" not in p.parts]
    assert oversized(paths) == []
