"""Every number a command line takes is refused by its flag's name when it is not a number,
not finite or out of range, before any work (engine.bounds.bounded_argument): not met later as
an internal error, a hang or a request refused for no reason it says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import build_parser, main
from tests.unit.test_plan import DREAM


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The last line argparse writes refusing `argv` (it exits with status 2)."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(("value", "said"), [
    ("inf", "got inf"), ("1e308", "got 1e308"), ("nan", "got nan"), ("-1", "got -1"),
    ("0", "got 0"), ("lots", "expected a number, got 'lots'"),
])
def test_plan_memory_gb_must_be_finite_and_positive(value: str, said: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    line = _refused(["plan", "--model", "x", "--memory-gb", "24", value], capsys)
    expected = said if said.startswith("expected") else (
        f"expected a finite number in 0.001..1000000.0, {said}")
    assert line == f"dg-engine plan: error: argument --memory-gb: {expected}"


def test_plan_takes_a_small_and_a_large_memory(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(DREAM))
    assert main(["plan", "--model", str(tmp_path), "--memory-gb", "0.5", "1e6", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memories"] == [
        ["0.5 GB", 500_000_000], ["1e+06 GB", 10**15]]


def test_plan_refuses_a_block_models_canvas_length_by_name(tmp_path: Path) -> None:
    from engine.models.config import CheckpointError
    from engine.models.plan import plan
    from tests.support.published_configs import PUBLISHED

    pytest.importorskip("transformers")
    raw = {**PUBLISHED["diffusiongemma-26b-a4b"], "canvas_length": -5}
    with pytest.raises(CheckpointError, match=r"^dg: canvas_length: expected an integer in "
                                              r"64\.\.8192, got -5$"):
        plan(raw, "int4", name="dg")


SERVE = ["serve", "--model", "x", "--device", "cpu"]


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--max-batch", "0", "an integer in 1..1024"),
    ("--max-batch", "-3", "an integer in 1..1024"),
    ("--max-queue", "0", "an integer in 1..1000000"),
    ("--max-connections", "-1", "an integer in 1..1000000"),
    ("--request-timeout", "nan", "a finite number in 0.01..1000000.0"),
    ("--request-timeout", "-1", "a finite number in 0.01..1000000.0"),
    ("--request-timeout", "inf", "a finite number in 0.01..1000000.0"),
    ("--max-request-mb", "-1", "an integer in 0..100000000"),
    ("--large-canvas", "-1", "an integer in 64..8192"),
    ("--idle-exit", "-5", "a finite number in 0..1000000000.0"),
    ("--idle-exit", "nan", "a finite number in 0..1000000000.0"),
    ("--threads", "0", "an integer in 1..4096"),
    ("--threads", "-2", "an integer in 1..4096"),
    ("--threads", "100000", "an integer in 1..4096"),
])
def test_serve_refuses_each_number_out_of_range_by_name(
        flag: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused([*SERVE, flag, value], capsys) == (
        f"dg-engine serve: error: argument {flag}: expected {expected}, got {value}")


def test_serve_refuses_a_number_that_is_not_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert _refused([*SERVE, "--threads", "2.5"], capsys) == (
        "dg-engine serve: error: argument --threads: expected an integer, got '2.5'")


@pytest.mark.parametrize(("flag", "value", "said"), [
    ("--listen", "127.0.0.1:99999", "expected a port in 1..65535, got 99999"),
    ("--listen", "127.0.0.1:0", "expected a port in 1..65535, got 0"),
    ("--listen", "127.0.0.1:http", "expected HOST:PORT, got '127.0.0.1:http'"),
    ("--listen", "7000", "expected HOST:PORT, got '7000'"),
    ("--http", "127.0.0.1:70000", "expected a port in 1..65535, got 70000"),
])
def test_serve_refuses_a_port_out_of_range_before_loading_the_model(
        flag: str, value: str, said: str, capsys: pytest.CaptureFixture[str]) -> None:
    # --listen 127.0.0.1:99999 was met after the model loaded: internal error: OverflowError.
    assert _refused([*SERVE, flag, value], capsys) == (
        f"dg-engine serve: error: argument {flag}: {said}")


def test_serve_keeps_its_defaults_and_takes_numbers_in_range() -> None:
    args = build_parser().parse_args(SERVE)
    assert (args.max_batch, args.max_queue, args.request_timeout, args.max_request_mb,
            args.large_canvas, args.idle_exit, args.threads) == (8, 64, 60.0, 0, None, 0, None)
    args = build_parser().parse_args([
        *SERVE, "--max-batch", "1", "--request-timeout", "0.5", "--idle-exit", "1800.0",
        "--threads", "1000", "--listen", "[::1]:7000", "--http", ":8012"])
    assert (args.max_batch, args.request_timeout, args.idle_exit, args.threads, args.listen,
            args.http) == (1, 0.5, 1800.0, 1000, "[::1]:7000", ":8012")
