"""Which files of a root are the repository's own, for the index and for batch mode alike:
git's list where the root is in a git repository (tracked and untracked files, not the
ignored), otherwise a walk that honours the .gitignore files it meets. Folders that are links
are never entered, by git or by the walk; what a listed file's text is, and whether a link
among them may be read, is decided by the one reader of files (dg_lsp.files.read_source, given
the root: a link whose target lies outside the root is skipped).

The index then keeps only languages the project knows, and never binary, generated (minified,
lock files, vendored or build folders) or oversized files.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path, PurePosixPath

import pathspec

from dg_lsp.files import SourceError, read_source
from dg_lsp.syntax.languages import language_for
from engine.bounds import MAX_INDEXED_FILE_BYTES, MAX_INDEXED_FILES

# Folders whose files nobody writes by hand (or that are someone else's code).
SKIPPED_FOLDERS = frozenset({
    ".git", ".hg", ".svn", "node_modules", "vendor", "third_party", "third-party", "dist",
    "build", "target", "out", "__pycache__", ".venv", "venv", ".tox", ".nox", ".mypy_cache",
    ".pytest_cache", ".ruff_cache", "site-packages", ".next", "coverage", "bower_components",
})
GENERATED_SUFFIXES = (".min.js", ".min.mjs", ".bundle.js", "_pb2.py", ".pb.go", ".d.ts")
GIT_TIMEOUT = 10.0  # seconds: a hung git (a network file system) must not hold the index


def is_candidate(relative: str) -> bool:
    """Whether the file at `relative` (a path under the root, / separated) may be indexed by
    its name alone: a known language, not in a skipped folder, not generated."""
    path = PurePosixPath(relative)
    if any(part in SKIPPED_FOLDERS for part in path.parts[:-1]):
        return False
    name = path.name.lower()
    if name.endswith(GENERATED_SUFFIXES):
        return False
    return language_for(None, name) is not None


def indexed_text(root: Path, relative: str) -> str | None:
    """The text of the root's file at `relative`, or None where it is not one to index: not a
    regular file, leading outside the root, too large, binary, not UTF-8, unreadable, or one
    long line (minified code)."""
    try:
        text = read_source(root / relative, root, MAX_INDEXED_FILE_BYTES).text
    except SourceError:
        return None
    if len(text) > 5000 and text.count("\n") < len(text) // 1000:
        return None  # minified: lines of thousands of characters
    return text


def repository_files(root: Path, limit: int = MAX_INDEXED_FILES) -> list[str]:
    """The candidate files under `root` (relative, / separated), nearest to the root first,
    at most `limit`."""
    found = [p for p in listed_files(root, SKIPPED_FOLDERS, limit * 4) if is_candidate(p)]
    found.sort(key=lambda p: (p.count("/"), p))
    return found[:limit]


def listed_files(root: Path, skipped: frozenset[str], limit: int | None = None) -> list[str]:
    """The files under the folder `root` (relative, / separated) that git, or else the
    .gitignore files, do not ignore, outside folders named in `skipped`; at most `limit` of
    those the walk finds (git's list is whole)."""
    listed = _git_files(root)
    if listed is None:
        return _walked_files(root, skipped, limit)
    return [p for p in listed if not skipped.intersection(PurePosixPath(p).parts[:-1])]


def _git_files(root: Path) -> list[str] | None:
    """git's list of the files under `root`; None where `root` is not in a git repository."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
             "--exclude-standard", "--", "."],
            capture_output=True, timeout=GIT_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    names = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    return list(dict.fromkeys(n for n in names if n))


def _walked_files(root: Path, skipped: frozenset[str], limit: int | None) -> list[str]:
    """The files under `root` that no .gitignore on the way ignores, depth first in name
    order, at most `limit`. A stack, not recursion: a tree thousands of folders deep is walked
    like any other (os.walk recurses on Python 3.11)."""
    found: list[str] = []
    # (folder relative to root with a trailing / or "", the .gitignore specs above it)
    stack: list[tuple[str, list[tuple[str, pathspec.PathSpec]]]] = [("", [])]
    while stack:
        prefix, ignores = stack.pop()
        try:
            with os.scandir(root / prefix if prefix else root) as entries:
                listing = sorted((entry.name, _kind(entry)) for entry in entries)
        except OSError:
            continue
        if (".gitignore", "file") in listing:
            ignores = [*ignores, (prefix, _gitignore(root, prefix + ".gitignore"))]
        folders = []
        for name, kind in listing:
            path = prefix + name
            if kind == "folder":
                if name not in skipped and not _ignored(path + "/", ignores):
                    folders.append((path + "/", ignores))
            elif kind == "file" and not _ignored(path, ignores):
                found.append(path)
                if limit is not None and len(found) >= limit:
                    return found
        stack.extend(reversed(folders))
    return found


def _kind(entry: os.DirEntry) -> str:
    """"folder" (not a link to one), "file" (a regular file or a link, which the reader
    judges), or "other" (a FIFO, socket or device: never listed)."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return "folder"
        if entry.is_symlink() or stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode):
            return "file"
    except OSError:
        pass
    return "other"


def _gitignore(root: Path, relative: str) -> pathspec.PathSpec:
    try:
        lines = read_source(root / relative, root).text.splitlines()
    except SourceError:
        lines = []
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignored(path: str, ignores: list[tuple[str, pathspec.PathSpec]]) -> bool:
    """Whether a .gitignore of a folder above `path` (a folder's ends in /) ignores it: the
    nearest .gitignore that has a say decides, as in git."""
    for folder, spec in reversed(ignores):
        result = spec.check_file(path[len(folder):])
        if result.include is not None:
            return result.include
    return False
