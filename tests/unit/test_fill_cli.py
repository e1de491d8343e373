"""`dg-lsp fill` and `dg-lsp batch --action fill-holes`: the holes listed with no model
(`--check`), a patch or the file written from given fills (the engine scripted,
tests/support/scripted.py), a refused function left as it was."""

from __future__ import annotations

import pytest

from dg_lsp.actions.targets import FILL_FUNCTION
from dg_lsp.batch.job import BatchJob, process_file
from dg_lsp.cli import main
from tests.support.scripted import Scripted, holes

SOURCE = ("def mean(xs):\n"
          "    total = 0\n"
          "    ...\n"
          "    pass  # TODO: return the mean\n"
          "\n"
          "\n"
          "def twice(x):\n"
          "    y = x\n"
          "    # TODO: double it\n"
          "    return y\n")
FILLED = SOURCE.replace("    ...\n    pass  # TODO: return the mean\n",
                        "    total = sum(xs)\n    return total / len(xs)\n")


@pytest.fixture
def stats(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stats.py").write_text(SOURCE)
    return tmp_path / "stats.py"


def scripted(monkeypatch, *answers) -> Scripted:
    backend = Scripted(*answers)
    monkeypatch.setattr("dg_lsp.cli.fill.open_for_command", lambda settings: backend)
    return backend


def test_check_lists_every_hole_and_fails_while_any_remains(stats, capsys):
    assert main(["fill", "stats.py", "--check"]) == 1
    assert capsys.readouterr().out == ("stats.py:3: hole: ...\n"
                                       "stats.py:4: hole: pass  # TODO: return the mean\n"
                                       "stats.py:9: hole: # TODO: double it\n")
    assert main(["fill", "stats.py", "--check", "--range", "7-9"]) == 1
    assert capsys.readouterr().out == "stats.py:9: hole: # TODO: double it\n"
    stats.write_text(FILLED.replace("    # TODO: double it\n", "    y *= 2\n"))
    assert main(["fill", "stats.py", "--check"]) == 0
    assert capsys.readouterr().out == ""


def test_the_patch_fills_each_function_in_one_request(stats, monkeypatch, capsys):
    backend = scripted(monkeypatch, holes("total = sum(xs)", "return total / len(xs)"),
                       holes("y *= 2"))
    assert main(["fill", "stats.py"]) == 0
    assert capsys.readouterr().out == (
        "--- a/stats.py\n+++ b/stats.py\n@@ -1,10 +1,10 @@\n def mean(xs):\n     total = 0\n"
        "-    ...\n-    pass  # TODO: return the mean\n"
        "+    total = sum(xs)\n+    return total / len(xs)\n \n \n def twice(x):\n"
        "     y = x\n-    # TODO: double it\n+    y *= 2\n     return y\n")
    assert [len(r.max_tokens) for r in backend.requests] == [2, 1]
    assert stats.read_text() == SOURCE


def test_apply_writes_what_was_filled_and_a_refused_function_keeps_its_holes(
        stats, monkeypatch, capsys):
    scripted(monkeypatch, holes("total = sum(xs", "return total"), holes("y *= 2"))
    assert main(["fill", "stats.py", "--apply"]) == 1
    assert stats.read_text() == SOURCE.replace("    # TODO: double it\n", "    y *= 2\n")
    assert capsys.readouterr().err == (
        "dg-lsp fill: stats.py:3: mean: the fill for the hole at line 3 does not parse: "
        "`total = sum(xs`; its holes are left\n")


def test_bad_input_exits_2(stats, capsys):
    assert main(["fill", "stats.py", "--range", "9-3"]) == 2
    assert "--range expects L1-L2" in capsys.readouterr().err
    assert main(["fill", "missing.py", "--check"]) == 2


def test_the_batch_task_fills_each_function_and_its_check_lists_the_holes(stats, capsys):
    backend = Scripted(holes("total = sum(xs)", "return total / len(xs)"),
                       holes("y *= 2"))
    result = process_file(backend, "stats.py", SOURCE, BatchJob(FILL_FUNCTION))
    assert result.new == FILLED.replace("    # TODO: double it\n", "    y *= 2\n")
    assert [(r.name, r.start, r.result) for r in result.records] == [
        ("mean", (3, 5), "edited"), ("twice", (9, 5), "edited")]
    assert main(["batch", "stats.py", "--action", "fill-holes", "--check"]) == 1
    assert capsys.readouterr().out == ("stats.py:3: hole: ...\n"
                                       "stats.py:4: hole: pass  # TODO: return the mean\n"
                                       "stats.py:9: hole: # TODO: double it\n")
