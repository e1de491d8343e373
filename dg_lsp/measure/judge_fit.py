"""Fit the judge of the candidates (dg_lsp.completion.judge) on the tune half of the held-out
cursors (dg_lsp.measure.eval.retrieval: the report half is never read here).

    python -m dg_lsp.measure.judge_fit collect --out runs/judge/tune.jsonl   # 100 a class
    python -m dg_lsp.measure.judge_fit fit --rows runs/judge/tune.jsonl
    # -> dg_lsp/completion/judge.json

`collect` runs each cursor's context as the default path lays it out (`Pipeline.context`,
default settings, the package as the repository) and asks the engine (the resident one, as
an editor's) to score its candidates in one pass (InfillRequest.judge); it writes one JSON
line per cursor with a candidate: each candidate's evidence, the engine's scores, and whether
it is exactly the rest of the line.

`fit` fits a logistic regression over dg_lsp.completion.judge.FEATURES (the gate's method,
dg_lsp.measure.gate_fit: Newton's, an L2 penalty chosen by 5-fold cross-validated log loss)
predicting that a candidate is right, then the thresholds: for mid-line cursors and line
starts apart, from the out-of-fold probabilities of each cursor's most probable candidate,
the lowest at which what is shown (the pick where it reaches the threshold, what the model
writes itself, gated as the default path gates it, elsewhere) is right at least a third of the
time; where none is, the one at which the most cursors end right. Then the `sure` threshold:
the highest from which a pick shown at once (below it, it yields to the model's own writing
where the gate shows that) leaves the most cursors right.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from dg_lsp.completion.judge import (
    FEATURES,
    JUDGE_FILE,
    MODEL_FEATURES,
    all_model_inputs,
    evidence_inputs,
)
from dg_lsp.document.gate import Calibrator
from dg_lsp.measure.gate_fit import PENALTIES, log_loss, logistic, out_of_fold, standardize
from dg_lsp.repository.candidates import Candidate
from engine.bounds import CASES_RANGE, SEED_RANGE, bounded_argument

THRESHOLDS = tuple(round(0.02 * k, 2) for k in range(1, 40))
# What is shown must be exactly right at least this often where a threshold allows it: the
# picks of lower probability add right answers, at a cost in wrong ones nobody asked to see.
MIN_PRECISION = 1 / 3


def collect(out: Path, per_class: int, seed: int) -> int:
    from dg_lsp.completion.pipeline import Completion, CompletionRequest, Pipeline
    from dg_lsp.completion.postprocess import unit_end
    from dg_lsp.document import gate
    from dg_lsp.engines import open_for_command
    from dg_lsp.measure.eval import retrieval
    from dg_lsp.measure.eval.heldout import HELDOUT_PACKAGES, heldout_sources
    from dg_lsp.measure.eval.scoring import exact_match
    from dg_lsp.repository.candidates import line_tokens
    from dg_lsp.repository.index import RepositoryIndex
    from dg_lsp.repository.retrieve import RepositoryContext
    from dg_lsp.settings import Settings
    from dg_lsp.syntax.languages import language_for
    from engine.types import InfillRequest

    settings = Settings()
    pipeline = Pipeline(open_for_command(settings), settings)
    out.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with out.open("w", encoding="utf-8") as rows:
        for name, version in HELDOUT_PACKAGES:
            folder = heldout_sources(package=name, version=version)
            index = RepositoryIndex(folder)
            index.build()
            for cursor in retrieval.cursors(folder, per_class, seed, retrieval.TUNE):
                request = CompletionRequest(cursor.document, cursor.offset,
                                            language_for("python"),
                                            repository=RepositoryContext(index, cursor.path))
                ctx = pipeline.context(request)
                if not ctx.candidates:
                    continue
                ask = InfillRequest(ctx.prefix, ctx.suffix, settings.hole_size[ctx.kind],
                                    settings.sampler, settings.canvas_length,
                                    settings.suffix_fraction, until=unit_end(ctx),
                                    choices=tuple(c.text for c in ctx.candidates), judge=True)
                drafts = list(pipeline.backend.infill_stream(ask))
                scores = drafts[0].choice_logprobs or ((),) * len(ctx.candidates)
                top = drafts[0].top_logprobs
                # What the model writes when the judge picks none, as the default path shows it.
                written_freely = pipeline.decide(request, ctx, drafts[-1])
                free = written_freely.text if isinstance(written_freely, Completion) else None
                rows.write(json.dumps({
                    "id": f"{name}/{cursor.path}:{cursor.offset}", "kind": cursor.kind,
                    "line_start": gate.is_line_start(ctx.line_prefix, ctx.kind),
                    "free_shown": free is not None,
                    "free_right": free is not None and exact_match(free, cursor.truth),
                    "top_logprobs": list(top),
                    "line_tokens": line_tokens(ctx.line_prefix),
                    "candidates": [{**dataclasses.asdict(c), "logprobs": list(s),
                                    "right": exact_match(c.text, cursor.truth)}
                                   for c, s in zip(ctx.candidates, scores, strict=True)]})
                           + "\n")
                written += 1
    print(f"{written} cursors with candidates -> {out}")
    return 0


def design(rows: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray, list[str], list[int]]:
    """Inputs, labels, cursor ids and cursor numbers of every candidate; a candidate the
    engine could not score has the model's inputs at their means over those it could."""
    xs, ys, ids, cursor_of = [], [], [], []
    for number, row in enumerate(rows):
        raws = row["candidates"]
        scored = all_model_inputs([raw["logprobs"] for raw in raws],
                                  row.get("top_logprobs", ()))
        for rank, (raw, model) in enumerate(zip(raws, scored, strict=True)):
            candidate = Candidate(**{k: raw[k] for k in Candidate.__dataclass_fields__}
                                  | {"sources": tuple(raw["sources"])})
            xs.append((model or [np.nan] * len(MODEL_FEATURES))
                      + evidence_inputs(candidate, rank, len(raws), row["line_start"],
                                        row.get("line_tokens", 0)))
            ys.append(float(raw["right"]))
            ids.append(row["id"])
            cursor_of.append(number)
    x = np.array(xs, dtype=np.float64)
    x = np.where(np.isnan(x), np.nanmean(x, axis=0), x)
    return x, np.array(ys), ids, cursor_of


