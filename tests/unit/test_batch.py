"""Batch mode: which files it reads, how one file's edits are merged, what it does with bad
input (no model), and whole runs over a fixture repository with the bundled model: the patch
applies with `git apply`, equals the edits computed one by one, changes only what it should;
`--check` gates; a local Ray cluster gives the same patch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from dg_lsp.actions.rewrite import Edit, RewriteError, compute_edit, model_input
from dg_lsp.actions.targets import DOCSTRING, ParsedText, all_targets, error_count
from dg_lsp.batch.discover import discover, gitignore_regex
from dg_lsp.batch.job import (
    ACTION_NAMES,
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
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from tests.support.paths import BUNDLED
from tests.support.scripted import Scripted

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


def test_gitignore_patterns_match_as_git_matches_them():
    def matches(pattern: str, path: str) -> bool:
        anchored = "/" in pattern.rstrip("/")
        return re.fullmatch(gitignore_regex(pattern.lstrip("/"), anchored), path) is not None

    assert matches("*.log", "a/b/debug.log") and not matches("*.log", "debug.log.txt")
    assert matches("/build", "build") and not matches("/build", "src/build")
    assert matches("doc/*.md", "doc/a.md") and not matches("doc/*.md", "doc/x/a.md")
    assert matches("**/gen", "a/b/gen") and matches("**/gen", "gen")
    assert matches("a/**/b", "a/b") and matches("a/**/b", "a/x/y/b")
    assert matches("file?.[ch]", "x/file1.c") and not matches("file?.[!ch]", "file1.c")


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
    (["src", "--action", "rewrite", "--query", "missing.scm"], "cannot read the query"),
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


# -- whole runs with the bundled model --------------------------------------------------------


@pytest.fixture(scope="module")
def engine(bundled_engine):
    return bundled_engine


MODEL = ["--engine", "inproc", "--device", "cpu", "--model", str(BUNDLED)]


def expected_text(engine, label: str, action: str) -> str:
    """The file with every edit the model makes for `action`, each computed on its own."""
    text = REPO[label]
    d = ParsedText(text, language_for(None, label))
    edits = []
    for target in all_targets(d, action):
        try:
            edits.append(compute_edit(engine, d, target, Settings()))
        except RewriteError:
            pass
    return apply_edits(text, edits)


def run_on_fixture(root: Path, action: str, *args: str) -> tuple[int, str, dict]:
    """(exit status, patch, report) of a batch run over a fresh fixture repository's src."""
    repo = make_repo(root / "repo")
    here = Path.cwd()
    os.chdir(repo)
    try:
        status = batch("src", "--action", action, *MODEL, "--output", "../out.patch",
                       "--json", "../report.json", *args)
    finally:
        os.chdir(here)
    return (status, (root / "out.patch").read_text(),
            json.loads((root / "report.json").read_text()))


@pytest.fixture(scope="module")
def docstrings_run(engine, tmp_path_factory):
    """The local run every other docstrings run is compared with: `--check`, so no file is
    written, with the patch and the report."""
    return run_on_fixture(tmp_path_factory.mktemp("local"), "docstrings", "--check")


