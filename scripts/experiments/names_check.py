"""What the unknown-names check (dg_lsp/syntax/names.py) refuses on held-out code, and what it
costs.

    python scripts/experiments/names_check.py [--limit 80] [--seed 0] [--device cpu]

The cursors are `dg-lsp bench --section lsp`'s (engine/data/cases.py `cut_cursor_cases`, the
held-out package, the same seed), but each document is the whole file the cursor is in: the
bench opens only 2000 characters before the cursor, which cuts the imports a file's names
come from. Each cursor runs the default path in process (Pipeline, default settings) once;
its raw text is post-processed with the check and without it. Printed: how many cursors get
a suggestion either way, how many the check refused, and the exact match and first-lines
edit similarity of what is shown (as the bench scores it). Then the check's own time per
completion at the end of a 2,000-line file.
"""

from __future__ import annotations

import argparse
import statistics
import time
from unittest import mock

from dg_lsp.completion import postprocess
from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.context import build_context
from dg_lsp.measure.eval.heldout import heldout_sources
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from dg_lsp.settings import Settings
from dg_lsp.syntax import names
from dg_lsp.syntax.languages import language_for
from engine import Engine
from engine.data.cases import cut_cursor_cases
from engine.types import last_draft

WHOLE_FILE = 10**9  # characters of prefix/suffix: the whole file


def quality(rows: list[tuple[str, str]]) -> str:
    """`rows`: (shown, what was cut) for the cursors that showed something."""
    if not rows:
        return "nothing shown"
    scores = []
    for shown, middle in rows:
        seen = "\n".join(shown.split("\n")[: middle.count("\n") + 1])
        scores.append((exact_match(seen, middle), edit_similarity(seen, middle)))
    em = statistics.fmean(s[0] for s in scores)
    es = statistics.fmean(s[1] for s in scores)
    return f"exact match {em:.1%}, edit similarity {es:.3f}"


def held_out(limit: int, seed: int, device: str) -> None:
    cases = cut_cursor_cases(heldout_sources(), limit, seed=seed, prefix_chars=WHOLE_FILE,
                             suffix_chars=WHOLE_FILE)
    pipeline = Pipeline(Engine.load(None, device=device), Settings())
    python = language_for("python")
    before, after, refused = [], [], []
    for case in cases:
        request = CompletionRequest(*case.document(), python)
        ctx, drafts = pipeline.start(request)
        last = last_draft(drafts)
        if last is None:
            continue
        with mock.patch.object(names, "checked", lambda language: False):
            unchecked = postprocess.postprocess(last.text, ctx)
        checked = postprocess.postprocess(last.text, ctx)
        if unchecked is not None:
            before.append((unchecked.text, case.middle))
        if checked is not None:
            after.append((checked.text, case.middle))
        elif unchecked is not None:
            refused.append((case.id, unchecked.text))
    print(f"{len(cases)} held-out cursors (seed {seed}), whole files as documents")
    print(f"  without the check: {len(before)} shown; {quality(before)}")
    print(f"  with the check:    {len(after)} shown; {quality(after)}")
    print(f"  refused: {len(refused)}")
    for case_id, text in refused:
        print(f"    {case_id}: {text.strip().splitlines()[0]!r}")


def cost(repeats: int = 200) -> None:
    """The check's time at the end of a 2,000-line file: a name it knows, one it does not."""
    lines = []
    for path in sorted(heldout_sources().rglob("*.py")):
        lines += path.read_text(encoding="utf-8").split("\n")
    document = "\n".join(lines[:1999]) + "\ndef mean(xs):\n    return "
    ctx = build_context(document, len(document), language_for("python"))
    for text in ("sum(xs) / len(xs)", "jnp.sum(xs)"):
        suggestion = postprocess.Suggestion(text, 0)
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            postprocess._check_names(suggestion, ctx)
            seconds.append(time.perf_counter() - start)
        print(f"check of {text!r} at line {document.count(chr(10)) + 1} "
              f"({len(document)} characters): median {1000 * statistics.median(seconds):.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--limit", type=int, default=80)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    cost()
    held_out(args.limit, args.seed, args.device)


if __name__ == "__main__":
    main()
