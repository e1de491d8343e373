"""`textDocument/copilotInlineEdit`: next-edit suggestions (dg_lsp.next_edit.suggest) over LSP.

The method Copilot's language server defined and clients already speak (Neovim's copilot-lsp,
dg-lsp's own plugins):

- request `{textDocument: {uri, version}, position}`; answer `{edits: [...]}`, each edit
  `{text, textDocument: {uri, version}, range, command}` (alternatives, not a sequence; an
  empty list when there is nothing to suggest);
- notification `textDocument/didShowInlineEdit {item: {command}}` when the client shows one;
- the edit's `command` (ACCEPTED_COMMAND) is run by the client when the user accepts it.

A request for a version the server no longer has is refused with ContentModified (no popup:
nobody asked for a suggestion by hand); a newer request for the same document cancels the
older one; a document changed or reopened while the answer was computed gets an empty one
(whatever its version); any failure is an empty answer, logged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcInvalidParams

from dg_lsp.actions.targets import ParsedText
from dg_lsp.lsp.actions import StepsOnWorker
from dg_lsp.lsp.documents import short_path
from dg_lsp.next_edit.suggest import MAX_DOCUMENT_CHARS, suggest
from dg_lsp.positions import offset_at, position_at
from dg_lsp.syntax.languages import language_for
from engine.serve.client import EngineUnavailable

if TYPE_CHECKING:
    from dg_lsp.lsp.state import ServerState

log = logging.getLogger(__name__)

METHOD = "textDocument/copilotInlineEdit"
SHOWN = "textDocument/didShowInlineEdit"
ACCEPTED_COMMAND = "dg-lsp.inlineEditAccepted"
# What initialize advertises under `experimental`.
CAPABILITY = {"copilotInlineEdit": True}


def _field(obj: Any, name: str) -> Any:
    """A field of params pygls passes as an object or a dict (a method LSP does not define)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


async def inline_edit(server: ServerState, params: Any) -> dict[str, list]:
    """The answer to METHOD."""
    document = _field(params, "textDocument")
    position = _field(params, "position")
    uri = _field(document, "uri")
    version = _field(document, "version")
    line, character = _field(position, "line"), _field(position, "character")
    if not isinstance(uri, str) or not all(isinstance(v, int) and not isinstance(v, bool)
                                           for v in (line, character)):
        raise JsonRpcInvalidParams(f"{METHOD} needs textDocument.uri and position")
    doc = server.documents.get(uri)
    if doc is None:
        server.log(f"next edit for a document that is not open: {uri}")
        return {"edits": []}
    if version is not None and version != doc.version:
        raise JsonRpcContentModified(f"{short_path(uri)} is at version {doc.version}, "
                                     f"not {version}")
    if (not server.settings.enabled(doc.language_id or "") or not doc.is_valid_text
            or doc.history.last is None):
        return {"edits": []}
    if len(doc.text) > MAX_DOCUMENT_CHARS or "\x00" in doc.text:
        # suggest() answers nothing here: checked before the tree is built, which would parse
        # the whole file on the event loop (tree-sitter holds the GIL) and keep it.
        return {"edits": []}
    encoding = server.position_encoding
    cursor = offset_at(doc.text, types.Position(line, character), encoding)
    if cursor is None:
        server.log(f"position {line}:{character} is outside {uri}")
        return {"edits": []}
    key = f"next-edit {uri}"
    previous = server.inflight.get(key)
    if previous is not None and not previous.done():
        previous.cancel()
    task = asyncio.current_task()
    server.inflight[key] = task
    stop = threading.Event()
    backend = None
    # The answer is for this text only: its range is computed on it.
    text, seen_version, revision = doc.text, doc.version, doc.revision
    try:
        if server.settings.debounce_ms:
            await asyncio.sleep(server.settings.debounce_ms / 1000)
        backend = await server.engine.backend()
        if backend is None:
            return {"edits": []}
        # While this waited the user may have typed, undone the last edit (then the history
        # has none) or reopened the document (at the same version, even): a changed document
        # has a new revision, and the answer would not fit it.
        if server.documents.at(uri, revision) is None:
            return {"edits": []}
        language = language_for(doc.language_id, uri)
        parsed = ParsedText(text, language, server.trees.tree(uri, text, language), uri)
        stepped = StepsOnWorker(server.engine.counting(backend), server.executor)
        found = await asyncio.get_running_loop().run_in_executor(
            None, suggest, stepped, parsed, doc.history.line_edits(), replace(doc.history.last),
            cursor, server.settings, stop.is_set)
        if found is None or server.documents.at(uri, revision) is None:
            return {"edits": []}  # nothing, or the text changed meanwhile: it may not fit
        server.stats["inlineEditsSuggested"] += 1
        rng = types.Range(position_at(text, found.start, encoding),
                          position_at(text, found.end, encoding))
        return {"edits": [{
            "text": found.text,
            "textDocument": {"uri": uri, "version": seen_version},
            "range": server.protocol._converter.unstructure(rng),
            "command": {"title": "Accept next edit", "command": ACCEPTED_COMMAND,
                        "arguments": [uri, seen_version]},
        }]}
    except EngineUnavailable as exc:
        server.engine.lost(exc, backend)
        return {"edits": []}
    except asyncio.CancelledError:
        stop.set()
        server.stats["cancelled"] += 1
        raise
    except Exception as exc:  # noqa: BLE001 - a failed suggestion must not surface
        log.exception("next edit in %s failed", uri)
        server.log(f"next edit failed: {type(exc).__name__}: {exc}", types.MessageType.Error)
        return {"edits": []}
    finally:
        if server.inflight.get(key) is task:
            del server.inflight[key]


def shown(server: ServerState, params: Any) -> None:
    """SHOWN: the client showed a suggestion."""
    server.stats["inlineEditsShown"] += 1


def accepted(server: ServerState, *args: Any) -> None:
    """ACCEPTED_COMMAND: the user took a suggestion."""
    server.stats["inlineEditsAccepted"] += 1
