"""Finding stub holes costs what the file's length costs, and a code action at a cursor what
the function there costs (issue #58): a file of 2,000 `...` functions took 10 s to list its
holes and 60 s per code action, on the server's event loop.

No timings (the speed is docs/performance.md's): the work is counted as the lines Python runs
and the calls it makes (sys.settrace, sys.setprofile), which a quadratic search multiplies by
the file's size; and the holes of a 10,000-stub file are checked one by one. Over LSP:
tests/integration/test_stub_scaling_lsp.py.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable

from lsprotocol import types

from dg_lsp.actions.holes import all_hole_targets, fill_edit, hole_targets
from dg_lsp.actions.stubs import BODY, Stub, find_stubs, stubs_in
from dg_lsp.actions.targets import (
    COMPLETE_BODY,
    DOCSTRING,
    FILL_FUNCTION,
    FILL_SELECTION,
    FIX_SYNTAX,
    targets_at,
)
from dg_lsp.cli import main
from dg_lsp.document.parsed import ParsedText
from dg_lsp.lsp.actions import code_actions_for_client
from dg_lsp.lsp.completion import complete
from dg_lsp.lsp.server import create_server
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from tests.support.scripted import Scripted, holes
from tests.support.targets import MEAN as TWO_HOLES
from tests.support.wait import wait_for_async

MEAN = TWO_HOLES + "\n\n"  # between the stub functions


def stub_function(i: int) -> str:
    return f"def f_{i}():\n    ...\n\n\n"


def stub_file(n: int, middle: str = "") -> str:
    """`n` functions whose body is `...`, with `middle` between the first and second half."""
    return ("".join(stub_function(i) for i in range(n // 2)) + middle
            + "".join(stub_function(i) for i in range(n // 2, n)))


def parsed(text: str) -> ParsedText:
    return ParsedText(text, language_for("python"))


def steps(work: Callable[[], object]) -> int:
    """The lines Python runs (each pass of a loop counts), and the functions and builtins it
    calls, while `work` runs: its work, counted the same on any machine, however busy."""
    count = 0

    def trace(frame, event: str, arg) -> Callable:
        nonlocal count
        count += 1  # "call", and "line" for each line run in the frame
        return trace

    def profile(frame, event: str, arg) -> None:
        nonlocal count
        count += event == "c_call"

    sys.settrace(trace)
    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
        sys.settrace(None)
    return count


# -- the whole file: linear -------------------------------------------------------------------


def test_finding_the_holes_of_twice_the_functions_is_twice_the_work():
    small, large = parsed(stub_file(300)), parsed(stub_file(600))
    assert len(find_stubs(small)) == 300 and len(find_stubs(large)) == 600
    assert steps(lambda: find_stubs(large)) <= 2 * steps(lambda: find_stubs(small)) + 100


def test_a_function_with_twice_the_stubs_is_twice_the_work():
    def one_body(n: int) -> ParsedText:
        return parsed("def f():\n" + "    x = 1\n    ...\n" * n)

    small, large = one_body(300), one_body(600)
    assert len(find_stubs(small)) == 300 and len(find_stubs(large)) == 600
    assert steps(lambda: find_stubs(large)) <= 2 * steps(lambda: find_stubs(small)) + 100


def test_the_holes_of_a_file_of_ten_thousand_stubs_are_each_found_exactly():
    n = 10_000
    text = stub_file(n)
    expected, at = [], 0
    for i in range(n):
        header = f"def f_{i}():\n"
        start = at + len(header) + 4
        expected.append(Stub(start, start + 3, "    ", "", BODY, f"f_{i}", (at, start + 3),
                             4 * i + 1))
        at += len(stub_function(i))
    stubs = find_stubs(parsed(text))
    assert stubs == expected
    assert (stubs[0].where, stubs[-1].where) == ("line 2", "line 39998")
    assert len(all_hole_targets(parsed(text))) == n  # one per function


def test_fill_check_lists_ten_thousand_holes_exactly(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stubs.py").write_text(stub_file(10_000))
    assert main(["fill", "stubs.py", "--check"]) == 1
    assert capsys.readouterr().out == "".join(f"stubs.py:{4 * i + 2}: hole: ...\n"
                                              for i in range(10_000))
    assert main(["fill", "stubs.py", "--check", "--range", "20001-20004"]) == 1
    assert capsys.readouterr().out == "stubs.py:20002: hole: ...\n"


# -- a cursor: the function there, whatever the file's size ----------------------------------


def test_a_code_action_at_a_cursor_does_the_same_work_in_a_file_twice_as_large():
    # both past the lines the indentation is guessed from (dg_lsp.context.detect_indent_unit)
    small, large = parsed(stub_file(1_000, MEAN)), parsed(stub_file(2_000, MEAN))
    at = small.text.index("total") + 2, large.text.index("total") + 2

    def actions(doc: ParsedText, cursor: int) -> list:
        return targets_at(doc, cursor, cursor) + hole_targets(doc, cursor, cursor)

    for doc, cursor in ((small, at[0]), (large, at[1])):  # (the first also loads the queries)
        (target,) = actions(doc, cursor)
        assert (target.action, target.name, doc.text[target.start:target.end]) == (
            FILL_FUNCTION, "mean",
            "...\n    n = len(xs)  # TODO not alone: no hole\n    pass  # TODO: return the mean")
    assert steps(lambda: actions(large, at[1])) == steps(lambda: actions(small, at[0]))


def test_actions_on_a_stub_body_a_header_and_a_selection_in_a_large_file():
    text = stub_file(2_000, MEAN)
    doc = parsed(text)
    body = text.index("...", text.index("def f_1500(")) + 1
    assert [(t.action, t.name) for t in targets_at(doc, body, body)] == [
        (COMPLETE_BODY, "f_1500")]
    assert hole_targets(doc, body, body) == []  # a lone body stub is Complete body's
    header = text.index("def f_1500(")
    assert [(t.action, t.name) for t in targets_at(doc, header, header)] == [
        (COMPLETE_BODY, "f_1500"), (DOCSTRING, "f_1500")]
    # a selection over two functions' bodies: both holes, one request
    start, end = body - 1, text.index("...", text.index("def f_1501(")) + 3
    (selection,) = hole_targets(doc, start, end)
    assert (selection.action, selection.start, selection.end) == (FILL_SELECTION, start, end)
    assert [s.function for s in stubs_in(doc, start, end)] == ["f_1500", "f_1501"]


def test_filling_a_functions_holes_does_the_same_work_in_a_file_twice_as_large():
    def fill_mean(n: int) -> int:
        doc = parsed(stub_file(n, MEAN))
        cursor = doc.text.index("total") + 2
        (target,) = hole_targets(doc, cursor, cursor)
        backend = Scripted(holes("total = sum(xs)", "return total / len(xs)"))
        edits = []
        work = steps(lambda: edits.append(fill_edit(backend, doc, target, Settings())))
        stub, last = doc.text.index("...", cursor), doc.text.index("pass  # TODO", cursor)
        assert edits[0].parts == [(stub, stub + 3, "total = sum(xs)"),
                                  (last, last + 29, "return total / len(xs)")]
        return work

    fill_mean(1_000)  # the grammar's queries load on first use
    assert fill_mean(2_000) == fill_mean(1_000)


def test_the_search_around_a_cursor_reads_character_offsets_in_multibyte_text():
    text = ('def héllo():\n    """Sàys 日本語."""\n    x = "ünïcode"\n    ...\n'
            "    # TODO: 日本\n\n\ndef g():\n    ...\n")
    doc = parsed(text)
    assert [(s.line, text[s.start:s.end], s.function) for s in find_stubs(doc)] == [
        (3, "...", "héllo"), (4, "# TODO: 日本", "héllo"), (8, "...", "g")]
    cursor = text.index("ünï")
    (target,) = hole_targets(doc, cursor, cursor)
    assert (target.action, text[target.start:target.end]) == (
        FILL_FUNCTION, "...\n    # TODO: 日本")
    comment = text.index("# TODO")
    assert [text[s.start:s.end] for s in stubs_in(doc, comment, comment)] == ["# TODO: 日本"]


def broken_file(n: int) -> str:
    return "".join(f"def f_{i}():\n    x = 1 +\n\n\n" for i in range(n))


def test_a_broken_line_is_offered_its_fix_with_work_linear_in_the_broken_lines():
    small, large = parsed(broken_file(300)), parsed(broken_file(600))

    def fixes(doc: ParsedText) -> list[tuple[int, int]]:
        line = doc.text.index("x = 1 +", doc.text.index("def f_200("))
        return [(t.start, t.end) for t in targets_at(doc, line, line)
                if t.action == FIX_SYNTAX]

    line = large.text.index("x = 1 +", large.text.index("def f_200("))
    assert fixes(large) == [(line, line + len("x = 1 +"))]
    assert steps(lambda: fixes(large)) <= 2 * steps(lambda: fixes(small)) + 100


# -- over the server: the search runs off the event loop --------------------------------------


def lazy_client(server) -> None:
    """A client that resolves a code action's edit: listing the actions runs no model."""
    server.protocol.client_capabilities = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            code_action=types.CodeActionClientCapabilities(
                resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]))))


