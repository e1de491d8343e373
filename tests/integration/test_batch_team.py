"""`dg-lsp batch --engine URL` over a team's replicas, without Ray: concurrency, each file's
requests on one replica, retries when a replica (or the proxy in front of it) is lost, files
edited whole or not at all, the progress line and the summary.

The engine is tests/support/team_endpoint.py: the deployment's real front door before a stand-in
ingress that routes by document over named replicas (engine.serve.team.routing, as the Ray router
does) and fails requests as scripted. Its completions are a function of the request (the
docstring names the function it documents), so every file's expected text is known however
often and wherever its requests were sent. tests/e2e/test_ray_batch.py does the same on a real
two-replica Ray Serve deployment, a replica killed mid-run.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import time
from pathlib import Path

import pytest

from dg_lsp.batch import cli as batch_cli
from dg_lsp.batch import shared
from dg_lsp.batch.job import Record
from dg_lsp.batch.report import NOT_APPLIED, Progress
from engine.cli import run_command
from engine.serve.socket.client import EngineBusy, EngineRefused, EngineUnavailable
from engine.serve.socket.protocol import document_key
from tests.support.team_endpoint import team_engine

TOKEN = "t3am-batch-token-0123456789"
FILES = 12


def source(i: int) -> str:
    return (f"def scale_{i:02}(values, factor):\n    return [v * factor for v in values]\n\n\n"
            f"def total_{i:02}(values):\n    return sum(values) + {i}\n")


def documented(i: int) -> str:
    return (f'def scale_{i:02}(values, factor):\n    """About scale_{i:02}."""\n'
            f"    return [v * factor for v in values]\n\n\n"
            f'def total_{i:02}(values):\n    """About total_{i:02}."""\n'
            f"    return sum(values) + {i}\n")


def docstring(message: dict) -> str:
    """The team's model: the docstring of the function whose body the request is in."""
    name = re.findall(r"def (\w+)", message["prefix"])[-1]
    return f"About {name}."


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(FILES):
        (src / f"mod{i:02}.py").write_text(source(i))
    return src


@pytest.fixture
def token(tmp_path: Path) -> str:
    path = tmp_path / "team-token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture(autouse=True)
def short_waits(monkeypatch):
    """The retries' waits, cut to milliseconds (their bounds, not their length, are tested)."""
    monkeypatch.setattr(shared, "LOST_RETRIES", (0.01, 0.02, 0.04))
    monkeypatch.setattr(shared, "BUSY_RETRIES", (0.01, 0.02))


def batch(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="dg-lsp")
    batch_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["batch", *argv])
    return run_command("dg-lsp", lambda: args.func(args))


def texts(src: Path) -> dict[int, str]:
    return {i: (src / f"mod{i:02}.py").read_text() for i in range(FILES)}


def key(src: Path, i: int) -> str:
    return document_key((src / f"mod{i:02}.py").resolve().as_uri())


def test_every_kind_of_lost_request_is_sent_again_and_every_file_is_edited(repo, token,
                                                                         tmp_path, capsys):
    faults = ["reset", "midstream", "http503", "unavailable", "busy"]
    with team_engine(TOKEN) as team:
        team.write, team.replicas, team.faults = docstring, ["r1", "r2"], list(faults)
        status = batch(str(repo), "--action", "docstrings", "--engine", team.url,
                       "--token-file", token, "--apply", "--json", str(tmp_path / "r.json"))
    err = capsys.readouterr().err
    assert status == 0, err
    assert texts(repo) == {i: documented(i) for i in range(FILES)}
    assert sorted(fault for _, fault in team.failed) == sorted(faults)
    assert len(team.requests) == 2 * FILES + len(faults)  # each failure sent once more
    # Each file's requests carried its document and went to its one home replica.
    homes: dict[str, set[str]] = {}
    for document, replica in team.served:
        homes.setdefault(document, set()).add(replica)
    assert set(homes) == {key(repo, i) for i in range(FILES)}
    assert all(len(replicas) == 1 for replicas in homes.values())
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"] == {"edited": 2 * FILES, "refused": 0, "error": 0}
    assert report["retried"] == len(faults)
    assert sum(t["attempts"] - 1 for t in report["targets"]) == len(faults)
    assert report["replicas"] == sorted({r for replicas in homes.values() for r in replicas})
    assert report["files"]["failed"] == [] and len(report["files"]["edited"]) == FILES
    assert f"files: {FILES} edited, 0 unchanged, 0 failed, 0 skipped; replicas: 2 (" in err
    assert f"; {len(faults)} requests sent again" in err and "files/min" in err


