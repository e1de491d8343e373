"""Post-processing of raw hole text, the completion cache and settings parsing."""

from __future__ import annotations

import pytest

from dg_lsp.cache import CompletionCache
from dg_lsp.context import build_context
from dg_lsp.languages import language_for
from dg_lsp.postprocess import Suggestion, postprocess
from dg_lsp.settings import Settings, parse_settings


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
        ("python", "def f(x):\n    return g(x, |)\n", "y, z)\n", "y, z", 0),
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
    ],
)
def test_rejected(language_id, source, raw):
    assert run(language_id, source, raw) is None


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
        "canvasLength: expected an integer in 32..8192, got 'big'",
        "sampler.name: expected one of topk, threshold, entropy, got 'magic'",
        "holeSize.block: expected an integer in 1..1024, got -1",
        "colour: unknown setting",
    ]
    assert parse_settings([1, 2]) == (Settings(), ["settings must be an object, got list"])
