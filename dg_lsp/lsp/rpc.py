"""Reading LSP messages off a byte stream so that every request gets an answer.

pygls's reader (2.1.1) drops a request whose params do not convert, an invalid message and
anything after a malformed `Content-Length` without a word, and allocates whatever length a
header claims. This one:

- caps a message at MAX_MESSAGE_BYTES and a header line at MAX_HEADER_LINE;
- after a bad or refused header, resyncs at the next `Content-Length:` header, which may
  follow garbage on the same line (a body whose length was wrong runs into the next header);
- answers what it cannot use: -32700 for a body that is not JSON, -32600 for a message that
  is not a JSON-RPC request, -32602 with the offending field for params that do not convert.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from typing import Any, BinaryIO

from cattrs.v import transform_error
from lsprotocol.types import ResponseError
from pygls.protocol import JsonRPCProtocol

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a 10 MB document, JSON-escaped, fits many times over
MAX_HEADER_LINE = 8192
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602

_HEADER = b"content-length:"
_JSONRPC_FIELDS = {"jsonrpc", "id", "method", "params", "result", "error"}


class Stream:
    """A byte stream read line by line (bounded) or by count, with bytes to read again."""

    def __init__(self, readline: Callable[[int], Awaitable[bytes]],
                 read: Callable[[int], Awaitable[bytes]]) -> None:
        self._readline, self._read = readline, read
        self._pending = b""

    @classmethod
    def of_file(cls, file: BinaryIO, executor: Executor) -> Stream:
        """Blocking reads of `file` (stdin) on a thread of `executor`."""
        def run(call: Callable[[int], bytes]) -> Callable[[int], Awaitable[bytes]]:
            return lambda n: asyncio.get_running_loop().run_in_executor(executor, call, n)
        return cls(run(file.readline), run(file.read))

    @classmethod
    def of_reader(cls, reader: asyncio.StreamReader) -> Stream:
        async def readline(limit: int) -> bytes:
            try:
                return await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                return exc.partial
            except asyncio.LimitOverrunError as exc:
                return await reader.read(max(1, min(limit, exc.consumed)))

        async def read(n: int) -> bytes:
            try:
                return await reader.readexactly(n)
            except asyncio.IncompleteReadError as exc:
                return exc.partial
        return cls(readline, read)

    def unread(self, data: bytes) -> None:
        self._pending = data + self._pending

    async def readline(self) -> bytes:
        if self._pending:
            end = self._pending.find(b"\n", 0, MAX_HEADER_LINE)
            cut = end + 1 if end >= 0 else min(len(self._pending), MAX_HEADER_LINE)
            line, self._pending = self._pending[:cut], self._pending[cut:]
            return line
        return await self._readline(MAX_HEADER_LINE)

    async def read(self, n: int) -> bytes:
        data, self._pending = self._pending[:n], self._pending[n:]
        while len(data) < n:
            more = await self._read(n - len(data))
            if not more:
                break
            data += more
        return data


async def serve(stream: Stream, protocol: JsonRPCProtocol,
                stopped: Callable[[], bool]) -> None:
    """Read and dispatch messages until the stream ends or `stopped()`."""
    while not stopped():
        length = await _read_headers(stream, protocol)
        if length is None:
            return
        body = await stream.read(length)
        if len(body) < length:
            return
        dispatch(protocol, body, stream)


async def _read_headers(stream: Stream, protocol: JsonRPCProtocol) -> int | None:
    """The Content-Length of the next message whose headers are usable; None at the end."""
    length: int | None = None
    while True:
        line = await stream.readline()
        if not line:
            return None
        if not line.strip():
            if length is not None:
                return length
            continue  # a blank line before any header: nothing to frame yet
        at = line.lower().rfind(_HEADER)
        if at < 0:
            continue  # another header (Content-Type), or garbage while resyncing
        value = line[at + len(_HEADER):].strip()
        if not value.isdigit():
            length = None
            send_error(protocol, None, PARSE_ERROR,
                       f"bad Content-Length header "
                       f"{value[:40].decode('ascii', 'replace')!r}; message skipped")
        elif int(value) > MAX_MESSAGE_BYTES:
            length = None
            send_error(protocol, None, INVALID_REQUEST,
                       f"message of {int(value)} bytes refused (limit {MAX_MESSAGE_BYTES})")
        else:
            length = int(value)


def dispatch(protocol: JsonRPCProtocol, body: bytes, stream: Stream | None = None) -> None:
    """Hand one message body to `protocol`, or answer why it cannot be."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        # A Content-Length that overran this body swallowed the start of the next message:
        # read that part again.
        at = body.lower().find(_HEADER)
        if stream is not None and at > 0:
            stream.unread(body[at:])
        send_error(protocol, None, PARSE_ERROR, f"message body is not JSON: {exc}")
        return
    msg_id = data.get("id") if isinstance(data, dict) else None
    problem = _invalid(data)
    if problem is not None:
        valid_id = _valid_id(msg_id) and msg_id is not None
        send_error(protocol, msg_id if valid_id else None, INVALID_REQUEST,
                   f"invalid request: {problem}")
        return
    method = data.get("method")
    is_request = "id" in data and method is not None
    if is_request and getattr(protocol, "_shutdown", False) and method != "exit":
        send_error(protocol, msg_id, INVALID_REQUEST, "the server is shutting down")
        return
    try:
        message = protocol.structure_message(data)
    except Exception as exc:  # noqa: BLE001 - cattrs raises many kinds; all mean bad params
        if is_request:
            send_error(protocol, msg_id, INVALID_PARAMS,
                       f"invalid params for {method}: {_describe(exc)}")
        elif method is None and msg_id is not None:
            # A client's answer to one of our requests that does not convert (`null` for
            # workspace/applyEdit): fail that request rather than leave it waiting forever.
            log.warning("a malformed response to %s: %s", msg_id, _describe(exc))
            protocol._handle_response(msg_id, None, ResponseError(
                code=INVALID_PARAMS, message=f"dg-lsp: malformed response: {_describe(exc)}"))
        else:
            log.warning("dropped a malformed %s message: %s", method or "response",
                        _describe(exc))
        return
    protocol.handle_message(message)


