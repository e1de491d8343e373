"""The token in a private file: the TCP listener's (`dg-engine serve --listen`) and a team's
(`dg-engine serve --ray`, `dg-engine status`, dg-lsp's `engineTokenFile`).

The file is checked before a byte of it is read. It is opened without following a link
(O_NOFOLLOW: a link to /dev/zero or to another user's file is refused) and without blocking
(O_NONBLOCK: a FIFO nobody writes must not hang an editor), then fstat'ed: a regular file,
owned by you, mode 0600 or stricter, at most MAX_FILE bytes. What it holds must be one line,
whitespace stripped, of characters an HTTP header carries (a second line such as `# team
token` is refused, not sent). Every error is one line that names the file and never holds
its content.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

MAX_FILE = 4096  # bytes: a token is a few dozen characters; this is generous
MAX_TOKEN = 1024  # characters: a hello with its token must fit the daemon's first frame (4 KiB)
# Visible ASCII, no space: what `Authorization: Bearer <token>` carries as it is.
TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")


class TokenError(ValueError):
    """A token file that cannot be used; the message names the file, never its content."""


def default_token_file() -> Path:
    """Where a developer keeps the team's token when no --token-file is given."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "dg-engine" / "token"


def read_token(path: Path | str | None = None) -> str:
    """The token in `path` (default: `default_token_file()`); TokenError (one line, never the
    token) when the file is not a private regular file of yours holding one token line."""
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


def check_token(data: bytes, path: Path | str) -> str:
    """The one token line of a token file's bytes; TokenError (never the content) otherwise."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenError(f"the token file {path} holds characters other than ASCII") from None
    lines = text.strip().splitlines()
    if not lines:
        raise TokenError(f"the token file {path} is empty")
    if len(lines) > 1:
        raise TokenError(f"the token file {path} has {len(lines)} lines: it must hold the "
                         "token alone, on one line")
    token = lines[0].strip()
    if len(token) > MAX_TOKEN:
        raise TokenError(f"the token in {path} is longer than {MAX_TOKEN} characters")
    if not TOKEN_CHARACTERS.fullmatch(token):
        raise TokenError(f"the token in {path} has a space or a control character: a token "
                         "is visible ASCII (e.g. `openssl rand -hex 32`)")
    return token


def _read_private(fd: int, path: Path) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise TokenError(f"the token file {path} is not a regular file")
    if info.st_uid != os.geteuid():
        raise TokenError(f"the token file {path} is owned by uid {info.st_uid}, not by you "
                         f"(uid {os.geteuid()})")
    if info.st_mode & 0o077:
        raise TokenError(f"the token file {path} has mode {stat.S_IMODE(info.st_mode):04o}: "
                         f"other users may read it; chmod 600 {path}")
    if info.st_size > MAX_FILE:
        raise TokenError(f"the token file {path} is larger than {MAX_FILE} bytes")
    data = b""
    try:
        while len(data) <= MAX_FILE and (chunk := os.read(fd, MAX_FILE + 1 - len(data))):
            data += chunk
    except OSError as exc:
        raise TokenError(f"cannot read the token file {path}: {exc.strerror}") from None
    if len(data) > MAX_FILE:  # it grew since the fstat
        raise TokenError(f"the token file {path} is larger than {MAX_FILE} bytes")
    return data
