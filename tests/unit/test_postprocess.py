"""Post-processing of raw hole text, when the pipeline stops denoising, the completion cache
and settings parsing."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from dg_lsp.completion.cache import CompletionCache
from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.completion.postprocess import Suggestion, postprocess, unit_end
from dg_lsp.context import build_context
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.syntax.languages import language_for
from engine.backend import StepsOnWorker
from engine.text.units import UnitEnd, unit_ended
from tests.support.scripted import Scripted


def run(language_id: str | None, marked: str, raw: str) -> Suggestion | None:
    offset = marked.index("|")
    ctx = build_context(marked.replace("|", "", 1), offset, language_for(language_id))
    return postprocess(raw, ctx)


@pytest.mark.parametrize(
    "language_id, source, raw, text, replace",
    [
        # stop tokens end the completion; a block keeps only the body
        ("python", "def f(x):\n    |\n", "return x + 1\ndef g():<|endoftext|>junk",
         "return x + 1", 0),
        ("python", "def f(x):\n    |\n", "return x<|pad|><|pad|>", "return x", 0),
        # a body is re-indented to one step (the file's step) past the opener
        ("python", "def f(x):\n|\n", "  return x + 1\n  y = 2", "    return x + 1\n    y = 2", 0),
        # after the opener on its own line, the body starts on the next line
        ("python", "def f(x):|\n", "\n    return x + 1\n\nprint(1)", "\n    return x + 1", 0),
        # inside brackets: stop before the bracket that is already in the buffer
        ("python", "def f(x, y, z):\n    return g(x, |)\n", "y, z)\n", "y, z", 0),
        ("javascript", "f(a, |);\n", "b, [1, 2]);", "b, [1, 2]", 0),
        # rest of line: one line only
        ("python", "def f(x):\n    y = x + |\n", "1\n    return y", "1", 0),
        # closing characters already after the cursor are replaced, not duplicated
        ("javascript", 'const s = "ab|";\n', 'cd";', 'cd";', 2),
        ("python", "x = [1, 2|]\n", ", 3]", ", 3", 0),
        # tabs in a tab-indented file
        ("go", "package main\nfunc f(a int) int {\n\t|\n}\n", "x := a + 1\n    return x\n}",
         "x := a + 1\n\treturn x", 0),
        # lines the suffix already starts with are dropped
        ("python", "def f(x):\n    |\n    return y\n", "y = x * 2\n    return y",
         "y = x * 2", 0),
        # a comment continues to the end of its line
        ("python", "# add the |\nx = 1\n", "two numbers\nx = 2", "two numbers", 0),
        (None, "hello |", "world\nagain", "world", 0),
    ],
)
def test_suggestion(language_id, source, raw, text, replace):
    assert run(language_id, source, raw) == Suggestion(text, replace)


def test_a_line_repeated_in_a_row_is_cut_unless_the_context_repeats_it():
    stuck = "curr = self.root[0]\n    curr = self.root[0]\n    curr = self.root[0]\n    return curr"
    assert run("python", "def first(self):\n    |\n", stuck) == Suggestion(
        "curr = self.root[0]", 0)
    # a line may come back after another one
    assert run("python", "def f(a):\n    |\n", "a.pop()\n    b = 1\n    a.pop()") == Suggestion(
        "a.pop()\n    b = 1\n    a.pop()", 0)
    # the file writes it twice in a row itself: so may the suggestion
    twice = "def g(it):\n    next(it)\n    next(it)\n\n\ndef f(it):\n    |\n"
    assert run("python", twice, "next(it)\n    next(it)") == Suggestion(
        "next(it)\n    next(it)", 0)


@pytest.mark.parametrize(
    "language_id, source, raw",
    [
        ("python", "def f(x):\n    y = x + |\n", "   "),  # whitespace only
        ("python", "def f(x):\n    y = x + |\n", "<|endoftext|>x"),  # empty before stop
        ("python", "def f(x):\n    y = x + 1\n    |\n", "y = x + 1"),  # repeats the line above
        ("python", "def f(x):\n    y = x + |\n", "(1 +"),  # leaves a bracket open
        ("python", "x = 1|\n", " +* 2"),  # adds a parse error
        ("javascript", "let a = 1;|\n", " let = = ;"),  # adds a parse error
        ("python", "def f(x):|\n", "return x"),  # body text on the opener's line
        ("python", "def area(r):\n    return |\n", "math.pi * math.pi * math.pi * math.pi"),
    ],
)
def test_rejected(language_id, source, raw):
    assert run(language_id, source, raw) is None


def test_a_row_of_values_is_not_a_loop():
    assert run("python", "def f():\n    return |\n", "[0, 0, 0, 0, 0]") == Suggestion(
        "[0, 0, 0, 0, 0]", 0)


@pytest.mark.parametrize(
    "source, raw, ended",
    [
        ("def f(x):\n    y = x + |\n", "1", False),
        ("def f(x):\n    y = x + |\n", "1\n", True),
        ("def f(x):\n    y = x + |\n", "g(1,", False),  # an open bracket is not an end yet
        ("def f(x):\n    y = x + |\n", "1<|endoftext|>", True),
        ("def f(x):\n    |\n", "return x\n", False),  # the body may go on
        ("def f(x):\n    |\n", "y = x\n    return y\n", False),
        ("def f(x):\n    |\n", "return x\ndef", True),  # dedented to the opener: body over
        ("def f(x):\n    return g(x, |)\n", "y, z", False),
        ("def f(x):\n    return g(x, |)\n", "y, z)", True),
        ("# add the |\nx = 1\n", "two numbers", False),
        ("# add the |\nx = 1\n", "two numbers\n", True),
    ],
)
def test_unit_ended(source, raw, ended):
    offset = source.index("|")
    ctx = build_context(source.replace("|", "", 1), offset, language_for("python"))
    assert unit_ended(raw, unit_end(ctx)) is ended


def test_pipeline_has_the_engine_stop_once_the_line_is_complete():
    texts = ["x", "x +", "x + 1\n", "x + 1\n    return", "x + 1\n    return y"]
    source = "def f(x):\n    y = |\n"
    request = CompletionRequest(source.replace("|", ""), source.index("|"),
                                language_for("python"))
    engine = Scripted(texts)
    completion = Pipeline(engine).complete(request)
    assert (completion.text, completion.steps, engine.taken) == ("x + 1", 3, 3)
    assert engine.until == UnitEnd("line")

    engine = Scripted(texts)
    with ThreadPoolExecutor(1) as executor:
        completion = asyncio.run(Pipeline(StepsOnWorker(engine, executor)).complete_async(request))
    assert (completion.text, completion.steps, engine.taken) == ("x + 1", 3, 3)


def test_parse_error_repaired_by_dropping_lines():
    result = run("python", "def f(x):\n    |\n", "y = x + 1\n    return y +")
    assert result == Suggestion("y = x + 1", 0)


def test_cache_serves_the_rest_while_typing_through():
    cache = CompletionCache()
    text = "def f(x):\n    return \n"
    cursor = text.index("return ") + len("return ")
    cache.put("file:///a.py", text, cursor, Suggestion("x + 1", 0))

    typed = text[:cursor] + "x +" + text[cursor:]
    assert cache.get("file:///a.py", typed, cursor + 3) == Suggestion(" 1", 0)
    assert cache.get("file:///a.py", text, cursor) == Suggestion("x + 1", 0)
    # a different character, another document, or a changed suffix are misses
    assert cache.get("file:///a.py", text[:cursor] + "y" + text[cursor:], cursor + 1) is None
    assert cache.get("file:///b.py", typed, cursor + 3) is None
    assert cache.get("file:///a.py", typed + "z", cursor + 3) is None
    # typing the whole suggestion leaves nothing to serve
    done = text[:cursor] + "x + 1" + text[cursor:]
    assert cache.get("file:///a.py", done, cursor + 5) is None


def test_cache_is_bounded():
    cache = CompletionCache(capacity=2)
    for i in range(3):
        cache.put("u", f"doc{i} ", 5, Suggestion("abc", 0))
    assert cache.get("u", "doc0 ", 5) is None
    assert cache.get("u", "doc2 ", 5) == Suggestion("abc", 0)


def test_settings_parse():
    settings, errors = parse_settings({"dg-lsp": {
        "canvasLength": 128, "holeSize": {"block": 64}, "sampler": {"name": "entropy",
                                                                    "gamma": 0.2},
        "languages": ["python"], "debounceMs": 50}})
    assert errors == []
    assert settings.canvas_length == 128
    assert settings.hole_size["block"] == 64 and settings.hole_size["rest_of_line"] == 24
    assert (settings.sampler.sampler, settings.sampler.gamma) == ("entropy", 0.2)
    assert settings.enabled("python") and not settings.enabled("go")
    assert settings.debounce_ms == 50


def test_invalid_settings_keep_defaults_and_say_why():
    settings, errors = parse_settings({"canvasLength": "big", "sampler": {"name": "magic"},
                                       "holeSize": {"block": -1}, "colour": "red"})
    assert settings == Settings()
    assert errors == [
        "canvasLength: expected an integer in 64..8192, got 'big'",
        "sampler.name: expected one of topk, threshold, entropy, learned, got 'magic'",
        "holeSize.block: expected an integer in 1..1024, got -1",
        "colour: unknown setting",
    ]
    assert parse_settings([1, 2]) == (Settings(), ["settings must be an object, got list"])
