"""Where an edit implies a change, and what the span there may become.

The server's span finder (dg_lsp.next_edit.suggest.spans) and the real edits cut from released
versions (engine.edits.real) both use these, so that a training or evaluation case is one the
server would ask about: the region around the edit (definition_region), the spans in it
(implied_spans), and the texts a line or a call's arguments may become (analogous_lines,
argument_lists).
"""

from __future__ import annotations

import ast
import difflib
import functools
import io
import itertools
import re
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass

from engine.data.stats import edit_similarity
from engine.edits.prompt import LineEdit, changed_words, occurrences
from engine.text.units import OPENERS, bracket_depths

# A suggestion may change the definition around the edit, cut to this many lines either side.
REGION_LINES = 10
# Spans the server asks the model about after an edit before giving up: each is a request.
MAX_SPANS = 2


def line_offset(text: str, line: int) -> int:
    """The offset where `line` starts (len(text) past the end)."""
    offset = 0
    for _ in range(line):
        offset = text.find("\n", offset) + 1
        if offset == 0:
            return len(text)
    return offset


def region_around(text: str, start: int, end: int, definition: tuple[int, int] | None
                  ) -> tuple[int, int]:
    """[start, end) of the lines a suggestion may change after the edit that wrote
    text[start:end]: REGION_LINES lines either side of it, cut to `definition` (the first and
    last lines of the smallest function or class around it; None: none is)."""
    line = text.count("\n", 0, start)
    first, last = line - REGION_LINES, line + text.count("\n", start, end) + REGION_LINES
    if definition is not None:
        first, last = max(first, definition[0]), min(last, definition[1])
    return line_offset(text, max(0, first)), line_offset(text, last + 1)


@dataclass(frozen=True)
class Definition:
    """A function or class as a parser finds it: text[start:end], from its `def` or `class`
    to the end of its last statement, and the offset its body starts at (None: unknown)."""

    start: int
    end: int
    body: int | None


def definition_region(text: str, start: int, end: int, definitions: Iterable[Definition],
                      header: bool = False) -> tuple[int, int]:
    """region_around the edit that wrote text[start:end], cut to the smallest of
    `definitions` that holds it. `header`: the edit changed the parameters of the function
    whose header it is in (signature_change), so the region is around the definition that
    holds that function, where its callers are.

    The server finds the definitions with tree-sitter in every language it reads
    (dg_lsp.next_edit.suggest.region); the real edits cut for training and evaluation, all
    Python, with Python's parser (python_definitions), which finds the same spans."""
    around = [d for d in definitions if d.start <= start and end <= d.end
              and not (header and d.body is not None and end <= d.body)]
    if not around:
        return region_around(text, start, end, None)
    smallest = min(around, key=lambda d: d.end - d.start)
    lines = text.count("\n", 0, smallest.start), text.count("\n", 0, smallest.end)
    return region_around(text, start, end, lines)


