"""Stub holes and filling several at once: where the holes are (tree-sitter, no model), the one
request that fills them (its canvas, sizes and unit ends), the edit made of given fills or the
refusal naming the hole, and a completion at every cursor. The engine is scripted
(tests/support/scripted.py); over LSP: tests/integration/test_holes_lsp.py."""

from __future__ import annotations

import pytest

from dg_lsp.actions.holes import (
    STATEMENT_TOKENS,
    action_edit,
    all_hole_targets,
    fill_edit,
    hole_targets,
)
from dg_lsp.actions.stubs import BODY, STATEMENT, find_stubs
from dg_lsp.actions.targets import (
    BODY_TOKENS,
    COMPLETE_BODY,
    FILL_FUNCTION,
    FILL_SELECTION,
    targets_at,
)
from dg_lsp.completion.cursors import complete_at_cursors
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.holes import MAX_HOLES
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.backend import CountingBackend
from engine.serve.socket.client import EngineRefused
from engine.types import UnitEnd
from tests.support.scripted import Scripted, holes
from tests.support.targets import MEAN, doc


def found(text: str, language: str = "python", uri: str = "") -> list[tuple[int, str, str]]:
    """(1-based line, the stub's text, its size) of every hole."""
    parsed = ParsedText(text, language_for(language), uri=uri)
    return [(s.line + 1, text[s.start:s.end], s.size) for s in find_stubs(parsed)]


def apply(text: str, parts: list[tuple[int, int, str]]) -> str:
    for start, end, fill in sorted(parts, reverse=True):
        text = text[:start] + fill + text[end:]
    return text


# -- where the holes are ----------------------------------------------------------------------


def test_python_holes_are_stub_lines_alone_in_a_function_body():
    text = ("x = ...\n"
            "# TODO: at module level: no hole\n"
            "def f(a):\n"
            "    # TODO: check a\n"
            "    pass  # FIXME later\n"
            "    pass\n"
            "    ...\n"
            "    print(...)\n"
            "    # a comment that asks nothing\n"
            "\n"
            "def g():\n"
            '    """Doc."""\n'
            "    ...\n")
    assert found(text) == [(4, "# TODO: check a", STATEMENT),
                           (5, "pass  # FIXME later", STATEMENT),
                           (7, "...", STATEMENT),
                           (13, "...", BODY)]


def test_a_bare_ellipsis_that_only_declares_is_no_hole():
    text = ("import abc\nfrom typing import Protocol, overload\n\n"
            "class P(Protocol):\n    def m(self):\n        ...\n\n"
            "class A:\n    @abc.abstractmethod\n    def m(self):\n        ...\n\n"
            "    @overload\n    def n(self, x: int) -> int:\n        ...\n\n"
            "    def o(self):\n        ...\n\n"
            "    def p(self):\n        pass  # TODO: write p\n")
    assert found(text) == [(18, "...", BODY), (21, "pass  # TODO: write p", BODY)]
    assert found("def f():\n    ...\n", uri="file:///tmp/stubs.pyi") == []


def test_holes_in_the_other_languages():
    assert found("fn f() {\n    let x = 1;\n    todo!();\n    // TODO: log x\n}\n"
                 "fn g() -> i32 {\n    unimplemented!()\n}\nfn h() {\n    vec!();\n}\n",
                 "rust") == [(3, "todo!();", STATEMENT), (4, "// TODO: log x", STATEMENT),
                             (7, "unimplemented!()", BODY)]
    assert found("function f(a) {\n  // TODO: validate a\n  return a;\n}\n"
                 "// TODO: outside\nclass C {\n  m() {\n    // FIXME\n  }\n}\n",
                 "javascript") == [(2, "// TODO: validate a", STATEMENT),
                                   (8, "// FIXME", BODY)]
    assert found("function f(): number {\n  // TODO: compute\n}\n", "typescript") == [
        (2, "// TODO: compute", BODY)]
    assert found("package p\n\nfunc f() int {\n\tx := 1\n\t// TODO: double x\n\treturn x\n}\n",
                 "go") == [(5, "// TODO: double x", STATEMENT)]


def test_the_fill_actions_are_offered_where_holes_are():
    d = doc(MEAN + "\ndef done():\n    return 1\n")
    in_mean, in_done = MEAN.index("total"), len(MEAN) + 10
    (target,) = hole_targets(d, in_mean, in_mean)
    assert (target.action, target.title, MEAN[target.start:target.end]) == (
        FILL_FUNCTION, "Fill every hole in this function",
        "...\n    n = len(xs)  # TODO not alone: no hole\n    pass  # TODO: return the mean")
    assert hole_targets(d, in_done, in_done) == []
    start = MEAN.index("...")
    assert [(t.action, t.title) for t in hole_targets(d, start, start + 5)] == [
        (FILL_FUNCTION, "Fill every hole in this function"),
        (FILL_SELECTION, "Fill every hole in the selection")]
    # a lone body stub is "Complete function body"'s; two functions' body stubs are holes
    body = doc("def f():\n    ...\n\ndef g():\n    ...\n")
    assert hole_targets(body, 10, 10) == []
    assert COMPLETE_BODY in [t.action for t in targets_at(body, 10, 10)]
    assert [t.action for t in hole_targets(body, 0, len(body.text))] == [FILL_SELECTION]
    assert [t.name for t in all_hole_targets(d)] == ["mean"]


# -- one request, one edit --------------------------------------------------------------------


