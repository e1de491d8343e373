"""The gate part of `dg-lsp bench`: what the confidence gate hides and what it keeps.

The cursors are the lsp section's (engine/data/cases.py `cut_cursor_cases`, the same seed and
documents). Each runs the default path once in process (`Pipeline`, default settings but
`minConfidence` 0) and keeps what it would show with the engine's Score of it and what the
server knows when it decides; the gate is a filter on those (dg_lsp.document.gate.hides: the
calibrator's probability, `calibrated`), so the curve at every threshold comes from the one
run. Beside it, the same curve for the least confident token alone (`lowest`, what the gate
read before the calibrator). What is shown is scored as the lsp section scores it (cut to as
many lines as the reference).

The default threshold is chosen by `choose`: the most right suggestions per wrong one shown,
among the thresholds that still show a suggestion at at least a third of the cursors.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dg_lsp.document.gate import features
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from engine.data.cases import Case
from engine.types import Score

# Denser where the bundled model's curve crosses a third of the cursors shown.
THRESHOLDS = (0.0, 0.05, 0.1, 0.12, 0.14, 0.16, 0.18, 0.2, 0.22, 0.25, 0.3, 0.4, 0.5, 0.6, 0.8)
# The calibrator's probabilities (dg_lsp.document.gate.Calibrator): denser where its curve
# crosses a
# third of the training cursors shown (each model's pick: docs/usage.md).
PROBABILITIES = (0.0, 0.02, 0.03, 0.04, 0.045, 0.05, 0.055, 0.06, 0.07, 0.08, 0.1, 0.12, 0.15,
                 0.2, 0.3, 0.5)
MIN_SHOWN = 1 / 3  # the rule's floor: at least this share of cursors still gets a suggestion
MIN_GROUP_SHOWN = 1 / 5  # and at least this share of each cursor group's
# The cursor groups a user tells apart (engine.data.cases.CURSOR_CLASSES): no group may be
# hidden almost entirely while the others are shown.
GROUPS = {
    "line start": ("new line", "block header"),
    "mid-line": ("after =", "after .", "after ,", "after keyword"),
    "brackets": ("after (", "argument list"),
}


@dataclass
class Shown:
    """One cursor's suggestion with the gate off: its class, its Score and how it scores."""

    id: str
    kind: str
    lowest: float | None  # engine.types.Score.lowest; None: no suggestion (or no score)
    exact: bool
    similarity: float
    mean: float | None = None  # engine.types.Score.mean
    shown: str = ""  # what is scored: the suggestion cut to as many lines as the reference
    # What the server knows when it decides (dg_lsp.document.gate.features reads the Score, the
    # hole
    # and the text; scripts/experiments/gate_features.py tries the line and finish reason):
    tokens: int = 0  # Score.tokens
    passes: int = 0  # Score.passes
    hole: str = ""  # the hole kind (dg_lsp.context HOLE_KINDS)
    line_prefix: str = ""  # the cursor's line before the cursor
    text: str = ""  # the whole suggestion (after post-processing)
    finish_reason: str = ""  # the last draft's
    repeated: bool = False  # `text` is another line's at the same place (Context.repeats)

    def score(self) -> Score | None:
        if self.lowest is None:
            return None
        return Score(self.lowest, self.mean if self.mean is not None else self.lowest,
                     self.tokens, self.passes)

    def features(self) -> list[float] | None:
        """dg_lsp.document.gate.features of the suggestion; None: none was made."""
        score = self.score()
        if score is None:
            return None
        return features(score, self.hole, self.text, self.repeated)


def run_cursors(cases: list[Case], model: str | None, device: str,
                on_row: Callable[[Shown], None] | None = None) -> list[Shown]:
    """Every cursor through the default path with the gate off (`on_row` sees each row)."""
    from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
    from dg_lsp.settings import Settings
    from dg_lsp.syntax.languages import language_for
    from engine import Engine
    from engine.types import last_draft

    settings = Settings(model=model, device=device, min_confidence=0.0)
    pipeline = Pipeline(Engine.load(model, device=device), settings)
    python = language_for("python")
    rows = []
    for case in cases:
        request = CompletionRequest(*case.document(), python)
        ctx, drafts = pipeline.start(request)
        last = last_draft(drafts)
        completion = pipeline.finish(request, ctx, last)
        if completion is None or last is None or last.score is None:
            rows.append(Shown(case.id, case.kind, None, False, 0.0))
        else:
            score = last.score
            seen = "\n".join(completion.text.split("\n")[: case.middle.count("\n") + 1])
            rows.append(Shown(case.id, case.kind, score.lowest, exact_match(seen, case.middle),
                              round(edit_similarity(seen, case.middle), 3), score.mean, seen,
                              score.tokens, score.passes, ctx.kind, ctx.line_prefix,
                              completion.text, last.finish_reason,
                              completion.text in ctx.repeats))
        if on_row is not None:
            on_row(rows[-1])
    return rows