def git_applied(tmp_path: Path, patch: str) -> dict[str, bytes]:
    """A fresh fixture's files after `git apply` of the patch."""
    repo = make_repo(tmp_path / "applied")
    (tmp_path / "p.patch").write_text(patch)
    applied = subprocess.run(["git", "apply", str(tmp_path / "p.patch")], cwd=repo,
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    return snapshot(repo)


def check_patch(tmp_path: Path, patch: str, expected: dict[str, str]) -> None:
    """Apply the patch with git to a fresh fixture; every file must then be as expected
    (files without an entry byte-identical) and parse with no more errors than before."""
    before = snapshot(make_repo(tmp_path / "original"))
    after = git_applied(tmp_path, patch)
    assert after.keys() == before.keys()
    for label, old in before.items():
        new = expected.get(label, old.decode())
        assert after[label].decode() == new, label
        if new != old.decode():
            language = language_for(None, label)
            assert error_count(ParsedText(new, language)) <= error_count(
                ParsedText(old.decode(), language))
            assert f"--- a/{label}\n+++ b/{label}\n" in patch


def test_docstrings_patch_is_each_targets_edit_and_applies_with_git(tmp_path, engine,
                                                                    docstrings_run):
    status, patch, report = docstrings_run
    assert status == 1  # --check: changes are pending
    expected = {label: expected_text(engine, label, DOCSTRING)
                for label in ("src/shapes.py", "src/util.js")}
    assert expected["src/shapes.py"] != SHAPES  # the model does write Python docstrings
    check_patch(tmp_path, patch, expected)
    assert report["summary"] == {"edited": 5, "refused": 0, "error": 0}
    assert [(t["file"], t["name"], t["start"]) for t in report["targets"]] == [
        ("src/shapes.py", "area", [4, 18]), ("src/shapes.py", "circumference", [8, 27]),
        ("src/shapes.py", "__init__", [15, 32]), ("src/shapes.py", "diameter", [18, 24]),
        ("src/util.js", "later", [6, 1])]
    assert all(t["steps"] > 0 and t["tokens_per_step"] > 0 for t in report["targets"])


def test_check_is_1_before_apply_and_0_after(tmp_path, monkeypatch, capsys, docstrings_run):
    _, patch, _ = docstrings_run
    repo = make_repo(tmp_path)
    monkeypatch.chdir(repo)
    assert batch("src", "--action", "docstrings", *MODEL, "--apply") == 0
    assert capsys.readouterr().out == ""
    assert snapshot(repo) == git_applied(tmp_path / "git", patch)
    assert batch("src", "--action", "docstrings", *MODEL, "--check") == 0
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("action", ["complete-bodies", "fix-syntax"])
def test_bodies_and_syntax_fixes_are_each_targets_edit_and_leave_files_parseable(
        tmp_path, engine, action):
    status, patch, report = run_on_fixture(tmp_path, action)
    assert status == 0
    files = {"complete-bodies": ("src/shapes.py", "src/util.js"),
             "fix-syntax": ("src/broken.py",)}[action]
    expected = {label: expected_text(engine, label, ACTION_NAMES[action]) for label in files}
    check_patch(tmp_path, patch, expected)
    assert [(t["file"], t["name"]) for t in report["targets"]] == {
        "complete-bodies": [("src/shapes.py", "circumference"), ("src/util.js", "later")],
        "fix-syntax": [("src/broken.py", "")]}[action]


@pytest.mark.e2e  # a local Ray cluster
def test_a_ray_cluster_of_two_workers_gives_the_local_patch(tmp_path, docstrings_run):
    ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        status, patch, report = run_on_fixture(tmp_path, "docstrings", "--check", "--ray",
                                               "--workers", "2")
    finally:
        ray.shutdown()
    print(f"ray run: {time.perf_counter() - started:.1f} s")
    assert patch and (status, patch) == docstrings_run[:2]
    assert len(report["workers"]) == 2
    assert [t["result"] for t in report["targets"]] == [
        t["result"] for t in docstrings_run[2]["targets"]]


def test_the_resident_engine_takes_every_target_and_gives_the_local_patch(tmp_path,
                                                                         docstrings_run):
    from engine.serve.client import EngineClient, EngineUnavailable

    def stats() -> dict:
        try:
            return EngineClient.connect_or_start(str(BUNDLED), "cpu", start=False).stats()
        except EngineUnavailable:
            return {"batchedPasses": 0, "completed": 0}

    before = stats()
    status, patch, report = run_on_fixture(tmp_path, "docstrings", "--check",
                                           "--engine", "resident")
    after = stats()
    assert (status, patch) == docstrings_run[:2]
    assert [t["result"] for t in report["targets"]] == ["edited"] * 5
    # The engine's hello names the ids a completion ends before: tokens are counted as here.
    assert [t["tokens_per_step"] for t in report["targets"]] == [
        t["tokens_per_step"] for t in docstrings_run[2]["targets"]]
    assert after["completed"] - before["completed"] >= 5
    # the CPU engine is int8: its canvases run one by one, so each equals the local run
    # (batching is tested with a float32 engine in test_resident)
    assert after["batchedPasses"] == before["batchedPasses"]