def test_a_replica_lost_mid_run_sends_its_files_to_the_other_one(repo, token, capsys):
    with team_engine(TOKEN) as team:
        def write(message: dict) -> str:
            if len(team.served) == FILES // 2:  # half-way: the busiest replica dies
                busiest = max(team.replicas, key=[r for _, r in team.served].count)
                team.lose(busiest)
            return docstring(message)

        team.write, team.replicas = write, ["r1", "r2"]
        status = batch(str(repo), "--action", "docstrings", "--engine", team.url,
                       "--token-file", token, "--apply", "--workers", "3")
    err = capsys.readouterr().err
    assert status == 0, err
    assert texts(repo) == {i: documented(i) for i in range(FILES)}
    [(_, fault)] = team.failed  # the one request sent to the dead replica
    assert fault == "unavailable" and len(team.replicas) == 1
    # Every request answered since (the one being answered when it died included, 7th) went
    # to the survivor, the lost request's retry among them.
    assert {r for _, r in team.served[FILES // 2 + 1:]} == set(team.replicas)
    assert len(team.served) == 2 * FILES
    assert "replicas: 2 (" in err and "; 1 requests sent again" in err


def test_an_engine_lost_for_good_fails_every_file_fast_and_writes_none(repo, token, capsys):
    before = texts(repo)
    started = time.monotonic()
    with team_engine(TOKEN) as team:
        team.faults = ["reset"] * 1000
        status = batch(str(repo), "--action", "docstrings", "--engine", team.url,
                       "--token-file", token, "--apply", "--workers", "2")
    err = capsys.readouterr().err
    assert status == 3
    assert texts(repo) == before
    # Two targets in flight, each tried 1 + len(LOST_RETRIES) times; the rest never sent.
    assert len(team.requests) <= 2 * (1 + len(shared.LOST_RETRIES))
    assert time.monotonic() - started < 30
    failed = re.findall(r"^dg-lsp batch: failed: (\S+): (.*)$", err, re.M)
    assert len(failed) == FILES and [label for label, _ in failed] == sorted(
        label for label, _ in failed)
    assert all("the engine" in reason for _, reason in failed)
    assert any("not sent: the engine was lost (4 tries" in reason for _, reason in failed)
    assert f"files: 0 edited, 0 unchanged, {FILES} failed" in err


def test_a_file_whose_target_fails_is_left_whole_with_the_reason(repo, token, tmp_path,
                                                                  capsys):
    # One worker: the first request (mod00's first target) meets the model raising, which is
    # not worth sending again; mod00's other target is answered but not applied.
    for mode, expected_status in (("--apply", 3), ("--check", 1)):
        for i in range(FILES):
            (repo / f"mod{i:02}.py").write_text(source(i))
        with team_engine(TOKEN) as team:
            team.write, team.faults = docstring, ["failed"]
            status = batch(str(repo), "--action", "docstrings", "--engine", team.url,
                           "--token-file", token, "--workers", "1", mode,
                           "--json", str(tmp_path / "r.json"))
        err = capsys.readouterr().err
        assert status == expected_status, err
        report = json.loads((tmp_path / "r.json").read_text())
        [failed] = report["files"]["failed"]
        assert failed["file"].endswith("mod00.py")
        assert failed["reason"] == ("scale_00 at 1:30: EngineUnavailable: engine error "
                                    "(failed): scripted failed")
        assert [t["result"] for t in report["targets"][:2]] == [
            "error: EngineUnavailable: engine error (failed): scripted failed",
            NOT_APPLIED]
        assert f"failed: {failed['file']}: scale_00 at 1:30" in err
        assert texts(repo)[0] == source(0)
        edited = {i: documented(i) for i in range(1, FILES)}
        if mode == "--apply":
            assert {i: t for i, t in texts(repo).items() if i} == edited
        assert len(report["files"]["edited"]) == FILES - 1


def test_which_failures_are_sent_again():
    def unavailable(code: str) -> EngineUnavailable:
        error = EngineUnavailable("x")
        error.code = code
        return error

    assert shared.retry_kind(EngineBusy("full")) == "busy"
    assert shared.retry_kind(unavailable("unavailable")) == "lost"
    assert shared.retry_kind(unavailable("")) == "lost"  # reset, closed, silent
    for error in (unavailable("failed"), unavailable("unauthorized"), EngineRefused("x"),
                  ValueError("x"), None):
        assert shared.retry_kind(error) is None


def test_the_progress_line_says_files_failures_and_replicas_now_and_then():
    clock = [0.0]
    out = io.StringIO()
    progress = Progress(4, 2, stream=out, every=10.0, clock=lambda: clock[0])
    progress.target_done(Record("a.py", (1, 1), (1, 1), "docstring", "f", "edited",
                                replica="r1"))
    assert out.getvalue() == ""  # not a terminal: a line every 10 s, not one per target
    clock[0] = 11.0
    progress.target_done(Record("a.py", (1, 1), (1, 1), "docstring", "g", "edited",
                                replica="r2"))
    assert out.getvalue() == ("dg-lsp batch: files 0/2, targets 2/4, 0 failed, replicas 2 "
                              "(r1, r2)\n")


def test_the_batch_bench_cuts_files_and_measures_a_run_through_a_teams_engine(repo, token,
                                                                              tmp_path):
    from dg_lsp.measure.bench_batch import FUNCTIONS_PER_FILE, run_batch, write_files

    golden = Path(__file__).resolve().parents[1] / "support" / "golden" / "src"
    count = write_files(golden, 2, tmp_path / "files")
    assert count == 2
    cut = [p.read_text() for p in sorted((tmp_path / "files").iterdir())]
    assert cut[0].count("def ") == FUNCTIONS_PER_FILE  # the last file may hold fewer
    for text in cut:
        assert '"""' not in text
        compile(text, "cut.py", "exec")  # whole functions, dedented to the top level
    with team_engine(TOKEN) as team:
        team.write, team.replicas = docstring, ["r1", "r2"]
        row = run_batch(repo, ["--engine", team.url, "--token-file", token], seed=0)
    assert (row["files"], row["targets"], row["edited"], row["failedFiles"]) == (
        FILES, 2 * FILES, 2 * FILES, 0)
    assert row["filesPerMin"] > 0 and row["tokensPerSec"] > 0 and row["replicasUsed"] == 2
    assert texts(repo) == {i: source(i) for i in range(FILES)}  # --check: nothing written


def test_a_lost_resident_engine_is_not_waited_for():
    from dg_lsp.actions.targets import DOCSTRING, all_targets
    from dg_lsp.batch.job import BatchJob
    from dg_lsp.document.parsed import ParsedText
    from dg_lsp.syntax.languages import language_for
    from tests.support.scripted import Scripted

    class Dead(Scripted):
        def infill_stream(self, request, cancel=None, document=None):
            self.requests.append(request)
            raise EngineUnavailable("the engine stopped mid-request: reset")

    doc = ParsedText(source(0), language_for("python"))
    engine = Dead("unused")
    runner = shared.TargetRunner(engine, BatchJob(DOCSTRING), lost_waits=())
    first, second = (runner.run(doc, "a.py", t)[0] for t in all_targets(doc, DOCSTRING))
    assert first.result == ("error: EngineUnavailable: the engine stopped mid-request: reset")
    assert first.attempts == 1 and len(engine.calls) == 1
    assert second.result.startswith("error: not sent: the engine was lost (1 tries, the last: ")
    assert second.attempts == 0 and runner.retried == 0
