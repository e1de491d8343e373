"""Batch mode: which files it reads, how one file's edits are merged, what it does with bad
input (no model). Whole runs over a fixture repository with the bundled model:
tests/integration/test_batch.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dg_lsp.actions.rewrite import model_input
from dg_lsp.actions.targets import DOCSTRING, all_targets
from dg_lsp.batch.discover import discover
from dg_lsp.batch.job import (
    BatchJob,
    Record,
    apply_edits,
    compile_query,
    file_targets,
    merge,
    process_file,
)
from dg_lsp.batch.plan import prepare
from dg_lsp.cli import build_parser, main
from dg_lsp.document.edit import Edit
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from tests.support.batch_repo import SEEN, SHAPES, make_repo, snapshot
from tests.support.scripted import Scripted


def batch(*args: str) -> int:
    return main(["batch", *args])


def py(text: str) -> ParsedText:
    return ParsedText(text, language_for("python"))


# -- which files (no model) -------------------------------------------------------------------


@pytest.mark.parametrize("git", [True, False])
def test_discovery_respects_gitignore_and_skips_vendored_code(tmp_path, monkeypatch, git):
    make_repo(tmp_path, git)
    monkeypatch.chdir(tmp_path)
    assert [f.label for f in discover([Path(".")])] == SEEN
    assert [f.label for f in discover([Path("src")], include=["*.py"],
                                      exclude=["src/done*"])] == ["src/broken.py",
                                                                  "src/shapes.py"]
    # a file named on the command line is taken even where a folder walk would skip it
    assert [f.label for f in discover([Path("build/generated.py"), Path("src/util.js")])] == [
        "build/generated.py", "src/util.js"]
    with pytest.raises(FileNotFoundError, match="nope: no such file or directory"):
        discover([Path("src"), Path("nope")])


def test_the_walk_outside_git_lists_what_git_lists(tmp_path):
    """The same .gitignore files, read by the walk and by git: the same files, links and
    nested negations included."""
    from dg_lsp.repository.walk import listed_files

    files = {".gitignore": "*.log\n/build\ndoc/*.md\n**/gen\na/**/b\nfile?.[!ch]\n",
             "a/b/debug.log": "", "debug.log.txt": "", "build/x.py": "", "src/build/y.py": "",
             "doc/a.md": "", "doc/x/a.md": "", "x/y/gen/z.py": "", "a/b/c.py": "",
             "a/x/y/b/d.py": "", "x/file1.c": "", "x/file1.d": "",
             "keep/.gitignore": "!*.log\n", "keep/kept.log": ""}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "link.py").symlink_to("src/build/y.py")
    walked = listed_files(tmp_path, frozenset())
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert sorted(walked) == sorted(listed_files(tmp_path, frozenset())) == [
        ".gitignore", "debug.log.txt", "doc/x/a.md", "keep/.gitignore", "keep/kept.log",
        "link.py", "src/build/y.py", "x/file1.c"]


# -- one file's edits (scripted model text, no model) -----------------------------------------


def test_user_query_targets_are_the_outermost_captures_in_document_order():
    text = "def f(a):\n    return g(a)\n\n\ndef h():\n    return 1\n"
    d = py(text)
    query = compile_query("(return_statement) @target (call) @target", d.language, "rewrite")
    assert [text[t.start:t.end] for t in file_targets(d, "rewrite", query)] == [
        "return g(a)", "return 1"]


def test_every_edit_is_computed_against_the_original_and_applied_last_to_first():
    d = py(SHAPES)
    names = [t.name for t in all_targets(d, DOCSTRING)]
    assert names == ["area", "circumference", "__init__", "diameter"]
    backend = Scripted("Area.", "Perimeter.", "Make one.", "Twice the radius.")
    result = process_file(backend, "src/shapes.py", SHAPES, BatchJob(DOCSTRING))
    assert [r.result for r in result.records] == ["edited"] * 4
    assert [r.name for r in result.records] == names
    assert [r.start for r in result.records] == [(4, 18), (8, 27), (15, 32),
                                                 (18, 24)]  # just after each colon
    # the model read each target in the original text: no earlier edit in its context
    assert backend.calls == [model_input(d, t, Settings(), None)
                             for t in all_targets(d, DOCSTRING)]
    assert result.new == SHAPES.replace(
        "def area(radius):", 'def area(radius):\n    """Area."""').replace(
        "def circumference(radius):", 'def circumference(radius):\n    """Perimeter."""').replace(
        "def __init__(self, radius):", 'def __init__(self, radius):\n        """Make one."""'
    ).replace("def diameter(self):", 'def diameter(self):\n        """Twice the radius."""')


def test_overlapping_and_conflicting_edits_are_dropped_and_recorded():
    text = "a = 1\nb = 2\nc = 3\n"
    d = py(text)

    def record() -> Record:
        return Record("x.py", (1, 1), (1, 1), "rewrite", "", "edited")

    edits = [Edit(0, 5, "a = 10", 1),  # fine
             Edit(4, 9, "1\nb = 20", 1),  # overlaps the first
             Edit(6, 11, "b = (2", 1),  # alone it breaks the file
             Edit(12, 17, "c = 30", 1)]  # fine
    outcomes = [(record(), e) for e in edits] + [(record(), None)]
    outcomes[-1][0].result = "refused: nothing usable"
    result = merge("x.py", d, outcomes)
    assert result.new == "a = 10\nb = 2\nc = 30\n"
    assert [r.result for r, _ in outcomes] == [
        "edited", "refused: overlaps an earlier edit in the file",
        "refused: conflicts with the file's other edits", "edited", "refused: nothing usable"]
    assert apply_edits(text, [edits[3], edits[0]]) == result.new


def test_a_failing_target_is_recorded_and_the_others_still_run():
    class Failing(Scripted):
        def infill_stream(self, request, cancel=None, document=None):
            if len(self.calls) == 1:
                self.requests.append(request)
                raise ConnectionError("the engine went away")
            return super().infill_stream(request, cancel)

    result = process_file(Failing("Area.", "", "Twice."), "s.py", SHAPES, BatchJob(DOCSTRING))
    assert [r.result for r in result.records] == [
        "edited", "error: ConnectionError: the engine went away",
        "refused: the model wrote nothing usable for 'Add docstring of __init__'", "edited"]
    assert result.new.count('"""') == 2 + 4


