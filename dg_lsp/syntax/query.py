"""Running a tree-sitter query over a tree in time linear in its nodes.

tree-sitter's query cursor can take time quadratic in the number of a node's children: a line
of 60,000 unclosed `[` parses (in milliseconds) into a module of 60,000 leaves, over which
actions.scm's two patterns took 3.4 s, and the junk of a fuzzed document half a minute,
holding the GIL, so the language server answered nothing else meanwhile. Searching a node of
more than WIDE children one child at a time (and the node itself for the patterns that start
there) finds the same matches in time linear in the tree. tree-sitter's own progress callback,
which could have bounded the search instead, crashed the process (tree-sitter 0.26.1).
"""

from __future__ import annotations

import tree_sitter as ts

# Children past which a node is searched child by child: a file of thousands of top-level
# functions costs the same either way; far fewer than where the cursor grows slow.
WIDE = 256

Match = tuple[int, dict[str, list[ts.Node]]]


def matches(query: ts.Query, node: ts.Node, byte_range: tuple[int, int] | None = None
            ) -> list[Match]:
    """`query`'s matches under `node` whose nodes meet `byte_range` (bytes [start, end)),
    ordered by where they start."""
    found: list[Match] = []
    for part, depth in _parts(node, byte_range):
        cursor = ts.QueryCursor(query)
        if byte_range is not None:
            cursor.set_byte_range(*byte_range)
        if depth is not None:
            cursor.set_max_start_depth(depth)
        found += cursor.matches(part)
    return found


def captures(query: ts.Query, node: ts.Node, byte_range: tuple[int, int] | None = None
             ) -> dict[str, list[ts.Node]]:
    """`query`'s captures under `node` by name, found as `matches` finds them."""
    found: dict[str, list[ts.Node]] = {}
    for _, caps in matches(query, node, byte_range):
        for name, nodes in caps.items():
            found.setdefault(name, []).extend(nodes)
    return found


def _parts(node: ts.Node, byte_range: tuple[int, int] | None
           ) -> list[tuple[ts.Node, int | None]]:
    """The nodes to search, each with the depth its matches may start at (None: any): a wide
    node itself (depth 0), then each of its children in turn (those that meet `byte_range`),
    split the same way; a stack, not recursion, as a broken file may nest deep."""
    parts: list[tuple[ts.Node, int | None]] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if current.child_count <= WIDE:
            parts.append((current, None))
            continue
        parts.append((current, 0))
        stack.extend(reversed(_children(current, byte_range)))
    return parts


def _children(node: ts.Node, byte_range: tuple[int, int] | None) -> list[ts.Node]:
    """`node`'s children that meet `byte_range`, from the first that reaches its start
    (tree-sitter's own search), stepping with a tree cursor: a node's next_sibling searches
    its parent's children again, which over a wide node is the quadratic cost avoided here."""
    if byte_range is None:
        return node.children
    start, end = byte_range
    cursor = node.walk()
    if cursor.goto_first_child_for_byte(start) is None:
        return []
    found = []
    while cursor.node.start_byte <= end:
        found.append(cursor.node)
        if not cursor.goto_next_sibling():
            break
    return found
