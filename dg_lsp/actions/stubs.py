"""Stub holes: the lines of a function's body that stand for code still to write.

tree-sitter finds the candidates with the query beside each language
(`grammars/<language>/holes.scm`); a candidate is a hole only when it stands alone on its line
inside a function's body (the definitions of `actions.scm`):

- `@stub`: a statement that means "code here": Python's `...`, Rust's `todo!()` and
  `unimplemented!()`;
- `@stub.marked`: one only where its line carries a TODO or FIXME comment (Python's
  `pass  # TODO`);
- `@comment`: a comment that says TODO or FIXME.

A hole's span is its line from the indentation to the line's end (a trailing comment
included): a fill replaces the whole stub. Its comment (`note`) is what the user wrote about
the code to come: the model reads it on its own line above the hole.

A bare `...` that only declares (a Protocol's method, an `@abstractmethod` or `@overload`, a
`.pyi` stub file) is no hole: nothing is missing there.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.actions.targets import is_docstring
from dg_lsp.document.parsed import ParsedText
from dg_lsp.syntax.query import captures

QUERY = "holes"
CAPTURES = ("stub", "stub.marked", "comment")
STATEMENT, BODY = "statement", "body"  # Stub.size: a line or two, or a whole body
_MARKED = re.compile(r"\b(TODO|FIXME)\b")
_DECLARING = re.compile(r"@\s*(\w+\.)*(abstractmethod|overload)\b")
Function = tuple[ts.Node, ts.Node, str]  # a function's node, its body, its name


@dataclass(frozen=True)
class Stub:
    start: int  # characters of the document: the stub from its indentation to its line's end
    end: int
    indent: str  # the line's indentation
    note: str  # its TODO / FIXME comment ("" for none)
    size: str  # STATEMENT, or BODY where the function's body holds nothing else
    function: str  # the innermost function's name
    outer: tuple[int, int]  # the outermost function holding it (characters): one batch target
    line: int  # 0-based

    @property
    def where(self) -> str:
        """`line N` (1-based), as messages name a hole."""
        return f"line {self.line + 1}"


def find_stubs(doc: ParsedText) -> list[Stub]:
    """Every stub hole of the document, in document order."""
    return stubs_in(doc, 0, len(doc.text))


def stubs_in(doc: ParsedText, start: int, end: int) -> list[Stub]:
    """The stub holes whose span meets [start, end] (a cursor when equal), in document order.

    Only the lines of that range are searched (tree-sitter's byte range), and each candidate
    finds the functions holding it in one pass over both in document order: a code action at
    a cursor costs what the function there costs, and a whole file what its length does."""
    if doc.tree is None or not doc.language.has_query(QUERY):
        return []
    first = doc.line_start(start)
    last = doc.text.find("\n", end)
    last = len(doc.text) if last < 0 else last
    functions = [(node, body, name) for kind, node, body, name
                 in doc.definitions(start=first, end=last)
                 if kind == "function" and body is not None]
    if not functions:
        return []
    found_captures = captures(doc.language.query(QUERY), doc.tree.root_node,
                              (doc.byte(first), doc.byte(last) + 1))
    # Where two captures make the same hole, the first of CAPTURES names it.
    candidates = sorted(((node, capture) for capture in CAPTURES
                         for node in found_captures.get(capture, [])),
                        key=lambda c: (c[0].start_byte, CAPTURES.index(c[1])))
    declaring_file = doc.uri.endswith(".pyi")
    statements: dict[int, int] = {}  # body id -> _statements(body), once per body
    found: dict[int, Stub] = {}
    holding = _holders(functions, [node for node, _ in candidates])
    for (node, capture), holders in zip(candidates, holding, strict=True):
        inner = next((f for f in reversed(holders) if _body_start(*f[:2]) <= node.start_byte
                      and node.end_byte <= f[1].end_byte), None)
        if inner is None:
            continue
        body = inner[1]
        if body.id not in statements:
            statements[body.id] = _statements(body)
        stub = _stub(doc, node, capture, inner, doc.span(holders[0][0]), statements[body.id])
        if stub is None or stub.start in found or not (stub.start <= end and start <= stub.end):
            continue
        if capture == "stub" and not stub.note and (
                declaring_file or _declares_only(doc, inner[0])):
            continue
        found[stub.start] = stub
    return [found[at] for at in sorted(found)]


def _holders(functions: list[Function], nodes: list[ts.Node]) -> Iterator[list[Function]]:
    """The functions holding each of `nodes` (in document order), outermost first.

    One sweep: the functions open at a node are a stack of nested ones (tree nodes nest), so
    each function is pushed and popped once and a node looks only at those around it."""
    pending = sorted(functions, key=lambda f: f[0].start_byte)
    stack: list[Function] = []
    i = 0
    for node in nodes:
        while stack and stack[-1][0].end_byte <= node.start_byte:
            stack.pop()
        while i < len(pending) and pending[i][0].start_byte <= node.start_byte:
            while stack and stack[-1][0].end_byte <= pending[i][0].start_byte:
                stack.pop()
            stack.append(pending[i])
            i += 1
        yield [f for f in stack if f[0].start_byte <= node.start_byte
               and node.end_byte <= f[0].end_byte]


def _stub(doc: ParsedText, node: ts.Node, capture: str, inner: Function,
          outer: tuple[int, int], statements: int) -> Stub | None:
    """The hole `node` makes where it stands alone on its line; None elsewhere. `outer`: the
    outermost function holding it (characters), `statements`: those of `inner`'s body."""
    text = doc.text
    start, node_end = doc.span(node)
    line_start = doc.line_start(start)
    line_end = text.find("\n", start)
    line_end = len(text) if line_end < 0 else line_end
    if text[line_start:start].strip() or text.count("\n", start, node_end):
        return None
    rest = text[node_end:line_end].strip()
    comment = doc.language.line_comment
    if capture == "comment":
        note = text[start:node_end].strip()
        if rest or not _MARKED.search(note):
            return None
    else:
        rest = rest.removeprefix(";").strip()
        if rest and not rest.startswith(comment):
            return None
        note = rest if _MARKED.search(rest) else ""
        if capture == "stub.marked" and not note:
            return None
    # the body holds nothing but comments, a docstring and this one stub
    only = statements == 0 or (statements == 1 and capture != "comment")
    # tree-sitter counts rows at "\n" as Stub.line does: no count from the file's start
    return Stub(start, line_end, text[line_start:start], note, BODY if only else STATEMENT,
                inner[2], outer, node.start_point.row)


def _body_start(function: ts.Node, body: ts.Node) -> int:
    """Where the body begins: after Python's `:` (a comment on the body's first line belongs
    to the function there, not to its block), else at the body's own start."""
    colon = next((c for c in function.children if c.type == ":"), None)
    return colon.end_byte if colon is not None else body.start_byte


def _statements(body: ts.Node) -> int:
    """How many statements the body holds besides comments and a docstring."""
    children = body.named_children
    if len(children) == 1 and children[0].type == "statement_list":  # Go's
        children = children[0].named_children
    statements = [child for child in children if "comment" not in child.type]
    if statements and is_docstring(statements[0]):
        statements = statements[1:]
    return len(statements)


def _declares_only(doc: ParsedText, function: ts.Node) -> bool:
    """Whether a Python function is a declaration that `...` completes: an abstract method,
    an overload, a method of a Protocol."""
    if doc.language.name != "python":
        return False
    outer = function.parent if function.parent is not None and (
        function.parent.type == "decorated_definition") else function
    decorators = doc.text[doc.char(outer.start_byte) : doc.char(function.start_byte)]
    if _DECLARING.search(decorators):
        return True
    block = outer.parent
    klass = block.parent if block is not None else None
    if klass is None or klass.type != "class_definition":
        return False
    bases = klass.child_by_field_name("superclasses")
    return bases is not None and "Protocol" in doc.text[slice(*doc.span(bases))]
