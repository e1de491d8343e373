"""`textDocument/copilotInlineEdit`: next-edit suggestions (dg_lsp.next_edit.suggest) over LSP,
with the messages of dg_lsp.lsp.messages.

A request for a version the server no longer has is refused with ContentModified (no popup:
nobody asked for a suggestion by hand). Each request lives as dg_lsp.lsp.lifecycle says (a
newer one for the same document cancels it, failures are empty answers); a document changed
or reopened while the answer was computed gets an empty one (whatever its version).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified

from dg_lsp.document import accept
from dg_lsp.document.parsed import ParsedText
from dg_lsp.lsp.documents import short_path
from dg_lsp.lsp.lifecycle import Run, run_request
from dg_lsp.lsp.messages import (
    INLINE_EDIT,
    INLINE_EDIT_ACCEPTED,
    INLINE_EDIT_SHOWN,
    InlineEdit,
    InlineEditList,
    InlineEditParams,
    ShownParams,
)
from dg_lsp.lsp.state import DgLanguageServer
from dg_lsp.next_edit.suggest import suggest
from dg_lsp.positions import offset_at, position_at
from dg_lsp.syntax.languages import language_for


def register(server: DgLanguageServer) -> None:
    @server.feature(INLINE_EDIT)
    async def inline_edit_request(ls: DgLanguageServer, params: InlineEditParams
                                  ) -> InlineEditList:
        return await inline_edit(ls, params)

    @server.feature(INLINE_EDIT_SHOWN)
    def shown(ls: DgLanguageServer, params: ShownParams) -> None:
        ls.stats["inlineEditsShown"] += 1

    @server.command(INLINE_EDIT_ACCEPTED)
    def accepted(ls: DgLanguageServer, *args: Any) -> None:
        ls.stats["inlineEditsAccepted"] += 1


async def inline_edit(server: DgLanguageServer, params: InlineEditParams) -> InlineEditList:
    """The answer to INLINE_EDIT: the suggestion the document's last edit implies, or none."""
    uri, version = params.text_document.uri, params.text_document.version
    position = params.position
    doc = server.documents.get(uri)
    if doc is None:
        server.log(f"next edit for a document that is not open: {uri}")
        return InlineEditList([])
    if version is not None and version != doc.version:
        raise JsonRpcContentModified(f"{short_path(uri)} is at version {doc.version}, "
                                     f"not {version}")
    if (not server.settings.enabled(doc.language_id or "") or not doc.is_valid_text
            or doc.history.last is None):
        return InlineEditList([])
    if accept.unservable(doc.text) is not None:
        # suggest() answers nothing here: checked before the tree is built, which would parse
        # the whole file on the event loop (tree-sitter holds the GIL) and keep it.
        return InlineEditList([])
    encoding = server.position_encoding
    cursor = offset_at(doc.text, position, encoding)
    if cursor is None:
        server.log(f"position {position.line}:{position.character} is outside {uri}")
        return InlineEditList([])
    # The answer is for this text only: its range is computed on it.
    text, seen_version, revision = doc.text, doc.version, doc.revision

    async def work(run: Run) -> InlineEditList:
        backend = await run.engine()
        if backend is None:
            return InlineEditList([])
        # While this waited the user may have typed, undone the last edit (then the history
        # has none) or reopened the document (at the same version, even): a changed document
        # has a new revision, and the answer would not fit it.
        if server.documents.at(uri, revision) is None:
            return InlineEditList([])
        language = language_for(doc.language_id, uri)
        parsed = ParsedText(text, language, server.trees.tree(uri, text, language), uri)
        found = await asyncio.get_running_loop().run_in_executor(
            None, suggest, backend, parsed, doc.history.line_edits(), replace(doc.history.last),
            cursor, server.settings, run.stop.is_set)
        if found is None or server.documents.at(uri, revision) is None:
            return InlineEditList([])  # nothing, or the text changed meanwhile: it may not fit
        server.stats["inlineEditsSuggested"] += 1
        where = types.Range(position_at(text, found.start, encoding),
                            position_at(text, found.end, encoding))
        command = types.Command("Accept next edit", INLINE_EDIT_ACCEPTED,
                                arguments=[uri, seen_version])
        return InlineEditList([InlineEdit(
            found.text, types.OptionalVersionedTextDocumentIdentifier(uri, seen_version),
            where, command)])

    return await run_request(server, "next edit", uri, InlineEditList([]), work)
