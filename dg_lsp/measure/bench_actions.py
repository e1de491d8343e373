"""The code actions part of `dg-lsp bench`: what listing actions costs in a large file, where
an editor asks at every cursor move, and what the no-model CI gate costs.

- `textDocument/codeAction` through a real LSP client against `dg-lsp serve` (no model runs:
  listing is a search of the document's tree), in generated files of N functions whose body is
  a stub (`...`), the cursor each time in the body of another function: the first request
  (which parses the file) and the p50 / p95 of the rest; and in a file of one line of
  60,000 unclosed brackets, a broken file tree-sitter parses into a node of 60,000 children.
- `dg-lsp fill FILE --check` on the largest file, as a CI job runs it: the whole command, its
  start included, median of three.
Generated files, not held-out code: what is measured is how the cost grows with the file.
"""

from __future__ import annotations

import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from dg_lsp.measure.bench_lsp import Session, percentiles

SIZES = (2_000, 10_000)  # functions in a file
REQUESTS = 30  # code actions after the first, each at another function
BROKEN = "[" * 60_000 + "\n"


def stub_file(functions: int) -> str:
    return "".join(f"def f_{i}():\n    ...\n\n\n" for i in range(functions))


def actions_section(sizes: tuple[int, ...] = SIZES, requests: int = REQUESTS
                    ) -> dict[str, Any]:
    """{"codeActions": a row per file, "fillCheck": the command's time}."""
    rows = asyncio.run(_code_actions(sizes, requests))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "stubs.py"
        path.write_text(stub_file(max(sizes)))
        runs = []
        for _ in range(3):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "dg_lsp.cli", "fill", str(path),
                                   "--check"], capture_output=True, text=True, check=False)
            runs.append(time.perf_counter() - started)
        holes = done.stdout.count(": hole: ")
    return {"codeActions": rows,
            "fillCheck": [{"functions": max(sizes), "holesListed": holes,
                           "medianS": round(statistics.median(runs), 2)}]}


async def _code_actions(sizes: tuple[int, ...], requests: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as runtime:
        session = Session(None, "cpu", ["--engine", "inproc"], runtime)
        await session.start(load_model=False)
        try:
            rows = []
            for size in sizes:
                text = stub_file(size)
                lines = [4 * ((k * 7919) % size) + 1 for k in range(requests + 1)]
                rows.append(await _file_row(session, f"{size} stub functions", text, lines))
            rows.append(await _file_row(session, "one line of 60,000 '['", BROKEN,
                                        [0] * (requests + 1)))
            return rows
        finally:
            await session.stop()


async def _file_row(session: Session, name: str, text: str, lines: list[int]
                    ) -> dict[str, Any]:
    uri = session.open(text)
    seconds, titles = [], set()
    for line in lines:
        started = time.perf_counter()
        actions = await session.code_actions(uri, line, 5)
        seconds.append(time.perf_counter() - started)
        titles.update(a.title.split(" of ")[0] for a in actions)
    session.close(uri)
    return {"file": name, "firstMs": round(1000 * seconds[0], 1),
            **{k: v for k, v in percentiles(seconds[1:]).items() if k != "p99Ms"},
            "offered": ", ".join(sorted(titles)) or "none"}
