"""docs/architecture.md names only what exists: every file and folder, module, class, method
and function it cites in backticks is in the repository as it is now.

The map is the one list of names to update when code moves (it says so); this test is what
keeps it true. Words in backticks that are not code (settings keys like `minConfidence`,
messages, commands with spaces) are left alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "architecture.md"
PACKAGES = ("dg_lsp", "engine")
_TICKED = re.compile(r"`([^`]+)`")
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_CAMEL = re.compile(r"[a-z]+[A-Z]\w*")  # minConfidence, triggerKind: protocol and settings keys
_EXTENSIONS = (".py", ".scm", ".json", ".md")


def defined_names() -> tuple[set[str], dict[str, set[str]]]:
    """Every name the packages define or bind (functions, classes, assignments, parameters,
    imports' aliases), and each class's attributes (methods, fields)."""
    names: set[str] = set()
    members: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "examples" in path.parts:  # files to complete, half-typed on purpose
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    attrs = members.setdefault(node.name, set())
                    for item in node.body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef,
                                             ast.ClassDef)):
                            attrs.add(item.name)
                        elif isinstance(item, ast.AnnAssign) and isinstance(item.target,
                                                                            ast.Name):
                            attrs.add(item.target.id)
                        elif isinstance(item, ast.Assign):
                            attrs.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    names.add(node.id)
                elif isinstance(node, ast.arg):
                    names.add(node.arg)
    return names, members


def cited(text: str) -> list[str]:
    """The backticked references of `text` that name code: paths, and identifiers (a call's
    arguments dropped: `UnitEnd("line")` cites UnitEnd)."""
    tops = {p.name for p in ROOT.iterdir() if p.is_dir()}
    found = []
    for ticked in _TICKED.findall(text):
        ticked = ticked.split("(", 1)[0].strip()
        if " " in ticked:
            continue
        if (ticked.endswith(_EXTENSIONS + ("/",)) or ticked.split("/")[0] in tops):
            found.append(ticked)  # not an LSP method (textDocument/completion)
        elif _IDENTIFIER.fullmatch(ticked) and not _CAMEL.fullmatch(ticked.split(".")[0]):
            found.append(ticked)
    return found


def missing(references: list[str]) -> list[str]:
    names, members = defined_names()
    paths = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
             if not {".git", ".venv", "build", "__pycache__"} & set(p.parts)]
    modules = {Path(p).stem for p in paths if p.endswith(".py")} | {Path(p).name for p in paths}
    gone = []
    for ref in references:
        if "/" in ref or ref.endswith(_EXTENSIONS):
            # a path from the root, or from a folder the row names (`decode/`, `kernels/`);
            # `bench_*.py` a pattern, `grammars/<lang>/` any language's
            pattern = re.escape(ref.rstrip("/")).replace(r"\*", "[^/]*").replace(
                re.escape("<lang>"), "[^/]+")
            exists = any(re.fullmatch(f"(.*/)?{pattern}", p) for p in paths)
        elif "." in ref:
            owner, attr = ref.rsplit(".", 1)
            owner = owner.rsplit(".", 1)[-1]
            exists = attr in members.get(owner, set()) or (owner not in members
                                                           and attr in names)
        else:
            exists = ref in names or ref in modules  # a function, or a package (`next_edit`)
        if not exists:
            gone.append(ref)
    return gone


def test_a_name_that_no_longer_exists_is_found():
    assert missing(["dg_lsp/lsp/completion.py", "dg_lsp/nowhere.py", "Pipeline.decide",
                    "Pipeline.no_such_method", "build_context", "no_such_function"]) == [
        "dg_lsp/nowhere.py", "Pipeline.no_such_method", "no_such_function"]


def test_the_architecture_map_names_only_what_exists():
    assert missing(cited(MAP.read_text(encoding="utf-8"))) == []


def test_the_map_names_every_folder_of_the_packages():
    text = MAP.read_text(encoding="utf-8")
    folders = sorted(p.relative_to(ROOT).as_posix() for package in PACKAGES
                     for p in (ROOT / package).rglob("*") if p.is_dir()
                     and any(p.glob("*.py")) and "__pycache__" not in p.parts
                     and "examples" not in p.parts)
    unnamed = [f for f in folders
               if f"{f}/" not in text and f"`{f.split('/')[-1]}/`" not in text]
    assert unnamed == []
