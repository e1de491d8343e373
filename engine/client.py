"""Talk to the resident engine: connect to the one serving (model, device), or start it.

`EngineClient` has the same `infill_stream` / `rewrite_stream` as `Engine`, so the language
server's pipeline uses either. Each stream is one connection: closing the generator closes the
socket, and the engine drops that work at its next step boundary. When the engine is gone
every call raises `EngineUnavailable`; the caller decides whether to restart it
(`EngineClient.connect_or_start`).

No torch here: `dg-lsp` talking to a resident engine never imports it.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from engine import protocol
from engine.endpoint import Endpoint, endpoint_for
from engine.types import Draft, SamplerSettings

START_TIMEOUT = 600.0  # seconds to wait for a starting engine to load a model
IDLE_EXIT = 1800.0  # an engine started by a client exits after this long without clients


class EngineUnavailable(Exception):
    """The engine cannot be reached, died mid-request, or refused to start."""


class EngineBusy(EngineUnavailable):
    """The engine's queue is full."""


class EngineClient:
    def __init__(self, endpoint: Endpoint, model: str | None = None, device: str = "auto",
                 priority: str = "interactive", dtype: str = "auto") -> None:
        self.endpoint = endpoint
        self.model = model
        self.device = device
        self.dtype = dtype
        self.priority = priority
        self.info: dict[str, Any] = {}
        self._ids = itertools.count(1)

    # -- finding the engine -------------------------------------------------------------

    @classmethod
    def connect_or_start(
        cls, model: str | None = None, device: str = "auto", *, start: bool = True,
        idle_exit: float = IDLE_EXIT, priority: str = "interactive", dtype: str = "auto",
    ) -> EngineClient:
        """A client of the engine for (model, device, dtype), starting the engine when none
        runs."""
        endpoint = endpoint_for(model, device, dtype)
        client = cls(endpoint, model, device, priority, dtype)
        if endpoint.alive():
            client.hello()
            return client
        if not start:
            raise EngineUnavailable(f"no engine at {endpoint.socket}")
        with endpoint.spawn_lock():
            # Whoever held the lock before us may have started it meanwhile.
            if not endpoint.alive() and not endpoint.serving():
                process = _spawn(endpoint, model, device, dtype, idle_exit)
                gone = lambda: process.poll() is not None  # noqa: E731
            else:
                gone = lambda: not endpoint.serving()  # noqa: E731
            if not endpoint.wait_alive(START_TIMEOUT, give_up=gone):
                raise EngineUnavailable(f"the engine did not start: {_log_tail(endpoint)}")
        client.hello()
        return client

    def hello(self) -> dict[str, Any]:
        with self._connect() as sock:
            self.info = self._call(sock, {"op": "hello", "version": protocol.VERSION})
        return self.info

    # -- requests -----------------------------------------------------------------------

    def infill_stream(
        self,
        prefix: str,
        suffix: str,
        max_tokens: int = 32,
        *,
        settings: SamplerSettings | None = None,
        canvas_length: int = 256,
        cancel: Callable[[], bool] | None = None,
    ) -> Iterator[Draft]:
        """Drafts as the engine denoises (the last has done=True)."""
        request = {"op": "infill", "prefix": prefix, "suffix": suffix, "max_tokens": max_tokens,
                   "canvas_length": canvas_length, "settings": protocol.settings_to_wire(settings)}
        return self._stream(request, cancel)

    def rewrite_stream(
        self,
        prefix: str,
        suffix: str,
        original: str,
        *,
        strength: float = 1.0,
        max_tokens: int | None = None,
        settings: SamplerSettings | None = None,
        canvas_length: int = 256,
        cancel: Callable[[], bool] | None = None,
    ) -> Iterator[Draft]:
        request = {"op": "rewrite", "prefix": prefix, "suffix": suffix, "original": original,
                   "strength": strength, "canvas_length": canvas_length,
                   "settings": protocol.settings_to_wire(settings)}
        if max_tokens is not None:
            request["max_tokens"] = max_tokens
        return self._stream(request, cancel)

    def stats(self) -> dict[str, Any]:
        with self._connect() as sock:
            return self._call(sock, {"op": "stats"})["stats"]

    def shutdown(self) -> None:
        with self._connect() as sock:
            self._call(sock, {"op": "shutdown"})

    # -- plumbing -----------------------------------------------------------------------

    def _connect(self) -> socket.socket:
        try:
            sock = self.endpoint.connect(timeout=None)
        except OSError as exc:
            raise EngineUnavailable(f"cannot reach the engine at {self.endpoint.socket}: "
                                    f"{exc}") from None
        return sock

    def _call(self, sock: socket.socket, request: dict[str, Any]) -> dict[str, Any]:
        request["id"] = next(self._ids)
        try:
            protocol.send(sock, request)
            reply = protocol.receive(sock)
        except (OSError, protocol.ProtocolError) as exc:
            raise EngineUnavailable(f"the engine stopped answering: {exc}") from None
        _raise_error(reply)
        return reply

    def _stream(self, request: dict[str, Any], cancel: Callable[[], bool] | None
                ) -> Iterator[Draft]:
        sock = self._connect()
        request |= {"id": next(self._ids), "stream": True, "priority": self.priority}
        try:
            try:
                protocol.send(sock, request)
            except OSError as exc:
                raise EngineUnavailable(f"the engine stopped answering: {exc}") from None
            cancelled = False
            while True:
                if cancel is not None and not cancelled and cancel():
                    cancelled = True
                    _send_quietly(sock, {"op": "cancel", "id": 0, "target": request["id"]})
                try:
                    reply = protocol.receive(sock)
                except (OSError, protocol.ProtocolError) as exc:
                    raise EngineUnavailable(f"the engine stopped mid-request: {exc}") from None
                if reply.get("id") != request["id"]:
                    continue  # the cancel's acknowledgement
                _raise_error(reply)
                draft = protocol.draft_from_wire(reply["draft"])
                yield draft
                if reply["type"] == "result":
                    return
        finally:
            sock.close()  # also how an abandoned stream tells the engine to drop the work


def _raise_error(reply: dict[str, Any]) -> None:
    if reply.get("type") != "error":
        return
    code, message = reply.get("code"), reply.get("message", "")
    if code == "busy":
        raise EngineBusy(message)
    if code in ("bad-request", "unknown-op", "too-large", "version"):
        raise ValueError(f"engine refused the request ({code}): {message}")
    raise EngineUnavailable(f"engine error ({code}): {message}")


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
    log = open(endpoint.log_path, "ab")  # noqa: SIM115 - handed to the child
    log.write(f"\n--- {time.ctime()} {' '.join(command)}\n".encode())
    log.flush()
    try:
        # Its own session: the engine outlives the editor that started it and ignores the
        # editor's Ctrl-C.
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env=os.environ.copy())
    finally:
        log.close()


def _log_tail(endpoint: Endpoint, lines: int = 5) -> str:
    try:
        text = endpoint.log_path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "no log"
    return " | ".join(text[-lines:]) or "no log"
