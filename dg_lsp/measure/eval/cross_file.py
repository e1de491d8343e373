"""`dg-lsp eval --suite cross-file`: what the repository as context (`repositoryContext`)
changes, on mid-line cursors of multi-file held-out packages (or `--cases-from DIR`).

Cursors are cut as the bench's (engine.data.cases.cut_cursor_cases, the classes after `=`,
`(`, `.` and `, `; the rest of the line is what the user has not typed). The cursor's file is
the document with that rest removed; the package's other files are the repository (its index
never gives the cursor's own file: that copy holds the answer). A cursor is cross-file where
the rest of its line is a text only other files' alike lines hold there (not the file's own),
or names something another file of the package defines and the file does not; the others are
control cursors. Each runs the default path (`Pipeline` on the resident engine, the default
settings and gate) with `repositoryContext` false, then with each part of it added (CONTEXTS:
other files' texts as choices, the snippets, the gate's reading); what it shows is scored against
the rest of the line: exactly right (whitespace-normalized), the share shown, and the edit
similarity of what is shown.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dg_lsp.completion.pipeline import Completion, CompletionRequest, Pipeline
from dg_lsp.context import build_context
from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from dg_lsp.repository.candidates import FILE, LINE, REPOSITORY
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend
from engine.data.cases import cut_cursor_cases
from engine.types import Draft, last_draft

MID_LINE = ("after =", "after (", "after .", "after ,")
CROSS_FILE, CONTROL = "cross-file", "control"
CANDIDATES = 4000  # cursors cut per package before the classes are drawn from them
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Cursor:
    package: str
    path: str  # in the package
    kind: str  # CROSS_FILE or CONTROL
    document: str  # the file without the rest of the line
    offset: int
    truth: str  # the rest of the line


def cursors(folder: Path, index: RepositoryIndex, per_class: int, seed: int) -> list[Cursor]:
    """`per_class` cross-file and control cursors of the package at `folder`."""
    language = language_for("python")
    found: dict[str, list[Cursor]] = {CROSS_FILE: [], CONTROL: []}
    for case in cut_cursor_cases(folder, CANDIDATES, seed=seed, classes=MID_LINE):
        path = case.id.split("/", 1)[1].rsplit(":", 2)[0]
        document, offset = case.file_before + case.file_after, len(case.file_before)
        ctx = build_context(document, offset, language, 480,
                            repository=RepositoryContext(index, path, snippets=False))
        own = {c.text for c in ctx.candidates if c.where == FILE and LINE in c.sources}
        others = {c.text for c in ctx.candidates if c.where == REPOSITORY and LINE in c.sources}
        named = any(_defined_elsewhere(index, path, name, document)
                    for name in _NAME.findall(case.middle))
        cross = (case.middle in others and case.middle not in own) or named
        found[CROSS_FILE if cross else CONTROL].append(
            Cursor(folder.name, path, CROSS_FILE if cross else CONTROL, document, offset,
                   case.middle))
    rng = random.Random(seed)
    return [c for kind in (CROSS_FILE, CONTROL)
            for c in rng.sample(found[kind], min(per_class, len(found[kind])))]


def _defined_elsewhere(index: RepositoryIndex, path: str, name: str, document: str) -> bool:
    return (len(name) >= 3 and any(p != path for p in index.definers(name))
            and re.search(rf"\b(?:def|class)\s+{name}\b", document) is None)


# The rows of a run: repositoryContext false, then the parts of it added one at a time
# (RepositoryContext fields): other files' texts as choices only, with the snippets ahead of
# the prefix, and all (the gate reading another file's chosen text as the file's own).
CONTEXTS: dict[str, dict[str, bool] | None] = {
    "off": None,
    "choices": {"snippets": False, "gate": False},
    "choices+snippets": {"gate": False},
    "all": {},
}


def run(folders: list[Path], backend: Backend, per_class: int, seed: int,
        on_cursor: Callable[[dict[str, Any]], None] | None = None) -> list[dict[str, Any]]:
    """One row per (package, cursor class, context of CONTEXTS). The engine is asked once
    per distinct request: a part that leaves a cursor's request as it was costs nothing."""
    rows = []
    for folder in folders:
        index = RepositoryIndex(folder)
        index.build()
        picked = cursors(folder, index, per_class, seed)
        asked: dict[tuple, Draft | None] = {}
        for name, fields in CONTEXTS.items():
            pipeline = Pipeline(backend, Settings(repository_context=fields is not None))
            scored: dict[str, list[tuple[bool, bool, float]]] = {CROSS_FILE: [], CONTROL: []}
            for cursor in picked:
                text = shown_text(pipeline, index, folder, cursor, fields, asked)
                shown = text is not None
                text = text or ""
                right = shown and exact_match(text, cursor.truth)
                scored[cursor.kind].append((shown, right, edit_similarity(text, cursor.truth)))
                if on_cursor is not None:
                    on_cursor({**vars(replace(cursor, document="")), "context": name,
                               "shown": shown, "text": text, "exact": right})
            for kind, results in scored.items():
                rows.append(_row(folder.name, kind, name, results))
    return rows


def shown_text(pipeline: Pipeline, index: RepositoryIndex, folder: Path, cursor: Cursor,
               fields: dict[str, Any] | None, asked: dict[tuple, Draft | None]) -> str | None:
    """What `pipeline` shows at `cursor` of `folder` (None: nothing), with the repository
    context `fields` (RepositoryContext's; None: off). The engine is asked once per distinct
    request: `asked` keeps its last draft of each."""
    request = CompletionRequest(
        cursor.document, cursor.offset, language_for("python"), (folder / cursor.path).as_uri(),
        repository=RepositoryContext(index, cursor.path, **(fields or {})))
    pipeline.cache.clear()
    ctx, drafts = pipeline.start(request)
    key = (ctx.prefix, ctx.suffix, ctx.kind, ctx.candidates)
    if key not in asked:
        asked[key] = last_draft(drafts)
    drafts.close()
    decided = pipeline.decide(request, ctx, asked[key])
    return decided.text if isinstance(decided, Completion) else None


def _row(package: str, kind: str, context: str, results: list[tuple[bool, bool, float]]
         ) -> dict[str, Any]:
    shown = [r for r in results if r[0]]
    return {"package": package, "cursors": kind, "context": context,
            "count": len(results), "exactlyRight": sum(r[1] for r in results),
            "shownRate": round(len(shown) / len(results), 3) if results else 0.0,
            "editSimilarityShown": round(sum(r[2] for r in shown) / len(shown), 3)
            if shown else 0.0}
