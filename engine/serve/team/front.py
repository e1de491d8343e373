"""The team engine's front door: every connection bounded before its token is checked.

    client ──TLS──▶ Front (--listen) ──plain HTTP, loopback──▶ Ray Serve's proxy ──▶ Ingress

Ray Serve's proxy (uvicorn with httptools) sets no bound on a request's head, no deadline for
the head or the body, and no cap on connections: one 100 MB header or a few thousand idle
sockets exhaust it before any token is looked at. `dg-engine serve --ray` therefore binds
that proxy to 127.0.0.1 and puts this small proxy on --listen. For each connection it:

1. refuses at once (503) when `max_per_client` are open from its address; when
   `max_connections` are open in all, closes the oldest that has not shown the token yet to
   make room (503 when every open one has);
2. reads the request head, at most `max_header_bytes`, within `header_timeout` (431 / 408);
3. checks `Authorization: Bearer <token>` against the token's digest, in constant time, before
   it reads a byte of body (401), on every path: /-/routes and /-/healthz included;
4. reads the body, by Content-Length, at most protocol.MAX_MESSAGE, within `body_timeout`
   (413 / 408; chunked bodies are refused, 411: the engine's clients never send them);
5. sends the request to the loopback proxy with `Connection: close` and streams the answer
   back; the client closing its side closes the upstream one, which cancels the request.

One request per connection, as engine.serve.team.remote's client makes them: the proxy answers
the `Connection: close` it is sent with the same header, so keep-alive clients (the OpenAI
ones) open a new connection for their next request. The Ingress checks the token again: a
local user on the head node can reach the loopback proxy directly.

Refusals are the engine's protocol errors, except on the tools' paths (engine.serve.http.api:
/v1/completions, /v1/models, /infill), once the head is read: those get OpenAI's error object.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from engine.serve.admit import bearer_authorised
from engine.serve.http.api import ApiError, tool_path
from engine.serve.socket import protocol

MAX_HEADER_BYTES = 16 * 1024  # a request head: the request line and every header together
HEADER_TIMEOUT = 10.0  # seconds to send the request head (and finish a TLS handshake)
BODY_TIMEOUT = 10.0  # seconds to send the body once the head is in
MAX_CONNECTIONS = 256  # open connections in all
MAX_PER_CLIENT = 32  # open connections from one address (a team behind one NAT shares it)
RELAY_CHUNK = 64 * 1024


@dataclass(frozen=True)
class FrontLimits:
    max_header_bytes: int = MAX_HEADER_BYTES
    header_timeout: float = HEADER_TIMEOUT
    body_timeout: float = BODY_TIMEOUT
    max_connections: int = MAX_CONNECTIONS
    max_per_client: int = MAX_PER_CLIENT
    max_body_bytes: int = protocol.MAX_MESSAGE


class Refused(Exception):
    """A request answered here with `status`, never sent upstream; `openai` once its path is
    known to be one of the tools' (engine.serve.http.api), which read OpenAI's error object."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code = status, code
        self.openai = False


REASONS = {401: "Unauthorized", 408: "Request Timeout", 411: "Length Required",
           413: "Content Too Large", 431: "Request Header Fields Too Large",
           400: "Bad Request", 502: "Bad Gateway", 503: "Service Unavailable"}


# The front's error codes as OpenAI's error object names them (those engine.serve.http.api uses).
OPENAI_CODES = {"unauthorized": "invalid_api_key", "too-large": "too_large",
                "bad-request": "invalid_request"}