@functools.lru_cache(maxsize=4096)  # a corpus's files: cutting edits parses each once
def python_definitions(text: str) -> tuple[Definition, ...]:
    """The functions and classes of Python `text` (none when it does not parse), spanning
    what tree-sitter's function_definition and class_definition span."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    # Python's parser numbers lines split at \r\n, \r and \n, and counts columns in UTF-8.
    starts = [0, *(m.end() for m in re.finditer(r"\r\n?|\n", text))]

    def offset(lineno: int, col: int) -> int:
        line = text[starts[lineno - 1] : starts[lineno] if lineno < len(starts) else len(text)]
        return starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", "ignore"))

    return tuple(
        Definition(offset(node.lineno, node.col_offset),
                   offset(node.end_lineno or node.lineno, node.end_col_offset or 0),
                   offset(node.body[0].lineno, node.body[0].col_offset))
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


@dataclass(frozen=True)
class Span:
    """Where the model writes: a word (an occurrence of what the edit removed), a line's
    text after its indentation (a line alike the edited one), or a call's arguments (a call
    of a function whose parameters changed)."""

    start: int
    end: int
    kind: str  # "word", "line" or "arguments"


def implied_spans(text: str, edit: LineEdit, start: int, end: int, cursor: int,
                  region: tuple[int, int]) -> list[Span]:
    """Where the edit that wrote text[start:end] (`edit`: its lines before and after) may
    imply a change inside `region`, nearest the cursor first (below it before above it on a
    tie); none touches the edit itself or the cursor:

    - the region's occurrences of the words the edit removed (a rename, a changed literal);
    - when it removed none but changed a line inside (not typing at its end: that is a
      statement being written), the region's lines alike the edited line as it was (a
      repeated pattern: a value wrapped in a call, an argument added);
    - when it added a parameter to a function or removed one (signature_change), only the
      argument lists of the region's calls of it."""
    removed, _ = changed_words(edit)
    lo, hi = region
    found: set[Span] = set()

    def add(span_start: int, span_end: int, kind: str) -> None:
        if ((span_end < start or span_start > end)
                and not span_start <= cursor <= span_end):
            found.add(Span(span_start, span_end, kind))

    called = signature_change(edit)
    if called is not None:
        removed = []  # a parameter's name elsewhere is another variable: only the calls follow
        for s, e in call_arguments(text, called, lo, hi):
            add(s, e, "arguments")
    for word in removed:
        for s, e in occurrences(text, word, lo, hi):
            add(s, e, "word")
    if (called is None and not removed and "\n" not in edit.before
            and changed_inside(edit)):
        offset = lo
        for candidate in text[lo:hi].split("\n"):
            indent = len(candidate) - len(candidate.lstrip())
            if similar_lines(edit.before, candidate):
                add(offset + indent, offset + len(candidate.rstrip()), "line")
            offset += len(candidate) + 1
    cursor_line = text.count("\n", 0, cursor)

    def distance(span: Span) -> tuple[int, int, int]:
        at = text.count("\n", 0, span.start)
        return abs(at - cursor_line), at < cursor_line, span.start

    return sorted(found, key=distance)


def closing_bracket(line: str, opening: int) -> int | None:
    """The index of the bracket closing line[opening] (None: not on this line), brackets in
    strings skipped."""
    return next((opening + i for i, ch, depth in bracket_depths(line[opening:])
                 if depth == 0 and ch in OPENERS), None)


def split_commas(text: str) -> list[str]:
    """`text` (a parameter or an argument list) split at the commas outside brackets and
    strings, each part stripped; [] for an empty list."""
    cuts = [i for i, ch, depth in bracket_depths(text) if ch == "," and depth == 0]
    parts = [text[a + 1 : b].strip() for a, b in zip([-1, *cuts], [*cuts, len(text)],
                                                      strict=True)]
    return [p for p in parts if p]  # a trailing comma leaves no parameter


DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)\s*\(")


def _bracketed(line: str, at: re.Match[str]) -> tuple[int, int] | None:
    """(open, close) of the brackets whose opening `at` ends with, when they close on the
    line."""
    opening = at.end() - 1
    closing = closing_bracket(line, opening)
    return None if closing is None else (opening, closing)


def header_parameters(line: str) -> tuple[str, list[str]] | None:
    """(name, parameters) of a Python function's header written on one line; None for any
    other line."""
    found = DEF.match(line)
    if found is None:
        return None
    brackets = _bracketed(line, found)
    if brackets is None or not line[brackets[1] + 1:].rstrip().endswith(":"):
        return None
    return found.group(1), split_commas(line[brackets[0] + 1 : brackets[1]])


@dataclass(frozen=True)
class Signature:
    name: str
    method: bool  # its first parameter is self or cls: it is called as self.name(...)


def signature_change(edit: LineEdit) -> Signature | None:
    """The function `edit` added a parameter to or removed one from (its one-line header,
    same name, more or fewer parameters), or None."""
    before, after = edit.before.rstrip("\n"), edit.after.rstrip("\n")
    if "\n" in before or "\n" in after:
        return None
    old, new = header_parameters(before), header_parameters(after)
    if old is None or new is None or old[0] != new[0] or len(old[1]) == len(new[1]):
        return None
    return Signature(new[0], new[1][:1] in (["self"], ["cls"]))


def call_at(line: str, called: Signature) -> tuple[int, int] | None:
    """(open, close) of the brackets of the first call of `called` on `line` (`f(`, or a
    method's `self.f(` / `cls.f(`) when they close on the line."""
    if DEF.match(line):
        return None
    receiver = r"\b(?:self|cls)\." if called.method else r"(?<![\w.])"
    found = re.search(rf"{receiver}{re.escape(called.name)}\s*\(", line)
    return None if found is None else _bracketed(line, found)


def call_arguments(text: str, called: Signature, lo: int, hi: int) -> list[tuple[int, int]]:
    """[start, end) of the argument list (the text between the brackets) of the call of
    `called` on each line of text[lo:hi] that calls it in code (not in a comment or a
    docstring, where Python's tokenizer tells)."""
    code = code_words(text)
    found, offset = [], lo
    for line in text[lo:hi].split("\n"):
        at = call_at(line, called)
        if at is not None:
            name_at = offset + line.rfind(called.name, 0, at[0])
            if code is None or (name_at, name_at + len(called.name)) in code:
                found.append((offset + at[0] + 1, offset + at[1]))
        offset += len(line) + 1
    return found


# Lines are compared (similar_lines) and aligned (analogous_lines), and argument lists
# offered (argument_lists), only up to this length: comparing and aligning take time quadratic
# in it, a line that long is data, not a pattern a user
# repeats, and a longer list does not fit a line's tokens.
MAX_ALIKE_CHARS = 200
PIECE = re.compile(r"\w+|\s+|.")  # what lines are aligned by: names, spaces, a character
MAX_ANALOGIES = 8


def is_keyword(part: str) -> bool:
    """Whether an argument (`key=value`) or a parameter (`name=default`, `name: T = d`) is
    written with `=`."""
    return re.match(r"^\w+\s*(?::[^=]*)?=(?!=)", part) is not None


def positional_count(arguments: list[str]) -> int:
    """How many of a call's arguments come first and are passed by position."""
    return next((k for k, a in enumerate(arguments) if is_keyword(a) or a.startswith("*")),
                len(arguments))


def argument_lists(edit: LineEdit, arguments: str) -> list[str]:
    """The argument lists a call passing `arguments` may become after `edit` added a
    parameter to its function's header or removed one (signature_change): without the
    argument the removed parameter took (by its name, else by its place), or with the added
    parameter's name passed in its place and, last, by name (`y=y`). The model chooses
    among them and the list as it is; none when the call cannot follow (a `*args`) or the
    list is longer than MAX_ALIKE_CHARS."""
    old = header_parameters(edit.before.rstrip("\n"))
    new = header_parameters(edit.after.rstrip("\n"))
    if old is None or new is None or len(arguments) > MAX_ALIKE_CHARS:
        return []
    before, after = old[1], new[1]
    skip = 1 if after[:1] in (["self"], ["cls"]) or before[:1] in (["self"], ["cls"]) else 0
    k = next((i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
             min(len(before), len(after)))
    args = split_commas(arguments)
    positional = positional_count(args)
    by_place = not any(p.startswith("*") for p in (after if len(after) > len(before)
                                                    else before)[:k])
    lists = []
    if len(after) < len(before):
        gone = re.match(r"\w*", before[k].lstrip("*")).group()  # type: ignore[union-attr]
        named = [i for i, a in enumerate(args) if re.match(rf"{re.escape(gone)}\s*=(?!=)", a)]
        if named:
            lists.append(args[: named[0]] + args[named[0] + 1 :])
        elif by_place and not before[k].startswith("*") and 0 <= k - skip < positional:
            lists.append(args[: k - skip] + args[k - skip + 1 :])
    elif not after[k].startswith("*"):
        added = re.match(r"\w*", after[k]).group()  # type: ignore[union-attr]
        if by_place and 0 <= k - skip <= positional:
            lists.append(args[: k - skip] + [added] + args[k - skip :])
        lists.append(args + [f"{added}={added}"])
    return [t for t in dict.fromkeys(", ".join(a) for a in lists) if t != arguments.strip()]


def analogous_lines(edit: LineEdit, line: str) -> list[str]:
    """`line` (a line's text after its indentation) changed the way `edit` changed its one
    line: each piece of text the edit put in, at the place of `line` that lines up with where
    it went in the line as it was (difflib's alignment of the two lines' pieces); where a
    place lines up two ways, each. [] when a place has no counterpart, the edit replaced
    text that `line` does not hold there, or a line is longer than MAX_ALIKE_CHARS."""
    before, after = edit.before.strip(), edit.after.strip()
    if "\n" in before or "\n" in after or max(map(len, (before, after, line))) > MAX_ALIKE_CHARS:
        return []
    was, now, target = PIECE.findall(before), PIECE.findall(after), PIECE.findall(line)
    # A boundary of `was` -> those of `target` it lines up with, aligned from the start and
    # from the end (`f(a, b)` against `g(c, d(e))`: its last `)` is either).
    places: dict[int, list[int]] = {0: [0], len(was): [len(target)]}  # the ends, and:
    for backwards in (False, True):
        a, b = (was[::-1], target[::-1]) if backwards else (was, target)
        for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
            for k in range(block.size + 1) if block.size else ():
                i, j = block.a + k, block.b + k
                if backwards:
                    i, j = len(was) - i, len(target) - j
                if j not in places.setdefault(i, []):
                    places[i].append(j)
    changes = []  # per change: the ways to make it, (start, end, text) in `target`
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, was, now,
                                                        autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        ways = [(s, e, "".join(now[j1:j2])) for s in places.get(i1, [])
                for e in places.get(i2, []) if e - s == i2 - i1 and target[s:e] == was[i1:i2]]
        if not ways:
            return []
        changes.append(ways)
    found = []
    for ways in itertools.islice(itertools.product(*changes), MAX_ANALOGIES):
        pieces, at = [], 0
        for s, e, text in sorted(ways):
            if s < at:
                break  # two changes over one place
            pieces += ["".join(target[at:s]), text]
            at = e
        else:
            found.append("".join(pieces) + "".join(target[at:]))
    return [t for t in dict.fromkeys(found) if t != line]


def changed_inside(edit: LineEdit) -> bool:
    """Whether `edit` changed a line that had text, other than by typing at its end."""
    before, after = edit.before.rstrip(), edit.after.rstrip()
    return bool(before.strip()) and before != after and not after.startswith(before)


def is_identifier(word: str) -> bool:
    """Whether a WORD is a name (not a number or a string)."""
    return word[:1].isalpha() or word[:1] == "_"


@functools.lru_cache(maxsize=4096)
def code_words(text: str) -> frozenset[tuple[int, int]] | None:
    """[start, end) of the names, numbers and one-line strings of Python `text` that are code
    (not in a comment or a docstring); None when it does not tokenize. Synthetic edits
    rename code: "renaming" a word of prose teaches and judges nothing an editor sees."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    found = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.STRING and (tok.start[0] != tok.end[0]
                                                or tok.string[:1] not in "\"'"):
                continue  # docstrings, prefixed and triple-quoted strings
            if tok.type in (tokenize.NAME, tokenize.NUMBER, tokenize.STRING):
                start = starts[tok.start[0] - 1] + tok.start[1]
                found.add((start, start + len(tok.string)))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return frozenset(found)


SIMILAR = 0.5  # edit similarity of two lines for one to repeat the other's pattern


def similar_lines(a: str, b: str) -> bool:
    """Whether line `b` repeats line `a`'s shape (same indentation, alike text)."""
    indent_a, indent_b = len(a) - len(a.lstrip()), len(b) - len(b.lstrip())
    a, b = a.strip(), b.strip()
    if max(len(a), len(b)) > MAX_ALIKE_CHARS:
        return False
    # The similarity is at most the shorter length over the longer: that bound skips the
    # quadratic distance for most pairs of lines.
    return (indent_a == indent_b and a != b
            and min(len(a), len(b)) >= SIMILAR * max(len(a), len(b))
            and edit_similarity(a, b) >= SIMILAR)
