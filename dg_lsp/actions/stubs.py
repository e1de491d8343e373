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
from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.actions.targets import ParsedText, is_docstring

QUERY = "holes"
STATEMENT, BODY = "statement", "body"  # Stub.size: a line or two, or a whole body
_MARKED = re.compile(r"\b(TODO|FIXME)\b")
_DECLARING = re.compile(r"@\s*(\w+\.)*(abstractmethod|overload)\b")


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
    if doc.tree is None or not doc.language.has_query(QUERY):
        return []
    functions = [(node, body, name) for kind, node, body, name in doc.definitions()
                 if kind == "function" and body is not None]
    if not functions:
        return []
    declaring_file = doc.uri.endswith(".pyi")
    found: dict[int, Stub] = {}
    captures = ts.QueryCursor(doc.language.query(QUERY)).captures(doc.tree.root_node)
    for capture in ("stub", "stub.marked", "comment"):
        for node in captures.get(capture, []):
            inner = _innermost(functions, node)
            if inner is None:
                continue
            stub = _stub(doc, node, capture, inner, functions)
            if stub is None or stub.start in found:
                continue
            if capture == "stub" and not stub.note and (
                    declaring_file or _declares_only(doc, inner[0])):
                continue
            found[stub.start] = stub
    return [found[start] for start in sorted(found)]


def stubs_in(doc: ParsedText, start: int, end: int) -> list[Stub]:
    """The stub holes whose span meets [start, end] (a cursor when equal)."""
    return [s for s in find_stubs(doc) if s.start <= end and start <= s.end]


def _stub(doc: ParsedText, node: ts.Node, capture: str,
          inner: tuple[ts.Node, ts.Node, str], functions: list) -> Stub | None:
    """The hole `node` makes where it stands alone on its line; None elsewhere."""
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
    function, body, name = inner
    size = BODY if _only_stubs(doc, body, capture) else STATEMENT
    outer = next(doc.span(f) for f, _, _ in functions
                 if f.start_byte <= node.start_byte and node.end_byte <= f.end_byte)
    return Stub(start, line_end, text[line_start:start], note, size, name, outer,
                text.count("\n", 0, start))


def _innermost(functions: list, node: ts.Node) -> tuple[ts.Node, ts.Node, str] | None:
    """The innermost (function, body, name) whose body holds `node`."""
    holding = [f for f in functions
               if _body_start(*f[:2]) <= node.start_byte and node.end_byte <= f[1].end_byte]
    return min(holding, key=lambda f: f[1].end_byte - f[1].start_byte, default=None)


def _body_start(function: ts.Node, body: ts.Node) -> int:
    """Where the body begins: after Python's `:` (a comment on the body's first line belongs
    to the function there, not to its block), else at the body's own start."""
    colon = next((c for c in function.children if c.type == ":"), None)
    return colon.end_byte if colon is not None else body.start_byte


def _only_stubs(doc: ParsedText, body: ts.Node, capture: str) -> bool:
    """Whether the body holds nothing but comments, a docstring and this one stub."""
    children = body.named_children
    if len(children) == 1 and children[0].type == "statement_list":  # Go's
        children = children[0].named_children
    statements = [child for child in children if "comment" not in child.type]
    if statements and is_docstring(statements[0]):
        statements = statements[1:]
    return not statements or (len(statements) == 1 and capture != "comment")


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
