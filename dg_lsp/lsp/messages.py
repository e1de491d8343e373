"""The methods dg-lsp speaks that LSP does not define, as typed messages.

pygls structures a message through its converter into the type its protocol names for the
method (`DgProtocol.get_message_type`), as it does LSP's own: a handler gets these attrs
classes, and a request that does not convert is answered with the field at fault
(dg_lsp.lsp.rpc). Its answer, an attrs class too, is unstructured by the same converter.

Next-edit suggestions use the method Copilot's language server defined and clients already
speak (Neovim's copilot-lsp, dg-lsp's own plugins):

- request INLINE_EDIT `{textDocument: {uri, version}, position}`; answer `{edits: [...]}`,
  each edit `{text, textDocument: {uri, version}, range, command}` (alternatives, not a
  sequence; an empty list when there is nothing to suggest);
- notification INLINE_EDIT_SHOWN `{item: {command}}` when the client shows one;
- the edit's `command` (INLINE_EDIT_ACCEPTED) is run by the client when the user accepts it.

A completion at every cursor (dg_lsp.lsp.holes): request FILL_HOLES `{textDocument: {uri,
version?}, positions: [Position]}`; answer `{items: [{position, text, range}]}`, one item per
position in the order given, `text` replacing `range` (from the position on; "" where the model
wrote nothing usable there).
"""

from __future__ import annotations

from typing import Any, Literal

import attrs
from lsprotocol import types

INLINE_EDIT = "textDocument/copilotInlineEdit"
INLINE_EDIT_SHOWN = "textDocument/didShowInlineEdit"
INLINE_EDIT_ACCEPTED = "dg-lsp.inlineEditAccepted"
FILL_HOLES = "dg-lsp/fillHoles"
# What initialize advertises under `experimental`.
CAPABILITY = {"copilotInlineEdit": True, "fillHoles": True}


@attrs.define
class InlineEditParams:
    text_document: types.OptionalVersionedTextDocumentIdentifier
    position: types.Position


@attrs.define
class InlineEdit:
    text: str  # replaces `range` of the document at `text_document.version`
    text_document: types.OptionalVersionedTextDocumentIdentifier
    range: types.Range
    command: types.Command  # INLINE_EDIT_ACCEPTED, run by the client when the user takes it


@attrs.define
class InlineEditList:
    edits: list[InlineEdit]  # no default: the converter leaves a default out of the answer


@attrs.define
class InlineEditRequest:
    id: int | str
    params: InlineEditParams
    method: Literal["textDocument/copilotInlineEdit"] = INLINE_EDIT
    jsonrpc: str = "2.0"


@attrs.define
class ShownItem:
    command: types.Command | None = None


@attrs.define
class ShownParams:
    item: ShownItem


@attrs.define
class InlineEditShownNotification:
    params: ShownParams
    method: Literal["textDocument/didShowInlineEdit"] = INLINE_EDIT_SHOWN
    jsonrpc: str = "2.0"


@attrs.define
class FillHolesParams:
    text_document: types.OptionalVersionedTextDocumentIdentifier
    positions: list[types.Position]


@attrs.define
class FilledHole:
    position: types.Position  # as the client sent it
    text: str  # replaces `range` ("" where the model wrote nothing usable)
    range: types.Range


@attrs.define
class FilledHoles:
    items: list[FilledHole]  # no default: the converter leaves a default out of the answer


@attrs.define
class FillHolesRequest:
    id: int | str
    params: FillHolesParams
    method: Literal["dg-lsp/fillHoles"] = FILL_HOLES
    jsonrpc: str = "2.0"


# The message type of each method, for DgProtocol.get_message_type.
MESSAGE_TYPES: dict[str, type[Any]] = {
    INLINE_EDIT: InlineEditRequest,
    INLINE_EDIT_SHOWN: InlineEditShownNotification,
    FILL_HOLES: FillHolesRequest,
}