def lowest(row: Shown) -> float | None:
    return row.lowest


def calibrated(row: Shown) -> float | None:
    """What the gate compares with minConfidence: the calibrator's probability that the row's
    suggestion is close to right (dg_lsp.document.gate.confidence), over LINE_START_SHARE
    for a line start (whose threshold is that share of minConfidence: the same decision)."""
    from dg_lsp.document.gate import LINE_START_SHARE, confidence, is_line_start

    score = row.score()
    if score is None:
        return None
    probability = confidence(score, row.hole, row.text, row.repeated)
    return probability / LINE_START_SHARE if is_line_start(row.line_prefix, row.hole) else (
        probability)


def curve(rows: list[Shown], thresholds: tuple[float, ...] = THRESHOLDS,
          score: Callable[[Shown], float | None] = lowest) -> list[dict]:
    """At each threshold on `score`: the share of cursors shown, and the exact match, edit
    similarity and right-per-wrong of what is shown."""
    out = []
    scores = [score(r) for r in rows]
    for threshold in thresholds:
        shown = [r for r, v in zip(rows, scores, strict=True) if v is not None and v >= threshold]
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


def choose(points: list[dict], groups: list[list[dict]] = ()) -> float:
    """The rule: the most right suggestions per wrong one shown, among the thresholds that
    show at least MIN_SHOWN of the cursors and, given the curves of cursor groups (at the same
    thresholds), at least MIN_GROUP_SHOWN of each group's; ties go to the lower threshold
    (shows more)."""
    eligible = [p for n, p in enumerate(points)
                if p["shownRate"] is not None and p["shownRate"] >= MIN_SHOWN
                and all(g[n]["shownRate"] is None or g[n]["shownRate"] >= MIN_GROUP_SHOWN
                        for g in groups)]
    if not eligible:
        return 0.0
    # Right per wrong is exact / (1 - exact): the most of it is the highest exact-match rate.
    best = max(eligible, key=lambda p: (p["exactMatch"] or 0.0, -p["minConfidence"]))
    return best["minConfidence"]


def group_curves(rows: list[Shown], thresholds: tuple[float, ...] = PROBABILITIES,
                 score: Callable[[Shown], float | None] = calibrated
                 ) -> dict[str, list[dict]]:
    """The curve of each cursor group (GROUPS) that has cursors among `rows`."""
    return {name: curve(part, thresholds, score) for name, classes in GROUPS.items()
            if (part := [r for r in rows if r.kind in classes])}


def score_cost_ms(hole: int, passes: int, repeats: int = 2000) -> float:
    """The median time the score adds to a completion of `passes` passes in a hole of
    `hole` tokens: what engine.decode.denoise's advance and draft do for it each pass (keep the
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


def calibrator_cost_ms(repeats: int = 2000) -> float:
    """The median time the calibrator adds to a completion: its features and probability
    (dg_lsp.document.gate.confidence) of a 40-character suggestion."""
    from dg_lsp.document.gate import confidence

    score = Score(0.3, 0.7, 12, 9)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        confidence(score, "rest_of_line", "self.assertEqual(result, expected_value)", False)
        seconds.append(time.perf_counter() - start)
    return round(1000 * statistics.median(seconds), 4)


def gate_section(cases: list[Case], model: str | None, device: str) -> dict[str, Any]:
    """The gate's curve (the calibrated probability) per cursor class and pooled, the
    threshold the rule picks (pooled), the same pooled for `lowest` alone, and the score's
    cost per completion at the largest hole (a block, 96 tokens) and 24 passes, and the
    calibrator's."""
    start = time.perf_counter()
    rows = run_cursors(cases, model, device)
    classes = sorted({r.kind for r in rows})
    per_class = {kind: curve([r for r in rows if r.kind == kind], PROBABILITIES, calibrated)
                 for kind in classes}
    pooled = curve(rows, PROBABILITIES, calibrated)
    groups = group_curves(rows)
    by_lowest = curve(rows, THRESHOLDS, lowest)
    return {"pooled": pooled, "perClass": per_class, "perGroup": groups,
            "chosen": choose(pooled, list(groups.values())),
            "lowest": by_lowest, "lowestChosen": choose(by_lowest),
            "scoreCostMs": score_cost_ms(96, 24), "calibratorCostMs": calibrator_cost_ms(),
            "cursors": [dataclasses.asdict(r) for r in rows],
            "seconds": round(time.perf_counter() - start, 1)}
