"""A document's text and its tree: what every feature reads of the document it works on.

The language server hands over the tree it keeps current with the client's edits
(dg_lsp.lsp.trees), so a request reads the tree of its document's version without parsing it
again; the command line and batch mode parse the file once here. Tree positions are bytes of
the UTF-8 text; the features work in characters: `char` and `byte` convert.
"""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

import tree_sitter as ts

from dg_lsp.syntax.errors import count_errors
from dg_lsp.syntax.languages import LanguageSpec
from dg_lsp.syntax.query import matches


class ParsedText:
    """A document's text and its tree, with byte ↔ character conversion for tree positions."""

    def __init__(
        self, text: str, language: LanguageSpec | None, tree: ts.Tree | None = None,
        uri: str = "",
    ) -> None:
        """`tree`: the tree of `text` where one is kept (dg_lsp.lsp.trees), else it is parsed.
        `uri`: the document's identity (an editor's URI, a file's), sent beside the engine's
        requests so a team's engine keeps the document on one replica; "" for none."""
        self.text = text
        self.language = language
        self.uri = uri
        self.data = text.encode("utf-8")
        if tree is None and language is not None:
            tree = language.parser().parse(self.data)
        self.tree = tree if language is not None else None
        self._char_starts: list[int] | None = None  # byte offset of every character
        self._errors: int | None = None

    @property
    def errors(self) -> int:
        """The tree's ERROR and MISSING nodes (dg_lsp.syntax.errors), counted once."""
        if self._errors is None:
            self._errors = count_errors(self.tree)
        return self._errors

    def replaced(self, start: int, end: int, text: str) -> ParsedText:
        """The document with characters [start, end) replaced by `text`, parsed."""
        return ParsedText(self.text[:start] + text + self.text[end:], self.language)

    def char(self, byte: int) -> int:
        """The character offset of a byte offset at a character boundary."""
        if len(self.data) == len(self.text):
            return byte  # ASCII: the same offsets
        if self._char_starts is None:  # built once: code actions ask on every cursor move
            self._char_starts = list(accumulate((len(ch.encode("utf-8")) for ch in self.text),
                                                initial=0))
        return bisect_left(self._char_starts, byte)

    def byte(self, offset: int) -> int:
        """The byte offset of a character offset."""
        if len(self.data) == len(self.text):
            return offset
        if self._char_starts is not None:
            return self._char_starts[offset]
        return len(self.text[:offset].encode("utf-8"))

    def span(self, node: ts.Node) -> tuple[int, int]:
        return self.char(node.start_byte), self.char(node.end_byte)

    def line_start(self, offset: int) -> int:
        return self.text.rfind("\n", 0, offset) + 1

    def indent_at(self, offset: int) -> str:
        """The leading whitespace of the line holding `offset`."""
        start = self.line_start(offset)
        end = start
        while end < len(self.text) and self.text[end] in " \t":
            end += 1
        return self.text[start:end]

    def definitions(self, query: ts.Query | None = None, start: int = 0,
                    end: int | None = None) -> list[tuple[str, ts.Node, ts.Node | None, str]]:
        """(kind "function" | "class", node, body or None, name) for every definition that
        `query` (default: the language's actions.scm) captures as @function or @class, in
        document order; with `end`, only those meeting characters [start, end] (the ones
        around a cursor when equal): tree-sitter then matches only there, so a code action
        at a cursor does not walk every definition of the file."""
        if self.tree is None:
            return []
        found = []
        low, high = 0, len(self.data)
        byte_range = None
        if end is not None:
            low, high = self.byte(start), self.byte(end)
            # tree-sitter's range is half-open: widened so a definition that only touches
            # [start, end] is matched, then kept by the exact test below
            byte_range = (max(0, low - 1), high + 1)
        for _, caps in matches(query or self.language.query("actions"), self.tree.root_node,
                               byte_range):
            if "function" not in caps and "class" not in caps:
                continue
            kind = "function" if "function" in caps else "class"
            node = caps[kind][0]
            if node.end_byte < low or node.start_byte > high:
                continue
            body = caps["body"][0] if "body" in caps else None
            name = caps["name"][0].text.decode("utf-8", errors="replace") if "name" in caps else ""
            found.append((kind, node, body, name))
        return found
