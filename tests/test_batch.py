"""Batch mode: which files it reads, how one file's edits are merged, what it does with bad
input (no model), and whole runs over a fixture repository with the bundled model: the patch
applies with `git apply`, equals the edits computed one by one, changes only what it should;
`--check` gates; a local Ray cluster gives the same patch.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from dg_lsp.actions import DOCSTRING, Document, all_targets, error_count
from dg_lsp.batch import Job, Record, apply_edits, compile_query, file_targets, merge, process_file
from dg_lsp.cli import main
from dg_lsp.discover import discover, gitignore_regex
from dg_lsp.languages import language_for
from dg_lsp.rewrite import Edit, RewriteError, compute_edit, model_input
from dg_lsp.settings import Settings
from tests.test_actions import BUNDLED, Scripted

SHAPES = '''import math


def area(radius):
    return math.pi * radius ** 2


def perimeter(radius):
    pass


class Circle:
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
UTIL_JS = '''function add(a, b) {
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


def py(text: str) -> Document:
    return Document(text, language_for("python"))


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
    assert names == ["area", "perimeter", "Circle", "__init__", "diameter"]
    backend = Scripted("Area.", "Perimeter.", "A circle.", "Make one.", "Twice the radius.")
    result = process_file(backend, "src/shapes.py", SHAPES, Job(DOCSTRING))
    assert [r.result for r in result.records] == ["edited"] * 5
    assert [r.name for r in result.records] == names
    assert [r.start for r in result.records] == [(4, 18), (8, 23), (12, 14), (13, 32),
                                                 (16, 24)]  # just after each colon
    # the model read each target in the original text: no earlier edit in its context
    assert backend.calls == [model_input(d, t, Settings(), None)
                             for t in all_targets(d, DOCSTRING)]
    assert result.new == SHAPES.replace(
        "def area(radius):", 'def area(radius):\n    """Area."""').replace(
        "def perimeter(radius):", 'def perimeter(radius):\n    """Perimeter."""').replace(
        "class Circle:", 'class Circle:\n    """A circle."""').replace(
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
        def infill_stream(self, prefix, suffix, max_tokens=32, **kwargs):
            if len(self.calls) == 1:
                self.calls.append((prefix, suffix))
                raise ConnectionError("the engine went away")
            return super().infill_stream(prefix, suffix, max_tokens, **kwargs)

    result = process_file(Failing("Area.", "A circle.", "", "Twice."), "s.py", SHAPES,
                          Job(DOCSTRING))
    assert [r.result for r in result.records] == [
        "edited", "error: ConnectionError: the engine went away", "edited",
        "refused: the model wrote nothing usable for 'Add docstring of __init__'", "edited"]
    assert result.new.count('"""') == 6


# -- bad input (no model) ---------------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (["src", "nope", "--action", "docstrings"], "nope: no such file or directory"),
    (["src", "--action", "rewrite", "--query", "q.scm"], "malformed query: python: Invalid"),
    (["src", "--action", "rewrite", "--query", "nocapture.scm"],
     "the query captures no @target"),
    (["src", "--action", "rewrite", "--query", "missing.scm"], "cannot read the query"),
    (["src", "--action", "rewrite"], "--action rewrite needs --query"),
    (["src", "--action", "docstrings", "--strength", "2"], "--strength must be between"),
    (["src", "--action", "rename-everything"], "invalid choice: 'rename-everything'"),
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


# -- whole runs with the bundled model --------------------------------------------------------


@pytest.fixture(scope="module")
def engine():
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    from engine import Engine

    return Engine.load(str(BUNDLED), device="cpu")


MODEL = ["--engine", "inproc", "--device", "cpu", "--model", str(BUNDLED)]


def expected_text(engine, label: str, text: str) -> str:
    """The file with each docstring the model writes, computed one target at a time."""
    d = Document(text, language_for(None, label))
    edits = []
    for target in all_targets(d, DOCSTRING):
        try:
            edits.append(compute_edit(engine, d, target, Settings()))
        except RewriteError:
            pass
    return apply_edits(text, edits)


def test_docstrings_patch_applies_with_git_and_changes_only_what_it_should(
        tmp_path, monkeypatch, capsys, engine):
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    before = snapshot(repo)
    assert batch("src", "--action", "docstrings", *MODEL, "--output", "../out.patch",
                 "--json", "../report.json") == 0
    patch = (tmp_path / "out.patch").read_text()
    assert snapshot(repo) == before  # a patch run writes no source file

    expected = {label: expected_text(engine, label, REPO[label]) for label in
                ("src/shapes.py", "src/util.js")}
    assert expected["src/shapes.py"] != SHAPES  # the model does write Python docstrings
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"]["error"] == 0
    assert [(t["file"], t["name"]) for t in report["targets"]] == [
        ("src/shapes.py", n) for n in ("area", "perimeter", "Circle", "__init__", "diameter")
    ] + [("src/util.js", "add"), ("src/util.js", "later")]
    assert all(t["steps"] > 0 and t["tokens_per_step"] is not None for t in report["targets"])

    applied = subprocess.run(["git", "apply", str(tmp_path / "out.patch")], cwd=repo,
                             capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    after = snapshot(repo)
    for label, text in before.items():
        new = expected.get(label, text.decode())
        assert after[label].decode() == new, label  # untouched files are byte-identical
        if new != text.decode():
            d_old = Document(text.decode(), language_for(None, label))
            assert error_count(Document(new, d_old.language)) <= error_count(d_old)
            assert f"+++ b/{label}\n" in patch

    # --check: 1 while changes are pending, 0 once they are applied with --apply
    shutil.rmtree(repo)
    repo = make_repo(tmp_path / "repo")
    capsys.readouterr()
    assert batch("src", "--action", "docstrings", *MODEL, "--check") == 1
    assert capsys.readouterr().out == patch
    assert snapshot(repo) == before
    assert batch("src", "--action", "docstrings", *MODEL, "--apply") == 0
    assert snapshot(repo) == after
    assert batch("src", "--action", "docstrings", *MODEL, "--check") == 0


def test_a_ray_cluster_of_two_workers_gives_the_local_patch(tmp_path, monkeypatch, engine):
    ray = pytest.importorskip("ray", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
    repo = make_repo(tmp_path / "repo")
    monkeypatch.chdir(repo)
    assert batch(".", "--action", "docstrings", *MODEL, "--output", "../local.patch") == 0
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        assert batch(".", "--action", "docstrings", *MODEL, "--ray", "--workers", "2",
                     "--output", "../ray.patch", "--json", "../ray.json") == 0
    finally:
        ray.shutdown()
    print(f"ray run: {time.perf_counter() - started:.1f} s")
    local = (tmp_path / "local.patch").read_bytes()
    assert local and (tmp_path / "ray.patch").read_bytes() == local
    assert len(json.loads((tmp_path / "ray.json").read_text())["workers"]) == 2
