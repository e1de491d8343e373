"""The language server: LSP over stdio or TCP, completions from the diffusion engine.

Both `textDocument/inlineCompletion` (ghost text) and `textDocument/completion` (one menu item
with a TextEdit, for Helix and older clients) run the same `Pipeline`. Handlers are `async`:
each denoising step runs on the engine's single worker thread and is awaited, so
`$/cancelRequest`, or a newer request for the same document, stops a completion at the next
step boundary.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.workspace import TextDocument

from dg_lsp import __version__
from dg_lsp.actions import FIX_SYNTAX, REWRITE, Document, Target, targets_at
from dg_lsp.cache import CompletionCache
from dg_lsp.context import OtherDocument
from dg_lsp.languages import language_for
from dg_lsp.pipeline import Completion, CompletionRequest, Pipeline
from dg_lsp.rewrite import Edit, RewriteError, compute_edit
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.trees import DocumentTrees
from engine.backend import Backend as CompletionBackend  # Backend, at the merge
from engine.serve.client import EngineUnavailable

STATS_COMMAND = "dg-lsp.stats"
# workspace/executeCommand arguments: [{"textDocument": {"uri", "version"}, "range",
# "instruction"?, "strength"?}]; applies the rewrite with workspace/applyEdit and returns the
# WorkspaceEdit. The "Rewrite selection with instruction…" code action carries this command
# without an instruction: editors prompt for one (clients that cannot just rewrite).
REWRITE_COMMAND = "dg-lsp.rewriteWithInstruction"
ACTION_KINDS = {FIX_SYNTAX: types.CodeActionKind.QuickFix}  # the others: refactor.rewrite
REQUEST_FAILED = -32803  # LSP's RequestFailed: the request was valid, the edit is refused
# Server → client notification {"state": "loading" | "ready" | "unavailable", "message": str}
# for status bars; sent whenever the engine's state changes.
ENGINE_STATE_NOTIFICATION = "dg-lsp/engineState"
MAX_OTHER_DOCUMENTS = 20
# Typing these asks for a completion even in clients that only complete identifiers.
TRIGGER_CHARACTERS = [".", "(", "[", "{", ",", " ", ":", "=", ">"]


# Our choice among the encodings a client offers; UTF-16 when it offers none of them.
PREFERRED_ENCODINGS = [types.PositionEncodingKind.Utf8, types.PositionEncodingKind.Utf16]


class DgProtocol(LanguageServerProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        # pygls takes the client's first supported encoding; we want UTF-8 whenever offered.
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            offered = set(general.position_encodings)
            general.position_encodings = [e for e in PREFERRED_ENCODINGS if e in offered] or None
        return (yield from super().lsp_initialize(params))


class DgLanguageServer(LanguageServer):
    def __init__(self, backend: CompletionBackend | None = None) -> None:
        super().__init__("dg-lsp", __version__, protocol_cls=DgProtocol)
        self.settings = Settings()
        self.cache = CompletionCache()
        self.trees = DocumentTrees()
        # The engine is not thread-safe: one worker runs every load and denoising step.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dg-engine")
        self._backend = backend
        self._injected = backend is not None
        self._loading: asyncio.Task | None = None
        self._lost_reported = False
        self._inflight: dict[str, asyncio.Task] = {}
        self.stats = {"engineRequests": 0, "denoiseSteps": 0, "cacheHits": 0, "cancelled": 0}

    # -- settings -------------------------------------------------------------------------

    def apply_settings(self, raw: Any) -> None:
        settings, errors = parse_settings(raw, self.settings)
        if errors:
            self.window_show_message(types.ShowMessageParams(
                types.MessageType.Warning,
                "dg-lsp: invalid settings, using defaults for: " + "; ".join(errors)))
        old = (self.settings.model, self.settings.device, self.settings.engine)
        if (settings.model, settings.device, settings.engine) != old:
            if not self._injected:
                self._backend, self._loading = None, None
        self.settings = settings
        self.cache.clear()

    # -- engine ---------------------------------------------------------------------------

    async def backend(self) -> CompletionBackend | None:
        """The engine, loaded on first use; None while it cannot be loaded."""
        if self._backend is not None:
            return self._backend
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._loading)

    async def _load(self) -> CompletionBackend | None:
        token = str(uuid.uuid4())
        progress = self._client_has_progress()
        what = self.settings.model or "bundled model"
        self.engine_state("loading", f"loading {what}")
        if progress:
            await self.work_done_progress.create_async(token)
            self.work_done_progress.begin(token, types.WorkDoneProgressBegin(
                title="dg-lsp", message=f"loading {what}"))
        try:
            loop = asyncio.get_running_loop()
            backend = await loop.run_in_executor(self.executor, self._open_backend)
        except Exception as exc:  # a missing or broken checkpoint must not kill the server
            self.log(f"model failed to load: {exc}", types.MessageType.Error)
            self.window_show_message(types.ShowMessageParams(
                types.MessageType.Error, f"dg-lsp: cannot load the model: {exc}"))
            self.engine_state("unavailable", f"cannot load the model: {exc}")
            self._loading = None
            return None
        finally:
            if progress:
                self.work_done_progress.end(token, types.WorkDoneProgressEnd(message="ready"))
        self._backend = backend
        self._lost_reported = False
        info = getattr(backend, "info", None)  # a resident engine's hello
        where = info.get("device", "?") if info is not None else backend.device
        self.log(f"model loaded: {what} on {where} ({self.settings.engine} engine)")
        self.engine_state("ready", f"{what} on {where}")
        return backend

    def _open_backend(self) -> CompletionBackend:
        model, device = self.settings.model, self.settings.device
        if self.settings.engine == "inproc":
            from engine import Engine

            return Engine.load(model, device)
        from engine.serve.client import EngineClient

        return EngineClient.connect_or_start(model, device)

    def engine_lost(self, exc: Exception) -> None:
        """The resident engine died or refused: drop it, start it again, tell the user once."""
        if self._injected:
            return
        self.log(f"engine unavailable: {exc}", types.MessageType.Warning)
        self._backend, self._loading = None, None
        if not self._lost_reported:
            self._lost_reported = True
            self.window_show_message(types.ShowMessageParams(
                types.MessageType.Warning, "dg-lsp: the engine stopped; restarting it"))
        self.engine_state("unavailable", f"engine stopped: {exc}")
        asyncio.ensure_future(self.backend())

    def engine_state(self, state: str, message: str) -> None:
        self.protocol.notify(ENGINE_STATE_NOTIFICATION, {"state": state, "message": message})

    def _client_has_progress(self) -> bool:
        caps = self.client_capabilities
        return bool(caps and caps.window and caps.window.work_done_progress)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(kind, message))

    # -- completion -----------------------------------------------------------------------

    async def complete(self, uri: str, position: types.Position) -> Completion | None:
        """The pipeline's completion at an LSP position; None when there is nothing to show."""
        request = self._request(uri, position)
        if request is None:
            return None
        # A newer request for the same document makes the older one pointless.
        previous = self._inflight.get(uri)
        if previous is not None and not previous.done():
            previous.cancel()
        task = asyncio.current_task()
        self._inflight[uri] = task
        try:
            if self.settings.debounce_ms:
                await asyncio.sleep(self.settings.debounce_ms / 1000)
            pipeline = Pipeline(_Counting(self), self.settings, self.cache)
            hit = pipeline.cached(request)
            if hit is not None:
                self.stats["cacheHits"] += 1
                return hit
            if await self.backend() is None:
                return None
            return await pipeline.complete_async(request, self.executor)
        except EngineUnavailable as exc:
            self.engine_lost(exc)
            return None
        except asyncio.CancelledError:
            self.stats["cancelled"] += 1
            raise
        finally:
            if self._inflight.get(uri) is task:
                del self._inflight[uri]

    def _request(self, uri: str, position: types.Position) -> CompletionRequest | None:
        if uri not in self.workspace.text_documents:
            self.log(f"completion for a document that is not open: {uri}")
            return None
        doc = self.workspace.get_text_document(uri)
        if not self.settings.enabled(doc.language_id or ""):
            return None
        offset = offset_at(doc.source, position, self.position_encoding)
        if offset is None:
            self.log(f"position {position.line}:{position.character} is outside {uri}")
            return None
        text = doc.source
        if "\x00" in text[max(0, offset - 4096):offset + 4096]:
            return None  # a binary file: nothing a code model should continue
        language = language_for(doc.language_id, uri)
        others = [OtherDocument(_short_path(other.uri), other.source)
                  for other in list(self.workspace.text_documents.values())[:MAX_OTHER_DOCUMENTS]
                  if other.uri != uri and language_for(other.language_id, other.uri) == language]
        return CompletionRequest(text, offset, language, uri, others)

    @property
    def position_encoding(self) -> types.PositionEncodingKind:
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    def lsp_range(self, uri: str, position: types.Position, completion: Completion) -> types.Range:
        """The replaced range: from the cursor over what the completion re-types on its line."""
        doc = self.workspace.get_text_document(uri)
        line = doc.lines[position.line] if position.line < len(doc.lines) else ""
        col = _char_column(line, position.character, self.position_encoding) or 0
        replaced = line[col:col + completion.end - completion.start]
        end = position.character + _units(replaced, self.position_encoding)
        return types.Range(position, types.Position(position.line, end))


    # -- code actions -----------------------------------------------------------------------

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        """The actions that apply at the range, without running the model (resolve does)."""
        uri = params.text_document.uri
        found = self._targets(uri, params.range)
        if found is None:
            return []
        doc, targets = found
        version = self.workspace.get_text_document(uri).version
        actions = []
        for target in targets:
            data = {"uri": uri, "version": version, "action": target.action,
                    "range": _range_json(params.range)}
            kind = ACTION_KINDS.get(target.action, types.CodeActionKind.RefactorRewrite)
            actions.append(types.CodeAction(title=target.title, kind=kind, data=data))
            if target.action == REWRITE:
                args = {"textDocument": {"uri": uri, "version": version},
                        "range": _range_json(params.range)}
                actions.append(types.CodeAction(
                    title="Rewrite selection with instruction…", kind=kind,
                    command=types.Command("Rewrite selection with instruction…",
                                          REWRITE_COMMAND, arguments=[args])))
        return actions

    def resolves_lazily(self) -> bool:
        """Whether the client resolves a code action's edit (else it gets it eagerly)."""
        caps = self.client_capabilities
        action = caps and caps.text_document and caps.text_document.code_action
        support = action and action.resolve_support
        return bool(support and "edit" in support.properties)

    async def resolve_action(self, action: types.CodeAction) -> types.CodeAction:
        """The action with its WorkspaceEdit; an LSP error (shown to the user) when refused."""
        data = action.data if isinstance(action.data, dict) else {}
        try:
            uri, version = data["uri"], data["version"]
            lsp_range = _range_from_json(data["range"])
            kind = data["action"]
        except (KeyError, TypeError, ValueError) as exc:
            raise JsonRpcException(f"dg-lsp: malformed code action data: {exc}",
                                   REQUEST_FAILED) from exc
        action.edit = await self.rewrite(uri, version, lsp_range, kind)
        return action

    async def rewrite(
        self,
        uri: str,
        version: int | None,
        lsp_range: types.Range,
        action: str = REWRITE,
        instruction: str | None = None,
        strength: float | None = None,
    ) -> types.WorkspaceEdit:
        """Run one action on the document as it is at `version`; its WorkspaceEdit."""
        self._check_version(uri, version)
        found = self._targets(uri, lsp_range)
        if found is None:
            raise self._refuse(f"cannot rewrite {_short_path(uri)}: range or document invalid")
        doc, targets = found
        target = next((t for t in targets if t.action == action), None)
        if target is None:
            raise self._refuse(f"'{action}' does not apply here")
        if await self.backend() is None:
            raise self._refuse("the model is not loaded")
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        try:
            edit = await loop.run_in_executor(
                self.executor, compute_edit, _Counting(self), doc, target, self.settings,
                instruction, strength, stop.is_set)
        except asyncio.CancelledError:
            stop.set()
            raise
        except RewriteError as exc:
            raise self._refuse(str(exc)) from exc
        except EngineUnavailable as exc:
            self.engine_lost(exc)
            raise self._refuse("the engine stopped; try again") from exc
        self._check_version(uri, version)  # the user may have typed while the model ran
        current = self.workspace.get_text_document(uri)
        text_edit = types.TextEdit(self.range_of(current, edit), edit.text)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            types.OptionalVersionedTextDocumentIdentifier(uri, current.version), [text_edit])])

    def _targets(self, uri: str, lsp_range: types.Range) -> tuple[Document, list[Target]] | None:
        if uri not in self.workspace.text_documents:
            return None
        doc = self.workspace.get_text_document(uri)
        enc = self.position_encoding
        start = offset_at(doc.source, lsp_range.start, enc)
        end = offset_at(doc.source, lsp_range.end, enc)
        if start is None or end is None or end < start or "\x00" in doc.source:
            return None
        language = language_for(doc.language_id, uri)
        parsed = Document(doc.source, language, self.trees.tree(uri, doc.source, language))
        return parsed, targets_at(parsed, start, end)

    def _check_version(self, uri: str, version: int | None) -> None:
        if uri not in self.workspace.text_documents:
            raise self._refuse(f"{_short_path(uri)} is not open")
        current = self.workspace.get_text_document(uri).version
        if version is not None and current != version:
            message = (f"dg-lsp: {_short_path(uri)} changed (version {version} → {current}) "
                       "while the edit was computed; nothing was changed")
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
            raise JsonRpcContentModified(message)

    def _refuse(self, reason: str) -> JsonRpcException:
        message = f"dg-lsp: {reason}"
        self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
        return JsonRpcException(message, REQUEST_FAILED)

    def range_of(self, doc: TextDocument, edit: Edit) -> types.Range:
        enc = self.position_encoding
        return types.Range(position_at(doc.source, edit.start, enc),
                           position_at(doc.source, edit.end, enc))