def answer(status: int, code: str, message: str, openai: bool = False) -> bytes:
    """A complete HTTP/1.1 reply carrying one error, as the Ingress would say it: a protocol
    error, or on the tools' paths (`openai`) OpenAI's error object."""
    if openai:
        kind = "server_error" if status >= 500 else "invalid_request_error"
        error = ApiError(status, message, None, OPENAI_CODES.get(code, code), kind).body()
    else:
        error = {"type": "error", "id": None, "code": code, "message": message}
    body = json.dumps(error).encode() + b"\n"
    return (f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body


def parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    """The request line and the headers (names lower-cased) of a request head."""
    line, *fields = head.decode("latin-1").rstrip("\r\n").split("\r\n")
    if len(line.split(" ")) != 3 or not line.endswith(("HTTP/1.1", "HTTP/1.0")):
        raise Refused(400, "bad-request", "not an HTTP/1.1 request")
    headers: dict[str, str] = {}
    for field in fields:
        name, colon, value = field.partition(":")
        if not colon or not name or name != name.strip():
            raise Refused(400, "bad-request", "a malformed header line")
        headers[name.lower()] = value.strip()
    return line, headers


class Front:
    """Accepts clients on one address and relays the authorized ones to `upstream`."""

    def __init__(self, upstream: tuple[str, int], token_digest_hex: str,
                 limits: FrontLimits = FrontLimits(),
                 on_refused: Callable[[], None] | None = None) -> None:
        if not token_digest_hex:
            raise ValueError("the front needs a token")
        self.upstream = upstream
        self.digest = bytes.fromhex(token_digest_hex)
        self.limits = limits
        self.on_refused = on_refused  # told of every request refused for its token
        self.tls: ssl.SSLContext | None = None
        self.open = 0
        self.per_client: Counter[str] = Counter()
        # Open connections that have not shown the token yet, oldest first.
        self.unproven: dict[asyncio.StreamWriter, None] = {}
        self.refused = 0

    async def start(self, host: str, port: int, tls: ssl.SSLContext | None = None
                    ) -> asyncio.Server:
        # TLS starts in `handle`, after the connection caps: a handshake costs CPU and memory.
        self.tls = tls
        # limit: the most the reader buffers while looking for the end of the head.
        return await asyncio.start_server(self.handle, host, port,
                                          limit=self.limits.max_header_bytes, backlog=1024)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else ""
        if self.per_client[client] >= self.limits.max_per_client or (
                self.open >= self.limits.max_connections and not self.unproven):
            # Answered without reading: a flood costs us a descriptor for a moment only.
            await self._close(writer, answer(503, "busy", "too many connections; try again"))
            return
        if self.open >= self.limits.max_connections:
            # Full: the oldest connection that has not shown a token yet makes room (its
            # handler counts it out), so sockets held open from many addresses cannot lock
            # out a client with the token.
            oldest = next(iter(self.unproven))
            del self.unproven[oldest]
            oldest.transport.abort()
        self.open += 1
        self.per_client[client] += 1
        self.unproven[writer] = None
        try:
            if self.tls is not None:
                await writer.start_tls(self.tls,
                                       ssl_handshake_timeout=self.limits.header_timeout)
            head, body = await self._request(reader, writer)
            await self._relay(head, body, reader, writer)
        except Refused as exc:
            await self._close(writer, answer(exc.status, exc.code, str(exc), exc.openai))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError, TimeoutError):
            pass  # the client went away, or never finished its TLS handshake
        finally:
            self.unproven.pop(writer, None)
            self.open -= 1
            self.per_client[client] -= 1
            if not self.per_client[client]:
                del self.per_client[client]
            await self._close(writer)

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
                       ) -> tuple[bytes, bytes]:
        """The request's head, rewritten for the upstream, and its body."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                          self.limits.header_timeout)
        except asyncio.LimitOverrunError:
            raise Refused(431, "too-large", "request head over "
                          f"{self.limits.max_header_bytes} bytes") from None
        except TimeoutError:
            raise Refused(408, "timeout", "no complete request head in "
                          f"{self.limits.header_timeout:g} s") from None
        line, headers = parse_head(head)
        try:
            length = self._checked(headers, writer)
            try:
                body = await asyncio.wait_for(reader.readexactly(length),
                                              self.limits.body_timeout)
            except TimeoutError:
                raise Refused(408, "timeout", f"the body did not arrive in "
                              f"{self.limits.body_timeout:g} s") from None
        except Refused as exc:
            exc.openai = tool_path(line.split(" ")[1])
            raise
        kept = [f"{name}: {value}" for name, value in headers.items()
                if name not in ("connection", "keep-alive", "content-length", "host")]
        host, port = self.upstream
        upstream_head = "\r\n".join([line, f"host: {host}:{port}", *kept,
                                     f"content-length: {length}", "connection: close",
                                     "", ""])
        return upstream_head.encode("latin-1"), body

    def _checked(self, headers: dict[str, str], writer: asyncio.StreamWriter) -> int:
        """The body's length, once the token and the length are found good."""
        if not self._authorized(headers.get("authorization")):
            self.refused += 1
            if self.on_refused is not None:
                self.on_refused()
            raise Refused(401, "unauthorized", "this engine needs the team's token "
                          "(Authorization: Bearer)")
        self.unproven.pop(writer, None)  # no longer evicted to make room
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raise Refused(411, "bad-request", "send the body with a Content-Length")
        length_text = headers.get("content-length", "0")
        if not length_text.isdigit():
            raise Refused(400, "bad-request", "a bad Content-Length")
        length = int(length_text)
        if length > self.limits.max_body_bytes:
            raise Refused(413, "too-large", f"request over {self.limits.max_body_bytes} bytes")
        return length

    def _authorized(self, header: str | None) -> bool:
        return bearer_authorised(header, self.digest)

    async def _relay(self, head: bytes, body: bytes, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            raise Refused(502, "unavailable", "the engine's proxy is not answering") from None
        gone: asyncio.Future[bytes] | None = None
        try:
            up_writer.write(head + body)
            await up_writer.drain()
            # The client sends nothing more: its side reading EOF (or anything) means it has
            # gone, and closing the upstream connection then cancels the request.
            gone = asyncio.ensure_future(reader.read(1))
            while True:
                chunk = asyncio.ensure_future(up_reader.read(RELAY_CHUNK))
                await asyncio.wait({chunk, gone}, return_when=asyncio.FIRST_COMPLETED)
                if not chunk.done():
                    chunk.cancel()
                    return
                data = chunk.result()
                if not data:
                    return
                writer.write(data)
                await writer.drain()
        finally:
            if gone is not None:
                gone.cancel()
            await self._close(up_writer)

    @staticmethod
    async def _close(writer: asyncio.StreamWriter, last: bytes = b"") -> None:
        with contextlib.suppress(Exception):
            if last and not writer.is_closing():
                writer.write(last)
                await asyncio.wait_for(writer.drain(), 1.0)
        with contextlib.suppress(Exception):
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), 1.0)
