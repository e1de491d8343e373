"""Background load for `dg-lsp bench --load`: the latency a user gets while the machine does
something else, as a developer's machine always does.

- `busy:N`: N processes that each keep one core busy (a Python loop);
- `compile:N`: N loops that each compile a generated C file with `cc -O2`, again and again,
  as a build in another terminal does: compilers start, run a second or so and exit.

The load runs in a process group of its own and is ended, the group whole, when the
measurement under it is done.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import TracebackType

KINDS = ("busy", "compile")
MAX_PROCESSES = 64


def parse_load(spec: str) -> tuple[str, int]:
    """`busy:N` or `compile:N` (N defaults to 1) as (kind, N); ValueError naming the spec."""
    kind, _, count = spec.partition(":")
    if kind not in KINDS or not (count == "" or count.isdigit()):
        raise ValueError(f"--load {spec!r}: expected busy:N or compile:N")
    n = int(count or 1)
    if not 1 <= n <= MAX_PROCESSES:
        raise ValueError(f"--load {spec!r}: N must be in 1..{MAX_PROCESSES}")
    if kind == "compile" and shutil.which("cc") is None:
        raise ValueError(f"--load {spec!r}: needs a C compiler (cc) on PATH")
    return kind, n


def describe(kind: str, n: int) -> str:
    """How a report names the load."""
    plural = "es" if n > 1 else ""
    return (f"{n} busy process{plural}" if kind == "busy"
            else f"{n} compile loop{'s' if n > 1 else ''} (cc -O2)")


class BackgroundLoad:
    """`with BackgroundLoad("busy", 1): ...`: the load runs for the block's duration."""

    def __init__(self, kind: str, n: int) -> None:
        self.kind, self.n = kind, n
        self._processes: list[subprocess.Popen] = []
        self._folder: tempfile.TemporaryDirectory | None = None

    def __enter__(self) -> BackgroundLoad:
        if self.kind == "compile":
            self._folder = tempfile.TemporaryDirectory(prefix="dg-bench-load-")
            source = Path(self._folder.name) / "load.c"
            source.write_text(c_source())
        for i in range(self.n):
            self._processes.append(subprocess.Popen(
                self._command(i), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
                cwd=self._folder.name if self._folder else None))
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for process in self._processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        self._processes.clear()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None

    def _command(self, i: int) -> list[str]:
        if self.kind == "busy":
            return [sys.executable, "-c", "while True: pass"]
        return ["sh", "-c", f"while :; do cc -O2 -c load.c -o load{i}.o; done"]


def c_source(functions: int = 150) -> str:
    """A C file that takes `cc -O2` about a second on one core: functions with loops for the
    optimizer to work on."""
    body = "\n".join(
        f"int f{i}(int *a, int n) {{ int s = {i}; for (int j = 0; j < n; j++) "
        f"{{ s = s * 31 + a[j] * {i % 7 + 1}; if (s % {i % 5 + 2}) s ^= a[(j + {i}) % n]; }} "
        f"return s; }}" for i in range(functions))
    calls = " + ".join(f"f{i}(a, n)" for i in range(functions))
    return f"{body}\nint all(int *a, int n) {{ return {calls}; }}\n"
