"""What the model reads around the cursor: prefix/suffix windows, the hole kind, other files.

Windows are cut on whole lines that start (prefix) or end (suffix) a statement or definition,
so the model never sees half a construct at the edge of its canvas. Budgets are in characters
(`char_budget`: the canvas's token budget at CHARS_PER_TOKEN), split by the same suffix
fraction the request carries to the engine. The engine's token cut (engine.text.canvas) owns the
split of the canvas: these windows bound the text sent and choose syntax boundaries for its
edges, and the token cut splits what it keeps of them by the request's fraction.
"""

from __future__ import annotations

import functools
import keyword
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.repository.candidates import FILE, LINE, Candidate, candidates
from dg_lsp.repository.retrieve import RepositoryContext
from dg_lsp.syntax.languages import LanguageSpec
from dg_lsp.syntax.query import captures
from engine.text.canvas import other_file_snippet
from engine.text.units import CLOSERS
from engine.types import SUFFIX_FRACTION

REST_OF_LINE = "rest_of_line"
BLOCK = "block"
BRACKETS = "brackets"
COMMENT = "comment"
HOLE_KINDS = (REST_OF_LINE, BLOCK, BRACKETS, COMMENT)

# Only this much text around the cursor is parsed, so a 10 MB file costs what a small one does.
PARSE_SPAN_FACTOR = 4
SNIPPET_LINES = 60  # other-file windows, as Copilot's neighbouring tabs use
MAX_SNIPPETS = 4
MAX_OTHER_DOCUMENT_CHARS = 500_000
# At most this share of the prefix's budget goes to the repository's snippets (definitions,
# windows: dg_lsp.repository.retrieve), so the code before the cursor keeps the most of it.
REPOSITORY_SHARE = 0.4

# Converts the canvas's token budget into the characters context windows are measured in;
# code averages a little over 3 characters per token, so the windows rarely overflow.
CHARS_PER_TOKEN = 3
MIN_BUDGET_CHARS = 64

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Another document's edit is read where it shares a name with the last lines before the
# cursor; keywords and the receiver's name are shared by everything.
EDIT_NEAR_CHARS = 480
_COMMON_WORDS = frozenset(keyword.kwlist) | {
    "self", "cls", "this", "const", "let", "var", "function", "func", "return", "import",
    "from", "new", "None", "true", "false", "null", "undefined", "print", "len", "str", "int"}
_NEWLINE = re.compile("\n")


@dataclass
class Context:
    prefix: str  # what the model reads before the hole: other-file snippets, then prefix window
    suffix: str  # what the model reads after the hole
    kind: str  # one of HOLE_KINDS
    line_prefix: str  # the cursor line up to the cursor
    line_suffix: str  # the cursor line after the cursor
    base_indent: str  # indentation the hole's lines are relative to (the opener's, for blocks)
    indent_unit: str  # the file's indentation step: a tab or N spaces
    closer: str | None  # the bracket that already closes the hole (brackets kind)
    prefix_window: str  # the prefix without other-file snippets
    previous_line: str  # the last non-blank line before the cursor line
    language: LanguageSpec | None
    document: str  # the whole text: the names it knows (imports sit at the top, far away)
    # What the file and the repository already hold where this hole is
    # (dg_lsp.repository.candidates), best first; the model judges them
    # (dg_lsp.completion.judge). Rest-of-line and brackets holes only.
    candidates: tuple[Candidate, ...] = ()
    # Whether the confidence gate counts other files' alike lines as repeated.
    repository_gate: bool = True

    @property
    def repeats(self) -> tuple[str, ...]:
        """The texts of the alike lines among the candidates (`it = ` + `iter(iterable)`
        where another line reads so), the file's first."""
        return tuple(c.text for c in self.candidates if LINE in c.sources)

    @property
    def gate_repeats(self) -> tuple[str, ...]:
        """The texts the confidence gate reads as the file's (its `repeated` input): the
        alike lines' (another file's too, unless `repository_gate` is off)."""
        return tuple(c.text for c in self.candidates if LINE in c.sources
                     and (self.repository_gate or c.where == FILE))


