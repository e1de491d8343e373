"""How broken a parse is: the ERROR and MISSING nodes of a tree-sitter tree.

A feature keeps what the model wrote only where it parses no worse than the text before it
(completions, code actions, next edits); all of them count here.
"""

from __future__ import annotations

import tree_sitter as ts


def count_errors(tree: ts.Tree | None) -> int:
    """ERROR and MISSING nodes of `tree` (0 without one: no grammar). The children of every
    node that holds an error are looked at, not only those that say they hold one: tree-sitter
    marks some ERROR nodes as holding no error (`has_error` false), and they count too."""
    if tree is None:
        return 0
    count, stack = 0, [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            count += 1
        if node.has_error:
            stack.extend(node.children)
    return count
