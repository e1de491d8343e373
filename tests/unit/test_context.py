"""Context extraction: hole kinds, syntax-aligned windows, other-file snippets, languages."""

from __future__ import annotations

import pytest

from dg_lsp.context import (
    BLOCK,
    BRACKETS,
    COMMENT,
    REST_OF_LINE,
    OtherDocument,
    build_context,
    detect_indent_unit,
)
from dg_lsp.repository.candidates import MAX_CANDIDATES, REPEATS_SPAN
from dg_lsp.syntax.languages import language_for


def ctx_at(language_id: str | None, marked: str, **kwargs):
    """Context for `marked`, a source with `|` at the cursor."""
    offset = marked.index("|")
    return build_context(marked.replace("|", "", 1), offset, language_for(language_id), **kwargs)


@pytest.mark.parametrize(
    "language_id, source, kind, closer, base_indent",
    [
        ("python", "def f(x):\n    |\n", BLOCK, None, ""),
        ("python", "class A:\n    def f(self):|\n", BLOCK, None, "    "),
        ("python", "def f(x):\n    y = x + |\n", REST_OF_LINE, None, "    "),
        ("python", "def f(x):\n    return g(x, |)\n", BRACKETS, ")", "    "),
        ("python", "def f(x):\n    # compute the |\n    pass\n", COMMENT, None, "    "),
        ("python", "x = {\n    |\n}\n", BRACKETS, "}", ""),
        ("javascript", "function f(a) {\n  |\n}\n", BLOCK, None, ""),
        ("javascript", "function f(a) {\n  return g(a, |);\n}\n", BRACKETS, ")", "  "),
        ("javascript", "function f(a) {\n  return |\n}\n", REST_OF_LINE, None, "  "),
        ("javascript", "// say |\nf();\n", COMMENT, None, ""),
        ("typescript", "function f(a: number): number {\n  |\n}\n", BLOCK, None, ""),
        ("typescriptreact", "const C = () => f([1, |]);\n", BRACKETS, "]", ""),
        ("rust", "fn f(a: i32) -> i32 {\n    let v = vec![1, |];\n}\n", BRACKETS, "]", "    "),
        ("rust", "impl S {\n    fn m(&self) {|\n}\n", BLOCK, None, "    "),
        ("go", "package main\nfunc f(a int) int {\n\t|\n}\n", BLOCK, None, ""),
        ("go", "package main\nfunc f(a int) int {\n\treturn g(|)\n}\n", BRACKETS, ")", "\t"),
        (None, "abc |def", REST_OF_LINE, None, ""),
    ],
)
def test_hole_kind(language_id, source, kind, closer, base_indent):
    ctx = ctx_at(language_id, source)
    assert (ctx.kind, ctx.closer, ctx.base_indent) == (kind, closer, base_indent)


def test_line_parts_and_previous_line():
    ctx = ctx_at("python", "a = 1\n\nb = g(a|, 2)\n")
    assert (ctx.line_prefix, ctx.line_suffix, ctx.previous_line) == ("b = g(a", ", 2)", "a = 1")


def test_what_the_files_other_lines_hold_at_the_cursor_nearest_first():
    source = ("def a(iterable):\n    it = iter(iterable)\n    return it\n\n"
              "def b(iterable, n):\n    it = |\n    return islice(it, n)\n\n"
              "def c(xs):\n    it = iter(xs)\n    it = iter(iterable)\n        it = deep\n")
    ctx = ctx_at("python", source)
    # nearest lines first (above before below at the same distance), each text once,
    # indented alike or not
    assert ctx.repeats == ("iter(iterable)", "iter(xs)", "deep")
    # the rest of the line must match too: inside `g(|)` only `)`-ended lines count
    ctx = ctx_at("python", "g(a)\ng(b, c)\nh(d)\ng(|)\n")
    assert (ctx.kind, ctx.repeats) == (BRACKETS, ("b, c", "a"))


@pytest.mark.parametrize("source", [
    "x = 1\ny = 2\n|\n",  # a line's start: every line would match
    "def f():\n    x = 1\n    |\n",  # a block's body
    "# x = 1\n# x = |\n",  # a comment
])
def test_no_texts_at_a_lines_start_a_block_or_a_comment(source):
    assert ctx_at("python", source).repeats == ()


