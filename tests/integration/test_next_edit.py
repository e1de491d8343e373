"""Next-edit suggestions over LSP end to end: `dg-lsp serve` with a tiny random checkpoint."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.exceptions import JsonRpcException
from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities

from dg_lsp.lsp.messages import INLINE_EDIT, INLINE_EDIT_ACCEPTED
from dg_lsp.lsp.server import STATS_COMMAND
from tests.support.next_edits import SOURCE


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(dream_ckpt: Path):
    command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", "inproc",
               "--model", str(dream_ckpt), "--device", "cpu"]
    client = await ClientServerConfig(server_command=command).start()
    caps = client_capabilities("neovim")
    client.initialize_result = await client.initialize_session(
        types.InitializeParams(capabilities=caps))
    yield client
    await client.shutdown_session()


def open_and_rename(client: LanguageClient, text: str = SOURCE) -> tuple[str, int]:
    """Open `text`, rename its first `count` to `total` keystroke by keystroke; (uri, version)."""
    uri = f"file:///tmp/{uuid.uuid4().hex}.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    line = text[:text.index("count")].count("\n")
    column = text.split("\n")[line].index("count")
    version = 1
    for i, piece in enumerate("total"):
        start = column + (0 if i == 0 else i)
        end = column + 5 if i == 0 else start
        version += 1
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, start), types.Position(line, end)),
                text=piece)]))
    return uri, version


async def ask(client: LanguageClient, uri: str, version: int | None, line: int, character: int):
    params = {"textDocument": {"uri": uri, "version": version},
              "position": {"line": line, "character": character}}
    return await client.protocol.send_request_async(INLINE_EDIT, params)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_method_is_advertised_and_answers_with_copilots_shape(server):
    assert server.initialize_result.capabilities.experimental == {"copilotInlineEdit": True,
                                                                  "fillHoles": True}
    uri, version = open_and_rename(server)
    result = await ask(server, uri, version, 1, 9)
    edits = result.edits if hasattr(result, "edits") else result["edits"]
    for edit in edits:  # a random model: maybe nothing, but never out of place
        assert edit.textDocument.uri == uri and edit.textDocument.version == version
        assert edit.command.command == INLINE_EDIT_ACCEPTED
        assert (edit.range.start.line, edit.range.end.line) in ((3, 3), (4, 4))
    server.protocol.notify("textDocument/didShowInlineEdit", {"item": {"command": None}})
    await server.workspace_execute_command_async(types.ExecuteCommandParams(
        command=INLINE_EDIT_ACCEPTED, arguments=[uri, version]))
    stats = await server.workspace_execute_command_async(
        types.ExecuteCommandParams(command=STATS_COMMAND))
    assert (stats["inlineEditsShown"], stats["inlineEditsAccepted"]) == (1, 1)


@pytest.mark.asyncio(loop_scope="module")
async def test_bad_requests_get_an_error_or_an_empty_answer_and_the_server_keeps_serving(
        server):
    uri, version = open_and_rename(server)
    with pytest.raises(JsonRpcException, match="is at version 6, not 2"):
        await ask(server, uri, 2, 1, 9)
    with pytest.raises(JsonRpcException, match="invalid params for textDocument/copilotInlineEdit"):
        await server.protocol.send_request_async(INLINE_EDIT, {"position": {"line": 0}})
    empty = []
    for params in (("file:///tmp/never-opened.py", None, 0, 0), (uri, version, 4000, 0)):
        result = await ask(server, *params)
        empty.append(list(result.edits if hasattr(result, "edits") else result["edits"]))
    binary = f"file:///tmp/{uuid.uuid4().hex}.py"
    server.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=binary, language_id="python", version=1, text="count = 1\x00\ncount\n")))
    server.text_document_did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=binary, version=2),
        [types.TextDocumentContentChangePartial(
            range=types.Range(types.Position(0, 0), types.Position(0, 5)), text="total")]))
    result = await ask(server, binary, 2, 0, 5)
    empty.append(list(result.edits if hasattr(result, "edits") else result["edits"]))
    server.text_document_did_close(types.DidCloseTextDocumentParams(
        types.TextDocumentIdentifier(uri)))
    result = await ask(server, uri, None, 1, 9)
    empty.append(list(result.edits if hasattr(result, "edits") else result["edits"]))
    assert empty == [[], [], [], []]
