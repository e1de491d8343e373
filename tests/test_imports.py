"""The packages' shape: no import circle at run time, and the engine stands alone.

Every import counts, including those inside functions (they run too, only later); imports
under `if TYPE_CHECKING:` do not. A circle means neither module can be read, tested or
reused without the other; `engine` importing `dg_lsp` would make the engine unusable by
other front ends (DESIGN.md, section 2).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dg_lsp", "engine")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The project's modules that `module` imports anywhere in its body."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor[: len(anchor) - node.level + (1 if is_package else 0)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if submodule in known else base)
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
            for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_a_circle_is_found_where_there_is_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]


def test_relative_and_function_level_imports_are_edges():
    tree = ast.parse("def f():\n    from .b import x\n    import pkg.c\n"
                     "if TYPE_CHECKING:\n    import pkg.d\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    assert _imports(tree, "pkg.a", False, known) == {"pkg.b", "pkg.c"}


def test_no_import_circle_in_dg_lsp_or_engine():
    assert circles(import_graph()) == []


def test_the_engine_imports_nothing_from_dg_lsp():
    graph = import_graph()
    assert {m: sorted(d for d in deps if d.split(".")[0] == "dg_lsp")
            for m, deps in graph.items()
            if m.split(".")[0] == "engine" and any(d.startswith("dg_lsp") for d in deps)} == {}
