"""The code actions' examples in the docs, run as written with the bundled model: the command
and the output docs/usage.md shows must be what the command prints (greedy decoding at the
default settings: the same computation on every run)."""

from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
# A shown session: "$ dg-lsp rewrite ..." and what it prints, in one fenced block.
EXAMPLES = re.findall(r"```\n\$ (dg-lsp rewrite [^\n]*)\n(.*?)```", USAGE, re.S)


def test_the_docs_show_the_body_example():
    assert [command for command, _ in EXAMPLES] == [
        "dg-lsp rewrite dg_lsp/examples/area.py --range 5:5-5:5 --action complete-body --diff"]


@pytest.mark.parametrize(("command", "shown"), EXAMPLES)
def test_a_documented_action_prints_what_the_docs_show(command: str, shown: str):
    args = shlex.split(command)
    executable = Path(sys.executable).with_name(args[0])
    done = subprocess.run([str(executable), *args[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert (done.returncode, done.stderr, done.stdout) == (0, "", shown)


def test_the_body_action_fills_area_with_code_that_parses():
    source = ROOT / "dg_lsp" / "examples" / "area.py"
    executable = Path(sys.executable).with_name("dg-lsp")
    done = subprocess.run([str(executable), "rewrite", str(source), "--range", "5:5-5:5",
                           "--action", "complete-body", "--json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    edit = json.loads(done.stdout)
    text = source.read_text(encoding="utf-8")
    edited = text[: edit["start"]] + edit["text"] + text[edit["end"]:]
    ast.parse(edited)
    assert edited == "import math\n\n\ndef area(radius):\n    return 0.0\n"
