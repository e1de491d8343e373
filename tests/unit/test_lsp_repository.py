"""The language server's workspace index (dg_lsp.lsp.repository): none until it is built (a
completion meanwhile has no repository context), then kept current from the documents' edits,
closes and the client's file events."""

from __future__ import annotations

import asyncio

from lsprotocol import types

from dg_lsp.completion.pipeline import Pipeline
from dg_lsp.lsp.completion import completion_request
from dg_lsp.lsp.repository import WATCHED
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


def change(server, uri: str, version: int, line: int, start: int, end: int, text: str) -> None:
    server.did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(version=version, uri=uri),
        [types.TextDocumentContentChangePartial(
            types.Range(types.Position(line, start), types.Position(line, end)), text)]))


def test_the_latest_edit_of_another_document_is_read_ahead_of_the_prefix():
    engine = Scripted("x", "x")
    server = create_server(engine)
    server.apply_settings({"extraContext": False})  # the open documents' windows: not here
    geometry, notes, main = ("file:///w/geometry.py", "file:///w/notes.py",
                             "file:///w/main.py")
    for uri, text in ((geometry, "def area(radius):\n    return 0\n"),
                      (notes, "# notes\nwidth = 1\n"),
                      (main, "def report(radius):\n    print(area(radius))\n    total = ")):
        server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri, "python", 1, text)))
    change(server, geometry, 2, 1, 11, 12, "math.pi * radius ** 2")
    change(server, notes, 2, 1, 8, 9, "2")  # shares no name with main.py's lines: not read
    request = completion_request(server, main, types.Position(2, 12))
    Pipeline(engine, server.settings).complete(request)
    prefix, _ = engine.calls[-1]
    assert prefix == ("# Compare this snippet from geometry.py:\n"
                      "#     return math.pi * radius ** 2\n"
                      "def report(radius):\n    print(area(radius))\n    total = ")

    server.apply_settings({"extraContext": False, "repositoryContext": False})
    request = completion_request(server, main, types.Position(2, 12))
    Pipeline(engine, server.settings).complete(request)
    assert engine.calls[-1][0] == "def report(radius):\n    print(area(radius))\n    total = "


def watching_server(root) -> tuple:
    """A server for a client that can register file watchers but never answers the request
    (and the watchers' patterns it was asked for)."""
    server = create_server(Scripted())
    server.repositories.roots_from(types.InitializeParams(
        capabilities=types.ClientCapabilities(), root_uri=root and root.as_uri()))
    server.protocol.client_capabilities = types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(
            did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(
                dynamic_registration=True)))
    asked = []

    async def never_answered(params):
        asked.append(params.registrations[0].register_options.watchers[0].glob_pattern)
        await asyncio.Event().wait()

    server.client_register_capability_async = never_answered
    return server, asked


def test_a_client_that_never_answers_the_file_watcher_does_not_hold_the_index(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    server, asked = watching_server(tmp_path)
    initialized = server.protocol.fm.features[types.INITIALIZED]

    async def start() -> bool:
        handler = asyncio.ensure_future(initialized(types.InitializedParams()))
        await asyncio.sleep(0)  # the handler starts the build, then asks to watch files
        await asyncio.wait_for(server.repositories.task, 10)
        built = server.repositories.indexes[0].ready and not handler.done()
        handler.cancel()
        return built

    assert asyncio.run(start())
    assert asked == [WATCHED]


def test_no_workspace_folder_no_index_and_no_file_watcher():
    server, asked = watching_server(None)
    initialized = server.protocol.fm.features[types.INITIALIZED]
    asyncio.run(initialized(types.InitializedParams()))
    assert (server.repositories.indexes, server.repositories.task, asked) == ([], None, [])