def picks(p: np.ndarray, y: np.ndarray, cursor_of: list[int]) -> dict[int, tuple[float, bool]]:
    """Each cursor's most probable candidate: (its probability, whether it is right)."""
    best: dict[int, tuple[float, bool]] = {}
    for i, cursor in enumerate(cursor_of):
        if cursor not in best or p[i] > best[cursor][0]:
            best[cursor] = (float(p[i]), bool(y[i]))
    return best


def choose_threshold(best: dict[int, tuple[float, bool]], rows: list[dict[str, Any]]
                     ) -> tuple[float, list[str]]:
    """The lowest threshold at which what is shown is right at least MIN_PRECISION of the
    time, where none is, the one at which the most cursors end right (the higher of two
    that tie): a pick where the judge's most probable candidate reaches it, what the model
    writes itself elsewhere (`free_right`, `free_shown`: as the default path shows it). And
    the table it was chosen from, the model alone first."""
    free_right = sum(rows[c]["free_right"] for c in best)
    free_shown = sum(rows[c]["free_shown"] for c in best)
    table = [f"  none picked: {free_shown} shown, {free_right} right"]
    chosen, most, precise = THRESHOLDS[-1], -1, None
    for t in THRESHOLDS:
        picked = [c for c in best if best[c][0] >= t]
        right = sum(best[c][1] for c in picked) + sum(
            rows[c]["free_right"] for c in best if best[c][0] < t)
        shown = len(picked) + sum(rows[c]["free_shown"] for c in best if best[c][0] < t)
        table.append(f"  >= {t:.2f}: {len(picked)} picked, {shown} shown, {right} right "
                     f"({right / max(shown, 1):.2f} of shown)")
        if right >= most:
            chosen, most = t, right
        if precise is None and shown and right / shown >= MIN_PRECISION:
            precise = t
    return (precise if precise is not None else chosen), table


