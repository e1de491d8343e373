"""Forward passes and in-process time per completion on the confidence gate's held-out cursors
(the three sets of docs/usage.md pooled, 310 distinct), default settings, gate off: what
choosing between the file's texts (Context.repeats) adds. Run it at two commits, back to back.

    python scripts/experiments/completion_passes.py LABEL
"""

from __future__ import annotations

import statistics
import sys
import time

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine import Engine
from engine.data.cases import cut_cursor_cases
from engine.types import last_draft

SETS = ((80, 0), (80, 1), (160, 0))  # (cursors, seed), as `dg-lsp bench --section gate` cuts them


def main(label: str) -> None:
    folder = heldout_sources()
    cases = {}
    for count, seed in SETS:
        for case in cut_cursor_cases(folder, count, seed=seed):
            cases.setdefault(case.id, case)
    pipeline = Pipeline(Engine.load(None, device="cpu"), Settings(min_confidence=0.0))
    python = language_for("python")
    passes, ms = [], []
    for case in cases.values():
        start = time.perf_counter()
        _, drafts = pipeline.start(CompletionRequest(*case.document(), python))
        last = last_draft(drafts)
        ms.append((time.perf_counter() - start) * 1000)
        passes.append(last.step if last else 0)
    print(f"{label}: {len(passes)} cursors, {statistics.fmean(passes):.2f} passes a completion, "
          f"p50 {statistics.median(ms):.1f} ms, p95 {statistics.quantiles(ms, n=20)[18]:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "now")
