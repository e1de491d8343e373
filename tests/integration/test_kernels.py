"""Triton kernels in processes of their own: tests/unit/test_kernels.py again in a child with
TRITON_INTERPRET=1 (triton fixes interpreter-or-compiler for the whole process when it is first
imported), and the engine imported without triton.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.kernels._dispatch import interpreting, triton_available

ROOT = Path(__file__).resolve().parents[2]
KERNEL_TESTS = ROOT / "tests" / "unit" / "test_kernels.py"


@pytest.mark.skipif(
    not triton_available() or interpreting() or torch.cuda.is_available(),
    reason="triton missing, or this process runs the kernels itself",
)
def test_kernels_under_the_interpreter() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    only_kernels = "not bench"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", only_kernels,
           str(KERNEL_TESTS)]
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(run.stdout[-3000:])
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
    assert "skipped" not in run.stdout, run.stdout[-3000:]


def test_importing_the_engine_does_not_import_triton() -> None:
    code = (
        "import sys, torch; import engine.engine, engine.decode.samplers as s;"
        "s.propose(torch.randn(3, 50), 0.0);"
        "assert 'triton' not in sys.modules, 'triton imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
