"""`dg-lsp batch --engine URL` through a real team engine of two replicas (`dg-engine serve
--ray --replicas 2`, its own local Ray cluster, the bundled model), one replica SIGKILLed
mid-run: the lost requests are sent again and land on the other replica, no file is
half-written, every file is accounted for in the summary. The token comes on standard input,
as the CI recipe in docs/team.md hands it. tests/integration/test_batch_team.py tests the same logic
without Ray, every kind of failure scripted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray.serve", reason="Ray is optional: pip install 'dg-lsp[distributed]'")
# A Ray cluster of its own.
pytestmark = pytest.mark.e2e

from dg_lsp.document.parsed import ParsedText  # noqa: E402
from dg_lsp.syntax.errors import count_errors  # noqa: E402
from dg_lsp.syntax.languages import language_for  # noqa: E402
from engine.serve.team.remote import RemoteEngine  # noqa: E402
from tests.support.ray_cluster import (  # noqa: E402
    STARTUP,
    TEAM_TOKEN,
    clean_env,
    kill_group,
    serve_ray,
    tmp_path,  # noqa: F401 - the short temp dir Ray's socket paths need
    wait_serving,
)
from tests.support.wait import wait_for  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "engine" / "bundled" / "default"
FILES = 30
FRESH = 0.25  # seconds: a report this new was made well inside one request (its passes)


def module_source(i: int) -> str:
    return (f'"""Helpers, part {i}."""\n\n\n'
            f"def scale_{i}(values, factor):\n    return [v * factor + {i} for v in values]\n\n\n"
            f"def total_{i}(values):\n    return sum(values) - {i}\n\n\n"
            f"def largest_{i}(values):\n    return max(values, default={i})\n")


def files_of(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*.py"))}


def test_a_batch_through_two_replicas_survives_one_killed_mid_run(tmp_path):  # noqa: F811
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    for i in range(FILES):
        (repo / "src" / f"mod{i:02}.py").write_text(module_source(i))
    original = files_of(repo)
    process, listen, _ = serve_ray(tmp_path, clean_env(tmp_path), BUNDLED,
                                   options=("--replicas", "2"))
    try:
        wait_serving(process, tmp_path)
        url = f"http://127.0.0.1:{listen}"
        engine = RemoteEngine(url, TEAM_TOKEN)
        wait_for(lambda: len(engine.status()["replicas"]) == 2, STARTUP, "two replicas",
                 interval=0.5)
        started = time.monotonic()
        log = (tmp_path / "batch.err").open("w")
        run = subprocess.Popen(
            [sys.executable, "-m", "dg_lsp.cli", "batch", "src", "--action", "docstrings",
             "--engine", url, "--token-file", "-", "--apply", "--output", "../out.patch",
             "--json", "../report.json"],
            cwd=repo, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=log, text=True,
            env=os.environ | {"PYTHONPATH": str(ROOT)})
        log.close()
        run.stdin.write(TEAM_TOKEN + "\n")  # as `printenv DG_TOKEN | dg-lsp batch ...`
        run.stdin.close()

        def busy_replica() -> dict | None:
            """A replica with requests in flight now: a third of the targets done, and a report
            made within FRESH seconds that shows two or more live requests. A replica's report is
            up to a report period old; killed on an older one, it may have finished them all
            (seen on CI: "live 3", retried 0) and lose nothing to retry."""
            assert run.poll() is None, (tmp_path / "batch.err").read_text()
            replicas, now = engine.status()["replicas"], time.time()
            if sum(r.get("completed", 0) for r in replicas) < 12:
                return None
            busy = [r for r in replicas
                    if r.get("live", 0) >= 2 and now - r.get("reportedAt", 0) <= FRESH]
            return max(busy, key=lambda r: r["live"], default=None)

        victim = wait_for(busy_replica, 120, "a third of the targets, two in flight on one replica",
                          interval=0.05)
        os.kill(victim["pid"], signal.SIGKILL)
        killed_at = time.monotonic() - started
        run.wait(300)
        seconds = time.monotonic() - started
        err = (tmp_path / "batch.err").read_text()
    finally:
        kill_group(process)
    print(err)
    print(f"batch {seconds:.1f} s, replica {victim['replica']} (live {victim.get('live')}) "
          f"killed at {killed_at:.1f} s")
    report = json.loads((tmp_path / "report.json").read_text())
    failed = {f["file"]: f["reason"] for f in report["files"]["failed"]}
    edited, unchanged = set(report["files"]["edited"]), set(report["files"]["unchanged"])
    # Every file accounted for, once; the exit status as documented (3: a file failed).
    assert sorted([*edited, *unchanged, *failed]) == sorted(original)
    assert run.returncode == (3 if failed else 0), err
    assert f"files: {len(edited)} edited, {len(unchanged)} unchanged, {len(failed)} failed" in err
    for label, reason in failed.items():
        assert f"dg-lsp batch: failed: {label}: {reason}" in err
    # No file half-written: each is what it was, or what the patch makes of it.
    patched = tmp_path / "patched"
    for label, text in original.items():  # the files as they were, the patch applied
        (patched / label).parent.mkdir(parents=True, exist_ok=True)
        (patched / label).write_text(text)
    applied = subprocess.run(["git", "apply", "--unsafe-paths", str(tmp_path / "out.patch")],
                             cwd=patched, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    now, expected = files_of(repo), files_of(patched)
    for label, text in now.items():
        assert text == (expected[label] if label in edited else original[label]), label
        if label in edited:
            assert text != original[label]
            python = language_for(None, label)
            assert count_errors(ParsedText(text, python).tree) == 0
    assert len(edited) >= FILES // 2  # the model does write docstrings
    # The replica was lost mid-run: its requests were sent again, to the other one.
    assert report["retried"] >= 1, err
    assert victim["replica"] in report["replicas"] and len(report["replicas"]) >= 2
    assert "requests sent again" in err and "replicas: " in err
