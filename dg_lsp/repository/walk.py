"""Which files of a root the index reads: git's list where the root is in a git repository
(tracked and untracked files, not the ignored), otherwise a walk that honours the .gitignore
files it meets; in both, only languages the project knows, and never binary, generated
(minified, lock files, vendored or build folders) or oversized files.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath

import pathspec

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


def readable_text(path: Path) -> str | None:
    """The file's text, or None where it is not one to index: too large, binary, not UTF-8,
    unreadable, or one long line (minified code)."""
    try:
        if path.stat().st_size > MAX_INDEXED_FILE_BYTES or not path.is_file():
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None
    try:
        text = data.decode("utf-8").replace("\r\n", "\n")
    except UnicodeDecodeError:
        return None
    if len(text) > 5000 and text.count("\n") < len(text) // 1000:
        return None  # minified: lines of thousands of characters
    return text


def repository_files(root: Path, limit: int = MAX_INDEXED_FILES) -> list[str]:
    """The candidate files under `root` (relative, / separated), nearest to the root first,
    at most `limit`."""
    listed = _git_files(root)
    if listed is None:
        listed = _walked_files(root, limit * 4)
    found = [p for p in listed if is_candidate(p)]
    found.sort(key=lambda p: (p.count("/"), p))
    return found[:limit]


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
    names = done.stdout.decode("utf-8", "replace").split("\0")
    return list(dict.fromkeys(n for n in names if n))


def _walked_files(root: Path, limit: int) -> list[str]:
    """The files under `root` that no .gitignore on the way ignores, at most `limit`."""
    found: list[str] = []
    ignores: list[tuple[str, pathspec.PathSpec]] = []  # (folder, its .gitignore)
    for folder, dirs, files in os.walk(root):
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else relative + "/"
        ignores = [(f, s) for f, s in ignores if prefix.startswith(f)]
        if ".gitignore" in files:
            try:
                lines = (Path(folder) / ".gitignore").read_text(errors="replace").splitlines()
                ignores.append((prefix, pathspec.GitIgnoreSpec.from_lines(lines)))
            except OSError:
                pass
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS
                         and not _ignored(prefix + d + "/", ignores))
        for name in sorted(files):
            if not _ignored(prefix + name, ignores):
                found.append(prefix + name)
                if len(found) >= limit:
                    return found
    return found


def _ignored(path: str, ignores: list[tuple[str, pathspec.PathSpec]]) -> bool:
    """Whether a .gitignore of a folder above `path` (a folder's ends in /) ignores it."""
    return any(spec.match_file(path[len(folder):]) for folder, spec in ignores)
