"""The confidence gate on three held-out packages, per package and pooled, per cursor class.

    python scripts/experiments/gate_packages.py [--cursors 120] [--seed 0] [--rows DIR]

Cursors are cut from each held-out package (dg_lsp/measure/eval/heldout.py HELDOUT_PACKAGES:
more-itertools, boltons, toolz; none of them trained on) as `dg-lsp bench --section gate`
cuts them (engine/data/cases.py `cut_cursor_cases`, about as many of each of the 8 classes),
and each runs the default path in process once with the gate off (bundled model, CPU). The
gate is then a filter on the rows (dg_lsp.measure.bench_gate): printed, per package and pooled,
the share of cursors shown and the exact match and edit similarity of what is shown at each
minConfidence, per cursor group (bench_gate.GROUPS: line start, mid-line, brackets), and the
threshold the rule picks (bench_gate.choose; pooled, with every group of every package held to
its floor).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from dg_lsp.measure.bench_gate import (
    GROUPS,
    PROBABILITIES,
    Shown,
    calibrated,
    choose,
    curve,
    group_curves,
    run_cursors,
)
from dg_lsp.measure.eval.heldout import HELDOUT_PACKAGES, heldout_sources
from engine.data.cases import cut_cursor_cases

SHOWN_AT = (0.0, 0.05, 0.08, 0.1, 0.12, 0.15, 0.2)


def table(name: str, rows: list[Shown], groups: list[list[dict]]) -> None:
    points = curve(rows, PROBABILITIES, calibrated)
    print(f"\n{name}: {len(rows)} cursors, the rule picks {choose(points, groups)}")
    header = "minConfidence " + "".join(f"{g:>24}" for g in (*GROUPS, "all"))
    print(header)
    for threshold in SHOWN_AT:
        cells = []
        for classes in (*GROUPS.values(), None):
            part = [r for r in rows if classes is None or r.kind in classes]
            (point,) = curve(part, (threshold,), calibrated)
            exact, similar = point["exactMatch"] or 0, point["editSimilarity"] or 0
            cells.append(f"{point['shown']:>3}/{len(part):<3} {point['shownRate']:>5.0%} "
                         f"ex {exact:>4.0%} es {similar:.2f}")
        print(f"{threshold:<13} " + "".join(f"{c:>24}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cursors", type=int, default=120, help="cursors per package")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rows", type=Path, help="keep each package's rows here (JSON), "
                        "and read them instead of running the model when they are there")
    args = parser.parse_args()
    pooled: list[Shown] = []
    every_group: list[list[dict]] = []
    for package, version in HELDOUT_PACKAGES:
        saved = args.rows / f"{package}-{args.cursors}-{args.seed}.json" if args.rows else None
        if saved is not None and saved.exists():
            rows = [Shown(**row) for row in json.loads(saved.read_text())]
        else:
            cases = cut_cursor_cases(heldout_sources(package=package, version=version),
                                     args.cursors, seed=args.seed)
            rows = run_cursors(cases, None, "cpu")
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(json.dumps([dataclasses.asdict(r) for r in rows]))
        curves = list(group_curves(rows).values())
        table(f"{package} {version}", rows, curves)
        every_group += curves
        pooled += rows
    # Pooled, each group of each package must keep its floor (MIN_GROUP_SHOWN).
    table("pooled", pooled, every_group)


if __name__ == "__main__":
    main()
