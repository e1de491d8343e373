"""Reading source files, writing them back, and diffs `git apply` accepts.

The one reader of source files for every command and the workspace index (`dg-lsp complete`,
`rewrite`, `fill`, batch mode, the repository index and so retrieval). `read_source` reads only
a regular file: a FIFO, a device such as /dev/zero, a folder or a socket is refused before a
byte is read, and so is a file larger than its bound. Given the workspace's `root`, it also
refuses a path whose target, links resolved, lies outside that root: a link inside a repository
to a file elsewhere (a key, /etc/passwd) is never read, so never sent to a model.

One place owns a file's line endings and BOM:
`read_source` gives the model and the edits the text with "\\n" newlines and no BOM, and
records how the file wrote them; `Source.restore` puts them back for the written file and for
the patch alike: lines the edit kept keep their own ending, new lines get the file's dominant
one (CRLF, CR or LF), a BOM stays.

`write_source` writes a file only if it is still what was read (its bytes, not its mtime):
an edit made while the model ran is never overwritten. It is whole or untouched (a temporary
file beside the file, then a rename; mode, owner and group kept). A symbolic link is written
through: its target changes and the link stays a link. Refused, with the reason: a file its
owner cannot write (a rename would bypass the mode), one in a folder that cannot take the
temporary file, a file with other hard links (a rename would split them), one whose owner or
group a rename would change, a link that now points elsewhere.
"""

from __future__ import annotations

import bisect
import codecs
import difflib
import os
import re
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

MAX_SOURCE_BYTES = 5_000_000
NEWLINES = re.compile(r"\r\n|\r|\n")


class SourceError(Exception):
    """A file that cannot be edited: missing, binary, not UTF-8, too large, not writable,
    changed on disk."""


@dataclass(frozen=True)
class Source:
    """A file as read: `text` for the model and the edits, and what writing it back needs."""

    path: Path  # as given
    target: Path  # the file itself: `path` with its links resolved
    data: bytes  # the bytes read: the file must still hold them when it is written
    text: str  # "\n" newlines, no BOM
    newline: str  # the file's most frequent ending, for lines an edit adds
    bom: bool

    @property
    def original(self) -> str:
        """The file's text as it is on disk (its endings, its BOM)."""
        return self.data.decode("utf-8")

    def restore(self, text: str) -> str:
        """`text` (an edit of `self.text`) with the file's line endings and BOM."""
        endings = NEWLINES.findall(self.original)
        if len(set(endings)) <= 1:  # one style (or none): every line gets it
            restored = text.replace("\n", self.newline)
        else:
            restored = _restore_mixed(self.text, endings, text, self.newline)
        return ("\ufeff" if self.bom else "") + restored


def read_source(path: Path, root: Path | None = None,
                max_bytes: int = MAX_SOURCE_BYTES) -> Source:
    """The file, checked before it is read (a regular file of at most `max_bytes`: a FIFO or
    /dev/zero is refused, not read; with `root`, one whose target lies inside `root`);
    SourceError with a clear reason otherwise."""
    target = Path(os.path.realpath(path))
    if root is not None and not target.is_relative_to(os.path.realpath(root)):
        raise SourceError(f"{path}: leads outside {root} (to {target}); not read")
    data = _read_regular(path, target, max_bytes)
    if b"\x00" in data:
        raise SourceError(f"{path}: binary file")
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        raw = data[len(codecs.BOM_UTF8) if bom else 0 :].decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not UTF-8 text") from None
    counts = {ending: 0 for ending in ("\n", "\r\n", "\r")}  # ties go to the first
    for ending in NEWLINES.findall(raw):
        counts[ending] += 1
    newline = max(counts, key=counts.__getitem__)
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    return Source(Path(path), target, data, text, newline, bom)


