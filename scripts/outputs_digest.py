"""Every output a refactor must keep, written as JSON lines to compare across commits.

    python scripts/outputs_digest.py --out /tmp/before.jsonl            # on the old commit
    python scripts/outputs_digest.py --out /tmp/after.jsonl             # on the new one
    cmp /tmp/before.jsonl /tmp/after.jsonl

For each bundled model (the diffusion default and the autoregressive baseline), on `--limit`
held-out cursors (dg_lsp/measure/eval/heldout.py, the bench's cursors):
- the completion the language server's pipeline shows (default settings, dtype auto; a
  fresh pipeline each time, so no cache) (text, range, passes, confidence), with
  the engine in this process and through the resident engine over its socket;
- the engine's raw drafts for the same cursor as an infill, a rewrite of the held-out text and
  a two-hole fill (each draft's token ids), in process.
Every line is one request, so a difference names the request it is in. One thread for every
pass, here and in the resident engine: the engine otherwise picks its threads by the machine's
load (engine/threads.py), and a float sum over another number of threads may differ in its
last bits, which can move a confidence.
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"  # before torch is imported; the resident engine inherits it

import argparse
import json
import sys
import tempfile
from pathlib import Path

from dg_lsp.completion.pipeline import Completion, CompletionRequest, Pipeline
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.data.cases import cut_cursor_cases
from engine.models import BUNDLED_MODELS
from engine.types import HolesRequest, InfillRequest, RewriteRequest, last_draft


def _completion(pipeline: Pipeline, text: str, offset: int) -> dict:
    request = CompletionRequest(text, offset, language_for(None, "case.py"), "file:///case.py")
    ctx, drafts = pipeline.start(request)
    decided = pipeline.decide(request, ctx, last_draft(drafts), asked=True)
    if isinstance(decided, Completion):
        return {"text": decided.text, "start": decided.start, "end": decided.end,
                "kind": decided.kind, "steps": decided.steps,
                "confidence": decided.confidence, "below": decided.below_gate}
    return {"hidden": decided.reason, "confidence": decided.confidence}


def _drafts(stream) -> list:
    return [[d.step, d.committed, d.token_ids, d.text, d.finish_reason, list(d.holes)]
            for d in stream]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=int, default=200)
    args = parser.parse_args()
    from engine.engine import Engine
    from engine.serve.socket.client import EngineClient

    cases = cut_cursor_cases(heldout_sources(), args.limit, seed=0)
    runtime = tempfile.mkdtemp(prefix="dg-digest-")
    os.environ["XDG_RUNTIME_DIR"] = runtime  # a resident engine of its own, never the user's
    with args.out.open("w") as out:
        for model in (BUNDLED_MODELS / "default", BUNDLED_MODELS / "ar-baseline"):
            engine = Engine.load(str(model), device="cpu")
            client = EngineClient.connect_or_start(str(model), "cpu")
            settings = Settings()
            for case in cases:
                text = case.file_before + case.file_after
                offset = len(case.file_before)
                row: dict = {"model": model.name, "case": case.id}
                for name, backend in (("inproc", engine), ("resident", client)):
                    row[name] = _completion(Pipeline(backend, settings), text, offset)
                infill = InfillRequest(case.prefix, case.suffix, 16)
                row["infill"] = _drafts(engine.infill_stream(infill))
                if case.middle.strip():
                    rewrite = RewriteRequest(case.prefix, case.suffix, case.middle)
                    row["rewrite"] = _drafts(engine.rewrite_stream(rewrite))
                half = len(case.suffix) // 2
                holes = HolesRequest((case.prefix, case.suffix[:half], case.suffix[half:]),
                                     (8, 8))
                row["holes"] = _drafts(engine.holes_stream(holes))
                out.write(json.dumps(row, sort_keys=True) + "\n")
                out.flush()
            client.shutdown()
            print(f"{model.name}: {len(cases)} cases", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