class _Counting:
    """The server's engine, counted: `dg-lsp.stats` reports engine calls and steps."""

    def __init__(self, server: DgLanguageServer) -> None:
        self.server = server

    def infill_stream(self, prefix: str, suffix: str, max_tokens: int = 32, **kwargs: Any):
        self.server.stats["engineRequests"] += 1
        for draft in self.server._backend.infill_stream(prefix, suffix, max_tokens, **kwargs):
            self.server.stats["denoiseSteps"] += 1
            yield draft

    def rewrite_stream(self, prefix: str, suffix: str, original: str, **kwargs: Any):
        self.server.stats["engineRequests"] += 1
        for draft in self.server._backend.rewrite_stream(prefix, suffix, original, **kwargs):
            self.server.stats["denoiseSteps"] += 1
            yield draft


# -- positions --------------------------------------------------------------------------------


def _units(text: str, encoding: str) -> int:
    if encoding == types.PositionEncodingKind.Utf8:
        return len(text.encode("utf-8"))
    if encoding == types.PositionEncodingKind.Utf32:
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def _char_column(line: str, units: int, encoding: str) -> int | None:
    """The character index `units` code units into `line`; None past its end."""
    line = line.rstrip("\r\n")
    count = 0
    for i, ch in enumerate(line):
        if count >= units:
            return i if count == units else None
        count += _units(ch, encoding)
    return len(line) if count == units else None


