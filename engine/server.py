"""`dg-engine serve`: one long-lived process holds the model; editors and CLIs connect to it.

The socket lives in the user's runtime directory (engine.endpoint), mode 0600. A second
`serve` for the same model and device finds the first one (it holds `<socket>.lock` for its
whole life) and exits, telling where the running engine is. `--listen HOST:PORT` adds a TCP
listener that requires a token on every connection. The wire format is engine.protocol.

Connections are served by asyncio on the main thread; the model runs on the scheduler's
thread (engine.scheduler). A connection that closes has every request it made cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from engine import protocol
from engine.endpoint import Endpoint, endpoint_for
from engine.protocol import ProtocolError
from engine.types import Draft

DEFAULT_IDLE_EXIT = 0  # seconds without a connection before exiting; 0 = never


class EngineServer:
    def __init__(self, engine: Any, scheduler: Any, name: str, token: str | None = None,
                 idle_exit: float = DEFAULT_IDLE_EXIT) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.name = name
        self.token = token
        self.idle_exit = idle_exit
        self.connections = 0
        self.last_active = time.monotonic()
        self.stopped = asyncio.Event()

    # -- one connection ------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        needs_token = self.token is not None and writer.get_extra_info("peername") not in ("", None)
        jobs: dict[Any, Any] = {}
        loop = asyncio.get_running_loop()
        outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        def post(message: dict[str, Any]) -> None:  # from the scheduler thread
            loop.call_soon_threadsafe(outbox.put_nowait, message)

        sender = asyncio.ensure_future(self._send_loop(writer, outbox))
        try:
            authorized = not needs_token
            while True:
                try:
                    message = await self._read(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                except ProtocolError as exc:  # too large: the stream cannot be resynced
                    outbox.put_nowait(_error(None, exc.code, str(exc)))
                    break
                if message is None:  # undecodable body, already framed: reply and go on
                    outbox.put_nowait(_error(None, "bad-request", "not a JSON object"))
                    continue
                request_id = message.get("id")
                if not authorized:
                    if message.get("op") == "hello" and self._token_ok(message.get("token")):
                        authorized = True
                    else:
                        outbox.put_nowait(_error(request_id, "unauthorized",
                                                 "this listener needs a token (hello.token)"))
                        break
                self.last_active = time.monotonic()
                try:
                    reply = self._dispatch(message, jobs, post)
                except ProtocolError as exc:
                    reply = _error(request_id, exc.code, str(exc))
                if reply is not None:
                    outbox.put_nowait(reply)
        finally:
            for job in jobs.values():  # the client is gone: its work is dropped
                self.scheduler.cancel(job)
            outbox.put_nowait(None)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await sender
            writer.close()
            self.connections -= 1
            self.last_active = time.monotonic()

    async def _read(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        header = await reader.readexactly(protocol.HEADER.size)
        (length,) = protocol.HEADER.unpack(header)
        protocol.check_length(length)
        body = await reader.readexactly(length)
        try:
            return protocol.decode(body)
        except ProtocolError:
            return None

    async def _send_loop(self, writer: asyncio.StreamWriter,
                         outbox: asyncio.Queue[dict[str, Any] | None]) -> None:
        while (message := await outbox.get()) is not None:
            try:
                writer.write(protocol.encode(message))
                await writer.drain()
            except (ConnectionError, ProtocolError):
                return

    def _token_ok(self, token: Any) -> bool:
        return isinstance(token, str) and self.token is not None and hmac.compare_digest(
            token.encode(), self.token.encode())

    # -- requests -----------------------------------------------------------------------

    def _dispatch(self, message: dict[str, Any], jobs: dict[Any, Any], post) -> dict | None:
        op, request_id = message.get("op"), message.get("id")
        if op == "hello":
            version = message.get("version", protocol.VERSION)
            if version != protocol.VERSION:
                raise ProtocolError("version", f"engine speaks protocol {protocol.VERSION}, "
                                    f"client {version}")
            return {"type": "hello", "id": request_id, "version": protocol.VERSION,
                    "model": self.name, "device": str(self.engine.device),
                    "family": self.engine.config.family, "pid": os.getpid()}
        if op == "ping":
            return {"type": "ok", "id": request_id}
        if op == "stats":
            return {"type": "ok", "id": request_id, "stats": self.scheduler.stats()}
        if op == "shutdown":
            asyncio.get_running_loop().call_soon(self.stopped.set)
            return {"type": "ok", "id": request_id}
        if op == "cancel":
            job = jobs.get(message.get("target"))
            if job is not None:
                self.scheduler.cancel(job)
            return {"type": "ok", "id": request_id}
        if op in ("infill", "rewrite"):
            if request_id in jobs:
                raise ProtocolError("bad-request", f"request id {request_id!r} is in use")
            job = _job(message, op)
            stream = bool(message.get("stream", False))

            def on_draft(draft: Draft) -> None:
                if draft.done:
                    jobs.pop(request_id, None)
                    post({"type": "result", "id": request_id,
                          "draft": protocol.draft_to_wire(draft)})
                elif stream:
                    post({"type": "draft", "id": request_id,
                          "draft": protocol.draft_to_wire(draft)})

            def on_error(code: str, text: str) -> None:
                jobs.pop(request_id, None)
                post(_error(request_id, code, text))

            job.on_draft, job.on_error = on_draft, on_error
            jobs[request_id] = job
            if not self.scheduler.submit(job):
                jobs.pop(request_id, None)
                raise ProtocolError("busy", "the engine's queue is full; try again")
            return None
        raise ProtocolError("unknown-op", f"unknown op {op!r}")

    async def idle_watch(self) -> None:
        while self.idle_exit > 0:
            await asyncio.sleep(min(5.0, self.idle_exit))
            idle = time.monotonic() - self.last_active
            busy = self.scheduler.stats()
            if self.connections == 0 and busy["live"] == 0 and idle >= self.idle_exit:
                self.stopped.set()
                return


def _error(request_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": request_id, "code": code, "message": message}


def _job(message: dict[str, Any], op: str) -> Any:
    from engine.scheduler import PRIORITIES, Job

    def field(name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = message.get(name, default)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise ProtocolError("bad-request", f"{name}: expected {kind}, got {value!r}")
        return value

    prefix, suffix = field("prefix", str, ""), field("suffix", str, "")
    max_tokens = field("max_tokens", int, 32)
    canvas_length = field("canvas_length", int, 256)
    if not 1 <= max_tokens <= 4096 or not 8 <= canvas_length <= 65536:
        raise ProtocolError("bad-request", "max_tokens or canvas_length out of range")
    priority = field("priority", str, "interactive")
    if priority not in PRIORITIES:
        raise ProtocolError("bad-request", f"priority must be one of {PRIORITIES}")
    settings = protocol.settings_from_wire(message.get("settings"))
    original, strength = None, 1.0
    if op == "rewrite":
        original = field("original", str)
        strength = float(field("strength", (int, float), 1.0))
        if not 0.0 <= strength <= 1.0:
            raise ProtocolError("bad-request", "strength must be in [0, 1]")
    return Job(prefix, suffix, max_tokens, settings, canvas_length, priority, original, strength)


# -- process ----------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="hold a model and serve dg-lsp and CLI clients")
    parser.add_argument("--model", default=None, help="checkpoint folder or hub id (default: "
                        "the bundled model)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto",
                        help="auto (masked models: int8 linear layers on the CPU; bfloat16 "
                        "on a GPU), int8, float32, bfloat16, float16")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the model (slow start; see the README)")
    parser.add_argument("--socket", type=Path, default=None,
                        help="Unix socket path (default: derived from model and device)")
    parser.add_argument("--listen", metavar="HOST:PORT", help="also listen on TCP (needs a token)")
    parser.add_argument("--token-file", type=Path, help="file holding the TCP token")
    parser.add_argument("--max-batch", type=int, default=8, help="requests denoised together")
    parser.add_argument("--max-queue", type=int, default=64, help="queued requests before busy")
    parser.add_argument("--idle-exit", type=float, default=DEFAULT_IDLE_EXIT,
                        help="exit after this many seconds with no client (0: never)")
    parser.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    endpoint = endpoint_for(args.model, args.device, args.dtype)
    if args.socket is not None:
        endpoint = Endpoint(args.socket)
    token = None
    if args.listen:
        if args.token_file is None:
            print("dg-engine serve: --listen needs --token-file", file=sys.stderr)
            return 2
        try:
            token = args.token_file.read_text().strip()
        except OSError as exc:
            print(f"dg-engine serve: cannot read the token: {exc}", file=sys.stderr)
            return 2
        if not token:
            print("dg-engine serve: the token file is empty", file=sys.stderr)
            return 2
    lock = endpoint.try_lock()
    if lock is None:
        # Another serve owns this model and device (or is still loading it).
        if endpoint.wait_alive(timeout=600):
            print(f"dg-engine: already serving {args.model or 'the bundled model'} on "
                  f"{args.device} at {endpoint.socket}", file=sys.stderr)
            return 0
        print(f"dg-engine: {endpoint.lock_path} is held but the engine does not answer",
              file=sys.stderr)
        return 1
    try:
        from engine import Engine
        from engine.scheduler import Scheduler

        print(f"dg-engine: loading {args.model or 'the bundled model'} ...", file=sys.stderr)
        try:
            engine = Engine.load(args.model, device=args.device, dtype=args.dtype,
                                 compile=args.compile)
        except Exception as exc:
            print(f"dg-engine: cannot load the model: {exc}", file=sys.stderr)
            return 1
        scheduler = Scheduler(engine, args.max_batch, args.max_queue)
        scheduler.start()
        name = args.model or "bundled"
        server = EngineServer(engine, scheduler, name, token, args.idle_exit)
        try:
            asyncio.run(_serve(server, endpoint, args.listen))
        finally:
            scheduler.stop()
        print("dg-engine: stopped", file=sys.stderr, flush=True)
    finally:
        lock.close()
    # The socket is gone and the lock released. Interpreter teardown with torch loaded takes
    # tens of seconds on a busy machine, and a restart waits on our exit: skip it.
    sys.stdout.flush()
    os._exit(0)


async def _serve(server: EngineServer, endpoint: Endpoint, listen: str | None) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stopped.set)
    endpoint.socket.unlink(missing_ok=True)  # stale: we hold the lock, so nobody serves it
    old_umask = os.umask(0o177)  # the socket is created 0600, never briefly wider
    try:
        unix = await asyncio.start_unix_server(server.handle, path=str(endpoint.socket),
                                               limit=protocol.MAX_MESSAGE + 16)
    finally:
        os.umask(old_umask)
    os.chmod(endpoint.socket, 0o600)
    servers = [unix]
    if listen:
        host, _, port = listen.rpartition(":")
        servers.append(await asyncio.start_server(server.handle, host or "127.0.0.1", int(port)))
    print(f"dg-engine: serving {server.name} on {server.engine.device} at {endpoint.socket}"
          + (f" and {listen}" if listen else ""), file=sys.stderr, flush=True)
    watch = asyncio.ensure_future(server.idle_watch())
    await server.stopped.wait()
    watch.cancel()
    for s in servers:
        s.close()
    endpoint.socket.unlink(missing_ok=True)
