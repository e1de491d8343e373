"""The server's copy of each open document, kept with LSP's line rule.

pygls's workspace documents split lines with `str.splitlines`, which also breaks at form
feed, `\\x85`, `\\u2028` and others; an incremental change after such a character lands on
the wrong text and the copy silently diverges from the client's. The server keeps its own
copies instead, and applies every change through `dg_lsp.positions`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types

from dg_lsp.completion.cache import CompletionCache
from dg_lsp.next_edit.history import EditHistory
from dg_lsp.positions import offset_at


@dataclass
class Change:
    """Characters [start, end) of the text before the change were replaced by `text`."""

    start: int
    end: int
    text: str


# Completions kept per document for the user to type through (the latest are the ones typed
# into).
COMPLETIONS_KEPT = 20

# Revisions are unique across documents and reopenings (see OpenDocument.revision).
_revisions = itertools.count(1)


@dataclass
class OpenDocument:
    uri: str
    language_id: str
    version: int | None
    text: str
    _valid_for: str | None = field(default=None, repr=False)
    # The last few edits (next-edit suggestions read them); gone with the document.
    history: EditHistory = field(default_factory=EditHistory, repr=False)
    # The completions still valid while the user types into them; gone with the document.
    completions: CompletionCache = field(
        default_factory=lambda: CompletionCache(COMPLETIONS_KEPT), repr=False)
    # New at every open and every change. An answer is tied to the revision it was computed
    # on, not to the version: a client may reopen a document, or change it, at the same
    # version, and a range computed on the old text would then land on other text.
    revision: int = field(default_factory=lambda: next(_revisions))

    @property
    def is_valid_text(self) -> bool:
        """Whether the text is valid Unicode: no lone surrogate, which JSON can carry but
        UTF-8, tree-sitter and the tokenizer cannot (checked once per text)."""
        if self._valid_for is not self.text:
            try:
                self.text.encode("utf-8")
            except UnicodeEncodeError:
                return False
            self._valid_for = self.text
        return True


class Documents:
    def __init__(self) -> None:
        self._docs: dict[str, OpenDocument] = {}

    def open(self, item: types.TextDocumentItem) -> OpenDocument:
        doc = OpenDocument(item.uri, item.language_id, item.version, item.text)
        self._docs[item.uri] = doc
        return doc

    def change(
        self,
        uri: str,
        version: int | None,
        changes: Iterable[types.TextDocumentContentChangeEvent],
        encoding: str,
    ) -> list[Change]:
        """Apply the client's changes in order, each range read on the text the earlier
        ones left; the changes as character offsets (empty when `uri` is not open)."""
        doc = self._docs.get(uri)
        if doc is None:
            return []
        applied = []
        for event in changes:
            rng = getattr(event, "range", None)
            if rng is None:
                change = Change(0, len(doc.text), event.text)
            else:
                # A range past the end is read as editors read it (clamped), not dropped:
                # dropping an edit would leave the copy diverged for good.
                start = offset_at(doc.text, rng.start, encoding, clamp=True)
                end = offset_at(doc.text, rng.end, encoding, clamp=True)
                start, end = min(start, end), max(start, end)
                change = Change(start, end, event.text)
            doc.history.record(doc.text, change.start, change.end, change.text)
            doc.text = doc.text[:change.start] + change.text + doc.text[change.end:]
            applied.append(change)
        doc.version = version
        doc.revision = next(_revisions)
        return applied

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def get(self, uri: str) -> OpenDocument | None:
        return self._docs.get(uri)

    def at(self, uri: str, revision: int) -> OpenDocument | None:
        """The document `uri` if it still has the text it had at `revision`, else None (it
        was changed, closed or reopened since: an answer computed on it may not fit)."""
        doc = self._docs.get(uri)
        return doc if doc is not None and doc.revision == revision else None

    def __contains__(self, uri: object) -> bool:
        return uri in self._docs

    def __iter__(self) -> Iterator[OpenDocument]:
        return iter(list(self._docs.values()))


def short_path(uri: str) -> str:
    """The file name messages to the user show for `uri`."""
    return Path(unquote(urlparse(uri).path)).name or uri
