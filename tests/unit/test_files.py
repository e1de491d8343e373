"""Files as users have them, through `dg-lsp rewrite` and `dg-lsp batch` (dg_lsp.files): line
endings and BOM kept in the written file and in the patch, edits made while the model runs
never overwritten, symbolic links written through, read-only files and folders refused.

The model is a scripted backend (every docstring reads "Doc."), so the expected bytes are
exact; the commands run in this process with `Engine.load` answering with it. A FIFO and
permissions, which need a child process: tests/integration/test_files.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dg_lsp.files import read_source
from tests.support.user_files import CASES, IDS, Docstrings, batch, rewrite


@pytest.fixture
def model(monkeypatch) -> Docstrings:
    """The backend `dg-lsp rewrite` and `dg-lsp batch --engine inproc` load."""
    from engine import Engine

    backend = Docstrings()
    monkeypatch.setattr(Engine, "load", lambda *args, **kwargs: backend)
    return backend


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

