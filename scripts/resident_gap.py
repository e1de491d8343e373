"""What the resident engine costs over the in-process one, without the LSP transport.

    python scripts/resident_gap.py [CASES]      (default 32)

Completes the same held-out cursor cases (dg_lsp/eval/heldout.py, the `dg-lsp bench` ones)
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

from dg_lsp.eval.cases import cut_cursor_cases
from dg_lsp.eval.heldout import heldout_sources
from dg_lsp.languages import language_for
from dg_lsp.pipeline import CompletionRequest, Pipeline
from dg_lsp.settings import Settings


def main(count: int) -> None:
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="dg-gap-")
    from engine import Engine
    from engine.serve.client import EngineClient

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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 32)
