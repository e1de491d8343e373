"""`dg-lsp eval`: scoring, case cutting, baselines and HumanEval data (no process). The
execution sandbox and whole runs: tests/integration/test_eval.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from dg_lsp.measure.eval.baselines import predict_copy_prev_line, predict_empty
from dg_lsp.measure.eval.humaneval import load_suite
from dg_lsp.measure.eval.runner import Predictor, evaluate
from dg_lsp.measure.eval.scoring import (
    edit_similarity,
    exact_match,
    levenshtein,
    normalize_whitespace,
    single_line,
)
from engine.data.cases import CURSOR_CLASSES, KINDS, cursor_spans, cut_cases, cut_cursor_cases
from engine.data.stats import percentile
from tests.support.eval_data import ROWS, write_rows, write_sources

# ---------------------------------------------------------------- scoring


def test_levenshtein_hand_computed() -> None:
    assert levenshtein("kitten", "sitting") == 3  # k->s, e->i, +g
    assert levenshtein("flaw", "lawn") == 2  # -f, +n
    assert levenshtein("", "abc") == 3
    assert levenshtein("abc", "") == 3
    assert levenshtein("same", "same") == 0
    assert levenshtein("ab", "ba") == 2  # no transpositions


def test_edit_similarity_hand_computed() -> None:
    assert edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert edit_similarity("flaw", "lawn") == 0.5
    assert edit_similarity("", "") == 1.0
    assert edit_similarity("", "abcd") == 0.0
    assert edit_similarity("abcd", "abcd") == 1.0
    # Raw characters: indentation counts for similarity even though exact match ignores it.
    assert edit_similarity("  x\n", "x\n") == 0.5


def test_exact_match_normalizes_whitespace_only() -> None:
    assert normalize_whitespace("  return  a +\tb\n") == "return a + b"
    assert exact_match("    return a + b\n", "return a + b")
    assert exact_match("x = [1,\n     2]\n", "x = [1, 2]")
    assert not exact_match("return a+b", "return a + b")  # spaces inside tokens' gaps matter
    assert not exact_match("return a", "return b")


def test_single_line_rule() -> None:
    assert single_line("    return x\n    y = 2\n") == "    return x\n"
    assert single_line("    return x") == "    return x\n"
    assert single_line("") == "\n"
    assert single_line("\nreturn x") == "\n"


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert percentile(values, 50) == 10.0
    assert percentile(values, 95) == 19.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) == 0.0
    assert percentile(reversed(values), 95) == 19.0  # any order: benches pass arrival order


# ---------------------------------------------------------------- cases


def test_cut_cases_deterministic_by_seed(tmp_path: Path) -> None:
    src = write_sources(tmp_path)
    first = cut_cases(src, 9, seed=1)
    assert first == cut_cases(src, 9, seed=1)
    assert first != cut_cases(src, 9, seed=2)
    assert [c.kind for c in first] == list(KINDS) * 3


def test_cut_cases_shapes(tmp_path: Path) -> None:
    src = write_sources(tmp_path)
    files = {"a.py": (src / "a.py").read_text(), "pkg/b.py": (src / "pkg" / "b.py").read_text()}
    for case in cut_cases(src, 30, seed=5):
        name = case.id.split("/", 1)[1].rsplit(":", 2)[0]
        text = files[name]  # never notes.txt or a hidden folder
        # Prefix, middle and suffix are contiguous text of the file.
        assert case.prefix + case.middle + case.suffix in text
        assert case.middle.strip()
        if case.kind == "single-line":
            assert case.middle.count("\n") == 1 and case.middle.endswith("\n")
            assert case.prefix == "" or case.prefix.endswith("\n")
        elif case.kind == "multi-line":
            assert 2 <= case.middle.count("\n") <= 8 and case.middle.endswith("\n")
        else:
            assert 8 <= len(case.middle) <= 200


def test_cut_cases_windows_are_bounded(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("".join(f"value_{i} = {i}\n" for i in range(2000)))
    for case in cut_cases(tmp_path, 6, seed=0, prefix_chars=300, suffix_chars=200):
        assert len(case.prefix) <= 300 and len(case.suffix) <= 200
        assert case.prefix == "" or case.prefix.endswith("\n") or case.kind == "random-span"


# ---------------------------------------------------------------- baselines


def test_baselines() -> None:
    prefix = "def f(x):\n    y = x + 1\n"
    assert predict_empty(prefix, "return y\n") == ""
    assert predict_copy_prev_line(prefix, "") == "    y = x + 1\n"
    assert predict_copy_prev_line(prefix + "    ret", "") == "    y = x + 1\n"
    assert predict_copy_prev_line("no newline yet", "") == ""


def test_baselines_scored_end_to_end(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("a = 1\na = 1\na = 1\na = 1\n")
    cases = cut_cases(src, 2, seed=0, kinds=("single-line",))
    predictors = [Predictor.baseline("empty"), Predictor.baseline("copy-prev-line")]
    empty, copy = evaluate(predictors, cases, protocols=["fixed"])
    assert (empty.exact_match, empty.edit_similarity) == (0.0, pytest.approx(1 / 6))  # "\n"
    assert empty.tokens_per_forward is None and empty.forward_passes_per_case == 0.0
    # Every line equals the one above it, except the first (which has no line above).
    expected = sum(1.0 if c.prefix else 1 / 6 for c in cases) / len(cases)
    assert copy.edit_similarity == pytest.approx(expected)


# ---------------------------------------------------------------- HumanEval data


@pytest.fixture
def toy_data(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "data")


def test_load_suite_sample_is_seeded(toy_data: Path) -> None:
    everything = load_suite("humaneval-single", toy_data)
    assert [c.id for c in everything] == [r["task_id"] for r in ROWS]
    assert everything[0].kind == "single-line" and everything[0].middle == "    return a + b\n"
    sample = load_suite("humaneval-single", toy_data, limit=3, seed=4)
    assert sample == load_suite("humaneval-single", toy_data, limit=3, seed=4)
    assert len(sample) == 3


CURSOR_SOURCE = """import os


