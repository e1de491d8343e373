"""Each open document's tree-sitter tree, kept current with the edits the client sends.

A request re-parses only what changed: each change is applied to the old tree (`Tree.edit`)
and the next request that needs the tree re-parses, reusing every untouched subtree. Code
actions are listed on every cursor move, so without this a large file was parsed whole again
and again. Parsing waits for a request (a document is not parsed when opened, nor on each
keystroke), so typing in a 10 MB file costs what typing in a small one does.

A tree the store has handed out never changes: a change edits a copy (tree-sitter copies a
tree in constant time, sharing its nodes), so a request that reads its tree on a thread (code
actions, next edits, several holes) reads the text it asked about while the user types on.

The store keeps the text each tree was parsed from. Changes arrive as character offsets (the
server's document store converts the client's positions); if the kept text ever disagrees with
the server's document, the next request parses from scratch. Text goes to tree-sitter as UTF-8
with lone surrogates passed through (a document with one is still parsed, never an error).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.lsp.documents import Change
from dg_lsp.syntax.languages import LanguageSpec


@dataclass
class _Entry:
    language: LanguageSpec
    parser: ts.Parser
    text: str
    tree: ts.Tree | None  # None: not parsed yet
    edited: bool = False  # `tree` has edits (Tree.edit) not parsed yet


class DocumentTrees:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.full_parses = self.incremental_parses = 0

    def open(self, uri: str, text: str, language: LanguageSpec | None) -> None:
        self._entries.pop(uri, None)
        if language is not None:
            self._entries[uri] = _Entry(language, language.parser(), text, None)

    def close(self, uri: str) -> None:
        self._entries.pop(uri, None)

    def text(self, uri: str) -> str | None:
        """The text the kept tree was parsed from (None when no tree is kept)."""
        entry = self._entries.get(uri)
        return entry.text if entry is not None else None

    def change(self, uri: str, changes: Iterable[Change]) -> None:
        """Apply changes in order, each in offsets of the text the earlier ones left."""
        entry = self._entries.get(uri)
        if entry is None:
            return
        text = entry.text
        for change in changes:
            if not 0 <= change.start <= change.end <= len(text):
                self._entries.pop(uri)  # lost track: the next request parses from scratch
                return
            if entry.tree is not None:
                if not entry.edited:  # a tree handed out is never changed under its reader
                    entry.tree = entry.tree.copy()
                entry.tree.edit(**_edit(text, change.start, change.end, change.text))
                entry.edited = True
            text = text[:change.start] + change.text + text[change.end:]
        entry.text = text

    def tree(self, uri: str, text: str, language: LanguageSpec | None) -> ts.Tree | None:
        """The tree of `text` (the document's current text): the kept one when it is of this
        text, else a fresh parse (kept for the next edits)."""
        if language is None:
            return None
        entry = self._entries.get(uri)
        if entry is None or entry.language is not language or entry.text != text:
            entry = _Entry(language, language.parser(), text, None)
            self._entries[uri] = entry
        if entry.tree is None:
            entry.tree = entry.parser.parse(_utf8(text))
            self.full_parses += 1
        elif entry.edited:
            entry.tree = entry.parser.parse(_utf8(text), entry.tree)
            entry.edited = False
            self.incremental_parses += 1
        return entry.tree


def _edit(text: str, start: int, end: int, new: str) -> dict[str, object]:
    """`Tree.edit` arguments for replacing characters [start, end) of `text` by `new`."""
    start_point = _point(text, start)
    old_end_point = _point(text, end)
    start_byte = _bytes(text, 0, start)
    old_end_byte = start_byte + _bytes(text, start, end)
    new_bytes = len(_utf8(new))
    last_newline = new.rfind("\n")
    if last_newline < 0:
        new_end_point = (start_point[0], start_point[1] + new_bytes)
    else:
        new_end_point = (start_point[0] + new.count("\n"),
                         len(_utf8(new[last_newline + 1:])))
    return dict(start_byte=start_byte, old_end_byte=old_end_byte,
                new_end_byte=start_byte + new_bytes, start_point=start_point,
                old_end_point=old_end_point, new_end_point=new_end_point)


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _bytes(text: str, start: int, end: int) -> int:
    return len(_utf8(text[start:end]))


def _point(text: str, offset: int) -> tuple[int, int]:
    """(row, byte column) of character `offset`: tree-sitter's coordinates."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset), _bytes(text, line_start, offset)
