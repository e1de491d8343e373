"""The engine dying with requests queued: each gets an empty answer, the next one is served.

In-process (no LSP transport): the server's engine is replaced by scripted ones, so the test
decides exactly when the engine dies.
"""

from __future__ import annotations

import asyncio

from lsprotocol import types

from dg_lsp.lsp.completion import complete
from dg_lsp.lsp.server import create_server
from engine.serve.socket.client import EngineUnavailable
from tests.support.scripted import Scripted


def dying() -> Scripted:
    """An engine that answers one step, then is gone (as a killed resident engine is)."""
    return Scripted(EngineUnavailable("the engine closed the connection"), resident=True)


def healthy() -> Scripted:
    return Scripted("a + b", resident=True)


def test_requests_queued_on_a_dying_engine_get_empty_answers_then_the_restart_serves():
    server = create_server()
    engines = iter([dying(), healthy()])
    server.engine.open = lambda: next(engines)
    logged: list[str] = []
    server.log = lambda message, kind=None: logged.append(message)
    uris = [f"file:///tmp/q{i}.py" for i in range(4)]
    for uri in uris:
        server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text="def f(a, b):\n    return ")))
    cursor = types.Position(1, 11)

    async def scenario():
        queued = await asyncio.gather(*(complete(server, uri, cursor) for uri in uris))
        await asyncio.sleep(0)  # engine_lost scheduled the restart
        after = await complete(server, uris[0], cursor)
        return queued, after

    queued, after = asyncio.run(scenario())
    assert queued == [None] * 4
    # empty because the engine was lost, not because a request read a cleared engine
    assert [m for m in logged if "failed" in m] == []
    assert sum("engine unavailable" in m for m in logged) == 1
    completion, replaced = after
    assert completion.text == "a + b"
    assert replaced == types.Range(cursor, cursor)
