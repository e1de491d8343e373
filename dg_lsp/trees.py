"""Each open document's tree-sitter tree, kept current with the edits the client sends.

A keystroke re-parses only what it changed: the change is applied to the old tree
(`Tree.edit`) and the parser reuses every untouched subtree. Code actions are listed on every
cursor move, so without this a large file was parsed whole again and again.

The store keeps its own copy of each document's text (the tree's text). Changes are applied to
that copy in the order the client sent them; if the copy ever disagrees with the server's
document (a change the store could not follow), the next request parses from scratch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import tree_sitter as ts

from dg_lsp.languages import LanguageSpec


@dataclass
class _Entry:
    language: LanguageSpec
    parser: ts.Parser
    text: str
    tree: ts.Tree


class DocumentTrees:
    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self.full_parses = self.incremental_parses = 0

    def open(self, uri: str, text: str, language: LanguageSpec | None) -> None:
        self._entries.pop(uri, None)
        if language is not None:
            self._parse(uri, text, language)

    def close(self, uri: str) -> None:
        self._entries.pop(uri, None)

    def text(self, uri: str) -> str | None:
        """The text the kept tree was parsed from (None when no tree is kept)."""
        entry = self._entries.get(uri)
        return entry.text if entry is not None else None

    def change(
        self,
        uri: str,
        content_changes: Iterable[Any],
        offset_in: Callable[[str, Any], int | None],
    ) -> None:
        """Apply the client's `TextDocumentContentChangeEvent`s in order, each range read on
        the text the earlier ones left (`offset_in(text, position)` converts a position)."""
        entry = self._entries.get(uri)
        if entry is None:
            return
        text, tree = entry.text, entry.tree
        for change in content_changes:
            rng = getattr(change, "range", None)
            if rng is None:  # the whole text
                text, tree = change.text, None
                continue
            start, end = offset_in(text, rng.start), offset_in(text, rng.end)
            if start is None or end is None or end < start:
                self._entries.pop(uri)  # lost track: the next request parses from scratch
                return
            if tree is not None:
                tree.edit(**_edit(text, start, end, change.text))
            text = text[:start] + change.text + text[end:]
        if tree is None:
            self._parse(uri, text, entry.language)
            return
        entry.tree = entry.parser.parse(text.encode("utf-8"), tree)
        entry.text = text
        self.incremental_parses += 1

    def tree(self, uri: str, text: str, language: LanguageSpec | None) -> ts.Tree | None:
        """The tree of `text` (the document's current text): the kept one when it is of this
        text, else a fresh parse (kept for the next edits)."""
        if language is None:
            return None
        entry = self._entries.get(uri)
        if entry is not None and entry.language is language and entry.text == text:
            return entry.tree
        return self._parse(uri, text, language).tree

    def _parse(self, uri: str, text: str, language: LanguageSpec) -> _Entry:
        parser = language.parser()
        entry = _Entry(language, parser, text, parser.parse(text.encode("utf-8")))
        self._entries[uri] = entry
        self.full_parses += 1
        return entry


def _edit(text: str, start: int, end: int, new: str) -> dict[str, object]:
    """`Tree.edit` arguments for replacing characters [start, end) of `text` by `new`."""
    start_point = _point(text, start)
    old_end_point = _point(text, end)
    start_byte = _bytes(text, 0, start)
    old_end_byte = start_byte + _bytes(text, start, end)
    new_bytes = len(new.encode("utf-8"))
    last_newline = new.rfind("\n")
    if last_newline < 0:
        new_end_point = (start_point[0], start_point[1] + new_bytes)
    else:
        new_end_point = (start_point[0] + new.count("\n"),
                         len(new[last_newline + 1:].encode("utf-8")))
    return dict(start_byte=start_byte, old_end_byte=old_end_byte,
                new_end_byte=start_byte + new_bytes, start_point=start_point,
                old_end_point=old_end_point, new_end_point=new_end_point)


def _bytes(text: str, start: int, end: int) -> int:
    return len(text[start:end].encode("utf-8"))


def _point(text: str, offset: int) -> tuple[int, int]:
    """(row, byte column) of character `offset`: tree-sitter's coordinates."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset), _bytes(text, line_start, offset)
