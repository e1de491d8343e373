"""What the request handlers (dg_lsp.lsp.completion, next_edit, actions) read of the language
server: its state, as a protocol. dg_lsp.lsp.server.DgLanguageServer is the one implementation;
the handlers name this instead, so that neither they nor this module import the server, which
imports them (no import circle, type-only imports included)."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor
from typing import Any, Protocol

from lsprotocol import types

from dg_lsp.completion.cache import CompletionCache
from dg_lsp.lsp.documents import Documents
from dg_lsp.lsp.engine_host import EngineHost
from dg_lsp.lsp.trees import DocumentTrees
from dg_lsp.settings import Settings


class ServerState(Protocol):
    settings: Settings
    documents: Documents  # the server's copy of each open document (LSP's line rule)
    trees: DocumentTrees  # each open document's tree-sitter tree
    cache: CompletionCache  # suggestions still valid while the user types into them
    engine: EngineHost
    executor: Executor  # the engine's one worker thread
    inflight: dict[str, asyncio.Task]  # each document's running request
    stats: dict[str, int]  # the counters `dg-lsp.stats` reports
    protocol: Any  # pygls's protocol (its converter, the client's capabilities)

    @property
    def known_capabilities(self) -> types.ClientCapabilities | None: ...

    @property
    def position_encoding(self) -> types.PositionEncodingKind: ...

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None: ...

    def window_show_message(self, params: types.ShowMessageParams) -> None: ...

    def workspace_apply_edit_async(self, params: types.ApplyWorkspaceEditParams) -> Any: ...
