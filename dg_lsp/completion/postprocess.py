"""Turns the model's raw hole text into a suggestion an editor can show, or rejects it.

The steps run in order: cut at special tokens written as text (engine.text.stops), trim to the
hole kind's syntactic unit, cut a line the suggestion repeats, re-indent to the file's style,
drop what repeats the suffix, reuse closing brackets already after the cursor, reject junk
(nothing, the line above again, a loop: dg_lsp.document.accept.stutters), check that the
insertion does not add parse errors, and reject a suggestion that uses a name the document
never defines or imports (dg_lsp.syntax.names).
"""

from __future__ import annotations

from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.context import BLOCK, BRACKETS, COMMENT, Context
from dg_lsp.document.accept import stutters
from dg_lsp.syntax import names
from dg_lsp.syntax.errors import count_errors
from engine.text import units
from engine.text.stops import cut_at_special
from engine.text.units import (
    CLOSERS,
    OPENERS,
    TAB_WIDTH,
    UnitEnd,
    cut_at_unmatched_closer,
    indent_width,
    leading_indent,
    trim_block,
)

# Characters that may follow the cursor and that a completion may re-type (extend over them).
_TRAILING = set(")]}\"'`;,:")


@dataclass
class Suggestion:
    text: str  # inserted at the cursor
    replace: int  # characters after the cursor, on its line, that `text` replaces


def postprocess(raw: str, ctx: Context) -> Suggestion | None:
    text = cut_at_special(raw)
    text = _trim_to_unit(text, ctx)
    text = _cut_repeated_line(text, ctx)
    text = _reindent(text, ctx)
    text = _drop_suffix_overlap(text, ctx.suffix)
    text = text.rstrip()
    if _is_junk(text, ctx):
        return None
    suggestion, tree = _check_syntax(_reuse_closers(text, ctx.line_suffix), ctx)
    return _check_names(suggestion, tree, ctx)


def unit_end(ctx: Context) -> UnitEnd:
    """The end of the context's hole kind's unit, as the engine checks it (engine.text.units)."""
    if ctx.kind == BLOCK:
        return UnitEnd(units.BLOCK, ctx.line_prefix, ctx.base_indent)
    if ctx.kind == BRACKETS:
        return UnitEnd(units.BRACKETS)
    return UnitEnd(units.LINE)  # rest of line, comment: one line


def _trim_to_unit(text: str, ctx: Context) -> str:
    if ctx.kind == BLOCK:
        return trim_block(text, ctx.line_prefix, ctx.base_indent)
    if ctx.kind == BRACKETS:
        return cut_at_unmatched_closer(text)
    # rest of line / comment: one line; a leading newline means the model wanted a new line
    line = text.split("\n", 1)[0]
    if ctx.kind != COMMENT and _opens_unclosed(line):
        return ""  # a line that leaves a bracket open is half a statement
    return line


def _cut_repeated_line(text: str, ctx: Context) -> str:
    """Cut before a line that repeats the line just written (`curr = self.root[0]` three times
    in a row is a small model stuck, not code), unless the context itself has that line twice
    in a row."""
    lines = text.split("\n")
    previous = (ctx.line_prefix + lines[0]).strip()
    for i in range(1, len(lines)):
        line = lines[i].strip()
        if not line:
            continue
        if line == previous and not _written_twice(line, ctx.prefix_window + ctx.suffix):
            return "\n".join(lines[:i]).rstrip()
        previous = line
    return text


def _written_twice(line: str, context: str) -> bool:
    stripped = [ln.strip() for ln in context.split("\n") if ln.strip()]
    return any(a == b == line for a, b in zip(stripped, stripped[1:], strict=False))


