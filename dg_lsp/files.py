"""Reading source files, writing them back atomically, and diffs `git apply` accepts.

Shared by `dg-lsp rewrite` and batch mode: a file is either untouched or fully written
(temporary file in the same folder, then rename; the original's mode is kept).
"""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path

MAX_SOURCE_BYTES = 5_000_000


class SourceError(Exception):
    """A file that cannot be edited: missing, binary, not UTF-8, too large."""


def read_source(path: Path) -> str:
    """The file's text (newlines as they are); SourceError with a clear reason otherwise."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory") from None
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise SourceError(f"{path}: too large ({len(data)} bytes)")
    if b"\x00" in data:
        raise SourceError(f"{path}: binary file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not UTF-8 text") from None


def write_atomic(path: Path, text: str) -> None:
    """Replace the file's contents in one rename, keeping its permission bits."""
    mode = path.stat().st_mode & 0o7777
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".dg-lsp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def diff_label(path: Path) -> str:
    """The path as a diff names it: relative to the working folder when inside it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix().lstrip("/")


def unified_diff(label: str, old: str, new: str) -> str:
    """A unified diff of one file, with a/ and b/ prefixes as `git apply` expects."""
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 f"a/{label}", f"b/{label}")
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)
