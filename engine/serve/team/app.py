"""The engine as a Ray Serve application: one URL in front of several replicas of the model.

    Ingress (HTTP, token)  ──handle, DocumentAffinityRouter──▶  EngineReplica × N
                          ◀── StatusBoard ◀── every replica reports its queue and tokens/s

- `EngineReplica` holds one copy of the model (one GPU where the cluster has them, else CPUs)
  and its own batching scheduler (engine.serve.scheduler), exactly as `dg-engine serve` does
  on one machine; requests are admitted by the same code (engine.serve.admit): a wire message
  of POST /v1/stream by `stream`, a tool's typed request (engine.serve.http.api) by `serve`.
  A request that is cancelled upstream (the client disconnected or cancelled) raises
  CancelledError in its generator, which cancels the job: it leaves the batch at the next step.
- `Ingress` answers HTTP (engine.serve.team.remote describes the paths). It checks the token
  before anything else, in constant time, against a digest: the token itself is never stored
  in the application's config, which Ray keeps in its control store. It routes a request by
  `routing_key` (engine.serve.team.routing: the document the client names, else its prefix's
  start), and turns a replica lost mid-request into an "unavailable" error for that
  request alone: the client's next request goes to a live replica.
  It also answers OpenAI's and llama.cpp's completion paths (engine.serve.http.api, over a
  TeamBackend), routed the same way.
- `StatusBoard` keeps the latest report of each replica for `dg-engine status URL`, and
  counts the requests refused for their token (here and at engine.serve.team.front).

Replica count is fixed or autoscaled by Ray Serve on ongoing requests per replica (queued and
live in its scheduler): the queue length, averaged over `autoscale_window` seconds, aiming at
`max_batch` per replica; a replica is added after `upscale_delay` seconds above that and one
removed after `downscale_delay` seconds below (Ray Serve's defaults for a service: 5 s up,
120 s down, a 30 s window; shorter in the tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from ray import serve
from ray.serve.config import RequestRouterConfig
from starlette.requests import Request as HTTPRequest
from starlette.responses import JSONResponse, Response, StreamingResponse

from engine.serve import admit
from engine.serve.admit import Names, ProtocolError, Request
from engine.serve.http.api import ApiError, HttpApi, no_endpoint, tool_path
from engine.serve.limits import DEFAULT_REQUEST_TIMEOUT, Limits, free_memory
from engine.serve.socket import protocol
from engine.serve.team.remote import reply_line
from engine.serve.team.routing import prefix_key, routing_key
from engine.text.stops import completion_ids
from engine.types import Draft, InfillRequest

APP_NAME = "dg-engine"
REPORT_PERIOD = 1.0  # seconds between a replica's reports to the status board
RATE_WINDOW = 30.0  # seconds over which a replica's tokens/s is averaged
STALE_AFTER = 10.0  # seconds without a report before the board forgets a replica


@dataclass
class AppOptions:
    """What `dg-engine serve --ray` deploys."""

    model: str | None = None
    device: str = "auto"
    dtype: str = "auto"
    token_digest: str = ""  # token_digest(token)
    replicas: int = 1
    min_replicas: int | None = None  # both set: autoscaled between them
    max_replicas: int | None = None
    upscale_delay: float = 5.0  # seconds over the target before a replica is added
    downscale_delay: float = 120.0  # seconds under it before one is removed
    autoscale_window: float = 30.0  # seconds the ongoing requests are averaged over
    max_batch: int = 8
    max_queue: int = 64
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    gpus: float = 0.0  # per replica; 0: CPU replicas
    cpus: float = 1.0  # per CPU replica
    threads: int | None = None  # torch threads per CPU replica
    health_period: float = 5.0
    report_period: float = REPORT_PERIOD  # seconds between a replica's status reports
    extra: dict[str, Any] = field(default_factory=dict)


def token_digest(token: str) -> str:
    return admit.token_digest(token).hex()


def _replica_id() -> str:
    return serve.get_replica_context().replica_id.unique_id


# Every replica reports every REPORT_PERIOD: an access log line each would bury the others.
@serve.deployment(num_replicas=1, max_ongoing_requests=1000, ray_actor_options={"num_cpus": 0},
                  logging_config={"enable_access_log": False})
class StatusBoard:
    def __init__(self) -> None:
        self.reports: dict[str, dict[str, Any]] = {}
        self.refused = 0  # requests turned away without a valid token, front and ingress

    def refuse(self) -> None:
        self.refused += 1

    def refusals(self) -> int:
        return self.refused

    def report(self, replica: str, state: dict[str, Any]) -> None:
        self.reports[replica] = state | {"reportedAt": time.time()}

    def snapshot(self) -> list[dict[str, Any]]:
        now = time.time()
        for replica in [r for r, s in self.reports.items() if now - s["reportedAt"] > STALE_AFTER]:
            del self.reports[replica]  # gone: Ray has replaced or removed it
        return [{"replica": r} | s for r, s in sorted(self.reports.items())]


class EngineReplica:
    """One model and its scheduler (made a deployment by `build_app`)."""

    _clock = staticmethod(time.monotonic)

    async def __init__(self, options: AppOptions, board: Any) -> None:
        import torch

        from engine import Engine
        from engine.serve.scheduler import Scheduler

        def load() -> Engine:
            if not options.gpus and not options.threads:
                # At most the CPUs Ray reserved for this replica, not the machine's: replicas
                # share a node. Fewer while other processes keep cores busy (engine.threads).
                torch.set_num_threads(max(1, round(options.cpus)))
            return Engine.load(options.model, device=options.device, dtype=options.dtype,
                               threads=options.threads)

        self.scheduler = Scheduler.loading(load, options.max_batch, options.max_queue)
        self.engine = self.scheduler.engine
        self.name = options.model or "bundled"
        budget = free_memory(self.engine.device) // 4
        self.limits = Limits(self.engine.config.max_position_embeddings, budget,
                             options.request_timeout)
        self.replica = _replica_id()
        self.board = board
        self.report_period = options.report_period
        self._reporter = asyncio.ensure_future(self._report_loop())

    def hello(self, key: str = "") -> dict[str, Any]:
        return {"type": "hello", "version": protocol.VERSION, "model": self.name,
                "device": str(self.engine.device), "family": self.engine.config.family,
                "replica": self.replica,
                "completion_ends": sorted(self.engine.completion_ends()),
                "limits": {"maxCanvas": self.limits.max_canvas,
                           "requestTimeout": self.limits.request_timeout}}

    async def stream(self, key: str, message: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The drafts of a POST /v1/stream request as protocol messages (the last a "result"
        or an "error"); `key` is read by the router, not here."""
        request_id = message.get("id")
        try:
            request = admit.parse(message, str(message.get("op")))
            job = admit.admit(request, message.get("priority", "interactive"), self.limits,
                              self.engine.decoder)
            async with contextlib.aclosing(self._run(job)) as drafts:  # closed: job cancelled
                async for draft in drafts:
                    yield {**protocol.draft_message("result" if draft.done else "draft",
                                                    request_id, draft), "replica": self.replica}
        except ProtocolError as exc:
            yield _error(request_id, exc.code, str(exc))

    async def serve(self, key: str, request: Request, names: Names
                    ) -> AsyncIterator[Draft | ProtocolError]:
        """The drafts of a tool's request (engine.serve.http.api, over TeamBackend), typed, or
        the ProtocolError that refused or failed it, its errors naming the fields as `names`
        do; `key` is read by the router, not here."""
        try:
            job = admit.admit(request, "interactive", self.limits, self.engine.decoder, names)
            async with contextlib.aclosing(self._run(job)) as drafts:  # closed: job cancelled
                async for draft in drafts:
                    yield draft
        except ProtocolError as exc:
            yield exc

    async def _run(self, job: Any) -> AsyncIterator[Draft]:
        """`job`'s drafts as the scheduler makes them; ProtocolError when the queue is full or
        the job fails. Leaving before the last draft (cancelled upstream, the client gone)
        cancels the job."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Draft | ProtocolError] = asyncio.Queue()
        admit.schedule(self.scheduler, job,
                       lambda draft: loop.call_soon_threadsafe(inbox.put_nowait, draft),
                       lambda code, text: loop.call_soon_threadsafe(
                           inbox.put_nowait, ProtocolError(code, text)), who="replica")
        finished = False
        try:
            while not finished:
                item = await inbox.get()
                finished = isinstance(item, ProtocolError) or item.done
                if isinstance(item, ProtocolError):
                    raise item
                yield item
        finally:
            if not finished:
                self.scheduler.cancel(job)

    def stats(self, key: str = "") -> dict[str, Any]:
        return self.scheduler.stats()

    def check_health(self) -> None:
        """Ray Serve replaces a replica whose check raises: here, one whose scheduler thread
        died, or has had live requests and finished no round for longer than a request may
        take (a wedged device): either would accept requests and never answer them."""
        thread = self.scheduler._thread
        if thread is None or not thread.is_alive():
            raise RuntimeError("the scheduler thread is not running")
        stats = self.scheduler.stats()
        now = self._clock()
        progress = (stats["rounds"], stats["completed"])
        if stats["live"] == 0 or progress != getattr(self, "_progress", None):
            self._progress, self._progress_at = progress, now
        elif now - self._progress_at > 2 * self.limits.request_timeout:
            raise RuntimeError(f"no scheduler round for {now - self._progress_at:.0f} s "
                               f"with {stats['live']} live requests")

    async def _report_loop(self) -> None:
        samples: deque[tuple[float, int]] = deque([(time.monotonic(), 0)])
        while True:
            await asyncio.sleep(self.report_period)
            stats = self.scheduler.stats()
            now, positions = time.monotonic(), stats["positionsCommitted"]
            samples.append((now, positions))
            while now - samples[0][0] > RATE_WINDOW:
                samples.popleft()
            then, before = samples[0]
            rate = (positions - before) / max(now - then, self.report_period)
            state = {"model": self.name, "device": str(self.engine.device),
                     "family": self.engine.config.family, "tokensPerSecond": round(rate, 1),
                     "pid": os.getpid()} | stats
            with contextlib.suppress(Exception):  # the board restarting must not stop us
                await self.board.report.remote(self.replica, state)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._reporter.cancel()
            self.scheduler.stop()


class Ingress:
    """The application's HTTP face (made a deployment by `build_app`)."""

    def __init__(self, engines: Any, board: Any, token_digest_hex: str) -> None:
        if not token_digest_hex:
            raise ValueError("the ingress needs a token")
        self.engines = engines
        self.board = board
        self.digest = bytes.fromhex(token_digest_hex)
        self.api = HttpApi(TeamBackend(engines), None)  # the token is checked here

    def _authorized(self, header: str | None) -> bool:
        return admit.bearer_authorised(header, self.digest)

    async def __call__(self, request: HTTPRequest) -> Response:
        if not self._authorized(request.headers.get("authorization")):
            self.board.refuse.remote()  # counted on the board, with the front's
            message = "this engine needs the team's token (Authorization: Bearer)"
            if tool_path(request.url.path):  # the tools read OpenAI's error object
                return ApiError(401, message, None, "invalid_api_key").response()
            return JSONResponse(_error(None, "unauthorized", message), status_code=401)
        if handler := self.api.endpoint(request.method, request.url.path):
            return await handler(request)
        if tool_path(request.url.path):  # one of the tools' paths, asked with another method
            return no_endpoint(request.method, request.url.path).response()
        path = request.url.path.rstrip("/").rsplit("/v1/", 1)[-1]
        if request.method == "GET" and path == "hello":
            hello = await self.engines.hello.remote("")
            hello["replicas"] = len(await self.board.snapshot.remote())
            return JSONResponse(hello)
        if request.method == "GET" and path == "status":
            return JSONResponse({"type": "ok", "replicas": await self.board.snapshot.remote(),
                                 "refused": await self.board.refusals.remote()})
        if request.method == "POST" and path == "stream":
            return await self._stream(request)
        return JSONResponse(_error(None, "unknown-op", f"no such path {request.url.path!r:.80}"),
                            status_code=404)

    async def _stream(self, request: HTTPRequest) -> Response:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > protocol.MAX_MESSAGE:
                return JSONResponse(_error(None, "too-large", "request over "
                                           f"{protocol.MAX_MESSAGE} bytes"), status_code=413)
        try:
            message = protocol.decode(bytes(body))
            request_id = protocol.request_id(message)
        except protocol.ProtocolError as exc:
            return JSONResponse(_error(None, exc.code, str(exc)), status_code=400)
        if message.get("op") not in ("infill", "rewrite", "holes"):
            return JSONResponse(_error(request_id, "unknown-op", "POST /v1/stream takes an "
                                       "infill, rewrite or holes request"), status_code=400)
        drafts = self.engines.options(stream=True).stream.remote(routing_key(message), message)
        return StreamingResponse(self._lines(drafts, request_id),
                                 media_type="application/x-ndjson")

    async def _lines(self, drafts: Any, request_id: Any) -> AsyncIterator[bytes]:
        try:
            async for message in drafts:
                yield reply_line(message)
        except asyncio.CancelledError:
            raise  # the client went away: Serve cancels the replica's request with ours
        except Exception as exc:  # noqa: BLE001 - the replica died or was removed mid-request
            yield reply_line(_error(request_id, "unavailable", "the replica serving this "
                                    f"request was lost ({type(exc).__name__}); try again"))
        finally:
            drafts.cancel()  # a no-op once the replica's generator has finished


