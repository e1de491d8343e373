"""Talk to the resident engine: connect to the one serving (model, device), or start it.

`EngineClient` implements engine.backend.Backend, as `Engine` does, so the language server's
pipeline uses either. Each stream is one connection: closing the generator closes the
socket, and the engine drops that work at its next step boundary. When the engine is gone
every call raises `EngineUnavailable`; the caller decides whether to restart it
(`EngineClient.connect_or_start`).

A hung engine is a dead engine. Every connect and read has a deadline: a request starts with
a ping that must be answered within `PING_TIMEOUT`, and when a stream hears nothing for
`read_timeout` seconds (default `READ_TIMEOUT`, or $DG_ENGINE_READ_TIMEOUT) the engine must
answer a ping on another connection: a busy engine (the request queued behind others) does,
and the stream waits on, up to MAX_SILENCE; a stopped one does not, and the stream fails.
`connect_or_start` kills an engine that accepts connections but answers no ping twice
(SIGKILL: a stopped process ignores anything milder) and starts a new one.

No torch here: `dg-lsp` talking to a resident engine never imports it.
"""

from __future__ import annotations

import itertools
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine.backend import EngineInfo
from engine.serve.socket import protocol
from engine.serve.socket.endpoint import (
    PING_TIMEOUT,
    Endpoint,
    UnsafeRuntimeDir,
    endpoint_for,
    open_private,
    peer_credentials,
)
from engine.text.stops import completion_ids
from engine.types import Draft, HolesRequest, InfillRequest, RewriteRequest

START_TIMEOUT = 600.0  # seconds to wait for a starting engine to load a model
IDLE_EXIT = 1800.0  # an engine started by a client exits after this long without clients
# Seconds a stream waits for the engine's next message: the engine sends a draft after every
# step, and one step of a full canvas on a slow CPU takes a second or two at most.
READ_TIMEOUT = 30.0
# Seconds a stream waits in all for a message from an engine that still answers pings: past
# the engine's own request deadline (60 s by default), something is wrong.
MAX_SILENCE = 120.0
KILL_WAIT = 10.0  # seconds for a killed engine to release its lock


class EngineUnavailable(Exception):
    """The engine cannot be reached, died mid-request, refused to start, or answered with an
    error that is about its state, not the request."""

    code = ""  # the engine's error code (engine.serve.socket.protocol) when it answered with one


class EngineBusy(EngineUnavailable):
    """The engine's queue or connection limit is full: the same request may succeed later."""

    code = "busy"


class EngineRefused(ValueError):
    """The engine refused the request itself (malformed, over its limits, another protocol
    version): sending it again cannot help."""

    code = ""
    reply: dict[str, Any] = {}  # the engine's error reply, where it sent one


class WireBackend:
    """The Backend methods every client of an engine over a wire shares (the local engine's
    socket, a team's URL): requests sent as protocol.to_wire writes them (with the document
    they are about, for a team's router), completions ended
    by the ids the engine's hello names. Subclasses say hello into `info` and implement
    `_stream`."""

    info: dict[str, Any]

    def _stream(self, request: dict[str, Any], cancel: Callable[[], bool] | None
                ) -> Iterator[Draft]:
        raise NotImplementedError

    def infill_stream(self, request: InfillRequest, cancel: Callable[[], bool] | None = None,
                      *, document: str | None = None) -> Iterator[Draft]:
        """Drafts as the engine denoises (the last has done=True)."""
        return self._stream(protocol.to_wire(request, document), cancel)

    def rewrite_stream(self, request: RewriteRequest, cancel: Callable[[], bool] | None = None,
                       *, document: str | None = None) -> Iterator[Draft]:
        return self._stream(protocol.to_wire(request, document), cancel)

    def holes_stream(self, request: HolesRequest, cancel: Callable[[], bool] | None = None,
                     *, document: str | None = None) -> Iterator[Draft]:
        return self._stream(protocol.to_wire(request, document), cancel)

    def completion_ids(self, draft: Draft) -> list[int]:
        return completion_ids(draft.token_ids, protocol.completion_ends(self.info))


