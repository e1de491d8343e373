"""The confidence gate's curve on the three held-out cursor sets of docs/usage.md pooled
(80 cursors seed 0, 80 seed 1, 160 seed 0; a cursor in two sets counted once), and the
threshold the rule picks on them (dg_lsp.measure.bench_gate.choose). Bundled model, default path in
process, gate off, once per cursor; ~3 min on 2 CPU cores.

    python scripts/experiments/gate_pooled.py [--rows OUT.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from dg_lsp.measure.bench_gate import PROBABILITIES, calibrated, choose, curve, run_cursors
from dg_lsp.measure.eval.heldout import heldout_sources
from engine.data.cases import cut_cursor_cases

SETS = ((80, 0), (80, 1), (160, 0))  # (cursors, seed), as `dg-lsp bench --section gate` cuts them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", help="write every cursor's row here (JSON)")
    args = parser.parse_args()
    folder = heldout_sources()
    cases = {}
    for count, seed in SETS:
        for case in cut_cursor_cases(folder, count, seed=seed):
            cases.setdefault(case.id, case)
    rows = run_cursors(list(cases.values()), None, "cpu")
    if args.rows:
        with open(args.rows, "w", encoding="utf-8") as out:
            json.dump([dataclasses.asdict(r) for r in rows], out)
    points = curve(rows, PROBABILITIES, calibrated)
    print(f"{len(rows)} distinct cursors; the rule picks {choose(points)}")
    print("minConfidence  shown  shownRate  exactMatch  editSimilarity")
    for p in points:
        print(f"{p['minConfidence']:<13}  {p['shown']:<5}  {p['shownRate']:<9}  "
              f"{p['exactMatch']}  {p['editSimilarity']}")


if __name__ == "__main__":
    main()
