"""Code actions: where each applies (tree-sitter, no model) and the edit each makes of given
model text. Over LSP with the bundled model and on the command line: tests/integration/
test_actions.py."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from dg_lsp.actions.rewrite import _same_nesting, compute_edit, shape
from dg_lsp.actions.targets import (
    COMPLETE_BODY,
    DOCSTRING,
    FIX_SYNTAX,
    REWRITE,
    all_targets,
    targets_at,
)
from dg_lsp.document.edit import RewriteError
from dg_lsp.document.parsed import ParsedText
from dg_lsp.settings import Settings
from dg_lsp.syntax.errors import count_errors
from dg_lsp.syntax.languages import language_for
from engine.backend import StepsOnWorker
from engine.types import InfillRequest
from tests.support.scripted import Scripted
from tests.support.targets import JS, PY, doc, target_of


def at(text: str, needle: str, extra: int = 0) -> int:
    return text.index(needle) + extra


def actions(text: str, start: int, end: int | None = None, language: str = "python"):
    return {(t.action, t.name) for t in targets_at(doc(text, language), start,
                                                     start if end is None else end)}


# -- where actions apply (no model) -----------------------------------------------------------


def test_python_actions_are_offered_only_where_they_apply():
    # in the stub `norm`: complete its body; it has a docstring, so no docstring action
    assert actions(PY, at(PY, "...")) == {(COMPLETE_BODY, "norm")}
    # on the header of load_config: a docstring, but its body is real code
    assert actions(PY, at(PY, "load_config")) == {(DOCSTRING, "load_config")}
    # inside load_config's body: nothing
    assert actions(PY, at(PY, "json.load")) == set()
    # at module level, on a broken line: fix the syntax error there
    assert actions(PY, at(PY, "x = (")) == {(FIX_SYNTAX, "")}
    assert actions(PY, at(PY, "import json")) == set()
    # a selection: rewrite it
    start = at(PY, "return json")
    assert actions(PY, start, start + len("return json.load(f)")) == {(REWRITE, "")}
    # a selection of whitespace only is no target
    assert actions(PY, at(PY, "\n\n\ndef"), at(PY, "def load")) == set()


def test_javascript_actions_are_offered_only_where_they_apply():
    assert actions(JS, at(JS, "// TODO"), language="javascript") == {(COMPLETE_BODY, "increment")}
    assert actions(JS, at(JS, "function add"), language="javascript") == {(DOCSTRING, "add")}
    assert actions(JS, at(JS, "return a"), language="javascript") == set()
    assert actions(JS, at(JS, "class Counter"), language="javascript") == {(DOCSTRING, "Counter")}


def test_stub_bodies_in_every_language_are_found():
    stubs = {
        "python": "def f():\n    pass\n\ndef g():\n    raise NotImplementedError\n\n"
                  "def h():\n    return 1\n",
        "typescript": "function f(): number {\n  throw new Error('not implemented');\n}\n"
                      "function g() {}\nfunction h() { return 1; }\n",
        "rust": "fn f() -> i32 {\n    todo!()\n}\nfn g() {}\nfn h() -> i32 { 1 }\n",
        "go": "package p\n\nfunc f() int {\n\tpanic(\"not implemented\")\n}\n\n"
              "func g() {}\n\nfunc h() int { return 1 }\n",
    }
    for language, text in stubs.items():
        found = [t.name for t in all_targets(doc(text, language), COMPLETE_BODY)]
        assert found == ["f", "g"], language


def test_doc_comment_targets_frame_the_hole_as_the_language_does():
    go = doc("package p\n\nfunc Add(a, b int) int {\n\treturn a + b\n}\n", "go")
    (target,) = all_targets(go, DOCSTRING)
    assert (target.before, target.after) == ("// Add ", "\n")
    assert shape(target, "returns the sum.\nmore", go) == "// Add returns the sum.\n"
    rust = doc("/// Documented.\nfn a() {}\n\nfn b() {}\n", "rust")
    assert [t.name for t in all_targets(rust, DOCSTRING)] == ["b"]
    py = doc('def f():\n    return 1\n')
    (target,) = all_targets(py, DOCSTRING)
    assert shape(target, "Return one.", py) == '\n    """Return one."""'
    assert shape(target, 'One.\n\nMore."""junk', py) == '\n    """One.\n\n    More.\n    """'
    assert shape(target, "   \n", py) is None


def test_targets_are_character_offsets_in_files_with_multibyte_text():
    text = 's = "é🎉"\n\n\ndef f():\n    """Ünïcode 🎉."""\n    pass\n'
    (body,) = all_targets(doc(text), COMPLETE_BODY)
    assert text[body.start:body.end] == "\n    pass"
    assert all_targets(doc(text), DOCSTRING) == []


def test_syntax_targets_are_whole_lines_of_each_broken_region():
    broken = doc("a = 1\nb = [1, 2\nc = 3\n")
    assert count_errors(broken.tree) >= 1
    (target,) = all_targets(broken, FIX_SYNTAX)
    assert broken.text[target.start:target.end] == "b = [1, 2\nc = 3"
    assert all_targets(doc("a = 1\n"), FIX_SYNTAX) == []


def test_bracket_nesting_guard():
    assert _same_nesting("return f(x)", "return g")
    assert not _same_nesting("return b; }\n{", "")  # closes the function it sits in
    assert _same_nesting("s = ')'", "s = 1")  # brackets in strings do not count
    assert _same_nesting("f(a,", "g(b,")  # a selection that opened a bracket keeps it open


