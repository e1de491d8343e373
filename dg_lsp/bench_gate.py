"""The gate part of `dg-lsp bench`: what the confidence gate hides and what it keeps.

The cursors are the lsp section's (engine/cases.py `cut_cursor_cases`, the same seed and
documents). Each runs the default path once in process (`Pipeline`, default settings but
`minConfidence` 0) and keeps what it would show with the engine's Score of it; the gate is a
filter on that Score (dg_lsp.gate), so the curve at every threshold comes from the one run.
What is shown is scored as the lsp section scores it (cut to as many lines as the reference).

The default threshold is chosen by `choose`: the most right suggestions per wrong one shown,
among the thresholds that still show a suggestion at at least a third of the cursors.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any

from dg_lsp.eval.scoring import edit_similarity, exact_match
from engine.cases import Case

# Denser where the bundled model's curve crosses a third of the cursors shown.
THRESHOLDS = (0.0, 0.05, 0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8)
MIN_SHOWN = 1 / 3  # the rule's floor: at least this share of cursors still gets a suggestion


@dataclass
class Shown:
    """One cursor's suggestion with the gate off: its class, its Score and how it scores."""

    id: str
    kind: str
    lowest: float | None  # engine.types.Score.lowest; None: no suggestion (or no score)
    exact: bool
    similarity: float
    mean: float | None = None  # engine.types.Score.mean (compared in the README, not gated)
    shown: str = ""


def run_cursors(cases: list[Case], model: str | None, device: str) -> list[Shown]:
    """Every cursor through the default path with the gate off."""
    from dg_lsp.languages import language_for
    from dg_lsp.pipeline import CompletionRequest, Pipeline, _last_draft
    from dg_lsp.settings import Settings
    from engine import Engine

    settings = Settings(model=model, device=device, min_confidence=0.0)
    pipeline = Pipeline(Engine.load(model, device=device), settings)
    python = language_for("python")
    rows = []
    for case in cases:
        request = CompletionRequest(*case.document(), python)
        ctx, drafts = pipeline.start(request)
        last = _last_draft(drafts)
        completion = pipeline.finish(request, ctx, last)
        if completion is None or last is None or last.score is None:
            rows.append(Shown(case.id, case.kind, None, False, 0.0))
            continue
        seen = "\n".join(completion.text.split("\n")[: case.middle.count("\n") + 1])
        rows.append(Shown(case.id, case.kind, last.score.lowest, exact_match(seen, case.middle),
                          round(edit_similarity(seen, case.middle), 3),
                          round(last.score.mean, 4), seen))
    return rows


def curve(rows: list[Shown], thresholds: tuple[float, ...] = THRESHOLDS) -> list[dict]:
    """At each threshold: the share of cursors shown, and the exact match, edit similarity
    and right-per-wrong of what is shown."""
    out = []
    for threshold in thresholds:
        shown = [r for r in rows if r.lowest is not None and r.lowest >= threshold]
        right = sum(r.exact for r in shown)
        out.append({
            "minConfidence": threshold, "cursors": len(rows), "shown": len(shown),
            "shownRate": round(len(shown) / len(rows), 3) if rows else None,
            "exactMatch": round(right / len(shown), 3) if shown else None,
            "editSimilarity": (round(statistics.fmean(r.similarity for r in shown), 3)
                               if shown else None),
            "rightPerWrong": (round(right / (len(shown) - right), 3)
                              if len(shown) > right else None)})
    return out


def choose(points: list[dict]) -> float:
    """The rule: the most right suggestions per wrong one shown, among the thresholds that
    show at least MIN_SHOWN of the cursors; ties go to the lower threshold (shows more)."""
    eligible = [p for p in points
                if p["shownRate"] is not None and p["shownRate"] >= MIN_SHOWN]
    if not eligible:
        return 0.0
    # Right per wrong is exact / (1 - exact): the most of it is the highest exact-match rate.
    best = max(eligible, key=lambda p: (p["exactMatch"] or 0.0, -p["minConfidence"]))
    return best["minConfidence"]


def score_cost_ms(hole: int, passes: int, repeats: int = 2000) -> float:
    """The median time the score adds to a completion of `passes` passes in a hole of
    `hole` tokens: what MaskedDenoiser.advance and .draft do for it each pass (keep the
    committed positions' confidences; read the completion's and take their min and mean).
    Timed alone: on a shared CPU the whole completion's time varies by far more than this."""
    import math

    import torch

    from engine.types import score_of

    kept = torch.full((hole,), math.nan)
    confidence = torch.rand(hole)
    commit = torch.rand(hole) > 0.5
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        proposed = kept.clone()
        proposed[:] = confidence
        kept[commit] = proposed[commit]
        sampled = [c for c in kept[: hole // 2].tolist() if not math.isnan(c)]
        score_of(sampled, passes)
        seconds.append(time.perf_counter() - start)
    return round(1000 * passes * statistics.median(seconds), 4)


def gate_section(cases: list[Case], model: str | None, device: str) -> dict[str, Any]:
    """The curve per cursor class and pooled, the threshold the rule picks (pooled), and the
    score's cost per completion at the largest hole (a block, 96 tokens) and 24 passes."""
    start = time.perf_counter()
    rows = run_cursors(cases, model, device)
    classes = sorted({r.kind for r in rows})
    per_class = {kind: curve([r for r in rows if r.kind == kind]) for kind in classes}
    pooled = curve(rows)
    return {"pooled": pooled, "perClass": per_class, "chosen": choose(pooled),
            "scoreCostMs": score_cost_ms(96, 24),
            "cursors": [dataclasses.asdict(r) for r in rows],
            "seconds": round(time.perf_counter() - start, 1)}
