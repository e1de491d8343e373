"""Golden outputs: seeded completions, rewrites and batch patches stay identical, token for token.

What users get from the bundled model through the command line (`dg-lsp complete`, `rewrite`,
`batch --engine inproc`) and the Python API (`Engine.infill`) on the files in
tests/support/golden/src,
compared with tests/support/golden/expected.json. Its purpose is to hold refactors to "behaviour is
unchanged": a change that means to alter outputs (a new default, a retrained model) records
them again and says why in its commit:

    python -m tests.unit.test_golden          # rewrites tests/support/golden/expected.json

The expectations are exact because both sides are the same computation (the same model, code
path and settings). They were recorded with the CPU's AVX-512 kernels and hold unchanged with
the kernels held to AVX2 (CI runs this file both ways); a CPU whose float32 sums round
differently could flip a near-tied token, which is why this is the only file that compares
sampled text across machines.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "support" / "golden"
SOURCES = GOLDEN / "src"
EXPECTED = GOLDEN / "expected.json"

# float64: the same outputs on every x86-64 CPU, whatever kernels it has (in float32 or int8 a
# CPU without AVX-512 sums in another order and flips near-tied tokens: seen here on 5 of 12
# rewrites). What a refactor must keep (canvas, context windows, samplers, stops,
# post-processing, edits) is the same code in every dtype.
EXACT = ["--dtype", "float64"]
# name -> `dg-lsp` arguments (paths relative to tests/support/golden/src).
COMMANDS: dict[str, list[str]] = {
    "complete call arguments": ["complete", "holes.py:8:26", "--json", *EXACT],
    "complete return": ["complete", "holes.py:14:16", "--json", *EXACT],
    "complete after operator": ["complete", "holes.py:20:26", "--json", *EXACT],
    "complete mid-line": ["complete", "geometry.py:11:15", "--json", *EXACT],
    "complete javascript": ["complete", "stack.js:11:11", "--json", *EXACT],
    # what the gate hides is still computed the same way
    "complete call arguments, gate off": ["complete", "holes.py:8:26", "--json",
                                          "--min-confidence", "0", *EXACT],
    "complete return, gate off": ["complete", "holes.py:14:16", "--json",
                                  "--min-confidence", "0", *EXACT],
    "complete mid-line, gate off": ["complete", "geometry.py:11:15", "--json",
                                    "--min-confidence", "0", *EXACT],
    "rewrite selection": ["rewrite", "geometry.py", "--range", "29:5-30:30", "--json", *EXACT],
    "rewrite with instruction": ["rewrite", "inventory.py", "--range", "27:5-31:16", "--json",
                                 "--instruction", "use next()", "--strength", "1.0", *EXACT],
    "complete body": ["rewrite", "geometry.py", "--range", "13:5-13:5",
                      "--action", "complete-body", "--json", *EXACT],
    "add docstring": ["rewrite", "inventory.py", "--range", "18:1-18:1",
                      "--action", "docstring", "--json", *EXACT],
    "fix syntax": ["rewrite", "geometry.py", "--range", "36:5-36:5",
                   "--action", "fix-syntax", "--json", *EXACT],
    "batch docstrings": ["batch", ".", "--action", "docstrings", "--engine", "inproc", *EXACT],
    "batch complete-bodies": ["batch", ".", "--action", "complete-bodies", "--engine", "inproc",
                              *EXACT],
}
# name -> Engine.infill(prefix, suffix, max_tokens), the library's defaults otherwise.
INFILLS: dict[str, tuple[str, str, int]] = {
    "infill add": ("def add(a, b):\n    return ", "\n", 16),
    "infill loop": ("for i in range(10):\n    ", "\nprint('done')\n", 24),
    "infill import": ("import ", "\n\nprint(os.getcwd())\n", 8),
}


def run_command(argv: list[str]) -> dict[str, Any]:
    """Exit status and output of `dg-lsp ARGV` run in this process, from
    tests/support/golden/src."""
    from dg_lsp.cli import main

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(SOURCES)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    finally:
        os.chdir(cwd)
    return {"status": status, "stdout": out.getvalue()}


def run_infill(engine: Any, prefix: str, suffix: str, max_tokens: int) -> dict[str, Any]:
    result = engine.infill(prefix, suffix, max_tokens=max_tokens, seed=0)
    return {"text": result.text, "token_ids": result.token_ids, "steps": result.steps}


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    return json.loads(EXPECTED.read_text())


@pytest.mark.parametrize("name", COMMANDS)
def test_command_output_is_unchanged(name: str, expected: dict[str, Any]) -> None:
    assert run_command(COMMANDS[name]) == expected[name]


def test_library_infill_is_unchanged(expected: dict[str, Any]) -> None:
    from engine import Engine

    engine = Engine.load(dtype="float64")
    got = {name: run_infill(engine, *case) for name, case in INFILLS.items()}
    assert got == {name: expected[name] for name in INFILLS}


def test_the_cases_are_not_trivial(expected: dict[str, Any]) -> None:
    # A golden test of empty outputs would hold any refactor to nothing.
    completions = [json.loads(expected[n]["stdout"])["text"] for n in COMMANDS
                   if COMMANDS[n][0] == "complete"]
    # (3 of the 8: the confidence gate hides "call arguments", "return", "after operator"
    # and "mid-line", the small model writes no JavaScript line; the three with the gate off
    # show what it hides. A refactor that empties one more fails here.)
    assert sum(bool(text and text.strip()) for text in completions) >= 3
    assert expected["batch docstrings"]["stdout"].count('"""') >= 4
    assert sum(bool(expected[name]["text"].strip()) for name in INFILLS) >= 2


def record() -> None:
    from engine import Engine

    results: dict[str, Any] = {name: run_command(argv) for name, argv in COMMANDS.items()}
    engine = Engine.load(dtype="float64")
    results |= {name: run_infill(engine, *case) for name, case in INFILLS.items()}
    EXPECTED.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {EXPECTED}", file=sys.stderr)


if __name__ == "__main__":
    record()
