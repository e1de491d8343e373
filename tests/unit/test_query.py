"""Queries searched part by part (dg_lsp.syntax.query): the same matches as tree-sitter's own
search of the whole tree, and never a node of more than WIDE children handed to a cursor that
may start matches below it, where tree-sitter's search turns quadratic (a fuzzed document of
junk took half a minute per code action and held every other request behind it)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tree_sitter as ts

from dg_lsp.document.parsed import ParsedText
from dg_lsp.syntax import query
from dg_lsp.syntax.languages import language_for

ROOT = Path(__file__).resolve().parents[2]
PYTHON = language_for("python")
WIDE_FILE = "".join(f"def f{i}(x):\n    ...\n\n\nclass C{i}:\n    pass\n" for i in range(600))
BRACKETS = "[" * 5000 + "\ndef after(x):\n    return x\n"


def whole_tree_matches(q: ts.Query, node: ts.Node, byte_range=None) -> list:
    cursor = ts.QueryCursor(q)
    if byte_range is not None:
        cursor.set_byte_range(*byte_range)
    return cursor.matches(node)


def key(found: list) -> list:
    """Matches as comparable values: the pattern and each capture's nodes' spans."""
    return sorted((pattern, sorted((name, [(n.start_byte, n.end_byte) for n in nodes])
                                   for name, nodes in caps.items()))
                  for pattern, caps in found)


@pytest.mark.parametrize("name", ["actions", "holes", "context", "names", "signature"])
@pytest.mark.parametrize("text", [WIDE_FILE, BRACKETS,
                                  (ROOT / "dg_lsp" / "context.py").read_text()],
                         ids=["wide", "brackets", "context.py"])
def test_the_same_matches_as_searching_the_whole_tree(name, text):
    q = PYTHON.query(name)
    tree = PYTHON.parser().parse(text.encode())
    assert key(query.matches(q, tree.root_node)) == key(whole_tree_matches(q, tree.root_node))
    middle = len(text.encode()) // 2
    for byte_range in [(0, 1), (middle, middle + 1), (middle - 300, middle + 300),
                       (100, len(text.encode()) - 100)]:
        assert key(query.matches(q, tree.root_node, byte_range)) == key(
            whole_tree_matches(q, tree.root_node, byte_range)), byte_range


def test_no_wide_node_is_searched_below_itself(monkeypatch):
    searched: list[tuple[int, int | None]] = []
    cursor_type = ts.QueryCursor

    class Recording:
        """tree-sitter's cursor, recording each search (its type cannot be subclassed)."""

        def __init__(self, q: ts.Query) -> None:
            self.cursor, self.depth = cursor_type(q), None

        def set_byte_range(self, start: int, end: int) -> None:
            self.cursor.set_byte_range(start, end)

        def set_max_start_depth(self, depth: int) -> None:
            self.depth = depth
            self.cursor.set_max_start_depth(depth)

        def matches(self, node: ts.Node) -> list:
            searched.append((node.child_count, self.depth))
            return self.cursor.matches(node)

    monkeypatch.setattr(query.ts, "QueryCursor", Recording)
    doc = ParsedText("[" * 60_000, PYTHON)
    assert doc.tree.root_node.child_count == 60_000
    assert doc.definitions() == []
    assert searched[0] == (60_000, 0)  # the module itself, for patterns starting there
    assert all(children <= query.WIDE for children, depth in searched if depth is None)
    assert len(searched) == 60_001


def test_definitions_around_and_after_a_wide_broken_region_are_found():
    text = "def f(:\n" * 1000 + "def after(x):\n    return x\n"
    doc = ParsedText(text, PYTHON)
    assert doc.tree.root_node.child_count > query.WIDE
    names = [name for _, _, _, name in doc.definitions()]
    assert (len(names), names[-2:]) == (1001, ["f", "after"])
    at = text.index("return")
    assert [name for _, _, _, name in doc.definitions(start=at, end=at)] == ["after"]
