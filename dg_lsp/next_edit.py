"""Next-edit suggestions: the edit the user's last edit implies, near it, written by the model.

After the user renames `count` to `total` on one line, the `count` two lines down probably
follows. The suggestion is found in three steps:

1. **Where**: tree-sitter and the history choose, the model does not. The region is the
   definition enclosing the last edit, cut to REGION_LINES lines on each side (the whole
   window when no definition encloses it). The spans to look at (`spans`) are the region's
   other occurrences of the words the last edit removed (engine.edits.changed_words), or,
   when it removed none but changed a line inside, the lines alike that line as it was;
   nearest the cursor first. An edit that removed no word and only added text at a line's
   end or a new line (a statement being written) implies nothing, and a span at the cursor
   is the inline completion's.
2. **What**: the model writes what each span becomes (an infill of a few tokens ending a
   comment above the span's line, `# count ->`, under the recent edits shown as comments:
   engine.edits.infill_text), through the same Backend and resident engine as every
   completion, cancelled like them.
3. **Whether**: a suggestion is offered only if the model changed the span, the edited
   document parses no worse, uses no name the file lacks (dg_lsp.names), and the model was
   at least `minEditConfidence` sure of it (dg_lsp.gate). The user's own edit is never
   touched, so nothing undoes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dg_lsp import gate, names
from dg_lsp.actions import ParsedText, error_count
from dg_lsp.context import char_budget, windows
from dg_lsp.edit_history import RecordedEdit
from dg_lsp.postprocess import stutters
from dg_lsp.settings import Settings
from engine.backend import Backend
from engine.edits import (
    WORD,
    LineEdit,
    changed_words,
    infill_text,
    occurrences,
    similar_lines,
)
from engine.types import InfillRequest, Score, UnitEnd

REGION_LINES = 10
# Spans the model writes before giving up: each is an engine request.
MAX_SPANS = 2
# Tokens the model may write for a word (an identifier, a literal) and for a line.
WORD_TOKENS = 16
LINE_TOKENS = 48
MAX_DOCUMENT_CHARS = 1_000_000


@dataclass(frozen=True)
class NextEdit:
    start: int  # replace text[start:end] of the document it was computed for
    end: int
    text: str
    score: Score | None
    steps: int  # forward passes the model ran


def region(doc: ParsedText, edit: RecordedEdit) -> tuple[int, int]:
    """[start, end) of the lines a suggestion may change after `edit`."""
    text = doc.text
    line = text.count("\n", 0, edit.start)
    first, last = line - REGION_LINES, line + text.count("\n", edit.start, edit.end) + REGION_LINES
    enclosing = [node for _, node, _, _ in doc.definitions()
                 if doc.span(node)[0] <= edit.start and edit.end <= doc.span(node)[1]]
    if enclosing:
        node = min(enclosing, key=lambda n: n.end_byte - n.start_byte)
        first = max(first, node.start_point[0])
        last = min(last, node.end_point[0])
    return _line_offset(text, max(0, first)), _line_offset(text, last + 1)


def _line_offset(text: str, line: int) -> int:
    """The offset where `line` starts (len(text) past the end)."""
    offset = 0
    for _ in range(line):
        offset = text.find("\n", offset) + 1
        if offset == 0:
            return len(text)
    return offset


@dataclass(frozen=True)
class Span:
    """Where the model writes: a word (an occurrence of what the edit removed) or a line's
    text after its indentation (a line alike the edited one)."""

    start: int
    end: int
    kind: str  # "word" or "line"

    @property
    def tokens(self) -> int:
        return WORD_TOKENS if self.kind == "word" else LINE_TOKENS


def spans(doc: ParsedText, edit: RecordedEdit, cursor: int) -> list[Span]:
    """Where `edit` may imply a change, nearest the cursor first (below it before above it
    on a tie); none touches the edit itself or the cursor:

    - the region's occurrences of the words the edit removed (a rename, a changed literal);
    - when it removed none but changed a line inside (not typing at its end: that is a
      statement being written), the region's lines alike the edited line as it was (a
      repeated pattern: a value wrapped in a call, an argument added)."""
    line = edit.line_edit()
    removed, _ = changed_words(line)
    lo, hi = region(doc, edit)
    text = doc.text
    found: set[Span] = set()

    def add(start: int, end: int, kind: str) -> None:
        if (end < edit.start or start > edit.end) and not start <= cursor <= end:
            found.add(Span(start, end, kind))

    for word in removed:
        for start, end in occurrences(text, word, lo, hi):
            add(start, end, "word")
    if not removed and "\n" not in line.before and _changed_inside(line):
        offset = lo
        for candidate in text[lo:hi].split("\n"):
            indent = len(candidate) - len(candidate.lstrip())
            if similar_lines(line.before, candidate):
                add(offset + indent, offset + len(candidate.rstrip()), "line")
            offset += len(candidate) + 1
    cursor_line = text.count("\n", 0, cursor)

    def distance(span: Span) -> tuple[int, int, int]:
        at = text.count("\n", 0, span.start)
        return abs(at - cursor_line), at < cursor_line, span.start

    return sorted(found, key=distance)


def _changed_inside(edit: LineEdit) -> bool:
    """Whether `edit` changed a line that had text, other than by typing at its end."""
    before, after = edit.before.rstrip(), edit.after.rstrip()
    return bool(before.strip()) and before != after and not after.startswith(before)


def suggest(
    backend: Backend,
    doc: ParsedText,
    history: list[LineEdit],
    edit: RecordedEdit,
    cursor: int,
    settings: Settings,
    cancel: Callable[[], bool] | None = None,
) -> NextEdit | None:
    """The edit `edit` (the last of `history`) implies near `cursor`, or None."""
    if len(doc.text) > MAX_DOCUMENT_CHARS or "\x00" in doc.text:
        return None
    comment = doc.language.line_comment if doc.language else "#"
    sampler = replace(settings.sampler, share_prefix=False)
    errors = None
    steps = 0
    for span in spans(doc, edit, cursor)[:MAX_SPANS]:
        start, end = span.start, span.end
        prefix, suffix = infill_text(doc.text, start, end, history, comment,
                                     line=span.kind == "line")
        prefix, suffix = windows(prefix, suffix, char_budget(settings.canvas_length, span.tokens),
                                 settings.suffix_fraction)
        # The same edit must get the same suggestion whatever the engine served before.
        request = InfillRequest(prefix, suffix, span.tokens, sampler,
                                settings.canvas_length, settings.suffix_fraction,
                                UnitEnd("line"))
        last = None
        for draft in backend.infill_stream(request, cancel, document=doc.uri or None):
            last = draft
        if last is None or last.finish_reason == "cancelled":
            return None
        steps += last.step
        original = doc.text[start:end]
        if span.kind == "word":
            text = _word(last.text, original)
        else:
            text = last.text.split("\n", 1)[0].strip() or None
        if text is None or text == original or stutters(text):
            continue  # the model keeps this one as it is, or loops
        if gate.refusal(last.score, settings.min_edit_confidence) is not None:
            continue
        if errors is None:
            errors = error_count(doc)
        if _acceptable(doc, start, end, text, errors):
            return NextEdit(start, end, text, last.score, steps)
    return None


def _word(generated: str, original: str) -> str | None:
    """The word the model wrote in place of `original`: the first word of its text, when it
    is a word of the same kind (an identifier for an identifier, a literal for a literal)."""
    found = WORD.match(generated.lstrip(" "))
    if found is None or _is_identifier(found.group()) != _is_identifier(original):
        return None
    return found.group()


def _is_identifier(word: str) -> bool:
    return word[:1].isalpha() or word[:1] == "_"


def _acceptable(doc: ParsedText, start: int, end: int, text: str, errors: int) -> bool:
    """Whether replacing doc[start:end] by `text` parses no worse and names nothing new."""
    if doc.language is None:
        return True
    edited = ParsedText(doc.text[:start] + text + doc.text[end:], doc.language)
    if error_count(edited) > errors:
        return False
    first = len(doc.text[:start].encode("utf-8"))
    return not names.unknown_names(doc.language, edited.tree, first,
                                   first + len(text.encode("utf-8")), doc.text)


def rename_rule(edit: RecordedEdit, doc: ParsedText, cursor: int) -> NextEdit | None:
    """The baseline the model is measured against: where the last edit replaced one name by
    another, the nearest span becomes that name; nothing otherwise."""
    removed, inserted = changed_words(edit.line_edit())
    if len(removed) != 1 or len(inserted) != 1 or not all(map(_is_identifier, removed + inserted)):
        return None
    found = [span for span in spans(doc, edit, cursor) if span.kind == "word"]
    if not found:
        return None
    return NextEdit(found[0].start, found[0].end, inserted[0], None, 0)

