"""Answers tied to the text they were computed on, not to the version alone (issue #52).

A client may reopen a document, or change it, at the same version while a request is in
flight: an answer computed on the old text must not come back labelled with that version,
its range on other text. In process, with a scripted engine held mid-request while the test
replaces the document; also the next edit's size check and an undo during its debounce.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import pytest
from lsprotocol import types
from pygls.exceptions import JsonRpcContentModified, JsonRpcException

from dg_lsp.actions.targets import REWRITE
from dg_lsp.document.accept import MAX_DOCUMENT_CHARS
from dg_lsp.lsp.actions import code_actions, resolve_action, rewrite
from dg_lsp.lsp.completion import complete
from dg_lsp.lsp.messages import InlineEditParams
from dg_lsp.lsp.next_edit import inline_edit
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted

URI = "file:///tmp/prices.py"
SOURCE = ("def total_price(items):\n"
          "    count = 0\n"
          "    for item in items:\n"
          "        count += item.price\n"
          "    return count\n")
ON_TOP = "import os\nimport sys\n"


class Held(Scripted):
    """Writes its texts only once the test lets it: until then the request is in flight."""

    def __init__(self, *texts: str) -> None:
        super().__init__(*texts)
        self.started, self.release = threading.Event(), threading.Event()

    def _drafts(self):
        self.started.set()
        assert self.release.wait(10)
        yield from super()._drafts()


def serve(backend: Scripted) -> tuple:
    """An in-process server on `backend`; what it logs and shows the user."""
    server = create_server(backend)
    logged: list[tuple[types.MessageType, str]] = []
    shown: list[str] = []
    server.log = lambda message, kind=types.MessageType.Log: logged.append((kind, message))
    server.window_show_message = lambda params: shown.append(params.message)
    return server, logged, shown


def open_at(server, text: str, version: int = 1) -> None:
    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=URI, language_id="python", version=version, text=text)))


def change(server, version: int, line: int, start: int, end: int, text: str) -> None:
    server.did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=URI, version=version),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(line, start), types.Position(line, end)),
            text=text)]))


def rename(server, text: str = SOURCE) -> int:
    """Open `text` and rename its first `count` to `total` keystroke by keystroke (as
    tests/unit/test_next_edit.py's clients do); the version it ends at."""
    open_at(server, text)
    line = text[:text.index("count")].count("\n")
    column = text.split("\n")[line].index("count")
    for i, piece in enumerate("total"):
        start = column + i
        change(server, 2 + i, line, start, column + 5 if i == 0 else start, piece)
    return 6


def next_edit_params(version: int) -> InlineEditParams:
    return InlineEditParams(types.OptionalVersionedTextDocumentIdentifier(URI, version),
                            types.Position(1, 9))


def replace_document(server, how: str, version: int) -> None:
    """The client's text becomes ON_TOP + the current text, at the same `version`."""
    text = ON_TOP + server.documents.get(URI).text
    if how == "close and open":
        server.did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(URI)))
        open_at(server, text, version)
    elif how == "open again":
        open_at(server, text, version)
    elif how == "change at the same version":
        server.did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=URI, version=version),
            [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(0, 0), types.Position(0, 0)), text=ON_TOP)]))


async def while_held(backend: Held, request, meanwhile) -> object:
    """Run `request` until the engine holds it, call `meanwhile`, then let it finish."""
    task = asyncio.ensure_future(request)
    assert await asyncio.to_thread(backend.started.wait, 10)
    meanwhile()
    backend.release.set()
    return await task


REPLACED = ["close and open", "open again", "change at the same version"]


@pytest.mark.parametrize("how", [None, *REPLACED])
def test_a_next_edit_for_a_document_replaced_in_flight_is_empty_never_the_old_range(how):
    backend = Held(" total\n")
    server, logged, _ = serve(backend)
    version = rename(server)
    answer = asyncio.run(while_held(
        backend, inline_edit(server, next_edit_params(version)),
        lambda: how and replace_document(server, how, version)))
    if how is None:  # the same document: the suggestion, on the line below the rename's
        (edit,) = answer.edits
        assert (edit.text, edit.text_document, edit.range) == (
            "total", types.OptionalVersionedTextDocumentIdentifier(URI, 6),
            types.Range(types.Position(3, 8), types.Position(3, 13)))
    else:  # 5 of 5 answered that range, which in the new text covers `l = 0`
        assert answer.edits == []
    assert logged == []


