"""The token in a private file: the TCP listener's (`dg-engine serve --listen`) and a team's
(`dg-engine serve --ray`, `dg-engine status`, dg-lsp's `engineTokenFile`).

The file is checked before a byte of it is read. It is opened without following a link
(O_NOFOLLOW: a link to /dev/zero or to another user's file is refused) and without blocking
(O_NONBLOCK: a FIFO nobody writes must not hang an editor), then fstat'ed: a regular file,
owned by you, mode 0600 or stricter, at most MAX_FILE bytes. What it holds must be one line,
whitespace stripped, of characters an HTTP header carries (a second line such as `# team
token` is refused, not sent). Every error is one line that names the file and never holds
its content.

A one-shot command in CI may instead be handed the token on a descriptor: `--token-file -`
(standard input) or /dev/fd/N (bash's `<(printenv TOKEN)`). Such a pipe was made by the parent
and is held by the two processes alone, so it is not held to the owner and mode rule; it is
still bounded (MAX_FILE bytes, INHERITED_TIMEOUT seconds, read without blocking) and only its
first line is taken (`read_inherited` states the whole rule).
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import time
from collections.abc import Callable
from pathlib import Path

MAX_FILE = 4096  # bytes: a token is a few dozen characters; this is generous
MAX_TOKEN = 1024  # characters: a hello with its token must fit the daemon's first frame (4 KiB)
# Visible ASCII, no space: what `Authorization: Bearer <token>` carries as it is.
TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")
STDIN_NAMES = ("-", "/dev/stdin")
DESCRIPTOR_PATH = re.compile(r"/(?:dev/fd|proc/self/fd)/([0-9]{1,6})")
INHERITED_TIMEOUT = 10.0  # seconds for a pipe's first line: CI writes it before the command


class TokenError(ValueError):
    """A token file that cannot be used; the message names the file, never its content."""


def default_token_file() -> Path:
    """Where a developer keeps the team's token when no --token-file is given."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dg-engine" / "token"


def read_token(path: Path | str | None = None) -> str:
    """The token in `path` (default: `default_token_file()`); TokenError (one line, never the
    token) when the file is not a private regular file of yours holding one token line.

    `path` may also name a descriptor the parent process handed over ("-" or /dev/stdin for
    standard input, /dev/fd/N, /proc/self/fd/N): `read_inherited` reads it."""
    if path:
        fd = inherited_descriptor(path)
        if fd is not None:
            return read_inherited(fd, str(path))
    path = Path(path).expanduser() if path else default_token_file()
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        reason = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise TokenError(f"cannot read the token file {path}: {reason}") from None
    try:
        data = _read_private(fd, path)
    finally:
        os.close(fd)
    return check_token(data, path)


def check_token(data: bytes, path: Path | str, *, source: str | None = None,
                token_in: str | None = None) -> str:
    """The one token line of a token file's bytes; TokenError (never the content) otherwise.

    `source` and `token_in` name where the bytes came from in messages (default: "the token
    file PATH", "the token in PATH")."""
    source = source or f"the token file {path}"
    token_in = token_in or f"the token in {path}"
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenError(f"{source} holds characters other than ASCII") from None
    lines = text.strip().splitlines()
    if not lines:
        raise TokenError(f"{source} is empty")
    if len(lines) > 1:
        raise TokenError(f"{source} has {len(lines)} lines: it must hold the token alone, on "
                         "one line")
    token = lines[0].strip()
    if len(token) > MAX_TOKEN:
        raise TokenError(f"{token_in} is longer than {MAX_TOKEN} characters")
    if not TOKEN_CHARACTERS.fullmatch(token):
        raise TokenError(f"{token_in} has a space or a control character: a token is visible "
                         "ASCII (e.g. `openssl rand -hex 32`)")
    return token


def _read_private(fd: int, path: Path) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise TokenError(f"the token file {path} is not a regular file")
    return _read_checked(fd, info, f"the token file {path}", str(path), os.read)


def _read_checked(fd: int, info: os.stat_result, source: str, chmod: str,
                  read: Callable[[int, int], bytes]) -> bytes:
    """A regular file's bytes once its owner, mode and size pass (`source` names it in
    messages, `chmod` is what the fix names)."""
    if info.st_uid != os.geteuid():
        raise TokenError(f"{source} is owned by uid {info.st_uid}, not by you "
                         f"(uid {os.geteuid()})")
    if info.st_mode & 0o077:
        raise TokenError(f"{source} has mode {stat.S_IMODE(info.st_mode):04o}: other users "
                         f"may read it; chmod 600 {chmod}")
    if info.st_size > MAX_FILE:
        raise TokenError(f"{source} is larger than {MAX_FILE} bytes")
    data = b""
    try:
        while len(data) <= MAX_FILE and (chunk := read(fd, MAX_FILE + 1 - len(data))):
            data += chunk
    except OSError as exc:
        raise TokenError(f"cannot read {source}: {exc.strerror}") from None
    if len(data) > MAX_FILE:  # it grew since the fstat
        raise TokenError(f"{source} is larger than {MAX_FILE} bytes")
    return data


