"""Several holes at once with the bundled model: "Fill every hole in this function" over LSP
gives the edit the same code computes in this process (or the same refusal), the edit parses
and leaves no stub where a hole was; a completion at every cursor over LSP is the one computed
here; `dg-lsp fill` on the command line writes what its patch says.

Skipped while the engine cannot fill several holes at once (`Engine.holes_stream`)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dg_lsp.actions.holes import fill_edit, hole_targets
from dg_lsp.actions.stubs import find_stubs
from dg_lsp.completion.cursors import complete_at_cursors
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.errors import count_errors
from dg_lsp.syntax.languages import language_for
from engine import Engine
from tests.support.lsp_wire import WireServer, apply_text_edits
from tests.support.paths import BUNDLED, ROOT

pytestmark = pytest.mark.skipif(not hasattr(Engine, "holes_stream"),
                                reason="the engine cannot fill several holes at once yet")

URI = "file:///tmp/stats.py"
SOURCE = ("def mean(xs):\n"
          "    total = 0\n"
          "    ...\n"
          "    return total / len(xs)\n"
          "\n"
          "\n"
          "def pair(x, y):\n"
          "    a = \n"
          "    b = \n"
          "    return a, b\n")
LAZY = {"textDocument": {"codeAction": {"resolveSupport": {"properties": ["edit"]}}}}


@pytest.fixture(scope="module")
def wire():
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    server = WireServer(BUNDLED, capabilities=LAZY)
    server.open(URI, SOURCE)
    yield server
    server.close()


def test_the_fill_action_over_lsp_is_the_one_computed_here(wire, bundled_engine):
    actions = wire.call("textDocument/codeAction", {
        "textDocument": {"uri": URI},
        "range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 4}},
        "context": {"diagnostics": []}})["result"]
    (action,) = [a for a in actions if a["title"] == "Fill every hole in this function"]
    answer = wire.call("codeAction/resolve", action, timeout=300)

    doc = ParsedText(SOURCE, language_for("python"), uri=URI)
    (target,) = hole_targets(doc, 20, 20)
    try:
        expected = fill_edit(bundled_engine, doc, target, Settings())
    except RewriteError as exc:
        assert answer["error"]["message"] == f"dg-lsp: {exc}"
        return
    (change,) = answer["result"]["edit"]["documentChanges"]
    filled = apply_text_edits(SOURCE, change["edits"])
    assert filled == SOURCE[:expected.start] + expected.text + SOURCE[expected.end:]
    parsed = ParsedText(filled, language_for("python"))
    assert count_errors(parsed.tree) <= count_errors(doc.tree)  # `a = ` is broken already
    assert [s.function for s in find_stubs(parsed)] == []


def test_every_cursor_over_lsp_gets_the_text_computed_here(wire, bundled_engine):
    positions = [{"line": 7, "character": 8}, {"line": 8, "character": 8}]
    answer = wire.call("dg-lsp/fillHoles", {"textDocument": {"uri": URI, "version": 1},
                                            "positions": positions}, timeout=300)
    doc = ParsedText(SOURCE, language_for("python"), uri=URI)
    offsets = [SOURCE.index("a = ") + 4, SOURCE.index("b = ") + 4]
    expected = complete_at_cursors(bundled_engine, doc, offsets, Settings())
    assert [item["text"] for item in answer["result"]["items"]] == [
        s.text if s is not None else "" for s in expected.suggestions]


def test_fill_on_the_command_line_writes_what_its_patch_says(tmp_path):
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    source = tmp_path / "stats.py"
    source.write_text(SOURCE)
    command = [sys.executable, "-m", "dg_lsp.cli", "fill", "stats.py", "--engine", "inproc",
               "--model", str(BUNDLED), "--device", "cpu"]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    patch = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                           env=env)
    assert patch.returncode in (0, 1), patch.stderr
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "stats.py").write_text(SOURCE)
    subprocess.run(["git", "apply", "-"], input=patch.stdout, text=True, cwd=copy, check=True)
    applied = subprocess.run([*command, "--apply"], capture_output=True, text=True, timeout=600,
                             cwd=tmp_path, env=env)
    assert (applied.returncode, applied.stderr) == (patch.returncode, patch.stderr)
    assert source.read_text() == (copy / "stats.py").read_text()