class TeamBackend:
    """The replicas, for engine.serve.http.api's endpoints (OpenAI's and llama.cpp's): each
    request goes to a replica as a POST /v1/stream one does, routed the same way."""

    def __init__(self, engines: Any) -> None:
        self.engines = engines
        self.info: dict[str, Any] | None = None
        self.started = int(time.time())

    async def hello(self) -> dict[str, Any]:
        if self.info is None:  # every replica loads the same model
            hello = await self.engines.hello.remote("")
            self.info = {"name": hello["model"], "started": self.started,
                         "maxCanvas": hello["limits"]["maxCanvas"],
                         "family": hello["family"], "ends": set(hello["completion_ends"])}
        return self.info

    def tokens(self, draft: Draft) -> int:
        return len(completion_ids(draft.token_ids, self.info["ends"]))

    async def submit(self, request: InfillRequest, names: Names) -> AsyncIterator[Draft]:
        replies = self.engines.options(stream=True).serve.remote(prefix_key(request.prefix),
                                                                 request, names)
        try:
            first = await replies.__anext__()
        except Exception as exc:  # noqa: BLE001 - no replica could take it
            replies.cancel()
            raise ProtocolError("busy", f"no replica answered ({type(exc).__name__}); try "
                                "again") from None
        if isinstance(first, ProtocolError):
            replies.cancel()
            raise first
        return self._drafts(first, replies)

    @staticmethod
    async def _drafts(reply: Draft | ProtocolError, replies: Any) -> AsyncIterator[Draft]:
        try:
            while True:
                if isinstance(reply, ProtocolError):
                    raise ApiError(500, str(reply), None, reply.code, "server_error")
                yield reply
                if reply.done:
                    return
                try:
                    reply = await replies.__anext__()
                except StopAsyncIteration:
                    return
                except Exception as exc:  # noqa: BLE001 - the replica was lost mid-request
                    raise ApiError(503, "the replica serving this request was lost "
                                   f"({type(exc).__name__}); try again", None, "unavailable",
                                   "server_error") from None
        finally:
            replies.cancel()  # the client went away or a stop string: the job leaves its batch