def test_a_body_keeps_its_longest_parseable_lines_and_a_rewrite_is_whole_or_refused():
    text = "def f(a):\n    pass\n"
    d = doc(text)
    (body,) = all_targets(d, COMPLETE_BODY)
    edit = compute_edit(Scripted("return a\n    )))broken"), d, body, Settings())
    assert text[:edit.start] + edit.text + text[edit.end:] == "def f(a):\n    return a\n"
    # what the model writes past the body's end (a new definition) is not part of it
    edit = compute_edit(Scripted("if a:\n        return a\n    return 0\n\n\ndef g():\n    pass"),
                        d, body, Settings())
    assert text[:edit.start] + edit.text + text[edit.end:] == (
        "def f(a):\n    if a:\n        return a\n    return 0\n")
    start = text.index("pass")
    rewrite = target_of(d, start, start + 4)
    with pytest.raises(RewriteError, match="nothing usable"):
        compute_edit(Scripted("return (a"), d, rewrite, Settings(), strength=1.0)
    with pytest.raises(RewriteError, match="same as the original"):
        compute_edit(Scripted("pass"), d, rewrite, Settings(), strength=1.0)
    with pytest.raises(RewriteError, match="the model's version repeats itself"):
        compute_edit(Scripted(*["return a * a * a * a * a * a"] * 2), d, body, Settings())
    loop = "def f(a):\n    return a.b + a.b + a.b + a.b + 0\n"  # the original loops: allowed
    looped = doc(loop)
    start = loop.index("return")
    edit = compute_edit(Scripted("return a.b + a.b + a.b + a.b + 1"), looped,
                        target_of(looped, start, len(loop) - 1), Settings(), strength=1.0)
    assert edit.text == "return a.b + a.b + a.b + a.b + 1"


def test_a_body_the_first_try_leaves_unusable_is_written_again_with_exact_passes():
    text = "import math\n\n\ndef area(radius):\n    pass\n"
    d = doc(text)
    (body,) = all_targets(d, COMPLETE_BODY)
    model = Scripted('"""\n    The area.\n    """', "return math.pi * radius ** 2")
    edit = compute_edit(model, d, body, Settings())
    assert text[:edit.start] + edit.text + text[edit.end:] == (
        "import math\n\n\ndef area(radius):\n    return math.pi * radius ** 2\n")
    first, second = (request.settings for request in model.requests)
    default = Settings().sampler
    assert (first.cache_refresh, first.min_tokens) == (default.cache_refresh, 4)
    assert (second.cache_refresh, second.min_tokens) == (1, 6)
    # A first try that is usable is the edit: no second request.
    model = Scripted("return math.pi * radius ** 2")
    compute_edit(model, d, body, Settings())
    assert len(model.requests) == 1
    # Docstrings alone, both times: refused with the reason.
    with pytest.raises(RewriteError, match="is a docstring, no code"):
        compute_edit(Scripted('"""Area."""', '"""The area."""\n    "more"'), d, body, Settings())


class TooLong(Scripted):
    def _drafts(self):
        raise ValueError("a hole of 900 tokens does not fit a canvas of 256")
        yield


def test_a_selection_the_canvas_cannot_hold_is_refused_with_a_reason():
    text = "def f(a):\n    return a\n"
    d = doc(text)
    with pytest.raises(RewriteError) as err:
        compute_edit(TooLong(), d, target_of(d, text.index("return"), len(text) - 1),
                     Settings())
    assert str(err.value) == ("the selection is too long for the model: a hole of 900 tokens "
                              "does not fit a canvas of 256")


def test_a_javascript_body_is_written_inside_its_braces_at_the_files_indentation():
    # (the bundled model never saw JavaScript; its bodies there are refused, so the
    # framing is checked with given model text)
    d = doc(JS, "javascript")
    (body,) = all_targets(d, COMPLETE_BODY)
    backend = Scripted("this.n += 1;\n    return this.n;\n")
    edit = compute_edit(backend, d, body, Settings())
    new = JS[:edit.start] + edit.text + JS[edit.end:]
    assert "  increment() {\n    this.n += 1;\n    return this.n;\n  }\n}\n" in new
    prefix, suffix = backend.calls[0]
    assert prefix.endswith("  increment() {\n    ") and suffix.startswith("\n  }\n}")
    assert count_errors(ParsedText(new, language_for("javascript")).tree) == count_errors(d.tree)


def test_an_instruction_is_a_comment_line_above_the_hole():
    text = "def f(a):\n    return a\n"
    d = doc(text)
    start = text.index("return")
    rewrite = target_of(d, start, len(text) - 1)
    backend = Scripted("return a * 2")
    compute_edit(backend, d, rewrite, Settings(), instruction="double it\n please")
    assert backend.calls == [("def f(a):\n    # double it please\n    ", "\n")]


class _SteppedWhere(Scripted):
    """Scripted, noting the thread each draft is computed on."""

    def __init__(self, resident: bool) -> None:
        super().__init__("x", resident=resident)
        self.threads: list[str] = []

    def _drafts(self):
        self.threads.append(threading.current_thread().name)
        yield from super()._drafts()


@pytest.mark.parametrize("resident", [False, True])
def test_an_in_process_engine_steps_on_the_worker_a_resident_one_on_the_caller(resident):
    # The in-process engine is not thread-safe: its steps interleave on the one worker. A
    # resident engine steps in its own process: a hop per step would only add latency.
    backend = _SteppedWhere(resident)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dg-engine") as worker:
        drafts = list(StepsOnWorker(backend, worker).infill_stream(InfillRequest("a", "b", 4)))
    assert [d.text for d in drafts] == ["x"]
    caller = threading.current_thread().name
    assert backend.threads == [caller if resident else "dg-engine_0"]

