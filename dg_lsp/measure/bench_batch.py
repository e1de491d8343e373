"""`dg-lsp bench --section batch`: batch mode's throughput, the same files through the resident
engine and through a team's engine (engine.serve.team.app on Ray Serve) of one replica and of
two, side by side in one run.

The files: `--limit` small Python files, each three functions of the cases' source (the
held-out package by default; dg_lsp.measure.bench_lsp.cut_functions: functions without a docstring,
dedented), so `--action docstrings` has three targets in each. Every row is one
`dg-lsp batch FILES --action docstrings --check` over them, as a user runs it, its engine
started and warmed up first (a model load is not batch throughput).

The team engine is deployed here, on a local Ray cluster (this machine's CPUs shared out
between the replicas, or one GPU per replica where the cluster has enough), behind Ray Serve's
proxy on loopback with a random token. Its rows say why they were skipped when Ray is not
installed or the deployment does not come up.

Per row: files, targets, targets edited, files failed, seconds, files per minute, tokens per
second (the tokens the model committed over the run's wall time, where the engine counts
them), and the replicas that served the run.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import json
import logging
import secrets
import socket
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

FUNCTIONS_PER_FILE = 3
COLUMNS = ("engine", "replicas", "files", "targets", "edited", "failedFiles", "seconds",
           "filesPerMin", "tokensPerSec", "replicasUsed", "note")
RAY_STARTUP = 240.0  # seconds for a deployment's replicas to report on a loaded machine


def batch_section(folder: Path, limit: int, model: str | None, device: str,
                  seed: int = 0) -> list[dict[str, Any]]:
    """One row per engine: the resident one, then a team's of one and of two replicas."""
    with tempfile.TemporaryDirectory(prefix="dg-bench-batch-") as work:
        files = Path(work) / "files"
        count = write_files(folder, limit, files)
        if not count:
            return [{"engine": "-", "note": f"no functions without a docstring in {folder}"}]
        rows = [resident_row(files, model, device, seed)]
        rows += team_rows(files, model, device, seed, Path(work))
    return [{key: row.get(key, "-") for key in COLUMNS} for row in rows]


def write_files(folder: Path, count: int, into: Path) -> int:
    """`count` files (fewer when the source runs out) of FUNCTIONS_PER_FILE functions each (the
    last may hold fewer); how many were written."""
    from dg_lsp.measure.bench_lsp import cut_functions

    functions = []  # whole functions only: the cut ends a body at its first dedented line
    for function in cut_functions(folder, 2 * count * FUNCTIONS_PER_FILE):
        text = textwrap.dedent(function.text)
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(text)
            functions.append(text)
    into.mkdir(parents=True)
    written = 0
    for i in range(count):
        chunk = functions[i * FUNCTIONS_PER_FILE:(i + 1) * FUNCTIONS_PER_FILE]
        if not chunk:
            break
        text = "\n\n".join(chunk)
        (into / f"part{i:03}.py").write_text(text, encoding="utf-8")
        written += 1
    return written


def run_batch(files: Path, engine_args: list[str], seed: int) -> dict[str, Any]:
    """One `dg-lsp batch --action docstrings --check` over `files`: its measures."""
    from dg_lsp.batch import cli as batch_cli

    parser = argparse.ArgumentParser(prog="dg-lsp")
    batch_cli.register(parser.add_subparsers())
    with tempfile.TemporaryDirectory() as out:
        report = Path(out) / "report.json"
        args = parser.parse_args(["batch", str(files), "--action", "docstrings", "--check",
                                  "--output", str(Path(out) / "patch"), "--json", str(report),
                                  "--seed", str(seed), *engine_args])
        said = io.StringIO()
        started = time.perf_counter()
        with contextlib.redirect_stderr(said):
            status = batch_cli.run(args)
        seconds = time.perf_counter() - started
        if not report.exists():
            last = said.getvalue().strip().splitlines()[-1:] or [f"exit {status}"]
            return {"note": f"the run failed: {last[0][:160]}"}
        data = json.loads(report.read_text())
    targets = data["targets"]
    tokens = [t["tokens"] for t in targets if t["tokens"] is not None]
    files_done = len(data["files"]["edited"]) + len(data["files"]["unchanged"]) + len(
        data["files"]["failed"])
    return {"files": files_done, "targets": len(targets), "edited": data["summary"]["edited"],
            "failedFiles": len(data["files"]["failed"]), "seconds": round(seconds, 1),
            "filesPerMin": round(60 * files_done / seconds, 1),
            "tokensPerSec": round(sum(tokens) / seconds, 1) if tokens else "n/a",
            "replicasUsed": len(data["replicas"]) or "-", "note": ""}


