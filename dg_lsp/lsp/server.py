"""The language server: LSP over stdio or TCP, completions from the diffusion engine.

A thin server in the style of jedi-language-server: `DgLanguageServer` holds the state (the
settings, each open document and its tree, the completion cache, the engine) and
`create_server` registers handlers that delegate:

- dg_lsp.lsp.protocol: pygls's protocol with our overrides (encoding, document copies, errors)
- dg_lsp.lsp.engine_host: the engine, loaded on first use, restarted when lost, its state told
- dg_lsp.lsp.completion: `textDocument/inlineCompletion` and `textDocument/completion`
- dg_lsp.lsp.actions: code actions, their resolution, the rewrite-with-instruction command

Both completion requests run the same `Pipeline`. Handlers are `async`: each denoising step
runs on the engine's single worker thread and is awaited, so `$/cancelRequest`, or a newer
request for the same document, stops a completion at the next step boundary.

The server reads messages with dg_lsp.lsp.rpc (every request is answered, also a malformed one),
keeps its own copy of each open document (dg_lsp.lsp.documents, LSP's line rule) and converts
every position with dg_lsp.positions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lsprotocol import types
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer

from dg_lsp import __version__
from dg_lsp.completion.cache import CompletionCache
from dg_lsp.completion.pipeline import Completion
from dg_lsp.lsp import actions as lsp_actions
from dg_lsp.lsp import completion as lsp_completion
from dg_lsp.lsp import next_edit as lsp_next_edit
from dg_lsp.lsp import rpc
from dg_lsp.lsp.actions import REWRITE_COMMAND
from dg_lsp.lsp.documents import Documents
from dg_lsp.lsp.engine_host import EngineHost
from dg_lsp.lsp.protocol import DgProtocol
from dg_lsp.lsp.trees import DocumentTrees
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.syntax.languages import language_for
from engine.backend import Backend

log = logging.getLogger(__name__)

STATS_COMMAND = "dg-lsp.stats"
__all__ = ["REWRITE_COMMAND", "STATS_COMMAND", "DgLanguageServer", "create_server", "serve"]


class DgLanguageServer(LanguageServer):
    def __init__(self, backend: Backend | None = None) -> None:
        super().__init__("dg-lsp", __version__, protocol_cls=DgProtocol)
        self.settings = Settings()
        self.documents = Documents()
        self.cache = CompletionCache()
        self.trees = DocumentTrees()
        # The engine is not thread-safe: one worker runs every load and denoising step.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dg-engine")
        self.engine = EngineHost(self, backend)
        self.inflight: dict[str, asyncio.Task] = {}  # each document's running completion
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

    def did_change(self, params: types.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        changes = self.documents.change(uri, params.text_document.version,
                                        params.content_changes, self.position_encoding)
        self.trees.change(uri, changes)

    def did_close(self, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        self.documents.close(uri)
        self.cache.clear(uri)
        self.trees.close(uri)

    # -- settings -------------------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        settings, errors = parse_settings(raw, self.settings)
        if errors:
            self.window_show_message(types.ShowMessageParams(
                types.MessageType.Warning,
                "dg-lsp: invalid settings ignored, previous values kept: " + "; ".join(errors)))
        self.engine.settings_changed(self.settings, settings)
        self.settings = settings
        self.cache.clear()

    # -- requests ---------------------------------------------------------------------------

    async def complete(
        self, uri: str, position: types.Position
    ) -> tuple[Completion, types.Range] | None:
        """The completion at an LSP position and the range it replaces (lsp_completion)."""
        return await lsp_completion.complete(self, uri, position)

    async def rewrite(self, uri: str, version: int | None, lsp_range: types.Range,
                      action: str = lsp_actions.REWRITE, instruction: str | None = None,
                      strength: float | None = None) -> types.WorkspaceEdit:
        """One code action's WorkspaceEdit (lsp_actions)."""
        return await lsp_actions.rewrite(self, uri, version, lsp_range, action, instruction,
                                         strength)

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        """The actions that apply at the range, without running the model (lsp_actions)."""
        return lsp_actions.code_actions(self, params)

    def stats_report(self) -> dict[str, int | None]:
        """What STATS_COMMAND answers: cache hits, cancellations, engine work, parses."""
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


