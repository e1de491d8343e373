"""`dg-lsp eval` in processes: the execution sandbox (each program in a child) and whole runs
of the command, which score by running the tests."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from dg_lsp.measure.eval import cli as eval_cli
from dg_lsp.measure.eval.sandbox import check_completion, run_program
from dg_lsp.measure.eval.scoring import edit_similarity
from tests.support.eval_data import write_rows, write_sources

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


@pytest.fixture
def toy_data(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "data")


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
