"""Talk to a team's engine by URL: the Ray Serve application `dg-engine serve --ray` deploys.

    http://HOST:PORT   or   https://HOST:PORT   (TLS where the deployment was given a certificate)

Every request carries the team's token (`Authorization: Bearer ...`); the ingress refuses any
request without the right one before it reaches a model. The token is read from a private
file (engine.serve.token checks it), never taken from the URL or the command line, where it
would end up in shell history, logs and process listings; no error message here holds it or a
URL's password.

HTTP paths (engine.serve.team.app answers them):

    GET  /v1/hello    the hello of engine.serve.socket.protocol, plus "replicas"
    GET  /v1/status   every replica's model, device, queue and tokens/s
    POST /v1/stream   body: an infill, rewrite or holes request of engine.serve.socket.protocol
                      (with the "document" it is about, which routes it); answer:
                      one JSON message per line ("draft" after every step, then "result"
                      or "error"), each "draft" and "result" with a "replica" (transport
                      metadata)

`RemoteEngine` implements engine.backend.Backend, as `EngineClient` does. Cancelling a stream
closes its connection: the ingress sees the disconnect and the replica drops the request at
its next step boundary, as the resident engine does when a socket closes.

What a client sees when a replica is lost: EngineUnavailable with code "unavailable" (the
ingress's answer for a replica lost mid-request, the front's 502 when Ray Serve's proxy does
not answer, or any 5xx that is not the engine's own answer), or with no code (the connection
reset or closed before the result, nothing heard for `read_timeout`). Either way the same
request, sent again, goes to a live replica (batch mode retries it: dg_lsp.batch.shared).

No torch and no Ray here: a developer's dg-lsp talking to the team's engine needs neither.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from engine.backend import EngineInfo
from engine.serve.socket import protocol
from engine.serve.socket.client import (
    READ_TIMEOUT,
    EngineRefused,
    EngineUnavailable,
    WireBackend,
    raise_error,
)
from engine.serve.token import TOKEN_CHARACTERS, read_token
from engine.types import Draft

SCHEMES = ("http", "https")
CONNECT_TIMEOUT = 10.0  # seconds: a remote head node is further away than a local socket


def is_engine_url(value: str) -> bool:
    """Whether an `engine` setting names a remote engine rather than a mode."""
    return value.split("://", 1)[0].lower() in SCHEMES and "://" in value


def shown_url(url: str) -> str:
    """`url` as a message may print it: what comes before its last '@' (credentials, which
    may hold '/', '?' or '#') and any query or fragment (where a token may be) dropped."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "…@" + rest.rsplit("@", 1)[1]
    for mark in "?#":
        if mark in rest:
            rest = rest.split(mark, 1)[0] + mark + "…"
    return f"{scheme}{sep}{rest}"[:200]


@dataclasses.dataclass(frozen=True)
class EngineURL:
    scheme: str
    host: str
    port: int
    path: str  # the application's route prefix, without a trailing slash

    @classmethod
    def parse(cls, url: str) -> EngineURL:
        """ValueError for anything but http(s)://HOST[:PORT][/PREFIX] without credentials.

        The messages never repeat the URL: it may hold a password (urllib's own errors
        quote the netloc, so none of them is passed on)."""
        if "@" in url:  # user:password@ (a password may hold '/', '?', '#': urllib splits there)
            # A token there would be logged with every URL printed: keep it in the token file.
            raise ValueError("put the token in the token file, not in the engine URL "
                             "(user:password@ is not accepted)")
        try:
            parts = urllib.parse.urlsplit(url.strip())
            port = parts.port
        except ValueError:
            raise ValueError("the engine URL is malformed (http(s)://HOST:PORT; a port is a "
                             "number up to 65535)") from None
        if parts.scheme.lower() not in SCHEMES or not parts.hostname:
            raise ValueError("an engine URL is http(s)://HOST:PORT")
        if parts.username or parts.password or parts.query:
            raise ValueError("put the token in the token file, not in the engine URL")
        scheme = parts.scheme.lower()
        port = port or (443 if scheme == "https" else 80)
        return cls(scheme, parts.hostname, port, parts.path.rstrip("/"))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{self.path}"


