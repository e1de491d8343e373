"""`dg-lsp doctor` and `dg-lsp --version`: what a user sees when something does not work.

A running engine in the report is tested beside the resident engine
(tests/integration/test_resident.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

import dg_lsp
from dg_lsp.cli import doctor
from dg_lsp.syntax import languages
from engine.models.checkpoint import BUNDLED_MODEL_DIR, resolve_device
from engine.serve.socket.endpoint import resolved_device


def dg_lsp_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dg_lsp.cli", *args], capture_output=True,
                          text=True, timeout=300)


def test_version_is_the_package_version():
    run = dg_lsp_cli("--version")
    assert (run.returncode, run.stdout) == (0, f"dg-lsp {dg_lsp.__version__}\n")


def test_a_healthy_install_reports_model_device_grammars_and_no_engine():
    run = dg_lsp_cli("doctor", "--device", "cpu")
    assert run.returncode == 0, run.stdout
    lines = run.stdout.splitlines()
    assert f"model:       {BUNDLED_MODEL_DIR} (masked family, dream layout, " in run.stdout
    assert "device:      cpu -> cpu (asked for)" in lines
    grammars = next(line for line in lines if line.startswith("grammars:"))
    for name in ("python", "javascript", "typescript", "tsx", "rust", "go"):
        assert f" {name} " in grammars
    assert any(line.startswith("engine:      not running (the first completion starts one at ")
               for line in lines)
    assert lines[-1] == "no problems found"


def test_a_missing_model_is_broken_with_the_fix_in_words(tmp_path: Path):
    run = dg_lsp_cli("doctor", "--model", str(tmp_path / "nowhere"), "--device", "cpu")
    assert run.returncode == 1
    assert f"model:       BROKEN: {tmp_path / 'nowhere'}: no such checkpoint folder" in run.stdout
    assert "  fix: pass --model a checkpoint folder" in run.stdout


def test_missing_query_files_are_broken(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]):
    monkeypatch.setattr(languages, "GRAMMARS_DIR", tmp_path)
    languages._load_query.cache_clear()
    try:
        args = argparse.Namespace(model=None, device="cpu", dtype="auto", seed=0, json=False,
                                  engine=None, token_file=None)
        assert doctor.run(args) == 1
    finally:
        languages._load_query.cache_clear()
    out = capsys.readouterr().out
    assert f"grammars:    BROKEN: python: query file missing ({tmp_path}/python/context.scm)" \
        in out
    assert "6 problem(s):" in out


def test_auto_resolves_without_torch_to_the_device_torch_picks():
    expected = str(resolve_device("auto"))
    assert resolved_device("auto") == ("cuda:0" if expected == "cuda" else expected)
    assert resolved_device("CUDA") == "cuda:0"
    assert resolved_device("cuda:1") == "cuda:1"


@pytest.mark.parametrize("gb, line, fix", [
    (24, "memory:      15.40 GB in bfloat16 at one request; a 24 GB GPU has 24 GB "
         "(dg-engine plan)", None),
    (12, "memory:      BROKEN: needs 15.40 GB in bfloat16 at one request; a 12 GB GPU has "
         "12 GB", '  fix: use --dtype int4 ("dtype": "int4"): 4-bit weights, 5.24 GB at one '
                  "request (dg-engine plan)"),
    (4, "memory:      BROKEN: needs 15.40 GB in bfloat16 at one request, 5.24 GB even at "
        "int4; a 4 GB GPU has 4 GB", "  fix: a device with more memory (dg-engine plan "
                                     "--memory-gb)"),
])
def test_a_model_too_large_for_the_device_in_16_bits_is_pointed_at_int4(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gb: int, line: str, fix: str | None
) -> None:
    import json

    from engine.models import plan
    from tests.support.published_configs import PUBLISHED

    (tmp_path / "config.json").write_text(json.dumps(PUBLISHED["dream-coder-7b"]))
    monkeypatch.setattr(plan, "device_memory", lambda device: (f"a {gb} GB GPU", gb * 10**9))
    report = doctor.Report()
    doctor.check_memory(report, str(tmp_path), "cuda", "auto")
    assert report.lines == [line]
    problem = f"memory: {line.partition('BROKEN: ')[2]}\n{fix}"
    assert report.problems == ([] if fix is None else [problem])
