"""The language server in an outage and with clients that do not answer as they should.

- An engine that cannot be reached (a team's URL nobody answers on, a resident engine that
  died and does not come back) is one popup per outage, not one per request: requests get
  empty answers, failures go to the log, and only an engine lost after it came back is told
  again.
- `dg-lsp.rewriteWithInstruction` answers within a bounded time whatever the client answers to
  its workspace/applyEdit: null, an error, or nothing.

Over LSP with pytest-lsp where the client's side is the point; in process (scripted engines,
as tests/unit/test_engine_loss.py) where the test must decide exactly when an engine dies.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid
from pathlib import Path

import pytest
from lsprotocol import types
from pytest_lsp import ClientServerConfig

from dg_lsp.lsp import engine_host
from dg_lsp.lsp.completion import complete
from dg_lsp.lsp.server import REWRITE_COMMAND, STATS_COMMAND, create_server
from engine.serve.socket.client import EngineUnavailable
from tests.support.lsp_client import capabilities
from tests.support.scripted import Scripted

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "engine" / "bundled" / "default"
TEXT = "def f(a, b):\n    return \n"


def open_doc(client, text: str = TEXT) -> str:
    uri = f"file:///tmp/{uuid.uuid4().hex}.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


async def completion(client, uri: str) -> types.CompletionList:
    return await client.text_document_completion_async(types.CompletionParams(
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(1, 11)))


# -- a team engine nobody answers on ----------------------------------------------------------


@pytest.fixture
def dead_url():
    """An http URL on loopback that refuses connections: a port bound, never listened on (so
    no other process can take it while the test runs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("a-team-token-for-the-test\n")
    os.chmod(path, 0o600)
    return path


@pytest.mark.asyncio(loop_scope="function")
async def test_an_unreachable_team_engine_is_one_popup_not_one_per_completion(dead_url,
                                                                             token_file):
    client = await ClientServerConfig(server_command=[
        sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", dead_url,
        "--token-file", str(token_file)]).start()
    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=capabilities("visual_studio_code"), root_uri=None))
        uri = open_doc(client)
        answers = [await completion(client, uri) for _ in range(10)]
        assert [(a.is_incomplete, list(a.items)) for a in answers] == [(True, [])] * 10
        # still serving: a command is answered, and the log says what failed
        assert (await client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=STATS_COMMAND)))["engineRequests"] == 0
        shown = [m.message for m in client.messages]
        assert len(shown) == 1, shown
        assert shown[0].startswith(f"dg-lsp: the engine is unavailable: cannot reach the "
                                   f"engine at {dead_url}")
        failures = [m.message for m in client.log_messages if dead_url in m.message]
        # every failure may be logged; repeats of one are left out for REPEAT_LOG_EVERY s
        assert 1 <= len(failures) <= 10
        assert failures[0].startswith(f"engine unavailable: cannot reach the engine at {dead_url}")
    finally:
        await client.shutdown_session()


def test_a_repeated_failure_is_logged_once_a_minute_with_the_count_left_out():
    now = [0.0]
    log = engine_host.FailureLog(clock=lambda: now[0])
    lines = [log.line("engine unavailable: refused") for _ in range(5)]
    assert lines == ["engine unavailable: refused", None, None, None, None]
    assert log.line("engine unavailable: timed out") == "engine unavailable: timed out"
    now[0] = engine_host.REPEAT_LOG_EVERY - 1
    assert log.line("engine unavailable: timed out") is None
    now[0] = engine_host.REPEAT_LOG_EVERY
    assert log.line("engine unavailable: timed out") == \
        "engine unavailable: timed out (repeated 1 times since last logged)"


# -- a local engine that dies -----------------------------------------------------------------

def dying() -> Scripted:
    """An engine that answers one step, then is gone (as a killed resident engine is)."""
    return Scripted(EngineUnavailable("the engine closed the connection"), resident=True)


def healthy() -> Scripted:
    return Scripted("a + b", resident=True)


def cannot_start():
    raise EngineUnavailable("the engine did not start: address in use")


