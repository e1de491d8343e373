"""Edits as a model reads them, and the synthetic edits it learns from and is judged on.

A next-edit suggestion (dg_lsp.next_edit.suggest) asks the model what one span becomes (an
occurrence of a word the user's last edit removed, or a line alike the edited one), with the
user's recent edits written as comments just above the span's line and the question as the
last comment, which the model ends:

    # was: count = 0
    # now: total = 0
    # count -> total                          (a word: the model writes " total")
    count += item.price                       (the span's line, as it is)

    # was: width = raw.width + 1
    # now: width = int(raw.width + 1)
    # was: height = raw.height + 1
    # now: height = int(raw.height + 1)       (a line: the model writes the new line)
    height = raw.height + 1

The model sees the span it rewrites, the edits that imply the change, and the code around
it. A form every code model has read (comments; no prompt template, as the rewrite's
instruction comment), so real checkpoints read it zero-shot; the bundled model is also trained on it
(engine.train.edit_examples). The same rendering builds the training examples and the
held-out evaluation (`dg-lsp eval --suite next-edit`), so the model learns what it is shown.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import functools
import io
import itertools
import keyword
import os
import re
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from engine.data.stats import edit_similarity
from engine.units import OPENERS, bracket_depths

# What an edit can rename or change consistently: identifiers, numbers, one-line strings.
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|\"[^\"\n]*\"|'[^'\n]*'")
# Edits shown to the model (most recent last) and the characters of each side.
SHOWN_EDITS = 3
SHOWN_WORDS = 2  # word changes shown per edit: a rename, a literal, a pair of them
SHOWN_CHARS = 120
# Words too common to be what an edit changed (`self`, keywords, single letters are kept:
# `i` -> `j` is a real rename).
NOT_CHANGED = frozenset(keyword.kwlist) | {"self", "cls", "None", "True", "False"}
# Names a synthetic rename leaves alone: nobody renames `list` or `__init__` in one place.
BUILTIN_NAMES = frozenset(dir(builtins))


@dataclass(frozen=True)
class LineEdit:
    """One edit as the model is shown it: the changed lines before and after, whole lines."""

    before: str
    after: str


def shown(text: str) -> str:
    """One side of an edit on one comment line: lines joined by ' | ', cut to SHOWN_CHARS."""
    joined = " | ".join(line.strip() for line in text.split("\n") if line.strip())
    return joined if len(joined) <= SHOWN_CHARS else joined[: SHOWN_CHARS - 3] + "..."


def history_comment(edits: Sequence[LineEdit], comment: str, indent: str) -> str:
    """The comment lines (each ending in a newline) that show the model `edits`: each line as
    it was and as it is now, then, where the edit replaced words one for one, each word's
    change (`# count -> total`): the same arrow the question ends in (infill_text), so that
    answering it is copying what follows the same word above."""
    lines = []
    for edit in list(edits)[-SHOWN_EDITS:]:
        lines.append(f"{indent}{comment} was: {shown(edit.before)}\n")
        lines.append(f"{indent}{comment} now: {shown(edit.after)}\n")
        lines += [f"{indent}{comment} {old} -> {new}\n" for old, new in replacements(edit)]
    return "".join(lines)


def replacements(edit: LineEdit) -> list[tuple[str, str]]:
    """(old, new) for the words `edit` replaced one for one, as many as history_comment shows
    (its `old -> new` lines); none when it took out more or fewer words than it put in."""
    removed, inserted = changed_words(edit)
    if len(removed) != len(inserted):
        return []
    return list(zip(removed, inserted, strict=True))[:SHOWN_WORDS]


def new_words(edits: Sequence[LineEdit]) -> list[str]:
    """The new words of the `old -> new` lines history_comment shows for `edits`."""
    return list(dict.fromkeys(new for edit in list(edits)[-SHOWN_EDITS:]
                              for _, new in replacements(edit)))


def next_words(edits: Sequence[LineEdit]) -> list[str]:
    """The words a word the edits imply may become: the edits' new_words, when they replaced
    words one for one; otherwise every word they put in. Never a word they removed."""
    return new_words(edits) or list(dict.fromkeys(
        word for edit in list(edits)[-SHOWN_EDITS:] for word in changed_words(edit)[1]))


def words(text: str) -> list[str]:
    """The words of `text` an edit can change (WORD, less keywords and NOT_CHANGED)."""
    return [w for w in WORD.findall(text) if w not in NOT_CHANGED]


def changed_words(edit: LineEdit) -> tuple[list[str], list[str]]:
    """(removed, inserted): the words the edit took out and put in, in order of appearance."""
    before, after = Counter(words(edit.before)), Counter(words(edit.after))
    removed = list(dict.fromkeys(w for w in words(edit.before) if before[w] > after[w]))
    inserted = list(dict.fromkeys(w for w in words(edit.after) if after[w] > before[w]))
    return removed, inserted


def occurrences(text: str, word: str, start: int = 0, end: int | None = None
                ) -> list[tuple[int, int]]:
    """[start, end) of each whole-word occurrence of `word` in text[start:end]."""
    end = len(text) if end is None else end
    if word[:1].isalnum() or word[:1] == "_":
        pattern = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(word) + r"(?![A-Za-z0-9_])")
    else:
        pattern = re.compile(re.escape(word))
    return [(m.start(), m.end()) for m in pattern.finditer(text, start, end)]


def smallest_change(before: str, after: str) -> tuple[int, str, str]:
    """(at, removed, inserted): before[at:at + len(removed)] became `inserted`, with the text
    both share at either end left out (as the editor's history records a change)."""
    head = len(os.path.commonprefix([before, after]))
    rest_before, rest_after = before[head:], after[head:]
    tail = len(os.path.commonprefix([rest_before[::-1], rest_after[::-1]]))
    return head, rest_before[:len(rest_before) - tail], rest_after[:len(rest_after) - tail]


def line_span(text: str, offset: int) -> tuple[int, int]:
    """[start, end) of the line holding `offset`, its newline excluded."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return start, len(text) if end < 0 else end


# -- where an edit implies a change -----------------------------------------------------------
# The server's span finder (dg_lsp.next_edit.suggest.spans) and the real edits cut from released
# versions (engine.edits.real) both use these, so that a training or evaluation case is
# one the server would ask about.

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


def _closing(line: str, opening: int) -> int | None:
    """The index of the bracket closing line[opening] (None: not on this line), brackets in
    strings skipped."""
    return next((opening + i for i, ch, depth in bracket_depths(line[opening:])
                 if depth == 0 and ch in OPENERS), None)


def _split_commas(text: str) -> list[str]:
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
    closing = _closing(line, opening)
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
    return found.group(1), _split_commas(line[brackets[0] + 1 : brackets[1]])


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
# in it (docs/usage.md), a line that long is data, not a pattern a user
# repeats, and a longer list does not fit a line's tokens.
MAX_ALIKE_CHARS = 200
PIECE = re.compile(r"\w+|\s+|.")  # what lines are aligned by: names, spaces, a character
MAX_ANALOGIES = 8


def _keyword(part: str) -> bool:
    """Whether an argument (`key=value`) or a parameter (`name=default`, `name: T = d`) is
    written with `=`."""
    return re.match(r"^\w+\s*(?::[^=]*)?=(?!=)", part) is not None


def _positional(arguments: list[str]) -> int:
    """How many of a call's arguments come first and are passed by position."""
    return next((k for k, a in enumerate(arguments) if _keyword(a) or a.startswith("*")),
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
    args = _split_commas(arguments)
    positional = _positional(args)
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


# -- synthetic edits -------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticEdit:
    """A user's edit and the edit it implies: the user replaced `removed` at `change_at` of
    `original` by `inserted`, giving `text` (`edit` shows the changed lines), and
    text[start:end] should become `expected` next ("noop": nothing should follow)."""

    # "rename", "literal", "keep" (the span is already right), "pattern", "noop", or "real"
    # (cut from two released versions of a file: engine.edits.real)
    kind: str
    original: str
    change_at: int
    removed: str
    inserted: str
    text: str
    edit: LineEdit
    start: int
    end: int
    expected: str
    # The span's kind (Span.kind): a word, a line's text after its indentation, or a call's
    # arguments; the model is asked about each in its own form (infill_text).
    span_kind: str = "word"


# What the model learns from. "respell" is a rename whose new name does not extend the old
# one (iterable -> iterator): trained on beside "rename", judged as one.
RESPELL = "respell"
SYNTHETIC_KINDS = ("rename", RESPELL, "literal", "keep", "pattern", "parameter")
NOOP = "noop"  # edits that imply nothing: judged on, never trained on
WINDOW_LINES = 24  # the edit and the span it implies are this close (the region's size)


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


@functools.lru_cache(maxsize=4096)  # a corpus's files: cutting edits parses each once
def _definitions(text: str) -> tuple[tuple[int, int], ...] | None:
    """(first, last) 0-based lines of each function and class of Python `text`, None when
    it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    return tuple((node.lineno - 1, (node.end_lineno or node.lineno) - 1) for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))


def innermost_definition(text: str, line: int) -> tuple[int, int] | None:
    """The lines of the smallest function or class around `line` (None: module level, or
    `text` does not parse)."""
    around = [d for d in _definitions(text) or () if d[0] <= line <= d[1]]
    return min(around, key=lambda d: d[1] - d[0]) if around else None


def definition_region(text: str, start: int, end: int, header: bool = False
                      ) -> tuple[int, int]:
    """region_around for the edit that wrote text[start:end] of Python `text`, with the
    definition around it as Python's parser finds it (the server's tree-sitter finds the same
    functions and classes, from their `def` or `class` line to their last statement's).
    `header`: the edit changed the parameters of the function whose header it is on
    (signature_change), so the region is around that function, where its callers are."""
    first, last = text.count("\n", 0, start), text.count("\n", 0, end)
    around = [d for d in _definitions(text) or () if d[0] <= first and last <= d[1]
              and not (header and d[0] == first)]
    smallest = min(around, key=lambda d: d[1] - d[0]) if around else None
    return region_around(text, start, end, smallest)


def _candidates(text: str, lo: int, hi: int, literal: bool) -> dict[str, list[tuple[int, int]]]:
    """Words of text[lo:hi] (identifiers or literals) that occur on two lines or more."""
    found: dict[str, list[tuple[int, int]]] = {}
    code = code_words(text)
    if code is None:
        return found
    for m in WORD.finditer(text, lo, hi):
        w = m.group()
        if (w in NOT_CHANGED or w in BUILTIN_NAMES or w.startswith("__")
                or (w[0] in "\"'0123456789") != literal):
            continue
        if literal and (w[0] in "\"'" and len(w) < 4 or w in ("0", "1", "2")):
            continue
        if (m.start(), m.end()) in code:
            found.setdefault(w, []).append((m.start(), m.end()))
    return {w: spans for w, spans in found.items()
            if len({text.count("\n", 0, s) for s, _ in spans}) >= 2}


def _renamed(word: str, rng: np.random.Generator, pool: list[str]) -> str:
    """A new name for `word`, as people rename: a suffix, a prefix, another name, a case."""
    choice = int(rng.integers(0, 6))
    if choice == 0 and pool:
        return pool[int(rng.integers(0, len(pool)))]
    if choice == 1:
        suffixes = ("_list", "s", "2", "_new", "_count", "_value", "_id")
        return word + suffixes[int(rng.integers(0, len(suffixes)))]
    if choice == 2:
        return ("new_", "old_", "my_", "_", "the_", "raw_")[int(rng.integers(0, 6))] + word
    if choice == 3 and "_" in word.strip("_"):
        head, *rest = word.strip("_").split("_")
        return head + "".join(part.title() for part in rest)
    if choice == 4 and len(word) > 4:
        return word[: max(2, len(word) // 2)]
    return word + "_" + ("a", "b", "x", "tmp", "item", "data")[int(rng.integers(0, 6))]


ENDINGS = ("or", "er", "ers", "ed", "ing", "ion", "ator", "ation", "ent", "s", "es", "y", "al",
           "ive", "ure", "ize", "ly")


def _respelled(word: str, rng: np.random.Generator, pool: list[str]) -> str:
    """A new name for `word` that is not `word` with something added, as people also rename:
    its ending changed (iterable -> iterator), a part swapped for another name's (unit_key ->
    unit_name), its last part dropped (max_size -> max, items -> item), another name. A model
    that saw only extensions writes the old name again for these."""
    choice = int(rng.integers(0, 4))
    parts = word.split("_")
    named = [i for i, part in enumerate(parts) if part]
    if choice == 1 and len(named) > 1:
        others = sorted({p.lower() for w in pool for p in w.split("_")
                         if len(p) > 1 and p.isalpha()} - {p.lower() for p in parts})
        if others:
            i = named[int(rng.integers(0, len(named)))]
            parts[i] = others[int(rng.integers(0, len(others)))]
            return "_".join(parts)
    if choice == 2:
        if len(named) > 1:
            return "_".join(parts[:named[-1]]).rstrip("_") or word
        if len(word) > 3 and word.endswith("s"):
            return word[:-1]
    if choice == 3 and pool:
        return pool[int(rng.integers(0, len(pool)))]
    cut = int(rng.integers(max(2, len(word) // 2), len(word))) if len(word) > 2 else 0
    if not word[:cut].rstrip("_"):
        return pool[int(rng.integers(0, len(pool)))] if pool else word
    new = word[:cut].rstrip("_") + ENDINGS[int(rng.integers(0, len(ENDINGS)))]
    return word if new.startswith(word) else new


def _changed_literal(word: str, rng: np.random.Generator, pool: list[str]) -> str:
    if word[0] in "\"'":
        q = word[0]
        inner = word[1:-1]
        others = [p for p in pool if p[0] == q and p != word]
        if others and rng.random() < 0.5:
            return others[int(rng.integers(0, len(others)))]
        extra = ("_v2", "-new", "s", "_id", "2")[int(rng.integers(0, 5))]
        return q + (inner.upper() if rng.random() < 0.2 else inner + extra) + q
    if "." in word:
        return str(round(float(word) * (2 if rng.random() < 0.5 else 0.5), 6))
    value = int(word)
    return str((value + int(rng.integers(1, 10))) if rng.random() < 0.6 else value * 10 + 1)


def synthetic_edit(text: str, rng: np.random.Generator, kind: str) -> SyntheticEdit | None:
    """One synthetic edit of `kind` cut from `text` (None when the chosen window has none):
    for "pattern" see pattern_edit; otherwise
    a word changed at one occurrence (the user's edit) and its next occurrence, below or
    above, as the span that should follow (for "keep": a word the edit did not change)."""
    if kind == "pattern":
        return pattern_edit(text, rng)
    if kind == "parameter":
        return parameter_edit(text, rng)
    lines = text.split("\n")
    if len(lines) < 4:
        return None
    first = int(rng.integers(0, max(1, len(lines) - WINDOW_LINES)))
    lo = sum(len(line) + 1 for line in lines[:first])
    hi = min(len(text), lo + sum(len(line) + 1 for line in lines[first:first + WINDOW_LINES]))
    found = _candidates(text, lo, hi, literal=kind == "literal")
    if not found:
        return None
    names = sorted(found)
    word = names[int(rng.integers(0, len(names)))]
    spans = found[word]
    pool = [w for w in dict.fromkeys(WORD.findall(text)) if w not in found]
    if kind == "literal":
        new = _changed_literal(word, rng, [w for w in pool if w[0] in "\"'"])
    else:
        renamed = _respelled if kind == RESPELL else _renamed
        new = renamed(word, rng, [w for w in pool if w[0].isalpha() and w not in NOT_CHANGED])
    if new == word or not new:
        return None
    # The user's edit: the window's first occurrence, where people rename (the assignment,
    # the parameter); the span to suggest: the next one (mostly) or a later one.
    later = 1 if rng.random() < 0.75 else int(rng.integers(1, len(spans)))
    edited, target = spans[0], spans[later]
    edited_line, target_line = text.count("\n", 0, edited[0]), text.count("\n", 0, target[0])
    if edited_line == target_line or (kind != "keep" and innermost_definition(text, edited_line)
                                      != innermost_definition(text, target_line)):
        return None  # a name in another function is another variable: nothing follows there
    after = text[: edited[0]] + new + text[edited[1]:]
    shift = len(new) - len(word) if edited[0] < target[0] else 0
    start, end = target[0] + shift, target[1] + shift
    line_lo, line_hi = line_span(text, edited[0])
    edit = LineEdit(text[line_lo:line_hi], after[line_lo:line_hi + len(new) - len(word)])
    change = (text, edited[0], word, new, after, edit)
    if kind == "keep":
        # Another word of the window that occurs twice: it stays what it is.
        others = [w for w in names if w != word
                  and all(not (s <= edited[0] < e) for s, e in found[w])]
        if not others:
            return None
        other = others[int(rng.integers(0, len(others)))]
        s, e = found[other][int(rng.integers(0, len(found[other])))]
        if line_span(text, s) == (line_lo, line_hi):
            return None
        shift = len(new) - len(word) if edited[0] < s else 0
        return SyntheticEdit(kind, *change, s + shift, e + shift, other)
    return SyntheticEdit("rename" if kind == RESPELL else kind, *change, start, end, new)


# A repeated line changed the same way at its next occurrence: wrap an assignment's value or a
# returned value in a call, or add a keyword argument to the call a line ends with.
WRAPPERS = ("int", "str", "list", "tuple", "float", "len", "sorted", "repr", "bool", "set")
KEYWORDS = ("strict=True", "default=None", "timeout=10", "key=None", "force=False",
            "encoding=\"utf-8\"", "check=True")
ASSIGNMENT = re.compile(r"^(\s*[\w.\[\]'\"]+ = )(?!=)(.+?)\s*$")
RETURN = re.compile(r"^(\s*return )(.+?)\s*$")
SIMILAR = 0.5  # edit similarity of two lines for one to repeat the other's pattern


def pattern_change(line: str, how: str, extra: str) -> str | None:
    """`line` changed by pattern `how` ("wrap", "return" or "keyword") with `extra` (the
    wrapper or the keyword argument); None where the pattern does not apply."""
    if how in ("wrap", "return"):
        found = (ASSIGNMENT if how == "wrap" else RETURN).match(line)
        if found is None or found.group(2).endswith((":", ",", "(", "[", "{", "\\")):
            return None
        return f"{found.group(1)}{extra}({found.group(2)})"
    stripped = line.rstrip()
    if not stripped.endswith(")") or stripped.endswith("()") or stripped.endswith(":"):
        return None
    return stripped[:-1] + ", " + extra + ")"


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


@functools.lru_cache(maxsize=4096)  # a corpus's files, once per pattern kind
def _pattern_pairs(text: str, how: str) -> tuple[tuple[int, int], ...]:
    """(i, j): lines of `text` near each other that pattern `how` applies to, j repeating
    i's shape."""
    lines = text.split("\n")
    changed = [i for i, line in enumerate(lines) if "#" not in line
               and pattern_change(line, how, "x") is not None]
    return tuple((i, j) for k, i in enumerate(changed) for j in changed[k + 1:k + 4]
                 if j - i <= WINDOW_LINES and similar_lines(lines[i], lines[j]))


def pattern_edit(text: str, rng: np.random.Generator) -> SyntheticEdit | None:
    """Two alike lines near each other; the first changed by a pattern, the second (the
    span: the line's text after its indentation) to be changed the same way."""
    lines = text.split("\n")
    how = ("wrap", "return", "keyword")[int(rng.integers(0, 3))]
    extra = (WRAPPERS if how != "keyword" else KEYWORDS)[
        int(rng.integers(0, len(WRAPPERS if how != "keyword" else KEYWORDS)))]
    pairs = _pattern_pairs(text, how)  # whether a pattern applies does not depend on extra
    if not pairs:
        return None
    i, j = pairs[int(rng.integers(0, len(pairs)))]
    if rng.random() < 0.25:
        i, j = j, i  # the edit below, the line to follow above
    new_i = pattern_change(lines[i], how, extra)
    new_j = pattern_change(lines[j], how, extra)
    if new_i is None or new_j is None:
        return None
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    # The user's edit, as the smallest change of line i (the pattern's insertion).
    old_i = lines[i]
    head, removed, inserted = smallest_change(old_i, new_i)
    change_at = offsets[i] + head
    after = text[:change_at] + inserted + text[change_at + len(removed):]
    shift = len(inserted) - len(removed) if i < j else 0
    indent = len(lines[j]) - len(lines[j].lstrip())
    start = offsets[j] + indent + shift
    end = offsets[j] + len(lines[j].rstrip()) + shift
    return SyntheticEdit("pattern", text, change_at, removed, inserted, after,
                         LineEdit(old_i, new_i), start, end, new_j[indent:], span_kind="line")


@functools.lru_cache(maxsize=4096)  # a corpus's files: cutting edits parses each once
def _calls_near_headers(text: str) -> tuple[tuple[int, int, Signature], ...]:
    """(i, j, called): line i holds the one-line header of function `called`, and line j, at
    most WINDOW_LINES away, a call of it in code (a method's on self or cls) whose arguments
    close on that line."""
    lines = text.split("\n")
    headers = []
    for i, line in enumerate(lines):
        found = header_parameters(line)
        if found is not None and not found[0].startswith("__"):  # dunders: called by Python
            headers.append((i, Signature(found[0], found[1][:1] in (["self"], ["cls"]))))
    if not headers:
        return ()
    code = code_words(text)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)
    pairs = []
    for i, called in headers:
        for j in range(max(0, i - WINDOW_LINES), min(len(lines), i + WINDOW_LINES + 1)):
            if j != i and code is not None and call_arguments(
                    text, called, starts[j], starts[j] + len(lines[j])):
                pairs.append((i, j, called))
    return tuple(pairs)


@functools.lru_cache(maxsize=4096)  # a corpus's files: cutting edits parses each once
def _scopes(text: str) -> tuple[tuple[int, int, tuple[str, ...]], ...]:
    """(first, last, names) of the module and each function of Python `text`, innermost
    last: 0-based lines and the parameters and assigned names a call there can pass."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ()
    scopes = []
    for node in [tree, *ast.walk(tree)]:
        if isinstance(node, ast.Module):
            first, last, names = 0, text.count("\n"), []
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
            names = [a.arg for a in node.args.args]
        else:
            continue
        names += [n.id for n in ast.walk(node) if isinstance(n, ast.Name)
                  and isinstance(n.ctx, ast.Store)]
        scopes.append((first, last, tuple(n for n in dict.fromkeys(names)
                                          if n not in NOT_CHANGED)))
    return tuple(sorted(scopes, key=lambda s: (s[0], -s[1])))


def _names_at(text: str, line: int) -> tuple[str, ...]:
    """The parameters and assigned names of the function around 0-based `line` (of the
    module at module level): the names a call there can pass."""
    around = [names for first, last, names in _scopes(text) if first <= line <= last]
    return around[-1] if around else ()


def parameter_edit(text: str, rng: np.random.Generator) -> SyntheticEdit | None:
    """A parameter removed from a function's one-line header or added at its end, and a
    call of it near it to change the same way (the span: the call's arguments): the argument
    in the removed parameter's place taken out, or the new parameter's name passed last, a
    variable of that name where the call is (by position, or, after parameters with
    defaults, as `name=name` to a new `name=None`)."""
    pairs = _calls_near_headers(text)
    if not pairs:
        return None
    i, j, called = pairs[int(rng.integers(0, len(pairs)))]
    lines = text.split("\n")
    header, call = lines[i], lines[j]
    found = header_parameters(header)
    brackets = call_at(call, called)
    assert found is not None and brackets is not None
    params = found[1]
    args = _split_commas(call[brackets[0] + 1 : brackets[1]])
    skip = 1 if called.method else 0  # self or cls: not passed by a method's call
    # The arguments passed by position, each to the parameter in its place.
    positional = _positional(args)
    by_position = next((k for k, p in enumerate(params) if p.startswith("*")), len(params))
    if positional > by_position - skip:
        return None  # more passed by position than there are such parameters: *args
    if positional >= 2 and rng.random() < 0.5:
        k = int(rng.integers(0, positional))
        new_params, new_args = params[: skip + k] + params[skip + k + 1 :], args[:k] + args[k + 1:]
    else:
        known = {*WORD.findall(header), *WORD.findall(call)} | BUILTIN_NAMES
        names = [n for n in _names_at(text, j) if n not in known]
        if not names or any(p.startswith("**") for p in params) or any(
                a.startswith("*") for a in args):
            return None
        added = names[int(rng.integers(0, len(names)))]
        if len(args) == positional == len(params) - skip and not any(map(_keyword, params)):
            new_params, new_args = params + [added], args + [added]  # passed by position
        else:  # after parameters with defaults: a keyword with a default, passed by name
            new_params = params + [f"{added}=None"]
            new_args = args + [f"{added}={added}"]
    opening = DEF.match(header).end() - 1  # type: ignore[union-attr]
    closing = _closing(header, opening)
    assert closing is not None
    new_header = header[: opening + 1] + ", ".join(new_params) + header[closing:]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    head, removed, inserted = smallest_change(header, new_header)
    change_at = offsets[i] + head
    after = text[:change_at] + inserted + text[change_at + len(removed):]
    shift = len(inserted) - len(removed) if i < j else 0
    start = offsets[j] + brackets[0] + 1 + shift
    end = offsets[j] + brackets[1] + shift
    return SyntheticEdit("parameter", text, change_at, removed, inserted, after,
                         LineEdit(header, new_header), start, end, ", ".join(new_args),
                         span_kind="arguments")


def noop_edit(text: str, rng: np.random.Generator) -> SyntheticEdit | None:
    """An edit that implies nothing: a blank line added, or a statement's end typed."""
    lines = text.split("\n")
    code = [i for i, line in enumerate(lines) if len(line.strip()) > 12
            and not line.lstrip().startswith(("#", '"', "'"))]
    if not code:
        return None
    i = code[int(rng.integers(0, len(code)))]
    line = lines[i]
    line_lo = sum(len(x) + 1 for x in lines[:i])
    if rng.random() < 0.3:  # a blank line after this one
        at, removed, inserted = line_lo + len(line), "", "\n"
        original = text
    else:  # the line was typed up to here; the user types the rest
        indent = len(line) - len(line.lstrip())
        cut = int(rng.integers(indent + 1, len(line)))
        at, removed, inserted = line_lo + cut, "", line[cut:]
        original = text[:at] + text[at + len(inserted):]
    after = original[:at] + inserted + original[at + len(removed):]
    lo, hi = line_span(original, at)
    edit = LineEdit(original[lo:hi], after[lo:hi + len(inserted) - len(removed)])
    return SyntheticEdit(NOOP, original, at, removed, inserted, after, edit, -1, -1, "")


def infill_text(text: str, start: int, end: int, edits: Sequence[LineEdit], comment: str,
                line: bool = False) -> tuple[str, str]:
    """(prefix, suffix) around the hole where the model writes the new text of text[start:end]:
    the edits shown as comments above the span's line, then the question, a comment the
    model ends (`# count ->` for a word; `# was: <the line>` / `# now:` for a line), then the
    span's line and the rest of the document as they are."""
    line_lo, _ = line_span(text, start)
    indent = re.match(r"[ \t]*", text[line_lo:start]).group()  # type: ignore[union-attr]
    note = history_comment(edits, comment, indent)
    span = text[start:end]
    ask = (f"{indent}{comment} was: {span}\n{indent}{comment} now:" if line
           else f"{indent}{comment} {span} ->")
    return text[:line_lo] + note + ask, "\n" + text[line_lo:]


def model_text(example: SyntheticEdit, comment: str = "#") -> tuple[str, str, str]:
    """(prefix, middle, suffix) the model reads and writes for `example`."""
    prefix, suffix = infill_text(example.text, example.start, example.end, [example.edit],
                                 comment, line=example.span_kind != "word")
    return prefix, " " + example.expected, suffix
