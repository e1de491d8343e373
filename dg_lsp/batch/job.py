"""Batch mode's work on one file: its targets, their edits, and the edits merged into one text.

Every target's edit is computed against the file as it is (so each sees the same context, and
the results do not depend on the order they were computed in), then the edits that do not
overlap are applied from the last to the first, which keeps every offset valid. The merged
file is parsed again: if it has more syntax errors than before, edits are taken back one at a
time in document order, each kept only if the file stays as parseable as it was. Nothing is
written here: callers write a file once, whole, when all its targets are done.

`BatchJob` is everything a worker needs besides the engine (it is sent to Ray workers as it is);
`run_files` works through files with one backend, `process_file` through one file.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import tree_sitter as ts

from dg_lsp.actions.holes import action_edit, all_hole_targets
from dg_lsp.actions.targets import (
    COMPLETE_BODY,
    DOCSTRING,
    FILL_FUNCTION,
    FIX_SYNTAX,
    REWRITE,
    Target,
    all_targets,
    rewrite_target,
)
from dg_lsp.document import accept
from dg_lsp.document.edit import Edit, RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.positions import UTF32, position_at
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import LanguageSpec, language_for
from dg_lsp.syntax.query import captures
from engine.backend import Backend, CountingBackend

# The command line's action names → actions.py's.
ACTION_NAMES = {"docstrings": DOCSTRING, "complete-bodies": COMPLETE_BODY,
                "fix-syntax": FIX_SYNTAX, "rewrite": REWRITE, "fill-holes": FILL_FUNCTION}


class QueryError(Exception):
    """A user query that does not compile for any language it is run on, or lacks captures."""


@dataclass
class BatchJob:
    """What to do to every file (picklable: Ray workers receive it as it is)."""

    action: str  # one of actions.py's: "docstring", "complete-body", "fix-syntax", "rewrite",
    # or "fill-holes" (dg_lsp.actions.holes)
    settings: Settings = field(default_factory=Settings)
    query: str | None = None  # the source of a user .scm query
    instruction: str | None = None
    strength: float | None = None


@dataclass
class Record:
    """What happened at one target (one row of the --json report)."""

    file: str
    start: tuple[int, int]  # 1-based line and column (characters) of the target's span
    end: tuple[int, int]
    action: str
    name: str
    result: str  # "edited", "refused: <reason>" or "error: <reason>"
    steps: int = 0
    tokens: int | None = None
    seconds: float = 0.0
    replica: str = ""  # the team engine's replica that served it, where the answer says
    attempts: int = 1  # tries: more than one when the engine was busy or a replica was lost
    # The exception behind an "error: ..." result, for callers that retry on its type.
    error: Exception | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name != "error"}
        data["start"], data["end"] = list(self.start), list(self.end)
        data["tokens_per_step"] = (round(self.tokens / self.steps, 3)
                                   if self.tokens is not None and self.steps else None)
        data["seconds"] = round(self.seconds, 3)
        return data


@dataclass
class FileResult:
    label: str
    old: str
    new: str
    records: list[Record]
    worker: str = ""  # the Ray worker that computed it (host:pid); "" when local
    failure: str = ""  # why the file was left as it was (a target failed, it was not written)


# -- targets ----------------------------------------------------------------------------------


class Queries:
    """A user query compiled for each language it meets (tree-sitter queries are per language)."""

    def __init__(self, source: str | None, action: str) -> None:
        self.source = source
        self.action = action
        self._compiled: dict[str, ts.Query | QueryError] = {}

    def for_language(self, language: LanguageSpec) -> ts.Query | None:
        """The compiled query (None: use the built-in one); QueryError when it does not fit."""
        if self.source is None:
            return None
        if language.name not in self._compiled:
            try:
                self._compiled[language.name] = compile_query(self.source, language, self.action)
            except QueryError as exc:
                self._compiled[language.name] = exc
        compiled = self._compiled[language.name]
        if isinstance(compiled, QueryError):
            raise compiled
        return compiled


def compile_query(source: str, language: LanguageSpec, action: str) -> ts.Query:
    """`source` compiled for `language`; QueryError when malformed or missing the captures
    the action reads (@target for rewrite, @function or @class for the others)."""
    try:
        query = ts.Query(language.language, source)
    except (ts.QueryError, ValueError) as exc:
        raise QueryError(f"{language.name}: {exc}") from None
    names = {query.capture_name(i) for i in range(query.capture_count)}
    needed = {"target"} if action == REWRITE else {"function", "class"}
    if not names & needed:
        wanted = " or ".join(f"@{n}" for n in sorted(needed))
        raise QueryError(f"{language.name}: the query captures no {wanted} (it has "
                         f"{', '.join('@' + n for n in sorted(names)) or 'no captures'})")
    return query


def file_targets(doc: ParsedText, action: str, query: ts.Query | None) -> list[Target]:
    """The file's targets in document order (nested rewrite captures: the outermost)."""
    if action == FILL_FUNCTION:  # each function's stub holes, filled together
        return all_hole_targets(doc)
    if action != REWRITE:
        return all_targets(doc, action, query)
    if query is None:
        raise QueryError("rewrite needs a query whose @target captures say what to rewrite")
    spans = []
    for node in captures(query, doc.tree.root_node).get("target", []):
        target = rewrite_target(doc.text, *doc.span(node))
        if target is not None:
            spans.append(target)
    targets: list[Target] = []
    for target in sorted(spans, key=lambda t: (t.start, -t.end)):
        if not targets or target.start >= targets[-1].end:
            targets.append(target)
    return targets