def open_doc(server, uri: str, text: str) -> None:
    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=text)))


def test_a_completion_asked_during_a_code_actions_search_is_answered_first(monkeypatch):
    """The search is held until the completion in another document has its answer: on the
    event loop it would hold the loop, and the completion, until it gives up waiting."""
    server = create_server(Scripted("1", resident=True))
    lazy_client(server)
    text = stub_file(2_000, MEAN)
    open_doc(server, "file:///tmp/stubs.py", text)
    open_doc(server, "file:///tmp/quick.py", "quick = ")
    completed = threading.Event()
    searched_on: list[threading.Thread] = []
    original = hole_targets

    def held(doc: ParsedText, start: int, end: int) -> list:
        searched_on.append(threading.current_thread())
        completed.wait(5)
        return original(doc, start, end)

    monkeypatch.setattr("dg_lsp.lsp.actions.hole_targets", held)
    line = text[:text.index("total")].count("\n")
    params = types.CodeActionParams(  # in `total`: past the header, no docstring offered
        types.TextDocumentIdentifier("file:///tmp/stubs.py"),
        types.Range(types.Position(line, 6), types.Position(line, 6)),
        types.CodeActionContext(diagnostics=[]))
    order: list[str] = []

    async def both() -> list[types.CodeAction]:
        listing = asyncio.ensure_future(code_actions_for_client(server, params))
        listing.add_done_callback(lambda _: order.append("code action"))
        await wait_for_async(lambda: searched_on, 10, "the search to start")
        completion, _ = await complete(server, "file:///tmp/quick.py", types.Position(0, 8))
        assert completion.text == "1"
        order.append("completion")
        completed.set()
        return await listing

    (action,) = asyncio.run(both())
    assert order == ["completion", "code action"]
    assert searched_on[0] is not threading.main_thread()
    assert (action.title, action.data["action"], action.data["version"]) == (
        "Fill every hole in this function", FILL_FUNCTION, 1)
