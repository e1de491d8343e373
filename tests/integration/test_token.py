"""The token file (engine.serve.token) and what may carry a token or a URL's password out:
error messages of the reader, of the HTTP client, of URL parsing, of `dg-engine status`,
`dg-lsp doctor --engine` and the language server's settings.

No engine and no Ray: an engine that "answers" is a listening socket nobody accepts on (the
kernel completes the connection, so the client gets as far as sending its headers).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.serve.socket.client import EngineUnavailable
from engine.serve.team.remote import EngineURL, RemoteEngine, read_token

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cret-team-token"
PASSWORD = "hunter2pw"
NOBODY = 65534


def token_file(folder: Path, content: str | bytes, mode: int = 0o600) -> Path:
    path = folder / "token"
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    path.chmod(mode)
    return path


def read_in_child(path: Path) -> subprocess.CompletedProcess:
    """read_token(path) in a child with 512 MiB of address space and 30 s: a reader that
    follows a link to /dev/zero dies of MemoryError, one that opens a FIFO times out."""
    script = textwrap.dedent(f"""
        from engine.serve.team.remote import read_token
        try:
            read_token({str(path)!r})
        except ValueError as exc:
            print(exc)
        """)

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (512 << 20, 512 << 20))

    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30, preexec_fn=limit, env={"PYTHONPATH": str(ROOT)})


def test_a_token_file_is_one_private_line_whitespace_stripped(tmp_path):
    assert read_token(token_file(tmp_path, f"  {SECRET} \n\n")) == SECRET
    assert read_token(token_file(tmp_path, SECRET, 0o400)) == SECRET


def test_a_link_to_dev_zero_is_refused_before_anything_is_read(tmp_path):
    link = tmp_path / "token"
    link.symlink_to("/dev/zero")
    child = read_in_child(link)
    assert (child.returncode, child.stdout, child.stderr) == (
        0, f"cannot read the token file {link}: it is a symbolic link\n", "")


def test_a_link_even_to_a_private_token_file_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    target = token_file(tmp_path / "real", SECRET)
    link = tmp_path / "token"
    link.symlink_to(target)
    with pytest.raises(ValueError) as caught:
        read_token(link)
    assert str(caught.value) == f"cannot read the token file {link}: it is a symbolic link"


def test_a_fifo_nobody_writes_is_refused_without_waiting(tmp_path):
    fifo = tmp_path / "token"
    os.mkfifo(fifo, 0o600)
    child = read_in_child(fifo)  # the old reader blocked in open() until the 30 s timeout
    assert (child.returncode, child.stdout) == (
        0, f"the token file {fifo} is not a regular file\n")


TWO_LINES = "the token file {path} has 2 lines: it must hold the token alone, on one line"
NOT_VISIBLE = ("the token in {path} has a space or a control character: a token is visible "
               "ASCII (e.g. `openssl rand -hex 32`)")


@pytest.mark.parametrize(("content", "mode", "message"), [
    (f"{SECRET}\n# team token\n", 0o600, TWO_LINES),
    (f"# team token\n{SECRET}\n", 0o600, TWO_LINES),
    (f"{SECRET} {SECRET}\n", 0o600, NOT_VISIBLE),
    (f"{SECRET}\x00\n", 0o600, NOT_VISIBLE),
    (f"{SECRET}é\n", 0o600, "the token file {path} holds characters other than ASCII"),
    (" \n\n", 0o600, "the token file {path} is empty"),
    (SECRET * 300, 0o600, "the token file {path} is larger than 4096 bytes"),
    ("x" * 2000, 0o600, "the token in {path} is longer than 1024 characters"),
    (f"{SECRET}\n", 0o644, "the token file {path} has mode 0644: other users may read it; "
     "chmod 600 {path}"),
    (f"{SECRET}\n", 0o620, "the token file {path} has mode 0620: other users may read it; "
     "chmod 600 {path}"),
])
def test_a_bad_token_file_is_refused_in_one_line_without_its_content(tmp_path, content, mode,
                                                                    message):
    path = token_file(tmp_path, content, mode)
    with pytest.raises(ValueError) as caught:
        read_token(path)
    assert str(caught.value) == message.format(path=path)
    assert SECRET not in str(caught.value)


def test_a_directory_is_refused(tmp_path):
    folder = tmp_path / "token"
    folder.mkdir(mode=0o700)
    with pytest.raises(ValueError) as caught:
        read_token(folder)
    assert str(caught.value) == f"the token file {folder} is not a regular file"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another uid needs root")
def test_a_token_file_of_another_user_is_refused(tmp_path):
    path = token_file(tmp_path, SECRET)
    os.chown(path, NOBODY, NOBODY)
    with pytest.raises(ValueError) as caught:
        read_token(path)
    assert str(caught.value) == (f"the token file {path} is owned by uid {NOBODY}, not by you "
                                 f"(uid {os.geteuid()})")


# -- nothing carries the token or a URL's password out ----------------------------------------


@pytest.fixture
def listening() -> Iterator[str]:
    """The URL of a socket that completes connections and never answers."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_the_http_client_never_quotes_a_header_it_refuses(listening):
    engine = RemoteEngine(listening, SECRET, read_timeout=5)
    engine._token = f"{SECRET}\n# team token"  # as the old reader passed a two-line file on
    with pytest.raises(EngineUnavailable) as caught:
        engine.hello()
    assert str(caught.value) == (f"cannot send a request to the engine at {listening}: a "
                                 "header was refused")
    with pytest.raises(ValueError) as refused:
        RemoteEngine(listening, f"{SECRET}\n# team token")
    assert SECRET not in str(refused.value)


