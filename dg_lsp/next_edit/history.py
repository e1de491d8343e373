"""Each open document's last few edits, as next-edit suggestions (dg_lsp.next_edit.suggest) read
them.

Every `didChange` event is reduced to what really changed (the common head and tail of the
old and new text are dropped, so a client that sends whole lines or whole documents records
the same edit as one that sends keystrokes) and merged into the previous edit when it touches
what that edit inserted or changes the same line: a burst of typing, backspacing or an undo of
it is one edit, so is `int(` typed before a value and `)` after it, and an edit undone to
nothing is forgotten. The history is bounded in edits and characters;
it lives and dies with the document (dg_lsp.lsp.documents).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.edits.prompt import LineEdit, smallest_change

MAX_EDITS = 8
# Characters kept of an edit's removed and inserted text: a paste of a whole file is one edit
# whose text the model could not read anyway.
MAX_EDIT_CHARS = 2000


@dataclass
class RecordedEdit:
    """document[start : start + len(inserted)] replaced `removed`; `head` and `tail` are the
    rest of the edit's first and last lines, unchanged by it."""

    start: int
    removed: str
    inserted: str
    head: str
    tail: str

    @property
    def end(self) -> int:
        return self.start + len(self.inserted)

    def line_edit(self) -> LineEdit:
        """The edit's whole lines before and after it."""
        return LineEdit(self.head + self.removed + self.tail, self.head + self.inserted + self.tail)


class EditHistory:
    def __init__(self) -> None:
        self.edits: list[RecordedEdit] = []

    @property
    def last(self) -> RecordedEdit | None:
        return self.edits[-1] if self.edits else None

    def record(self, text: str, start: int, end: int, new: str) -> None:
        """Note that text[start:end] (the text before the change) is replaced by `new`."""
        last = self.last
        if last is not None and (start <= last.end and end >= last.start
                                 or _same_line(text, last, start, end, new)):
            # It touches what the last edit inserted, or changes the same line: one edit
            # (renaming a word in keystrokes, `int(` then `)` around a value).
            lo, hi = min(start, last.start), max(end, last.end)
            removed = text[lo:last.start] + last.removed + text[last.end:hi]
            inserted = text[lo:start] + new + text[end:hi]
            self.edits.pop()
            self._add(text, lo, hi, removed, inserted, shift=0)
            return
        removed = text[start:end]
        if "\n" in removed or "\n" in new:
            # A client that sends whole lines or the whole document: keep what changed.
            # (Not within a line: selecting "count" and typing "t" must stay one edit with
            # the keystrokes that follow it.)
            same, removed, new = smallest_change(removed, new)
            start += same
            end = start + len(removed)
        self._add(text, start, end, removed, new, shift=len(new) - len(removed))

    def _add(self, text: str, start: int, end: int, removed: str, inserted: str, shift: int
             ) -> None:
        """Record an edit of text[start:end] (which was `removed` before any earlier part of
        its burst) into `inserted`; earlier edits after it move by `shift`, those it
        overlaps are gone."""
        kept = []
        for edit in self.edits:
            if edit.end <= start:
                kept.append(edit)
            elif edit.start >= end:
                edit.start += shift
                kept.append(edit)
        if removed != inserted:  # else nothing changed, or an edit was undone
            line_end = text.find("\n", end)
            kept.append(RecordedEdit(
                start, removed[:MAX_EDIT_CHARS], inserted[:MAX_EDIT_CHARS],
                text[text.rfind("\n", 0, start) + 1:start][-MAX_EDIT_CHARS:],
                text[end:len(text) if line_end < 0 else line_end][:MAX_EDIT_CHARS]))
        self.edits = kept[-MAX_EDITS:]

    def line_edits(self) -> list[LineEdit]:
        return [edit.line_edit() for edit in self.edits]


def _same_line(text: str, last: RecordedEdit, start: int, end: int, new: str) -> bool:
    """Whether text[start:end] -> `new` changes only the line `last` ended on."""
    if "\n" in new or "\n" in text[start:end] or "\n" in last.inserted:
        return False
    line_start = text.rfind("\n", 0, last.start) + 1
    line_end = text.find("\n", last.end)
    return line_start <= start and end <= (len(text) if line_end < 0 else line_end)
