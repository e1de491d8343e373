"""`dg-lsp eval --suite next-edit`: next-edit suggestions on held-out third-party code.

Cases are synthetic edits (engine.edits.synthetic) cut from packages no model here trained on (the
bench's held-out packages): a name renamed or a literal changed at one occurrence, a line
changed by a pattern (a value wrapped in a call, a keyword argument added) with an alike line
near it, a parameter removed from a function's header or added at its end with a call of it
near it (class "parameter": the call's argument taken out, or the new name passed), and edits
that imply nothing (a blank line added, a statement's end typed); and real
ones (class "real", engine.edits.real): a hunk between two consecutive releases of those
packages (dg_lsp.measure.eval.heldout.REAL_EDIT_PAIRS) with the hunk after it, where that next hunk
rewrites a span the server asks about after the first. Each case
is replayed as an editor does it, through a real `dg-lsp serve`: the document opened as it
was, the edit typed a character at a time (`didChange`), then `textDocument/copilotInlineEdit`
at the cursor.

A suggestion is exact when it turns one of the other occurrences of the changed word in
the edit's region (the innermost definition around it, cut to 10 lines either side: the
issue's "within the region"; the rename's or the literal's next hunk, in whatever order the
user would take them) into the new word, the alike line into the line changed the same way,
or the call into the call changed as the header was; its location is right when it is on one
of them. Only cases with such a span are cut (a parameter renamed in one method implies
nothing about the next method's). A real case has
one right span, the next hunk's, and one exact answer, the next release's text there; it is
cut only when the server's span finder (dg_lsp.next_edit.suggest.spans) asks about that span. After
an edit that implies nothing, any suggestion is noise. The default path (the resident engine,
default settings) comes first, the in-process engine beside it; the baselines beside both:
no suggestion at all, and a rename-only rule (dg_lsp.next_edit.suggest.rename_rule).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from lsprotocol import types

from dg_lsp.document.parsed import ParsedText
from dg_lsp.measure.bench_lsp import PATHS, Session
from dg_lsp.next_edit.history import EditHistory, RecordedEdit
from dg_lsp.next_edit.suggest import NextEdit, region, rename_rule, spans
from dg_lsp.positions import UTF16, offset_at
from dg_lsp.syntax.languages import language_for
from engine.data.stats import wilson_interval
from engine.edits.prompt import occurrences
from engine.edits.real import REAL, real_edits
from engine.edits.spans import MAX_SPANS
from engine.edits.synthetic import NOOP, SyntheticEdit, noop_edit, synthetic_edit

# Cut in this order from one seed: a class added last leaves the others' cases as they were.
SYNTHETIC_CLASSES = ("rename", "literal", "pattern", NOOP, "parameter")
CLASSES = ("rename", "literal", "pattern", "parameter", REAL, NOOP)
DEFAULT_PER_CLASS = 30


def cut_edits(folders: list[Path], per_class: int, seed: int) -> list[SyntheticEdit]:
    """`per_class` synthetic edits of each class from the Python files under `folders`."""
    texts = [p.read_text(encoding="utf-8", errors="replace")
             for folder in folders for p in sorted(folder.rglob("*.py"))
             if p.stat().st_size > 1000]
    if not texts:
        raise ValueError("no Python files to cut next-edit cases from")
    rng = np.random.default_rng(seed)
    cases: list[SyntheticEdit] = []
    seen: set[SyntheticEdit] = set()
    for kind in SYNTHETIC_CLASSES:
        found, tries = 0, 0
        while found < per_class and tries < 200 * per_class:
            tries += 1
            text = texts[int(rng.integers(0, len(texts)))]
            case = noop_edit(text, rng) if kind == NOOP else synthetic_edit(text, rng, kind)
            # A parameter case cut twice counts once: the held-out packages hold few functions
            # with a call near them. The classes before it keep the cases their seeds always
            # gave (a literal among 30 is sometimes cut twice).
            again = kind == "parameter" and case in seen
            if case is not None and not again and (kind == NOOP or right_spans(case)):
                cases.append(case)
                seen.add(case)
                found += 1
    return cases


def cut_real(pairs: list[tuple[str, str]], count: int, seed: int) -> list[SyntheticEdit]:
    """`count` real edits (a seeded sample, in the order they were cut) from the (old, new)
    versions of files in `pairs`, of those whose next hunk the server asks about."""
    found = [case for old, new in pairs for case in real_edits(old, new) if right_spans(case)]
    if len(found) <= count:
        return found
    # Its own generator: the synthetic classes' cases stay those the seed always gave.
    chosen = np.random.default_rng([seed, 1]).choice(len(found), count, replace=False)
    return [found[i] for i in sorted(chosen)]


def recorded(case: SyntheticEdit) -> RecordedEdit:
    """The case's edit as the server's history records it."""
    history = EditHistory()
    history.record(case.original, case.change_at, case.change_at + len(case.removed),
                   case.inserted)
    assert history.last is not None
    return history.last


def edit_region(case: SyntheticEdit) -> tuple[int, int]:
    """[start, end) of the region the edit implies changes in, as the issue defines it and
    the server computes it (dg_lsp.next_edit.suggest.region): the innermost definition around the
    edit, cut to REGION_LINES lines either side."""
    return region(ParsedText(case.text, language_for("python", "case.py")), recorded(case))


def right_spans(case: SyntheticEdit) -> set[tuple[int, int]]:
    """The spans of `case.text` a right suggestion rewrites, inside the edit's region: the
    changed word's other occurrences (for a pattern: the alike line). A word of the same
    name in another function is another variable (a parameter renamed in one method leaves
    the next method's alone), and a case with nothing to change in the region is not cut."""
    if case.kind == NOOP:
        return set()
    if case.kind == REAL:
        edit = recorded(case)
        doc = ParsedText(case.text, language_for("python", "case.py"))
        asked = {(s.start, s.end) for s in spans(doc, edit, edit.end)[:MAX_SPANS]}
        return {(case.start, case.end)} & asked
    lo, hi = edit_region(case)
    if case.span_kind != "word":  # a pattern's alike line, a parameter's call's arguments
        return {(case.start, case.end)} if lo <= case.start and case.end <= hi else set()
    edited = (case.change_at, case.change_at + len(case.inserted))
    return {(s, e) for s, e in occurrences(case.text, case.removed, lo, hi) if (s, e) != edited}


@dataclass
class Outcome:
    suggested: bool
    located: bool
    exact: bool
    seconds: float | None = None


def judge(case: SyntheticEdit, found: NextEdit | None) -> Outcome:
    if found is None:
        return Outcome(False, False, False)
    located = (found.start, found.end) in right_spans(case)
    # A rename's and a literal's expected text is the new word, which the edit inserted.
    return Outcome(True, located, located and found.text == case.expected)


def typed(case: SyntheticEdit) -> list[tuple[int, int, str]]:
    """The edit as an editor sends it: the removed word replaced by the first character of
    the new one, then a character at a time; a real edit over lines at once (a paste, a
    formatter: typing it would be recorded as several edits)."""
    at, removed, inserted = case.change_at, case.removed, case.inserted
    if not inserted or (case.kind == REAL and "\n" in removed + inserted):
        return [(at, at + len(removed), inserted)]
    changes = [(at, at + len(removed), inserted[0])]
    changes += [(at + i, at + i, ch) for i, ch in enumerate(inserted[1:], start=1)]
    return changes


@dataclass
class Rows:
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)

    def add(self, kind: str, outcome: Outcome) -> None:
        self.outcomes.setdefault(kind, []).append(outcome)


