"""engine.serve.team.front: the team engine's front door, bounded before the token is checked.

The probe's cases (issue #33) against one front on loopback with a small upstream that stands
for Ray Serve's proxy: an oversized header, slow heads and bodies, floods of connections, and
paths that must not answer without the token. Limits are small so every case ends quickly.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator

import pytest

from engine.serve.team.front import Front, FrontLimits
from tests.support.tls import self_signed
from tests.support.wait import wait_for

TOKEN = "front-s3cret"
AUTH = f"Authorization: Bearer {TOKEN}\r\n"
LIMITS = FrontLimits(max_header_bytes=4096, header_timeout=1.0, body_timeout=1.0,
                     max_connections=40, max_per_client=8)


class Upstream:
    """Stands for Ray Serve's proxy: answers every request in two chunks, the second echoing
    its body (or, with `hold`, only after that many seconds), and records the heads it got
    and the connections the front closed while it held one."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.closed = 0
        self.hold = 0.0  # seconds between the two chunks of an answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        body = await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nfirst\n")
        await writer.drain()
        try:
            if self.hold:
                # b"" as soon as the front closes its side: the request's cancel.
                await asyncio.wait_for(reader.read(1), self.hold)
                self.closed += 1
                return
            writer.write(b"echo:" + body + b"\n")
            await writer.drain()
        except (ConnectionError, TimeoutError):
            pass
        finally:
            writer.close()


@contextlib.contextmanager
def running_front(tls: ssl.SSLContext | None = None) -> Iterator[tuple[Front, Upstream, int]]:
    """A front on a loopback port in a thread of its own, before its upstream."""
    loop = asyncio.new_event_loop()
    upstream = Upstream()
    ready = threading.Event()
    box: dict = {}

    async def main() -> None:
        up = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
        up_port = up.sockets[0].getsockname()[1]
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        the_front = Front(("127.0.0.1", up_port), digest, LIMITS)
        server = await the_front.start("127.0.0.1", 0, tls)
        box.update(front=the_front, port=server.sockets[0].getsockname()[1],
                   stop=asyncio.Event())
        ready.set()
        await box["stop"].wait()
        server.close()
        up.close()
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in others:  # connections a test left open
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield box["front"], upstream, box["port"]
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(10)


@pytest.fixture
def front() -> Iterator[tuple[Front, Upstream, int]]:
    with running_front() as running:
        yield running


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10,
                                    source_address=(source, 0))
    return sock


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def request(port: int, head: str, body: bytes = b"", source: str = "127.0.0.1") -> bytes:
    with connect(port, source) as sock:
        sock.sendall(head.encode() + b"\r\n" + body)
        return read_all(sock)


def status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


