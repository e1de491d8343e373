"""A peer of another protocol version is told so in one message that says what to do, at
either end: the engine refusing an older client's hello, a client refusing an older engine
(one of version 1, whose refusal names no version of its own), a team's client refusing a
team's engine of another version. No side serves an older peer half-way.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.serve.limits import Limits
from engine.serve.socket import protocol
from engine.serve.socket.client import EngineClient, EngineRefused
from engine.serve.socket.daemon import EngineServer
from engine.serve.team.remote import RemoteEngine


def hello_reply(version: object = None, **fields: object) -> dict:
    engine = SimpleNamespace(decoder=None, device="cpu", config=SimpleNamespace(family="masked"),
                             completion_ends=lambda: {0, 2})
    server = EngineServer(engine, SimpleNamespace(started=0), "fake",
                          limits=Limits(1024, 1 << 30, 60.0))
    message = {"op": "hello", "id": 1, **fields}
    if version is not None:
        message["version"] = version
    return server._reply(protocol.decode(json.dumps(message).encode()), {}, lambda r: None,
                         authorized=True)


def test_the_protocol_is_bumped_once():
    assert protocol.VERSION == 3


@pytest.mark.parametrize("version", [1, "2", 99])
def test_the_engine_tells_a_client_of_another_version_what_to_do(version):
    reply = hello_reply(version)
    assert reply["type"] == "error" and reply["code"] == "version" and reply["id"] == 1
    assert reply["version"] == protocol.VERSION  # so a client can say which versions met
    assert reply["message"] == (
        f"the engine speaks protocol 3, the client {version!r}: they are from different "
        "installs of dg-lsp; restart the client (your editor's language server, or the "
        f"command) from this engine's install, or stop this engine (kill {os.getpid()}) and "
        "let the client start its own")


@pytest.mark.parametrize("version", [protocol.VERSION, None])
def test_the_engine_greets_a_client_of_its_version_or_one_that_names_none(version):
    reply = hello_reply(version)
    assert reply["type"] == "hello" and reply["version"] == protocol.VERSION


class VersionOneEngine:
    """An endpoint whose engine answers a hello as version 1 engines do."""

    socket = Path("/run/user/1000/dg-engine/bundled-cpu.sock")

    def connect(self) -> socket.socket:
        ours, theirs = socket.socketpair()

        def answer() -> None:
            with theirs:
                hello = protocol.receive(theirs)
                protocol.send(theirs, {"type": "error", "id": hello["id"], "code": "version",
                                       "message": f"engine speaks protocol 1, client "
                                                  f"{hello['version']!r}"})

        threading.Thread(target=answer, daemon=True).start()
        return ours


def test_a_client_tells_the_user_what_to_do_with_an_older_engine():
    client = EngineClient(VersionOneEngine(), read_timeout=5)  # type: ignore[arg-type]
    with pytest.raises(EngineRefused) as refused:
        client.hello()
    assert refused.value.code == "version"
    assert str(refused.value) == (
        "the engine speaks protocol 1, the client 3: they are from different installs of "
        "dg-lsp; the engine at /run/user/1000/dg-engine/bundled-cpu.sock was started from "
        f"the other: stop it (kill {os.getpid()}) and the next request starts one from this "
        "install")


def test_a_team_client_tells_the_user_what_to_do_with_another_version(monkeypatch):
    remote = RemoteEngine("http://127.0.0.1:9", "t0ken")
    monkeypatch.setattr(remote, "_get", lambda path: {"type": "hello", "version": 1})
    with pytest.raises(EngineRefused) as refused:
        remote.hello()
    assert str(refused.value) == (
        "the engine speaks protocol 1, the client 3: they are from different installs of "
        "dg-lsp; use a client from the install that serves http://127.0.0.1:9, or have the "
        "team's engine upgraded to this one")
