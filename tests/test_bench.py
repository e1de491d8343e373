"""`dg-lsp bench` runs end to end and reports every request class and sampler it measures.

What it prints are measurements, not pass/fail: this checks the report's shape and counts on
two cases (cut from this project's own sources), not its speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_bench_reports_lsp_request_classes_and_each_sampler(tmp_path: Path):
    if not (ROOT / "engine" / "bundled" / "default" / "config.json").exists():
        pytest.skip("the bundled model is not present")
    result = subprocess.run(
        [sys.executable, "-m", "dg_lsp.cli", "bench", "--limit", "2", "--section", "lsp",
         "--section", "samplers", "--section", "memory", "--ar-model", "", "--json"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report["cases"] == 2
    latency = {row["requests"]: row for row in report["lsp"]["latency"]}
    assert list(latency) == ["cold", "warm", "cache hit"]
    assert latency["cold"]["count"] == latency["warm"]["count"] == 2
    assert latency["cold"]["p50Ms"] > 0
    assert [row["sampler"] for row in report["samplers"]] == [
        "top-k k=1", "threshold 0.9", "threshold 0.5", "entropy 0.1"]
    assert all(row["cases"] == 2 and row["passesPerCompletion"] >= 1
               for row in report["samplers"])
    assert report["memory"]["serverPeakRssMb"] > 100
