"""`dg-lsp eval --suite retrieval`: how often the default path shows exactly the right text,
of all cursors, beside how often the right text was among the candidates the file and the
repository hold (dg_lsp.repository.candidates): the retrieval's ceiling.

Cursors are cut from the held-out packages as the bench's (engine.data.cases.cut_cursor_cases):
mid-line after `=`, `(`, `.` and `, `, and a line's start after its indentation; the rest of
the line is what the user has not typed, removed from the document. The package's other files
are the repository (its index never gives the cursor's own file: that copy holds the answer).
Cursors are split in two halves by their name (SPLITS): the rules the judge follows are chosen
on the `tune` half; the `report` half is what the tables say.

Each cursor runs the default path (`Pipeline` on the resident engine, the default settings and
gate) and is scored against the rest of the line, whitespace-normalized: exactly right of
all cursors, the share shown, right of shown, and the milliseconds it took.
"""

from __future__ import annotations

import random
import statistics
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dg_lsp.completion.pipeline import Completion, CompletionRequest, Pipeline
from dg_lsp.measure.eval.scoring import exact_match
from dg_lsp.repository.candidates import candidates
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend
from engine.data.cases import cut_cursor_cases

LINE_START = "new line"
MID_LINE = ("after =", "after (", "after .", "after ,")
CLASSES = (LINE_START, *MID_LINE)
REPORT, TUNE = "report", "tune"
SPLITS = (REPORT, TUNE)
CANDIDATES = 4000  # cursors cut per package before each class's are drawn from them


@dataclass
class Cursor:
    package: str
    path: str  # in the package
    kind: str  # the cursor class (CLASSES)
    document: str  # the file without the rest of the line
    offset: int
    truth: str  # the rest of the line


@dataclass
class Result:
    cursor: Cursor
    shown: str | None  # what the default path showed; None: nothing
    reachable: bool  # the truth was among the candidates
    ms: float

    @property
    def right(self) -> bool:
        return self.shown is not None and exact_match(self.shown, self.cursor.truth)


def split_of(name: str) -> str:
    """Which half a cursor belongs to: fixed by its name, the same in every run."""
    return SPLITS[zlib.crc32(name.encode()) % 2]


def cursors(folder: Path, per_class: int, seed: int, split: str = REPORT) -> list[Cursor]:
    """`per_class` cursors of each class of the package at `folder`, of the `split` half."""
    found: dict[str, list[Cursor]] = {kind: [] for kind in CLASSES}
    for case in cut_cursor_cases(folder, CANDIDATES, seed=seed, classes=CLASSES):
        path, line, _ = case.id.split("/", 1)[1].rsplit(":", 2)
        if split_of(f"{folder.name}/{path}:{line}:{case.kind}") != split:
            continue
        found[case.kind].append(Cursor(folder.name, path, case.kind,
                                       case.file_before + case.file_after,
                                       len(case.file_before), case.middle))
    rng = random.Random(seed)
    return [c for kind in CLASSES
            for c in rng.sample(found[kind], min(per_class, len(found[kind])))]


def run(folders: list[Path], backend: Backend, per_class: int, seed: int,
        split: str = REPORT, settings: Settings | None = None,
        on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """Every cursor of `folders` through the default path (`settings`: the defaults)."""
    return [result for folder in folders
            for result in run_cursors(folder, cursors(folder, per_class, seed, split), backend,
                                      settings, on_result)]


def run_cursors(folder: Path, picked: list[Cursor], backend: Backend,
                settings: Settings | None = None,
                on_result: Callable[[Result], None] | None = None) -> list[Result]:
    """`picked` cursors of the package at `folder` through the default path."""
    pipeline = Pipeline(backend, settings or Settings())
    index = RepositoryIndex(folder)
    index.build()
    results = []
    for cursor in picked:
        results.append(complete(pipeline, index, folder, cursor))
        if on_result is not None:
            on_result(results[-1])
    return results


def complete(pipeline: Pipeline, index: RepositoryIndex, folder: Path, cursor: Cursor
             ) -> Result:
    """What `pipeline` shows at `cursor`, and whether the candidates held the truth."""
    repository = RepositoryContext(index, cursor.path)
    request = CompletionRequest(cursor.document, cursor.offset, language_for("python"),
                                (folder / cursor.path).as_uri(), repository=repository)
    pipeline.cache.clear()
    start = time.perf_counter()
    shown = pipeline.complete(request)  # as an editor asks unprompted: the gate applies
    ms = (time.perf_counter() - start) * 1000
    held = candidates(cursor.document, cursor.offset, repository)
    return Result(cursor, shown.text if isinstance(shown, Completion) else None,
                  any(exact_match(c.text, cursor.truth) for c in held), ms)


def table(results: list[Result]) -> list[dict[str, Any]]:
    """One row per package and cursor class, then per package for mid-line cursors and all,
    then all packages together."""
    groups: dict[tuple[str, str], list[Result]] = {}
    for result in results:
        package, kind = result.cursor.package, result.cursor.kind
        keys = {(package, kind), (package, "mid-line" if kind in MID_LINE else kind),
                (package, "all"), ("all", kind if kind == LINE_START else "mid-line"),
                ("all", "all")}
        for key in keys:
            groups.setdefault(key, []).append(result)
    packages = list(dict.fromkeys(r.cursor.package for r in results)) + ["all"]
    kinds = [*CLASSES, "mid-line", "all"]
    return [_row(package, kind, groups[(package, kind)])
            for package in packages for kind in kinds if (package, kind) in groups]


def _row(package: str, kind: str, results: list[Result]) -> dict[str, Any]:
    shown = [r for r in results if r.shown is not None]
    right = sum(r.right for r in results)
    return {"package": package, "cursors": kind, "count": len(results),
            "right": right,
            "rightOfAll": _share(right, len(results)),
            "shown": _share(len(shown), len(results)),
            "rightOfShown": _share(right, len(shown)),
            "ceiling": _share(sum(r.reachable for r in results), len(results)),
            "p50Ms": round(statistics.median(r.ms for r in results), 1) if results else 0.0}


def _share(part: int, whole: int) -> float:
    return round(part / whole, 3) if whole else 0.0