@dataclass
class OtherDocument:
    path: str  # shown to the model, e.g. a workspace-relative path
    text: str


def char_budget(canvas_length: int, hole: int) -> int:
    """Characters of context (prefix and suffix together) for a canvas of `canvas_length`
    tokens around a hole of `hole` tokens."""
    return max(MIN_BUDGET_CHARS, (canvas_length - hole) * CHARS_PER_TOKEN)


def build_context(
    text: str,
    offset: int,
    language: LanguageSpec | None,
    budget_chars: int = 700,
    suffix_fraction: float = SUFFIX_FRACTION,
    other_documents: Iterable[OtherDocument] = (),
    repository: RepositoryContext | None = None,
    recent_edits: Iterable[OtherDocument] = (),
) -> Context:
    """Context for a hole at character `offset` of `text`; with `repository`, what the rest
    of the repository holds for it too (dg_lsp.repository.retrieve), and with `recent_edits`
    (other documents' latest edited lines) those that share a name with the lines before
    the cursor, where the repository's snippets left room."""
    offset = max(0, min(offset, len(text)))
    suffix_budget = max(1, int(budget_chars * suffix_fraction))
    prefix_budget = max(1, budget_chars - suffix_budget)

    # The parsed region: whole lines around the cursor, a few budgets wide; inside one line
    # longer than that (minified code, data), a cut within the line, so that a 1 MB line
    # costs what a short one does.
    span = PARSE_SPAN_FACTOR * budget_chars
    region_start, region_end = max(0, offset - span), min(len(text), offset + span)
    if region_start > 0:
        newline = text.find("\n", region_start, offset)
        region_start = newline + 1 if newline >= 0 else region_start
    if region_end < len(text):
        newline = text.rfind("\n", offset, region_end)
        region_end = newline if newline >= 0 else region_end
    head, tail = text[region_start:offset], text[offset:region_end]
    line_prefix = head[head.rfind("\n") + 1:]
    line_suffix = tail[:_line_end(tail, 0)]

    tree = language.parser().parse((head + tail).encode()) if language else None
    units = _captures(tree, language, "unit") if tree else []
    unit_start_rows = {n.start_point.row for n in units}
    unit_end_rows = {n.end_point.row for n in units}

    head_lines = head.split("\n")
    tail_lines = tail.split("\n")
    cursor_row = len(head_lines) - 1

    previous_line = next((ln for ln in reversed(head_lines[:-1]) if ln.strip()), "")
    kind, closer, base_indent = _hole_kind(tree, language, head, line_prefix, line_suffix,
                                           previous_line)
    held = candidates(text, offset, repository) if kind in (REST_OF_LINE, BRACKETS) else ()
    found = ""
    if repository is not None and language is not None:
        found = repository.snippets_for(head, line_prefix, language,
                                        int(prefix_budget * REPOSITORY_SHARE),
                                        any(LINE in c.sources for c in held))
    if language is not None and recent_edits:
        room = int(prefix_budget * REPOSITORY_SHARE) - len(found)
        found = edited_snippets(head, recent_edits, language, room) + found
    prefix_budget -= len(found)

    prefix_window = _cut_prefix(head_lines, prefix_budget, unit_start_rows)
    suffix_window = _cut_suffix(tail_lines, suffix_budget,
                                {r - cursor_row for r in unit_end_rows if r >= cursor_row})
    prefix = found + prefix_window
    remaining = prefix_budget - len(prefix_window)
    if language and remaining > 0 and len(prefix_window) == len(text[:offset]):
        snippets = _other_file_snippets(head[-SNIPPET_LINES * 80:], other_documents, language,
                                        remaining)
        prefix = snippets + prefix

    return Context(
        prefix=prefix,
        suffix=suffix_window,
        kind=kind,
        line_prefix=line_prefix,
        line_suffix=line_suffix,
        base_indent=base_indent,
        indent_unit=detect_indent_unit(head + tail, language),
        closer=closer,
        prefix_window=prefix_window,
        previous_line=previous_line,
        language=language,
        document=text,
        candidates=held,
        repository_gate=repository is None or repository.gate,
    )


