"""`dg-lsp complete`, `rewrite`, `batch` and `eval` with a team's engine by URL
(`--engine URL --token-file F`), against a team endpoint without Ray
(tests/support/team_endpoint.py:
the deployment's real front door and token check before a stand-in for its ingress).

The commands run in this process (parsers of these four commands only, so no model is
imported); the token comes from a private file, a pipe named /dev/fd/N, or, in the one test
that runs the real `dg-lsp` in a child, standard input. Every failure is one line on stderr,
exit 2, no traceback; a token file that cannot be used sends nothing; the token is in no
output.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dg_lsp.batch import cli as batch_cli
from dg_lsp.cli import complete
from dg_lsp.cli import rewrite as rewrite_cli
from dg_lsp.measure.eval import cli as eval_cli
from dg_lsp.settings import parse_settings
from engine.cli import run_command
from engine.serve.socket.protocol import document_key
from tests.support.team_endpoint import TeamEngine, team_engine

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t3am-ci-token-0123456789"
WRONG = "not-the-t3am-token"
PASSWORD = "hunter2pw"
SOURCE = "def add(a, b):\n    return \n"
CURSOR = "2:12"  # after "return "
COMMANDS = {
    "complete": ["complete", "{file}:" + CURSOR],
    "rewrite": ["rewrite", "{file}", "--range", "2:5-2:11"],
    "batch": ["batch", "{file}", "--action", "docstrings"],
    "eval": ["eval", "--suite", "cases", "--cases-from", "{folder}"],
}


def dg_lsp(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="dg-lsp")
    sub = parser.add_subparsers(dest="command")
    for module in (complete, rewrite_cli, batch_cli, eval_cli):
        module.register(sub)
    args = parser.parse_args(argv)
    return run_command("dg-lsp", lambda: args.func(args))


def piped(token: str) -> str:
    """/dev/fd/N of a pipe holding `token` and a line end, as bash's <(printenv T) hands."""
    r, w = os.pipe()
    os.write(w, f"{token}\n".encode())
    os.close(w)
    return f"/dev/fd/{r}"


@pytest.fixture
def team() -> Iterator[TeamEngine]:
    with team_engine(TOKEN, "a + b") as running:
        yield running


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "add.py"
    path.write_text(SOURCE)
    return path


def token_file(folder: Path, token: str = TOKEN, mode: int = 0o600) -> Path:
    path = folder / "team-token"
    path.write_text(token + "\n")
    path.chmod(mode)
    return path


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert TOKEN not in err and WRONG not in err
    return err.rstrip("\n")


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_an_engine_url_and_a_token_file(command, tmp_path):
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for module in (complete, rewrite_cli, batch_cli, eval_cli):
        module.register(sub)
    argv = [a.format(file=tmp_path / "a.py", folder=tmp_path) for a in COMMANDS[command]]
    args = parser.parse_args([*argv, "--engine", "https://head:8000", "--token-file", "-"])
    assert (args.engine, args.token_file) == ("https://head:8000", "-")
    defaults = parser.parse_args(argv)
    assert defaults.token_file is None
    assert defaults.engine == ("resident" if command == "batch" else "inproc")


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("url", "message"), [
    (f"http://me:{PASSWORD}@head:8000", "put the token in the token file, not in the engine URL"),
    (f"http://head:8000/?token={PASSWORD}", "put the token in the token file"),
    (f"ftp://head/{PASSWORD}", "or an http(s)://HOST:PORT URL"),
])
def test_a_bad_engine_url_is_refused_without_repeating_it(command, url, message, tmp_path,
                                                          capsys):
    argv = [a.format(file=tmp_path / "a.py", folder=tmp_path) for a in COMMANDS[command]]
    with pytest.raises(SystemExit) as exited:
        dg_lsp(*argv, "--engine", url)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and PASSWORD not in err


def test_a_token_file_without_a_url_is_refused(source, capsys):
    assert dg_lsp("complete", f"{source}:{CURSOR}", "--token-file", "-") == 2
    assert one_line(capsys.readouterr().err) == (
        "dg-lsp complete: --token-file is for a team's engine (--engine URL), not --engine "
        "inproc")


def test_standard_input_cannot_carry_both_the_token_and_the_source(team, capsys):
    assert dg_lsp("complete", f"/dev/stdin:{CURSOR}", "--engine", team.url,
                  "--token-file", "-") == 2
    assert one_line(capsys.readouterr().err) == (
        "dg-lsp complete: standard input carries the token (--token-file -): it cannot also be "
        "the input /dev/stdin")
    assert team.connections == 0


def test_the_language_server_takes_a_token_file_not_a_descriptor():
    for value in ("-", "/dev/fd/3", "/dev/stdin"):
        settings, errors = parse_settings({"engineTokenFile": value})
        assert settings.engine_token_file is None and len(errors) == 1
        assert "not - or /dev/fd/N" in errors[0]
    assert parse_settings({"engineTokenFile": "~/t"}) [1] == []


# -- complete ---------------------------------------------------------------------------------


def test_complete_with_the_token_on_a_pipe_names_the_file_beside_its_request(team, source,
                                                                           capsys):
    assert dg_lsp("complete", f"{source}:{CURSOR}", "--engine", team.url,
                  "--token-file", piped(TOKEN)) == 0
    out, err = capsys.readouterr()
    assert (out, err) == ("a + b\n", "")
    (request,) = team.requests
    assert request["document"] == document_key(source.resolve().as_uri())
    assert request["op"] == "infill" and request["priority"] == "interactive"
    assert request["prefix"].endswith("    return ")


