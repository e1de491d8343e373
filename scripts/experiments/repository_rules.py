"""Which of the repository's parts to use, and where: the rules of dg_lsp.repository.retrieve
(which other files' texts are offered as choices, `RepositoryContext.offer`; the snippets;
the gate's reading of another file's text), compared on cursors the report does not use.

    python scripts/experiments/repository_rules.py [--per-class 40] [--seed 1] [--packages boltons]
    python scripts/experiments/repository_rules.py --suite --engine inproc --seed 0 --per-class 50

Cursors are cut as `dg-lsp eval --suite cross-file` cuts them (dg_lsp.measure.eval.cross_file)
from the held-out packages, with `--seed` (not the suite's 0), and any cursor the suite's seed
0 picks is dropped, so a rule chosen here is reported on other cursors. Each variant runs the
default path (Pipeline on the resident engine, default settings and gate); the engine is asked
once per distinct request (prefix, suffix, hole, choices), so variants that leave a cursor's
context unchanged cost nothing there. Printed: exactly right and shown per class and variant.
`--suite` prints the table of `dg-lsp eval --suite cross-file` instead (its cursors, its
rows), on the engine `--engine` names: the suite's run in process beside its resident one.
"""

from __future__ import annotations

import argparse
import json
import pickle
from pathlib import Path

from dg_lsp.completion.pipeline import Pipeline
from dg_lsp.engines import open_for_command
from dg_lsp.measure.eval import cross_file
from dg_lsp.measure.eval.heldout import HELDOUT_PACKAGES, heldout_sources
from dg_lsp.measure.eval.scoring import exact_match
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import OFFERS
from dg_lsp.settings import Settings

# name -> RepositoryContext fields (None: repositoryContext false)
VARIANTS: dict[str, dict | None] = {
    "off": None,
    **{f"choices {offer}{gate}": {"offer": offer, "snippets": False, "gate": bool(gate)}
       for offer in OFFERS for gate in ("", ", gate")},
    "choices all, snippets": {"gate": False},
    **{f"all {offer}": {"offer": offer} for offer in OFFERS},
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--per-class", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--packages", default="boltons,toolz")
    parser.add_argument("--variants", default=";".join(VARIANTS), help="names, ; separated")
    parser.add_argument("--cache", type=Path,
                        help="the engine's answers, kept here between runs (a pickle)")
    parser.add_argument("--rows", type=Path, help="write each cursor's results here (jsonl)")
    parser.add_argument("--engine", choices=("resident", "inproc"), default="resident")
    parser.add_argument("--suite", action="store_true",
                        help="the suite's table (its cursors of --seed, --per-class each)")
    args = parser.parse_args()
    backend = open_for_command(Settings(engine=args.engine))
    if args.suite:
        folders = [heldout_sources(package=package, version=version)
                   for package, version in HELDOUT_PACKAGES
                   if package in args.packages.split(",")]
        print(cross_file.format_table(cross_file.run(folders, backend, args.per_class,
                                                     args.seed)))
        return
    asked: dict[tuple, object] = {}  # distinct request -> the engine's last draft
    if args.cache is not None and args.cache.exists():
        asked = pickle.loads(args.cache.read_bytes())
    names = args.variants.split(";")
    totals: dict[tuple[str, str], list[int]] = {}
    rows = open(args.rows, "w", encoding="utf-8") if args.rows else None
    for package, version in HELDOUT_PACKAGES:
        if package not in args.packages.split(","):
            continue
        folder = heldout_sources(package=package, version=version)
        index = RepositoryIndex(folder)
        index.build()
        reported = {(c.path, c.offset) for c in cross_file.cursors(folder, index, 50, 0)}
        picked = [c for c in cross_file.cursors(folder, index, args.per_class, args.seed)
                  if (c.path, c.offset) not in reported]
        print(f"{package}: {len(picked)} cursors", flush=True)
        for name in names:
            fields = VARIANTS[name]
            pipeline = Pipeline(backend, Settings(repository_context=fields is not None))
            for cursor in picked:
                text = cross_file.shown_text(pipeline, index, folder, cursor, fields, asked)
                shown = text is not None
                right = shown and exact_match(text, cursor.truth)
                total = totals.setdefault((name, cursor.kind), [0, 0, 0])
                total[0] += 1
                total[1] += right
                total[2] += shown
                if rows is not None:
                    rows.write(json.dumps({"variant": name, "path": cursor.path,
                                           "offset": cursor.offset, "kind": cursor.kind,
                                           "truth": cursor.truth, "shown": shown,
                                           "text": text or "",
                                           "exact": right}) + "\n")
            print(name, {k: v for (n, k), v in totals.items() if n == name},
                  f"engine asked {len(asked)} times", flush=True)
            if args.cache is not None:
                args.cache.write_bytes(pickle.dumps(asked))
    print("variant / class: cursors, exactly right, shown")
    for (name, kind), (count, right, shown) in totals.items():
        print(f"{name:28} {kind:10} {count:4} {right:4} {shown:4}")


if __name__ == "__main__":
    main()
