"""The workspace index: each source file of a root with its text, what it defines and what it
imports, and which files are near which (nearest first: the files it imports and those that
import it, then its folder's, then the others by how much of their folder they share).

Built once (`build`, on a thread of its own in the language server: a completion before it
is done simply has no repository context), then kept current one file at a time (`set_text`
as the user types, `refresh` when a file is saved or changed on disk, `remove`). Its memory is
bounded by engine.bounds (MAX_INDEXED_FILES, MAX_INDEXED_CHARS); what one completion reads of
it by RETRIEVAL_FILES. Readers and the one writer share a lock: an update is a few dictionary
operations, a parse is done outside it.
"""

from __future__ import annotations

import posixpath
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dg_lsp.repository.symbols import FileSymbols, file_symbols
from dg_lsp.repository.walk import GIT_TIMEOUT, indexed_text, is_candidate, repository_files
from dg_lsp.syntax.languages import LanguageSpec, language_for
from engine.bounds import MAX_INDEXED_CHARS, MAX_INDEXED_FILES, RETRIEVAL_FILES

_MODULE_SUFFIXES = (".py", ".pyi", ".js", ".mjs", ".cjs", ".jsx", ".ts", ".mts", ".cts",
                    ".tsx", ".rs", ".go")
_PACKAGE_FILES = ("__init__", "index", "mod")


@dataclass
class IndexedFile:
    path: str  # relative to the root, / separated
    language: LanguageSpec
    text: str
    symbols: FileSymbols | None = None  # None: never read (RepositoryIndex.symbols)

    @property
    def folder(self) -> str:
        return posixpath.dirname(self.path)

    @property
    def module(self) -> str:
        """The path without its extension, and without a package's own file name."""
        stem = posixpath.splitext(self.path)[0]
        head, name = posixpath.split(stem)
        return head if name in _PACKAGE_FILES and head else stem


