"""`dg-lsp eval --suite retrieval`: which cursors each half holds, and what a run reports."""

from __future__ import annotations

from dg_lsp.measure.eval import retrieval
from dg_lsp.measure.eval.retrieval import REPORT, TUNE, Cursor, Result
from tests.support.scripted import Scripted

MAIN = ("def run(name):\n    value = load(name)\n    total = len(name)\n"
        "    value = load(name)\n    return total\n")


def test_every_cursor_is_in_one_half_and_the_halves_are_fixed(tmp_path):
    (tmp_path / "main.py").write_text(MAIN * 3)
    report = retrieval.cursors(tmp_path, 50, 0, REPORT)
    tune = retrieval.cursors(tmp_path, 50, 0, TUNE)
    assert report and tune
    key = lambda c: (c.path, c.offset, c.kind)  # noqa: E731
    assert not {key(c) for c in report} & {key(c) for c in tune}
    assert [key(c) for c in retrieval.cursors(tmp_path, 50, 0, REPORT)] == [
        key(c) for c in report]


def test_a_run_scores_what_is_shown_against_the_rest_of_the_line(tmp_path):
    (tmp_path / "main.py").write_text(MAIN)
    document = MAIN[:MAIN.rindex("load")] + MAIN[MAIN.rindex("load") + len("load(name)"):]
    offset = MAIN.rindex("load")
    cursor = Cursor(tmp_path.name, "main.py", "after =", document, offset, "load(name)")
    # the model's first pass scores nothing (a family that cannot): judged on the evidence
    backend = Scripted("len(name)")
    results = retrieval.run_cursors(tmp_path, [cursor], backend)
    (result,) = results
    assert result.reachable  # the first `value = load(name)` holds it
    assert result.shown in ("load(name)", "len(name)")
    assert result.right == (result.shown == "load(name)")


def test_the_table_counts_each_package_and_class_then_all():
    def result(package: str, kind: str, shown: str | None, truth: str, reachable: bool):
        return Result(Cursor(package, "m.py", kind, "", 0, truth), shown, reachable, 10.0)

    rows = retrieval.table([
        result("a", "after =", "x", "x", True),
        result("a", "after (", "y", "z", True),
        result("a", "new line", None, "w", False),
        result("b", "after =", None, "x", False),
    ])
    by = {(r["package"], r["cursors"]): r for r in rows}
    assert (by[("a", "mid-line")]["count"], by[("a", "mid-line")]["right"]) == (2, 1)
    assert by[("a", "all")]["rightOfShown"] == 0.5 and by[("a", "all")]["shown"] == 0.667
    assert by[("all", "all")]["ceiling"] == 0.5 and by[("all", "all")]["rightOfAll"] == 0.25
    assert by[("all", "new line")]["count"] == 1 and ("all", "after =") not in by