def _invalid(data: Any) -> str | None:
    """Why `data` is not a JSON-RPC 2.0 message, or None."""
    if not isinstance(data, dict):
        return f"expected a JSON object, got {type(data).__name__}"
    if data.get("jsonrpc") != "2.0":
        return "jsonrpc must be \"2.0\""
    if not _valid_id(data.get("id")):
        return "id must be a string or an integer"
    method = data.get("method")
    if method is None:
        if "id" not in data or ("result" not in data and "error" not in data):
            return "neither a request, a notification nor a response"
    elif not isinstance(method, str):
        return "method must be a string"
    return None


def _valid_id(value: Any) -> bool:
    return value is None or isinstance(value, str) or (
        isinstance(value, int) and not isinstance(value, bool))


def _describe(exc: BaseException) -> str:
    """The fields that failed to convert, e.g. `position.line: expected int`."""
    cause = exc.__cause__ or exc
    try:
        details = transform_error(cause, path="",
                                  format_exception=_format_exception)
    except Exception:  # noqa: BLE001 - not a cattrs error: its own words will do
        details = [str(cause) or type(cause).__name__]
    return "; ".join(d.replace(" @ .params.", " @ ").replace(" @ .params", " @ params")
                     for d in details[:5])


def _format_exception(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, ValueError) and str(exc):
        return str(exc)
    name = getattr(type_, "__name__", None)
    return f"invalid value, expected {name}" if name else "invalid value"


def send_error(protocol: JsonRPCProtocol, msg_id: Any, code: int, message: str) -> None:
    log.warning("answering %s with %d: %s", msg_id, code, message)
    protocol._send_response(msg_id, error=ResponseError(code=code, message=f"dg-lsp: {message}"))
