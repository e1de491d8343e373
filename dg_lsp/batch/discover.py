"""Which files a batch run reads: the PATHS given, less what git ignores and vendored code.

Inside a git work tree git itself answers (`git ls-files --cached --others --exclude-standard`:
tracked files and untracked ones not ignored, with every .gitignore, .git/info/exclude and the
global excludes file applied). Outside one, a small matcher applies the .gitignore files found
on the way down (comments, `!` negation, anchored and directory-only patterns, `*`, `?`, `**`).
Folders of vendored code (node_modules, vendor, ...) are skipped either way; a file named on
the command line is taken as it is. `--include` / `--exclude` globs match the path as the diff
names it, or the file's name.
"""

from __future__ import annotations

import fnmatch
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dg_lsp.files import diff_label

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
    files = _git_files(root)
    if files is None:
        files = _walk_with_gitignore(root)
    return [f for f in files if f.is_file() and not f.is_symlink()
            and not VENDORED.intersection(f.relative_to(root).parts)]


def _git_files(root: Path) -> list[Path] | None:
    """Files git does not ignore under `root`; None when it is not in a work tree (or no git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard",
             "-z", "--", "."], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    names = done.stdout.decode("utf-8", errors="surrogateescape").split("\0")
    return sorted({root / name for name in names if name})


# -- .gitignore outside a git work tree -------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negated: bool
    directory_only: bool


def _walk_with_gitignore(root: Path) -> list[Path]:
    files: list[Path] = []
    rules_by_dir: dict[str, list[tuple[str, _Rule]]] = {}
    for folder, dirs, names in os.walk(root):
        base = Path(folder)
        inherited = rules_by_dir.get(folder, [])
        rules = inherited + [(folder, r) for r in _read_gitignore(base / ".gitignore")]
        dirs[:] = sorted(d for d in dirs if d not in VENDORED
                         and not _ignored(base / d, True, rules))
        for d in dirs:
            rules_by_dir[os.path.join(folder, d)] = rules
        files += [base / n for n in sorted(names) if not _ignored(base / n, False, rules)]
    return files


def _ignored(path: Path, is_dir: bool, rules: list[tuple[str, _Rule]]) -> bool:
    """git's rule: the last pattern that matches decides."""
    ignored = False
    for folder, rule in rules:
        if rule.directory_only and not is_dir:
            continue
        relative = path.relative_to(folder).as_posix()
        if rule.regex.fullmatch(relative):
            ignored = not rule.negated
    return ignored


def _read_gitignore(path: Path) -> list[_Rule]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    rules = []
    for line in lines:
        line = line.rstrip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = line[1:] if negated else line.removeprefix("\\")
        directory_only = line.endswith("/")
        line = line.rstrip("/")
        anchored = "/" in line
        rules.append(_Rule(re.compile(gitignore_regex(line.lstrip("/"), anchored)), negated,
                           directory_only))
    return rules


def gitignore_regex(pattern: str, anchored: bool) -> str:
    """A regex for paths relative to the .gitignore's folder that `pattern` matches."""
    out = "" if anchored else "(?:.*/)?"
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end].replace("\\", "\\\\")
            out += "[" + ("^" + body[1:] if body.startswith("!") else body) + "]"
            i = end + 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return out