def offset_at(text: str, position: types.Position, encoding: str) -> int | None:
    """Character offset of an LSP position in `text`, or None when it is outside the text."""
    lines = text.splitlines(True)  # as pygls splits a document
    if position.line < 0 or position.character < 0:
        return None
    if position.line >= len(lines):
        # the empty line after a final newline is still a position in the file
        ends_open = not lines or lines[-1].endswith("\n")
        if position.line == len(lines) and position.character == 0 and ends_open:
            return len(text)
        return None
    col = _char_column(lines[position.line], position.character, encoding)
    if col is None:
        return None
    return sum(len(line) for line in lines[: position.line]) + col


def position_at(text: str, offset: int, encoding: str) -> types.Position:
    """The LSP position of character `offset` of `text`."""
    line_start = text.rfind("\n", 0, offset) + 1
    return types.Position(text.count("\n", 0, offset),
                          _units(text[line_start:offset], encoding))


def _range_json(r: types.Range) -> dict[str, Any]:
    return {"start": {"line": r.start.line, "character": r.start.character},
            "end": {"line": r.end.line, "character": r.end.character}}


def _range_from_json(raw: Any) -> types.Range:
    def position(p: Any) -> types.Position:
        line, character = p["line"], p["character"]
        if not isinstance(line, int) or not isinstance(character, int):
            raise ValueError("positions need integer line and character")
        return types.Position(line, character)

    return types.Range(position(raw["start"]), position(raw["end"]))