# -- LSP features -----------------------------------------------------------------------------


def create_server(backend: Backend | None = None) -> DgLanguageServer:
    server = DgLanguageServer(backend)

    @server.feature(types.INITIALIZE)
    def initialize(ls: DgLanguageServer, params: types.InitializeParams) -> None:
        if params.initialization_options is not None:
            ls.apply_settings(params.initialization_options)

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    def did_change_configuration(
        ls: DgLanguageServer, params: types.DidChangeConfigurationParams
    ) -> None:
        ls.apply_settings(params.settings)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: DgLanguageServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        found = await ls.complete(params.text_document.uri, params.position)
        return lsp_completion.inline_list(found)

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionOptions(trigger_characters=lsp_completion.TRIGGER_CHARACTERS,
                                resolve_provider=False),
    )
    async def completion(
        ls: DgLanguageServer, params: types.CompletionParams
    ) -> types.CompletionList:
        found = await ls.complete(params.text_document.uri, params.position)
        return lsp_completion.completion_list(found)

    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION, lsp_actions.CODE_ACTION_OPTIONS)
    async def code_action(
        ls: DgLanguageServer, params: types.CodeActionParams
    ) -> list[types.CodeAction]:
        return await lsp_actions.code_actions_for_client(ls, params)

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve_code_action(ls: DgLanguageServer, action: types.CodeAction
                                  ) -> types.CodeAction:
        return await lsp_actions.resolve_action(ls, action)

    @server.command(REWRITE_COMMAND)
    async def rewrite_with_instruction(ls: DgLanguageServer, *args: Any
                                       ) -> types.WorkspaceEdit | None:
        return await lsp_actions.rewrite_command(ls, *args)

    @server.feature(lsp_next_edit.METHOD)
    async def inline_edit(ls: DgLanguageServer, params: Any) -> dict[str, list]:
        return await lsp_next_edit.inline_edit(ls, params)

    @server.feature(lsp_next_edit.SHOWN)
    def inline_edit_shown(ls: DgLanguageServer, params: Any) -> None:
        lsp_next_edit.shown(ls, params)

    @server.command(lsp_next_edit.ACCEPTED_COMMAND)
    def inline_edit_accepted(ls: DgLanguageServer, *args: Any) -> None:
        lsp_next_edit.accepted(ls, *args)

    @server.command(STATS_COMMAND)
    def stats(ls: DgLanguageServer, *args: Any) -> dict[str, int | None]:
        return ls.stats_report()

    return server


# -- command line -----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve LSP on stdio (default) or TCP")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    # vscode-languageclient (TransportKind.stdio) and other clients add --stdio to the command.
    parser.add_argument("--stdio", action="store_true", help="serve on stdio (the default)")
    parser.add_argument("--model", help="checkpoint folder or hub id (default: bundled model)")
    parser.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N, mps")
    parser.add_argument("--dtype", default=None, help="auto (default), int8, float32, bfloat16, "
                        "float16, float64")
    parser.add_argument("--engine", default=None, metavar="resident|inproc|URL",
                        help="share a resident engine process (default), load the model here, "
                        "or use a team's engine at http(s)://HOST:PORT (dg-engine serve --ray)")
    parser.add_argument("--token-file", default=None,
                        help="the team engine's token: a private file (mode 0600; default "
                        "~/.config/dg-engine/token), read again at every reconnect, so not - "
                        "or /dev/fd/N as the one-shot commands take")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    server = create_server()
    given = (("model", args.model), ("device", args.device), ("dtype", args.dtype),
             ("engine", args.engine), ("engineTokenFile", args.token_file))
    cli = {key: value for key, value in given if value}
    if cli:
        server.settings, errors = parse_settings(cli)
        if errors:
            raise SystemExit("dg-lsp: " + "; ".join(errors))
    if args.tcp and args.stdio:
        raise SystemExit("dg-lsp: --tcp and --stdio exclude each other")
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not host or not port.isdigit():
            raise SystemExit(f"dg-lsp: --tcp expects HOST:PORT, got {args.tcp!r}")
        server.start_tcp(host, int(port))
    else:
        server.start_io()
    return 0
