"""Code actions in a file of 2,000 stub functions over LSP, in a server process of its own
(issue #58): the actions at a cursor are the function's there, and the search for them runs
off the server's event loop, so a completion in another document asked meanwhile is answered
first. In process, with the work counted: tests/unit/test_stub_scaling.py."""

from __future__ import annotations

from tests.support.lsp_wire import WireServer

# The server, its search for the fill actions held until the test sends `test/release`.
HELD_SERVER = """
import threading
import dg_lsp.lsp.actions as actions
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted
released = threading.Event()
search = actions.hole_targets
def held(doc, start, end):
    released.wait(60)
    return search(doc, start, end)
actions.hole_targets = held
server = create_server(Scripted("1", resident=True))
@server.feature("test/release")
def release(ls, params):
    released.set()
server.start_io()
"""
# a client that resolves a code action's edit: listing the actions runs no model
LAZY = {"textDocument": {"codeAction": {"resolveSupport": {"properties": ["edit"]}}}}
STUBS, QUICK = "file:///tmp/stubs.py", "file:///tmp/quick.py"
MEAN = ("def mean(xs):\n"
        "    total = 0\n"
        "    ...\n"
        "    pass  # TODO: return the mean\n"
        "\n\n")
# 2,000 functions whose body is `...`, `mean` and its two holes halfway
TEXT = ("".join(f"def f_{i}():\n    ...\n\n\n" for i in range(1_000)) + MEAN
        + "".join(f"def f_{i}():\n    ...\n\n\n" for i in range(1_000, 2_000)))


def at(offset: int) -> dict:
    line_start = TEXT.rfind("\n", 0, offset) + 1
    return {"line": TEXT.count("\n", 0, offset), "character": offset - line_start}


def code_action(start: int, end: int | None = None) -> dict:
    return {"textDocument": {"uri": STUBS},
            "range": {"start": at(start), "end": at(start if end is None else end)},
            "context": {"diagnostics": []}}


def test_the_actions_at_a_cursor_in_a_file_of_two_thousand_stubs():
    wire = WireServer(None, capabilities=LAZY)
    try:
        wire.open(STUBS, TEXT)
        body = TEXT.index("...", TEXT.index("def f_1500(")) + 1
        mean = TEXT.index("total") + 2
        titles = {where: [a["title"] for a in wire.call("textDocument/codeAction",
                                                        code_action(where))["result"]]
                  for where in (body, mean)}
        assert titles == {body: ["Complete function body of f_1500"],
                          mean: ["Fill every hole in this function"]}
        # every stub of the file selected: one fill action for all of them
        first, last = TEXT.index("...") + 1, TEXT.rindex("...") + 3
        selection = wire.call("textDocument/codeAction", code_action(first, last))["result"]
        assert [a["title"] for a in selection] == [
            "Rewrite selection", "Rewrite selection with instruction…",
            "Complete function body of f_0", "Fill every hole in the selection"]
    finally:
        wire.close()


def test_a_completion_asked_while_a_code_action_searches_is_answered_first():
    wire = WireServer(None, capabilities=LAZY, python_args=("-c", HELD_SERVER))
    try:
        wire.open(STUBS, TEXT)
        wire.open(QUICK, "quick = ")
        listing = wire.request("textDocument/codeAction", code_action(TEXT.index("total") + 2))
        # On the event loop the held search would hold the completion too: no answer.
        answer = wire.inline(QUICK, 0, 8, timeout=15, asked=True)
        assert [item["insertText"] for item in answer["result"]["items"]] == ["1"]
        wire.notify("test/release", {})
        (action,) = wire.response(listing)["result"]
        assert (action["title"], action["data"]["action"]) == (
            "Fill every hole in this function", "fill-holes")
    finally:
        wire.close()
