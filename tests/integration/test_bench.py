"""`dg-lsp bench` runs end to end and reports every request class and sampler it measures.

What it prints are measurements, not pass/fail: this checks the report's shape and counts on
eight cases (cut from the golden test's small sources), not its speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.data.cases import CURSOR_CLASSES

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_SOURCES = ROOT / "tests" / "support" / "golden" / "src"


@pytest.mark.slow  # a whole `dg-lsp bench` run in another process: over a minute on 2 cores
def test_bench_reports_both_paths_request_classes_cursor_classes_and_samplers(tmp_path: Path):
    if not (ROOT / "engine" / "bundled" / "default" / "config.json").exists():
        pytest.skip("the bundled model is not present")
    result = subprocess.run(
        [sys.executable, "-m", "dg_lsp.cli", "bench", "--limit", "8", "--functions", "1",
         "--cases-from", str(GOLDEN_SOURCES), "--section", "lsp", "--section", "samplers",
         "--section", "memory", "--ar-model", "", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=900,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(tmp_path),
             "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert (report["cases"], report["lsp"]["cursorCases"]) == (8, 8)
    paths = ["default (resident engine)", "in-process (--engine inproc)"]
    latency = [(row["path"], row["requests"]) for row in report["lsp"]["latency"]]
    assert latency == [(p, r) for p in paths for r in ("cold", "warm", "typed-through")]
    rows = {(row["path"], row["requests"]): row for row in report["lsp"]["latency"]}
    for path in paths:
        assert rows[path, "cold"]["count"] == 8 and rows[path, "cold"]["p50Ms"] > 0
        # every keystroke of the typed function and of each case's first characters asked
        typed = rows[path, "warm"]["count"] + rows[path, "typed-through"]["count"]
        assert typed > 8 * 6
    classes = [(row["path"], row["cursor"]) for row in report["lsp"]["cursorClasses"]]
    assert classes == [(p, c) for p in paths for c in (*CURSOR_CLASSES, "pooled")]
    assert all(0 <= row["editSimilarity"] <= 1 for row in report["lsp"]["cursorClasses"])
    assert [row["sampler"] for row in report["samplers"]] == [
        "top-k k=1", "threshold 0.9", "threshold 0.5", "entropy 0.1"]
    assert all(row["cases"] == 8 and row["passesPerCompletion"] >= 1
               for row in report["samplers"])
    assert all(rss > 100 for rss in report["memory"]["serverPeakRssMb"].values())
    assert not (tmp_path / "dg-engine").exists()  # the bench's engine ran in its own folder


def test_the_actions_section_times_real_answers():
    """Small files, so that the test is quick: every request answered with the action a stub
    body gets, and the fill check listing every hole."""
    from dg_lsp.measure.bench_actions import actions_section

    report = actions_section(sizes=(20, 40), requests=3)
    rows = {row["file"]: row for row in report["codeActions"]}
    assert list(rows) == ["20 stub functions", "40 stub functions", "one line of 60,000 '['"]
    assert rows["40 stub functions"]["offered"] == "Complete function body"
    assert all(row["firstMs"] > 0 and row["p50Ms"] > 0 for row in rows.values())
    assert report["fillCheck"][0]["functions"] == 40
    assert report["fillCheck"][0]["holesListed"] == 40
