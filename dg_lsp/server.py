"""The language server: LSP over stdio or TCP, completions from the diffusion engine.

Both `textDocument/inlineCompletion` (ghost text) and `textDocument/completion` (one menu item
with a TextEdit, for Helix and older clients) run the same `Pipeline`. Handlers are `async`:
each denoising step runs on the engine's single worker thread and is awaited, so
`$/cancelRequest`, or a newer request for the same document, stops a completion at the next
step boundary.

The server reads messages with dg_lsp.rpc (every request is answered, also a malformed one),
keeps its own copy of each open document (dg_lsp.documents, LSP's line rule) and converts
every position with dg_lsp.positions.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException
from pygls.io_ import StdoutWriter
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method
from pygls.protocol.json_rpc import (
    JsonRPCNotification,
    JsonRPCRequestMessage,
    JsonRPCResponseMessage,
)

from dg_lsp import __version__, rpc
from dg_lsp.actions import FIX_SYNTAX, REWRITE, Document, Target, targets_at
from dg_lsp.cache import CompletionCache
from dg_lsp.context import OtherDocument
from dg_lsp.documents import Documents
from dg_lsp.languages import language_for
from dg_lsp.pipeline import Completion, CompletionRequest, Pipeline, cached_completion
from dg_lsp.positions import line_end, offset_at, position_at, units
from dg_lsp.rewrite import MAX_DOCUMENT_CHARS, RewriteError, compute_edit
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.trees import DocumentTrees
from engine.backend import Backend, CountingBackend, Counts
from engine.serve.client import EngineUnavailable

log = logging.getLogger(__name__)

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
        return (yield from super().lsp_initialize(params))

    # The server keeps its own copy of each document (dg_lsp.documents): pygls's workspace
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
        does not convert: dg_lsp.rpc answers those with the failing field instead."""
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


