"""Another local user cannot take over the engine's socket, and the TCP listener is guarded.

The attacker is a forked child running as uid 65534 (the suite runs as root in CI). Each test
sees a private stand-in for /tmp (world-writable and sticky like it) as the temp dir, with
XDG_RUNTIME_DIR unset, so the fallback `<tmp>/dg-engine-<uid>` is what is attacked.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from engine.serve.socket import protocol
from engine.serve.socket.client import EngineBusy, EngineClient, EngineUnavailable
from engine.serve.socket.endpoint import Endpoint, UnsafeRuntimeDir, endpoint_for, runtime_dir
from engine.types import InfillRequest
from tests.support.engine_procs import NOBODY, Attacker, as_attacker, needs_root, serving
from tests.support.wait import wait_for

pytestmark = needs_root
UID = os.getuid()


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    tmp.chmod(0o1777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


def serve_once(model: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine.cli", "serve", "--model", str(model),
                           "--device", "cpu", "--dtype", "float32", *args],
                          capture_output=True, text=True, timeout=120)


def test_the_runtime_dir_is_created_private_and_found_again(sandbox):
    path = runtime_dir()
    assert path == sandbox / f"dg-engine-{UID}"
    st = os.lstat(path)
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == UID
    assert runtime_dir() == path


def _world_writable_dir(name: str) -> None:
    os.mkdir(name)
    os.chmod(name, 0o777)


def _symlink_to_own_dir(name: str) -> None:
    _world_writable_dir("mine")
    os.symlink("mine", name)


# What another user plants at <tmp>/dg-engine-<uid> before the victim's first engine, and
# what the victim is told.
NOT_YOURS = f"is owned by uid {NOBODY}, not by you (uid {UID})"
PLANTED = {
    "world-writable dir": (_world_writable_dir, NOT_YOURS),
    "private dir of theirs": (lambda name: os.mkdir(name, 0o700), NOT_YOURS),
    "symlink to their dir": (_symlink_to_own_dir, "is a symlink"),
    "regular file": (lambda name: open(name, "w").close(), "is not a directory"),
}


@pytest.mark.parametrize("attack", list(PLANTED))
def test_a_runtime_dir_planted_by_another_user_is_refused_in_one_line(sandbox, dream_ckpt,
                                                                      attack):
    plant, problem = PLANTED[attack]
    name = f"dg-engine-{UID}"
    assert as_attacker(sandbox, lambda: plant(name)) is None
    path = sandbox / name
    expected = (f"the engine's runtime directory {path} {problem}: someone may be "
                f"intercepting the engine; remove it (or set XDG_RUNTIME_DIR to a private "
                f"directory)")
    with pytest.raises(UnsafeRuntimeDir) as refused:
        runtime_dir()
    assert str(refused.value) == expected
    # The language server's way in: one line, nothing started.
    with pytest.raises(EngineUnavailable) as unavailable:
        EngineClient.connect_or_start(str(dream_ckpt), "cpu", dtype="float32")
    assert str(unavailable.value) == expected
    # The engine's: one line on stderr, no traceback, exit 1.
    run = serve_once(dream_ckpt)
    assert (run.returncode, run.stderr) == (1, f"dg-engine: {expected}\n")
    # Nothing of the victim's landed in the attacker's directory.
    attackers = sandbox / ("mine" if attack.startswith("symlink") else name)
    assert not attackers.is_dir() or os.listdir(attackers) == []


def test_a_runtime_dir_of_ones_own_open_to_others_is_refused(sandbox):
    path = sandbox / f"dg-engine-{UID}"
    path.mkdir()
    path.chmod(0o777)
    with pytest.raises(UnsafeRuntimeDir) as refused:
        runtime_dir()
    assert str(refused.value) == (
        f"the engine's runtime directory {path} has mode 0777: other users may have put "
        f"files in it; check it, then chmod 700 {path}")


@pytest.mark.parametrize("suffix", [".log", ".lock", ".spawn"])
def test_a_symlink_in_the_runtime_dir_is_not_followed(sandbox, dream_ckpt, suffix):
    endpoint = endpoint_for(str(dream_ckpt), "cpu", "float32")
    target = sandbox / "precious"
    target.write_text("untouched\n")
    planted = endpoint.socket.with_suffix(suffix)
    planted.symlink_to(target)
    with pytest.raises(EngineUnavailable) as refused:
        EngineClient.connect_or_start(str(dream_ckpt), "cpu", dtype="float32")
    assert str(refused.value) == (f"cannot open {planted} safely: Too many levels of symbolic "
                                  f"links (a symlink there is refused: remove it)")
    assert target.read_text() == "untouched\n"
    assert not endpoint.socket.exists()  # no engine was started


def test_the_client_sends_nothing_to_another_users_listener(sandbox):
    """The attacker's socket stands where the engine's would: the client checks the
    listener's uid before a byte of the victim's code leaves."""

    def listen(ready) -> dict:
        _world_writable_dir("evil")
        server = socket.socket(socket.AF_UNIX)
        server.bind("evil/engine.sock")
        os.chmod("evil/engine.sock", 0o777)
        server.listen()
        server.settimeout(3)
        ready()
        connections, received = 0, b""
        try:
            while True:
                conn, _ = server.accept()
                connections += 1
                with conn:
                    conn.settimeout(2)
                    try:
                        # A tempting answer first (the client has hung up already).
                        conn.sendall(protocol.encode({"type": "hello", "id": 1,
                                                      "version": protocol.VERSION}))
                        while chunk := conn.recv(65536):
                            received += chunk
                    except OSError:
                        pass
        except TimeoutError:
            pass
        return {"connections": connections, "received": received.hex()}

    attacker = Attacker(sandbox, listen)
    attacker.wait_ready()
    client = EngineClient(Endpoint(sandbox / "evil" / "engine.sock"))
    refusal = (f"runs as uid {NOBODY}, not as you (uid {UID}): refusing to talk to it")
    with pytest.raises(EngineUnavailable) as refused:
        client.hello()
    assert refusal in str(refused.value)
    with pytest.raises(EngineUnavailable) as refused:
        list(client.infill_stream(InfillRequest('API_KEY = "victim-secret"\n', "\n", 8)))
    assert refusal in str(refused.value)
    assert client.endpoint.probe() == ("absent", None)
    assert attacker.result() == {"connections": 3, "received": ""}


# -- the engine's side ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded(dream_ckpt: Path, tmp_path_factory: pytest.TempPathFactory):
    """An engine with a TCP listener (private token) and at most 4 connections."""
    folder = tmp_path_factory.mktemp("guarded")
    token = folder / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with serving(dream_ckpt, folder / "e.sock", "--listen", f"127.0.0.1:{port}",
                 "--token-file", str(token), "--max-connections", "4") as (_, endpoint):
        yield endpoint, port


def frame(message: dict) -> bytes:
    return protocol.encode(message)


def test_the_engine_closes_a_connection_from_another_user(guarded):
    endpoint, _ = guarded

    def knock() -> dict:
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(10)
        sock.connect("e.sock")
        received = b""
        try:
            sock.sendall(frame({"op": "ping", "id": 1}))
            while chunk := sock.recv(65536):
                received += chunk
        except OSError:
            pass  # reset: closed all the same
        return {"received": received.hex()}

    # As if socket and folder were open to all: the engine's uid check still holds.
    folder = endpoint.socket.parent
    endpoint.socket.chmod(0o666)
    folder.chmod(0o711)
    try:
        assert as_attacker(folder, knock) == {"received": ""}
    finally:
        endpoint.socket.chmod(0o600)
        folder.chmod(0o700)
    assert endpoint.alive()  # and its own user is served


@pytest.mark.parametrize("mode", [0o644, 0o620, 0o604])
def test_a_token_file_others_can_read_or_write_is_refused(dream_ckpt, tmp_path, mode):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(mode)
    run = serve_once(dream_ckpt, "--socket", str(tmp_path / "e.sock"), "--listen",
                     "127.0.0.1:1", "--token-file", str(token))
    assert (run.returncode, run.stderr) == (2, (
        f"dg-engine serve: the token file {token} has mode {mode:04o}: other users may read "
        f"it; chmod 600 {token}\n"))


def tcp_connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=30)


def closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_an_unauthenticated_peer_cannot_send_a_large_frame(guarded):
    _, port = guarded
    with tcp_connect(port) as sock:
        # Only the header of an 8 MB frame: the engine answers without waiting for the body.
        sock.sendall(struct.pack(">I", protocol.MAX_MESSAGE))
        assert protocol.receive(sock) == {"type": "error", "id": None, "code": "unauthorized",
                                          "message": "message of 8388608 bytes exceeds 4096"}
        assert closed(sock)
    with tcp_connect(port) as sock:  # a hello padded past 4 KiB: the same
        sock.sendall(frame({"op": "hello", "id": 1, "token": "s3cret", "pad": "x" * 4096}))
        assert protocol.receive(sock)["code"] == "unauthorized"
        assert closed(sock)
    with tcp_connect(port) as sock:  # a token no string compares with: refused all the same
        body = b'{"op": "hello", "id": 1, "token": "\\ud800"}'
        sock.sendall(struct.pack(">I", len(body)) + body)
        assert protocol.receive(sock) == {
            "type": "error", "id": 1, "code": "unauthorized",
            "message": "this listener needs a token (hello.token)"}
        assert closed(sock)
    with tcp_connect(port) as sock:  # authenticated, a large frame is fine
        protocol.send(sock, {"op": "hello", "id": 1, "token": "s3cret"})
        assert protocol.receive(sock)["type"] == "hello"
        protocol.send(sock, {"op": "ping", "id": 2, "pad": "x" * 100_000})
        assert protocol.receive(sock) == {"type": "ok", "id": 2}


def test_connections_are_capped(guarded):
    endpoint, _ = guarded

    def pinged(sock: socket.socket) -> bool:
        try:
            protocol.send(sock, {"op": "ping", "id": 1})
            return protocol.receive(sock) == {"type": "ok", "id": 1}
        except (OSError, protocol.ProtocolError):
            return False

    held: list[socket.socket] = []
    try:
        for _ in range(4):
            sock = endpoint.connect(timeout=30)
            held.append(sock)
            assert pinged(sock)
        with endpoint.connect(timeout=30) as fifth:
            assert protocol.receive(fifth) == {
                "type": "error", "id": None, "code": "busy",
                "message": "the engine serves at most 4 connections"}
            assert closed(fifth)
        # A client is told "busy", not that the engine is gone (that would restart it).
        with pytest.raises(EngineBusy) as busy:
            list(EngineClient(endpoint).infill_stream(InfillRequest("x = ", "\n", 4)))
        assert str(busy.value) == "the engine serves at most 4 connections"
        assert endpoint.probe()[0] == "alive"
        held.pop().close()

        def one_more() -> bool:
            with endpoint.connect(timeout=30) as sock:
                return pinged(sock)

        wait_for(one_more, 10)  # the freed slot is taken again
    finally:
        for sock in held:
            sock.close()