@pytest.mark.parametrize("url", [
    f"http://me:{PASSWORD}@host:8000",
    f"http://me:{PASSWORD}@host:port",          # urllib: "Port could not be cast ..."
    f"http://me:{PASSWORD}@host:99999",         # urllib: "Port out of range"
    f"http://me:{PASSWORD}\uff03@host:8000",    # urllib quotes the netloc (NFKC check)
    f"http://me:{PASSWORD}/x@host:8000",        # urllib ends the netloc at '/'
    f"http://me:{PASSWORD}#x@host:8000",
    f"ftp://me:{PASSWORD}@host:8000",
    f"http://[me:{PASSWORD}@host:8000",         # urllib: "Invalid IPv6 URL"
])
def test_an_engine_url_with_credentials_is_refused_without_repeating_them(url):
    with pytest.raises(ValueError) as caught:
        EngineURL.parse(url)
    assert PASSWORD not in str(caught.value)
    from dg_lsp.settings import parse_settings

    _, errors = parse_settings({"engine": url})
    assert len(errors) == 1 and PASSWORD not in errors[0], errors


@pytest.mark.parametrize("url", ["http://host:port", "http://host:99999", "ftp://host:80"])
def test_a_malformed_engine_url_is_refused_in_one_line(url):
    with pytest.raises(ValueError, match="http\\(s\\)://HOST:PORT"):
        EngineURL.parse(url)


def test_a_token_in_an_engine_urls_query_is_not_repeated_either():
    from dg_lsp.settings import parse_settings

    url = f"http://host:8000/?token={PASSWORD}#{PASSWORD}"
    with pytest.raises(ValueError) as caught:
        EngineURL.parse(url)
    _, errors = parse_settings({"engine": url})
    assert PASSWORD not in str(caught.value) + errors[0]
    assert errors[0].endswith("got 'http://host:8000/?…'")


def test_status_with_a_two_line_token_file_prints_one_line_and_no_token(tmp_path, listening,
                                                                        capsys):
    from engine.cli import main

    path = token_file(tmp_path, f"{SECRET}\n# team token\n")
    assert main(["status", listening, "--token-file", str(path)]) == 2
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"dg-engine: the token file {path} has 2 lines: it must hold "
                          "the token alone, on one line\n")


def test_doctor_with_a_two_line_token_file_says_so_in_one_line_and_no_token(tmp_path,
                                                                            listening, capsys):
    from dg_lsp.cli import main

    path = token_file(tmp_path, f"{SECRET}\n# team token\n")
    assert main(["doctor", "--engine", listening, "--token-file", str(path)]) == 1
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    assert (f"engine:      BROKEN: {listening}: the token file {path} has 2 lines: it must "
            "hold the token alone, on one line\n") in out
    url = listening.replace("http://", f"http://me:{PASSWORD}@")
    path.write_text(f"{SECRET}\n")
    assert main(["doctor", "--engine", url, "--token-file", str(path)]) == 1
    out, err = capsys.readouterr()
    assert PASSWORD not in out + err
    assert (f"engine:      BROKEN: {listening.replace('http://', 'http://…@')}: put the "
            "token in the token file, not in the engine URL") in out
