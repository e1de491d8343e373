"""The resident engine's wire protocol, version 1.

Transport: a Unix socket (default) or TCP. Every message is a 4-byte big-endian length, then
that many bytes of UTF-8 JSON holding one object. Messages over `MAX_MESSAGE` bytes are
refused (the connection is closed after the error reply, as the stream cannot be resynced).

Client → engine. Every request has "op" and an "id" (any JSON scalar, unique per connection):

    {"op": "hello", "id": 1, "version": 1, "token": "..."}   # first message; token over TCP
    {"op": "infill", "id": 2, "prefix": str, "suffix": str, "max_tokens": int,
     "canvas_length": int, "settings": {SamplerSettings fields}, "priority": "interactive"|"batch",
     "stream": bool}
    {"op": "rewrite", "id": 3, ...infill fields..., "original": str, "strength": float}
    {"op": "cancel", "id": 4, "target": 2}
    {"op": "stats", "id": 5}   {"op": "ping", "id": 6}   {"op": "shutdown", "id": 7}

Engine → client. Replies carry the request's "id" and a "type":

    {"type": "hello", "id": 1, "version": 1, "model": str, "device": str, "family": str}
    {"type": "draft", "id": 2, "draft": {Draft fields}}     # streaming, after every step
    {"type": "result", "id": 2, "draft": {Draft fields}}    # the last Draft (done=True)
    {"type": "ok", "id": 6, ...}                            # ping, cancel, stats, shutdown
    {"type": "error", "id": 2, "code": str, "message": str}

Error codes: "bad-request" (malformed or missing fields), "unknown-op", "too-large", "busy" (the
queue is full: try later), "unauthorized", "version", "failed" (the model raised).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import struct
from typing import Any

from engine.types import Draft, SamplerSettings

VERSION = 1
MAX_MESSAGE = 8 * 1024 * 1024  # a 256-token canvas's text is a few KB; this is generous
HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """A message that breaks the protocol; `code` is the error code sent back."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(body) > MAX_MESSAGE:
        raise ProtocolError("too-large", f"message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    return HEADER.pack(len(body)) + body


def decode(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError("bad-request", f"not a JSON message: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("bad-request", "a message must be a JSON object")
    return message


def check_length(length: int) -> None:
    if length > MAX_MESSAGE:
        raise ProtocolError("too-large", f"message of {length} bytes exceeds {MAX_MESSAGE}")


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(encode(message))


def receive(sock: socket.socket) -> dict[str, Any]:
    """The next message; ConnectionError when the peer closed the connection."""
    (length,) = HEADER.unpack(_exactly(sock, HEADER.size))
    check_length(length)
    return decode(_exactly(sock, length))


def _exactly(sock: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the engine closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# -- payloads ---------------------------------------------------------------------------------

_SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(SamplerSettings)}


def settings_to_wire(settings: SamplerSettings | None) -> dict[str, Any]:
    return dataclasses.asdict(settings or SamplerSettings())


def settings_from_wire(raw: Any) -> SamplerSettings:
    if raw is None:
        return SamplerSettings()
    if not isinstance(raw, dict):
        raise ProtocolError("bad-request", "settings must be an object")
    unknown = set(raw) - set(_SETTINGS_FIELDS)
    if unknown:
        raise ProtocolError("bad-request", f"unknown sampler settings: {sorted(unknown)}")
    defaults = SamplerSettings()
    for name, value in raw.items():
        default = getattr(defaults, name)
        if "None" in str(_SETTINGS_FIELDS[name].type):  # max_steps, refresh_window: int | None
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        elif isinstance(default, float):
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            ok = type(value) is type(default)
        if not ok:
            raise ProtocolError("bad-request", f"settings.{name}: bad value {value!r}")
    return SamplerSettings(**raw)


def draft_to_wire(draft: Draft) -> dict[str, Any]:
    return dataclasses.asdict(draft)


def draft_from_wire(raw: dict[str, Any]) -> Draft:
    return Draft(**raw)