def _opens_unclosed(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += ch in CLOSERS
        depth -= ch in OPENERS and depth > 0
    return depth > 0


def _reindent(text: str, ctx: Context) -> str:
    """Indent with the file's character (tab or spaces); a block body one step in."""
    lines = text.split("\n")
    shift = 0
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if ctx.kind == BLOCK and first is not None:
        cursor_width = indent_width(ctx.line_prefix) if first == 0 else 0
        actual = cursor_width + indent_width(leading_indent(lines[first]))
        target = max(indent_width(ctx.base_indent + ctx.indent_unit), cursor_width)
        shift = target - actual
    for i, line in enumerate(lines):
        if i == 0 and (ctx.kind != BLOCK or ctx.line_prefix.strip()):
            continue  # continues the cursor's line: its leading text is content
        lead = leading_indent(line)
        if not line.strip():
            lines[i] = ""
            continue
        if i == 0:  # after the cursor line's own indentation
            width = indent_width(ctx.line_prefix + lead) + shift - indent_width(ctx.line_prefix)
        else:
            width = indent_width(lead) + shift
        lines[i] = _indent(max(0, width), ctx.indent_unit) + line[len(lead):]
    return "\n".join(lines)


def _drop_suffix_overlap(text: str, suffix: str) -> str:
    """Remove trailing lines of `text` that the suffix already starts with."""
    suffix_lines = [ln.strip() for ln in suffix.split("\n") if ln.strip()]
    lines = text.split("\n")
    for k in range(min(len(lines), len(suffix_lines)), 0, -1):
        tail = [ln.strip() for ln in lines[-k:]]
        if tail == suffix_lines[:k] and any(tail):
            return "\n".join(lines[:-k])
    return text


def _is_junk(text: str, ctx: Context) -> bool:
    if not text.strip() or stutters(text):
        return True
    first = text.split("\n", 1)[0]
    if ctx.kind == COMMENT:
        return False
    # repeating the line above is the commonest failure of small models
    return (ctx.line_prefix + first).strip() == ctx.previous_line.strip() or (
        text.strip() == ctx.line_suffix.strip()
    )


def _reuse_closers(text: str, line_suffix: str) -> Suggestion:
    """Extend the range over closing brackets after the cursor that the text types again."""
    trailing = line_suffix.rstrip()
    if trailing and set(trailing) <= _TRAILING:
        last_line = text.rsplit("\n", 1)[-1]
        for n in range(len(trailing), 0, -1):
            if last_line.endswith(trailing[:n]):
                return Suggestion(text, n)
    return Suggestion(text, 0)


def _check_syntax(suggestion: Suggestion, ctx: Context
                  ) -> tuple[Suggestion | None, ts.Tree | None]:
    """Keep the suggestion if inserting it adds no ERROR/MISSING nodes; else try shorter ones.
    With it, the tree of the cursor's window with it in place (None without a grammar)."""
    if ctx.language is None:
        return suggestion, None
    parser = ctx.language.parser()
    before = ctx.prefix_window + ctx.suffix
    baseline = count_errors(parser.parse(before.encode()))
    candidate = suggestion
    while True:
        after = (ctx.prefix_window + candidate.text
                 + ctx.suffix[candidate.replace:])
        tree = parser.parse(after.encode())
        if count_errors(tree) <= baseline:
            return candidate, tree
        shorter = candidate.text.rsplit("\n", 1)[0] if "\n" in candidate.text else ""
        if not shorter.strip():
            return None, None
        candidate = _reuse_closers(shorter.rstrip(), ctx.line_suffix)


def _check_names(suggestion: Suggestion | None, tree: ts.Tree | None, ctx: Context
                 ) -> Suggestion | None:
    """None if the suggestion uses a name the document never defines or imports. `tree`: the
    cursor's window with the suggestion in place (_check_syntax parsed it), so the word it
    continues (`jn|` + `p.sum`) and the dot before it (`x.|jnp`) are read as the file has
    them."""
    if suggestion is None or tree is None or not names.checked(ctx.language):
        return suggestion
    before = ctx.prefix_window.encode()
    inserted = suggestion.text.encode()
    unknown = names.unknown_names(ctx.language, tree, len(before), len(before) + len(inserted),
                                  ctx.document)
    return None if unknown else suggestion


def _indent(width: int, unit: str) -> str:
    if unit == "\t":
        return "\t" * (width // TAB_WIDTH) + " " * (width % TAB_WIDTH)
    return " " * width

