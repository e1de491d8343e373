"""Files as users have them, through `dg-lsp rewrite` and `dg-lsp batch` (dg_lsp.files): line
endings and BOM kept in the written file and in the patch, edits made while the model runs
never overwritten, symbolic links written through, read-only files and folders refused.

The model is a scripted backend (every docstring reads "Doc."), so the expected bytes are
exact; the commands run in this process with `Engine.load` answering with it. Permission
cases run as a user other than root: as NOBODY in a forked child when the tests run as root.
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

from dg_lsp.cli import main
from dg_lsp.files import read_source
from tests.support.engine_procs import NOBODY, as_attacker
from tests.support.paths import ROOT
from tests.support.scripted import Scripted

# (name, the file, the file after a docstring for area()): every ending style, with a BOM.
CASES = [
    ("lf", b"def area(r):\n    return 3 * r * r\n",
     b'def area(r):\n    """Doc."""\n    return 3 * r * r\n'),
    ("crlf", b"def area(r):\r\n    return 3 * r * r\r\n",
     b'def area(r):\r\n    """Doc."""\r\n    return 3 * r * r\r\n'),
    ("cr", b"def area(r):\r    return 3 * r * r\r",
     b'def area(r):\r    """Doc."""\r    return 3 * r * r\r'),
    # Mixed: CRLF is the most frequent, so the new line gets it; the LF lines stay LF.
    ("mixed", b"def area(r):\r\n    return 3 * r * r\r\n\n\nx = 1\r\n",
     b'def area(r):\r\n    """Doc."""\r\n    return 3 * r * r\r\n\n\nx = 1\r\n'),
    ("mixed-lf", b"def area(r):\n    return 3 * r * r\r\n\n\nx = 1\n",
     b'def area(r):\n    """Doc."""\n    return 3 * r * r\r\n\n\nx = 1\n'),
    ("bom-crlf", b"\xef\xbb\xbfdef area(r):\r\n    return 3 * r * r\r\n",
     b'\xef\xbb\xbfdef area(r):\r\n    """Doc."""\r\n    return 3 * r * r\r\n'),
    ("crlf-no-final-newline", b"def area(r):\r\n    return 3 * r * r",
     b'def area(r):\r\n    """Doc."""\r\n    return 3 * r * r'),
]
IDS = [name for name, _, _ in CASES]


class Docstrings(Scripted):
    """Writes "Doc." for every target; `during` runs while the model "runs"."""

    def __init__(self, during=None) -> None:
        super().__init__()
        self.during = during

    def _drafts(self):
        if self.during is not None:
            self.during()
        self.texts.append("Doc.")
        return super()._drafts()


@pytest.fixture
def model(monkeypatch) -> Docstrings:
    """The backend `dg-lsp rewrite` and `dg-lsp batch --engine inproc` load."""
    from engine import Engine

    backend = Docstrings()
    monkeypatch.setattr(Engine, "load", lambda *args, **kwargs: backend)
    return backend


def rewrite(path: Path, *args: str) -> int:
    return main(["rewrite", str(path), "--range", "1:1-1:1", "--action", "docstring", *args])


def batch(path: Path, *args: str) -> int:
    return main(["batch", str(path), "--action", "docstrings", "--engine", "inproc", *args])


def git_apply(folder: Path, patch: str) -> None:
    (folder / "p.patch").write_bytes(patch.encode("utf-8"))
    done = subprocess.run(["git", "apply", "p.patch"], cwd=folder, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (folder / "p.patch").unlink()


# -- line endings -----------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "old", "new"), CASES, ids=IDS)
def test_the_model_sees_newlines_and_the_file_gets_its_own_endings_back(name, old, new,
                                                                         tmp_path):
    path = tmp_path / "f.py"
    path.write_bytes(old)
    source = read_source(path)
    assert "\r" not in source.text and not source.text.startswith("\ufeff")
    assert source.restore(source.text).encode() == old  # no edit: the same bytes
    edited = source.text.replace("):\n", '):\n    """Doc."""\n', 1)
    assert source.restore(edited).encode() == new


@pytest.mark.parametrize(("edit", "new"), [
    # A changed line keeps the ending of the line in its place; an added one gets CRLF.
    (("b = 2\n", "b = 20\nb2 = 21\n"), b"a = 1\r\nb = 20\nb2 = 21\r\n\nc = 3\r\nd = 4\r\n"),
    (("c = 3\n", ""), b"a = 1\r\nb = 2\n\nd = 4\r\n"),
    (("\nc = 3", "\nc = 3\n\n"), b"a = 1\r\nb = 2\n\nc = 3\r\n\r\n\r\nd = 4\r\n"),
])
def test_a_mixed_file_keeps_each_kept_lines_ending(tmp_path, edit, new):
    path = tmp_path / "f.py"
    path.write_bytes(b"a = 1\r\nb = 2\n\nc = 3\r\nd = 4\r\n")
    source = read_source(path)
    assert source.restore(source.text.replace(*edit)).encode() == new


@pytest.mark.parametrize(("name", "old", "new"), CASES, ids=IDS)
def test_rewrite_keeps_the_files_endings_and_its_diff_applies_with_git(name, old, new, tmp_path,
                                                                       model, capsys,
                                                                       monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "f.py"
    path.write_bytes(old)
    assert rewrite(path, "--diff") == 0
    patch = capsys.readouterr().out
    git_apply(tmp_path, patch)
    assert path.read_bytes() == new
    path.write_bytes(old)
    assert rewrite(path, "--apply") == 0
    assert path.read_bytes() == new


@pytest.mark.parametrize(("name", "old", "new"), CASES, ids=IDS)
def test_batch_keeps_the_files_endings_and_its_patch_applies_with_git(name, old, new, tmp_path,
                                                                      model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "f.py"
    path.write_bytes(old)
    assert batch(path, "--output", str(tmp_path / "out.patch")) == 0
    git_apply(tmp_path, (tmp_path / "out.patch").read_bytes().decode("utf-8"))
    assert path.read_bytes() == new
    path.write_bytes(old)
    assert batch(path, "--apply") == 0
    assert path.read_bytes() == new


def test_a_patch_splits_lines_only_where_git_does(tmp_path, model, capsys, monkeypatch):
    # A form feed and U+2028 are line breaks to str.splitlines, not to git.
    monkeypatch.chdir(tmp_path)
    old = "def area(r):\n    return 3 * r * r  # \x0c \u2028 end\n"
    path = tmp_path / "f.py"
    path.write_text(old, newline="")
    assert rewrite(path, "--diff") == 0
    git_apply(tmp_path, capsys.readouterr().out)
    assert path.read_bytes().decode() == old.replace("):\n", '):\n    """Doc."""\n')


# -- edits made while the model runs ----------------------------------------------------------


USERS_EDIT = b"def area(r):\n    return 3.14159 * r * r  # typed while the model ran\n"


def test_rewrite_apply_refuses_when_the_file_changed_while_the_model_ran(tmp_path, model,
                                                                         capsys):
    path = tmp_path / "f.py"
    path.write_bytes(CASES[0][1])
    model.during = lambda: path.write_bytes(USERS_EDIT)
    assert rewrite(path, "--apply") == 1
    assert capsys.readouterr().err == (f"dg-lsp rewrite: {path}: changed on disk since it was "
                                       "read; the file is unchanged\n")
    assert path.read_bytes() == USERS_EDIT


def test_batch_apply_refuses_when_the_file_changed_while_the_model_ran(tmp_path, model,
                                                                       capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "f.py"
    path.write_bytes(CASES[0][1])
    model.during = lambda: path.write_bytes(USERS_EDIT)
    assert batch(path, "--apply") == 3
    assert ("dg-lsp batch: f.py: not written: changed on disk since it was read\n"
            in capsys.readouterr().err)
    assert path.read_bytes() == USERS_EDIT


def test_a_change_of_the_same_length_and_mtime_is_still_seen(tmp_path, model, capsys):
    path = tmp_path / "f.py"
    path.write_bytes(CASES[0][1])
    stat = path.stat()

    def same_size_and_time() -> None:
        path.write_bytes(CASES[0][1].replace(b"3", b"4"))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    model.during = same_size_and_time
    assert rewrite(path, "--apply") == 1
    assert path.read_bytes() == CASES[0][1].replace(b"3", b"4")


# -- links ------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", [rewrite, batch])
def test_a_symlinked_file_is_written_through_and_stays_a_link(tmp_path, model, monkeypatch,
                                                              command):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "f.py"
    target.write_bytes(CASES[1][1])
    target.chmod(0o640)
    link = tmp_path / "link.py"
    link.symlink_to(Path("real") / "f.py")
    assert command(link, "--apply") == 0
    assert link.is_symlink() and os.readlink(link) == "real/f.py"
    assert target.read_bytes() == CASES[1][2]
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["f.py"]  # no temp left


def test_a_file_with_another_hard_link_is_refused(tmp_path, model, capsys):
    path = tmp_path / "f.py"
    path.write_bytes(CASES[0][1])
    os.link(path, tmp_path / "other.py")
    assert rewrite(path, "--apply") == 1
    assert capsys.readouterr().err == (f"dg-lsp rewrite: {path}: has 2 hard links, which "
                                       "writing a new file would split; the file is unchanged\n")
    assert (tmp_path / "other.py").read_bytes() == path.read_bytes() == CASES[0][1]


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
                                             f"{users_folder} is read-only; the file is "
                                             "unchanged\n"}
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


def test_a_file_nobody_may_write_is_refused_even_for_root(tmp_path, model, capsys):
    path = tmp_path / "f.py"
    path.write_bytes(CASES[0][1])
    path.chmod(0o444)
    assert rewrite(path, "--apply") == 1
    assert capsys.readouterr().err == (f"dg-lsp rewrite: {path}: read-only (mode 0444); the "
                                       "file is unchanged\n")
    assert path.read_bytes() == CASES[0][1]


def test_a_link_that_points_elsewhere_by_the_time_of_writing_is_refused(tmp_path, model,
                                                                        capsys):
    first, second, link = tmp_path / "first.py", tmp_path / "second.py", tmp_path / "link.py"
    first.write_bytes(CASES[0][1])
    second.write_bytes(CASES[0][1])
    link.symlink_to(first)

    def repoint() -> None:
        link.unlink()
        link.symlink_to(second)

    model.during = repoint
    assert rewrite(link, "--apply") == 1
    assert capsys.readouterr().err == (f"dg-lsp rewrite: {link}: the link now points to "
                                       "another file; the file is unchanged\n")
    assert first.read_bytes() == second.read_bytes() == CASES[0][1]
