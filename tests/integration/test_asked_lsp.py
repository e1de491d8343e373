"""Over LSP: an inline request the user made (triggerKind Invoked) gets what the model wrote
below the confidence gate; one made while typing (Automatic) does not; after each the client
is told what was decided (`dg-lsp/suggestion`), so an editor can say why nothing shows.

The server's engine writes given texts with given scores (tests/support/scripted.py); the
shipped calibrator puts "x + 1" with every confidence 0.05 far under 0.3 and with 0.9 far
over it."""

from __future__ import annotations

import json

import pytest

from tests.support.lsp_wire import WireServer

SOURCE = "def f(x):\n    return \n"
SCORED_SERVER = """
import json, sys
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted
create_server(Scripted(*[tuple(w) for w in json.loads(sys.argv[1])])).start_io()
"""


@pytest.fixture
def wire():
    written = [("x + 1", 0.05), ("x + 2", 0.05), ("x + 3", 0.9), ("", 0.9)]
    server = WireServer(None, options={"minConfidence": 0.3},
                        python_args=("-c", SCORED_SERVER, json.dumps(written)))
    yield server
    server.close()


def answer(wire: WireServer, uri: str, asked: bool, text: str = SOURCE) -> tuple[list, dict]:
    """The inline items' texts, and the `dg-lsp/suggestion` notification sent with them."""
    wire.open(uri, text)
    result = wire.inline(uri, 1, 11, asked=asked)["result"]
    told = [n for n in wire.notifications if n["method"] == "dg-lsp/suggestion"]
    return [item["insertText"] for item in result["items"]], told[-1]["params"]


def test_hidden_while_typing_shown_when_asked_and_the_client_told_each_time(wire):
    items, told = answer(wire, "file:///tmp/a.py", asked=False)
    assert items == []
    assert {k: v for k, v in told.items() if k != "confidence"} == {
        "uri": "file:///tmp/a.py", "position": {"line": 1, "character": 11}, "asked": False,
        "shown": False, "belowGate": False, "reason": f"unsure ({told['confidence']:.2f})"}
    assert 0 < told["confidence"] < 0.3

    items, told = answer(wire, "file:///tmp/b.py", asked=True)
    assert items == ["x + 2"]
    assert (told["asked"], told["shown"], told["belowGate"], told["reason"]) == (
        True, True, True, "")
    assert 0 < told["confidence"] < 0.3

    items, told = answer(wire, "file:///tmp/c.py", asked=False)
    assert items == ["x + 3"]
    assert (told["shown"], told["belowGate"], told["reason"]) == (True, False, "")
    assert told["confidence"] > 0.3

    items, told = answer(wire, "file:///tmp/d.py", asked=True)
    assert items == []
    assert (told["shown"], told["reason"], told["confidence"]) == (False, "nothing usable", None)


def test_a_list_completion_stays_gated_and_tells_nothing(wire):
    wire.open("file:///tmp/l.py", SOURCE)
    result = wire.call("textDocument/completion", {
        "textDocument": {"uri": "file:///tmp/l.py"},
        "position": {"line": 1, "character": 11},
        "context": {"triggerKind": 1}})["result"]
    assert result["items"] == []
    assert [n for n in wire.notifications if n["method"] == "dg-lsp/suggestion"] == []
