"""Incremental parsing: the kept tree after the client's edits is the tree of the new text."""

from __future__ import annotations

import pytest
from lsprotocol import types

from dg_lsp.lsp.documents import Change, Documents
from dg_lsp.lsp.trees import DocumentTrees
from dg_lsp.syntax.languages import language_for

PYTHON = language_for("python")
UTF16 = types.PositionEncodingKind.Utf16
SOURCE = 's = "é🎉"\n\ndef f(x):\n    return x + 1\n\n\nclass C:\n    pass\n'


def change(start: tuple[int, int], end: tuple[int, int], text: str):
    return types.TextDocumentContentChangePartial(
        range=types.Range(types.Position(*start), types.Position(*end)), text=text)


def apply(trees: DocumentTrees, changes: list, uri: str = "file:///a.py",
          source: str = SOURCE) -> None:
    # the server's path: its document store converts the client's positions to offsets
    documents = Documents()
    documents.open(types.TextDocumentItem(uri, "python", 1, source))
    trees.change(uri, documents.change(uri, 2, changes, UTF16))


def fresh(text: str) -> str:
    return str(PYTHON.parser().parse(text.encode()).root_node)


@pytest.mark.parametrize("changes, expected", [
    # a keystroke after multi-byte characters (UTF-16 columns: the emoji is two units)
    ([change((0, 8), (0, 8), "!")], SOURCE.replace('🎉"', '🎉!"')),
    # a line typed inside the function, then the class renamed
    ([change((3, 16), (3, 16), "\n    y = x"), change((7, 6), (7, 7), "Klass")],
     's = "é🎉"\n\ndef f(x):\n    return x + 1\n    y = x\n\n\nclass Klass:\n    pass\n'),
    # a multi-line deletion that breaks the syntax, then the whole text replaced
    ([change((2, 0), (4, 0), "def (")], 's = "é🎉"\n\ndef (\n\nclass C:\n    pass\n'),
    ([change((0, 0), (0, 0), "x"), types.TextDocumentContentChangeWholeDocument("y = 1\n")],
     "y = 1\n"),
])
def test_kept_tree_after_edits_is_the_tree_of_the_new_text(changes, expected):
    trees = DocumentTrees()
    trees.open("file:///a.py", SOURCE, PYTHON)
    trees.tree("file:///a.py", SOURCE, PYTHON)  # a request parsed it
    apply(trees, changes)
    assert trees.text("file:///a.py") == expected
    kept = trees.tree("file:///a.py", expected, PYTHON)
    assert str(kept.root_node) == fresh(expected)
    assert (trees.full_parses, trees.incremental_parses) == (1, 1)


def test_a_change_the_store_cannot_follow_falls_back_to_a_fresh_parse():
    trees = DocumentTrees()
    trees.open("file:///a.py", SOURCE, PYTHON)
    trees.change("file:///a.py", [Change(len(SOURCE) + 5, len(SOURCE) + 6, "x")])
    assert trees.text("file:///a.py") is None
    assert str(trees.tree("file:///a.py", "z = 2\n", PYTHON).root_node) == fresh("z = 2\n")
    assert trees.full_parses == 1
    # a text the kept tree was not parsed from is parsed, never answered with a stale tree
    assert str(trees.tree("file:///a.py", "w = 3\n", PYTHON).root_node) == fresh("w = 3\n")


def test_unknown_language_keeps_no_tree():
    trees = DocumentTrees()
    trees.open("file:///a.txt", "words", None)
    apply(trees, [change((0, 0), (0, 0), "x")], "file:///a.txt", "words")
    assert trees.tree("file:///a.txt", "xwords", None) is None
    assert trees.full_parses == 0


def test_keystrokes_parse_nothing_until_a_request_needs_the_tree():
    trees = DocumentTrees()
    trees.open("file:///a.py", SOURCE, PYTHON)
    assert (trees.full_parses, trees.incremental_parses) == (0, 0)
    trees.tree("file:///a.py", SOURCE, PYTHON)
    for column in range(8, 11):
        apply(trees, [change((3, column), (3, column), "x")], source=trees.text("file:///a.py"))
    assert (trees.full_parses, trees.incremental_parses) == (1, 0)
    expected = SOURCE.replace("return x", "retuxxxrn x")
    assert str(trees.tree("file:///a.py", expected, PYTHON).root_node) == fresh(expected)
    assert (trees.full_parses, trees.incremental_parses) == (1, 1)


def test_a_tree_handed_out_is_not_changed_by_later_edits():
    """A code action reads its tree on a thread while the user types: the tree it got stays
    the tree of the text it asked about."""
    trees, uri = DocumentTrees(), "file:///a.py"
    trees.open(uri, SOURCE, PYTHON)
    handed = trees.tree(uri, SOURCE, PYTHON)
    before = str(handed.root_node)
    apply(trees, [change((2, 4), (2, 5), "renamed"), change((0, 0), (0, 0), "import os\n")])
    assert str(handed.root_node) == before == fresh(SOURCE)
    assert handed.root_node.children[1].start_point == (2, 0)  # not moved by the edits
    new = "import os\n" + SOURCE.replace("def f(", "def renamed(")
    assert str(trees.tree(uri, new, PYTHON).root_node) == fresh(new)