def test_a_next_edit_in_a_document_too_large_answers_empty_without_parsing_it():
    backend = Scripted(" total\n")
    server, logged, _ = serve(backend)
    function = "def f(x):\n    return x\n\n"
    filler = function * (MAX_DOCUMENT_CHARS // len(function) + 1)  # over the edits' bound
    version = rename(server, SOURCE + filler)
    answer = asyncio.run(inline_edit(server, next_edit_params(version)))
    assert answer.edits == []
    assert server.trees.full_parses == 0 and server.trees.text(URI) == SOURCE.replace(
        "count", "total", 1) + filler  # the kept text only: no tree was built
    assert server.trees._entries[URI].tree is None
    assert backend.requests == [] and logged == []


def test_a_rewrite_in_a_document_too_large_is_refused_with_the_bound_and_sends_nothing():
    backend = Scripted("return a + b")
    server, _, shown = serve(backend)
    function = "def f(a, b):\n    return a\n\n"
    text = function * (MAX_DOCUMENT_CHARS // len(function) + 1)
    open_at(server, text, 3)
    selection = types.Range(types.Position(1, 4), types.Position(1, 12))
    with pytest.raises(JsonRpcException):
        asyncio.run(rewrite(server, URI, 3, selection))
    assert shown == [f"dg-lsp: no edit is offered in prices.py: it is too large ({len(text)} "
                     f"characters, at most {MAX_DOCUMENT_CHARS})"]
    assert backend.requests == []


def test_an_undo_during_the_debounce_answers_empty_quietly():
    backend = Scripted(" total\n")
    server, logged, shown = serve(backend)
    server.settings = replace(server.settings, debounce_ms=1)
    version = rename(server)

    async def scenario():
        task = asyncio.ensure_future(inline_edit(server, next_edit_params(version)))
        await asyncio.sleep(0)  # the request waits out its debounce
        change(server, version + 1, 1, 4, 9, "count")  # the rename undone: no last edit
        assert server.documents.get(URI).history.last is None
        return await task

    assert asyncio.run(scenario()).edits == []
    # base logged "next edit failed: TypeError: replace() should be called on dataclass
    # instances" to the editor as an error
    assert logged == [] and shown == []
    assert backend.requests == []


@pytest.mark.parametrize("how", [None, *REPLACED])
def test_a_completion_for_a_document_replaced_in_flight_is_empty(how):
    backend = Held("0")
    server, logged, _ = serve(backend)
    open_at(server, "count = \n", 6)
    found = asyncio.run(while_held(
        backend, complete(server, URI, types.Position(0, 8)),
        lambda: how and replace_document(server, how, 6)))
    if how is None:
        completion, replaced = found
        assert (completion.text, replaced) == ("0", types.Range(types.Position(0, 8),
                                                                types.Position(0, 8)))
    else:
        assert found is None
    assert logged == []


@pytest.mark.parametrize("when", [None, "before resolve", "while the model runs"])
def test_a_code_action_for_a_document_replaced_at_the_same_version_changes_nothing(when):
    backend = Held("return a + b")
    server, _, shown = serve(backend)
    open_at(server, "def f(a, b):\n    return a\n", 6)
    listed = asyncio.run(code_actions(server, types.CodeActionParams(
        types.TextDocumentIdentifier(URI), types.Range(types.Position(1, 4),
                                                       types.Position(1, 12)),
        types.CodeActionContext(diagnostics=[]))))
    (action,) = [a for a in listed if a.data and a.data["action"] == REWRITE]
    if when is None:  # the same document: the edit, on the selection
        backend.release.set()
        (change,) = asyncio.run(resolve_action(server, action)).edit.document_changes
        assert (change.text_document.version, change.edits) == (6, [types.TextEdit(
            types.Range(types.Position(1, 4), types.Position(1, 12)), "return a + b")])
        assert shown == []
        return
    if when == "before resolve":
        replace_document(server, "open again", 6)
        backend.release.set()  # on base the model rewrote that range in the new text
        request = resolve_action(server, action)
    else:  # on base the edit came back for version 6: on `import sys` in the new text
        request = while_held(backend, resolve_action(server, action),
                             lambda: replace_document(server, "open again", 6))
    with pytest.raises(JsonRpcContentModified):
        asyncio.run(request)
    assert shown == ["dg-lsp: prices.py changed (reopened or edited at version 6) while the "
                     "edit was computed; nothing was changed"]
    assert len(backend.requests) == (when != "before resolve")
