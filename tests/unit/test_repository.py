"""The workspace index (dg_lsp.repository): which files it reads, what it keeps of each, and
what a completion gets of it (candidates from other files' alike lines, definitions ahead of the
prefix), with `repositoryContext` false giving today's context exactly."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.context import build_context
from dg_lsp.measure.bench_repository import build_row, generate, retrieval_rows
from dg_lsp.repository.candidates import FILE, REPOSITORY, candidates
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext, context_for_file
from dg_lsp.repository.symbols import file_symbols
from dg_lsp.repository.walk import repository_files
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.syntax.languages import language_for
from tests.support.scripted import Scripted

PYTHON = language_for("python")
CONFIG = ('"""Settings."""\n\n'
          "def load_config(path, strict=False):\n"
          '    """Read the configuration at `path`.\n\n    More.\n    """\n'
          "    return {}\n\n"
          "DEFAULT = load_config('app.toml', strict=True)\n")
MAIN = ("from pkg.config import load_config\n\n"
        "def run():\n"
        "    settings = load_config(")


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


def package(tmp_path: Path) -> RepositoryIndex:
    write(tmp_path, {"pkg/config.py": CONFIG, "pkg/main.py": MAIN, "pkg/__init__.py": ""})
    index = RepositoryIndex(tmp_path)
    index.build()
    return index


def test_a_walk_honours_gitignore_and_skips_what_nobody_writes(tmp_path):
    write(tmp_path, {".gitignore": "secret/\n*.gen.py\n", "a.py": "x = 1\n",
                     "secret/b.py": "x = 2\n", "c.gen.py": "x = 3\n", "sub/.gitignore": "d.py\n",
                     "sub/d.py": "x = 4\n", "sub/e.ts": "let x = 5\n", "app.min.js": "x=1\n",
                     "node_modules/m/index.js": "x\n", "build/out.py": "x\n", "notes.txt": "x\n",
                     "data.py": b"\x00\x01binary"})
    assert repository_files(tmp_path) == ["a.py", "data.py", "sub/e.ts"]
    index = RepositoryIndex(tmp_path)
    assert index.build() == 2  # data.py is binary
    assert index.files() == ["a.py", "sub/e.ts"]


def test_a_git_repository_is_read_from_gits_list(tmp_path):
    write(tmp_path, {".gitignore": "ignored.py\n", "kept.py": "x = 1\n",
                     "ignored.py": "x = 2\n", "untracked.py": "x = 3\n"})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "add", "kept.py", ".gitignore"], check=True)
    assert repository_files(tmp_path) == ["kept.py", "untracked.py"]


def test_oversized_files_and_a_full_index_are_left_out(tmp_path):
    write(tmp_path, {"a.py": "x = 1\n", "b.py": "y = 22\n"})
    index = RepositoryIndex(tmp_path, max_chars=8)
    assert index.build() == 1
    assert index.files() == ["a.py"] and index.chars == 6


def test_definitions_and_imports_of_a_python_file():
    symbols = file_symbols(CONFIG + "class Store(Base):\n    def get(self, key):\n"
                           "        '''The value.'''\n", PYTHON)
    assert symbols.definitions == {
        "load_config": "def load_config(path, strict=False):\nRead the configuration at `path`.",
        "DEFAULT": "DEFAULT = load_config('app.toml', strict=True)",
        "Store": "class Store(Base):", "get": "def get(self, key):\nThe value."}
    imports = file_symbols("import os, a.b as c\nfrom .util import (helper,\n  other as o)\n"
                           "from . import sibling\n", PYTHON)
    assert imports.imports == ("os", "a.b", ".util", ".", ".sibling")
    assert imports.imported == ("helper", "other", "sibling")


def test_definitions_and_imports_of_a_typescript_file():
    symbols = file_symbols('import {a, b as c} from "./util";\n// Adds two.\n'
                           "export function add(x: number, y: number): number { return x }\n",
                           language_for("typescript"))
    assert symbols.definitions == {"add": "function add(x: number, y: number): number\nAdds two."}
    assert (symbols.imports, symbols.imported) == (("./util",), ("a", "b"))


def test_files_that_import_each_other_are_nearest(tmp_path):
    write(tmp_path, {"pkg/a.py": "x = 1\n", "pkg/b.py": "from pkg.z import y\n",
                     "pkg/z.py": "y = 2\n", "other/c.py": "from ..pkg import a\n",
                     "pkg/sub/d.py": "w = 3\n"})
    index = RepositoryIndex(tmp_path)
    index.build()
    assert index.nearest("pkg/z.py") == ["pkg/b.py", "pkg/a.py", "pkg/sub/d.py", "other/c.py"]
    assert index.nearest("pkg/b.py")[0] == "pkg/z.py"


def test_the_index_follows_edits_saves_and_removals(tmp_path):
    index = package(tmp_path)
    assert index.definers("load_config") == ["pkg/config.py"]
    index.set_text("pkg/config.py", "def read_config(path):\n    return {}\n")
    assert index.definers("load_config") == ["pkg/config.py"]  # read again at save
    index.refresh("pkg/config.py", "def read_config(path):\n    return {}\n")
    assert (index.definers("load_config"), index.definers("read_config")) == (
        [], ["pkg/config.py"])
    index.remove("pkg/config.py")
    assert index.definers("read_config") == [] and "pkg/config.py" not in index
    assert not index.set_text("notes.txt", "words")  # a language the project does not read


def test_other_files_alike_lines_are_candidates_after_the_files_own(tmp_path):
    index = package(tmp_path)
    text = "def f():\n    DEFAULT = load_config(|)\n"
    offset = text.index("|")
    text = text.replace("|", "")
    repository = RepositoryContext(index, "pkg/main.py")
    ctx = build_context(text, offset, PYTHON, 480, repository=repository)
    assert build_context(text, offset, PYTHON, 480).repeats == ()
    assert [(c.text, c.where) for c in ctx.candidates] == [
        ("'app.toml', strict=True", REPOSITORY)]
    # the file's own texts first, then other files'
    text = "def f():\n    DEFAULT = load_config('a.toml')\n    DEFAULT = load_config(|)\n"
    offset = text.index("|")
    text = text.replace("|", "")
    ctx = build_context(text, offset, PYTHON, 480, repository=repository)
    assert [(c.text, c.where) for c in ctx.candidates] == [
        ("'a.toml'", FILE), ("'app.toml', strict=True", REPOSITORY)]


def test_the_definition_of_a_name_the_line_uses_comes_ahead_of_the_prefix(tmp_path):
    index = package(tmp_path)
    offset = len(MAIN)
    repository = RepositoryContext(index, "pkg/main.py")
    ctx = build_context(MAIN, offset, PYTHON, 480, repository=repository)
    snippet = ("# Compare this snippet from pkg/config.py:\n"
               "# def load_config(path, strict=False):\n"
               "# Read the configuration at `path`.\n")
    assert ctx.prefix == snippet + MAIN
    assert build_context(MAIN, offset, PYTHON, 480).prefix == MAIN
    # defined in the file itself: nothing to quote
    local = "def load_config(p):\n    pass\n\nsettings = load_config("
    ctx = build_context(local, len(local), PYTHON, 480,
                        repository=RepositoryContext(index, "pkg/main.py"))
    assert ctx.prefix == local


def test_repository_context_false_is_todays_request(tmp_path):
    index = package(tmp_path)
    request = CompletionRequest(MAIN, len(MAIN), PYTHON, "file:///x/pkg/main.py",
                                repository=RepositoryContext(index, "pkg/main.py"))
    off, _ = parse_settings({"repositoryContext": False})
    plain = Pipeline(Scripted("x"), Settings()).context(
        CompletionRequest(MAIN, len(MAIN), PYTHON, "file:///x/pkg/main.py"))
    assert Pipeline(Scripted("x"), off).context(request) == plain
    assert Pipeline(Scripted("x"), Settings()).context(request).prefix != plain.prefix


def test_a_bad_setting_is_refused_by_name():
    settings, errors = parse_settings({"repositoryContext": "yes"})
    assert settings.repository_context is True
    assert errors == ["repositoryContext: expected true or false, got 'yes'"]


def test_a_command_indexes_the_repository_of_its_file(tmp_path):
    write(tmp_path, {"pkg/config.py": CONFIG, "pkg/main.py": MAIN})
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    repository = context_for_file(tmp_path / "pkg" / "main.py")
    assert repository is not None and repository.path == "pkg/main.py"
    assert repository.index.files() == ["pkg/config.py", "pkg/main.py"]


@pytest.mark.parametrize("text", ["def f():\n    ", "def f():\n    # load_config("])
def test_no_choices_at_a_line_start_or_in_a_comment(tmp_path, text):
    index = package(tmp_path)
    ctx = build_context(text, len(text), PYTHON, 480,
                        repository=RepositoryContext(index, "pkg/main.py"))
    assert ctx.repeats == ()


def test_other_files_texts_rank_by_how_many_places_hold_them_then_nearness(tmp_path):
    write(tmp_path, {"a.py": "x = load('a')\n", "b.py": "x = load('b')\nx = load('a')\n",
                     "c.py": "x = load('b')\nx = load('c')\n"})
    index = RepositoryIndex(tmp_path)
    index.build()
    held = candidates("x = ", 4, RepositoryContext(index, "main.py"))
    assert [(c.text, c.count, c.where) for c in held] == [
        ("load('a')", 2, REPOSITORY), ("load('b')", 2, REPOSITORY), ("load('c')", 1, REPOSITORY)]
    assert candidates("x = ", 4, RepositoryContext(index, "main.py", choices=False)) == ()

def test_the_benchs_generated_repository_is_indexed_and_read(tmp_path):
    generate(tmp_path, files=20, folders=2)
    row = build_row("generated", tmp_path)
    assert (row["repository"], row["files"]) == ("generated", 20)  # 9 modules, 1 __init__ each
    rows = retrieval_rows(tmp_path, requests=10)
    assert [(r["request"], r["requests"]) for r in rows] == [
        ("first in a file", 5), ("next in the same file", 5)]
