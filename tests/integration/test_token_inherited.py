"""The token on a descriptor the parent handed over (engine.serve.token.read_inherited): what
CI does with `--token-file -` or bash's `--token-file <(printenv TOKEN)`.

The rule: a pipe (FIFO, socket) is taken without the owner and mode check, its first line is
the token, read without blocking and given up after a timeout or MAX_FILE bytes; a regular file
behind a descriptor is held to the token file's rules; a terminal or a device is refused. No
message holds the token.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.serve.token import (
    MAX_FILE,
    TokenError,
    inherited_descriptor,
    read_inherited,
    read_token,
)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-ci-token"


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


@pytest.mark.parametrize(("path", "fd"), [
    ("-", 0), ("/dev/stdin", 0), ("/dev/fd/0", 0), ("/dev/fd/63", 63), ("/proc/self/fd/7", 7),
    ("/dev/fd/x", None), ("/dev/fd/", None), ("token", None), ("/tmp/-", None),
    ("/dev/fd/63/x", None), ("~/.config/dg-engine/token", None),
])
def test_which_paths_name_an_inherited_descriptor(path, fd):
    assert inherited_descriptor(path) == fd


def test_a_pipe_gives_its_first_line_without_the_mode_check(pipe):
    r, w = pipe
    os.write(w, f"\n  {SECRET}  \n# a comment CI printed\nmore\n".encode())
    flags = fcntl.fcntl(r, fcntl.F_GETFL)
    assert read_token(f"/dev/fd/{r}") == SECRET
    assert fcntl.fcntl(r, fcntl.F_GETFL) == flags  # the parent's flags are left alone


def test_a_pipe_closed_without_a_line_end_gives_what_it_held(pipe):
    r, w = pipe
    os.write(w, SECRET.encode())
    os.close(w)
    assert read_inherited(r, f"/dev/fd/{r}") == SECRET


def test_a_pipe_nobody_writes_is_given_up_after_the_timeout(pipe):
    r, _ = pipe
    started = time.monotonic()
    with pytest.raises(TokenError) as caught:
        read_inherited(r, f"/dev/fd/{r}", timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 3
    assert str(caught.value) == (f"no token arrived on /dev/fd/{r} within 0.2 s (a line, or "
                                 "the end of the stream)")


def test_a_pipe_that_ends_empty_or_never_ends_its_line_is_refused(pipe):
    r, w = pipe
    os.close(w)
    with pytest.raises(TokenError, match=f"^/dev/fd/{r} is empty$"):
        read_inherited(r, f"/dev/fd/{r}")
    r2, w2 = os.pipe()
    try:
        os.write(w2, b"x" * (MAX_FILE + 10))
        with pytest.raises(TokenError, match=f"sent more than {MAX_FILE} bytes without a line"):
            read_inherited(r2, f"/dev/fd/{r2}", timeout=5)
    finally:
        os.close(r2)
        os.close(w2)


@pytest.mark.parametrize(("content", "message"), [
    (f"{SECRET} {SECRET}\n", "the token on {name} has a space or a control character"),
    (f"{SECRET}é\n", "{name} holds characters other than ASCII"),
    ("x" * 2000 + "\n", "the token on {name} is longer than 1024 characters"),
])
def test_a_bad_token_on_a_pipe_is_refused_without_repeating_it(pipe, content, message):
    r, w = pipe
    os.write(w, content.encode())
    name = f"/dev/fd/{r}"
    with pytest.raises(TokenError) as caught:
        read_inherited(r, name)
    assert str(caught.value).startswith(message.format(name=name))
    assert SECRET not in str(caught.value) and "xxxx" not in str(caught.value)


def test_a_regular_file_behind_a_descriptor_is_held_to_the_token_file_rules(tmp_path):
    path = tmp_path / "token"
    path.write_text(f"{SECRET}\n")
    path.chmod(0o600)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 3, os.SEEK_SET)  # the parent's offset: read from the start, left as is
        assert read_token(f"/dev/fd/{fd}") == SECRET
        assert os.lseek(fd, 0, os.SEEK_CUR) == 3
        path.chmod(0o644)
        with pytest.raises(TokenError) as caught:
            read_token(f"/dev/fd/{fd}")
        assert str(caught.value) == (f"the file on /dev/fd/{fd} has mode 0644: other users may "
                                     "read it; chmod 600 that file")
    finally:
        os.close(fd)


def test_a_terminal_a_device_and_a_closed_descriptor_are_refused():
    leader, follower = os.openpty()
    try:
        with pytest.raises(TokenError, match=f"^/dev/fd/{follower} is a terminal: pipe the "):
            read_inherited(follower, f"/dev/fd/{follower}")
    finally:
        os.close(leader)
        os.close(follower)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        with pytest.raises(TokenError, match="is not a pipe or a private file"):
            read_inherited(null, f"/dev/fd/{null}")
    finally:
        os.close(null)
    with pytest.raises(TokenError, match=f"^cannot read the token from /dev/fd/{null}: no such"):
        read_inherited(null, f"/dev/fd/{null}")


def test_standard_input_is_named_so_and_read_once():
    script = ("from engine.serve.token import read_token, TokenError\n"
              "print(read_token('-') == " + repr(SECRET) + ")\n"
              "try:\n    read_token('-')\nexcept TokenError as exc:\n    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", script], input=f"{SECRET}\n", text=True,
                          capture_output=True, timeout=30, env={"PYTHONPATH": str(ROOT)})
    assert (done.stdout, done.stderr) == ("True\nstandard input is empty\n", "")
