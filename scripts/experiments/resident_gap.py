"""What the resident engine costs over the in-process one, without the LSP transport.

    python scripts/experiments/resident_gap.py [CASES]    (default 32)
    python scripts/experiments/resident_gap.py pools      (one int8 linear layer: why the
                                                          model runs on one thread)

Completes the same held-out cursor cases (dg_lsp/measure/eval/heldout.py, the `dg-lsp bench` ones)
through `Pipeline.complete`, first with the model in this process, then through a resident
engine started for the run (in a private runtime folder, stopped after). Prints the p50 and
mean per completion, the denoising steps behind the suggestions shown and, for the resident
engine, the forward passes it ran: those also count requests whose suggestion was empty
(no steps shown), and any pass run ahead of the client.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.data.cases import cut_cursor_cases


def main(count: int) -> None:
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="dg-gap-")
    from engine import Engine
    from engine.serve.socket.client import EngineClient

    cases = cut_cursor_cases(heldout_sources(), count, seed=0)
    requests = [CompletionRequest(c.prefix + c.suffix, len(c.prefix), language_for("python"),
                                  "file:///gap.py") for c in cases]
    for name, backend in (("in process", Engine.load()),
                          ("resident", EngineClient.connect_or_start())):
        def complete(request: CompletionRequest, backend=backend) -> tuple[float, int]:
            start = time.perf_counter()
            completion = Pipeline(backend, Settings()).complete(request)
            return time.perf_counter() - start, completion.steps if completion else 0

        complete(requests[0])  # warm: the first request pays for loading
        before = backend.stats()["forwardPasses"] if name == "resident" else None
        runs = [complete(r) for r in requests]
        seconds = [s for s, _ in runs]
        line = (f"{name:>10}: p50 {1000 * statistics.median(seconds):.1f} ms, mean "
                f"{1000 * statistics.fmean(seconds):.1f} ms, steps used {sum(n for _, n in runs)}")
        if before is not None:
            line += f", forward passes run {backend.stats()['forwardPasses'] - before}"
            backend.shutdown()
        print(line)


def pools(runs: int = 2000) -> None:
    """Microseconds per int8 linear layer (the bundled model's 384 -> 896) on 30 rows: built
    and run on the main thread; run on a second thread while the main thread's OpenMP pool
    exists (the engine before `Scheduler.loading`); then, in a fresh process, built and run
    on a thread that alone ever started parallel work (the engine now)."""
    import subprocess
    import threading

    def on_thread(work: Callable[[], float]) -> float:
        result: list[float] = []
        thread = threading.Thread(target=lambda: result.append(work()))
        thread.start()
        thread.join()
        return result[0]

    if sys.argv[2:] == ["alone"]:
        print(f"built and run on a thread alone: {on_thread(lambda: _int8_linear(runs)())} us")
        return
    run = _int8_linear(runs)
    print(f"main thread: {run()} us")
    print(f"second thread beside the main thread's pool: {on_thread(run)} us")
    subprocess.run([sys.executable, __file__, "pools", "alone"], check=True)


def _int8_linear(runs: int) -> Callable[[], float]:
    """An int8 layer built on the calling thread, and a function timing it (us per call)."""
    import torch
    from torch import nn

    from engine.models.int8 import quantize_int8

    layer = quantize_int8(nn.Sequential(nn.Linear(384, 896)))
    x = torch.randn(1, 30, 384)

    def per_call() -> float:
        with torch.inference_mode():
            for _ in range(100):
                layer(x)
            start = time.perf_counter()
            for _ in range(runs):
                layer(x)
        return round(1e6 * (time.perf_counter() - start) / runs, 1)

    return per_call


if __name__ == "__main__":
    if sys.argv[1:2] == ["pools"]:
        pools()
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 32)
