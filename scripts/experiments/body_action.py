"""The "Complete function body" action on held-out functions: how often it offers a body, and
how close the body is to the one the authors wrote.

    python scripts/experiments/body_action.py [--limit 40] [--seed 0] [--variant NAME ...]

Functions of the held-out packages (dg_lsp/measure/eval/heldout.py: more-itertools and
boltons, which no model here trained on) whose code is one to six lines are cut back to a stub:
their statements replaced by `pass`, their docstring kept (`docstring`) or removed as well
(`bare`, what a user who has just typed a header has). The action runs on the stub as the
server runs it (dg_lsp.actions.rewrite.compute_edit, in process, the bundled model) and is
scored on the code it writes: offered or refused (and why), exact match and edit similarity
of its first lines (as many as the original's) against the original code's. Each variant
changes the tries the action makes (VARIANTS).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import random
import statistics
from collections import Counter
from pathlib import Path
from unittest import mock

from dg_lsp.actions import rewrite
from dg_lsp.actions.targets import COMPLETE_BODY, targets_at
from dg_lsp.document.parsed import ParsedText
from dg_lsp.measure.eval.heldout import SECOND_PACKAGE, SECOND_VERSION, heldout_sources
from dg_lsp.measure.eval.scoring import edit_similarity
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine import Engine

# name -> (the tries (strength, sampler settings changed) the action makes, the next only
# where one is refused; whether a body of docstrings alone is refused). "default" is the action
# as shipped (dg_lsp.actions.rewrite._attempts); "one-try" as it was before the retry.
VARIANTS = {
    "default": (None, True),
    "one-try": ([(1.0, {})], False),
    "no-retry": ([(1.0, {})], True),
    "sampled-retries": ([(1.0, {}), (1.0, {"temperature": 0.7, "seed": 1}),
                         (1.0, {"temperature": 0.7, "seed": 2})], True),
}


def stubs(folder: Path, limit: int, rng: random.Random) -> list[tuple[str, int, str]]:
    """(stub file text, offset inside the stub's `pass`, original code) per chosen function."""
    found = []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        try:
            tree = ast.parse(text)
        except SyntaxError:
            continue
        lines = text.split("\n")
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            body = node.body
            doc = ast.get_docstring(node) is not None
            code = body[1:] if doc else body
            if not code or code[0].lineno == node.lineno:
                continue
            first, last = code[0].lineno, code[-1].end_lineno
            if last - first > 5:
                continue
            indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
            original = "\n".join(lines[first - 1 : last]).strip()
            keep_from = body[0].lineno if doc else first  # docstring's first line
            for kind in (("docstring", "bare") if doc else ("bare",)):
                cut_from = first if kind == "docstring" else keep_from
                stub = lines[: cut_from - 1] + [indent + "pass"] + lines[last:]
                stub_text = "\n".join(stub)
                offset = len("\n".join(stub[: cut_from - 1])) + 1 + len(indent)
                found.append((kind, stub_text, offset, original))
    rng.shuffle(found)
    by_kind = {k: [f for f in found if f[0] == k][:limit] for k in ("docstring", "bare")}
    return [(k, *rest) for k, cases in by_kind.items() for _, *rest in cases]


def run(variant: str, cases: list, engine: Engine) -> None:
    python = language_for("python")
    table: dict[str, list] = {}
    tries, docstrings_refused = VARIANTS[variant]
    with contextlib.ExitStack() as patches:
        if tries is not None:
            patches.enter_context(
                mock.patch.object(rewrite, "_attempts", lambda target, strength: tries))
        if not docstrings_refused:
            patches.enter_context(
                mock.patch.object(rewrite, "_only_docstring", lambda body, doc: False))
        for kind, text, offset, original in cases:
            doc = ParsedText(text, python)
            target = next((t for t in targets_at(doc, offset, offset)
                           if t.action == COMPLETE_BODY), None)
            if target is None:  # e.g. a stub the body query does not take: skipped
                continue
            try:
                edit = rewrite.compute_edit(engine, doc, target, Settings())
            except rewrite.RewriteError as exc:
                table.setdefault(kind, []).append((str(exc).split("(")[0][:48], None, 0))
                continue
            written = edit.text.strip()
            seen = "\n".join(written.split("\n")[: original.count("\n") + 1])
            table.setdefault(kind, []).append(
                ("offered", seen == original, edit_similarity(seen, original)))
    for kind, rows in table.items():
        offered = [r for r in rows if r[0] == "offered"]
        sim = statistics.fmean(r[2] for r in offered) if offered else 0.0
        exact = sum(1 for r in offered if r[1])
        refused = Counter(r[0] for r in rows if r[0] != "offered")
        print(f"{variant:15} {kind:9} offered {len(offered):3}/{len(rows)}  exact {exact:2}  "
              f"edit similarity {sim:.3f}  refused: {dict(refused.most_common(3))}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=40, help="functions per stub kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = []
    for folder in (heldout_sources(),
                   heldout_sources(package=SECOND_PACKAGE, version=SECOND_VERSION)):
        cases += stubs(folder, args.limit // 2, rng)
    engine = Engine.load(None, device=args.device)
    for variant in args.variant or list(VARIANTS):
        run(variant, cases, engine)


if __name__ == "__main__":
    main()