class DgLanguageServer(LanguageServer):
    def __init__(self, backend: Backend | None = None) -> None:
        super().__init__("dg-lsp", __version__, protocol_cls=DgProtocol)
        self.settings = Settings()
        self.documents = Documents()
        self.cache = CompletionCache()
        self.trees = DocumentTrees()
        # The engine is not thread-safe: one worker runs every load and denoising step.
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dg-engine")
        self._backend = backend
        self._injected = backend is not None
        self._loading: asyncio.Task | None = None
        self._lost_reported = False
        self._inflight: dict[str, asyncio.Task] = {}
        self.stats = {"cacheHits": 0, "cancelled": 0}
        self.engine_counts = Counts()  # every engine's requests and drafts, restarts included

    # -- transport ------------------------------------------------------------------------

    def start_io(self, stdin: Any = None, stdout: Any = None) -> None:
        """Serve on stdio with dg_lsp.rpc's reader (every request answered)."""
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
        old = (self.settings.model, self.settings.device, self.settings.engine)
        if (settings.model, settings.device, settings.engine) != old:
            if not self._injected:
                self._backend, self._loading = None, None
        self.settings = settings
        self.cache.clear()

    # -- engine ---------------------------------------------------------------------------

    async def backend(self) -> Backend | None:
        """The engine, loaded on first use; None while it cannot be loaded."""
        if self._backend is not None:
            return self._backend
        if self._loading is None:
            self._loading = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._loading)

    async def _load(self) -> Backend | None:
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
        where = backend.engine_info.device
        self.log(f"model loaded: {what} on {where} ({self.settings.engine} engine)")
        self.engine_state("ready", f"{what} on {where}")
        return backend

    def _open_backend(self) -> Backend:
        model, device, dtype = self.settings.model, self.settings.device, self.settings.dtype
        if self.settings.engine == "inproc":
            from engine import Engine

            return Engine.load(model, device, dtype)
        from engine.serve.remote import RemoteEngine, is_engine_url

        if is_engine_url(self.settings.engine):  # a team's engine: it loaded its own model
            return RemoteEngine.connect(self.settings.engine, self.settings.engine_token_file)
        from engine.serve.client import EngineClient

        return EngineClient.connect_or_start(model, device, dtype=dtype)

    def engine_lost(self, exc: Exception, backend: Backend | None = None) -> None:
        """The resident engine died or refused: drop it, start it again, tell the user once.

        `backend` is the engine the failed request used; when it is no longer the current
        one, an earlier request already reported it (requests queued on a dying engine fail
        one after another) and a fresh engine must not be dropped for it."""
        if self._injected or (backend is not None and backend is not self._backend):
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
        caps = self._capabilities
        return bool(caps and caps.window and caps.window.work_done_progress)

    @property
    def _capabilities(self) -> types.ClientCapabilities | None:
        # pygls sets them at initialize; a request before it must not fail on their absence
        return getattr(self.protocol, "client_capabilities", None)

    def log(self, message: str, kind: types.MessageType = types.MessageType.Log) -> None:
        self.window_log_message(types.LogMessageParams(kind, message))

    # -- completion -----------------------------------------------------------------------

    async def complete(
        self, uri: str, position: types.Position
    ) -> tuple[Completion, types.Range] | None:
        """The pipeline's completion at an LSP position and the range it replaces; None when
        there is nothing to show (also when the engine failed: ghost text has no error UI)."""
        request = self._request(uri, position)
        if request is None:
            return None
        # A newer request for the same document makes the older one pointless.
        previous = self._inflight.get(uri)
        if previous is not None and not previous.done():
            previous.cancel()
        task = asyncio.current_task()
        self._inflight[uri] = task
        backend = None
        try:
            if self.settings.debounce_ms:
                await asyncio.sleep(self.settings.debounce_ms / 1000)
            completion = cached_completion(self.cache, request)
            if completion is not None:
                self.stats["cacheHits"] += 1
            else:
                # The engine this request runs on, held for its whole life: engine_lost may
                # clear the server's while the request waits for the worker.
                backend = await self.backend()
                if backend is None:
                    return None
                pipeline = Pipeline(CountingBackend(backend, self.engine_counts), self.settings,
                                    self.cache)
                completion = await pipeline.complete_async(request, self.executor)
            if completion is None:
                return None
            return completion, self._replaced_range(request, position, completion)
        except EngineUnavailable as exc:
            self.engine_lost(exc, backend)
            return None
        except asyncio.CancelledError:
            self.stats["cancelled"] += 1
            raise
        except Exception as exc:  # noqa: BLE001 - one failed completion must not surface
            log.exception("completion in %s failed", uri)
            self.log(f"completion failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
            return None
        finally:
            if self._inflight.get(uri) is task:
                del self._inflight[uri]

    def _request(self, uri: str, position: types.Position) -> CompletionRequest | None:
        doc = self.documents.get(uri)
        if doc is None:
            self.log(f"completion for a document that is not open: {uri}")
            return None
        if not self.settings.enabled(doc.language_id or ""):
            return None
        if not doc.is_valid_text:
            self.log(f"{_short_path(uri)} holds a lone surrogate (not valid Unicode): "
                     "no completions until it is removed")
            return None
        offset = offset_at(doc.text, position, self.position_encoding)
        if offset is None:
            self.log(f"position {position.line}:{position.character} is outside {uri}")
            return None
        text = doc.text
        if "\x00" in text[max(0, offset - 4096):offset + 4096]:
            return None  # a binary file: nothing a code model should continue
        language = language_for(doc.language_id, uri)
        others = [OtherDocument(_short_path(other.uri), other.text)
                  for other in list(self.documents)[:MAX_OTHER_DOCUMENTS]
                  if other.uri != uri and other.is_valid_text
                  and language_for(other.language_id, other.uri) == language]
        return CompletionRequest(text, offset, language, uri, others)

    @property
    def position_encoding(self) -> types.PositionEncodingKind:
        try:
            encoding = self.workspace.position_encoding
        except RuntimeError:  # before initialize: no workspace yet
            encoding = None
        return encoding or types.PositionEncodingKind.Utf16

    def _replaced_range(self, request: CompletionRequest, position: types.Position,
                        completion: Completion) -> types.Range:
        """From the cursor over what the completion re-types on the cursor's line."""
        text = request.text
        stop = min(completion.end, line_end(text, completion.start))
        end = position.character + units(text[completion.start:stop], self.position_encoding)
        return types.Range(position, types.Position(position.line, end))

    # -- code actions -----------------------------------------------------------------------

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        """The actions that apply at the range, without running the model (resolve does)."""
        uri = params.text_document.uri
        found = self._targets(uri, params.range)
        if found is None:
            return []
        doc, targets = found
        version = self.documents.get(uri).version
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
        caps = self._capabilities
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
        if len(self.documents.get(uri).text) > MAX_DOCUMENT_CHARS:
            raise self._refuse(f"{_short_path(uri)} is too large to rewrite "
                               f"(over {MAX_DOCUMENT_CHARS} characters)")
        if not self.documents.get(uri).is_valid_text:
            raise self._refuse(f"{_short_path(uri)} holds a lone surrogate (not valid Unicode); "
                               "nothing was changed")
        found = self._targets(uri, lsp_range)
        if found is None:
            raise self._refuse(f"cannot rewrite {_short_path(uri)}: range or document invalid")
        doc, targets = found
        target = next((t for t in targets if t.action == action), None)
        if target is None:
            raise self._refuse(f"'{action}' does not apply here")
        backend = await self.backend()
        if backend is None:
            raise self._refuse("the model is not loaded")
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        try:
            # On a thread of its own, each step on the engine's worker: completions in other
            # documents take their steps between this rewrite's instead of after all of them.
            stepped = _StepsOnWorker(CountingBackend(backend, self.engine_counts), self.executor)
            edit = await loop.run_in_executor(
                None, compute_edit, stepped, doc, target, self.settings, instruction, strength,
                stop.is_set)
        except asyncio.CancelledError:
            stop.set()
            raise
        except RewriteError as exc:
            raise self._refuse(str(exc)) from exc
        except EngineUnavailable as exc:
            self.engine_lost(exc, backend)
            raise self._refuse("the engine stopped; try again") from exc
        self._check_version(uri, version)  # the user may have typed while the model ran
        enc = self.position_encoding
        text_edit = types.TextEdit(types.Range(position_at(doc.text, edit.start, enc),
                                               position_at(doc.text, edit.end, enc)), edit.text)
        current = self.documents.get(uri)
        return types.WorkspaceEdit(document_changes=[types.TextDocumentEdit(
            types.OptionalVersionedTextDocumentIdentifier(uri, current.version), [text_edit])])

    def _targets(self, uri: str, lsp_range: types.Range) -> tuple[Document, list[Target]] | None:
        doc = self.documents.get(uri)
        # Past MAX_DOCUMENT_CHARS every action is refused anyway; listing them would parse the
        # whole file on the event loop (tree-sitter holds the GIL: 3 s for 10 MB).
        if doc is None or not doc.is_valid_text or len(doc.text) > MAX_DOCUMENT_CHARS:
            return None
        enc = self.position_encoding
        # A character past its line's end means the line's end (LSP): a linewise selection
        # ends at Neovim's v:maxcol.
        start = offset_at(doc.text, lsp_range.start, enc, clamp=True)
        end = offset_at(doc.text, lsp_range.end, enc, clamp=True)
        if end < start or "\x00" in doc.text:
            return None
        language = language_for(doc.language_id, uri)
        parsed = Document(doc.text, language, self.trees.tree(uri, doc.text, language))
        return parsed, targets_at(parsed, start, end)

    def _check_version(self, uri: str, version: int | None) -> None:
        if uri not in self.documents:
            raise self._refuse(f"{_short_path(uri)} is not open")
        current = self.documents.get(uri).version
        if version is not None and current != version:
            message = (f"dg-lsp: {_short_path(uri)} changed (version {version} → {current}) "
                       "while the edit was computed; nothing was changed")
            self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
            raise JsonRpcContentModified(message)

    def _refuse(self, reason: str) -> JsonRpcException:
        message = f"dg-lsp: {reason}"
        self.window_show_message(types.ShowMessageParams(types.MessageType.Warning, message))
        return JsonRpcException(message, REQUEST_FAILED)



class _StepsOnWorker:
    """An engine whose every denoising step runs on `executor` (the engine's one worker),
    for work that runs on another thread: the steps of other requests interleave with its."""

    def __init__(self, backend: Any, executor: ThreadPoolExecutor) -> None:
        self.backend, self.executor = backend, executor

    def infill_stream(self, *args: Any, **kwargs: Any):
        return self._steps(self.backend.infill_stream(*args, **kwargs))

    def rewrite_stream(self, *args: Any, **kwargs: Any):
        return self._steps(self.backend.rewrite_stream(*args, **kwargs))

    def _steps(self, drafts: Any):
        try:
            while (draft := self.executor.submit(next, drafts, None).result()) is not None:
                yield draft
        finally:
            self.executor.submit(drafts.close)


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
        if found is None:
            return types.InlineCompletionList(items=[])
        completion, replaced = found
        item = types.InlineCompletionItem(insert_text=completion.text, range=replaced)
        return types.InlineCompletionList(items=[item])

    @server.feature(
        types.TEXT_DOCUMENT_COMPLETION,
        types.CompletionOptions(trigger_characters=TRIGGER_CHARACTERS, resolve_provider=False),
    )
    async def completion(
        ls: DgLanguageServer, params: types.CompletionParams
    ) -> types.CompletionList:
        found = await ls.complete(params.text_document.uri, params.position)
        # Incomplete: every keystroke asks again (a cache hit while typing through the text).
        if found is None:
            return types.CompletionList(is_incomplete=True, items=[])
        result, replaced = found
        edit = types.TextEdit(replaced, result.text)
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
        return {**ls.stats, "engineRequests": ls.engine_counts.requests,
                "denoiseSteps": ls.engine_counts.drafts, "fullParses": ls.trees.full_parses,
                "incrementalParses": ls.trees.incremental_parses}

    return server


# -- command line -----------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve LSP on stdio (default) or TCP")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on TCP instead of stdio")
    parser.add_argument("--model", help="checkpoint folder or hub id (default: bundled model)")
    parser.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N, mps")
    parser.add_argument("--dtype", default=None, help="auto (default), int8, float32, bfloat16, "
                        "float16, float64")
    parser.add_argument("--engine", default=None, metavar="resident|inproc|URL",
                        help="share a resident engine process (default), load the model here, "
                        "or use a team's engine at http(s)://HOST:PORT (dg-engine serve --ray)")
    parser.add_argument("--token-file", default=None,
                        help="the team engine's token (default ~/.config/dg-engine/token)")
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
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not host or not port.isdigit():
            raise SystemExit(f"dg-lsp: --tcp expects HOST:PORT, got {args.tcp!r}")
        server.start_tcp(host, int(port))
    else:
        server.start_io()
    return 0