def test_texts_come_from_the_lines_within_reach_of_the_cursor():
    filler = "pass\n" * (REPEATS_SPAN // 5)
    ctx = ctx_at("python", "x = far\n" + filler + "x = near\nx = |\n" + filler + "x = after\n")
    assert ctx.repeats == ("near",)


def test_at_most_max_candidates_texts_and_none_longer_than_a_compared_line():
    lines = [f"v = f({i})" for i in range(30)] + ["v = " + "y" * 201]
    ctx = ctx_at("python", "\n".join(lines) + "\nv = |\n")
    # nearest first
    assert ctx.repeats == tuple(f"f({i})" for i in range(29, 29 - MAX_CANDIDATES, -1))


def test_small_file_is_whole_context():
    ctx = ctx_at("python", "import os\n\ndef f():\n    return |\n\nprint(f())\n")
    assert ctx.prefix == "import os\n\ndef f():\n    return "
    assert ctx.suffix == "\n\nprint(f())\n"


def test_windows_cut_at_statement_boundaries():
    defs = "".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(50))
    after = "".join(f"def h{i}(x):\n    return x * {i}\n\n" for i in range(50))
    ctx = ctx_at("python", f"import os\n\n{defs}def g(y):\n    return |\n\n{after}",
                 budget_chars=200, suffix_fraction=0.25)
    # 150 characters of prefix: whole definitions, starting on a `def` line
    assert ctx.prefix == ("def f46(x):\n    return x + 46\n\ndef f47(x):\n    return x + 47\n\n"
                          "def f48(x):\n    return x + 48\n\n"
                          "def f49(x):\n    return x + 49\n\ndef g(y):\n    return ")
    # 50 characters of suffix: ends on the last line of a definition
    assert ctx.suffix == "\n\ndef h0(x):\n    return x * 0"


def test_window_never_cuts_inside_a_multiline_string():
    doc = 'x = """\n' + "text line\n" * 30 + '"""\n' + "y = 2\nz = |\n"
    ctx = ctx_at("python", doc, budget_chars=120, suffix_fraction=0.25)
    assert ctx.prefix == "y = 2\nz = "


def test_unknown_language_cuts_at_lines():
    doc = "".join(f"line {i}\n" for i in range(100)) + "last |"
    ctx = ctx_at("plaintext", doc, budget_chars=40, suffix_fraction=0.25)
    assert ctx.prefix == "line 97\nline 98\nline 99\nlast "
    assert ctx.kind == REST_OF_LINE


def test_huge_line_cut_by_characters():
    ctx = ctx_at("python", "x = '" + "a" * 5000 + "|'\n", budget_chars=100, suffix_fraction=0.25)
    assert ctx.prefix == "a" * 75
    assert ctx.suffix == "'\n"


def test_other_documents_are_marked_as_other_files():
    others = [OtherDocument("util.py", "def helper(a):\n    return a\n"),
              OtherDocument("unrelated.py", "zzz = 1\n")]
    ctx = ctx_at("python", "def g(helper):\n    return |\n", other_documents=others)
    assert ctx.prefix == ("# Compare this snippet from util.py:\n# def helper(a):\n"
                          "#     return a\ndef g(helper):\n    return ")
    assert ctx.prefix_window == "def g(helper):\n    return "


def test_other_documents_need_remaining_budget():
    others = [OtherDocument("util.py", "def helper(a):\n    return a\n")]
    doc = "".join(f"helper{i} = {i}\n" for i in range(100)) + "x = helper|"
    ctx = ctx_at("python", doc, other_documents=others, budget_chars=200)
    assert "Compare this snippet" not in ctx.prefix


@pytest.mark.parametrize(
    "text, unit",
    [
        ("def f():\n    if x:\n        pass\n", "    "),
        ("function f() {\n  if (x) {\n    y();\n  }\n}\n", "  "),
        ("func f() {\n\tif x {\n\t\ty()\n\t}\n}\n", "\t"),
    ],
)
def test_indent_unit(text, unit):
    assert detect_indent_unit(text) == unit


@pytest.mark.parametrize(
    "language_id, uri, name",
    [
        ("python", "", "python"),
        ("typescriptreact", "", "tsx"),
        ("javascriptreact", "", "javascript"),
        (None, "file:///a/b/main.rs", "rust"),
        ("", "file:///a/b/main.go", "go"),
        ("unknown-lang", "file:///x/y.ts", "typescript"),
        ("plaintext", "file:///x/notes.txt", None),
    ],
)
def test_language_for(language_id, uri, name):
    spec = language_for(language_id, uri)
    assert (spec.name if spec else None) == name


def test_block_opener_after_a_docstring_the_parsed_region_cuts_in_half():
    # Only a few budgets around the cursor are parsed; here that region starts inside the
    # docstring, so the parser reads the code after it as a string. The cursor still ends a
    # block header.
    docstring = '    """' + "".join(f"    line {i} of the docs\n" for i in range(60)) + '    """\n'
    source = (f"class A:\n{docstring}\n    def peek(self):|\n        return 1\n\n"
              f'    def poke(self):\n        """Poke."""\n        return 2\n')
    offset = source.index("|")
    ctx = build_context(source.replace("|", "", 1), offset, language_for("python"), 200)
    assert (ctx.kind, ctx.base_indent) == (BLOCK, "    ")
