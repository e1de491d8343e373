"""Three ways to complete at the held-out cursors where other lines of the file hold a text at
the cursor's place (dg_lsp.context.Context.repeats), gate off, default settings:

- written freely: the hole as the model writes it, no texts offered;
- own text beside: written freely, then the model chooses between the file's texts and its
  own (the first version);
- file's texts first (dg_lsp.completion.pipeline now): the model chooses one of the file's texts or
none,
  and writes freely only after none.

Prints exact match, edit similarity and forward passes of each on those cursors (the gate's
three held-out sets pooled, 310 distinct cursors). ~2 min on 2 CPU cores.

    python scripts/experiments/file_texts.py
"""

from __future__ import annotations

import statistics
from dataclasses import replace

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.completion.postprocess import postprocess, unit_end
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine import Engine
from engine.data.cases import cut_cursor_cases
from engine.types import InfillRequest, last_draft

SETS = ((80, 0), (80, 1), (160, 0))  # (cursors, seed), as `dg-lsp bench --section gate` cuts them


def main() -> None:
    folder = heldout_sources()
    cases = {}
    for count, seed in SETS:
        for case in cut_cursor_cases(folder, count, seed=seed):
            cases.setdefault(case.id, case)
    engine = Engine.load(None, device="cpu")
    settings = Settings(min_confidence=0.0)
    pipeline = Pipeline(engine, settings)
    python = language_for("python")
    results: dict[str, list[tuple[bool, float, int]]] = {
        "written freely": [], "own text beside": [], "file's texts first": []}

    def run(ask: InfillRequest, ctx) -> tuple[str, int]:
        last = last_draft(engine.infill_stream(ask))
        shown = postprocess(last.text, ctx) if last else None
        return (shown.text if shown else ""), (last.step if last else 0)

    for case in cases.values():
        ctx = pipeline.context(CompletionRequest(*case.document(), python))
        if not ctx.repeats:
            continue
        ask = InfillRequest(ctx.prefix, ctx.suffix, settings.hole_size[ctx.kind],
                            settings.sampler, settings.canvas_length, settings.suffix_fraction,
                            until=unit_end(ctx))
        own, own_passes = run(ask, ctx)
        beside, passes = own, own_passes
        if own not in ctx.repeats:
            beside, more = run(replace(ask, choices=(*ctx.repeats, *([own] if own else []))), ctx)
            passes += more
        first, first_passes = run(replace(ask, choices=ctx.repeats), ctx)
        if not first:
            first, first_passes = own, first_passes + own_passes
        lines = case.middle.count("\n") + 1
        for name, text, n in (("written freely", own, own_passes),
                              ("own text beside", beside, passes),
                              ("file's texts first", first, first_passes)):
            seen = "\n".join(text.split("\n")[:lines])
            results[name].append((exact_match(seen, case.middle),
                                  edit_similarity(seen, case.middle), n))
    for name, rows in results.items():
        print(f"{name}: {len(rows)} cursors, exact {sum(r[0] for r in rows)}, edit similarity "
              f"{statistics.fmean(r[1] for r in rows):.3f}, "
              f"{statistics.fmean(r[2] for r in rows):.2f} passes")


if __name__ == "__main__":
    main()
