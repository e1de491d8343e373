"""`dg-lsp eval`: scoring, the execution sandbox, case cutting, baselines and the runner."""

from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import pytest

from dg_lsp.measure.eval import cli as eval_cli
from dg_lsp.measure.eval.baselines import predict_copy_prev_line, predict_empty
from dg_lsp.measure.eval.humaneval import SUITES, load_suite
from dg_lsp.measure.eval.runner import Predictor, evaluate
from dg_lsp.measure.eval.sandbox import check_completion, run_program
from dg_lsp.measure.eval.scoring import (
    edit_similarity,
    exact_match,
    levenshtein,
    normalize_whitespace,
    single_line,
)
from engine.data.cases import CURSOR_CLASSES, KINDS, cursor_spans, cut_cases, cut_cursor_cases
from engine.data.stats import percentile

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


# ---------------------------------------------------------------- sandbox

PROMPT = "def add(a, b):\n"
SUFFIX = ""
TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


def test_sandbox_correct_completion_passes() -> None:
    result = check_completion(PROMPT, "    return a + b\n", SUFFIX, TEST, "add", timeout=20)
    assert (result.passed, result.reason) == (True, "passed")


def test_sandbox_wrong_completion_fails() -> None:
    result = check_completion(PROMPT, "    return a - b\n", SUFFIX, TEST, "add", timeout=20)
    assert (result.passed, result.reason) == (False, "failed")
    assert "AssertionError" in result.detail


@pytest.mark.parametrize(
    "completion",
    [
        "    raise ValueError('boom')\n",
        "    return a +\n",  # syntax error
        "    import sys; sys.exit(0)\n",  # exits 0 before check could finish
        "    import os; os._exit(0)\n",
    ],
)
def test_sandbox_crashing_or_exiting_completion_fails(completion: str) -> None:
    result = check_completion(PROMPT, completion, SUFFIX, TEST, "add", timeout=20)
    assert (result.passed, result.reason) == (False, "failed")


def test_sandbox_infinite_loop_times_out_promptly() -> None:
    started = time.monotonic()
    result = check_completion(PROMPT, "    while True:\n        pass\n", SUFFIX, TEST, "add",
                              timeout=1.0)
    elapsed = time.monotonic() - started
    assert (result.passed, result.reason) == (False, "timeout")
    assert elapsed < 1.0 + 5.0  # the margin covers process start-up on a loaded machine


def test_sandbox_has_no_network_and_empty_environment() -> None:
    program = (
        "import os, socket\n"
        "assert 'HOME' not in os.environ and 'PATH' not in os.environ\n"
        "try:\n"
        "    socket.create_connection(('127.0.0.1', 9), timeout=1)\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise SystemExit(3)\n"
    )
    assert run_program(program, timeout=20).passed


# ---------------------------------------------------------------- cases


def write_sources(folder: Path) -> Path:
    lines = [f"def f{i}(x):\n    y = x * {i}\n    return y + {i}\n\n\n" for i in range(12)]
    (folder / "a.py").write_text("".join(lines[:6]))
    (folder / "pkg").mkdir()
    (folder / "pkg" / "b.py").write_text("".join(lines[6:]))
    (folder / "notes.txt").write_text("not a source file\n" * 50)
    (folder / ".hidden").mkdir()
    (folder / ".hidden" / "c.py").write_text("secret = 1\n" * 50)
    return folder


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


# ---------------------------------------------------------------- HumanEval data and runner


ROWS = [
    {"task_id": f"SingleLineInfilling/Toy/{i}/L0", "entry_point": "add",
     "prompt": "def add(a, b):\n", "suffix": "",
     "canonical_solution": "    return a + b\n",
     "test": "def check(candidate):\n    assert candidate(2, 3) == 5\n"}
    for i in range(5)
]


@pytest.fixture
def toy_data(tmp_path: Path) -> Path:
    folder = tmp_path / "data"
    folder.mkdir()
    for filename, _kind in SUITES.values():
        with gzip.open(folder / filename, "wt", encoding="utf-8") as out:
            out.writelines(json.dumps(row) + "\n" for row in ROWS)
    return folder


def test_load_suite_sample_is_seeded(toy_data: Path) -> None:
    everything = load_suite("humaneval-single", toy_data)
    assert [c.id for c in everything] == [r["task_id"] for r in ROWS]
    assert everything[0].kind == "single-line" and everything[0].middle == "    return a + b\n"
    sample = load_suite("humaneval-single", toy_data, limit=3, seed=4)
    assert sample == load_suite("humaneval-single", toy_data, limit=3, seed=4)
    assert len(sample) == 3


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser()
    eval_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["eval", *argv])
    assert args.func(args) == 0
    return capsys.readouterr().out


