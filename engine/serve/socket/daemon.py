"""`dg-engine serve`: one long-lived process holds the model; editors and CLIs connect to it.

The socket lives in the user's runtime directory (engine.serve.socket.endpoint), mode 0600,
and a Unix connection from another uid is closed before its first byte is read (root may connect: it
can read this user's memory anyway). A second `serve` for the same model and device finds
the first one (it holds `<socket>.lock` for its whole life) and exits, telling where the
running engine is. `--listen HOST:PORT` adds a TCP listener that requires a token on every
connection: the token file must be private (mode 0600), a peer must send it in a small first
message within AUTH_TIMEOUT seconds, and the token travels in clear (docs/security.md, "The TCP
listener", says how to add TLS).
The wire format is engine.serve.socket.protocol.

No request holds the engine hostage: its canvas must fit the model's positions and the
per-request memory budget, it ends at its deadline (`--request-timeout`), and large or batch
work yields to interactive requests (engine.serve.scheduler). Connections are capped
(`--max-connections`).

Connections are served by asyncio on the main thread; the model runs on the scheduler's
thread (engine.serve.scheduler). A connection that closes has every request it made cancelled.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from engine.serve import admit
from engine.serve.limits import DEFAULT_REQUEST_TIMEOUT, Limits, free_memory
from engine.serve.socket import protocol
from engine.serve.socket.endpoint import Endpoint, peer_credentials
from engine.serve.socket.protocol import ProtocolError
from engine.serve.token import read_token
from engine.types import Draft

DEFAULT_IDLE_EXIT = 0  # seconds without a connection before exiting; 0 = never
DEFAULT_MAX_CONNECTIONS = 64  # a language server holds one per request in flight
AUTH_TIMEOUT = 10.0  # seconds a TCP peer has to authenticate


class EngineServer:
    def __init__(self, engine: Any, scheduler: Any, name: str, token: str | None = None,
                 idle_exit: float = DEFAULT_IDLE_EXIT, limits: Limits | None = None,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.name = name
        self.token = token
        self.digest = admit.token_digest(token) if token is not None else None
        self.idle_exit = idle_exit
        self.limits = limits or Limits(engine.config.max_position_embeddings, 1 << 30,
                                       DEFAULT_REQUEST_TIMEOUT)
        self.max_connections = max_connections
        self.connections = 0
        self.last_active = time.monotonic()
        self.stopped = asyncio.Event()

    # -- one connection ------------------------------------------------------------------

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        unix = sock is not None and sock.family == socket.AF_UNIX
        if unix and not _same_user(sock):
            writer.close()  # another user's process: not a byte read or written
            return
        if self.connections >= self.max_connections:
            writer.write(protocol.encode(_error(None, "busy", f"the engine serves at most "
                                                f"{self.max_connections} connections")))
            writer.close()
            return
        self.connections += 1
        needs_token = self.token is not None and not unix
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
                    if authorized:
                        message = await self._read(reader, protocol.MAX_MESSAGE)
                    else:
                        # Nothing big is read, and nobody waits long, before the token.
                        message = await asyncio.wait_for(
                            self._read(reader, protocol.MAX_UNAUTHENTICATED), AUTH_TIMEOUT)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                except asyncio.CancelledError:
                    # The engine is stopping. Ending quietly: asyncio (3.11) logs a traceback
                    # for a connection task that ends cancelled.
                    break
                except TimeoutError:
                    outbox.put_nowait(_error(None, "unauthorized", "no token in time"))
                    break
                except ProtocolError as exc:  # too large: the stream cannot be resynced
                    code = exc.code if authorized else "unauthorized"
                    outbox.put_nowait(_error(None, code, str(exc)))
                    break
                reply = self._reply(message, jobs, post, authorized)
                if not authorized:
                    if reply is None or reply.get("type") != "hello":
                        outbox.put_nowait(reply or _error(None, "unauthorized", "no token"))
                        break
                    authorized = True
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

    def _reply(self, message: dict[str, Any] | ProtocolError, jobs: dict[Any, Any], post,
               authorized: bool) -> dict[str, Any] | None:
        """The reply to one decoded frame (None: replies come later, from the scheduler)."""
        if isinstance(message, ProtocolError):  # not a JSON object, already framed
            return _error(None, message.code, str(message))
        try:
            request_id = protocol.request_id(message)
        except ProtocolError as exc:
            return _error(None, exc.code, str(exc))
        if not authorized and not (message.get("op") == "hello"
                                   and admit.authorised(message.get("token"), self.digest)):
            return _error(request_id, "unauthorized", "this listener needs a token "
                          "(hello.token)")
        self.last_active = time.monotonic()
        try:
            return self._dispatch(message, jobs, post)
        except ProtocolError as exc:
            return _error(request_id, exc.code, str(exc))
        except Exception as exc:  # a bug must cost one request, not the connection
            print(f"dg-engine: {type(exc).__name__} on a request: {exc}", file=sys.stderr,
                  flush=True)
            return _error(request_id, "failed", f"{type(exc).__name__}: {exc}")

    async def _read(self, reader: asyncio.StreamReader, limit: int
                    ) -> dict[str, Any] | ProtocolError:
        """The next frame's object, or the ProtocolError that it is not one (the stream is
        still in sync); ProtocolError raised when the frame is longer than `limit`."""
        header = await reader.readexactly(protocol.HEADER.size)
        (length,) = protocol.HEADER.unpack(header)
        protocol.check_length(length, limit)
        body = await reader.readexactly(length)
        try:
            return protocol.decode(body)
        except ProtocolError as exc:
            return exc

    async def _send_loop(self, writer: asyncio.StreamWriter,
                         outbox: asyncio.Queue[dict[str, Any] | None]) -> None:
        while (message := await outbox.get()) is not None:
            try:
                data = protocol.encode(message)
            except ProtocolError as exc:  # a reply that is not strict JSON: say so instead
                data = protocol.encode(_error(message.get("id"), exc.code, str(exc)))
            try:
                writer.write(data)
                await writer.drain()
            except ConnectionError:
                return

    # -- requests -----------------------------------------------------------------------

    def _dispatch(self, message: dict[str, Any], jobs: dict[Any, Any], post) -> dict | None:
        op, request_id = message.get("op"), message.get("id")
        if op == "hello":
            version = message.get("version", protocol.VERSION)  # none named: this one's
            if version != protocol.VERSION:
                return self._other_version(request_id, version)
            return {"type": "hello", "id": request_id, "version": protocol.VERSION,
                    "model": self.name, "device": str(self.engine.device),
                    "family": self.engine.config.family, "pid": os.getpid(),
                    "completion_ends": sorted(self.engine.completion_ends()),
                    "limits": {"maxCanvas": self.limits.max_canvas,
                               "requestTimeout": self.limits.request_timeout}}
        if op == "ping":
            return {"type": "ok", "id": request_id}
        if op == "stats":
            return {"type": "ok", "id": request_id, "stats": self.scheduler.stats()}
        if op == "shutdown":
            asyncio.get_running_loop().call_soon(self.stopped.set)
            return {"type": "ok", "id": request_id}
        if op == "cancel":
            job = jobs.get(protocol.request_id(message, "target"))
            if job is not None:
                self.scheduler.cancel(job)
            return {"type": "ok", "id": request_id}
        if op in ("infill", "rewrite", "holes"):
            if request_id in jobs:
                raise ProtocolError("bad-request", f"request id {request_id!r} is in use")
            request = admit.parse(message, op)
            job = admit.admit(request, message.get("priority", "interactive"), self.limits,
                              self.engine.decoder)
            stream = bool(message.get("stream", False))

            def on_draft(draft: Draft) -> None:
                if draft.done:
                    jobs.pop(request_id, None)
                    post(protocol.draft_message("result", request_id, draft))
                elif stream:
                    post(protocol.draft_message("draft", request_id, draft))

            def on_error(code: str, text: str) -> None:
                jobs.pop(request_id, None)
                post(_error(request_id, code, text))

            jobs[request_id] = job
            try:
                admit.schedule(self.scheduler, job, on_draft, on_error)
            except ProtocolError:
                jobs.pop(request_id, None)
                raise
            return None
        raise ProtocolError("unknown-op", f"unknown op {op!r:.60}")

    def _other_version(self, request_id: Any, version: Any) -> dict[str, Any]:
        """The refusal of a client of another protocol version, with this engine's."""
        remedy = ("restart the client (your editor's language server, or the command) from "
                  f"this engine's install, or stop this engine (kill {os.getpid()}) and let "
                  "the client start its own")
        text = protocol.other_version(protocol.VERSION, version, remedy)
        return _error(request_id, "version", text) | {"version": protocol.VERSION}

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


