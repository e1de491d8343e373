"""Synthetic next edits: a user's edit cut from real code, and the edit it implies.

Each kind is an edit people make and what follows it: a rename followed at the next
occurrence, a literal changed again, a word the edit left alone kept (`keep`), a line changed
by a pattern repeated on a line alike it, a parameter added to or removed from a function
and its call changed to match, and an edit that implies nothing (`noop`, judged on only).
They are rendered for the model as the server asks (model_text: engine.edits.prompt) and
trained on (engine.train.edit_examples) and judged on (`dg-lsp eval --suite next-edit`).
"""

from __future__ import annotations

import ast
import builtins
import functools
import re
from dataclasses import dataclass

import numpy as np

from engine.edits.prompt import NOT_CHANGED, WORD, LineEdit, infill_text, line_span, smallest_change
from engine.edits.spans import (
    DEF,
    Signature,
    call_arguments,
    call_at,
    closing_bracket,
    code_words,
    header_parameters,
    is_keyword,
    positional_count,
    python_definitions,
    similar_lines,
    split_commas,
)

# Names a synthetic rename leaves alone: nobody renames `list` or `__init__` in one place.
BUILTIN_NAMES = frozenset(dir(builtins))

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


@functools.lru_cache(maxsize=4096)  # a corpus's files: cutting edits parses each once
def _definition_lines(text: str) -> tuple[tuple[int, int], ...]:
    """(first, last) 0-based lines of each function and class of Python `text` (none when it
    does not parse)."""
    return tuple((text.count("\n", 0, d.start), text.count("\n", 0, d.end))
                 for d in python_definitions(text))


def innermost_definition(text: str, line: int) -> tuple[int, int] | None:
    """The lines of the smallest function or class around `line` (None: module level, or
    `text` does not parse)."""
    around = [d for d in _definition_lines(text) if d[0] <= line <= d[1]]
    return min(around, key=lambda d: d[1] - d[0]) if around else None


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
    args = split_commas(call[brackets[0] + 1 : brackets[1]])
    skip = 1 if called.method else 0  # self or cls: not passed by a method's call
    # The arguments passed by position, each to the parameter in its place.
    positional = positional_count(args)
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
        if len(args) == positional == len(params) - skip and not any(map(is_keyword, params)):
            new_params, new_args = params + [added], args + [added]  # passed by position
        else:  # after parameters with defaults: a keyword with a default, passed by name
            new_params = params + [f"{added}=None"]
            new_args = args + [f"{added}={added}"]
    opening = DEF.match(header).end() - 1  # type: ignore[union-attr]
    closing = closing_bracket(header, opening)
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


def model_text(example: SyntheticEdit, comment: str = "#") -> tuple[str, str, str]:
    """(prefix, middle, suffix) the model reads and writes for `example`."""
    prefix, suffix = infill_text(example.text, example.start, example.end, [example.edit],
                                 comment, line=example.span_kind != "word")
    return prefix, " " + example.expected, suffix
