"""The next-edit prompt: an edit as the model reads it, and the question it ends.

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

import keyword
import os
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

# What an edit can rename or change consistently: identifiers, numbers, one-line strings.
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|\"[^\"\n]*\"|'[^'\n]*'")
# Edits shown to the model (most recent last) and the characters of each side.
SHOWN_EDITS = 3
SHOWN_WORDS = 2  # word changes shown per edit: a rename, a literal, a pair of them
SHOWN_CHARS = 120
# Words too common to be what an edit changed (`self`, keywords, single letters are kept:
# `i` -> `j` is a real rename).
NOT_CHANGED = frozenset(keyword.kwlist) | {"self", "cls", "None", "True", "False"}


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
