"""What the engine's defaults write on held-out code, and what each of two changes costs.

    python scripts/experiments/defaults_quality.py [--per-kind 30] [--variant NAME ...]

Holes are cut as scripts/experiments/distill_eval.py cuts them (single line, mid-line, block
body, multi-line; `--per-kind` of each per package, seed 0) from the three held-out packages
(dg_lsp/measure/eval/heldout.py HELDOUT_PACKAGES), and filled with `Engine.infill` at the
default settings, the model ending the hole itself (the library's default path: no gate).
Variants, each against "default" (the bundled model as shipped):

    no-reuse     steps always run their pass (engine.decode.denoise: a step whose cached pass
                 would see nothing new commits from the last pass's logits; 2b2755f)
    base-model   the bundled model before it learned next edits and was merged with its
                 edit-trained copy (ad5503e's parent, read from git into a temporary folder)

Printed per hole kind and pooled: exact match and edit similarity of each variant, and the
paired difference from the default with its 95% bootstrap interval (2,000 resamples of the
holes). Rows go to --rows as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

from dg_lsp.measure.eval.heldout import HELDOUT_PACKAGES, heldout_sources
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from engine import Engine, SamplerSettings
from engine.decode import denoise

sys.path.insert(0, str(Path(__file__).parent))
from distill_eval import HOLE_TOKENS, cases_of, shown  # noqa: E402  (the same holes, scored alike)

ROOT = Path(__file__).resolve().parents[2]
BASE_COMMIT = "ad5503e^"  # the bundled model before it learned next edits
VARIANTS = ("default", "no-reuse", "base-model")


def base_model(folder: Path) -> Path:
    """The bundled model of BASE_COMMIT, read from git into `folder`."""
    listed = subprocess.run(["git", "ls-tree", "--name-only", BASE_COMMIT,
                             "engine/bundled/default/"], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.split()
    for path in listed:
        data = subprocess.run(["git", "show", f"{BASE_COMMIT}:{path}"], cwd=ROOT,
                              capture_output=True, check=True).stdout
        (folder / Path(path).name).write_bytes(data)
    return folder


def run(variant: str, holes: list[tuple[str, str, object]], model: str | None) -> list[dict]:
    patch = (mock.patch.object(denoise, "sees_nothing_new", lambda seq, changed, shifted: False)
             if variant == "no-reuse" else contextlib.nullcontext())
    engine = Engine.load(model)
    rows = []
    with patch:
        for package, kind, case in holes:
            result = engine.infill(case.prefix, case.suffix, max_tokens=HOLE_TOKENS[kind],
                                   settings=SamplerSettings())
            text = shown(kind, result.text, case.middle)
            rows.append({"variant": variant, "package": package, "kind": kind, "id": case.id,
                         "exact": exact_match(text, case.middle),
                         "similarity": edit_similarity(text, case.middle),
                         "passes": result.steps, "tokens": result.tokens})
    return rows


def interval(diffs: list[float], rng: random.Random, resamples: int = 2000
             ) -> tuple[float, float]:
    """The 95% bootstrap interval of the mean of `diffs`."""
    means = sorted(statistics.fmean(rng.choices(diffs, k=len(diffs)))
                   for _ in range(resamples))
    return means[int(0.025 * resamples)], means[int(0.975 * resamples) - 1]


def report(rows: list[dict]) -> None:
    rng = random.Random(0)
    def key(r: dict) -> tuple:
        return r["package"], r["kind"], r["id"]

    by = {(r["variant"], *key(r)): r for r in rows}
    variants = [v for v in VARIANTS if any(r["variant"] == v for r in rows)]
    kinds = [*HOLE_TOKENS, "all"]
    print("| variant | kind | holes | exact | edit similarity | passes | difference from "
          "default: exact, edit similarity (95% interval) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for variant in variants:
        for kind in kinds:
            mine = [r for r in rows if r["variant"] == variant and kind in ("all", r["kind"])]
            if not mine:
                continue
            exact = statistics.fmean(r["exact"] for r in mine)
            similar = statistics.fmean(r["similarity"] for r in mine)
            passes = statistics.fmean(r["passes"] for r in mine)
            cell = ""
            if variant != "default":
                pairs = [(r, by[("default", *key(r))]) for r in mine
                         if ("default", *key(r)) in by]
                de = [float(a["exact"]) - float(b["exact"]) for a, b in pairs]
                ds = [a["similarity"] - b["similarity"] for a, b in pairs]
                (el, eh), (sl, sh) = interval(de, rng), interval(ds, rng)
                cell = (f"{statistics.fmean(de):+.1%} ({el:+.1%}, {eh:+.1%}), "
                        f"{statistics.fmean(ds):+.3f} ({sl:+.3f}, {sh:+.3f})")
            print(f"| {variant} | {kind} | {len(mine)} | {exact:.1%} | {similar:.3f} | "
                  f"{passes:.1f} | {cell} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-kind", type=int, default=30, help="holes per kind per package")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variant", action="append", choices=VARIANTS)
    parser.add_argument("--rows", type=Path, help="JSON lines of every hole's score: "
                        "appended to, and variants already there are not run again")
    args = parser.parse_args()
    holes = []
    for package, version in HELDOUT_PACKAGES:
        folder = heldout_sources(package=package, version=version)
        for kind, cases in cases_of(folder, args.per_kind, args.seed).items():
            holes += [(package, kind, case) for case in cases]
    rows = []
    if args.rows and args.rows.exists():
        rows = [json.loads(line) for line in args.rows.read_text().splitlines()]
    done = {r["variant"] for r in rows}
    with tempfile.TemporaryDirectory() as scratch:
        for variant in args.variant or VARIANTS:
            if variant in done:
                continue
            model = str(base_model(Path(scratch))) if variant == "base-model" else None
            new = run(variant, holes, model)
            rows += new
            if args.rows:
                with args.rows.open("a", encoding="utf-8") as out:
                    out.writelines(json.dumps(r) + "\n" for r in new)
    report(rows)


if __name__ == "__main__":
    main()
