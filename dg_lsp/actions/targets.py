"""Where the infill code actions apply, and the hole each one lays out.

A `Target` is one place an action can run: the span of the document it replaces, and the text
the model reads around its hole there (an opening `\"\"\"` before a docstring, the indentation
of a body). tree-sitter finds them, with the queries in `grammars/<language>/actions.scm`:

- rewrite: any selection (its surrounding whitespace stays as it is);
- complete-body: a function whose body is empty, `pass`, `...`, a TODO comment,
  `raise NotImplementedError`, `todo!()` / `unimplemented!()`, or a "not implemented"
  `throw` / `panic`;
- docstring: a function or class without a docstring (Python) or doc comment (`/** */` in
  JavaScript and TypeScript, `///` in Rust, `// Name …` in Go);
- fix-syntax: a tree-sitter ERROR or MISSING region (whole lines, at most MAX_FIX_LINES).

The editor (code actions), the command line (`dg-lsp rewrite`) and batch mode all start here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import tree_sitter as ts

from dg_lsp.context import detect_indent_unit
from dg_lsp.document.parsed import ParsedText

REWRITE, COMPLETE_BODY = "rewrite", "complete-body"
DOCSTRING, FIX_SYNTAX = "docstring", "fix-syntax"
ACTIONS = (REWRITE, COMPLETE_BODY, DOCSTRING, FIX_SYNTAX)
# Every stub hole of a function, or of a selection, filled in one request (dg_lsp.actions.holes).
FILL_FUNCTION, FILL_SELECTION = "fill-holes", "fill-holes-selection"
TITLES = {
    REWRITE: "Rewrite selection",
    COMPLETE_BODY: "Complete function body",
    DOCSTRING: "Add docstring",
    FIX_SYNTAX: "Fix syntax error here",
    FILL_FUNCTION: "Fill every hole in this function",
    FILL_SELECTION: "Fill every hole in the selection",
}
MAX_FIX_LINES = 20  # a larger broken region is not one the model can repair in one hole
BODY_TOKENS, DOC_TOKENS = 96, 48

_STUB_LINE = re.compile(
    r"""^(pass|\.\.\.|;
    |raise\ NotImplementedError\b.*
    |(\#|//|/\*).*\b(TODO|todo|FIXME|XXX)\b.*
    |(todo|unimplemented)!\(.*\);?
    |throw\ new\ Error\(.*(implement|todo|TODO).*\);?
    |panic\(.*(implement|todo|TODO).*\)
    )$""",
    re.VERBOSE,
)


@dataclass
class Target:
    action: str
    start: int  # characters of the document this action replaces: text[start:end]
    end: int
    before: str = ""  # the replacement's text before the hole (the model reads it as prefix)
    after: str = ""  # the replacement's text after the hole (read as suffix)
    indent: str = ""  # indentation of the hole's lines after the first
    max_tokens: int = BODY_TOKENS
    name: str = ""  # the definition's name, where there is one

    @property
    def title(self) -> str:
        named = self.name and self.action not in (FILL_FUNCTION, FILL_SELECTION)
        return TITLES[self.action] + (f" of {self.name}" if named else "")


# -- the targets ------------------------------------------------------------------------------


def rewrite_target(text: str, start: int, end: int) -> Target | None:
    """The selection [start, end) without its surrounding whitespace; None when that is empty."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start == end:
        return None
    n = end - start
    return Target(REWRITE, start, end, max_tokens=max(16, n // 2 + 8))


def body_target(doc: ParsedText, node: ts.Node, body: ts.Node, name: str) -> Target | None:
    """The stub body of a function, as a hole; None when the body has real code."""
    text = doc.text
    indent = doc.indent_at(doc.char(node.start_byte))
    inner = indent + detect_indent_unit(text, doc.language)
    if doc.language.name == "python":
        statements = body.named_children
        first = 0
        if statements and is_docstring(statements[0]):
            first = 1
        rest = statements[first:]
        start = doc.char(statements[0].end_byte) if first else _colon_end(doc, body)
        end = doc.char(body.end_byte)
        if not all(_is_stub(text[slice(*doc.span(s))]) for s in rest):
            return None
        return Target(COMPLETE_BODY, start, end, before="\n" + inner, indent=inner, name=name)
    # braces: the hole is everything between { and }
    start, end = doc.char(body.start_byte) + 1, doc.char(body.end_byte) - 1
    if not text[start - 1 : start] == "{" or text[end : end + 1] != "}":
        return None
    if not _is_stub(text[start:end]):
        return None
    return Target(COMPLETE_BODY, start, end, before="\n" + inner, after="\n" + indent,
                  indent=inner, name=name)


def docstring_target(doc: ParsedText, node: ts.Node, body: ts.Node | None, name: str
                     ) -> Target | None:
    """Where the definition's docstring or doc comment goes; None when it has one."""
    text, lang = doc.text, doc.language.name
    if lang == "python":
        if body is None or (body.named_children and is_docstring(body.named_children[0])):
            return None
        inner = doc.indent_at(doc.char(node.start_byte)) + detect_indent_unit(text, doc.language)
        at = _colon_end(doc, body)
        return Target(DOCSTRING, at, at, before="\n" + inner + '"""\n' + inner,
                      after="\n" + inner + '"""', indent=inner, max_tokens=DOC_TOKENS, name=name)
    outer = node.parent if node.parent is not None and node.parent.type in (
        "export_statement", "decorated_definition") else node
    if _has_doc_comment(doc, outer):
        return None
    at = doc.line_start(doc.char(outer.start_byte))
    indent = doc.indent_at(at)
    if lang == "rust":
        before, after = indent + "/// ", "\n"
    elif lang == "go":
        before, after = indent + f"// {name} ", "\n"
    else:
        before, after = indent + "/**\n" + indent + " * ", "\n" + indent + " */\n"
    return Target(DOCSTRING, at, at, before=before, after=after, indent=indent,
                  max_tokens=DOC_TOKENS, name=name)


def syntax_targets(doc: ParsedText) -> list[Target]:
    """One target per broken region: the whole lines of each outermost ERROR/MISSING node."""
    if doc.tree is None or not doc.tree.root_node.has_error:
        return []
    text = doc.text
    # (first row, last row) -> characters from the first row's start to the last row's end
    regions: dict[tuple[int, int], tuple[int, int]] = {}
    stack = [doc.tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            rows = (node.start_point.row, node.end_point.row)
            if rows not in regions:
                start, end = doc.span(node)
                line_end = text.find("\n", end)
                regions[rows] = (doc.line_start(start), len(text) if line_end < 0 else line_end)
        elif node.has_error:
            stack.extend(node.children)
    targets: list[Target] = []
    reach = 0  # where the targets so far end: their starts only grow, in this order
    for (first, last), (start, end) in sorted(regions.items()):
        if last - first + 1 > MAX_FIX_LINES:
            continue
        target = rewrite_target(text, start, end)
        if target is not None and target.start >= reach:  # not inside an earlier one
            target.action = FIX_SYNTAX
            targets.append(target)
            reach = max(reach, target.end)
    return targets


def targets_at(doc: ParsedText, start: int, end: int) -> list[Target]:
    """The actions an editor offers for the selection [start, end) (a cursor when equal)."""
    found: list[Target] = []
    if end > start:
        target = rewrite_target(doc.text, start, end)
        if target is not None:
            found.append(target)
    innermost: dict[str, tuple[int, Target]] = {}
    for kind, node, body, name in doc.definitions(start=start, end=start):
        a, b = doc.span(node)
        candidates = []
        if kind == "function" and body is not None:
            candidates.append(body_target(doc, node, body, name))
        header_end = doc.char(body.start_byte) if body is not None else b
        if start <= header_end:  # a doc comment is offered on the definition's header
            candidates.append(docstring_target(doc, node, body, name))
        for target in candidates:
            if target is not None and (target.action not in innermost
                                       or b - a < innermost[target.action][0]):
                innermost[target.action] = (b - a, target)
    found += [target for _, target in innermost.values()]
    # lines compared by where they start: counting lines from the file's start for each
    # target cost a scan of the file per broken region
    line = doc.line_start(start)
    for target in syntax_targets(doc):
        if doc.line_start(target.start) <= line <= doc.line_start(target.end):
            found.append(target)
            break
    return found


def all_targets(doc: ParsedText, action: str, query: ts.Query | None = None) -> list[Target]:
    """Every place in the document `action` applies (batch mode), in document order;
    `query` replaces the language's actions.scm in finding definitions."""
    if action == FIX_SYNTAX:
        return syntax_targets(doc)
    found = []
    for kind, node, body, name in doc.definitions(query):
        target = None
        if action == COMPLETE_BODY and kind == "function" and body is not None:
            target = body_target(doc, node, body, name)
        elif action == DOCSTRING:
            target = docstring_target(doc, node, body, name)
        if target is not None:
            found.append(target)
    return sorted(found, key=lambda t: t.start)


# -- helpers ----------------------------------------------------------------------------------


def _is_stub(code: str) -> bool:
    lines = [ln.strip() for ln in code.strip().split("\n") if ln.strip()]
    return all(_STUB_LINE.match(ln) for ln in lines)


def is_docstring(statement: ts.Node) -> bool:
    """Whether a Python statement is a string alone (a docstring where it opens a body)."""
    return (statement.type == "expression_statement" and statement.named_child_count == 1
            and statement.named_children[0].type in ("string", "concatenated_string"))


def _colon_end(doc: ParsedText, body: ts.Node) -> int:
    """Just after the `:` that opens a Python body."""
    colon = body.prev_sibling
    while colon is not None and colon.type != ":":
        colon = colon.prev_sibling
    return doc.char(colon.end_byte if colon is not None else body.start_byte)


def _has_doc_comment(doc: ParsedText, node: ts.Node) -> bool:
    previous = node.prev_named_sibling
    if previous is None or "comment" not in previous.type:
        return False
    end, row = previous.end_point, node.start_point.row
    # Rust's line comments end at column 0 of the next line (they hold their newline).
    return end.row == row - 1 or (end.row == row and end.column == 0)