def _error(request_id: Any, code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "id": request_id, "code": code, "message": message}


def autoscaling_config(options: AppOptions) -> dict[str, Any]:
    """Ray Serve's autoscaling config for `options` (min_replicas and max_replicas set)."""
    config: dict[str, Any] = {
        "min_replicas": options.min_replicas, "max_replicas": options.max_replicas,
        "initial_replicas": max(options.min_replicas or 0, 1),
        # Ongoing requests per replica: its scheduler's queue and live batch.
        "target_ongoing_requests": options.max_batch,
        "upscale_delay_s": options.upscale_delay, "downscale_delay_s": options.downscale_delay,
        "look_back_period_s": options.autoscale_window}
    if options.autoscale_window <= 10.0:
        # Serve's metrics are pushed every 10 s by default, and must come more often than the
        # window; the field is deprecated (an environment variable will replace it), so only a
        # short window sets it.
        config["metrics_interval_s"] = options.autoscale_window / 4
    return config


def build_app(options: AppOptions) -> Any:
    """The Serve application for `options` (serve.run it)."""
    if options.gpus:
        actor = {"num_gpus": options.gpus, "num_cpus": 1}
    else:
        actor = {"num_cpus": options.cpus}
    scaling: dict[str, Any]
    if options.min_replicas is not None and options.max_replicas is not None:
        scaling = {"autoscaling_config": autoscaling_config(options)}
    else:
        scaling = {"num_replicas": options.replicas}
    replica = serve.deployment(
        EngineReplica, name="EngineReplica", ray_actor_options=actor,
        # Past a full batch and a queue behind it, the router tries another replica.
        max_ongoing_requests=2 * options.max_batch,
        health_check_period_s=options.health_period,
        request_router_config=RequestRouterConfig(
            request_router_class="engine.serve.team.router.DocumentAffinityRouter",
            request_router_kwargs={"imbalance": options.max_batch}),
        **scaling)
    ingress = serve.deployment(Ingress, name="Ingress", num_replicas=1,
                               max_ongoing_requests=10_000, ray_actor_options={"num_cpus": 0})
    board = StatusBoard.bind()
    return ingress.bind(replica.bind(options, board), board, options.token_digest)
