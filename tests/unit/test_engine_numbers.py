"""Every number a command line takes is refused by its flag's name when it is not a number,
not finite or out of range, before any work (engine.bounds.bounded_argument): not met later as
an internal error, a hang or a request refused for no reason it says."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.cli import build_parser, main
from tests.support.published_configs import SMALL_DREAM as DREAM


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str],
             parse: Callable[[list[str]], Any] | None = None) -> str:
    """The last line argparse writes refusing `argv` (it exits with status 2); `parse`:
    another command line's parser or main than dg-engine's."""
    with pytest.raises(SystemExit) as exit_:
        (parse or build_parser().parse_args)(argv)
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
    # The config's own check (engine.models.config), the one loading the model meets too.
    with pytest.raises(CheckpointError, match=r"^config\.json: canvas_length: expected an "
                                              r"integer in 1\.\.8192, got -5$"):
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


# -- the sweep of the other command lines (issue #58) -----------------------------------------


def _dg_lsp(argv: list[str]) -> Any:
    from dg_lsp.cli import build_parser as dg_lsp_parser

    return dg_lsp_parser().parse_args(argv)


@pytest.mark.parametrize(("value", "said"), [
    ("127.0.0.1:99999", "expected a port in 1..65535, got 99999"),
    ("localhost:http", "expected HOST:PORT, got 'localhost:http'"),
])
def test_dg_lsp_tcp_refuses_a_port_out_of_range_by_name(value: str, said: str,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    from dg_lsp.cli import main as dg_lsp_main

    # --tcp 127.0.0.1:99999 was met when the server bound it: internal error: OverflowError.
    assert _refused(["--tcp", value], capsys, dg_lsp_main) == (
        f"dg-lsp serve: error: argument --tcp: {said}")
    assert _dg_lsp(["serve", "--tcp", "[::1]:2087"]).tcp == "[::1]:2087"


RAY = [*SERVE, "--ray"]
DELAY = "a finite number in 0..1000000.0"


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--replicas", "0", "an integer in 1..1024"),
    ("--min-replicas", "-1", "an integer in 0..1024"),
    ("--max-replicas", "0", "an integer in 1..1024"),
    ("--upscale-delay", "-1", DELAY),
    ("--downscale-delay", "inf", DELAY),
    ("--autoscale-window", "0", "a finite number in 0.01..1000000.0"),
    ("--replica-cpus", "nan", "a finite number in 0.1..1024"),
    ("--replica-cpus", "0", "a finite number in 0.1..1024"),
    ("--serve-port", "99999", "an integer in 1..65535"),
    ("--serve-port", "0", "an integer in 1..65535"),
    ("--max-per-client", "0", "an integer in 1..1000000"),
])
def test_serve_ray_refuses_each_number_out_of_range_by_name(
        flag: str, value: str, expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    # --serve-port 99999 reached Ray Serve's proxy, after Ray had started.
    assert _refused([*RAY, flag, value], capsys) == (
        f"dg-engine serve: error: argument {flag}: expected {expected}, got {value}")


@pytest.mark.parametrize(("extra", "said"), [
    (["--min-replicas", "3", "--max-replicas", "2"],
     "dg-engine serve: --min-replicas and --max-replicas go together, min <= max"),
    (["--max-replicas", "2"],
     "dg-engine serve: --min-replicas and --max-replicas go together, min <= max"),
    (["--replica-cpus", "inf"], "dg-engine serve: error: argument --replica-cpus: expected a "
                                "finite number in 0.1..1024, got inf"),
])
def test_serve_ray_refuses_a_bad_number_before_ray_starts(
        extra: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails: Ray never starts
    token = tmp_path / "token"
    token.write_text("0123abcd" * 4 + "\n")
    token.chmod(0o600)
    try:
        status = main([*RAY, "--token-file", str(token), *extra])
    except SystemExit as exit_:  # argparse's refusal
        status = exit_.code
    assert status == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == said


def test_serve_ray_keeps_its_defaults_and_refuses_an_infinite_replica(
        capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(RAY)
    assert (args.replicas, args.min_replicas, args.max_replicas, args.upscale_delay,
            args.downscale_delay, args.autoscale_window, args.replica_cpus, args.serve_port,
            args.max_per_client) == (1, None, None, 5.0, 120.0, 30.0, 1.0, 8001, 32)
    assert build_parser().parse_args([*RAY, "--replica-cpus", "0.5"]).replica_cpus == 0.5
    # inf reached round() in each replica, after the deployment: OverflowError.
    assert _refused([*RAY, "--replica-cpus", "inf"], capsys) == (
        "dg-engine serve: error: argument --replica-cpus: expected a finite number in "
        "0.1..1024, got inf")


@pytest.mark.parametrize(("argv", "flag", "expected", "value"), [
    (["bench", "--requests", "0"], "--requests", "an integer in 1..1000000", "0"),
    (["bench", "--requests", "-1"], "--requests", "an integer in 1..1000000", "-1"),
    (["bench", "--max-tokens", "0"], "--max-tokens", "an integer in 1..1024", "0"),
    (["bench", "--clients", "1,0"], "--clients", "an integer in 1..1024", "0"),
    (["bench", "--passes", "0"], "--passes", "an integer in 1..1000000", "0"),
    (["bench", "--threads", "0"], "--threads", "an integer in 1..4096", "0"),
    (["corpus", "--out", "x", "--vocab-size", "0"], "--vocab-size",
     "an integer in 264..65536", "0"),
    (["corpus", "--out", "x", "--vocab-size", "70000"], "--vocab-size",
     "an integer in 264..65536", "70000"),
    (["corpus", "--out", "x", "--max-mb", "inf"], "--max-mb",
     "a finite number in 0.001..10000000.0", "inf"),
    (["corpus", "--out", "x", "--max-mb", "0"], "--max-mb",
     "a finite number in 0.001..10000000.0", "0"),
    (["corpus", "--out", "x", "--tokenizer-mb", "nan"], "--tokenizer-mb",
     "a finite number in 0.001..10000000.0", "nan"),
    (["version-edits", "six", "--out", "x", "--releases", "1"], "--releases",
     "an integer in 2..1000", "1"),
])
def test_dg_engine_tools_refuse_each_number_out_of_range_by_name(
        argv: list[str], flag: str, expected: str, value: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    # --requests 0 divided by zero, -1 took every case but the last; --max-mb 0 meant no cap,
    # inf an OverflowError; --vocab-size past 65536 overflowed the corpus's uint16 ids.
    assert _refused(argv, capsys) == (
        f"dg-engine {argv[0]}: error: argument {flag}: expected {expected}, got {value}")


def test_dg_engine_bench_takes_its_concurrency_levels_as_numbers() -> None:
    assert build_parser().parse_args(["bench"]).clients == [1, 4, 8]
    assert build_parser().parse_args(["bench", "--clients", "2,16"]).clients == [2, 16]


def _not_run(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("ran with a number its flag refuses")


@pytest.mark.parametrize(("argv", "flag", "expected", "value"), [
    (["collect", "--out", "x", "--cases", "0"], "--cases", "an integer in 1..1000000", "0"),
    (["collect", "--out", "x", "--seed", "-1"], "--seed",
     "an integer in 0..9223372036854775807", "-1"),
    (["collect", "--out", "x", "--on-policy", "1.5"], "--on-policy",
     "a finite number in 0..1", "1.5"),
    (["train", "--trajectories", "x", "--hidden", "-1"], "--hidden",
     "an integer in 0..4096", "-1"),
    (["train", "--trajectories", "x", "--epochs", "0"], "--epochs",
     "an integer in 1..10000000", "0"),
])
def test_commit_policy_refuses_each_number_out_of_range_by_name(
        argv: list[str], flag: str, expected: str, value: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.train import commit_policy

    monkeypatch.setattr(commit_policy, "collect", _not_run)
    monkeypatch.setattr(commit_policy, "fit", _not_run)
    monkeypatch.setattr(commit_policy.torch, "load", _not_run)
    assert _refused(argv, capsys, commit_policy.main) == (
        f"python -m engine.train.commit_policy {argv[0]}: error: argument {flag}: "
        f"expected {expected}, got {value}")


@pytest.mark.parametrize(("argv", "said"), [
    (["--repeat", "0"], "argument --repeat: expected an integer in 1..1000000, got 0"),
    (["--temperature", "nan"], "argument --temperature: expected a finite number in 0..10, "
                               "got nan"),
    (["--shape", "0x8192"], "argument --shape: N: expected an integer in 1..8192, got 0"),
    (["--shape", "32x99999999"], "argument --shape: V: expected an integer in 1..1048576, "
                                 "got 99999999"),
    (["--shape", "32"], "argument --shape: expected NxV, got '32'"),
])
def test_kernel_bench_refuses_each_number_out_of_range_by_name(
        argv: list[str], said: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from engine.kernels import bench

    monkeypatch.setattr(bench, "bench", _not_run)
    assert _refused(argv, capsys, bench.main).endswith(f"error: {said}")


@pytest.mark.parametrize(("argv", "flag", "expected", "value"), [
    (["batch", "x.py", "--action", "docstrings", "--workers", "0"], "--workers",
     "an integer in 1..1024", "0"),
    (["eval", "--limit", "0"], "--limit", "an integer in 1..1000000", "0"),
    (["eval", "--limit", "-1"], "--limit", "an integer in 1..1000000", "-1"),
    (["eval", "--seed", "-1"], "--seed", "an integer in 0..9223372036854775807", "-1"),
    (["eval", "--exec-timeout", "inf"], "--exec-timeout", "a finite number in 0.1..3600",
     "inf"),
    (["eval", "--exec-timeout", "0"], "--exec-timeout", "a finite number in 0.1..3600", "0"),
    (["bench", "--limit", "0"], "--limit", "an integer in 1..1000000", "0"),
    (["bench", "--functions", "-1"], "--functions", "an integer in 0..10000", "-1"),
    (["bench", "--seed", "-1"], "--seed", "an integer in 0..9223372036854775807", "-1"),
])
def test_dg_lsp_commands_refuse_each_number_out_of_range_by_name(
        argv: list[str], flag: str, expected: str, value: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    # eval --limit 0 ran 60 cross-file cursors (`limit or 60`), -1 all cases but the last;
    # --exec-timeout inf overflowed the program's timer.
    assert _refused(argv, capsys, _dg_lsp) == (
        f"dg-lsp {argv[0]}: error: argument {flag}: expected {expected}, got {value}")


def test_dg_lsp_eval_refresh_window_spells_the_whole_canvas_minus_one_only(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _dg_lsp(["eval", "--refresh-window", "-1"]).refresh_window == -1
    assert _dg_lsp(["eval"]).refresh_window == 16
    assert _refused(["eval", "--refresh-window", "-2"], capsys, _dg_lsp) == (
        "dg-lsp eval: error: argument --refresh-window: expected an integer in -1..8192, "
        "got -2")


def test_dg_lsp_eval_refuses_a_hole_size_out_of_range() -> None:
    from dg_lsp.measure.eval.cli import parse_hole_tokens

    assert parse_hole_tokens(["single-line=1024"])["single-line"] == 1024
    with pytest.raises(SystemExit, match=r"N in 1\.\.1024, got 'single-line=5000'$"):
        parse_hole_tokens(["single-line=5000"])


@pytest.mark.parametrize(("argv", "flag", "expected", "value"), [
    (["collect", "--out", "x", "--count", "0"], "--count", "an integer in 1..1000000", "0"),
    (["collect", "--out", "x", "--seed", "-1"], "--seed",
     "an integer in 0..9223372036854775807", "-1"),
])
def test_gate_fit_refuses_each_number_out_of_range_by_name(
        argv: list[str], flag: str, expected: str, value: str,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from dg_lsp.measure import gate_fit

    monkeypatch.setattr(gate_fit, "collect", _not_run)
    assert _refused(argv, capsys, gate_fit.main) == (
        f"python -m dg_lsp.measure.gate_fit collect: error: argument {flag}: "
        f"expected {expected}, got {value}")


@pytest.mark.parametrize("canvas", [-5, 0, 10**9, None, "256", 2.5, True])
def test_loading_a_block_model_refuses_its_canvas_length_by_name(canvas: Any,
                                                                 tmp_path: Path) -> None:
    from engine.models.checkpoint import read_checkpoint
    from engine.models.config import CheckpointError
    from tests.support.published_configs import PUBLISHED

    raw = {**PUBLISHED["diffusiongemma-26b-a4b"], "canvas_length": canvas}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    # Before any weights: -5 failed inside the first request, 10**9 asked for its logits.
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(tmp_path)
    assert str(caught.value) == (f"{tmp_path / 'config.json'}: canvas_length: expected an "
                                 f"integer in 1..8192, got {canvas!r}")


def test_a_block_models_canvas_length_has_its_own_range_not_a_requests() -> None:
    from engine.models.config import CheckpointError, config_from_hf
    from tests.support.published_configs import PUBLISHED

    raw = PUBLISHED["diffusiongemma-26b-a4b"]
    assert config_from_hf({**raw, "canvas_length": 8}).family == "block"  # the tiny test model
    assert config_from_hf({k: v for k, v in raw.items() if k != "canvas_length"}).family == "block"
    with pytest.raises(CheckpointError, match=r"^config\.json: canvas_length: expected an "
                                              r"integer in 1\.\.8192, got 8193$"):
        config_from_hf({**raw, "canvas_length": 8193})
