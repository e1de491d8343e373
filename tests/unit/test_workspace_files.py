"""What of the disk a command or the index reads, and what it writes (dg_lsp.files, the one
reader; dg_lsp.repository.walk, the one walk): only the repository's own regular files, never
a link's target outside the root, never a FIFO or a device; a tree of any depth; a read-only
folder refused for root too. Each case once failed (issue #58)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from dg_lsp.cli import main
from dg_lsp.context import build_context
from dg_lsp.files import SourceError, read_source
from dg_lsp.repository.candidates import candidates
from dg_lsp.repository.index import RepositoryIndex
from dg_lsp.repository.retrieve import RepositoryContext, context_for_file
from dg_lsp.syntax.languages import language_for
from tests.support.scripted import Scripted, holes

SECRET = 'API_KEY = "sk-outside-0123456789"\n'


def outside_and_repository(tmp_path: Path, git: str) -> Path:
    """A repository whose pkg/ holds links: to a key file outside it, to /etc/passwd, and to
    one of its own files; `git` says whether the links are tracked, untracked or there is no
    git at all."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keys.py").write_text(SECRET)
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "pkg" / "real.py").write_text("TIMEOUT = 30\n")
    (repo / "pkg" / "main.py").write_text("API_KEY = \n")
    (repo / "pkg" / "helpers.py").symlink_to(tmp_path / "outside" / "keys.py")
    (repo / "pkg" / "users.py").symlink_to("/etc/passwd")
    (repo / "pkg" / "escape.py").symlink_to("../../outside/keys.py")
    (repo / "pkg" / "inner.py").symlink_to("real.py")
    (repo / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    if git != "none":
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
    if git == "tracked":
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    return repo


@pytest.mark.parametrize("git", ["tracked", "untracked", "none"])
def test_a_link_leading_outside_the_repository_is_never_read(tmp_path, git):
    repo = outside_and_repository(tmp_path, git)
    repository = context_for_file(repo / "pkg" / "main.py")
    assert repository is not None
    folder = "" if git == "none" else "pkg/"  # outside git the file's folder is the root
    assert sorted(repository.index.files()) == [f"{folder}inner.py", f"{folder}main.py",
                                                 f"{folder}real.py"]
    text = "API_KEY = "
    ctx = build_context(text, len(text), language_for("python"), 480, repository=repository)
    assert ctx.repeats == ()
    assert "sk-outside" not in ctx.prefix + ctx.suffix
    # a save of the link (the language server's refresh) does not read it either
    assert repository.index.refresh(f"{folder}helpers.py") is False
    assert f"{folder}helpers.py" not in repository.index


def test_the_reader_names_why_it_refuses(tmp_path):
    repo = outside_and_repository(tmp_path, "none")
    with pytest.raises(SourceError, match=r"pkg/helpers.py: leads outside .*repo \(to "
                                          r".*outside/keys.py\); not read"):
        read_source(repo / "pkg" / "helpers.py", repo)
    with pytest.raises(SourceError, match="leads outside"):
        read_source(repo / "pkg" / "users.py", repo)
    assert read_source(repo / "pkg" / "inner.py", repo).text == "TIMEOUT = 30\n"
    # named by the user, not read as the repository's: the file is what was asked for
    assert read_source(repo / "pkg" / "helpers.py").text == SECRET


def test_an_open_document_behind_a_link_outside_is_not_indexed(tmp_path):
    repo = outside_and_repository(tmp_path, "none")
    index = RepositoryIndex(repo)
    index.build()
    assert index.relative(repo / "pkg" / "helpers.py") is None
    assert index.relative(repo / "pkg" / "inner.py") == "pkg/real.py"
    context = RepositoryContext(index, "pkg/main.py")
    assert candidates("API_KEY = ", len("API_KEY = "), context) == ()


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_complete_refuses_what_is_not_a_regular_file_without_reading_it(tmp_path, kind,
                                                                        monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    if kind == "fifo":
        os.mkfifo("pipe.py")  # never written to: a read would wait for ever
        path, reason = "pipe.py", "not a regular file"
    elif kind == "device":
        path, reason = "/dev/zero", "not a regular file"  # a read would fill memory
    else:
        os.mkdir("pkg.py")
        path, reason = "pkg.py", "is a directory"
    assert main(["complete", f"{path}:1:1", "--engine", "inproc"]) == 2
    assert capsys.readouterr().err == f"dg-lsp complete: {path}: {reason}\n"


def test_a_tree_deeper_than_the_recursion_limit_is_walked(tmp_path):
    deep = tmp_path
    for _ in range(1100):  # pathlib's mkdir(parents=True) recurses too
        deep = deep / "d"
        deep.mkdir()
    (deep / "bottom.py").write_text("x = 1\n")
    (tmp_path / "top.py").write_text("y = ")
    try:
        repository = context_for_file(tmp_path / "top.py")
        assert repository is not None
        assert repository.index.files() == ["top.py", "d/" * 1100 + "bottom.py"]
    finally:  # pytest's own clean-up (shutil.rmtree) recurses on Python 3.11
        (deep / "bottom.py").unlink()
        while deep != tmp_path:
            deep.rmdir()
            deep = deep.parent


@pytest.mark.parametrize("command", ["rewrite", "fill"])
def test_a_file_in_a_read_only_folder_is_refused_even_for_root(tmp_path, monkeypatch,
                                                              capsys, command):
    """As root os.access allows any write; the folder's mode says its owner closed it."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "closed"
    folder.mkdir()
    source = "def twice(x):\n    ...\n"
    (folder / "f.py").write_text(source)
    backend = Scripted("Twice x.") if command == "rewrite" else Scripted(holes("return 2 * x"))
    monkeypatch.setattr(f"dg_lsp.cli.{command}.open_for_command", lambda settings: backend)
    folder.chmod(0o555)
    try:
        args = ["rewrite", "closed/f.py", "--range", "1:1-1:1", "--action", "docstring"] \
            if command == "rewrite" else ["fill", "closed/f.py"]
        assert main([*args, "--apply"]) == 1
        err = capsys.readouterr().err
    finally:
        folder.chmod(0o755)
    assert f"closed/f.py: its folder {folder} is read-only (mode 0555)" in err
    assert (folder / "f.py").read_text() == source
    assert sorted(p.name for p in folder.iterdir()) == ["f.py"]