def choose_sure(best: dict[int, tuple[float, bool]], rows: list[dict[str, Any]], low: float
                ) -> tuple[float, list[str]]:
    """The threshold from which a pick is shown at once: below it (and from `low`) it yields
    to what the model writes where the gate shows that. The highest at which the most cursors
    end right, and the table it was chosen from."""
    table, chosen, most = [], 1.0, -1
    for sure in (*(t for t in THRESHOLDS if t >= low), 1.0):
        right = 0
        for cursor, (p, pick_right) in best.items():
            row = rows[cursor]
            if p >= sure or (p >= low and not row["free_shown"]):
                right += pick_right
            else:
                right += row["free_right"]
        if sure in (low, 1.0) or round(sure * 100) % 10 == 0:
            table.append(f"  sure from {sure:.2f}: {right} right")
        if right >= most:
            chosen, most = sure, right
    return chosen, table


def fit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    x, y, ids, cursor_of = design(rows)
    losses = {lam: log_loss(out_of_fold(x, y, ids, lam), y) for lam in PENALTIES}
    penalty = min(PENALTIES, key=lambda lam: (round(losses[lam], 6), -lam))
    held = out_of_fold(x, y, ids, penalty)
    mean, std = standardize(x)
    w = logistic((x - mean) / std, y, penalty)
    model = Calibrator(tuple(map(float, mean)), tuple(map(float, std)),
                       tuple(map(float, w[1:])), float(w[0]))
    best = picks(held, y, cursor_of)
    thresholds, sure = {}, {}
    for line_start in (False, True):
        group = {c: best[c] for c in best if rows[c]["line_start"] == line_start}
        thresholds[line_start], table = choose_threshold(group, rows)
        sure[line_start], sure_table = choose_sure(group, rows, thresholds[line_start])
        print(f"{'line starts' if line_start else 'mid-line'}: {len(group)} cursors with "
              f"candidates (out-of-fold probabilities); threshold {thresholds[line_start]}, "
              f"sure from {sure[line_start]}")
        print("\n".join(table + sure_table))
    print(f"{len(y)} candidates of {len(rows)} cursors, {int(y.sum())} right; penalty {penalty}")
    for name, weight in zip(FEATURES, model.weight, strict=True):
        print(f"  {name:16s} {weight:+.3f}")
    return model.to_json(
        FEATURES, threshold=thresholds[False], line_start_threshold=thresholds[True],
        sure_threshold=sure[False], line_start_sure_threshold=sure[True],
        penalty=penalty, candidates=len(y), cursors=len(rows),
        cv_log_loss={str(k): round(v, 4) for k, v in losses.items()},
        trained_on="the tune half of the held-out packages' cursors "
        "(dg_lsp.measure.eval.retrieval), the bundled model on the resident engine",
        refit="python -m dg_lsp.measure.judge_fit collect --out runs/judge/tune.jsonl; "
        "python -m dg_lsp.measure.judge_fit fit --rows runs/judge/tune.jsonl")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dg_lsp.measure.judge_fit",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="the candidates and their scores on the tune cursors")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--per-class", type=bounded_argument(CASES_RANGE), default=100)
    c.add_argument("--seed", type=bounded_argument(SEED_RANGE), default=0)
    f = sub.add_parser("fit", help="fit the judge, write its JSON")
    f.add_argument("--rows", type=Path, action="append", required=True)
    f.add_argument("--out", type=Path, default=JUDGE_FILE)
    args = parser.parse_args(argv)
    if args.command == "collect":
        return collect(args.out, args.per_class, args.seed)
    rows = [json.loads(line) for path in args.rows
            for line in path.read_text(encoding="utf-8").splitlines() if line]
    args.out.write_text(json.dumps(fit(rows), indent=1) + "\n", encoding="utf-8")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
