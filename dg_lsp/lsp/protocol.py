"""pygls's protocol with dg-lsp's overrides: the position encoding it prefers, its own copy of
each document, the types of the methods LSP does not define (dg_lsp.lsp.messages), and errors
without tracebacks.

Nothing here knows about completions: the server (dg_lsp.lsp.server) registers the handlers.
"""

from __future__ import annotations

import logging
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
)

from dg_lsp.lsp.messages import CAPABILITY, MESSAGE_TYPES

# Our choice among the encodings a client offers; UTF-16 when it offers none of them.
PREFERRED_ENCODINGS = [types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16]


class _RefusalsWithoutTraceback(logging.Filter):
    """pygls logs every JsonRpcException a handler raises with its traceback; those are
    answers (a refused rewrite, a stale version), not failures: one line is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], JsonRpcException):
            record.msg = f"{record.getMessage()}: {record.exc_info[1]}"
            record.args, record.exc_info = None, None
        return True


logging.getLogger("pygls.protocol.json_rpc").addFilter(_RefusalsWithoutTraceback())


class DgProtocol(LanguageServerProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        # pygls takes the client's first supported encoding; we want UTF-8 whenever offered.
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            offered = set(general.position_encodings)
            general.position_encodings = [e for e in PREFERRED_ENCODINGS if e in offered] or None
        result = yield from super().lsp_initialize(params)
        # Methods LSP does not define are advertised under `experimental`.
        result.capabilities.experimental = {**(result.capabilities.experimental or {}),
                                            **CAPABILITY}
        return result

    def get_message_type(self, method: str) -> type[Any] | None:
        """LSP's types for its methods, dg_lsp.lsp.messages' for the others: pygls structures
        every message into its type through the converter."""
        return MESSAGE_TYPES.get(method) or super().get_message_type(method)

    # The server keeps its own copy of each document (dg_lsp.lsp.documents): pygls's workspace
    # documents count lines with str.splitlines, which LSP does not, and cost a pass over the
    # whole file per keystroke.

    @lsp_method(types.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> None:
        self._server.did_open(params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        self._server.did_change(params)

    @lsp_method(types.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        self._server.did_close(params)

    def structure_message(self, data: dict[str, Any]) -> Any:
        """pygls's conversion, without its full traceback in the log for every message that
        does not convert: dg_lsp.lsp.rpc answers those with the failing field instead."""
        if "jsonrpc" not in data:
            return data
        method = data.get("method")
        if "id" in data and "error" in data:
            kind = types.ResponseErrorMessage
        elif "id" in data and method is not None:
            kind = self.get_message_type(method) or JsonRPCRequestMessage
        elif "id" in data:
            kind = self._result_types.pop(data["id"], None) or JsonRPCResponseMessage
        else:
            kind = self.get_message_type(method or "") or JsonRPCNotification
        return self._converter.structure(data, kind)

    def _send_response(self, msg_id: Any, result: Any = None,
                       error: types.ResponseError | None = None) -> None:
        # pygls attaches the Python traceback of a failed handler as `data`; the user gets
        # the message, the traceback stays in the server's log.
        if error is not None and isinstance(error.data, dict) and "traceback" in error.data:
            error = types.ResponseError(code=error.code, message=error.message)
        super()._send_response(msg_id, result, error)