def edited_snippets(head: str, edits: Iterable[OtherDocument], language: LanguageSpec,
                    budget: int) -> str:
    """The edited lines of other documents (latest first) that share a name of at least
    three characters with the lines before the cursor (the end of `head`), as comments,
    within `budget` characters; the latest is put last, next to what follows."""
    near = set(_IDENTIFIER.findall(head[-EDIT_NEAR_CHARS:])) - _COMMON_WORDS
    chosen: list[str] = []
    for edit in edits:
        names = {n for n in _IDENTIFIER.findall(edit.text) if len(n) >= 3}
        if not names & near:
            continue
        snippet = other_file_snippet(edit.path, edit.text, language.line_comment)
        if len(snippet) <= budget:
            chosen.append(snippet)
            budget -= len(snippet)
    return "".join(reversed(chosen))


def windows(before: str, after: str, budget_chars: int, suffix_fraction: float
            ) -> tuple[str, str]:
    """Whole-line windows of the text before and after a span, within a character budget."""
    suffix_budget = max(1, int(budget_chars * suffix_fraction))
    prefix_budget = max(1, budget_chars - suffix_budget)
    return (_cut_prefix(before.split("\n"), prefix_budget, set()),
            _cut_suffix(after.split("\n"), suffix_budget, set()))


def _line_end(text: str, offset: int) -> int:
    end = text.find("\n", offset)
    return len(text) if end < 0 else end


def _captures(tree: ts.Tree, language: LanguageSpec, name: str) -> list[ts.Node]:
    return captures(language.query("context"), tree.root_node).get(name, [])


def _cut_prefix(lines: list[str], budget: int, unit_rows: set[int]) -> str:
    """The longest tail of `lines` within budget that starts on a unit's first line.

    Falls back to any line start, then to a raw character cut when one line exceeds the budget.
    """
    whole = "\n".join(lines)
    if len(whole) <= budget:
        return whole
    cursor_row = len(lines) - 1
    size = len(lines[cursor_row])
    fits = [cursor_row] if size <= budget else []
    for row in range(cursor_row - 1, -1, -1):
        size += len(lines[row]) + 1
        if size > budget:
            break
        fits.append(row)
    if not fits:
        return whole[-budget:]
    at_unit = [row for row in fits if row in unit_rows]
    return "\n".join(lines[(at_unit or fits)[-1]:])


def _cut_suffix(lines: list[str], budget: int, unit_end_rows: set[int]) -> str:
    """The longest head of `lines` within budget that ends on a unit's last line."""
    whole = "\n".join(lines)
    if len(whole) <= budget:
        return whole
    size = len(lines[0])
    fits = [0] if size <= budget else []
    for row in range(1, len(lines)):
        size += len(lines[row]) + 1
        if size > budget:
            break
        fits.append(row)
    if not fits:
        return whole[:budget]
    at_unit = [row for row in fits if row in unit_end_rows]
    return "\n".join(lines[: (at_unit or fits)[-1] + 1])


