"""Files as users have them, where a child process is needed: a FIFO or a device read in a
bounded child, and permissions as a user other than root (NOBODY in a forked child when the
tests run as root). The rest, in process: tests/unit/test_files.py.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engine_procs import NOBODY, as_attacker
from tests.support.paths import ROOT
from tests.support.user_files import CASES, Docstrings, rewrite


@pytest.fixture
def model(monkeypatch) -> Docstrings:
    """The backend `dg-lsp rewrite` and `dg-lsp batch --engine inproc` load."""
    from engine import Engine

    backend = Docstrings()
    monkeypatch.setattr(Engine, "load", lambda *args, **kwargs: backend)
    return backend


@pytest.mark.parametrize("special", ["fifo", "dev-zero"])
def test_a_fifo_or_a_device_is_refused_not_read(tmp_path, special):
    path = tmp_path / "f.py"
    if special == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")

    def limit() -> None:  # a reader of /dev/zero runs out of this, not of the machine's
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    # In a child, bounded: a reader that opens the FIFO waits for a writer until the timeout.
    child = subprocess.run([sys.executable, "-m", "dg_lsp.cli", "rewrite", str(path), "--range",
                            "1:1-1:1", "--apply"], capture_output=True, text=True, timeout=60,
                           preexec_fn=limit, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert (child.returncode, child.stderr) == (
        2, f"dg-lsp rewrite: {path}: not a regular file\n")


# -- permissions, as a user who is not root ---------------------------------------------------


@pytest.fixture
def users_folder() -> Iterator[Path]:
    """A folder in /tmp (which every user reaches) that the file owner below owns."""
    folder = Path(tempfile.mkdtemp(prefix="dg-files-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in (folder, *folder.iterdir()):
            path.chmod(0o755)
        shutil.rmtree(folder)


def as_file_owner(folder: Path, action, roots: tuple[Path, ...] = ()) -> dict:
    """action()'s JSON result, run as the owner of `folder` and its files (but `roots`), who
    is not root: NOBODY in a forked child when this process is root, else this user."""
    if os.geteuid() != 0:
        return action()
    if not _can_change_uid():
        pytest.skip("this process is root but cannot change its uid (setuid refused)")
    for path in (folder, *folder.iterdir()):
        if path not in roots:
            os.chown(path, NOBODY, NOBODY)
    return as_attacker(folder, action)


def _can_change_uid() -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
        except OSError:
            os._exit(1)
        os._exit(0)
    return os.waitpid(pid, 0)[1] == 0


@pytest.fixture
def warm(model, tmp_path) -> Docstrings:
    """The model, after one rewrite as this process's user: the child running as NOBODY
    imports nothing new (the Python installation may be closed to it, as /root/.pyenv is)."""
    scratch = tmp_path / "warm.py"
    scratch.write_bytes(CASES[0][1])
    assert rewrite(scratch, "--apply") == 0
    return model


def rewrite_and_report(path: Path) -> dict:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = rewrite(path, "--apply")
    return {"status": status, "stderr": err.getvalue()}


def test_a_read_only_file_is_refused_for_its_owner(users_folder, warm):
    path = users_folder / "f.py"
    path.write_bytes(CASES[0][1])
    path.chmod(0o444)
    result = as_file_owner(users_folder, lambda: rewrite_and_report(path))
    assert result == {"status": 1, "stderr": f"dg-lsp rewrite: {path}: read-only (mode 0444); "
                                             "the file is unchanged\n"}
    assert path.read_bytes() == CASES[0][1]
    assert path.stat().st_mode & 0o777 == 0o444


def test_a_file_in_a_read_only_folder_is_refused_for_its_owner(users_folder, warm):
    path = users_folder / "f.py"
    path.write_bytes(CASES[0][1])
    path.chmod(0o644)
    users_folder.chmod(0o555)
    result = as_file_owner(users_folder, lambda: rewrite_and_report(path))
    assert result == {"status": 1, "stderr": f"dg-lsp rewrite: {path}: its folder "
                                             f"{users_folder} is read-only (mode 0555); "
                                             "the file is unchanged\n"}
    assert path.read_bytes() == CASES[0][1]


def test_a_writable_file_is_written_for_its_owner(users_folder, warm):
    path = users_folder / "f.py"
    path.write_bytes(CASES[0][1])
    path.chmod(0o600)
    result = as_file_owner(users_folder, lambda: rewrite_and_report(path))
    assert result == {"status": 0, "stderr": ""}
    assert path.read_bytes() == CASES[0][2]
    assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (
        NOBODY if os.geteuid() == 0 else os.geteuid(), 0o600)


@pytest.mark.skipif(os.geteuid() != 0, reason="a file of another user needs root to make")
def test_a_file_a_rename_would_take_from_its_owner_is_refused(users_folder, warm):
    path = users_folder / "f.py"  # root's, but anyone may write it
    path.write_bytes(CASES[0][1])
    path.chmod(0o666)
    result = as_file_owner(users_folder, lambda: rewrite_and_report(path), roots=(path,))
    assert result == {"status": 1, "stderr": f"dg-lsp rewrite: {path}: writing it would "
                                             "change its owner or group (uid 0, gid 0); the "
                                             "file is unchanged\n"}
    assert (path.read_bytes(), path.stat().st_uid) == (CASES[0][1], 0)
    assert [p.name for p in users_folder.iterdir()] == ["f.py"]  # no temporary file left
