"""Which tree-sitter grammar reads a document, from its LSP language id or file extension.

Grammars are the official wheels on PyPI, imported only when a document of that language is
first seen. Queries live beside each language in `grammars/<name>/*.scm`, as editors
keep them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlparse

import tree_sitter as ts


def _grammars_dir() -> Path:
    """The query files: `dg_lsp/grammars/` in an installed wheel (setup.py maps the repository's
    `grammars/` there), else the repository's top-level `grammars/` in a checkout."""
    package = Path(__file__).resolve().parent.parent
    installed = package / "grammars"
    return installed if installed.is_dir() else package.parent / "grammars"


GRAMMARS_DIR = _grammars_dir()


@dataclass(frozen=True)
class LanguageSpec:
    name: str  # folder under grammars/
    module: str  # the grammar wheel's import name
    function: str  # the wheel's function returning the language pointer
    line_comment: str
    block_openers: tuple[str, ...]  # tokens that open an indented body when they end a line
    extensions: tuple[str, ...] = field(default=())

    @property
    def language(self) -> ts.Language:
        return _load_language(self.module, self.function)

    def parser(self) -> ts.Parser:
        return ts.Parser(self.language)

    def query(self, name: str) -> ts.Query:
        return _load_query(self, name)

    def has_query(self, name: str) -> bool:
        return _has_query(self.name, name)


LANGUAGES = [
    LanguageSpec("python", "tree_sitter_python", "language", "#", (":",), (".py", ".pyi")),
    LanguageSpec("javascript", "tree_sitter_javascript", "language", "//", ("{",),
                 (".js", ".mjs", ".cjs", ".jsx")),
    LanguageSpec("typescript", "tree_sitter_typescript", "language_typescript", "//", ("{",),
                 (".ts", ".mts", ".cts")),
    LanguageSpec("tsx", "tree_sitter_typescript", "language_tsx", "//", ("{",), (".tsx",)),
    LanguageSpec("rust", "tree_sitter_rust", "language", "//", ("{",), (".rs",)),
    LanguageSpec("go", "tree_sitter_go", "language", "//", ("{",), (".go",)),
]

# LSP language identifiers (the spec's list) that differ from our grammar folder names.
_LANGUAGE_IDS = {
    "javascriptreact": "javascript",
    "typescriptreact": "tsx",
}

_BY_NAME = {spec.name: spec for spec in LANGUAGES}
_BY_EXTENSION = {ext: spec for spec in LANGUAGES for ext in spec.extensions}


def language_for(language_id: str | None, uri: str = "") -> LanguageSpec | None:
    """The grammar for a document, or None for a language we read as plain lines."""
    if language_id:
        spec = _BY_NAME.get(_LANGUAGE_IDS.get(language_id, language_id))
        if spec is not None:
            return spec
    suffix = PurePosixPath(unquote(urlparse(uri).path)).suffix.lower() if uri else ""
    return _BY_EXTENSION.get(suffix)


@cache
def _load_language(module: str, function: str) -> ts.Language:
    return ts.Language(getattr(importlib.import_module(module), function)())


@cache
def _has_query(language: str, name: str) -> bool:
    return (GRAMMARS_DIR / language / f"{name}.scm").is_file()


@cache
def _load_query(spec: LanguageSpec, name: str) -> ts.Query:
    source = (GRAMMARS_DIR / spec.name / f"{name}.scm").read_text()
    return ts.Query(spec.language, source)
