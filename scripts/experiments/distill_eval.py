"""Judge distilled checkpoints against the bundled model on held-out third-party code.

    OMP_NUM_THREADS=1 PYTHONPATH=. python scripts/experiments/distill_eval.py --model bundled \
        --model /work/runs/distill/v1/snapshots/step-00100 --per-kind 20 --json out.jsonl

Cases come from two pinned PyPI packages no corpus here includes (the corpus builder refuses
both by name, engine.train.corpus.BENCHMARK_PACKAGES): more-itertools (the bench's) and
boltons. Per package and hole kind, `--per-kind` cases (seed 0):

    single line   a whole indented-or-not line (dg_lsp.measure.eval.cases, "single-line"), 32-token
    hole
    mid-line      the rest of a line after `=`, `(`, `.`, `,`, a keyword, or an argument
                  list (the bench's cursor classes), 32-token hole
    block body    the line after a block header's `:`, 96-token hole (holeSize.block)
    multi-line    2 to 8 whole lines ("multi-line"), 128-token hole

Each is filled with `Engine.infill` and the default sampler settings (what users get), the
model ending the hole itself. Scored as `dg-lsp eval` scores: a single-line completion is cut
at its first newline (dg_lsp.measure.eval.scoring.single_line); the others are cut to as many lines
as the text that was cut out. Tokens per forward: completion tokens over forward passes, per
kind. The replacement rule (issue #31): at least 2 tokens per forward with edit similarity
within 1 point and exact match not lower, for every hole kind.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from dg_lsp.measure.eval.heldout import SECOND_PACKAGE, SECOND_VERSION, heldout_sources
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match, single_line
from engine import Engine, SamplerSettings
from engine.data.cases import Case, cut_cases, cut_cursor_cases
from engine.data.stats import percentile

HOLE_TOKENS = {"single line": 32, "mid-line": 32, "block body": 96, "multi-line": 128}
MID_LINE = ("after =", "after (", "after .", "after ,", "after keyword", "argument list")


def cases_of(folder: Path, per_kind: int, seed: int) -> dict[str, list[Case]]:
    return {
        "single line": cut_cases(folder, per_kind, seed=seed, kinds=("single-line",)),
        "mid-line": cut_cursor_cases(folder, per_kind, seed=seed, classes=MID_LINE),
        "block body": cut_cursor_cases(folder, per_kind, seed=seed, classes=("block header",)),
        "multi-line": cut_cases(folder, per_kind, seed=seed, kinds=("multi-line",)),
    }


def shown(kind: str, completion: str, middle: str) -> str:
    """What is scored: a single line as `dg-lsp eval` cuts it, else as many lines as the
    middle has (without a newline the middle does not end in)."""
    if kind == "single line":
        return single_line(completion)
    lines = middle.count("\n") + (0 if middle.endswith("\n") else 1)
    text = "".join(completion.splitlines(keepends=True)[:lines])
    return text if middle.endswith("\n") else text.rstrip("\n")


def evaluate(engine: Engine, cases: list[Case], kind: str) -> dict:
    settings = SamplerSettings()
    tokens = steps = 0
    exact, similarity, latency = [], [], []
    for case in cases:
        start = time.perf_counter()
        result = engine.infill(case.prefix, case.suffix, max_tokens=HOLE_TOKENS[kind],
                               settings=settings)
        latency.append(1000 * (time.perf_counter() - start))
        text = shown(kind, result.text, case.middle)
        tokens, steps = tokens + result.tokens, steps + result.steps
        exact.append(exact_match(text, case.middle))
        similarity.append(edit_similarity(text, case.middle))
    n = max(1, len(cases))
    return {"cases": len(cases), "tokens_per_forward": round(tokens / max(steps, 1), 3),
            "passes": round(steps / n, 2), "exact_match": round(sum(exact) / n, 4),
            "edit_similarity": round(sum(similarity) / n, 4),
            "p50_ms": round(percentile(sorted(latency), 50), 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", required=True,
                        help="'bundled' or a checkpoint folder (repeatable)")
    parser.add_argument("--per-kind", type=int, default=20, help="cases per kind per package")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="auto",
                        help="as Engine.load takes it: auto, float32, int8, int4, ...")
    parser.add_argument("--json", type=Path, help="append one JSON line per model and kind")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    packages = {"more-itertools": heldout_sources(),
                SECOND_PACKAGE: heldout_sources(package=SECOND_PACKAGE, version=SECOND_VERSION)}
    by_kind: dict[str, list[Case]] = {kind: [] for kind in HOLE_TOKENS}
    for folder in packages.values():
        for kind, cases in cases_of(folder, args.per_kind, args.seed).items():
            by_kind[kind] += cases
    print("| model | kind | cases | tokens / forward | passes | exact | edit similarity | p50 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for spec in args.model:
        engine = Engine.load(None if spec == "bundled" else spec, dtype=args.dtype)
        engine.infill("def f(x):\n    return ", "\n", max_tokens=8)  # warm-up, unscored
        for kind, cases in by_kind.items():
            row = {"model": spec, "kind": kind, **evaluate(engine, cases, kind)}
            print(f"| {spec} | {kind} | {row['cases']} | {row['tokens_per_forward']} | "
                  f"{row['passes']} | {100 * row['exact_match']:.1f}% | "
                  f"{row['edit_similarity']:.3f} | {row['p50_ms']:.0f} ms |", flush=True)
            if args.json:
                with args.json.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