def _short_path(uri: str) -> str:
    return Path(unquote(urlparse(uri).path)).name or uri


# -- LSP features -----------------------------------------------------------------------------


def create_server(backend: CompletionBackend | None = None) -> DgLanguageServer:
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

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DgLanguageServer, params: types.DidOpenTextDocumentParams) -> None:
        doc = params.text_document
        if "\x00" not in doc.text:  # binary: nothing to parse
            ls.trees.open(doc.uri, doc.text, language_for(doc.language_id, doc.uri))

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DgLanguageServer, params: types.DidChangeTextDocumentParams) -> None:
        enc = ls.position_encoding
        ls.trees.change(params.text_document.uri, params.content_changes,
                        lambda text, position: offset_at(text, position, enc))

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DgLanguageServer, params: types.DidCloseTextDocumentParams) -> None:
        ls.cache.clear(params.text_document.uri)
        ls.trees.close(params.text_document.uri)

    @server.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())
    async def inline_completion(
        ls: DgLanguageServer, params: types.InlineCompletionParams
    ) -> types.InlineCompletionList | None:
        uri, position = params.text_document.uri, params.position
        completion = await ls.complete(uri, position)
        if completion is None:
            return types.InlineCompletionList(items=[])
        item = types.InlineCompletionItem(
            insert_text=completion.text, range=ls.lsp_range(uri, position, completion))
        return types.InlineCompletionList(items=[item])

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS, resolve_provider=False),
    )
    async def completion(
        ls: DgLanguageServer, params: types.CompletionParams
    ) -> types.CompletionList:
        uri, position = params.text_document.uri, params.position
        result = await ls.complete(uri, position)
        # Incomplete: every keystroke asks again (a cache hit while typing through the text).
        if result is None:
            return types.CompletionList(is_incomplete=True, items=[])
        edit = types.TextEdit(ls.lsp_range(uri, position, result), result.text)
        label = result.text.strip().split("\n", 1)[0]
        item = types.CompletionItem(
            label=label, kind=types.CompletionItemKind.Text, text_edit=edit,
            insert_text_format=types.InsertTextFormat.PlainText,
            detail="dg-lsp", filter_text=result.text, sort_text="0")
        return types.CompletionList(is_incomplete=True, items=[item])

    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION,
        types.CodeActionOptions(
            code_action_kinds=[types.CodeActionKind.RefactorRewrite,
                               types.CodeActionKind.QuickFix],
            resolve_provider=True),
    )
    async def code_action(
        ls: DgLanguageServer, params: types.CodeActionParams
    ) -> list[types.CodeAction]:
        actions = ls.code_actions(params)
        if ls.resolves_lazily():
            return actions
        eager = []  # a client that cannot resolve gets every edit now
        for action in actions:
            if action.data is None:
                eager.append(action)
                continue
            try:
                eager.append(await ls.resolve_action(action))
            except JsonRpcException:
                continue  # refused: the user was told why; the action is not offered
        return eager

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def resolve_code_action(ls: DgLanguageServer, action: types.CodeAction
                                  ) -> types.CodeAction:
        return await ls.resolve_action(action)

    @server.command(REWRITE_COMMAND)
    async def rewrite_with_instruction(ls: DgLanguageServer, *args: Any
                                       ) -> types.WorkspaceEdit | None:
        try:
            raw = args[0] if args and isinstance(args[0], dict) else {}
            uri = raw["textDocument"]["uri"]
            version = raw["textDocument"].get("version")
            lsp_range = _range_from_json(raw["range"])
            instruction = raw.get("instruction")
            strength = raw.get("strength")
            if instruction is not None and not isinstance(instruction, str):
                raise ValueError("instruction must be a string")
            if strength is not None and (isinstance(strength, bool)
                                         or not isinstance(strength, int | float)):
                raise ValueError("strength must be a number")
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            ls.window_show_message(types.ShowMessageParams(
                types.MessageType.Error, f"dg-lsp: {REWRITE_COMMAND}: bad arguments: {exc}"))
            return None
        try:
            edit = await ls.rewrite(uri, version, lsp_range, REWRITE, instruction, strength)
        except JsonRpcException:
            return None  # refused: already shown to the user
        result = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(
            edit, label="dg-lsp: rewrite selection"))
        if not result.applied:
            ls.log(f"the client did not apply the rewrite: {result.failure_reason}")
        return edit

    @server.command(STATS_COMMAND)
    def stats(ls: DgLanguageServer, *args: Any) -> dict[str, int]:
        return {**ls.stats, "fullParses": ls.trees.full_parses,
                "incrementalParses": ls.trees.incremental_parses}

    return server


# -- command line -----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve LSP on stdio (default) or TCP")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    parser.add_argument("--model", help="checkpoint folder or hub id (default: bundled model)")
    parser.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N, mps")
    parser.add_argument("--engine", choices=("resident", "inproc"), default=None,
                        help="share a resident engine process (default) or load the model here")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    server = create_server()
    given = (("model", args.model), ("device", args.device), ("engine", args.engine))
    cli = {key: value for key, value in given if value}
    if cli:
        server.settings, errors = parse_settings(cli)
        if errors:
            raise SystemExit("dg-lsp: " + "; ".join(errors))
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not host or not port.isdigit():
            raise SystemExit(f"dg-lsp: --tcp expects HOST:PORT, got {args.tcp!r}")
        server.start_tcp(host, int(port))
    else:
        server.start_io()
    return 0
