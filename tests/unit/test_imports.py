"""The packages' shape: layers, no import circle, and the engine stands alone.

Every import counts, including those inside functions (they run too, only later) and those
under `if TYPE_CHECKING:` (a reader needs the imported module all the same). A circle means
neither module can be read, tested or reused without the other; `engine` importing `dg_lsp`
would make the engine unusable by other front ends (docs/architecture.md).

The layers, each importing only its own and those below it (docs/architecture.md):

    commands and LSP   dg_lsp.cli, dg_lsp.lsp, dg_lsp.batch, dg_lsp.measure
    features           dg_lsp.completion, dg_lsp.next_edit, dg_lsp.actions (never each other)
    shared             dg_lsp.document, dg_lsp.syntax, dg_lsp.settings, dg_lsp.context,
                       dg_lsp.positions, dg_lsp.files, dg_lsp.engines, dg_lsp.repository,
                       dg_lsp (its version)
    engine             engine.*
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("dg_lsp", "engine")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    # dg_lsp/examples holds files to complete, half-typed on purpose: no module imports them.
    return {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
            if "examples" not in p.relative_to(ROOT).parts}


def _imports(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The project's modules that `module` imports anywhere in its body."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
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
    assert _imports(tree, "pkg.a", False, known) == {"pkg.b", "pkg.c", "pkg.d"}


def test_no_import_circle_in_dg_lsp_or_engine():
    assert circles(import_graph()) == []


def test_the_engine_imports_nothing_from_dg_lsp():
    graph = import_graph()
    assert {m: sorted(d for d in deps if d.split(".")[0] == "dg_lsp")
            for m, deps in graph.items()
            if m.split(".")[0] == "engine" and any(d.startswith("dg_lsp") for d in deps)} == {}


LAYERS = {  # package or module -> layer; higher layers import lower ones, never the reverse
    "dg_lsp.cli": 3, "dg_lsp.lsp": 3, "dg_lsp.batch": 3, "dg_lsp.measure": 3,
    "dg_lsp.completion": 2, "dg_lsp.next_edit": 2, "dg_lsp.actions": 2,
    "dg_lsp.syntax": 1, "dg_lsp.settings": 1, "dg_lsp.context": 1, "dg_lsp.positions": 1,
    "dg_lsp.files": 1, "dg_lsp": 1, "dg_lsp.repository": 1, "dg_lsp.document": 1,
    "dg_lsp.engines": 1,
    "engine": 0,
}


def layer(module: str) -> int:
    """The layer of `module`: that of its longest listed prefix."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return LAYERS[".".join(parts[:n])]
    raise AssertionError(f"{module} is in no layer: add its package to LAYERS")


def upward_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    return {m: sorted(d for d in deps if layer(d) > layer(m))
            for m, deps in sorted(graph.items()) if any(layer(d) > layer(m) for d in deps)}


def test_an_upward_import_is_found():
    assert upward_imports({"dg_lsp.completion.pipeline": {"dg_lsp.lsp.server"},
                           "dg_lsp.lsp.server": {"dg_lsp.completion.pipeline"}}) == {
        "dg_lsp.completion.pipeline": ["dg_lsp.lsp.server"]}


def test_each_layer_imports_only_its_own_and_those_below():
    """Commands and LSP -> features -> syntax and settings -> engine: a feature never imports
    the LSP layer or a command, the shared helpers no feature."""
    assert upward_imports(import_graph()) == {}


FEATURES = ("dg_lsp.completion", "dg_lsp.next_edit", "dg_lsp.actions")


def _package(module: str, packages: tuple[str, ...]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def cross_imports(graph: dict[str, set[str]], packages: tuple[str, ...]
                  ) -> dict[str, list[str]]:
    """Imports from one of `packages` into another of them."""
    found = {}
    for module, deps in sorted(graph.items()):
        home = _package(module, packages)
        crossing = sorted(d for d in deps if _package(d, packages) not in (None, home))
        if home is not None and crossing:
            found[module] = crossing
    return found


def test_an_import_between_features_is_found():
    graph = {"dg_lsp.next_edit.suggest": {"dg_lsp.completion.gate", "dg_lsp.document.gate"},
             "dg_lsp.completion.pipeline": {"dg_lsp.completion.cache"}}
    assert cross_imports(graph, FEATURES) == {
        "dg_lsp.next_edit.suggest": ["dg_lsp.completion.gate"]}


def test_no_feature_imports_another():
    """What two features share lives below them (dg_lsp.document: the parsed document, the
    acceptance rules, the gate), so each can be read and changed alone."""
    assert cross_imports(import_graph(), FEATURES) == {}


def test_the_commands_open_an_engine_without_the_language_server():
    """dg-lsp complete, rewrite, fill, batch and eval open their engine with dg_lsp.engines;
    none of them imports the LSP layer."""
    graph = import_graph()
    assert {m: sorted(d for d in deps if _package(d, ("dg_lsp.lsp",)))
            for m, deps in graph.items()
            if _package(m, ("dg_lsp.cli", "dg_lsp.batch", "dg_lsp.measure.eval"))
            and any(_package(d, ("dg_lsp.lsp",)) for d in deps)} == {}


def test_no_test_module_imports_another():
    """Shared helpers live in tests/support/; a test module (or a server script a test writes)
    that imports another test module would run that module's imports and fixtures too."""
    tests = ROOT / "tests"
    found = {str(path.relative_to(ROOT)): hits for path in sorted(tests.rglob("*.py"))
             if (hits := re.findall(r"\btests\.(?:\w+\.)?test_\w+", path.read_text()))
             and path.name != "test_golden.py"}  # its docstring: `python -m` to rewrite outputs
    assert found == {}
