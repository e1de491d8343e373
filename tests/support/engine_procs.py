"""Helpers for tests that run `dg-engine serve` and act as another local user."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from engine.serve.socket.endpoint import Endpoint

NOBODY = 65534  # the attacker: another uid (and gid) than the test's

needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="acting as a second user needs root (setuid in a child)")


@contextlib.contextmanager
def serving(model: Path, socket_path: Path, *args: str, stderr: Path | None = None
            ) -> Iterator[tuple[subprocess.Popen, Endpoint]]:
    """`dg-engine serve` of `model` (cpu, float32) on `socket_path`, stopped afterwards."""
    log = open(stderr, "wb") if stderr else None  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "serve", "--model", str(model), "--device", "cpu",
         "--dtype", "float32", "--socket", str(socket_path), *args], stderr=log)
    endpoint = Endpoint(socket_path)
    try:
        assert endpoint.wait_alive(timeout=300, give_up=lambda: process.poll() is not None)
        yield process, endpoint
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)  # a test may have stopped it
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
        if log:
            log.close()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def gone(pid: int) -> bool:
    """Whether `pid` has exited (a zombie counts: it runs no code and holds no lock)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


class Attacker:
    """`action()` run in a forked child as uid/gid NOBODY, in the directory `cwd` (entered
    before dropping root, so relative paths work below directories nobody may traverse).
    The child reports ready (after `setup`, still root-free) and then its JSON result."""

    def __init__(self, cwd: Path, action: Callable[[Callable[[], None]], Any]) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 1
            try:
                os.close(read)
                os.chdir(cwd)
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                result = action(lambda: os.write(write, b"ready\n"))
                os.write(write, json.dumps(result).encode() + b"\n")
                code = 0
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                os.write(write, json.dumps({"error": repr(exc)}).encode() + b"\n")
            finally:
                os._exit(code)
        os.close(write)
        self.pid, self.pipe, self.buffer = pid, read, b""

    def _line(self, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            assert left > 0, "the attacker child did not answer"
            if select.select([self.pipe], [], [], left)[0]:
                chunk = os.read(self.pipe, 65536)
                assert chunk, f"the attacker child died: {self.buffer!r}"
                self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line

    def wait_ready(self, timeout: float = 30) -> None:
        line = self._line(timeout)
        assert line == b"ready", line

    def result(self, timeout: float = 30) -> Any:
        try:
            line = self._line(timeout)
            if line == b"ready":
                line = self._line(timeout)
            return json.loads(line)
        finally:
            os.close(self.pipe)
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)


def as_attacker(cwd: Path, action: Callable[[], Any]) -> Any:
    """`action()`'s JSON result, run as NOBODY in `cwd`."""
    return Attacker(cwd, lambda ready: action()).result()