def _same_user(sock: Any) -> bool:
    """Whether the Unix peer runs as this user or as root (who can read our memory anyway)."""
    try:
        _, uid, _ = peer_credentials(sock)
    except OSError:
        return False
    return uid in (os.getuid(), 0)


# -- process ----------------------------------------------------------------------------------


def serve_endpoint(args: argparse.Namespace, endpoint: Endpoint) -> int:
    """Hold the model and serve `endpoint` (and --listen) until idle or stopped."""
    token = None
    http = getattr(args, "http", None)
    http_tls = None
    if http:
        from engine.serve.http.listen import http_problem, loopback, parse_listen
        from engine.serve.team.command import tls_context

        cert, key = getattr(args, "tls_cert", None), getattr(args, "tls_key", None)
        try:
            http_tls = (cert, key) if tls_context(cert, key) else None  # loads: checked now
        except ValueError as exc:
            print(f"dg-engine serve: {exc}", file=sys.stderr)
            return 2
        if problem := http_problem(http, args.token_file is not None, http_tls is not None,
                                   getattr(args, "allow_http_without_tls", False)):
            print(f"dg-engine serve: {problem}", file=sys.stderr)
            return 2
        if not loopback(parse_listen(http)[0]) and http_tls is None:
            print(f"dg-engine serve: warning: --http {http} takes the token and the code in "
                  "clear (--allow-http-without-tls): TLS must be done in front of it "
                  "(docs/security.md)", file=sys.stderr)
    if args.listen or (http and args.token_file is not None):
        if args.token_file is None:
            print("dg-engine serve: --listen needs --token-file", file=sys.stderr)
            return 2
        try:
            token = read_token(args.token_file)
        except ValueError as exc:
            print(f"dg-engine serve: {exc}", file=sys.stderr)
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
        from engine.serve.scheduler import LARGE_CANVAS, Scheduler

        print(f"dg-engine: loading {args.model or 'the bundled model'} ...", file=sys.stderr)

        def load() -> Engine:
            return Engine.load(args.model, device=args.device, dtype=args.dtype,
                               compile=args.compile, threads=args.threads)

        try:
            scheduler = Scheduler.loading(load, args.max_batch, args.max_queue,
                                          args.large_canvas or LARGE_CANVAS)
        except Exception as exc:
            print(f"dg-engine: cannot load the model: {exc}", file=sys.stderr)
            return 1
        engine = scheduler.engine
        name = args.model or "bundled"
        budget = args.max_request_mb << 20 or free_memory(engine.device) // 4
        limits = Limits(engine.config.max_position_embeddings, budget, args.request_timeout)
        server = EngineServer(engine, scheduler, name, token, args.idle_exit, limits,
                              args.max_connections)
        try:
            asyncio.run(_serve(server, endpoint, args.listen, http, http_tls))
        finally:
            scheduler.stop()
        print("dg-engine: stopped", file=sys.stderr, flush=True)
    finally:
        lock.close()
    # The socket is gone and the lock released. Interpreter teardown with torch loaded takes
    # tens of seconds on a busy machine, and a restart waits on our exit: skip it.
    sys.stdout.flush()
    os._exit(0)


async def _serve(server: EngineServer, endpoint: Endpoint, listen: str | None,
                 http: str | None = None, http_tls: tuple[Path, Path] | None = None) -> None:
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
    web = web_task = None
    if http:
        from engine.serve.http.listen import http_server

        web = http_server(server, http, http_tls)
        web_task = asyncio.ensure_future(web.serve())
        while not web.started and not web_task.done():
            await asyncio.sleep(0.05)
        if web_task.done():  # the port is taken: uvicorn said so
            web_task.result()
            raise OSError(f"cannot listen on {http}")
    scheme = "https" if http_tls else "http"
    print(f"dg-engine: serving {server.name} on {server.engine.device} at {endpoint.socket}"
          + (f" and {listen}" if listen else "") + (f" and {scheme}://{http}" if http else ""),
          file=sys.stderr, flush=True)
    watch = asyncio.ensure_future(server.idle_watch())
    await server.stopped.wait()
    watch.cancel()
    if web is not None:
        web.should_exit = True
        await web_task
    for s in servers:
        s.close()
    endpoint.socket.unlink(missing_ok=True)
