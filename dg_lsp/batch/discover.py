"""Which files a batch run reads: the PATHS given, less what git ignores and vendored code.

The folder's files are listed as the workspace index lists them (dg_lsp.repository.walk):
inside a git work tree git itself answers (tracked files and untracked ones not ignored, with
every .gitignore, .git/info/exclude and the global excludes file applied); outside one, a walk
applies the .gitignore files found on the way down. Folders of vendored code (node_modules,
vendor, ...) are skipped either way, and so are links; a file named on the command line is
taken as it is. `--include` / `--exclude` globs match the path as the diff
names it, or the file's name.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from dg_lsp.files import diff_label
from dg_lsp.repository.walk import listed_files

VENDORED = frozenset({"node_modules", "vendor", "third_party", ".venv", "venv", "site-packages",
                      ".git", ".hg", ".svn", "__pycache__"})


@dataclass(frozen=True)
class SourceFile:
    path: Path
    label: str  # as the diff and the report name it


def discover(paths: list[Path], include: list[str] | None = None,
             exclude: list[str] | None = None) -> list[SourceFile]:
    """The files under `paths`, sorted by label; FileNotFoundError for a path that is missing."""
    found: dict[str, SourceFile] = {}
    for root in paths:
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such file or directory")
        candidates = [root] if root.is_file() else _walk(root)
        for path in candidates:
            label = diff_label(path)
            if _selected(label, include, exclude):
                found.setdefault(label, SourceFile(path, label))
    return [found[label] for label in sorted(found)]


def _selected(label: str, include: list[str] | None, exclude: list[str] | None) -> bool:
    name = label.rsplit("/", 1)[-1]

    def matches(globs: list[str]) -> bool:
        return any(fnmatch.fnmatchcase(label, g) or fnmatch.fnmatchcase(name, g) for g in globs)

    if include and not matches(include):
        return False
    return not (exclude and matches(exclude))


def _walk(root: Path) -> list[Path]:
    """The root's own files (dg_lsp.repository.walk), less links: a link's target is edited
    under its own name, or not at all where it lies outside the folder."""
    return [root / name for name in listed_files(root, VENDORED)
            if (root / name).is_file() and not (root / name).is_symlink()]

