"""Batch mode's whole runs over a fixture repository with the bundled model: the patch applies
with `git apply`, equals the edits computed one by one, changes only what it should;
`--check` gates; a resident engine and a local Ray cluster give the same patch.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from dg_lsp.actions.rewrite import compute_edit
from dg_lsp.actions.targets import DOCSTRING, all_targets
from dg_lsp.batch.job import ACTION_NAMES, apply_edits
from dg_lsp.cli import main
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.errors import count_errors
from dg_lsp.syntax.languages import language_for
from tests.support.batch_repo import REPO, SHAPES, make_repo, snapshot
from tests.support.paths import BUNDLED


def batch(*args: str) -> int:
    return main(["batch", *args])


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
            assert count_errors(ParsedText(new, language).tree) <= count_errors(
                ParsedText(old.decode(), language).tree)
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
    from engine.serve.socket.client import EngineClient, EngineUnavailable

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