class RemoteEngine(WireBackend):
    def __init__(self, url: str, token: str, *, priority: str = "interactive",
                 read_timeout: float = READ_TIMEOUT, ca_file: str | None = None) -> None:
        if not token:
            raise ValueError("a remote engine needs a token")
        if not TOKEN_CHARACTERS.fullmatch(token):  # the message must not hold it
            raise ValueError("the token has a space or a control character: a token is "
                             "visible ASCII")
        self.url = EngineURL.parse(url)
        self._token = token
        self.priority = priority
        self.read_timeout = read_timeout
        self.ca_file = ca_file
        self.info: dict[str, Any] = {}
        self._local = threading.local()  # per thread: the replica that served its last request
        self._ids = 0

    def __repr__(self) -> str:  # never the token
        return f"RemoteEngine({str(self.url)!r})"

    @property
    def last_replica(self) -> str:
        """The replica that served this thread's last request ("" when its answer named none:
        a request that failed before its first answer). Per thread: batch mode streams from
        several threads through one client."""
        return getattr(self._local, "replica", "")

    @classmethod
    def connect(cls, url: str, token_file: Path | str | None = None, **kwargs: Any
                ) -> RemoteEngine:
        """A client of the engine at `url` that has answered a hello; EngineUnavailable when
        it cannot be reached or refuses the token, ValueError for a bad URL or token file."""
        client = cls(url, read_token(token_file), **kwargs)
        client.hello()
        return client

    # -- Backend -------------------------------------------------------------------------

    def hello(self) -> dict[str, Any]:
        self.info = self._get("/v1/hello")
        if self.info.get("version") != protocol.VERSION:
            raise EngineRefused(protocol.other_version(
                self.info.get("version"), protocol.VERSION, f"use a client from the install "
                f"that serves {self.url}, or have the team's engine upgraded to this one"))
        return self.info

    @property
    def engine_info(self) -> EngineInfo:
        return EngineInfo(model=str(self.info.get("model", "")),
                          family=str(self.info.get("family", "")),
                          device=str(self.info.get("device", str(self.url))),
                          resident=True, counts_tokens=True)

    def status(self) -> dict[str, Any]:
        """Every replica's model, device, queue lengths and tokens/s."""
        return self._get("/v1/status")

    # -- plumbing ------------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        if self.url.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca_file)
            return http.client.HTTPSConnection(self.url.host, self.url.port,
                                               timeout=CONNECT_TIMEOUT, context=context)
        return http.client.HTTPConnection(self.url.host, self.url.port, timeout=CONNECT_TIMEOUT)

    def _open(self, method: str, path: str, body: bytes | None = None
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connection = self._connection()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/x-ndjson"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        try:
            connection.connect()
            connection.sock.settimeout(self.read_timeout)
            connection.request(method, self.url.path + path, body=body, headers=headers)
            response = connection.getresponse()
        except TimeoutError:
            connection.close()
            raise EngineUnavailable(f"the engine at {self.url} did not answer in "
                                    f"{self.read_timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            raise EngineUnavailable(f"cannot reach the engine at {self.url}: {exc}") from None
        except ValueError:
            # http.client quotes a header it refuses, and the header holds the token.
            connection.close()
            raise EngineUnavailable(f"cannot send a request to the engine at {self.url}: a "
                                    "header was refused") from None
        if response.status != 200:
            try:
                reply = protocol.decode(response.read(protocol.MAX_UNAUTHENTICATED))
            except (OSError, http.client.HTTPException, protocol.ProtocolError):
                # Not the engine's answer: a proxy's. A 5xx there (no replica to take the
                # request, a replica or the ingress lost) is about the engine's state: the same
                # request may be answered in a moment ("unavailable", as the ingress says).
                code = "unavailable" if response.status >= 500 else "failed"
                reply = {"type": "error", "code": code,
                         "message": f"HTTP {response.status} from the engine's proxy"}
            finally:
                connection.close()
            raise_error(reply)
            raise EngineUnavailable(f"the engine at {self.url} answered HTTP {response.status}")
        return connection, response

    def _get(self, path: str) -> dict[str, Any]:
        connection, response = self._open("GET", path)
        try:
            reply = protocol.decode(response.read(protocol.MAX_MESSAGE))
        except (OSError, http.client.HTTPException, protocol.ProtocolError) as exc:
            raise EngineUnavailable(f"the engine at {self.url} stopped answering: {exc}"
                                    ) from None
        finally:
            connection.close()
        raise_error(reply)
        return reply

    def _stream(self, request: dict[str, Any], cancel: Callable[[], bool] | None
                ) -> Iterator[Draft]:
        self._ids += 1
        # The request's "document" (protocol.to_wire) keeps one document on one replica;
        # without it the team's router keys on the start of the prefix.
        request |= {"id": self._ids, "stream": True, "priority": self.priority}
        try:
            body = protocol.encode(request)[protocol.HEADER.size:]
        except protocol.ProtocolError as exc:
            raise EngineRefused(str(exc)) from None
        self._local.replica = ""
        connection, response = self._open("POST", "/v1/stream", body)
        last: Draft | None = None
        try:
            while True:
                if cancel is not None and cancel():
                    # Closing the connection is the cancel: the replica drops the request at
                    # its next step. The caller gets what it would from a local engine.
                    yield (dataclasses.replace(last, done=True, finish_reason="cancelled")
                           if last is not None else _empty("cancelled"))
                    return
                reply = self._next_line(response)
                raise_error(reply)
                self._local.replica = str(reply.get("replica", self.last_replica))
                last = protocol.draft_from_wire(reply["draft"], reply.get("score"))
                yield last
                if reply.get("type") == "result":
                    return
        finally:
            connection.close()

    def _next_line(self, response: http.client.HTTPResponse) -> dict[str, Any]:
        try:
            line = response.readline(protocol.MAX_MESSAGE)
        except TimeoutError:
            raise EngineUnavailable(f"the engine at {self.url} sent nothing for "
                                    f"{self.read_timeout:g} s") from None
        except (OSError, http.client.HTTPException) as exc:
            raise EngineUnavailable(f"the engine at {self.url} stopped mid-request: {exc}"
                                    ) from None
        if not line:
            raise EngineUnavailable(f"the engine at {self.url} closed the stream before its "
                                    f"result")
        try:
            return protocol.decode(line)
        except protocol.ProtocolError as exc:
            raise EngineUnavailable(f"the engine at {self.url} sent a bad message: {exc}"
                                    ) from None


def _empty(reason: str) -> Draft:
    return Draft(step=0, token_ids=[], committed=0, text="", done=True, finish_reason=reason)


def reply_line(message: dict[str, Any]) -> bytes:
    """One message of a /v1/stream answer: strict JSON and a newline (JSON strings escape
    theirs, so a line is always one message)."""
    return json.dumps(message, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":")).encode("utf-8") + b"\n"
