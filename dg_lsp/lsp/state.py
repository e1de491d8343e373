"""The language server's state: the settings, each open document and its tree, the engine,
the requests in flight, the counters; and the transport it is served on.

Every request handler (dg_lsp.lsp.completion, next_edit, actions) reads this class; it knows
none of them, nor any feature: dg_lsp.lsp.server puts the handlers on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lsprotocol import types
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from dg_lsp import __version__
from dg_lsp.lsp import rpc
from dg_lsp.lsp.documents import Documents
from dg_lsp.lsp.engine_host import EngineHost
from dg_lsp.lsp.protocol import DgProtocol
from dg_lsp.lsp.repository import Repositories
from dg_lsp.lsp.trees import DocumentTrees
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend

log = logging.getLogger(__name__)


class DgLanguageServer(LanguageServer):
    def __init__(self, backend: Backend | None = None) -> None:
        super().__init__("dg-lsp", __version__, protocol_cls=DgProtocol)
        self.settings = Settings()
        self.documents = Documents()  # the server's copy of each open document (LSP's lines)
        self.trees = DocumentTrees()  # each open document's tree-sitter tree
        self.repositories = Repositories()  # the workspace folders' indexes (dg_lsp.repository)
        # The engine is not thread-safe: one worker runs every load and denoising step.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dg-engine")
        self.engine = EngineHost(self, backend)
        self.inflight: dict[str, asyncio.Task] = {}  # each request kind's running one, by key
        self.stats = {"cacheHits": 0, "cancelled": 0, "inlineEditsSuggested": 0,
                      "inlineEditsShown": 0, "inlineEditsAccepted": 0}

    # -- transport ------------------------------------------------------------------------

    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        """Serve on stdio with dg_lsp.lsp.rpc's reader (every request answered)."""
        self._stop_event = threading.Event()
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        stream = rpc.Stream.of_file(stdin or sys.stdin.buffer, self.thread_pool)
        try:
            asyncio.run(rpc.serve(stream, self.protocol, self._stop_event.is_set))
        except BrokenPipeError:
            log.error("the client closed the connection")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def start_tcp(self, host: str, port: int) -> None:
        """Serve one client at a time on TCP, with the same reader as stdio."""
        self._stop_event = stop_event = threading.Event()

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.protocol.set_writer(writer)  # type: ignore[arg-type]
            await rpc.serve(rpc.Stream.of_reader(reader), self.protocol, stop_event.is_set)
            self.shutdown()

        async def listen() -> None:
            self._server = await asyncio.start_server(connection, host, port)
            async with self._server:
                await self._server.serve_forever()

        try:
            asyncio.run(listen())
        except asyncio.CancelledError:
            pass

    # -- documents --------------------------------------------------------------------------

    def did_open(self, params: types.DidOpenTextDocumentParams) -> None:
        doc = self.documents.open(params.text_document)
        if "\x00" not in doc.text:  # binary: nothing to parse
            self.trees.open(doc.uri, doc.text, language_for(doc.language_id, doc.uri))
            self.repositories.changed(doc.uri, doc.text)

    def did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        changes = self.documents.change(uri, params.text_document.version,
                                        params.content_changes, self.position_encoding)
        self.trees.change(uri, changes)
        doc = self.documents.get(uri)
        if doc is not None and changes:
            self.repositories.changed(uri, doc.text)

    def did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        self.documents.close(uri)  # its completions and edit history with it
        self.trees.close(uri)
        self.repositories.saved(uri, None)  # its unsaved changes are gone: the disk's counts

    # -- settings -------------------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        settings, errors = parse_settings(raw, self.settings)
        if errors:
            self.window_show_message(types.ShowMessageParams(
                types.MessageType.Warning,
                "dg-lsp: invalid settings ignored, previous values kept: " + "; ".join(errors)))
        self.engine.settings_changed(self.settings, settings)
        if settings.repository_context and not self.settings.repository_context:
            with contextlib.suppress(RuntimeError):  # no loop (before serving): at initialized
                self.repositories.task = asyncio.get_running_loop().create_task(
                    self.repositories.build(self))
        self.settings = settings
        for doc in self.documents:  # computed with the old settings
            doc.completions.clear()

    # -- counters -----------------------------------------------------------------------------

    def stats_report(self) -> dict[str, int | None]:
        """What `dg-lsp.stats` answers: cache hits, cancellations, engine work, parses."""
        counts = self.engine.counts
        return {**self.stats, "engineRequests": counts.requests,
                "denoiseSteps": counts.drafts,
                "completionTokens": counts.tokens,  # None: the engine cannot tell
                "fullParses": self.trees.full_parses,
                "incrementalParses": self.trees.incremental_parses}

    # -- client -----------------------------------------------------------------------------

    @property
    def known_capabilities(self) -> types.ClientCapabilities | None:
        """The client's capabilities; None before initialize (pygls's property raises)."""
        return getattr(self.protocol, "client_capabilities", None)

    @property
    def position_encoding(self) -> types.PositionEncodingKind:
        try:
            encoding = self.workspace.position_encoding
        except RuntimeError:  # before initialize: no workspace yet
            encoding = None
        return encoding or types.PositionEncodingKind.Utf16

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(kind, message))
