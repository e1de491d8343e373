"""`dg-lsp eval --suite multi-hole`: the cases it cuts, and what each way of filling them asks
the engine and scores, with a fake engine that knows the answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from dg_lsp.cli import main
from dg_lsp.measure.eval import cli as eval_cli
from dg_lsp.measure.eval import multi_hole
from engine.types import Draft, HolesRequest, InfillRequest

SOURCE = '''import os


def join_all(parts, sep):
    """Join the parts."""
    cleaned = [p.strip() for p in parts]
    total = len(cleaned)
    os.environ.setdefault("SEP", sep)
    if not total:
        return ""
    result = sep.join(cleaned)
    assert result is not None
    return result
'''


def write_source(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "joiner.py").write_text(SOURCE)
    (folder / "notes.txt").write_text("not python\n")
    return folder


ONE_LINERS = ("cleaned = [p.strip() for p in parts]", "total = len(cleaned)",
              'os.environ.setdefault("SEP", sep)', "result = sep.join(cleaned)",
              "assert result is not None", "return result", '"""Join the parts."""')


@pytest.mark.parametrize("cut", multi_hole.CUTS)
def test_cases_are_one_line_statements_apart_that_put_back_give_the_file(
        tmp_path: Path, cut: str) -> None:
    cases = multi_hole.cut_holes_cases(write_source(tmp_path / "src"), 5, seed=1, cut=cut)
    assert cases == multi_hole.cut_holes_cases(tmp_path / "src", 5, seed=1, cut=cut)
    assert len(cases) == 1  # one function
    (case,) = cases
    assert 2 <= len(case.middles) <= 3 and len(case.texts) == len(case.middles) + 1
    rebuilt = case.texts[0] + "".join(m + t for m, t in zip(case.middles, case.texts[1:],
                                                            strict=True))
    assert rebuilt == SOURCE
    lines = SOURCE.splitlines(keepends=True)
    if cut == multi_hole.STATEMENT:
        # What an editor sends: the indentation before the hole, the newline after it.
        assert set(case.middles) <= set(ONE_LINERS)
        assert all(t.endswith("\n    ") for t in case.texts[:-1])
        assert all(t.startswith("\n") for t in case.texts[1:])
        rows = [lines.index(f"    {m}\n") for m in case.middles]
    else:
        assert set(case.middles) <= {f"    {line}\n" for line in ONE_LINERS}
        assert all(t.endswith("\n") for t in case.texts[:-1])
        rows = [lines.index(m) for m in case.middles]
    assert all(b - a > 1 for a, b in zip(rows, rows[1:], strict=False))


def test_a_fill_is_scored_up_to_its_first_newline_kept_where_the_hole_is_a_line() -> None:
    fill = "return total\n    return other"
    statement = multi_hole.HolesCase("f.py:1", ("a", "b"), ("return total",))
    line = multi_hole.HolesCase("f.py:1", ("a", "b"), ("    return total\n",),
                                multi_hole.WHOLE_LINE)
    assert statement.written(fill) == "return total"
    assert line.written(fill) == "return total\n"


def test_an_unknown_cut_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown cut 'word'"):
        multi_hole.cut_holes_cases(write_source(tmp_path / "src"), 1, cut="word")


WRONG = "pass\n"


class Knows:
    """A Backend that fills a hole with its true line where the request shows every line
    before it as the file has it (the holes before it filled right), else with "pass"; every
    request takes `passes` passes."""

    def __init__(self, case: multi_hole.HolesCase, passes: int) -> None:
        self.case, self.passes = case, passes
        self.asked: list[str] = []

    def _line(self, prefix: str) -> str:
        texts, middles = self.case.texts, self.case.middles
        for k, middle in enumerate(middles):
            if prefix == "".join(t + m for t, m in zip(texts[:k], middles, strict=False)) \
                    + texts[k]:
                return middle
        return WRONG

    def infill_stream(self, request: InfillRequest, cancel=None, *, document=None
                      ) -> Iterator[Draft]:
        self.asked.append("infill")
        text = self._line(request.prefix)
        yield Draft(step=self.passes, token_ids=[], committed=0, text=text, done=True,
                    finish_reason="unit")

    def holes_stream(self, request: HolesRequest, cancel=None, *, document=None
                     ) -> Iterator[Draft]:
        self.asked.append("holes")
        assert request.texts == self.case.texts
        assert request.until == (multi_hole.LINE,) * len(self.case.middles)
        yield Draft(step=self.passes, token_ids=[], committed=0, text="", done=True,
                    finish_reason="stop", holes=self.case.middles)


@pytest.mark.parametrize("cut", multi_hole.CUTS)
def test_each_way_asks_as_it_should_and_is_scored_hole_by_hole(tmp_path: Path,
                                                               cut: str) -> None:
    (case,) = multi_hole.cut_holes_cases(write_source(tmp_path / "src"), 1, seed=1, cut=cut)
    backend = Knows(case, passes=5)
    filler = multi_hole.Filler(backend, multi_hole.SamplerSettings(), 16, 256)
    tallies = multi_hole.evaluate(filler, [case])
    k = len(case.middles)
    assert backend.asked == ["holes"] + ["infill"] * (2 * k)
    joint, sequential, independent = (tallies[m].to_dict() for m in multi_hole.MODES)
    assert (joint["holes"], joint["holes_exact"], joint["all_right"], joint["passes"],
            joint["edit_similarity"]) == (k, k, 1, 5, 1.0)
    assert (sequential["holes_exact"], sequential["passes"]) == (k, 5 * k)
    # Independently every hole but the first is asked with an earlier hole's line missing.
    assert (independent["holes_exact"], independent["all_right"]) == (1, 0)
    # ... and gets "pass" there: the mean of 1.0 and each other hole's similarity to "pass".
    others = [multi_hole.edit_similarity(case.written(WRONG), m) for m in case.middles[1:]]
    assert independent["edit_similarity"] == round((1.0 + sum(others)) / k, 3) < 1.0


@pytest.mark.parametrize("cut", multi_hole.CUTS)
def test_the_command_prints_one_object_per_way(tmp_path: Path, capsys: pytest.CaptureFixture,
                                               monkeypatch: pytest.MonkeyPatch,
                                               cut: str) -> None:
    folder = write_source(tmp_path / "src")
    (case,) = multi_hole.cut_holes_cases(folder, 1, seed=0, cut=cut)
    # Knows asserts that the joint request carries this case's texts: the ones `cut` makes.
    monkeypatch.setattr(eval_cli, "open_for_command", lambda settings: Knows(case, 3))
    flags = [] if cut == multi_hole.STATEMENT else ["--cut", cut]
    assert main(["eval", "--suite", "multi-hole", "--cases-from", str(folder), "--json",
                 *flags]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["cases"], report["cut"]) == (1, cut)
    for mode in ("joint", "sequential", "independent"):
        assert set(report[mode]) == {"holes", "holes_exact", "all_right", "edit_similarity",
                                "passes", "ms_p50"}
    assert report["joint"]["passes"] == 3
    assert report["joint"]["holes_exact"] == report["joint"]["holes"]


def test_the_command_wants_a_folder(capsys: pytest.CaptureFixture) -> None:
    assert main(["eval", "--suite", "multi-hole"]) == 2
    assert "--cases-from DIR" in capsys.readouterr().err