async def replay(session: Session, cases: list[SyntheticEdit]) -> Rows:
    rows = Rows()
    for case in cases:
        text = case.original
        uri = session.open(text)
        for start, end, new in typed(case):
            session.replace(uri, text, start, end, new)
            text = text[:start] + new + text[end:]
        assert text == case.text
        cursor = case.change_at + len(case.inserted)
        edits, seconds = await session.ask_next_edit(uri, text, cursor)
        found = None
        if edits:
            edit = _plain(edits[0])
            rng = types.Range(types.Position(**edit["range"]["start"]),
                              types.Position(**edit["range"]["end"]))
            start = offset_at(text, rng.start, UTF16)
            end = offset_at(text, rng.end, UTF16)
            found = NextEdit(start or 0, end or 0, edit["text"], None, 0)
        outcome = judge(case, found)
        outcome.seconds = seconds
        rows.add(case.kind, outcome)
        session.close(uri)
    return rows


def _plain(value: Any) -> Any:
    """A result pygls hands back as nested objects (a method LSP does not define), as dicts."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return [_plain(v) for v in value]
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    return value


def rule_rows(cases: list[SyntheticEdit]) -> Rows:
    rows = Rows()
    language = language_for("python", "case.py")
    for case in cases:
        edit = recorded(case)
        found = rename_rule(edit, ParsedText(case.text, language), edit.end)
        rows.add(case.kind, judge(case, found))
    return rows


def summary(name: str, rows: Rows) -> list[dict[str, Any]]:
    out = []
    for kind in CLASSES:
        got = rows.outcomes.get(kind, [])
        if not got:
            continue
        seconds = sorted(o.seconds for o in got if o.seconds is not None)
        n, exact = len(got), sum(o.exact for o in got)
        out.append({
            "path": name, "class": kind, "cases": n,
            "suggested": sum(o.suggested for o in got) / n,
            "located": None if kind == NOOP else sum(o.located for o in got) / n,
            "exact": None if kind == NOOP else exact / n,
            "exact95": None if kind == NOOP else wilson_interval(exact, n),
            "p50Ms": _ms(seconds, 0.5), "p95Ms": _ms(seconds, 0.95)})
    return out


def _ms(seconds: list[float], q: float) -> float | None:
    if not seconds:
        return None
    if len(seconds) == 1:
        return round(seconds[0] * 1000, 1)
    return round(statistics.quantiles(seconds, n=100, method="inclusive")[int(q * 100) - 1]
                 * 1000, 1)


async def measure(cases: list[SyntheticEdit], model: str | None, device: str,
                  settings: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Rows per path and class: the LSP paths (default first), then the baselines."""
    table = []
    for path_name, extra in PATHS.items():
        with tempfile.TemporaryDirectory() as runtime:
            session = Session(model, device, extra, runtime, settings)
            await session.start()
            try:
                rows = await replay(session, cases)
            finally:
                await session.stop()
        table += summary(path_name, rows)
    table += summary("rename-only rule", rule_rows(cases))
    nothing = Rows()
    for case in cases:
        nothing.add(case.kind, Outcome(False, False, False))
    table += summary("no suggestion", nothing)
    return table


