"""Suggestions that change what nobody asked for are refused (issue #32 items 4 and 5):
a completion or an edit that uses a name the file never defines or imports, and a rewrite
that renames the definition it rewrites or drops or renames its parameters. Over LSP:
tests/integration/test_names.py."""

from __future__ import annotations

import pytest

from dg_lsp.actions.rewrite import compute_edit
from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.completion.postprocess import postprocess
from dg_lsp.context import build_context
from dg_lsp.document.edit import RewriteError
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from tests.support.scripted import Scripted
from tests.support.targets import doc, target_of

MEAN = 'def mean(xs):\n    """The mean of xs."""\n    return |\n'


def shown(marked: str, raw: str, language: str = "python") -> str | None:
    """The completion shown for the model text `raw` at the `|` of `marked` (None: nothing)."""
    offset = marked.index("|")
    suggestion = postprocess(raw, build_context(marked.replace("|", "", 1), offset,
                                                language_for(language)))
    return None if suggestion is None else suggestion.text


# -- completions ------------------------------------------------------------------------------


@pytest.mark.parametrize(("marked", "kept", "refused"), [
    # imported under its alias, far above the cursor (the whole document counts)
    ("import numpy as np\n" + "\n" * 200 + MEAN, "np.sum(xs) / len(xs)", "jnp.sum(xs)"),
    # a parameter, and names the suggestion binds itself (for target, lambda parameter)
    (MEAN, "sum(xs) / len(xs)", "sum(ys) / len(xs)"),
    ("def f(xs):\n    total = 0\n    |\n", "for i in xs: total += i", "for i in xs: total += j"),
    ("def f(xs):\n    return sorted(xs, |)\n", "key=lambda v: -v", "key=lambda v: -w"),
    # attributes and keyword argument names are not names the file must know
    ("class A:\n    def f(self, x):\n        return |\n", "self.jnp(x.jnp, axis=0)",
     "jnp(x, axis=0)"),
    # the word the cursor is in: `jn|` + `p.sum(x)` uses `jnp`
    ("import jax.numpy as jnp\ndef f(x):\n    return jn|\n", "p.sum(x)", None),
    ("def f(x):\n    return jn|\n", None, "p.sum(x)"),
    # broken syntax elsewhere in the document refuses nothing good
    ("x = (1,\ndef f(xs):\n    return |\n", "len(xs)", "jnp.sum(xs)"),
])
def test_a_completion_using_a_name_the_file_does_not_know_is_not_shown(marked, kept, refused):
    if kept is not None:
        assert shown(marked, kept) == kept
    if refused is not None:
        assert shown(marked, refused) is None


def test_the_mean_example_of_the_issue_through_the_pipeline():
    source = MEAN.replace("|", "")
    request = CompletionRequest(source, MEAN.index("|"), language_for("python"))
    assert Pipeline(Scripted(["jnp.sum(xs)"])).complete(request) is None
    numpy = "import numpy as np\n\n\n"
    request = CompletionRequest(numpy + source, len(numpy) + MEAN.index("|"),
                                language_for("python"))
    assert Pipeline(Scripted(["np.sum(xs)"])).complete(request).text == "np.sum(xs)"


def test_builtins_dunders_and_wildcard_imports_are_known_and_other_languages_unchecked():
    assert shown(MEAN, "print(__name__, len(xs))") == "print(__name__, len(xs))"
    assert shown(MEAN, "prnt(__name__, len(xs))") is None
    assert shown("from numpy import *\n" + MEAN, "jnp.sum(xs)") == "jnp.sum(xs)"
    assert shown("function f(xs) {\n  return |\n}\n", "jnp.sum(xs);", "javascript") == \
        "jnp.sum(xs);"


# -- edits ------------------------------------------------------------------------------------

WORD_COUNT = '''def word_count(text):
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
'''
COUNTER = '''def word_count(text):
    counts = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts'''


def rewrite(new: str, instruction: str | None = None) -> str:
    """The edit's text, or the reason it was refused."""
    d = doc(WORD_COUNT)
    target = target_of(d, 0, len(WORD_COUNT))
    try:
        return compute_edit(Scripted(new), d, target, Settings(), instruction, 1.0).text
    except RewriteError as refused:
        return str(refused)


def test_an_edit_using_a_name_the_file_does_not_know_is_refused_unless_the_instruction_names_it():
    new = COUNTER.replace("counts = {}", "counts = Counter()")
    assert rewrite(new) == ("the model's version uses `Counter`, which this file never "
                            "defines or imports")
    assert rewrite(new, "use collections.Counter") == new


@pytest.mark.parametrize(("new", "instruction", "result"), [
    (COUNTER.replace("word_count", "read_lines"), None,
     "the model's version renames `word_count` to `read_lines`"),
    (COUNTER.replace("word_count", "read_lines"), "use collections.Counter",
     "the model's version renames `word_count` to `read_lines`"),
    (COUNTER.replace("word_count", "read_lines"), "rename it to read_lines", None),
    (COUNTER.replace("word_count", "read_lines"), "call it read_lines", None),
    (COUNTER.replace("(text)", "(s)").replace("text.split", "s.split"), None,
     "the model's version renames parameter `text` of `word_count` to `s`"),
    (COUNTER.replace("(text)", "(text, sep)"), None, None),  # an added parameter is kept
    (COUNTER.replace("(text)", "()"), None, "the model's version drops parameter `text` of "
     "`word_count`"),
    (COUNTER.replace("(text)", "()"), "drop text, read a constant", None),
    ("counts = {}", None, "the model's version removes `word_count`"),
    (COUNTER.replace("{}", "dict()"), None, None),  # the body changed, the signature kept
])
def test_a_rewrite_keeps_the_signature_unless_the_instruction_asks(new, instruction, result):
    assert rewrite(new, instruction) == (new if result is None else result)