def total(values, start=0):
    result = start
    for value in values:
        result = result + value.size
    return max(result, 0)
"""


def test_cursor_spans_cut_what_the_user_has_not_typed_at_each_class() -> None:
    def line_before(offset: int) -> str:
        return CURSOR_SOURCE[:offset].split("\n")[-1]

    spans = [(cls, line_before(start), CURSOR_SOURCE[start:end])
             for cls, start, end in cursor_spans(CURSOR_SOURCE)]
    assert spans == [
        ("after keyword", "import ", "os"),
        ("after (", "def total(", "values, start=0):"),
        ("argument list", "def total(", "values, start=0"),
        ("after ,", "def total(values, ", "start=0):"),
        ("block header", "def total(values, start=0):", "\n    result = start"),
        ("new line", "    ", "result = start"),
        ("after =", "    result = ", "start"),
        ("new line", "    ", "for value in values:"),
        ("after keyword", "    for ", "value in values:"),
        ("after keyword", "    for value in ", "values:"),
        ("block header", "    for value in values:", "\n        result = result + value.size"),
        ("new line", "        ", "result = result + value.size"),
        ("after =", "        result = ", "result + value.size"),
        ("after .", "        result = result + value.", "size"),
        ("new line", "    ", "return max(result, 0)"),
        ("after (", "    return max(", "result, 0)"),
        ("argument list", "    return max(", "result, 0"),
        ("after ,", "    return max(result, ", "0)"),
        ("after keyword", "    return ", "max(result, 0)"),
    ]


def test_cursor_cases_interleave_the_classes_and_skip_strings_and_comments(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(CURSOR_SOURCE + 'NAME = "x"  # a string and a comment\n')
    cases = cut_cursor_cases(tmp_path, 16, seed=3)
    assert cases == cut_cursor_cases(tmp_path, 16, seed=3)
    assert [c.kind for c in cases[:8]] == list(CURSOR_CLASSES)
    assert all(c.prefix + c.middle + c.suffix == (tmp_path / "a.py").read_text() for c in cases)
    assert not any("NAME" in c.middle for c in cases)