def format_table(table: list[dict[str, Any]]) -> str:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.0f}%"

    def interval(v: tuple[float, float] | None) -> str:
        return "-" if v is None else f"{100 * v[0]:.0f}-{100 * v[1]:.0f}%"

    header = ["path", "class", "cases", "exact", "exact 95%", "located", "suggested", "p50 ms",
              "p95 ms"]
    rows = [header] + [[r["path"], r["class"], str(r["cases"]), pct(r["exact"]),
                        interval(r.get("exact95")), pct(r["located"]), pct(r["suggested"]),
                        "-" if r["p50Ms"] is None else f"{r['p50Ms']:.0f}",
                        "-" if r["p95Ms"] is None else f"{r['p95Ms']:.0f}"] for r in table]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in
                       enumerate(zip(row, widths, strict=True))) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def run(folders: list[Path], per_class: int, seed: int, model: str | None, device: str,
        real_pairs: list[tuple[str, str]] | None = None
        ) -> tuple[list[SyntheticEdit], list[dict[str, Any]]]:
    """The cases cut from `folders` (and, given `real_pairs`, the real ones), measured."""
    cases = cut_edits(folders, per_class, seed)
    if real_pairs:
        cases += cut_real(real_pairs, per_class, seed)
    return cases, asyncio.run(measure(cases, model, device))
