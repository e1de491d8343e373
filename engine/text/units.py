"""Where the text an editor shows ends: the hole's syntactic unit, as plain text rules.

A completion's hole is sized for the longest unit it may hold (a line, the rest of a bracket,
a block body); the text shown is cut at the unit's end. Committed text never changes, so once
it holds that end the suggestion is settled and further passes would fill positions that are
cut away. A client names the unit with its request (`UnitEnd`, worked out from the syntax
tree by dg_lsp.completion.postprocess.unit_end); the engine then stops the hole there itself, in
process
and resident alike, so both run the same passes and a resident engine runs none after the
answer is settled. dg_lsp's post-processing trims with the same functions.

No torch here: the language server and the wire protocol import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from engine.text.stops import cut_at_special
from engine.types import Draft, UnitEnd

CLOSERS = {"(": ")", "[": "]", "{": "}"}  # opening bracket -> its closer
OPENERS = {v: k for k, v in CLOSERS.items()}
TAB_WIDTH = 4

LINE, BRACKETS, BLOCK = "line", "brackets", "block"
UNIT_KINDS = (LINE, BRACKETS, BLOCK)  # UnitEnd.kind (UnitEnd lives in engine.types)


def unit_ended(text: str, unit: UnitEnd) -> bool:
    """Whether committed text `text` already holds the end of `unit` (a special token
    written as text ends every unit)."""
    if cut_at_special(text) != text:
        return True
    if unit.kind == BLOCK:
        return trim_block(text, unit.line_prefix, unit.base_indent) != text
    if unit.kind == BRACKETS:
        return cut_at_unmatched_closer(text) != text
    return "\n" in text


def trim_block(text: str, line_prefix: str, base_indent: str) -> str:
    """A block body's lines: up to the first line dedented to the opener's level or less.
    Text on the opener's own line (the cursor right after `def f():` / `{`) is not a body."""
    lines = text.split("\n")
    at_opener_line = line_prefix.strip() != ""
    if at_opener_line and lines[0].strip():
        return ""
    base = indent_width(base_indent)
    kept: list[str] = []
    for i, line in enumerate(lines):
        if line.strip():
            if indent_width((line_prefix if i == 0 else "") + leading_indent(line)) <= base:
                break
        kept.append(line)
    return "\n".join(kept)


def cut_at_unmatched_closer(text: str) -> str:
    """`text` up to the first closing bracket it did not open."""
    depth: list[str] = []
    for i, ch in enumerate(text):
        if ch in CLOSERS:
            depth.append(ch)
        elif ch in OPENERS:
            if not depth or depth[-1] != OPENERS[ch]:
                return text[:i]
            depth.pop()
    return text


def bracket_depths(code: str) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth after it) of each character of `code` outside quoted
    strings (a quote and what it holds are skipped; backslash escapes are honoured)."""
    depth, quote, escaped = 0, "", False
    for i, ch in enumerate(code):
        if quote:
            escaped = ch == "\\" and not escaped
            if ch == quote and not escaped:
                quote = ""
            continue
        if ch in "\"'`":
            quote = ch
            continue
        if ch in CLOSERS:
            depth += 1
        elif ch in OPENERS:
            depth -= 1
        yield i, ch, depth


def indent_width(indent: str) -> int:
    return len(indent.expandtabs(TAB_WIDTH))


def leading_indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def settled(draft: Draft, unit: UnitEnd | None) -> Draft:
    """`draft`, marked done with finish_reason "unit" when its committed text holds the end
    of `unit`: the step after which the engine runs no further pass for it."""
    if unit is not None and not draft.done and unit_ended(draft.text, unit):
        return dataclasses.replace(draft, done=True, finish_reason="unit")
    return draft


def until_unit_ends(drafts: Iterator[Draft], unit: UnitEnd | None) -> Iterator[Draft]:
    """`drafts` up to the first `settled` by `unit` (the source is then closed)."""
    try:
        for draft in drafts:
            draft = settled(draft, unit)
            yield draft
            if draft.done:
                return
    finally:
        close = getattr(drafts, "close", None)
        if close is not None:
            close()