# -- a descriptor the parent process hands over ------------------------------------------------


def inherited_descriptor(path: Path | str) -> int | None:
    """The descriptor `path` names when it is one this process inherited: "-" and /dev/stdin
    are standard input (0); /dev/fd/N and /proc/self/fd/N are N (what bash's `<(...)` passes).
    None for any other path: a file, checked as such."""
    text = str(path)
    if text in STDIN_NAMES:
        return 0
    match = DESCRIPTOR_PATH.fullmatch(text)
    return int(match.group(1)) if match else None


def descriptor_name(fd: int, path: Path | str) -> str:
    """How messages name an inherited descriptor."""
    return "standard input" if fd == 0 else str(path)


def read_inherited(fd: int, path: Path | str = "-", timeout: float | None = None) -> str:
    """The token on descriptor `fd`, handed over by the parent (`--token-file -`, a pipe from
    a CI step or bash's `<(printenv TOKEN)`); TokenError (one line, never the token) otherwise.

    The rule: the descriptor is read as it is; it is never reopened by a path.
    - A pipe, FIFO or socket: its mode says nothing (the parent made it, and only the two
      processes hold it), so there is no owner or mode check; the first line is the token,
      read without blocking (poll, then read what is there) and given up after `timeout`
      seconds (default INHERITED_TIMEOUT) or MAX_FILE bytes without a line end. Reading stops
      at the first line's end; whatever came after it in the same read is ignored.
    - A regular file (`--token-file - < F`, `3< F`): the token file's rules (yours, mode
      0600, at most MAX_FILE bytes, one line), read from its start with pread (the offset the
      descriptor shares with the parent stays where it was).
    - A terminal or anything else is refused: nothing is waited for and nothing is echoed.
    """
    name = descriptor_name(fd, path)
    timeout = INHERITED_TIMEOUT if timeout is None else timeout
    try:
        info = os.fstat(fd)
    except OSError:
        raise TokenError(f"cannot read the token from {name}: no such open descriptor"
                         ) from None
    mode = info.st_mode
    if stat.S_ISREG(mode):
        source = f"the file on {name}"
        data = _read_checked(fd, info, source, "that file",
                             _reader_from_start())
        return check_token(data, name, source=source, token_in=f"the token on {name}")
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        line = _first_line(fd, name, timeout)
        return check_token(line, name, source=name, token_in=f"the token on {name}")
    if stat.S_ISCHR(mode) and os.isatty(fd):
        raise TokenError(f"{name} is a terminal: pipe the token in (e.g. `printenv DG_TOKEN | "
                         "... --token-file -`) or name a token file")
    raise TokenError(f"{name} is not a pipe or a private file: it cannot carry the token")


def _reader_from_start() -> Callable[[int, int], bytes]:
    """os.read's shape over pread from offset 0: a file handed over is read whole, and the
    offset its descriptor shares with the parent is left where it was."""
    offset = 0

    def read(fd: int, size: int) -> bytes:
        nonlocal offset
        chunk = os.pread(fd, size, offset)
        offset += len(chunk)
        return chunk

    return read


def _first_line(fd: int, name: str, timeout: float) -> bytes:
    """The bytes of the first non-blank line on a pipe: read as they arrive, never blocking
    (the descriptor's own flags, shared with the parent, are left alone), until a line end,
    the end of the stream, MAX_FILE bytes or `timeout` seconds."""
    deadline = time.monotonic() + timeout
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    data = b""
    while b"\n" not in data.lstrip():
        if len(data) > MAX_FILE:
            raise TokenError(f"{name} sent more than {MAX_FILE} bytes without a line end")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TokenError(f"no token arrived on {name} within {timeout:g} s (a line, "
                             "or the end of the stream)")
        if not poller.poll(max(1, int(left * 1000))):
            continue
        try:
            chunk = os.read(fd, MAX_FILE + 1 - len(data))
        except BlockingIOError:
            continue
        except OSError as exc:
            raise TokenError(f"cannot read the token from {name}: {exc.strerror}") from None
        if not chunk:  # the writer closed its end
            break
        data += chunk
    return data.lstrip().split(b"\n", 1)[0]