def _hole_kind(
    tree: ts.Tree | None,
    language: LanguageSpec | None,
    head: str,
    line_prefix: str,
    line_suffix: str,
    previous_line: str,
) -> tuple[str, str | None, str]:
    """(kind, closing bracket already in the buffer, base indentation) for the cursor."""
    indent = _indent_of(line_prefix) if line_prefix.strip() else _indent_of(previous_line)
    if tree is None:
        return REST_OF_LINE, None, _indent_of(line_prefix)
    row = head.count("\n")
    point = (row, len(line_prefix.encode()))

    for node in _captures(tree, language, "comment"):
        if node.start_point < point <= node.end_point and node.start_point.row == row:
            return COMMENT, None, _indent_of(line_prefix)

    # The last token before the cursor: a block opener ending its line opens a body.
    before = head.rstrip()
    if before and not line_suffix.strip():
        last = _leaf_before(tree, before)
        if last is not None and (last.type == "ERROR"
                                 or last.start_point.row != before.count("\n")):
            # Not a token of the cursor's line: the parsed region began inside a string or a
            # construct (a docstring cut in half), so the line was misread. Read it alone.
            line = before[before.rfind("\n") + 1:].lstrip()
            last = _leaf_before(language.parser().parse(line.encode()), line)
        if last is not None and last.type in language.block_openers:
            return BLOCK, None, _indent_of(before[before.rfind("\n") + 1:])

    bodies = {(n.start_byte, n.end_byte) for n in _captures(tree, language, "body")}
    node = tree.root_node.descendant_for_point_range(point, point)
    while node is not None:
        first, last = node.children[:1], node.children[-1:]
        first, last = (first[0], last[0]) if first else (None, None)
        if (first is not None and first.type in CLOSERS and node.child_count > 1
                and first.end_point <= point <= last.start_point
                and last.type == CLOSERS[first.type] and not last.is_missing):
            if (node.start_byte, node.end_byte) in bodies:
                break  # inside a function/class body: statements, not arguments
            return BRACKETS, last.type, indent
        node = node.parent
    return REST_OF_LINE, None, _indent_of(line_prefix)


def _leaf_before(tree: ts.Tree, before: str) -> ts.Node | None:
    row = before.count("\n")
    col = len(before[before.rfind("\n") + 1:].encode())
    point = (row, max(0, col - 1))
    return tree.root_node.descendant_for_point_range(point, point)


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def detect_indent_unit(text: str, language: LanguageSpec | None = None) -> str:
    """The file's indentation step: a tab, or the most common increase in leading spaces."""
    tabs = spaces = 0
    steps: Counter[int] = Counter()
    previous = 0
    for line in text.split("\n")[:2000]:
        if not line.strip():
            continue
        if line.startswith("\t"):
            tabs += 1
            continue
        width = len(line) - len(line.lstrip(" "))
        if width:
            spaces += 1
        if width > previous:
            steps[width - previous] += 1
        previous = width
    if tabs > spaces or (not spaces and language is not None and language.name == "go"):
        return "\t"
    if steps:
        return " " * steps.most_common(1)[0][0]
    return "  " if language is not None and language.name != "python" else "    "


@functools.lru_cache(maxsize=2 * 20)
def _snippet_windows(text: str) -> tuple[tuple[int, int, frozenset[str]], ...]:
    """(start, end, identifiers) of each window of another document, computed once per text:
    every keystroke in the current file used to split and scan every other open file again.
    (A str caches its hash, so a lookup costs nothing while the document is unchanged.)"""
    starts = [0] + [m.end() for m in _NEWLINE.finditer(text)]
    step = SNIPPET_LINES // 2
    windows = []
    for first in range(0, max(1, len(starts) - step), step):
        last = first + SNIPPET_LINES
        start, end = starts[first], (starts[last] - 1 if last < len(starts) else len(text))
        windows.append((start, end, frozenset(_IDENTIFIER.findall(text, start, end))))
    return tuple(windows)


def _other_file_snippets(
    near_cursor: str,
    documents: Iterable[OtherDocument],
    language: LanguageSpec,
    budget: int,
) -> str:
    """The other files' windows most like the code at the cursor, written as comments."""
    wanted = set(_IDENTIFIER.findall(near_cursor))
    if not wanted:
        return ""
    scored: list[tuple[float, str, str]] = []
    for doc in documents:
        if len(doc.text) > MAX_OTHER_DOCUMENT_CHARS:
            continue
        best = (0.0, 0, 0)
        for start, end, words in _snippet_windows(doc.text):
            score = len(words & wanted) / len(words | wanted) if words else 0.0
            if score > best[0]:
                best = (score, start, end)
        if best[0] > 0:
            scored.append((best[0], doc.path, doc.text[best[1]:best[2]]))
    scored.sort(key=lambda item: -item[0])

    comment = language.line_comment
    chosen: list[str] = []
    for _, path, window in scored[:MAX_SNIPPETS]:
        snippet = other_file_snippet(path, window, comment)
        if len(snippet) <= budget:
            chosen.append(snippet)
            budget -= len(snippet)
    return "".join(chosen)
