"""Running the VS Code extension's npm commands, for the VS Code tests."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VSCODE = ROOT / "editors" / "vscode"


def run(command: list[str], env: dict[str, str], timeout: float) -> str:
    """Runs `command` in editors/vscode; kills its whole process group (servers too) after.
    One npm command at a time across the suite's workers (`pytest -n`): two at once in one
    node_modules fail (`npm ci`: ENOTEMPTY) or see it half-built."""
    with (Path(tempfile.gettempdir()) / "dg-lsp-vscode-npm.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _run(command, env, timeout)


def _run(command: list[str], env: dict[str, str], timeout: float) -> str:
    proc = subprocess.Popen(command, cwd=VSCODE, env=env, start_new_session=True, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        pytest.fail(f"{' '.join(command)} timed out after {timeout} s:\n{output[-4000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, f"{' '.join(command)} failed:\n{output[-6000:]}"
    return output