def test_cli_baselines_on_humaneval_rows(
    toy_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = run_cli(["--suite", "humaneval-single", "--data-dir", str(toy_data), "--limit", "2",
                   "--model", "empty", "--model", "copy-prev-line", "--protocol", "fixed",
                   "--exec-timeout", "20", "--json"], capsys)
    report = json.loads(out)
    assert report["cases"] == 2 and report["kinds"] == {"single-line": 2}
    by_model = {r["model"]: r for r in report["results"]}
    assert by_model["empty"]["pass_at_1"] == 0.0
    # copy-prev-line predicts "def add(a, b):\n" inside the function: a syntax error.
    assert by_model["copy-prev-line"]["pass_at_1"] == 0.0
    assert by_model["copy-prev-line"]["edit_similarity"] == pytest.approx(
        edit_similarity("def add(a, b):\n", "    return a + b\n"))


def test_cli_table_output(toy_data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_cli(["--suite", "humaneval-single", "--data-dir", str(toy_data), "--limit", "1",
                   "--model", "empty", "--protocol", "both", "--exec-timeout", "20"], capsys)
    lines = out.splitlines()
    assert lines[0] == "suite humaneval-single: 1 cases, seed 0"
    assert lines[1].split() == ["model", "protocol", "cases", "pass@1", "EM", "edit", "sim",
                                "fwd/case", "tok/fwd", "p50", "ms", "p95", "ms"]
    assert [line.split()[:4] for line in lines[3:]] == [
        ["empty", "oracle", "1", "0.0%"], ["empty", "fixed", "1", "0.0%"]]


RESULT_FIELDS = {
    "model", "protocol", "cases", "pass_at_1", "exact_match", "edit_similarity",
    "forward_passes_per_case", "tokens_per_forward", "latency_ms_p50", "latency_ms_p95",
    "finish_reasons",
}


def test_runner_end_to_end_on_tiny_model(
    dream_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = Path(__file__).resolve().parents[3] / "shared" / "eval" / "human-eval-infilling"
    if not data.is_dir():
        pytest.skip("HumanEval-Infilling data not present")
    common = ["--model", str(dream_ckpt), "--model", "copy-prev-line", "--protocol", "both",
              "--hole-tokens", "single-line=8", "--hole-tokens", "multi-line=8",
              "--hole-tokens", "random-span=8", "--limit", "3", "--seed", "0",
              "--exec-timeout", "20", "--json"]
    humaneval = json.loads(run_cli(["--suite", "humaneval-single", "--data-dir", str(data),
                                    *common], capsys))
    (tmp_path / "src").mkdir()
    src = write_sources(tmp_path / "src")
    samples = tmp_path / "samples.jsonl"
    cut = json.loads(run_cli(["--suite", "cases", "--cases-from", str(src),
                              "--samples", str(samples), *common], capsys))

    for report, has_tests in ((humaneval, True), (cut, False)):
        assert report["cases"] == 3
        assert report["hole_tokens"] == {"single-line": 8, "multi-line": 8, "random-span": 8}
        results = report["results"]
        assert [(r["model"], r["protocol"]) for r in results] == [
            (str(dream_ckpt), "oracle"), (str(dream_ckpt), "fixed"),
            ("copy-prev-line", "oracle"), ("copy-prev-line", "fixed")]
        for r in results:
            assert set(r) == RESULT_FIELDS and r["cases"] == 3
            assert (r["pass_at_1"] is not None) == has_tests
            assert 0.0 <= r["edit_similarity"] <= 1.0
            assert r["latency_ms_p50"] <= r["latency_ms_p95"]
            assert sum(r["finish_reasons"].values()) == 3
        model_fixed = results[1]
        # A random model runs at least one forward pass per case and at most one per hole token.
        assert 1.0 <= model_fixed["forward_passes_per_case"] <= 8.0
        assert model_fixed["tokens_per_forward"] is None or model_fixed["tokens_per_forward"] > 0
        oracle = results[0]
        assert oracle["finish_reasons"].keys() <= {"length", "empty-middle"}
        assert results[2]["tokens_per_forward"] is None
    assert cut["kinds"] == {"multi-line": 1, "random-span": 1, "single-line": 1}
    written = [json.loads(line) for line in samples.read_text().splitlines()]
    assert len(written) == 2 * 2 * 3  # models x protocols x cases


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