def write_source(source: Source, content: str) -> None:
    """Write `content` (the file's whole text, as `Source.restore` gives it) over the file
    `source` was read from; SourceError (the file untouched) when that is unsafe or the file
    changed since it was read. See the module's docstring."""
    path, target = source.path, source.target
    if Path(os.path.realpath(path)) != target:
        raise SourceError(f"{path}: the link now points to another file")
    try:
        info = os.lstat(target)
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror}") from None
    _check_writable(path, target, info)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                   suffix=".dg-lsp")
    except OSError as exc:
        raise SourceError(f"{path}: cannot write beside it in {target.parent}: "
                          f"{exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content.encode("utf-8"))
            _keep_owner(path, out.fileno(), info)
            os.fchmod(out.fileno(), stat.S_IMODE(info.st_mode))
        # Last, so the window in which an editor's save could be lost is as short as it can be.
        if _read_regular(path, target) != source.data:
            raise SourceError(f"{path}: changed on disk since it was read")
        os.replace(tmp, target)
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
    """A unified diff of one file, with a/ and b/ prefixes as `git apply` expects. Lines are
    split where git splits them, at "\\n" only: a CR stays part of its line."""
    lines = difflib.unified_diff(_git_lines(old), _git_lines(new), f"a/{label}", f"b/{label}")
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def _git_lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _read_regular(path: Path, target: Path, max_bytes: int = MAX_SOURCE_BYTES) -> bytes:
    """The bytes of `target`, opened without following a link or blocking, fstat'ed first."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(target, flags)
    except FileNotFoundError:
        raise SourceError(f"{path}: no such file") from None
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise SourceError(f"{path}: is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise SourceError(f"{path}: not a regular file")
        if info.st_size > max_bytes:
            raise SourceError(f"{path}: too large ({info.st_size} bytes)")
        with os.fdopen(os.dup(fd), "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise SourceError(f"{path}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise SourceError(f"{path}: too large (over {max_bytes} bytes)")
    return data


def _check_writable(path: Path, target: Path, info: os.stat_result) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise SourceError(f"{path}: not a regular file")
    # os.access: the owner's, group's or others' bit as it applies to us (root passes it, so
    # a file nobody may write is refused by its mode as well).
    if not info.st_mode & 0o222 or not os.access(target, os.W_OK):
        raise SourceError(f"{path}: read-only (mode {stat.S_IMODE(info.st_mode):04o})")
    # The folder's mode as well as os.access: root may write a 0555 folder, but its owner
    # made it read-only on purpose.
    folder = os.stat(target.parent)
    if not folder.st_mode & 0o222 or not os.access(target.parent, os.W_OK | os.X_OK):
        raise SourceError(f"{path}: its folder {target.parent} is read-only "
                          f"(mode {stat.S_IMODE(folder.st_mode):04o})")
    if info.st_nlink > 1:
        raise SourceError(f"{path}: has {info.st_nlink} hard links, which writing a new file "
                          "would split")


def _keep_owner(path: Path, fd: int, info: os.stat_result) -> None:
    """The new file gets the old one's owner and group, or the write is refused."""
    new = os.fstat(fd)
    if (new.st_uid, new.st_gid) == (info.st_uid, info.st_gid):
        return
    try:
        os.fchown(fd, info.st_uid, info.st_gid)
    except PermissionError:
        raise SourceError(f"{path}: writing it would change its owner or group (uid "
                          f"{info.st_uid}, gid {info.st_gid})") from None


def _restore_mixed(old: str, endings: list[str], new: str, newline: str) -> str:
    """`new` with the endings of a file that mixes them: a line kept from `old` (whose i-th
    line ended with endings[i]) keeps its ending; a changed line takes the ending of the old
    line in its place, an added one the dominant `newline`."""
    new_lines = new.split("\n")
    origin = _line_origins(old.split("\n"), new_lines)
    ends = [endings[i] if i is not None and i < len(endings) else newline for i in origin]
    return "".join(line + end for line, end in zip(new_lines, ends[:-1] + [""], strict=True))


def _line_origins(old: list[str], new: list[str]) -> list[int | None]:
    """For each new line, the old line it stands for (None: added), in O(n log n) as patience
    diff matches: lines found once in each are anchors (the longest run of them in the same
    order); from each anchor, equal lines are matched outward; what is left between two
    anchors was changed, and its lines pair up in order."""
    old_count, new_count = Counter(old), Counter(new)
    where = {line: i for i, line in enumerate(old) if old_count[line] == 1}
    pairs = [(where[line], j) for j, line in enumerate(new)
             if new_count[line] == 1 and line in where]
    origin: list[int | None] = [None] * len(new)
    i0, j0 = 0, 0  # the region after the last anchor
    for ai, aj in [*_increasing(pairs), (len(old), len(new))]:
        i, j = i0, j0
        while i < ai and j < aj and old[i] == new[j]:
            origin[j] = i
            i, j = i + 1, j + 1
        ei, ej = ai, aj
        while ei > i and ej > j and old[ei - 1] == new[ej - 1]:
            ei, ej = ei - 1, ej - 1
            origin[ej] = ei
        for k in range(min(ei - i, ej - j)):  # changed lines, in the places of the old ones
            origin[j + k] = i + k
        if aj < len(new):
            origin[aj] = ai
        i0, j0 = ai + 1, aj + 1
    return origin


def _increasing(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of `pairs` (in increasing second item) whose first items
    increase too."""
    keys: list[int] = []  # keys[k]: the smallest first item that ends a run of length k + 1
    ends: list[int] = []  # the index in `pairs` of that run's last pair
    before: list[int | None] = [None] * len(pairs)
    for n, (i, _) in enumerate(pairs):
        k = bisect.bisect_left(keys, i)
        before[n] = ends[k - 1] if k else None
        if k == len(keys):
            keys.append(i)
            ends.append(n)
        else:
            keys[k], ends[k] = i, n
    run: list[tuple[int, int]] = []
    at = ends[-1] if ends else None
    while at is not None:
        run.append(pairs[at])
        at = before[at]
    return run[::-1]
