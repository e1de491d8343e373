"""The workspace index in the language server: one dg_lsp.repository index per workspace
folder, built on a thread after `initialized` with work-done progress, kept current from the
documents' changes, saves and the client's file events; and the lines of the latest edits of
the other open documents (`recent_edits`), which a completion reads as snippets too.

Completions never wait for it: until a folder's index is built, a completion in it has no
repository context (`context_for` answers None), as with `repositoryContext` false.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from dg_lsp.context import OtherDocument
from dg_lsp.lsp.documents import OpenDocument, short_path
from dg_lsp.lsp.progress import LoadProgress
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext
from dg_lsp.syntax.languages import LanguageSpec, language_for
from engine.bounds import MAX_RECENT_EDITS, RECENT_EDIT_LINES

log = logging.getLogger(__name__)

WATCHER_ID = "dg-lsp-repository-files"
WATCHED = "**/*.{py,pyi,js,mjs,cjs,jsx,ts,mts,cts,tsx,rs,go}"
REGISTER_TIMEOUT = 5.0  # seconds a client has to accept the file watcher


def recent_edits(documents: Iterable[OpenDocument], uri: str, language: LanguageSpec | None,
                 limit: int = MAX_RECENT_EDITS) -> tuple[OtherDocument, ...]:
    """The lines of the latest edits of the open documents other than `uri` in `language`
    (next-edit's history of each), the most recently changed document's first, at most
    `limit`, each at most RECENT_EDIT_LINES lines of the document's text now."""
    others = sorted((doc for doc in documents
                     if doc.uri != uri and doc.history.edits and doc.is_valid_text
                     and language_for(doc.language_id, doc.uri) == language),
                    key=lambda doc: -doc.revision)
    found: list[OtherDocument] = []
    for doc in others:
        for edit in reversed(doc.history.edits):
            text = doc.text
            start = text.rfind("\n", 0, min(edit.start, len(text))) + 1
            end = text.find("\n", min(edit.end, len(text)))
            lines = text[start:len(text) if end < 0 else end].split("\n")
            edited = "\n".join(lines[:RECENT_EDIT_LINES])
            if edited.strip():
                found.append(OtherDocument(short_path(doc.uri), edited))
            if len(found) >= limit:
                return tuple(found)
    return tuple(found)


def uri_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    return Path(unquote(parsed.path)) if parsed.scheme == "file" else None


class Repositories:
    def __init__(self) -> None:
        self.indexes: list[RepositoryIndex] = []
        self._stop = threading.Event()
        self._started = False
        self.task: asyncio.Task | None = None  # a build started by a settings change

    def roots_from(self, params: types.InitializeParams) -> None:
        """The workspace folders the client named (or its root), each to be indexed."""
        uris = [f.uri for f in params.workspace_folders or []] or [params.root_uri or ""]
        roots = [path for uri in uris if (path := uri_path(uri)) is not None and path.is_dir()]
        self.indexes = [RepositoryIndex(root) for root in dict.fromkeys(roots)]

    def _find(self, uri: str) -> tuple[RepositoryIndex, str] | None:
        """The index holding the file `uri` (the innermost root's), and its path in it."""
        path = uri_path(uri)
        if path is None:
            return None
        found = [(index, rel) for index in self.indexes
                 if (rel := index.relative(path)) is not None]
        return max(found, key=lambda item: len(str(item[0].root)), default=None)

    def context_for(self, uri: str) -> RepositoryContext | None:
        """What a completion in `uri` reads of its folder's index; None before it is built."""
        found = self._find(uri)
        if found is None or not found[0].ready:
            return None
        return RepositoryContext(found[0], found[1])

    async def build(self, server: LanguageServer) -> None:
        """Index every folder on a thread of its own, shown as work-done progress (once)."""
        if self._started:
            return
        self._started = True
        for index in self.indexes:
            progress = LoadProgress(server)
            await progress.begin(f"indexing {index.root.name}")
            try:
                count = await _on_thread(index.build, self._stop.is_set)
            except Exception as exc:  # noqa: BLE001 - completions go on without it
                log.exception("indexing %s failed", index.root)
                progress.end(f"indexing failed: {exc}")
                continue
            progress.end(f"indexed {count} files of {index.root.name}")

    def stop(self) -> None:
        self._stop.set()

    # -- keeping it current -------------------------------------------------------------------

    def changed(self, uri: str, text: str) -> None:
        """An open document's text, as the user types (what it defines is read at save)."""
        found = self._find(uri)
        if found is not None:
            found[0].set_text(found[1], text)

    def saved(self, uri: str, text: str | None) -> None:
        """A document saved, or closed (`text` None: what is on disk counts again)."""
        found = self._find(uri)
        if found is not None:
            found[0].refresh(found[1], text)

    def files_changed(self, events: list[types.FileEvent], open_uris: set[str]) -> None:
        """The client's file events: created and changed files are read again from disk
        (an open document's buffer stays what counts), deleted ones are removed."""
        for event in events:
            found = self._find(event.uri)
            if found is None:
                continue
            index, rel = found
            if event.type == types.FileChangeType.Deleted:
                index.remove(rel)
            elif event.uri not in open_uris:
                index.refresh(rel)


async def _on_thread(work: Callable[..., int], *args: Any) -> int:
    """`work(*args)` on a daemon thread of its own: the server's exit never waits for it."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()

    def run() -> None:
        try:
            result = work(*args)
        except Exception as exc:  # noqa: BLE001 - handed to the awaiting task
            _tell(loop, done.set_exception, exc)
        else:
            _tell(loop, done.set_result, result)

    threading.Thread(target=run, name="dg-lsp-index", daemon=True).start()
    return await done


def _tell(loop: asyncio.AbstractEventLoop, setter: Callable[[Any], None], value: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the server's loop is gone: nobody is waiting
        loop.call_soon_threadsafe(setter, value)


def register(server: LanguageServer, repositories: Repositories) -> None:
    """Build the indexes after `initialized`; keep them current at saves and file events."""

    @server.feature(types.INITIALIZED)
    async def initialized(ls: LanguageServer, params: types.InitializedParams) -> None:
        # Nothing to index (no workspace folder, or repositoryContext false): nothing to ask
        # the client for. The build does not wait for the client's answer to the registration
        # (a client that never answers it must not hold the index back).
        if not (repositories.indexes and ls.settings.repository_context):  # type: ignore[attr-defined]
            return
        repositories.task = asyncio.ensure_future(repositories.build(ls))
        await _watch_files(ls)

    @server.feature(types.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: LanguageServer, params: types.DidSaveTextDocumentParams) -> None:
        doc = ls.documents.get(params.text_document.uri)  # type: ignore[attr-defined]
        repositories.saved(params.text_document.uri, doc.text if doc is not None else None)

    @server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(ls: LanguageServer,
                                 params: types.DidChangeWatchedFilesParams) -> None:
        open_uris = {doc.uri for doc in ls.documents}  # type: ignore[attr-defined]
        repositories.files_changed(params.changes, open_uris)


async def _watch_files(server: LanguageServer) -> None:
    """Ask the client for file events on source files, where it can register them."""
    caps = getattr(server.protocol, "client_capabilities", None)
    watched = caps and caps.workspace and caps.workspace.did_change_watched_files
    if not (watched and watched.dynamic_registration):
        return
    options = types.DidChangeWatchedFilesRegistrationOptions(
        watchers=[types.FileSystemWatcher(glob_pattern=WATCHED)])
    registration = types.RegistrationParams(registrations=[
        types.Registration(WATCHER_ID, types.WORKSPACE_DID_CHANGE_WATCHED_FILES, options)])
    try:
        await asyncio.wait_for(server.client_register_capability_async(registration),
                               REGISTER_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - refused: saves still keep the index current
        log.info("no file events: %s", exc)
