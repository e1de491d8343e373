"""`dg-lsp/fillHoles`: a completion at every cursor, each its own, in one request
(dg_lsp.completion.cursors; the messages: dg_lsp.lsp.messages).

The user asked for it by hand (the editors' "Complete at every cursor"), so a refusal is an
LSP error the user is shown, as a code action's is (dg_lsp.lsp.actions): the document not open
or changed while the model ran (ContentModified), a position outside it, too many cursors, an
engine that cannot fill several holes at once.
"""

from __future__ import annotations

import functools

from lsprotocol import types

from dg_lsp.completion.cursors import complete_at_cursors
from dg_lsp.document import accept
from dg_lsp.document.parsed import ParsedText
from dg_lsp.lsp.actions import check_version, on_engine, refuse
from dg_lsp.lsp.documents import short_path
from dg_lsp.lsp.messages import FILL_HOLES, FilledHole, FilledHoles, FillHolesParams
from dg_lsp.lsp.state import DgLanguageServer
from dg_lsp.positions import offset_at, position_at
from dg_lsp.syntax.languages import language_for


def register(server: DgLanguageServer) -> None:
    @server.feature(FILL_HOLES)
    async def fill_holes_request(ls: DgLanguageServer, params: FillHolesParams) -> FilledHoles:
        return await fill_holes(ls, params)


async def fill_holes(server: DgLanguageServer, params: FillHolesParams) -> FilledHoles:
    """Each position's own completion, in the order the positions were given."""
    uri, version = params.text_document.uri, params.text_document.version
    check_version(server, uri, version)
    doc = server.documents.get(uri)
    why = "it is not valid Unicode" if not doc.is_valid_text else accept.unservable(doc.text)
    if why is not None:
        raise refuse(server, f"cannot complete in {short_path(uri)}: {why}")
    encoding = server.position_encoding
    offsets = [offset_at(doc.text, p, encoding) for p in params.positions]
    if any(offset is None for offset in offsets):
        outside = next(p for p, o in zip(params.positions, offsets, strict=True) if o is None)
        raise refuse(server, f"position {outside.line}:{outside.character} is outside "
                     f"{short_path(uri)}")
    text, revision = doc.text, doc.revision
    backend = await server.engine.backend()
    if backend is None:
        raise refuse(server, "the model is not loaded")
    language = language_for(doc.language_id, uri)
    parsed = ParsedText(text, language, server.trees.tree(uri, text, language), uri)
    fills = await on_engine(server, backend, functools.partial(
        complete_at_cursors, server.engine.stepped(backend), parsed, offsets, server.settings))
    check_version(server, uri, version, revision)
    items = []
    for position, offset, found in zip(params.positions, offsets, fills.suggestions,
                                       strict=True):
        end = offset + (found.replace if found is not None else 0)
        items.append(FilledHole(position, found.text if found is not None else "",
                                types.Range(position_at(text, offset, encoding),
                                            position_at(text, end, encoding))))
    return FilledHoles(items)