def test_a_request_with_the_token_reaches_the_proxy_and_streams_back(front):
    _, upstream, port = front
    body = b'{"op":"infill"}'
    reply = request(port, f"POST /v1/stream HTTP/1.1\r\nHost: x\r\n{AUTH}"
                    f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n", body)
    assert reply.endswith(b"first\necho:" + body + b"\n") and status(reply) == 200
    head = upstream.heads[-1].decode()
    assert head.startswith("POST /v1/stream HTTP/1.1\r\n")
    assert "connection: close" in head and "keep-alive" not in head
    assert f"authorization: Bearer {TOKEN}" in head  # the Ingress checks it again


@pytest.mark.parametrize("path", ["/-/routes", "/-/healthz", "/v1/hello", "/v1/status"])
def test_no_path_answers_without_the_token_and_nothing_reaches_the_proxy(front, path):
    the_front, upstream, port = front
    for auth in ("", "Authorization: Bearer wrong\r\n", f"Authorization: Basic {TOKEN}\r\n"):
        reply = request(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}")
        assert status(reply) == 401 and b'"unauthorized"' in reply and TOKEN.encode() not in reply
    assert upstream.heads == [] and the_front.refused == 3


@pytest.mark.parametrize("path", ["/v1/completions", "/completions/", "/infill?x=1",
                                  "/v1/models"])
def test_the_tools_paths_are_refused_with_openais_error_object(front, path):
    the_front, upstream, port = front
    reply = request(port, f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n")
    assert status(reply) == 401
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1]) == {"error": {
        "message": "this engine needs the team's token (Authorization: Bearer)",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
    reply = request(port, f"POST {path} HTTP/1.1\r\nHost: x\r\n{AUTH}"
                    f"Content-Length: {LIMITS.max_body_bytes + 1}\r\n")
    assert status(reply) == 413
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too_large"
    assert upstream.heads == []


def test_an_oversized_header_is_refused_after_reading_a_bounded_part_of_it(front):
    the_front, upstream, port = front
    sent = 0
    with connect(port) as sock:
        sock.sendall(b"GET /v1/hello HTTP/1.1\r\nAuthorization: Bearer ")
        with pytest.raises(OSError):  # the front answers and closes long before 100 MB
            for _ in range(100 * 16):  # 100 MB in 64 KiB writes
                sock.sendall(b"a" * 65536)
                sent += 65536
        reply = sock.recv(65536)
    assert status(reply) == 431 and upstream.heads == []
    assert sent < 16 * 1024 * 1024  # the socket buffers' worth, not 100 MB
    wait_for(lambda: the_front.open == 0)


def test_a_slow_head_and_a_slow_body_are_cut_at_their_deadlines(front):
    the_front, upstream, port = front
    with connect(port) as sock:
        sock.sendall(b"GET /v1/hello HTTP/1.1\r\n")  # and never the rest
        assert status(read_all(sock)) == 408
    with connect(port) as sock:  # a body a byte at a time, with the token
        sock.sendall(f"POST /v1/stream HTTP/1.1\r\n{AUTH}Content-Length: 100\r\n\r\n".encode())
        reply = b""
        for _ in range(100):
            try:
                sock.sendall(b"x")
            except OSError:
                break
            time.sleep(0.05)
            sock.setblocking(False)
            try:
                reply += sock.recv(65536)
            except BlockingIOError:
                pass
            sock.setblocking(True)
            if reply:
                break
        reply += read_all(sock)
    assert status(reply) == 408 and b"body" in reply
    assert upstream.heads == []
    wait_for(lambda: the_front.open == 0)


def test_connections_are_capped_per_client_and_in_all_and_a_real_request_still_passes(front):
    the_front, upstream, port = front
    # One client holds its share of idle connections; the next is refused at once.
    held = [connect(port, "127.0.0.2") for _ in range(LIMITS.max_per_client)]
    wait_for(lambda: the_front.open == LIMITS.max_per_client)
    assert status(request(port, "GET /v1/hello HTTP/1.1\r\n", source="127.0.0.2")) == 503
    # Many clients (2,000 idle sockets from 250 addresses): the front holds at most its cap,
    # making room by closing the oldest connections that have shown no token.
    flood = [connect(port, f"127.0.1.{1 + n % 250}") for n in range(2000)]
    wait_for(lambda: the_front.open == LIMITS.max_connections)
    # A real request is served while the flood is held open, long before the head deadline.
    reply = request(port, f"GET /v1/hello HTTP/1.1\r\n{AUTH}")
    assert status(reply) == 200 and reply.endswith(b"echo:\n")
    wait_for(lambda: the_front.open <= LIMITS.max_connections)
    for sock in held + flood:
        sock.close()
    wait_for(lambda: the_front.open == 0)


def test_a_client_that_goes_away_mid_answer_closes_the_upstream_connection(front):
    _, upstream, port = front
    upstream.hold = 30.0  # the second chunk would come much later
    with connect(port) as sock:
        sock.sendall(f"GET /v1/stream HTTP/1.1\r\n{AUTH}\r\n".encode())
        assert b"first" in sock.recv(65536)
    wait_for(lambda: upstream.closed == 1)  # the upstream saw it close, not 30 s later


def test_with_a_certificate_the_front_speaks_tls_after_its_caps(tmp_path):
    cert, key = self_signed(tmp_path)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    client_side = ssl.create_default_context(cafile=str(cert))
    with running_front(server_side) as (the_front, upstream, port):
        with client_side.wrap_socket(connect(port), server_hostname="127.0.0.1") as sock:
            sock.sendall(f"GET /v1/hello HTTP/1.1\r\n{AUTH}\r\n".encode())
            reply = read_all(sock)
        assert status(reply) == 200 and reply.endswith(b"echo:\n")
        # A client that never starts its handshake is cut at the head deadline.
        with connect(port) as sock:
            assert read_all(sock) == b""
        assert len(upstream.heads) == 1
        wait_for(lambda: the_front.open == 0)