# -- bad input (no model) ---------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["src", "nope", "--action", "docstrings"], "nope: no such file or directory"),
    (["src", "--action", "rewrite", "--query", "q.scm"], "malformed query: python: Invalid"),
    (["src", "--action", "rewrite", "--query", "nocapture.scm"],
     "the query captures no @target"),
    (["src", "--action", "rewrite", "--query", "missing.scm"],
     "cannot read the query: missing.scm: no such file"),
    (["src", "--action", "rewrite", "--query", "fifo.scm"],  # a read would wait for ever
     "cannot read the query: fifo.scm: not a regular file"),
    (["src", "--action", "rewrite"], "--action rewrite needs --query"),
    (["src", "--action", "docstrings", "--strength", "2"],
     "argument --strength: expected a finite number in 0..1, got 2"),
    (["src", "--action", "rename-everything"], "invalid choice: 'rename-everything'"),
    (["src", "--action", "docstrings", "--engine", "inproc", "--model", "./no/such/model"],
     "cannot load the model: ./no/such/model: no such checkpoint folder"),
])
def test_bad_input_exits_2_with_a_clear_message_and_writes_nothing(tmp_path, monkeypatch,
                                                                   capsys, args, message):
    make_repo(tmp_path)
    (tmp_path / "q.scm").write_text("(function_definition @target")
    (tmp_path / "nocapture.scm").write_text("(function_definition) @fn")
    os.mkfifo(tmp_path / "fifo.scm")
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    try:
        status = batch(*args, "--apply", "--output", "out.patch", "--json", "report.json")
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    assert status == 2
    assert message in capsys.readouterr().err
    assert snapshot(tmp_path) == before


def test_a_query_replaces_the_built_in_one_and_files_it_does_not_fit_are_skipped(
        tmp_path, monkeypatch):
    make_repo(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "methods.scm").write_text(
        "(class_definition body: (block (function_definition name: (identifier) @name"
        " body: (block) @body) @function))")
    args = build_parser().parse_args(["batch", "src", "--action", "docstrings",
                                      "--query", "methods.scm"])
    _, plans, skipped, _ = prepare(args)
    assert {label: [t.name for t in plan[2]] for label, plan in plans.items()} == {
        "src/shapes.py": ["__init__", "diameter"]}
    assert [(label, reason.split(":")[0]) for label, reason in skipped] == [
        ("src/util.js", "the query does not fit javascript")]