def test_a_wrong_token_is_one_line_and_exit_2(team, source, capsys):
    fd = piped(WRONG)
    assert dg_lsp("complete", f"{source}:{CURSOR}", "--engine", team.url,
                  "--token-file", fd) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert one_line(err) == (f"dg-lsp complete: the engine at {team.url} refused the token "
                             f"from {fd}: is it the team's current token?")
    assert team.requests == []


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: token_file(d, mode=0o644), "the token file {path} has mode 0644: other users may "
     "read it; chmod 600 {path}"),
    (lambda d: d / "missing", "cannot read the token file {path}: No such file or directory"),
    (lambda d: token_file(d, token=f"{TOKEN}\n# ci"), "the token file {path} has 2 lines: it "
     "must hold the token alone, on one line"),
])
def test_a_token_file_that_cannot_be_used_is_one_line_and_nothing_is_sent(
        team, source, tmp_path, capsys, make, message):
    path = make(tmp_path)
    assert dg_lsp("complete", f"{source}:{CURSOR}", "--engine", team.url,
                  "--token-file", str(path)) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert one_line(err) == "dg-lsp complete: " + message.format(path=path)
    assert team.connections == 0


def test_an_engine_nobody_answers_at_is_one_line(source, tmp_path, capsys):
    url = f"http://127.0.0.1:{unused_port()}"
    assert dg_lsp("complete", f"{source}:{CURSOR}", "--engine", url,
                  "--token-file", str(token_file(tmp_path))) == 2
    err = one_line(capsys.readouterr().err)
    assert err.startswith(f"dg-lsp complete: no engine: cannot reach the engine at {url}: ")


# -- rewrite, batch, eval ---------------------------------------------------------------------


def test_rewrite_and_batch_send_each_file_with_its_document(tmp_path, capsys):
    other = tmp_path / "mul.py"
    other.write_text("def mul(a, b):\n    return a * b\n")
    first = tmp_path / "add.py"
    first.write_text("def add(a, b):\n    return a + b\n")
    path = str(token_file(tmp_path))
    with team_engine(TOKEN, "The sum.", "The product.", "a - b") as team:
        assert dg_lsp("batch", str(tmp_path), "--action", "docstrings", "--engine", team.url,
                      "--token-file", path, "--workers", "1") == 0
        patch = capsys.readouterr().out
        assert '+    """The sum."""' in patch and '+    """The product."""' in patch
        assert [(r["document"], r["priority"]) for r in team.requests] == [
            (document_key(first.resolve().as_uri()), "batch"),
            (document_key(other.resolve().as_uri()), "batch")]
        assert dg_lsp("rewrite", str(first), "--range", "2:12-2:17", "--engine", team.url,
                      "--token-file", piped(TOKEN), "--strength", "1") == 0
        assert capsys.readouterr().out == "a - b\n"
        assert team.requests[-1]["document"] == document_key(first.resolve().as_uri())


def test_rewrite_and_batch_refuse_a_wrong_token_in_one_line(team, tmp_path, capsys):
    source = tmp_path / "add.py"
    source.write_text("def add(a, b):\n    return a + b\n")
    assert dg_lsp("rewrite", str(source), "--range", "2:12-2:17", "--engine", team.url,
                  "--token-file", piped(WRONG)) == 2
    assert "refused the token" in one_line(capsys.readouterr().err)
    assert dg_lsp("batch", str(source), "--action", "docstrings", "--engine", team.url,
                  "--token-file", piped(WRONG)) == 2
    assert "refused the token" in one_line(capsys.readouterr().err)
    assert dg_lsp("batch", str(source), "--action", "docstrings", "--engine", team.url,
                  "--ray") == 2
    assert "a team's engine (--engine URL) already spreads" in capsys.readouterr().err
    assert source.read_text() == "def add(a, b):\n    return a + b\n"


def test_eval_measures_the_teams_engine_beside_the_baselines(team, tmp_path, capsys):
    cases = tmp_path / "cases"
    cases.mkdir()
    (cases / "m.py").write_text("".join(f"def f{i}(a, b):\n    return a + b * {i}\n\n\n"
                                        for i in range(12)))
    argv = ["eval", "--suite", "cases", "--cases-from", str(cases), "--limit", "3",
            "--engine", team.url]
    assert dg_lsp(*argv, "--token-file", piped(TOKEN), "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert [(r["model"], r["protocol"]) for r in report["results"]] == [
        ("empty", "fixed"), ("copy-prev-line", "fixed"), (team.url, "fixed")]
    assert len(team.requests) == 3 + 1  # the cases and the warm-up
    for extra, message in [(["--protocol", "oracle"], "fixed protocol only"),
                           (["--model", "bundled"], "--model names only baselines"),
                           (["--suite", "next-edit"], "runs the model inside dg-lsp serve")]:
        assert dg_lsp(*argv, "--token-file", piped(TOKEN), *extra) == 2
        assert message in one_line(capsys.readouterr().err)
    assert dg_lsp(*argv, "--token-file", piped(WRONG)) == 2
    assert "refused the token" in one_line(capsys.readouterr().err)


# -- the real command line, the token on standard input ---------------------------------------


def test_dg_lsp_complete_reads_the_token_from_standard_input(team, source):
    argv = [sys.executable, "-m", "dg_lsp.cli", "complete", f"{source}:{CURSOR}",
            "--engine", team.url, "--token-file", "-"]
    done = subprocess.run(argv, input=f"{TOKEN}\n", capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (done.returncode, done.stdout, done.stderr) == (0, "a + b\n", "")
    assert TOKEN not in " ".join(argv)
    assert team.requests[0]["document"] == document_key(source.resolve().as_uri())