class EngineClient(WireBackend):
    def __init__(self, endpoint: Endpoint, model: str | None = None, device: str = "auto",
                 priority: str = "interactive", dtype: str = "auto",
                 read_timeout: float | None = None) -> None:
        self.endpoint = endpoint
        self.read_timeout = read_timeout if read_timeout is not None else _read_timeout_env()
        self.model = model
        self.device = device
        self.dtype = dtype
        self.priority = priority
        self.info: dict[str, Any] = {}  # the engine's hello
        self._ids = itertools.count(1)

    # -- finding the engine -------------------------------------------------------------

    @classmethod
    def connect_or_start(
        cls, model: str | None = None, device: str = "auto", *, start: bool = True,
        idle_exit: float = IDLE_EXIT, priority: str = "interactive", dtype: str = "auto",
        read_timeout: float | None = None,
    ) -> EngineClient:
        """A client of the engine for (model, device, dtype), starting the engine when none
        runs and replacing one that is hung. EngineUnavailable (with a one-line reason) when
        that fails, the runtime directory is unsafe included."""
        try:
            endpoint = endpoint_for(model, device, dtype)
            client = cls(endpoint, model, device, priority, dtype, read_timeout)
            first, _ = endpoint.probe()
            if first == "alive":
                client.hello()
                return client
            if not start:
                raise EngineUnavailable(f"no engine at {endpoint.socket}")
            with endpoint.spawn_lock():
                # Whoever held the lock before us may have started it meanwhile.
                state, pid = endpoint.probe()
                if first == state == "hung" and pid is not None:  # twice: not a hiccup
                    _kill(endpoint, pid)
                    state = "absent"
                if state != "alive" and not endpoint.serving():
                    process = _spawn(endpoint, model, device, dtype, idle_exit)
                    gone = lambda: process.poll() is not None  # noqa: E731
                else:
                    gone = lambda: not endpoint.serving()  # noqa: E731
                if not endpoint.wait_alive(START_TIMEOUT, give_up=gone):
                    raise EngineUnavailable(f"the engine did not start: {_log_tail(endpoint)}")
        except UnsafeRuntimeDir as exc:
            raise EngineUnavailable(str(exc)) from None
        client.hello()
        return client

    def hello(self) -> dict[str, Any]:
        """The engine's hello: protocol version, model, device, family and pid; EngineRefused
        saying what to do when the engine speaks another protocol version."""
        with self._connect() as sock:
            try:
                self.info = self._call(sock, {"op": "hello", "version": protocol.VERSION})
            except EngineRefused as exc:
                if exc.code != "version":
                    raise
                pid = peer_credentials(sock)[0]
                # A version 1 engine's refusal does not carry its version; later ones do.
                theirs = exc.reply.get("version", 1)
                refused = EngineRefused(protocol.other_version(
                    theirs, protocol.VERSION, f"the engine at {self.endpoint.socket} was "
                    f"started from the other: stop it (kill {pid}) and the next request starts "
                    "one from this install"))
                refused.code = exc.code
                raise refused from None
        return self.info

    @property
    def engine_info(self) -> EngineInfo:
        return EngineInfo(model=str(self.info.get("model", self.model or "")),
                          family=str(self.info.get("family", "")),
                          device=str(self.info.get("device", self.device)),
                          resident=True, counts_tokens=True)

    # -- requests -----------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._connect() as sock:
            return self._call(sock, {"op": "stats"})["stats"]

    def shutdown(self) -> None:
        with self._connect() as sock:
            self._call(sock, {"op": "shutdown"})

    # -- plumbing -----------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        try:
            sock = self.endpoint.connect()
        except OSError as exc:  # UntrustedPeer too: never talk to another user's listener
            raise EngineUnavailable(f"cannot reach the engine at {self.endpoint.socket}: "
                                    f"{exc}") from None
        sock.settimeout(self.read_timeout)
        return sock

    def _call(self, sock: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
        request["id"] = next(self._ids)
        try:
            protocol.send(sock, request)
            reply = protocol.receive(sock)
        except TimeoutError:
            raise EngineUnavailable(f"the engine did not answer in {self.read_timeout:g} s"
                                    ) from None
        except (OSError, protocol.ProtocolError) as exc:
            raise EngineUnavailable(f"the engine stopped answering: {exc}") from None
        raise_error(reply)
        return reply

    def _ping(self, sock: socket.socket) -> None:
        """EngineUnavailable unless the engine answers a ping on `sock` within PING_TIMEOUT
        (EngineBusy when it answers that it has no room): a stopped engine still accepts
        connections, so only an answer proves it alive."""
        sock.settimeout(PING_TIMEOUT)
        try:
            reply = protocol.ask(sock, {"op": "ping", "id": next(self._ids)})
        except TimeoutError:
            raise EngineUnavailable(f"the engine at {self.endpoint.socket} did not answer a "
                                    f"ping in {PING_TIMEOUT:g} s") from None
        except (OSError, protocol.ProtocolError) as exc:
            raise EngineUnavailable(f"the engine stopped answering: {exc}") from None
        raise_error(reply)
        sock.settimeout(self.read_timeout)

    def _stream(self, request: dict[str, Any], cancel: Callable[[], bool] | None
                ) -> Iterator[Draft]:
        sock = self._connect()
        try:
            self._ping(sock)
            request |= {"id": next(self._ids), "stream": True, "priority": self.priority}
            try:
                protocol.send(sock, request)
            except OSError as exc:
                raise EngineUnavailable(f"the engine stopped answering: {exc}") from None
            cancelled = False
            while True:
                if cancel is not None and not cancelled and cancel():
                    cancelled = True
                    _send_quietly(sock, {"op": "cancel", "id": 0, "target": request["id"]})
                if not self._wait_readable(sock):
                    raise EngineUnavailable(f"the engine sent nothing for "
                                            f"{self.read_timeout:g} s and answers no ping")
                try:
                    reply = protocol.receive(sock)
                except TimeoutError:  # a frame begun and never finished
                    raise EngineUnavailable(f"the engine stopped mid-message for "
                                            f"{self.read_timeout:g} s") from None
                except (OSError, protocol.ProtocolError) as exc:
                    raise EngineUnavailable(f"the engine stopped mid-request: {exc}") from None
                if reply.get("id") != request["id"]:
                    continue  # the cancel's acknowledgement
                raise_error(reply)
                draft = protocol.draft_from_wire(reply["draft"], reply.get("score"))
                yield draft
                if reply["type"] == "result":
                    return
        finally:
            sock.close()  # also how an abandoned stream tells the engine to drop the work

    def _wait_readable(self, sock: socket.socket) -> bool:
        """Whether `sock` has data (or EOF) before the engine is found hung: every
        `read_timeout` of silence it must answer a ping, for MAX_SILENCE at most."""
        silent_since = time.monotonic()
        while not select.select([sock], [], [], self.read_timeout)[0]:
            if time.monotonic() - silent_since >= MAX_SILENCE or not self.endpoint.alive():
                return False
        return True


def _read_timeout_env() -> float:
    raw = os.environ.get("DG_ENGINE_READ_TIMEOUT", "")
    try:
        value = float(raw)
    except ValueError:
        return READ_TIMEOUT
    return value if 0 < value < float("inf") else READ_TIMEOUT


def _kill(endpoint: Endpoint, pid: int) -> None:
    """SIGKILL the hung engine `pid` (named by the kernel: SO_PEERCRED, and checked to be this
    user's); wait for it to release its lock."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + KILL_WAIT
    while endpoint.serving() and time.monotonic() < deadline:
        time.sleep(0.05)


REFUSED = ("bad-request", "unknown-op", "too-large", "version")  # codes about the request


def raise_error(reply: dict[str, Any]) -> None:
    """The engine's error reply as the exception type its code stands for."""
    if reply.get("type") != "error":
        return
    code, message = str(reply.get("code")), reply.get("message", "")
    error: EngineUnavailable | EngineRefused
    if code == EngineBusy.code:
        error = EngineBusy(message)
    elif code in REFUSED:
        error = EngineRefused(f"engine refused the request ({code}): {message}")
        error.reply = reply
    else:
        error = EngineUnavailable(f"engine error ({code}): {message}")
    error.code = code
    raise error


def _send_quietly(sock: socket.socket, message: dict[str, Any]) -> None:
    try:
        protocol.send(sock, message)
    except OSError:
        pass


def _spawn(endpoint: Endpoint, model: str | None, device: str, dtype: str, idle_exit: float
           ) -> subprocess.Popen:
    command = [sys.executable, "-m", "engine.cli", "serve", "--device", device, "--dtype", dtype,
               "--socket", str(endpoint.socket), "--idle-exit", str(idle_exit)]
    if model:
        command += ["--model", model]
    log = open_private(endpoint.log_path, binary=True)  # handed to the child
    log.write(f"\n--- {time.ctime()} {' '.join(command)}\n".encode())
    log.flush()
    try:
        # Its own session: the engine outlives the editor that started it and ignores the
        # editor's Ctrl-C.
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True)
    finally:
        log.close()


def _log_tail(endpoint: Endpoint, lines: int = 5) -> str:
    try:
        fd = os.open(endpoint.log_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return "no log"
    with os.fdopen(fd, "rb") as log:
        size = os.fstat(fd).st_size
        log.seek(max(0, size - 8192))
        text = log.read().decode(errors="replace").strip().splitlines()
    return " | ".join(text[-lines:]) or "no log"