def resident_row(files: Path, model: str | None, device: str, seed: int) -> dict[str, Any]:
    from engine.serve.socket.client import EngineClient, EngineUnavailable
    from engine.types import InfillRequest

    row: dict[str, Any] = {"engine": "resident", "replicas": "-"}
    try:  # started (or found) and warm before the clock starts
        client = EngineClient.connect_or_start(model, device, priority="batch")
        list(client.infill_stream(InfillRequest("def f(x):\n    return ", "\n", 4)))
    except EngineUnavailable as exc:
        return row | {"note": f"no resident engine: {exc}"}
    args = ["--engine", "resident", "--device", device] + (["--model", model] if model else [])
    return row | run_batch(files, args, seed)


def team_rows(files: Path, model: str | None, device: str, seed: int, work: Path
              ) -> list[dict[str, Any]]:
    """The team engine's rows (one replica, then two), deployed on a local Ray cluster."""
    rows: list[dict[str, Any]] = []

    def skip(why: str) -> list[dict[str, Any]]:
        done = {r["replicas"] for r in rows}
        return rows + [{"engine": "team (Ray Serve)", "replicas": n, "note": f"skipped: {why}"}
                       for n in (1, 2) if n not in done]

    try:
        import ray
        from ray import serve
    except ImportError:
        return skip('Ray is not installed (pip install "dg-lsp[distributed]")')
    from engine.serve.team.app import APP_NAME, AppOptions, build_app, token_digest
    from engine.serve.team.remote import RemoteEngine
    from engine.types import InfillRequest

    token = secrets.token_hex(16)
    token_file = work / "team-token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    try:
        ray.init(include_dashboard=False, logging_level="error", log_to_driver=False)
    except Exception as exc:  # noqa: BLE001 - the table says why, the other rows stand
        return skip(f"Ray could not start: {type(exc).__name__}: {str(exc)[:120]}")
    try:
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0)) if device != "cpu" else 0
        cpus = max(1.0, float(resources.get("CPU", 1)))
        logging.getLogger("ray.serve").setLevel(logging.WARNING)  # not a line per deploy
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        for replicas in (1, 2):
            if gpus and gpus < replicas:
                rows.append({"engine": "team (Ray Serve)", "replicas": replicas,
                             "note": f"skipped: {replicas} replicas need {replicas} GPUs, "
                             f"the cluster has {gpus}"})
                continue
            share = max(1, int(cpus // 2))  # the same CPUs per replica in both rows
            options = AppOptions(model=model, device=device, token_digest=token_digest(token),
                                 replicas=replicas, cpus=share, threads=share,
                                 gpus=1.0 if gpus else 0.0)
            serve.run(build_app(options), name=APP_NAME, route_prefix="/")
            engine = RemoteEngine(url, token)
            deadline = time.monotonic() + RAY_STARTUP
            while len(engine.status()["replicas"]) < replicas:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{replicas} replicas did not report in "
                                       f"{RAY_STARTUP:g} s")
                time.sleep(0.5)
            for _ in range(2 * replicas):  # warm: each replica has run a request
                list(engine.infill_stream(InfillRequest("def f(x):\n    return ", "\n", 4)))
            row = {"engine": "team (Ray Serve)", "replicas": replicas}
            rows.append(row | run_batch(files, ["--engine", url, "--token-file",
                                                str(token_file)], seed))
            serve.delete(APP_NAME)
    except Exception as exc:  # noqa: BLE001 - the table says why, the other rows stand
        return skip(f"the deployment failed: {type(exc).__name__}: {str(exc)[:120]}")
    finally:
        with contextlib.suppress(Exception):
            serve.shutdown()
        ray.shutdown()
    return rows


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

