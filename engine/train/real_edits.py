"""`dg-engine version-edits`: next-edit cases from the real edits between consecutive releases.

For each package named (one the corpus gathers its code from, never a held-out or benchmark
package: those are refused by name), pip fetches its last N releases, or those that end at
`PACKAGE==VERSION`, into ~/.cache/dg-lsp/versions (engine.data.releases); the .py files of each
two consecutive releases are paired by path (tests and vendored copies left out, as the
corpus leaves them) and the cases their hunks hold are cut (engine.edits.real). They are
written as JSON lines, one case with where it comes from on each, for
`dg-engine train --real-edits FILE`; what was cut is counted on stderr, per release pair
and per kind of change.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

from engine.bounds import RELEASES_RANGE, bounded_argument
from engine.data.releases import consecutive, release_pairs, release_versions
from engine.edits.prompt import LineEdit
from engine.edits.real import change_kind, real_edits
from engine.edits.synthetic import SyntheticEdit
from engine.train.corpus import BENCHMARK_PACKAGES, FORBIDDEN, SKIP_PARTS

DEFAULT_RELEASES = 4  # three pairs of consecutive releases per package


def refuse_heldout(package: str) -> None:
    """ValueError when `package` is held out: no model here may train on its code."""
    normalized = re.sub(r"[-_.]+", "_", package.lower())
    if normalized in BENCHMARK_PACKAGES or FORBIDDEN.search(normalized + "/"):
        raise ValueError(f"{package} is held out for evaluation (engine.train.corpus."
                         "BENCHMARK_PACKAGES, FORBIDDEN): no model here may train on its code")


def trained_path(rel: str) -> bool:
    """Whether the corpus would train on a package's file at `rel` (not a test, a fixture or
    a vendored copy; engine.train.corpus.iter_source_files)."""
    path = PurePosixPath(rel)
    return not (set(path.parts[:-1]) & SKIP_PARTS or path.name.startswith("test_")
                or FORBIDDEN.search(rel))


def cut_package(package: str, releases: int, last: str | None = None, sdist: bool = False
                ) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """(older, newer, rows of the cases between them) for each two consecutive of `package`'s
    `releases` releases ending at `last` (default: the newest); rows in the order of the
    files and hunks."""
    refuse_heldout(package)
    versions = consecutive(release_versions(package), releases, last)
    pairs = []
    for older, newer, files in release_pairs(package, versions, sdist=sdist):
        rows = [case_row(package, older, newer, rel, case)
                for rel, old, new in files if trained_path(rel)
                for case in real_edits(old, new)]
        pairs.append((older, newer, rows))
    return pairs


def case_row(package: str, older: str, newer: str, rel: str, case: SyntheticEdit
             ) -> dict[str, Any]:
    """One line of the file: the case and where it comes from."""
    return {"package": package, "from": older, "to": newer, "path": rel,
            "change": change_kind(case), "case": dataclasses.asdict(case)}


def _kinds(rows: list[dict[str, Any]]) -> str:
    kinds = Counter(row["change"] for row in rows)
    return ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())) or "none"


def save_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row) + "\n")


def load_cases(path: Path) -> list[SyntheticEdit]:
    """The cases of a file `dg-engine version-edits` wrote.

    Raises ValueError for a case from a held-out package or file (a file edited by hand, or
    written before a package was held out): training on it would void the evaluation."""
    cases = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        refuse_heldout(row["package"])
        if FORBIDDEN.search(row["path"]):
            raise ValueError(f"{path}:{number}: {row['path']} is held out for evaluation")
        fields = dict(row["case"])
        fields["edit"] = LineEdit(**fields["edit"])
        cases.append(SyntheticEdit(**fields))
    return cases


def run(args: argparse.Namespace) -> int:
    specs = [spec.partition("==") for spec in args.packages]
    for package, _, _ in specs:
        refuse_heldout(package)  # before fetching anything
    rows: list[dict[str, Any]] = []
    failed = []
    for package, _, last in specs:
        # A package pip cannot list or fetch (a misspelt name, a release without a wheel) is
        # reported and skipped: the other packages' cases, minutes of fetching, are kept.
        try:
            pairs = cut_package(package, args.releases, last or None, args.sdist)
        except (OSError, ValueError) as exc:
            print(f"{package}: skipped: {exc}", file=sys.stderr)
            failed.append(package)
            continue
        for older, newer, found in pairs:
            print(f"{package} {older} -> {newer}: {len(found)} cases ({_kinds(found)})",
                  file=sys.stderr)
            rows += found
    save_rows(args.out, rows)
    print(f"{len(rows)} cases ({_kinds(rows)}) written to {args.out}", file=sys.stderr)
    if failed:
        print(f"not cut: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("version-edits", help="cut next-edit cases from the real edits between "
                       "consecutive releases of packages (for train --real-edits)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("packages", nargs="+", metavar="PACKAGE[==VERSION]",
                   help="a PyPI package the corpus trains on; ==VERSION: the newest release "
                   "to take (default: the newest)")
    p.add_argument("--out", type=Path, required=True, help="JSON lines file to write")
    p.add_argument("--releases", type=bounded_argument(RELEASES_RANGE), default=DEFAULT_RELEASES,
                   metavar="N",
                   help="consecutive releases per package, N-1 pairs (default: %(default)s)")
    p.add_argument("--sdist", action="store_true",
                   help="take a release's sdist when it has no wheel (pip runs the sdist's "
                   "build code to read its metadata)")
    p.set_defaults(func=run)
