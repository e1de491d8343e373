"""The next-edit eval's cases in process, case by case: what the model wrote at each span.

    python scripts/experiments/next_edit_probe.py [--seed 0] [--limit 30] [--classes real]
        [--model M] [--out cases.json]

The cases are `dg-lsp eval --suite next-edit`'s (the same seed cuts the same cases: the
synthetic classes from the held-out packages, the real class from their pinned releases), but
each is asked of the engine in this process through `dg_lsp.next_edit.suggest.suggest`, with no LSP
session: about 15 s for 150 cases, where the eval's resident and in-process sessions take
minutes. Printed per class: cases, exact (as the eval judges it), the rename-only rule's
exact, suggested. `--out` writes every case with the raw text the model wrote at each span
it was asked about, to read the misses. `--limit 1000 --classes real` takes every real case.
The exact counts equal the eval's in-process path case for case (the same request to the same
engine); the eval's resident path decodes the same requests.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path

from dg_lsp.document.parsed import ParsedText
from dg_lsp.measure.eval import next_edit as eval_next_edit
from dg_lsp.measure.eval.heldout import (
    SECOND_PACKAGE,
    SECOND_VERSION,
    heldout_release_pairs,
    heldout_sources,
)
from dg_lsp.next_edit.suggest import rename_rule, suggest
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine import Engine
from engine.types import Draft, InfillRequest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=eval_next_edit.DEFAULT_PER_CLASS)
    parser.add_argument("--classes", default=",".join(eval_next_edit.CLASSES))
    parser.add_argument("--model", default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    classes = args.classes.split(",")

    cases = []
    if set(classes) - {eval_next_edit.REAL}:
        folders = [heldout_sources(), heldout_sources(package=SECOND_PACKAGE,
                                                      version=SECOND_VERSION)]
        cases += eval_next_edit.cut_edits(folders, args.limit, args.seed)
    if eval_next_edit.REAL in classes:
        cases += eval_next_edit.cut_real(heldout_release_pairs(), args.limit, args.seed)
    cases = [case for case in cases if case.kind in classes]

    engine = Engine.load(args.model, device="cpu")
    written: list[str | None] = []  # the last draft of every request of the current case
    infill_stream = engine.infill_stream

    def recording(request: InfillRequest, cancel: Callable[[], bool] | None = None,
                  **kwargs: object) -> Iterator[Draft]:
        last = None
        for last in infill_stream(request, cancel, **kwargs):  # type: ignore[arg-type]
            yield last
        written.append(None if last is None else last.text)

    engine.infill_stream = recording  # type: ignore[method-assign]
    counts: dict[str, list[int]] = {}
    report = []
    for case in cases:
        written.clear()
        edit = eval_next_edit.recorded(case)
        doc = ParsedText(case.text, language_for("python", "case.py"))
        found = suggest(engine, doc, [edit.line_edit()], edit, edit.end, Settings())
        outcome = eval_next_edit.judge(case, found)
        rule = eval_next_edit.judge(case, rename_rule(edit, doc, edit.end))
        count = counts.setdefault(case.kind, [0, 0, 0, 0])
        for i, value in enumerate((1, outcome.exact, rule.exact, outcome.suggested)):
            count[i] += int(value)
        report.append({"kind": case.kind, "exact": outcome.exact, "located": outcome.located,
                       "ruleExact": rule.exact,
                       "removed": case.removed, "inserted": case.inserted,
                       "expected": case.expected, "suggested": found and found.text,
                       "written": list(written)})
    for kind, (n, exact, rule_exact, suggested) in counts.items():
        print(f"{kind:8s} cases {n:3d}  exact {exact:3d}  rule exact {rule_exact:3d}  "
              f"suggested {suggested:3d}")
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
