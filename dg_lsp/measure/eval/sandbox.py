"""Execution-based checking of HumanEval-Infilling completions.

The program `prompt + completion + suffix + "\\n" + test + "\\n" + check(entry_point)` runs in a
fresh, isolated interpreter (`python -I -S`: no site-packages, PYTHON* variables ignored) with an
empty environment, in a temporary directory that is deleted afterwards, with limits on CPU time,
memory, file size and core dumps. Network: the child enters new user and network namespaces where
the kernel allows it (no interfaces but a down loopback), and an audit hook refuses sockets anyway.

A completion passes only if the process exits 0 *and* prints a per-run random marker after
`check` returned, so `sys.exit(0)` or `os._exit(0)` inside the completion is a failure, not a pass.
The whole process group is killed at the wall-clock timeout, so an infinite loop (or a child
process it started) cannot hang the evaluation.
"""

from __future__ import annotations

import ctypes
import os
import resource
import secrets
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MEMORY_LIMIT_BYTES = 2 * 1024**3
FILE_SIZE_LIMIT_BYTES = 16 * 1024**2
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

# Runs before the program: any socket operation raises, which `sys.addaudithook` cannot undo.
NO_NETWORK_PRELUDE = """\
import sys as _dg_sys
def _dg_no_network(event, args):
    if event.startswith("socket."):
        raise PermissionError("network access is disabled in the dg-lsp eval sandbox")
_dg_sys.addaudithook(_dg_no_network)
del _dg_sys, _dg_no_network
"""

_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


@dataclass
class ExecutionResult:
    passed: bool
    reason: str  # "passed", "failed" (exit status / no marker), "timeout"
    detail: str = ""  # the end of stderr, for reading failures


def program_text(prompt: str, completion: str, suffix: str, test: str, entry_point: str) -> str:
    """The program upstream's harness runs for one completion."""
    return prompt + completion + suffix + "\n" + test + "\n" + f"check({entry_point})\n"


def run_program(program: str, timeout: float = 3.0) -> ExecutionResult:
    """Run `program` in the sandbox; passes when it finishes normally within `timeout` seconds."""
    marker = secrets.token_hex(16)
    source = NO_NETWORK_PRELUDE + program + f"\nprint({marker!r}, flush=True)\n"
    with tempfile.TemporaryDirectory(prefix="dg-eval-") as workdir:
        work = Path(workdir)
        (work / "program.py").write_text(source, encoding="utf-8")
        with open(work / "stdout", "wb") as out, open(work / "stderr", "wb") as err:
            process = subprocess.Popen(
                [sys.executable, "-I", "-S", "program.py"],
                cwd=work,
                env={},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,  # its own process group, killed as a whole
                preexec_fn=_limit_child(timeout),
            )
            try:
                process.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(process)
        stderr = (work / "stderr").read_bytes()[-2000:].decode("utf-8", "replace")
        if timed_out:
            return ExecutionResult(False, "timeout", stderr)
        printed = (work / "stdout").read_bytes()
        if process.returncode == 0 and printed.splitlines()[-1:] == [marker.encode()]:
            return ExecutionResult(True, "passed")
        return ExecutionResult(False, "failed", stderr)


def check_completion(
    prompt: str, completion: str, suffix: str, test: str, entry_point: str, timeout: float = 3.0
) -> ExecutionResult:
    return run_program(program_text(prompt, completion, suffix, test, entry_point), timeout)


def _limit_child(timeout: float):
    cpu_seconds = int(timeout) + 1

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds))
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT_BYTES, FILE_SIZE_LIMIT_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if _LIBC is not None:
            # Best effort: fails harmlessly where user namespaces are disabled.
            _LIBC.unshare(CLONE_NEWUSER | CLONE_NEWNET)

    return apply


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()