# -- one file ---------------------------------------------------------------------------------


def process_file(backend: Backend, label: str, text: str, job: BatchJob,
                 queries: Queries | None = None,
                 cancel: Callable[[], bool] | None = None) -> FileResult:
    """Every target of the file run through `backend`, and the merged text."""
    doc = ParsedText(text, language_for(None, label))
    if doc.language is None:
        return FileResult(label, text, text, [])
    queries = queries or Queries(job.query, job.action)
    targets = file_targets(doc, job.action, queries.for_language(doc.language))
    outcomes = [run_target(backend, doc, label, t, job, cancel) for t in targets]
    return merge(label, doc, outcomes)


def run_target(backend: Backend, doc: ParsedText, label: str, target: Target, job: BatchJob,
               cancel: Callable[[], bool] | None = None) -> tuple[Record, Edit | None]:
    """(its record, the Edit or None) for one target; failures are recorded, never raised."""
    record = target_record(doc, label, target)
    counting = CountingBackend(backend)
    started = time.perf_counter()
    edit = None
    try:
        edit = action_edit(counting, doc, target, job.settings, job.instruction, job.strength,
                           cancel)
        record.result = "edited"
    except RewriteError as exc:
        record.result = f"refused: {exc}"
    except Exception as exc:  # noqa: BLE001 - one target's failure must not stop the rest
        record.result = f"error: {type(exc).__name__}: {exc}"
        record.error = exc
    record.steps = counting.steps
    record.tokens = counting.tokens
    record.seconds = time.perf_counter() - started
    return record, edit


def target_record(doc: ParsedText, label: str, target: Target, result: str = "") -> Record:
    """A record for `target` of `doc`, with no work done yet."""
    return Record(label, _position(doc.text, target.start), _position(doc.text, target.end),
                  target.action, target.name, result)


def merge(label: str, doc: ParsedText, outcomes: list[tuple[Record, Edit | None]]) -> FileResult:
    """The file with every compatible edit applied (see the module's docstring)."""
    chosen: list[tuple[Record, Edit]] = []
    for record, edit in sorted(((r, e) for r, e in outcomes if e is not None),
                               key=lambda pair: pair[1].start):
        if chosen and _overlap(chosen[-1][1], edit):
            record.result = "refused: overlaps an earlier edit in the file"
        else:
            chosen.append((record, edit))
    new = apply_edits(doc.text, [e for _, e in chosen])
    if not accept.parses_no_worse(ParsedText(new, doc.language), doc.errors):
        kept: list[Edit] = []
        for record, edit in chosen:
            candidate = apply_edits(doc.text, kept + [edit])
            if accept.parses_no_worse(ParsedText(candidate, doc.language), doc.errors):
                kept.append(edit)
            else:
                record.result = "refused: conflicts with the file's other edits"
        new = apply_edits(doc.text, kept)
    return FileResult(label, doc.text, new, [r for r, _ in outcomes])


def apply_edits(text: str, edits: list[Edit]) -> str:
    """`text` with non-overlapping edits applied, the last one first."""
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


def run_files(backend: Backend, files: list[tuple[str, str]], job: BatchJob,
              cancel: Callable[[], bool] | None = None) -> Iterator[FileResult]:
    """process_file over (label, text) pairs, one after another (a Ray worker's loop)."""
    queries = Queries(job.query, job.action)
    for label, text in files:
        yield process_file(backend, label, text, job, queries, cancel)


def _overlap(a: Edit, b: Edit) -> bool:
    """Whether b (starting at or after a) touches what a replaces or inserts at a's place."""
    return b.start < a.end or b.start == a.start


def _position(text: str, offset: int) -> tuple[int, int]:
    """1-based (line, column in characters), lines counted as an editor counts them."""
    at = position_at(text, offset, UTF32)
    return at.line + 1, at.character + 1

