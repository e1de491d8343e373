"""What a file defines and imports, read with tree-sitter: each definition's name with its
signature and the first line of its documentation (what a completion elsewhere is shown of
it), and the modules and names its imports bring in (which files are near it).

Definitions are found at the top of the file and inside class-like bodies (a method is a
definition of its class's file); a function's body is not read. Imports are read for Python
(`import a.b`, `from .c import d`) and JavaScript/TypeScript (`import {d} from "./c"`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import tree_sitter as ts

from dg_lsp.syntax.languages import LanguageSpec

# Node types that define a name (their `name` field), per grammar family.
DEFINITIONS = frozenset({
    "function_definition", "class_definition",  # python
    "function_declaration", "generator_function_declaration", "class_declaration",
    "method_definition", "interface_declaration", "type_alias_declaration",
    "abstract_class_declaration", "enum_declaration", "variable_declarator",  # js, ts
    "function_item", "struct_item", "enum_item", "trait_item", "type_item", "const_item",
    "static_item", "function_signature_item",  # rust
    "method_declaration", "type_spec", "const_spec",  # go
})
# Definitions whose body holds definitions of their own (methods).
CONTAINERS = frozenset({"class_definition", "class_declaration", "abstract_class_declaration",
                        "interface_declaration", "trait_item", "impl_item"})
MAX_DEPTH = 4  # statements this deep (export, decorators, impl blocks) are still read
SIGNATURE_CHARS = 160
MAX_DEFINITIONS = 400  # per file: a generated table of thousands is not what a cursor needs

_SPACES = re.compile(r"\s+")
_PY_FROM = re.compile(r"from\s+([.\w]+)\s+import\s+(.*)", re.S)
_PY_IMPORT = re.compile(r"import\s+(.*)", re.S)
_JS_NAMES = re.compile(r"import\s+(?:type\s+)?(\w+)?\s*,?\s*(?:\{([^}]*)\})?")
_QUOTED = re.compile(r"""["']([^"']+)["']""")


@dataclass(frozen=True)
class FileSymbols:
    # name -> what is shown of it: the signature, then the first line of its documentation
    definitions: dict[str, str] = field(default_factory=dict)
    imports: tuple[str, ...] = ()  # modules as written: "a.b", ".c", "./util"
    imported: tuple[str, ...] = ()  # names the imports bring in, as their module defines them


def file_symbols(text: str, language: LanguageSpec) -> FileSymbols:
    """What `text`, a file in `language`, defines and imports."""
    source = text.encode()
    tree = language.parser().parse(source)
    definitions: dict[str, str] = {}
    imports: list[str] = []
    imported: list[str] = []
    stack = [(child, 1) for child in reversed(tree.root_node.named_children)]
    while stack and len(definitions) < MAX_DEFINITIONS:
        node, depth = stack.pop()
        kind = node.type
        if kind in ("import_statement", "import_from_statement"):
            _read_import(_text(node), language, imports, imported)
            continue
        name = node.child_by_field_name("name")
        if kind in DEFINITIONS and name is not None:
            definitions.setdefault(_text(name), _shown(node, language))
        elif kind == "assignment" and depth <= 2:  # python: a module's CONSTANT = ...
            left = node.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                definitions.setdefault(_text(left), _first_line(node))
        if depth >= MAX_DEPTH or (kind in DEFINITIONS and kind not in CONTAINERS):
            continue
        body = node.child_by_field_name("body") if kind in CONTAINERS else node
        if body is not None:
            stack.extend((child, depth + 1) for child in reversed(body.named_children))
    return FileSymbols(definitions, tuple(dict.fromkeys(imports)),
                       tuple(dict.fromkeys(imported)))


def _text(node: ts.Node) -> str:
    return node.text.decode("utf-8", "replace") if node.text else ""


def _first_line(node: ts.Node) -> str:
    return _text(node).split("\n", 1)[0][:SIGNATURE_CHARS].rstrip()


def _shown(node: ts.Node, language: LanguageSpec) -> str:
    """The definition's signature on one line (up to its body), and its documentation's
    first line under it."""
    body = node.child_by_field_name("body")
    if body is not None and body.start_byte > node.start_byte:
        head = node.text[: body.start_byte - node.start_byte].decode("utf-8", "replace")
    else:
        head = _text(node).split("\n", 1)[0]
    signature = _SPACES.sub(" ", head).strip().rstrip("{").rstrip()[:SIGNATURE_CHARS]
    doc = _docstring(body) if language.name == "python" else _comment_before(node)
    return signature + ("\n" + doc if doc else "")


def _docstring(body: ts.Node | None) -> str:
    """The first non-blank line of a Python body's docstring."""
    if body is None or not body.named_children:
        return ""
    first = body.named_children[0]
    if first.type != "expression_statement" or not first.named_children:
        return ""
    string = first.named_children[0]
    if string.type != "string":
        return ""
    content = _text(string).lstrip("rRbBuUfF").strip("\"'")  # prefix letters, quotes
    return next((line.strip() for line in content.split("\n") if line.strip()), "")[:200]


def _comment_before(node: ts.Node) -> str:
    """The first line of the comment just above a definition (//, /** ... */)."""
    target = node.parent if node.parent is not None and node.parent.type == "export_statement" \
        else node
    previous = target.prev_named_sibling
    if previous is None or previous.type not in ("comment", "line_comment", "block_comment") \
            or previous.end_point.row + 1 < target.start_point.row:
        return ""
    for line in _text(previous).split("\n"):
        line = line.strip().lstrip("/*!").strip()
        if line:
            return line[:200]
    return ""


def _read_import(statement: str, language: LanguageSpec, imports: list[str],
                 imported: list[str]) -> None:
    if language.name == "python":
        statement = _SPACES.sub(" ", statement.replace("\\\n", " "))
        found = _PY_FROM.match(statement)
        if found:
            module, names = found.group(1), found.group(2).strip("() ")
            imports.append(module)
            for item in names.split(","):
                name = item.strip().split(" ")[0].strip("()")
                if name and name != "*":
                    imported.append(name)
                    if set(module) == {"."}:  # `from . import x`: x is a module
                        imports.append(module + name)
            return
        found = _PY_IMPORT.match(statement)
        if found:
            for item in found.group(1).split(","):
                module = item.strip().split(" ")[0]
                if module:
                    imports.append(module)
        return
    source = _QUOTED.search(statement)
    if source is None:
        return
    imports.append(source.group(1))
    found = _JS_NAMES.match(statement)
    if found:
        if found.group(1):
            imported.append(found.group(1))
        for item in (found.group(2) or "").split(","):
            name = item.strip().split(" ")[0]
            if name:
                imported.append(name)