def test_every_hole_is_filled_in_one_request_and_one_edit():
    d = doc(MEAN)
    (target,) = hole_targets(d, 0, 0)
    backend = Scripted(holes("for x in xs:\n        total += x\n\ndef junk():", "return total / n"))
    edit = fill_edit(backend, d, target, Settings())
    assert apply(MEAN, edit.parts) == ("def mean(xs):\n"
                                       "    total = 0\n"
                                       "    for x in xs:\n"
                                       "        total += x\n"
                                       "    n = len(xs)  # TODO not alone: no hole\n"
                                       "    return total / n\n")
    assert MEAN[:edit.start] + edit.text + MEAN[edit.end:] == apply(MEAN, edit.parts)
    assert edit.steps == 3
    (request,) = backend.requests
    # the TODO comment is read on its own line above its hole
    assert request.texts == ("def mean(xs):\n    total = 0\n    ",
                             "\n    n = len(xs)  # TODO not alone: no hole\n"
                             "    # TODO: return the mean\n    ",
                             "\n")
    assert request.max_tokens == (STATEMENT_TOKENS, STATEMENT_TOKENS)
    assert request.until == (UnitEnd("block", "    ", ""), UnitEnd("block", "    ", ""))


def test_a_body_stub_gets_a_body_sized_hole_and_braces_keep_their_closer():
    text = "fn area(w: u32, h: u32) -> u32 {\n    todo!()\n}\n"
    d = doc(text, "rust")
    (target,) = all_hole_targets(d)  # as `dg-lsp fill` and batch mode fill it
    backend = Scripted(holes("w * h\n}\n\nfn more() {"))
    edit = fill_edit(backend, d, target, Settings())
    assert apply(text, edit.parts) == "fn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n"
    assert backend.requests[0].max_tokens == (BODY_TOKENS,)


@pytest.mark.parametrize(("fills", "reason"), [
    (("", "return total / n"), "the model wrote nothing for the hole at line 3"),
    (("total = (", "return total / n"),
     "the fill for the hole at line 3 does not parse: `total = (`"),
    (("for x in xs:\n        total += x", "..."), "the model left the hole at line 5 a stub"),
])
def test_a_fill_that_is_empty_broken_or_a_stub_refuses_the_whole_edit(fills, reason):
    d = doc(MEAN)
    (target,) = hole_targets(d, 0, 0)
    with pytest.raises(RewriteError) as refused:
        fill_edit(Scripted(holes(*fills)), d, target, Settings())
    assert str(refused.value) == reason


def test_too_many_holes_are_refused_before_the_engine_is_asked():
    text = "def f():\n" + "    ...\n    x = 1\n" * (MAX_HOLES + 1)
    d = doc(text)
    (target,) = hole_targets(d, 0, 0)
    backend = Scripted()
    with pytest.raises(RewriteError, match=f"{MAX_HOLES + 1} holes: at most {MAX_HOLES}"):
        fill_edit(backend, d, target, Settings())
    assert backend.requests == []


def test_an_engine_that_refuses_the_holes_is_named_in_the_refusal():
    """An engine of another protocol version is refused at its hello (test_protocol_version);
    one that refuses the request itself is quoted."""
    class Refusing(Scripted):
        def holes_stream(self, request, cancel=None, *, document=None):
            refused = EngineRefused("engine refused the request (unknown-op): unknown op 'holes'")
            refused.code = "unknown-op"
            raise refused

    d = doc(MEAN)
    (target,) = hole_targets(d, 0, 0)
    with pytest.raises(RewriteError, match="the engine refused the holes: engine refused the "
                       r"request \(unknown-op\): unknown op 'holes'"):
        fill_edit(CountingBackend(Refusing()), d, target, Settings())


def test_a_counting_wrapper_counts_the_holes_request():
    d = doc(MEAN)
    (target,) = hole_targets(d, 0, 0)
    counting = CountingBackend(Scripted(holes("total = sum(xs)", "return total / n", steps=5)))
    action_edit(counting, d, target, Settings())
    assert (counting.requests, counting.steps) == (1, 5)


def test_the_other_actions_still_go_to_compute_edit():
    text = "def f(a):\n    pass\n"
    d = doc(text)
    (target,) = [t for t in targets_at(d, 12, 12) if t.action == COMPLETE_BODY]
    edit = action_edit(Scripted("return a + 1"), d, target, Settings())
    assert text[:edit.start] + edit.text + text[edit.end:] == "def f(a):\n    return a + 1\n"


# -- a completion at every cursor -------------------------------------------------------------


def test_every_cursor_gets_its_own_text_from_one_request():
    text = "def f(x, y):\n    a = \n    b = \n    return a + b\n"
    first, second = text.index("a = ") + 4, text.index("b = ") + 4
    backend = Scripted(holes("x + 1\nmore junk", "y * 2"))
    fills = complete_at_cursors(backend, doc(text), [second, first, second], Settings())
    assert [s.text for s in fills.suggestions] == ["y * 2", "x + 1", "y * 2"]
    (request,) = backend.requests
    assert request.texts == ("def f(x, y):\n    a = ", "\n    b = ", "\n    return a + b\n")
    assert request.until == (UnitEnd("line"), UnitEnd("line"))


def test_a_cursor_with_nothing_usable_gets_none_and_the_others_keep_theirs():
    text = "def f(x, y):\n    a = \n    b = \n"
    cursors = [text.index("a = ") + 4, text.index("b = ") + 4]
    fills = complete_at_cursors(Scripted(holes("   ", "y * 2")), doc(text), cursors, Settings())
    assert [s and s.text for s in fills.suggestions] == [None, "y * 2"]
