"""The language server's workspace index (dg_lsp.lsp.repository): none until it is built (a
completion meanwhile has no repository context), then kept current from the documents' edits,
closes and the client's file events."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from dg_lsp.lsp.completion import completion_request
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted


def test_the_server_indexes_its_folder_and_follows_the_documents(tmp_path):
    (tmp_path / "pkg").mkdir()
    config, main = tmp_path / "pkg" / "config.py", tmp_path / "pkg" / "main.py"
    config.write_text("def load_config(path):\n    return {}\n")
    main.write_text("settings = load_config(")
    server = create_server(Scripted())
    server.repositories.roots_from(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=tmp_path.as_uri()))
    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        main.as_uri(), "python", 1, main.read_text())))
    at = types.Position(0, 23)
    assert completion_request(server, main.as_uri(), at).repository is None  # not built yet

    asyncio.run(server.repositories.build(server))
    repository = completion_request(server, main.as_uri(), at).repository
    index = repository.index
    assert repository.path == "pkg/main.py"
    assert sorted(index.files()) == ["pkg/config.py", "pkg/main.py"]

    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        config.as_uri(), "python", 1, config.read_text())))
    server.did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=2, uri=config.as_uri()),
        [types.TextDocumentContentChangeWholeDocument("def read_config(path):\n    pass\n")]))
    assert index.get("pkg/config.py").text == "def read_config(path):\n    pass\n"
    server.did_close(types.DidCloseTextDocumentParams(
        types.TextDocumentIdentifier(config.as_uri())))  # unsaved: the disk's text counts
    assert index.definers("load_config") == ["pkg/config.py"]

    config.unlink()
    server.repositories.files_changed(
        [types.FileEvent(config.as_uri(), types.FileChangeType.Deleted)], set())
    assert index.files() == ["pkg/main.py"]
