"""Bad input over the wire: every request gets an answer, nothing breaks what comes after.

Driven through `dg-lsp serve` on stdio with the raw client of tests/support/lsp_wire.py and a tiny
random checkpoint (its suggestions are junk; what matters here is that answers come).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.lsp_wire import WireServer, dumps, frame

SMALL_HOLES = {"holeSize": {"restOfLine": 4, "brackets": 4, "comment": 4, "block": 4}}
URI = "file:///tmp/robust.py"


@pytest.fixture(scope="module")
def server(dream_ckpt: Path):
    wire = WireServer(dream_ckpt, SMALL_HOLES)
    wire.open(URI, "def f(x):\n    return x\n\ny = f(\n")
    yield wire
    wire.close()


def served(server: WireServer) -> None:
    """A normal request still gets a normal answer."""
    answer = server.inline(URI, 3, 6)
    assert "items" in answer["result"], answer


def inline_params(position) -> dict:
    return {"textDocument": {"uri": URI}, "position": position, "context": {"triggerKind": 1}}


@pytest.mark.parametrize("method, params, names", [
    ("textDocument/inlineCompletion", inline_params({"line": -1, "character": 0}),
     "Position.line should be in range [0:2147483647], but was -1"),
    ("textDocument/inlineCompletion", inline_params({"line": 2**31, "character": 0}),
     "but was 2147483648"),
    ("textDocument/completion", {"textDocument": {"uri": URI},
                                 "position": {"line": 0, "character": -5}},
     "Position.character should be in range"),
    ("textDocument/inlineCompletion", inline_params("7:10"), "position"),
    ("textDocument/inlineCompletion", inline_params({"line": None, "character": 1}),
     "position.line"),
    ("textDocument/inlineCompletion", None, "params"),
    ("textDocument/completion", [URI, 1, 2], "params"),
    ("textDocument/codeAction", {"textDocument": {"uri": URI}, "range": None,
                                 "context": {"diagnostics": []}}, "range"),
])
def test_malformed_params_get_invalid_params_naming_the_field(server, method, params, names):
    answer = server.call(method, params, timeout=20)
    error = answer["error"]
    assert error["code"] == -32602
    assert error["message"].startswith(f"dg-lsp: invalid params for {method}: ")
    assert names in error["message"]
    assert "data" not in error or error["data"] is None


@pytest.mark.parametrize("message, expected_id, reason", [
    ({"jsonrpc": "2.0", "id": 41}, 41, "neither a request, a notification nor a response"),
    ({"jsonrpc": "1.0", "id": 42, "method": "textDocument/completion"}, 42,
     'jsonrpc must be "2.0"'),
    ({"jsonrpc": "2.0", "id": 43, "method": 7}, 43, "method must be a string"),
    ({"jsonrpc": "2.0", "id": [1], "method": "shutdown"}, None,
     "id must be a string or an integer"),
    ([1, 2, 3], None, "expected a JSON object, got list"),
])
def test_invalid_messages_get_invalid_request(server, message, expected_id, reason):
    server.send(message)
    answer = server.response(expected_id, timeout=20)
    assert answer["error"] == {"code": -32600, "message": f"dg-lsp: invalid request: {reason}"}


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe\x00garbage",
                                  b"[" * 100_000 + b"]" * 100_000])  # deeper than Python recurses
def test_a_body_that_is_not_json_gets_a_parse_error_and_the_next_request_is_served(server, body):
    server.send_bytes(frame(body))
    error = server.response(None, timeout=20)["error"]
    assert error["code"] == -32700
    assert error["message"].startswith("dg-lsp: message body is not JSON: ")
    served(server)


@pytest.mark.parametrize("header, error", [
    (b"Content-Length: abc\r\n\r\n",
     {"code": -32700, "message": "dg-lsp: bad Content-Length header 'abc'; message skipped"}),
    (b"Content-Length: -5\r\n\r\n",
     {"code": -32700, "message": "dg-lsp: bad Content-Length header '-5'; message skipped"}),
    (b"Content-Length: 1000000000000000\r\n\r\n",
     {"code": -32600, "message": "dg-lsp: message of 1000000000000000 bytes refused "
                                 "(limit 67108864)"}),
    (b"Content-Lengthh 12\r\n\r\n", None),  # not a header at all: skipped as garbage
])
def test_a_bad_content_length_is_answered_and_the_server_resyncs(server, header, error):
    body = dumps({"jsonrpc": "2.0", "id": "lost", "method": "shutdown"}).encode()
    server.send_bytes(header + body)
    if error is not None:
        assert server.response(None, timeout=20)["error"] == error
    served(server)
    assert server.proc.poll() is None


def test_a_content_length_longer_than_the_body_costs_one_message_not_the_stream(server):
    body = dumps({"jsonrpc": "2.0", "id": "short", "method": "shutdown"}).encode()
    server.send_bytes(b"Content-Length: %d\r\n\r\n" % (len(body) + 30) + body)
    # the next message's start is swallowed by the first; the one after is served whole
    server.send(inline_params({"line": 0, "character": 0}) | {"jsonrpc": "2.0"})
    assert server.response(None, timeout=20)["error"]["code"] == -32700
    served(server)


def test_errors_carry_a_message_and_no_traceback(server):
    answer = server.call("codeAction/resolve", {"title": "x", "data": {"uri": 5}}, timeout=20)
    assert answer["error"]["message"].startswith("dg-lsp: malformed code action data")
    assert "data" not in answer["error"] or answer["error"]["data"] is None
    unknown = server.call("dg-lsp/noSuchMethod", {}, timeout=20)
    assert unknown["error"]["code"] == -32601


def test_a_lone_surrogate_costs_only_its_own_document(server):
    # JSON carries "\ud800"; the other document shares its words, so it would be chosen as
    # a snippet for the other's context (where the tokenizer used to choke on it)
    bad, good = "file:///tmp/bad.py", "file:///tmp/good.py"
    server.open(bad, "def total(values):\n    s = '\ud800'\n    return sum(values)\n")
    server.open(good, "def total(values):\n    return ")
    before = server.call("workspace/executeCommand", {"command": "dg-lsp.stats"})["result"]
    assert server.inline(bad, 1, 4)["result"] == {"items": []}
    actions = server.call("textDocument/codeAction", {
        "textDocument": {"uri": bad}, "context": {"diagnostics": []},
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 2, "character": 0}}})
    assert actions["result"] == []
    for _ in range(2):
        assert "items" in server.inline(good, 1, 11)["result"]
    after = server.call("workspace/executeCommand", {"command": "dg-lsp.stats"})["result"]
    assert after["engineRequests"] == before["engineRequests"] + 2  # only the good one ran
    logged = [n["params"]["message"] for n in server.notifications
              if n["method"] == "window/logMessage"]
    assert any("bad.py holds a lone surrogate" in m for m in logged)
    assert not any("failed" in m for m in logged), logged
    assert "TextInputSequence" not in server.stderr()


def test_tcp_uses_the_same_reader(dream_ckpt: Path):
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", "inproc",
                               "--model", str(dream_ckpt), "--device", "cpu",
                               "--tcp", f"127.0.0.1:{port}"], stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=20)
                break
            except OSError:
                time.sleep(0.05)
        with conn:
            conn.sendall(b"Content-Length: abc\r\n\r\n{}" + b"x" * 100_000 + b"\r\n"
                         + frame(dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                        "params": {"capabilities": {}}}))
                         + frame(b"[1]"))
            received, deadline = b"", time.monotonic() + 20
            while b"got list" not in received and time.monotonic() < deadline:
                received += conn.recv(65536)
        assert b'"message": "dg-lsp: bad Content-Length header' in received
        assert b'"serverInfo": {"name": "dg-lsp"' in received
        assert b'"message": "dg-lsp: invalid request: expected a JSON object, got list"' in received
    finally:
        server.kill()
        server.wait()


def test_an_edit_after_a_form_feed_line_lands_where_the_client_put_it(dream_ckpt: Path):
    # Over the wire, through the protocol's didChange: code action titles name the function
    # the server's copy holds. pygls's copy counted the form feed as a line break.
    wire = WireServer(dream_ckpt, SMALL_HOLES, capabilities={"textDocument": {"codeAction": {
        "resolveSupport": {"properties": ["edit"]}}}})
    try:
        uri = "file:///tmp/area.py"
        wire.open(uri, "import os\n\x0c\ndef area(width, height):\n    ...\n")
        wire.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": 2},
            "contentChanges": [{"range": {"start": {"line": 2, "character": 4},
                                          "end": {"line": 2, "character": 4}},
                                "text": "compute_"}]})
        listed = wire.call("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "context": {"diagnostics": []},
            "range": {"start": {"line": 3, "character": 4}, "end": {"line": 3, "character": 4}}})
        assert [a["title"] for a in listed["result"]] == [
            "Complete function body of compute_area", "Add docstring of compute_area"]
    finally:
        wire.close()


def test_an_unexpected_handler_error_is_answered_with_its_message_only():
    # pygls answers a handler's exception with -32603 and its traceback as `data`
    import json
    from concurrent.futures import Future

    from dg_lsp.lsp.server import create_server

    server, sent = create_server(), []

    class Writer:
        def write(self, data: bytes) -> None:
            sent.append(data)

        def close(self) -> None:
            pass

    server.protocol.set_writer(Writer())
    failed: Future = Future()
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError as exc:  # raised, so that it carries a traceback
        failed.set_exception(exc)
    server.protocol._send_handler_result(failed, msg_id=7)
    answer = json.loads(sent[-1].split(b"\r\n\r\n", 1)[1])
    assert answer == {"jsonrpc": "2.0", "id": 7, "error": {
        "code": -32603, "message": "ZeroDivisionError: division by zero"}}


def test_a_client_that_adds_stdio_to_the_command_is_served(tmp_path):
    """vscode-languageclient's TransportKind.stdio appends --stdio; refusing it left VS Code
    with a server that exited at once."""
    server = WireServer(None, serve_args=("--stdio",))
    try:
        uri = (tmp_path / "a.py").as_uri()
        server.open(uri, "def add(a, b):\n    return \n")
        reply = server.inline(uri, 1, 11)
        stats = server.call("workspace/executeCommand", {"command": "dg-lsp.stats"})["result"]
        assert "error" not in reply and stats["engineRequests"] >= 1  # the model was asked
    finally:
        server.close()
