"""Over LSP, in a server process of its own: "Fill every hole in this function" offered where a
function has stub holes, resolved into one WorkspaceEdit (a TextEdit per hole) or refused with
the reason shown; `dg-lsp/fillHoles` answering each cursor's own text. The server's engine
writes given fills (tests/support/scripted.py), so the edits are exact."""

from __future__ import annotations

import json

import pytest

from tests.support.lsp_wire import WireServer, apply_text_edits

HOLES_SERVER = """
import json, sys
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted, holes
create_server(Scripted(*[holes(*fills) for fills in json.loads(sys.argv[1])])).start_io()
"""
URI = "file:///tmp/mean.py"
SOURCE = ("def mean(xs):\n"
          "    total = 0\n"
          "    ...\n"
          "    pass  # TODO: return the mean\n"
          "\n"
          "def pair(x, y):\n"
          "    a = \n"
          "    b = \n"
          "    return a, b\n")


def serve(*answers: tuple[str, ...]) -> WireServer:
    # a client that resolves a code action's edit: listing the actions runs no model
    lazy = {"textDocument": {"codeAction": {"resolveSupport": {"properties": ["edit"]}}}}
    return WireServer(None, capabilities=lazy,
                      python_args=("-c", HOLES_SERVER, json.dumps(answers)))


@pytest.fixture
def wire(request):
    server = serve(*request.param)
    server.open(URI, SOURCE)
    yield server
    server.close()


def at(line: int, character: int) -> dict:
    return {"line": line, "character": character}


def fill_action(wire: WireServer, line: int) -> dict:
    actions = wire.call("textDocument/codeAction", {
        "textDocument": {"uri": URI}, "range": {"start": at(line, 4), "end": at(line, 4)},
        "context": {"diagnostics": []}})["result"]
    (action,) = [a for a in actions if a["title"] == "Fill every hole in this function"]
    return action


@pytest.mark.parametrize("wire", [[("total = sum(xs)", "return total / len(xs)")]],
                         indirect=True)
def test_every_hole_of_the_function_is_filled_in_one_workspace_edit(wire):
    action = fill_action(wire, 1)
    resolved = wire.call("codeAction/resolve", action)["result"]
    (change,) = resolved["edit"]["documentChanges"]
    assert change["textDocument"] == {"uri": URI, "version": 1}
    assert len(change["edits"]) == 2
    assert apply_text_edits(SOURCE, change["edits"]) == SOURCE.replace(
        "    ...\n    pass  # TODO: return the mean\n",
        "    total = sum(xs)\n    return total / len(xs)\n")


@pytest.mark.parametrize("wire", [[("total = sum(xs", "return total")]], indirect=True)
def test_a_fill_that_does_not_parse_is_refused_and_the_user_told_why(wire):
    answer = wire.call("codeAction/resolve", fill_action(wire, 2))
    reason = "dg-lsp: the fill for the hole at line 3 does not parse: `total = sum(xs`"
    assert answer["error"]["message"] == reason
    shown = [n["params"]["message"] for n in wire.notifications
             if n["method"] == "window/showMessage"]
    assert shown == [reason]


@pytest.mark.parametrize("wire", [[("x + 1", "y * 2")]], indirect=True)
def test_every_cursor_gets_its_own_text(wire):
    answer = wire.call("dg-lsp/fillHoles", {"textDocument": {"uri": URI, "version": 1},
                                            "positions": [at(7, 8), at(6, 8)]})
    assert answer["result"] == {"items": [
        {"position": at(7, 8), "text": "y * 2", "range": {"start": at(7, 8), "end": at(7, 8)}},
        {"position": at(6, 8), "text": "x + 1", "range": {"start": at(6, 8), "end": at(6, 8)}},
    ]}


@pytest.mark.parametrize("wire", [[]], indirect=True)
def test_cursors_in_a_stale_version_or_outside_the_document_are_refused(wire):
    stale = wire.call("dg-lsp/fillHoles", {"textDocument": {"uri": URI, "version": 7},
                                           "positions": [at(6, 8)]})
    assert stale["error"]["code"] == -32801  # ContentModified
    outside = wire.call("dg-lsp/fillHoles", {"textDocument": {"uri": URI},
                                             "positions": [at(6, 8), at(40, 0)]})
    assert outside["error"]["message"] == "dg-lsp: position 40:0 is outside mean.py"
    malformed = wire.call("dg-lsp/fillHoles", {"textDocument": {"uri": URI}})
    assert malformed["error"]["code"] == -32602  # InvalidParams: no positions
