"""Real edits: the next-edit cases that two released versions of a Python file hold.

Between two releases a file changed in hunks (difflib on its lines; a block of n lines
replaced by n lines counts as n one-line hunks, as a user edits them one line at a time).
A hunk and the hunk after it make a case when the first implies the second as the server
sees it (dg_lsp.next_edit.suggest):

- the document is the old file with the hunks up to the first one applied; the user's edit
  is the first, as the editor's history records it (its smallest change: change_at, removed,
  inserted; its whole lines as a LineEdit);
- the next hunk changes nothing but one span the server's span finder
  (engine.edits.spans.implied_spans, over the region engine.edits.spans.definition_region
  finds) asks the model about after that edit, among the first MAX_SPANS it tries: an
  occurrence of a word the edit removed (a rename followed, a literal changed again) or a
  line alike the edited one (a pattern repeated);
- the span's new text is an answer the server can take: one word of the same kind (a name
  for a name, a literal for a literal) or one line, short enough to write.

Each case is a SyntheticEdit of kind "real" (text[start:end] and expected: the next hunk's
old and new text), rendered for the model as the synthetic ones are
(engine.edits.synthetic.model_text):
trained on by `dg-engine train --real-edits FILE` and judged by `dg-lsp eval --suite
next-edit`. Cutting is deterministic: the same two texts give the same cases in the same
order.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass

from engine.edits.prompt import WORD, LineEdit, smallest_change
from engine.edits.spans import (
    MAX_SPANS,
    Span,
    code_words,
    definition_region,
    implied_spans,
    is_identifier,
    python_definitions,
    signature_change,
)
from engine.edits.synthetic import WINDOW_LINES, SyntheticEdit

REAL = "real"
# Files larger than the corpus takes (engine.train.corpus.MAX_FILE_BYTES) are generated or
# data; difflib on them is slow and teaches nothing about a user's next edit.
MAX_FILE_CHARS = 400_000
# The user's edit: larger hunks are rewrites, shown to the model cut to a comment line each
# side (engine.edits.prompt.SHOWN_CHARS), and they imply no one span.
MAX_EDIT_LINES = 8
# The answer's length in characters, a cheap bound before tokenizing: the server writes a
# word in 16 tokens and a line in 48 (training keeps answers of MAX_MIDDLE tokens at most).
MAX_ANSWER_CHARS = 120


@dataclass(frozen=True)
class Hunk:
    """Lines old[old_start:old_end] became new[new_start:new_end]."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int


def hunks(old_lines: list[str], new_lines: list[str]) -> list[Hunk]:
    """The changes from `old_lines` to `new_lines`, in order; a block of n lines replaced by
    n lines is n hunks of one line each (a rename on two lines in a row is two edits)."""
    # autojunk would treat frequent lines (blank ones) as noise and pair the rest wrongly.
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    found = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            found += [Hunk(i1 + k, i1 + k + 1, j1 + k, j1 + k + 1) for k in range(i2 - i1)
                      if old_lines[i1 + k] != new_lines[j1 + k]]
        else:
            found.append(Hunk(i1, i2, j1, j2))
    return found


def readable(text: str) -> bool:
    """Whether `text` is Python source worth cutting edits from: not binary, not huge, and
    it parses (a file that does not is another language, or Python 2)."""
    if len(text) > MAX_FILE_CHARS or "\x00" in text:
        return False
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):
        return False
    return True


def real_edits(old: str, new: str) -> list[SyntheticEdit]:
    """The cases two versions of a Python file hold (see the module's docstring), in the
    order of the hunks; none when either version is not readable."""
    if old == new or not readable(old) or not readable(new):
        return []
    old_lines, new_lines = old.split("\n"), new.split("\n")
    changes = hunks(old_lines, new_lines)
    cases = []
    for edit, target in zip(changes, changes[1:], strict=False):
        if (max(edit.old_end - edit.old_start, edit.new_end - edit.new_start) > MAX_EDIT_LINES
                or target.new_start - edit.new_end > WINDOW_LINES):
            continue  # a rewrite, or too far: the span finder looks REGION_LINES around
        # The hunks before `edit` applied (new's lines up to it, old's from it on), then it.
        original = "\n".join(new_lines[:edit.new_start] + old_lines[edit.old_start:])
        text = "\n".join(new_lines[:edit.new_end] + old_lines[edit.old_end:])
        after = "\n".join(new_lines[:target.new_end] + old_lines[target.old_end:])
        case = _case(original, text, after)
        if case is not None:
            cases.append(case)
    return cases


def _case(original: str, text: str, after: str) -> SyntheticEdit | None:
    """The case of the user's edit `original` -> `text` when the next change, `text` ->
    `after`, rewrites one span the server asks about; None otherwise."""
    at, removed, inserted = smallest_change(original, text)
    end = at + len(inserted)
    line_lo = text.rfind("\n", 0, at) + 1
    line_hi = text.find("\n", end)
    head, tail = text[line_lo:at], text[end:len(text) if line_hi < 0 else line_hi]
    edit = LineEdit(head + removed + tail, head + inserted + tail)
    # The cursor ends the edit, as after typing it.
    header = signature_change(edit) is not None
    region = definition_region(text, at, end, python_definitions(text), header)
    asked = implied_spans(text, edit, at, end, end, region)
    next_at, next_removed, next_inserted = smallest_change(text, after)
    next_end = next_at + len(next_removed)
    for span in asked[:MAX_SPANS]:
        if span.start <= next_at and next_end <= span.end:
            expected = text[span.start:next_at] + next_inserted + text[next_end:span.end]
            if not answerable(text[span.start:span.end], expected, span):
                return None
            return SyntheticEdit(REAL, original, at, removed, inserted, text, edit,
                                 span.start, span.end, expected, span_kind=span.kind)
    return None


def answerable(original: str, expected: str, span: Span) -> bool:
    """Whether the server can write `expected` over `original`: for a word, one word of the
    same kind (dg_lsp.next_edit.suggest takes the first word the model writes, if it is); for a
    line, one line without its indentation (it takes the first line, stripped); both
    short."""
    if not expected or len(expected) > MAX_ANSWER_CHARS or expected == original:
        return False
    if span.kind == "word":
        return (WORD.fullmatch(expected) is not None
                and is_identifier(expected) == is_identifier(original))
    return "\n" not in expected and expected == expected.strip()


def change_kind(case: SyntheticEdit) -> str:
    """What a real case follows: "rename" (a name), "literal" (a number or a string),
    "pattern" (a line of code alike the edited one), "parameter" (a call's arguments after
    its function's header changed) or "prose" (a word or line of a comment or a docstring,
    which the server asks about as well)."""
    code = code_words(case.text)
    if code is not None:
        inside = [w for w in code if case.start <= w[0] and w[1] <= case.end]
        if not inside:
            return "prose"
    if case.span_kind == "line":
        return "pattern"
    if case.span_kind == "arguments":
        return "parameter"
    return "rename" if is_identifier(case.expected) else "literal"
