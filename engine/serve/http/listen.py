"""The port of `dg-engine serve --http HOST:PORT`: where it may listen, and the uvicorn server
of engine.serve.http.api's endpoints, bounded as the team engine's front is (a deadline on each
request head and on the TLS handshake, a cap on the head's size and on connections).

Every status it answers carries OpenAI's error object, the two uvicorn writes itself included
(`_head_deadline`'s protocol): the 400 of a request head h11 cannot parse and the 503 past the
connection cap. A WebSocket upgrade is an HTTP request like any other (ws="none"): uvicorn's
WebSocket protocol would answer it with a plain-text 500.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from pathlib import Path
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from engine.serve.http.api import HEADER_TIMEOUT, MAX_HEADER_BYTES, ApiError, HttpApi, LocalBackend


def loopback(host: str) -> bool:
    """Whether `host` (of --http) is this machine only."""
    import ipaddress

    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(listen: str) -> tuple[str, int]:
    """(host, port) of a HOST:PORT; ValueError saying what is wrong."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--http wants HOST:PORT, not {listen!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def http_problem(listen: str, has_token: bool, has_tls: bool = False,
                 allow_plain: bool = False) -> str | None:
    """Why `dg-engine serve --http listen` must not start, or None: beyond this machine it
    needs the token, and TLS unless `allow_plain` (--allow-http-without-tls) says TLS is done
    in front of it."""
    try:
        host, _ = parse_listen(listen)
    except ValueError as exc:
        return str(exc)
    if loopback(host):
        return None
    if not has_token:
        return (f"--http {listen} listens beyond this machine: give --token-file (clients "
                "then send it as Authorization: Bearer, their API key), or listen on "
                "127.0.0.1")
    if not has_tls and not allow_plain:
        return (f"--http {listen} listens beyond this machine: give --tls-cert and --tls-key "
                "(the token and the code would travel in clear), or --allow-http-without-tls "
                "where a TLS proxy in front of it does that, or listen on 127.0.0.1")
    return None


def http_server(server: Any, listen: str, tls: tuple[Path, Path] | None = None) -> Any:
    """The uvicorn server of `server`'s HTTP API, to run in the daemon's event loop; HTTPS
    with `tls` (the certificate and its key)."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # the daemon's loop owns SIGTERM and SIGINT
            yield

        async def startup(self, sockets: Any = None) -> None:
            if tls is None:
                return await super().startup(sockets)
            # The head deadline starts once TLS is up; uvicorn leaves the handshake asyncio's
            # default of a minute, on no connection cap. It gets HEADER_TIMEOUT, as the team
            # front's does.
            loop = asyncio.get_running_loop()
            loop.create_server = functools.partial(type(loop).create_server, loop,
                                                   ssl_handshake_timeout=HEADER_TIMEOUT)
            try:
                await super().startup(sockets)
            finally:
                del loop.create_server

    host, port = parse_listen(listen)
    config = uvicorn.Config(HttpApi(LocalBackend(server), server.token).app, host=host,
                            port=port, http=_head_deadline(), ws="none",
                            lifespan="off", access_log=False, log_level="warning",
                            limit_concurrency=server.max_connections, timeout_keep_alive=5,
                            timeout_graceful_shutdown=2,
                            h11_max_incomplete_event_size=MAX_HEADER_BYTES,
                            ssl_certfile=str(tls[0]) if tls else None,
                            ssl_keyfile=str(tls[1]) if tls else None)
    return Server(config)


def _head_deadline() -> type:
    """uvicorn's h11 protocol with a deadline on each request head: uvicorn bounds a head's
    size and the idle time after an answer, but a connection that never sends a head, or
    trickles it a byte at a time, it keeps open for good. Here each head (the first, and each
    next on a kept-alive connection) must be whole within HEADER_TIMEOUT of the connection
    opening or the last answer, or the connection is closed.

    The two answers uvicorn writes itself are OpenAI's error object here: the 400 it sends in
    `send_400_response` for a head h11 refuses, before any app sees a request; and the 503
    past the connection cap, where uvicorn runs its plain-text `service_unavailable` in the
    app's place: the cap (limit_concurrency) is checked by the app instead (`_capped`)."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeadDeadline(H11Protocol):
        head_timer: asyncio.TimerHandle | None = None

        def __init__(self, config: Any, server_state: Any, app_state: dict[str, Any],
                     _loop: asyncio.AbstractEventLoop | None = None) -> None:
            super().__init__(config, server_state, app_state, _loop)
            if self.limit_concurrency is not None:
                self.app = _capped(self.app, self.limit_concurrency, server_state)
                self.limit_concurrency = None  # uvicorn's check would answer in plain text

        def send_400_response(self, msg: str) -> None:
            response = ApiError(400, "a malformed request head, or one over "
                                f"{MAX_HEADER_BYTES} bytes", None, "invalid_request").response()
            headers = [*response.raw_headers, (b"connection", b"close")]
            for event in (h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                          h11.Data(data=response.body), h11.EndOfMessage()):
                self.transport.write(self.conn.send(event))
            self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def handle_events(self) -> None:
            super().handle_events()
            if self.cycle is not None and not self.cycle.response_complete:
                self._disarm()  # the head is in: BODY_TIMEOUT bounds the rest

        def on_response_complete(self) -> None:
            self._arm()  # before the next pipelined head, which handle_events may take now
            super().on_response_complete()

        def _arm(self) -> None:
            self._disarm()
            self.head_timer = self.loop.call_later(HEADER_TIMEOUT, self._late)

        def _disarm(self) -> None:
            if self.head_timer is not None:
                self.head_timer.cancel()
                self.head_timer = None

        def _late(self) -> None:
            self.head_timer = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeadDeadline


def _capped(app: ASGIApp, limit: int, state: Any) -> ASGIApp:
    """`app` refusing a request with 503 while more than `limit` connections are open or more
    than `limit` requests are in flight, this one counted in both (uvicorn's server `state`
    counts them); the refused connection is closed. uvicorn's own check refused at `limit`
    connections counting this one: one fewer than --max-connections, none at all for 1."""

    async def capped(scope: Scope, receive: Receive, send: Send) -> None:
        if len(state.connections) > limit or len(state.tasks) > limit:
            busy = ApiError(503, f"the engine serves {limit} connections at once; try again",
                            None, "busy", "server_error", headers={"Connection": "close"})
            await busy.response()(scope, receive, send)
            return
        await app(scope, receive, send)

    return capped