def test_a_dying_local_engine_is_told_once_per_outage_and_again_after_it_came_back():
    server = create_server()
    opened = iter([dying, cannot_start, cannot_start, dying, healthy])
    server.engine.open = lambda: next(opened)()
    shown: list[str] = []
    server.window_show_message = lambda params: shown.append(params.message)
    logged: list[str] = []
    server.log = lambda message, kind=None: logged.append(message)
    uri = "file:///tmp/dies.py"
    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=TEXT)))
    cursor = types.Position(1, 11)

    async def scenario():
        answers = [await complete(server, uri, cursor)]  # loads, dies: told; restart scheduled
        await asyncio.sleep(0)  # the restart starts
        answers.append(await complete(server, uri, cursor))  # waits for it: it cannot start
        answers.append(await complete(server, uri, cursor))  # another try: cannot start
        told_in_first_outage = list(shown)
        answers.append(await complete(server, uri, cursor))  # loads (back), dies: news again
        await asyncio.sleep(0)
        answers.append(await complete(server, uri, cursor))  # the restart serves
        return answers, told_in_first_outage

    answers, first = asyncio.run(scenario())
    assert answers[:4] == [None] * 4
    assert answers[4][0].text == "a + b"
    assert first == ["dg-lsp: the engine stopped; restarting it"]
    assert shown == ["dg-lsp: the engine stopped; restarting it"] * 2
    assert [m for m in logged if "did not start" in m] == [
        "engine unavailable: the engine did not start: address in use"]  # the repeat left out


# -- rewriteWithInstruction and a client that does not answer applyEdit properly --------------

# The server with a short applyEdit bound, so the test that never answers waits 2 s, not 10.
SHORT_BOUND = ("import sys; import dg_lsp.lsp.actions as a; a.APPLY_EDIT_TIMEOUT = 2.0; "
               "from dg_lsp.cli import main; sys.exit(main())")
# `os` imported: the bundled model's rewrite of the line uses it, and a rewrite naming what the
# file never imports is refused before any edit is sent (dg_lsp.syntax.names).
PY = "import json\nimport os\n\n\ndef load_config(path):\n    with open(path) as f:\n" \
     "        return json.load(f)\n"


@pytest.mark.asyncio(loop_scope="function")
@pytest.mark.parametrize("answer", ["null", "error", "never", "refused"])
async def test_rewrite_with_instruction_returns_whatever_the_client_answers_to_apply_edit(answer):
    if not (BUNDLED / "config.json").exists():
        pytest.skip("the bundled model is not present")
    client = await ClientServerConfig(server_command=[
        sys.executable, "-c", SHORT_BOUND, "serve", "--engine", "inproc",
        "--model", str(BUNDLED), "--device", "cpu"]).start()
    asked: list[types.ApplyWorkspaceEditParams] = []
    never = asyncio.Event()

    @client.feature(types.WORKSPACE_APPLY_EDIT)
    async def apply(params: types.ApplyWorkspaceEditParams):
        asked.append(params)
        if answer == "error":
            raise RuntimeError("the editor failed to apply it")
        if answer == "never":
            await never.wait()  # set only after the command returned
        if answer == "refused":
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="read-only")
        return None

    try:
        await client.initialize_session(types.InitializeParams(
            capabilities=capabilities("visual_studio_code"), root_uri=None))
        uri = open_doc(client, PY)
        start = PY.index("return json.load(f)")
        line = PY.count("\n", 0, start)
        column = start - PY.rfind("\n", 0, start) - 1
        r = {"start": {"line": line, "character": column},
             "end": {"line": line, "character": column + len("return json.load(f)")}}
        # The bound: the rewrite's own time plus APPLY_EDIT_TIMEOUT, with room for a busy CPU.
        result = await asyncio.wait_for(client.workspace_execute_command_async(
            types.ExecuteCommandParams(REWRITE_COMMAND, [{
                "textDocument": {"uri": uri, "version": 1}, "range": r,
                "instruction": "read the file as text"}])), 120)
        never.set()
        assert len(asked) == 1  # the edit was computed and sent
        assert result is None  # not applied as far as the server knows: no edit claimed
        warning = client.messages[-1]
        assert warning.type == types.MessageType.Warning
        assert warning.message.startswith("dg-lsp: the rewrite was not applied: ")
        reason = {"null": "the editor answered workspace/applyEdit with an error: "
                          "dg-lsp: malformed response",
                  "error": "the editor answered workspace/applyEdit with an error",
                  "never": "the editor did not answer workspace/applyEdit in 2 s "
                           "(it may still apply it)",
                  "refused": "the editor refused it: read-only"}[answer]
        assert reason in warning.message
        # still serving
        stats = await asyncio.wait_for(client.workspace_execute_command_async(
            types.ExecuteCommandParams(command=STATS_COMMAND)), 30)
        assert stats["engineRequests"] >= 1
    finally:
        never.set()
        await client.shutdown_session()
