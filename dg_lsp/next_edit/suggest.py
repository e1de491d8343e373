"""Next-edit suggestions: the edit the user's last edit implies, near it, written by the model.

After the user renames `count` to `total` on one line, the `count` two lines down probably
follows. The suggestion is found in three steps:

1. **Where**: tree-sitter and the history choose, the model does not. The region is the
   definition enclosing the last edit, cut to REGION_LINES lines on each side (the whole
   window when no definition encloses it). The spans to look at (`spans`) are the region's
   other occurrences of the words the last edit removed (engine.edits.prompt.changed_words), or,
   when it removed none but changed a line inside, the lines alike that line as it was, or,
   when it added a parameter to a function's header or removed one, the argument lists of
   the calls of it; nearest the cursor first. The region and the spans are computed in
   engine.edits.spans
   (definition_region, implied_spans), where the real edits cut for training and evaluation
   (engine.edits.real) find them the same way. An edit that removed no word and only
   added text at a line's end or a new line (a statement being written) implies nothing,
   and a span at the cursor is the inline completion's.
2. **What**: the model writes what each span becomes (an infill of a few tokens ending a
   comment above the span's line, `# count ->`, under the recent edits shown as comments:
   engine.edits.prompt.infill_text), through the same Backend and resident engine as every
   completion, cancelled like them. A word is written as one of the new words the edits put
   in, or not at all (InfillRequest.choices, engine.edits.prompt.next_words): the bundled model,
   asked to copy a rare word (`iterator`), otherwise writes a frequent one (`logger`), the old
   word back, or the first piece of the new one (` field` of `fieldNames`). Likewise a
   line alike the edited one becomes that line changed the same way where their pieces
   line up (engine.edits.spans.analogous_lines), and a call's arguments, after its function
   gained
   or lost a parameter, one of the lists the header's change implies
   (engine.edits.spans.argument_lists), or each stays: written freely, the model garbles the
   text
   it copies.
3. **Whether**: a suggestion is offered only if the model changed the span (a word: into
   one of those new words, not a piece of one), the edited document parses no worse, uses
   no name the file lacks (dg_lsp.syntax.names), and the model was at least `minEditConfidence`
   sure of it (dg_lsp.document.gate). The user's own edit is never touched, so nothing undoes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dg_lsp.context import char_budget, windows
from dg_lsp.document import accept, gate
from dg_lsp.document.parsed import ParsedText
from dg_lsp.next_edit.history import RecordedEdit
from dg_lsp.settings import Settings
from engine.backend import Backend
from engine.edits.prompt import WORD, LineEdit, changed_words, infill_text, next_words
from engine.edits.spans import (
    MAX_SPANS,
    Definition,
    Span,
    analogous_lines,
    argument_lists,
    definition_region,
    implied_spans,
    is_identifier,
    signature_change,
)
from engine.serve.admit import MAX_CHOICES
from engine.types import InfillRequest, Score, UnitEnd, last_draft

# Tokens the model may write for a word (an identifier, a literal) and for a line.
WORD_TOKENS = 16
LINE_TOKENS = 48
# A longer word (a long string literal) does not fit WORD_TOKENS; the bound (and
# engine.edits.spans.MAX_ALIKE_CHARS for lines and argument lists) keeps a request's choices
# inside
# the engine's (engine.serve.admit.MAX_CHOICES_TEXT).
MAX_WORD_CHARS = 200


@dataclass(frozen=True)
class NextEdit:
    start: int  # replace text[start:end] of the document it was computed for
    end: int
    text: str
    score: Score | None
    steps: int  # forward passes the model ran


def region(doc: ParsedText, edit: RecordedEdit) -> tuple[int, int]:
    """[start, end) of the lines a suggestion may change after `edit`: around the innermost
    definition that holds it, as tree-sitter finds them in the document's language, or, when
    it added or removed a parameter in a function's header, around that function (its callers
    are outside it): engine.edits.spans.definition_region."""
    definitions = [Definition(*doc.span(node), None if body is None else doc.span(body)[0])
                   for _, node, body, _ in doc.definitions()]
    header = signature_change(edit.line_edit()) is not None
    return definition_region(doc.text, edit.start, edit.end, definitions, header)


def spans(doc: ParsedText, edit: RecordedEdit, cursor: int) -> list[Span]:
    """Where `edit` may imply a change, nearest the cursor first
    (engine.edits.spans.implied_spans:
    the occurrences of the words it removed, or the lines alike the line it changed inside)."""
    return implied_spans(doc.text, edit.line_edit(), edit.start, edit.end, cursor,
                         region(doc, edit))


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
    if accept.unservable(doc.text) is not None:
        return None
    comment = doc.language.line_comment if doc.language else "#"
    sampler = replace(settings.sampler, share_prefix=False)
    # A word becomes one of the new words the shown edits put in one for one (or, when they
    # replaced none one for one, one of the words they put in), or stays: never a word they
    # removed, which the model, seeing them all around the span, would otherwise write back
    # (`iterable` after `iterable -> iterator`). "\n" alone: the model ends the comment with
    # nothing, keeping the span. The latest edits' words are kept when there are many.
    written = [w for w in next_words(history) if len(w) <= MAX_WORD_CHARS][1 - MAX_CHOICES:]
    choices = (*(f" {word}\n" for word in written), "\n")
    line_edit = edit.line_edit()
    steps = 0
    for span in spans(doc, edit, cursor)[:MAX_SPANS]:
        start, end = span.start, span.end
        original = doc.text[start:end]
        tokens = WORD_TOKENS if span.kind == "word" else LINE_TOKENS
        offered: list[str] | None = None  # what the span may become; None: any line
        if span.kind == "word":
            offered = written
            shown: tuple[str, ...] | None = choices
        else:
            # The argument lists the header's change implies, or the lines the edited line's
            # change implies here (the same text put in at the places that line up), or the
            # span as it is: written freely, the bundled model garbles the text it copies
            # (docs/usage.md). A line no alignment finds a place in is written freely.
            implied = argument_lists if span.kind == "arguments" else analogous_lines
            offered = implied(line_edit, original) or None
            if offered is None and span.kind == "arguments":
                continue
            shown = (None if offered is None
                     else (*(f" {text}\n" for text in offered), f" {original}\n"))
        prefix, suffix = infill_text(doc.text, start, end, history, comment,
                                     line=span.kind != "word")
        prefix, suffix = windows(prefix, suffix, char_budget(settings.canvas_length, tokens),
                                 settings.suffix_fraction)
        # The same edit must get the same suggestion whatever the engine served before.
        request = InfillRequest(prefix, suffix, tokens, sampler,
                                settings.canvas_length, settings.suffix_fraction,
                                UnitEnd("line"), shown)
        last = last_draft(backend.infill_stream(request, cancel, document=doc.uri or None))
        if last is None or last.finish_reason == "cancelled":
            return None
        steps += last.step
        if span.kind == "word":
            text = _word(last.text, original)
        else:
            text = last.text.split("\n", 1)[0].strip()
            if span.kind == "line":
                text = text or None
        if offered is not None and text not in offered:
            text = None  # an engine that cannot follow choices wrote something else
        if text is None or text == original or accept.stutters(text):
            continue  # the model keeps this one as it is, or loops
        if gate.refusal(last.score, settings.min_edit_confidence) is not None:
            continue
        if _acceptable(doc, start, end, text):
            return NextEdit(start, end, text, last.score, steps)
    return None


def _word(generated: str, original: str) -> str | None:
    """The word the model wrote in place of `original`: the first word of its text, when it
    is a word of the same kind (an identifier for an identifier, a literal for a literal)."""
    found = WORD.match(generated.lstrip(" "))
    if found is None or is_identifier(found.group()) != is_identifier(original):
        return None
    return found.group()


def _acceptable(doc: ParsedText, start: int, end: int, text: str) -> bool:
    """Whether replacing doc[start:end] by `text` parses no worse and names nothing new."""
    if doc.language is None:
        return True
    edited = doc.replaced(start, end, text)
    return (accept.parses_no_worse(edited, doc.errors)
            and not accept.unknown_names(doc, edited, start, text))


def rename_rule(edit: RecordedEdit, doc: ParsedText, cursor: int) -> NextEdit | None:
    """The baseline the model is measured against: where the last edit replaced one name by
    another, the nearest span becomes that name; nothing otherwise."""
    removed, inserted = changed_words(edit.line_edit())
    if len(removed) != 1 or len(inserted) != 1 or not all(map(is_identifier, removed + inserted)):
        return None
    found = [span for span in spans(doc, edit, cursor) if span.kind == "word"]
    if not found:
        return None
    return NextEdit(found[0].start, found[0].end, inserted[0], None, 0)