class RepositoryIndex:
    def __init__(self, root: Path, max_chars: int = MAX_INDEXED_CHARS) -> None:
        self.root = root.resolve()
        self.max_chars = max_chars
        self.ready = False  # set when `build` has read every file
        self._files: dict[str, IndexedFile] = {}
        self._chars = 0
        self._by_module_name: dict[str, set[str]] = {}  # a module's last name -> its files
        self._importers: dict[str, set[str]] = {}  # path -> the files that import it
        self._imports: dict[str, set[str]] = {}  # path -> the files it imports
        self._definers: dict[str, set[str]] = {}  # name -> the files that define it
        self._by_folder: dict[str, set[str]] = {}  # folder -> its files
        self._stale: set[str] = set()  # files whose symbols predate their text
        self._nearest: dict[str, list[str]] = {}  # cache, emptied when files come or go
        self._lock = threading.RLock()

    # -- building and updating ----------------------------------------------------------------

    def build(self, cancel: Callable[[], bool] | None = None,
              progress: Callable[[int, int], None] | None = None,
              limit: int = MAX_INDEXED_FILES) -> int:
        """Read the root's own files (dg_lsp.repository.walk: a link leading outside the root
        is not read), at most `limit`; the number read.
        `cancel` is asked between files; `progress(done, total)` is told every hundred."""
        paths = repository_files(self.root, limit)
        done = 0
        for number, path in enumerate(paths):
            if cancel is not None and cancel():
                break
            if progress is not None and number % 100 == 0:
                progress(number, len(paths))
            with self._lock:
                if path in self._files:  # an open document's text came first
                    continue
            text = indexed_text(self.root, path)
            if text is not None and self._chars + len(text) <= self.max_chars:
                done += self.refresh(path, text)
        with self._lock:  # a file read early imports files read after it
            for path, entry in self._files.items():
                if entry.symbols is not None:
                    self._link(path, self._resolve(entry, entry.symbols))
        self.ready = True
        return done

    def relative(self, path: str | Path) -> str | None:
        """`path` relative to the root (/ separated), or None outside it."""
        try:
            return Path(path).resolve().relative_to(self.root).as_posix()
        except (ValueError, OSError):
            return None

    def set_text(self, path: str, text: str) -> bool:
        """The file's new text as the user types: what it defines is read again at `refresh`
        (or when asked). False where the file is not one to index or the index is full."""
        language = language_for(None, path)
        if language is None or not is_candidate(path) or "\x00" in text:
            return False
        with self._lock:
            old = self._files.get(path)
            size = len(text) - (len(old.text) if old else 0)
            if self._chars + size > self.max_chars:
                return False
            self._chars += size
            if old is None:
                self._files[path] = IndexedFile(path, language, text)
                self._by_module_name.setdefault(_last_name(path), set()).add(path)
                self._by_folder.setdefault(posixpath.dirname(path), set()).add(path)
                self._nearest.clear()
            elif old.text != text:
                old.text = text  # its symbols stay until read again (`refresh`)
                self._stale.add(path)
        return True

    def refresh(self, path: str, text: str | None = None) -> bool:
        """Read the file again, from `text` or else from disk: its text and what it defines and
        imports. A file gone from disk is removed."""
        if text is None:
            text = indexed_text(self.root, path)
            if text is None:
                self.remove(path)
                return False
        if not self.set_text(path, text):
            return False
        self.symbols(path)
        return True

    def remove(self, path: str) -> None:
        with self._lock:
            old = self._files.pop(path, None)
            if old is None:
                return
            self._chars -= len(old.text)
            self._stale.discard(path)
            self._define(path, old.symbols, None)
            self._by_module_name.get(_last_name(path), set()).discard(path)
            self._by_folder.get(posixpath.dirname(path), set()).discard(path)
            self._link(path, set())
            self._nearest.clear()

    # -- reading ------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._files)

    def __contains__(self, path: object) -> bool:
        return path in self._files

    @property
    def chars(self) -> int:
        return self._chars

    def get(self, path: str) -> IndexedFile | None:
        return self._files.get(path)

    def symbols(self, path: str, fresh: bool = True) -> FileSymbols | None:
        """What the file defines and imports, read again now if its text changed since
        (`fresh`) or only if it was never read."""
        entry = self._files.get(path)
        if entry is None:
            return None
        symbols = entry.symbols
        if symbols is None or (fresh and path in self._stale):
            text = entry.text
            symbols = file_symbols(text, entry.language)
            with self._lock:
                if entry.text is text and self._files.get(path) is entry:
                    self._stale.discard(path)
                    old = entry.symbols
                    entry.symbols = symbols
                    self._define(path, old, symbols)
                    self._link(path, self._resolve(entry, symbols))
        return symbols

    def nearest(self, path: str, limit: int = RETRIEVAL_FILES) -> list[str]:
        """The other files nearest `path`, at most `limit`: the files it imports and those
        that import it, then those of its folder, then the others by shared folders."""
        with self._lock:
            cached = self._nearest.get(path)
            if cached is None:
                cached = self._order(path)
                self._nearest[path] = cached
            linked = [p for p in (*sorted(self._imports.get(path, ())),
                                  *sorted(self._importers.get(path, ()))) if p in self._files]
        return list(dict.fromkeys(linked + cached))[:limit]

    def definers(self, name: str) -> list[str]:
        """The files that define `name` (as last read)."""
        with self._lock:
            return sorted(self._definers.get(name, ()))

    def files(self) -> list[str]:
        with self._lock:
            return list(self._files)

    # -- helpers ------------------------------------------------------------------------------

    def _order(self, path: str) -> list[str]:
        """The other files by how many folders they share with `path` (its own folder's
        first), at most RETRIEVAL_FILES: folders are sorted, not files."""
        folder = posixpath.dirname(path).split("/")

        def shared(other: str) -> int:
            parts = other.split("/")
            n = 0
            while n < min(len(parts), len(folder)) and parts[n] == folder[n]:
                n += 1
            return n

        found: list[str] = []
        for other in sorted(self._by_folder, key=lambda f: (-shared(f), f.count("/"), f)):
            found += sorted(p for p in self._by_folder[other] if p != path)
            if len(found) >= RETRIEVAL_FILES:
                break
        return found[:RETRIEVAL_FILES]

    def _define(self, path: str, old: FileSymbols | None, new: FileSymbols | None) -> None:
        for name in old.definitions if old else ():
            self._definers.get(name, set()).discard(path)
        for name in new.definitions if new else ():
            self._definers.setdefault(name, set()).add(path)

    def _link(self, path: str, imports: set[str]) -> None:
        for old in self._imports.pop(path, set()):
            self._importers.get(old, set()).discard(path)
        if imports:
            self._imports[path] = imports
            for target in imports:
                self._importers.setdefault(target, set()).add(path)

    def _resolve(self, entry: IndexedFile, symbols: FileSymbols) -> set[str]:
        """The indexed files `entry`'s imports name."""
        found: set[str] = set()
        for spec in symbols.imports:
            target = _module_path(entry, spec)
            if target is None:
                continue
            for candidate in self._by_module_name.get(posixpath.basename(target), ()):
                module = self._files[candidate].module
                if candidate != entry.path and (module == target
                                                or module.endswith("/" + target)):
                    found.add(candidate)
        return found


def _last_name(path: str) -> str:
    stem = posixpath.splitext(path)[0]
    head, name = posixpath.split(stem)
    return posixpath.basename(head) if name in _PACKAGE_FILES and head else name


def _module_path(entry: IndexedFile, spec: str) -> str | None:
    """The path (without extension) an import `spec` of `entry` names: relative to its folder
    for `.x` and `./x`, else the dotted name as folders (matched at the end of a path)."""
    if entry.language.name == "python":
        dots = len(spec) - len(spec.lstrip("."))
        rest = spec[dots:].replace(".", "/")
        if not dots:
            return rest or None
        base = entry.folder
        for _ in range(dots - 1):
            base = posixpath.dirname(base)
        return posixpath.join(base, rest) if rest else base or None
    if spec.startswith("."):
        target = posixpath.normpath(posixpath.join(entry.folder, spec))
        stem, suffix = posixpath.splitext(target)
        return stem if suffix in _MODULE_SUFFIXES else target
    return None


def repository_root(path: Path) -> Path:
    """The root of the repository holding the file `path`: git's top level where it is in a
    git repository, else its folder."""
    folder = path.resolve().parent
    try:
        done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
                              capture_output=True, text=True, timeout=GIT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return folder
    top = done.stdout.strip()
    return Path(top) if done.returncode == 0 and top else folder
