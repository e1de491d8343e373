"""`dg-engine serve --http HOST:PORT`: the completion APIs other tools already speak.

    POST /v1/completions   OpenAI's legacy completions: prompt + suffix is the canvas (FIM)
    GET  /v1/models        the loaded model
    POST /infill           llama.cpp's server: input_prefix, input_suffix, input_extra, prompt

OpenAI clients that send the suffix as a field (Continue's `llamastack` provider, the `openai`
package) call the first; llama.vim and llama.vscode the last. Where there is no suffix, a
prompt written in a code model's FIM template (twinny, Continue's `openai` provider) is split
back into prefix and suffix (engine.serve.http.fim_templates). The port itself (where it may
listen, TLS, its deadlines) is engine.serve.http.listen's.
A body becomes the engine's typed request here (its fields checked by engine.serve.admit,
whose errors name this API's fields: `COMPLETIONS` and `INFILL`), then the same scheduler Sequence
the Unix socket's requests become (engine.serve.admit.admit: same bounds and deadline), in the
same process, so editors and HTTP tools batch together (LocalBackend); the team engine's
Ingress serves the same endpoints over its replicas (engine.serve.team.app.TeamBackend).
A client that disconnects cancels its denoising.

Streamed, an answer comes as it settles: each piece is text no later draft of the request can
change (`settled_text`), the rest comes with the end, and the pieces add up to the answer the
same drafts make unstreamed (`answer_pieces` makes both).

Errors are OpenAI's error object (`{"error": {"message", "type", "param", "code"}}`) on
every path and every status, llama.cpp's clients read it too (engine.serve.http.listen has the
statuses uvicorn answers itself). With a token (--token-file), every path wants
`Authorization: Bearer <token>`, checked in constant time before the body is read: OpenAI
clients send their API key there. The diffusion specifics ride in a `dg` field of the
answer (the last chunk when streamed) that clients ignore: forward passes, tokens per
pass, the least confident token's confidence, the engine's finish reason, the request
fields that were accepted but have no effect here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from engine.serve import admit
from engine.serve.admit import Names, ProtocolError
from engine.serve.http.fim_templates import split_fim
from engine.serve.socket import protocol
from engine.text.canvas import other_file_snippet
from engine.types import CANVAS_LENGTH, Draft, InfillRequest

MAX_BODY_BYTES = protocol.MAX_MESSAGE
HEADER_TIMEOUT = 10.0  # seconds to send a request head, on a new or a kept-alive connection
BODY_TIMEOUT = 10.0  # seconds to send the body once the head is in
MAX_HEADER_BYTES = 16 * 1024  # a request head: the request line and every header together
OPENAI_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
LLAMA_N_PREDICT = 32  # the engine's default hole where llama.cpp's n_predict is -1 (unbounded)
# Fields of each API that clients send and that change nothing here (llama.vim sends them
# all; llama.vscode asks for n_cmpl completions, and gets one).
OPENAI_IGNORED = ("top_p", "frequency_penalty", "presence_penalty", "logprobs", "echo",
                  "best_of", "logit_bias", "user", "stream_options")
LLAMA_IGNORED = ("top_p", "top_k", "min_p", "samplers", "n_indent", "cache_prompt",
                 "t_max_prompt_ms", "t_max_predict_ms", "id_slot", "response_fields", "n_cmpl")
# How each API's users write the request's fields, for the errors that name them: the canvas is
# sized from the hole, so its limits are the hole's; a sampler setting is one of `dg_settings`,
# but for the two both APIs take as fields of their own.
_SETTINGS = {"settings": "dg_settings"}
COMPLETIONS = Names({"prefix": "prompt", "suffix": "suffix", "max_tokens": "max_tokens",
                     "canvas_length": "max_tokens"} | _SETTINGS, "dg_settings.",
                    ("temperature", "seed"))
INFILL = Names({"prefix": "input_prefix", "suffix": "input_suffix", "max_tokens": "n_predict",
                "canvas_length": "n_predict"} | _SETTINGS, "dg_settings.", ("temperature", "seed"))
# Line-comment markers by file extension, for input_extra's snippets; others get "//".
HASH_COMMENTS = {"py", "pyi", "rb", "sh", "bash", "zsh", "pl", "r", "jl", "toml", "yaml", "yml",
                 "cmake", "nim", "ex", "exs", "ps1", "tf", "mk"}
DASH_COMMENTS = {"sql", "lua", "hs", "elm", "ada"}


class ApiError(Exception):
    """A request answered with OpenAI's error object and `status`."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 code: str | None = None, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind
        self.headers = headers

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), self.status, self.headers)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param,
                          "code": self.code}}


# The paths and the HttpApi method serving each.
ROUTES = {("POST", "/v1/completions"): "completions", ("POST", "/completions"): "completions",
          ("GET", "/v1/models"): "models", ("POST", "/infill"): "infill"}


def tool_path(target: str) -> bool:
    """Whether `target` (a request's path, a query ignored) is one of these APIs': the team
    engine's front and Ingress then refuse it with OpenAI's error object too."""
    path = target.split("?", 1)[0].rstrip("/") or "/"
    return any(path == known for _, known in ROUTES)


def no_endpoint(method: str, path: str) -> ApiError:
    """The refusal of `method path` where no endpoint serves it: 405 naming the methods the
    path takes where it is one of these APIs', else 404."""
    key = path.split("?", 1)[0].rstrip("/") or "/"
    allowed = ", ".join(sorted(m for m, known in ROUTES if known == key))
    shown = f"{method} {path}"[:100]
    if allowed:
        return ApiError(405, f"{shown}: this path takes {allowed}", None,
                        "method_not_allowed", headers={"Allow": allowed})
    endpoints = ", ".join(f"{m} {known}" for m, known in ROUTES)
    return ApiError(404, f"{shown}: no such endpoint (this engine serves {endpoints})", None,
                    "not_found")


def snippets(extra: list[dict[str, str]]) -> str:
    """llama.cpp's input_extra as context ahead of the prefix: each chunk commented out under
    the file it came from, as the language server writes other files' windows."""
    parts = []
    for chunk in extra:
        name, text = chunk.get("filename", ""), chunk.get("text", "")
        if not text.strip():
            continue
        ext = name.rpartition(".")[2].lower()
        comment = "#" if ext in HASH_COMMENTS else "--" if ext in DASH_COMMENTS else "//"
        parts.append(other_file_snippet(name, text, comment))
    return "".join(parts)


def visible(text: str, stops: list[str]) -> tuple[str, bool]:
    """`text` cut at the first stop string, and whether one was there."""
    cut = min((i for i in (text.find(s) for s in stops) if i >= 0), default=-1)
    if cut >= 0:
        return text[:cut], True
    return text, False


def _held_back(text: str, stops: list[str]) -> str:
    """`text` less a tail that may still grow into a stop string."""
    keep = len(text)
    for stop in stops:
        for n in range(min(len(stop) - 1, len(text)), 0, -1):
            if text.endswith(stop[:n]):
                keep = min(keep, len(text) - n)
                break
    return text[:keep]


# The families whose drafts hold committed tokens only, which no later step changes: the masked
# family's text is its committed tokens up to the first gap (engine.decode.denoise; DreamOn's
# edits of committed expand and stop tokens happen before the draft is taken), the AR
# baseline's every token it wrote. The block family's drafts hold the argmax of positions its
# next step samples again (engine.models.block), so none of its text is settled before the end.
STEADY_FAMILIES = ("masked", "ar")


def settled_text(draft: Draft, family: str) -> str:
    """The part of `draft`'s text that no later draft of its request changes: the whole text
    once it is the last; else, for a family in STEADY_FAMILIES, its text less a trailing
    multi-byte character whose bytes are not all in (decoded as U+FFFD); else nothing."""
    if draft.done:
        return draft.text
    if family in STEADY_FAMILIES:
        return draft.text.rstrip("\ufffd")
    return ""


async def answer_pieces(drafts: AsyncIterator[Draft], stops: list[str], family: str
                        ) -> AsyncIterator[tuple[str, Draft | None, bool]]:
    """A request's answer as it settles: (text, None, False) pieces, each text no later draft
    can change (nor a stop string cut), then ("", the last draft, whether a stop string ended
    it). The texts add up to the answer: the text of the last draft (the done one, or the
    first whose settled text holds a stop string) cut at the first stop string. Stop strings
    are looked for in settled text only: text that may still change holds no stop.

    Both the streamed and the whole answer are made of these pieces: a client cannot take text
    back, so it is sent only once settled. Should a draft contradict what was sent (a family in
    STEADY_FAMILIES whose text changed after all), the request fails, whole or streamed, rather
    than answer text that does not add up."""
    sent = ""
    async with contextlib.aclosing(drafts):
        async for draft in drafts:
            text, stopped = visible(settled_text(draft, family), stops)
            last = draft.done or stopped
            if not last:
                text = _held_back(text, stops)
            if not text.startswith(sent):
                raise ApiError(500, "the engine changed text it had settled", None,
                               "unsettled", "server_error")
            if len(text) > len(sent):
                yield text[len(sent):], None, False
                sent = text
            if last:
                yield "", draft, stopped
                return
    raise ApiError(500, "the engine's answer ended before its last draft", None, "incomplete",
                   "server_error")


class Field:
    """Typed reads of one JSON body's fields, each failure a 400 naming the field."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body

    def get(self, name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = self.body.get(name, default)
        if value is None:
            return default
        if not isinstance(value, kind) or isinstance(value, bool) and kind not in (bool,):
            names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
            raise ApiError(400, f"{name}: expected {names}, got {json.dumps(value)[:60]}", name,
                           "invalid_type")
        return value

    def stops(self, name: str = "stop") -> list[str]:
        value = self.get(name, (str, list), [])
        value = [value] if isinstance(value, str) else value
        if not all(isinstance(s, str) and s for s in value) or len(value) > 16:
            raise ApiError(400, f"{name}: at most 16 non-empty strings", name, "invalid_value")
        return value

    def ignored(self, names: tuple[str, ...]) -> list[str]:
        return [name for name in names if name in self.body]


class Backend(Protocol):
    """What the endpoints need of an engine: one in this process (LocalBackend) or the team
    engine's replicas (engine.serve.team.app.TeamBackend)."""

    async def hello(self) -> dict[str, Any]:
        """{"name", "started" (epoch seconds), "maxCanvas", "family" (the model's)}."""

    async def submit(self, request: InfillRequest, names: Names) -> AsyncIterator[Draft]:
        """The drafts of `request`, cancelled if the reader stops before the last;
        ProtocolError (its code "busy" when the queue is full) before any draft if the request
        is refused (engine.serve.admit.admit, its errors naming the fields as `names` do)."""

    def tokens(self, draft: Draft) -> int:
        """The completion's tokens in the final draft."""


class LocalBackend:
    """The scheduler of one resident engine (engine.serve.socket.daemon.EngineServer)."""

    def __init__(self, server: Any) -> None:
        self.server = server  # engine, scheduler, name, limits, last_active

    async def hello(self) -> dict[str, Any]:
        return {"name": self.server.name, "started": int(self.server.scheduler.started),
                "maxCanvas": self.server.limits.max_canvas,
                "family": self.server.engine.config.family}

    def tokens(self, draft: Draft) -> int:
        return len(self.server.engine.completion_ids(draft))

    async def submit(self, request: InfillRequest, names: Names) -> AsyncIterator[Draft]:
        job = admit.admit(request, "interactive", self.server.limits,
                          self.server.engine.decoder, names)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Draft | ApiError] = asyncio.Queue()
        self.server.last_active = time.monotonic()
        admit.schedule(self.server.scheduler, job,
                       lambda d: loop.call_soon_threadsafe(queue.put_nowait, d),
                       lambda code, text: loop.call_soon_threadsafe(
                           queue.put_nowait, ApiError(500, text, None, code, "server_error")))
        return self._drafts(job, queue)

    async def _drafts(self, job: Any, queue: asyncio.Queue) -> AsyncIterator[Draft]:
        done = False
        try:
            while not done:
                item = await queue.get()
                if isinstance(item, ApiError):
                    raise item
                done = item.done
                yield item
        finally:
            if not done:
                self.server.scheduler.cancel(job)
            self.server.last_active = time.monotonic()


class HttpApi:
    """The HTTP endpoints over one Backend. `app` checks the token (None: none is needed);
    the team engine's Ingress, which checks its own, calls `endpoint`'s handlers."""

    def __init__(self, backend: Backend, token: str | None) -> None:
        self.backend = backend
        self.digest = admit.token_digest(token) if token else None
        self.routes = {key: getattr(self, name) for key, name in ROUTES.items()}
        # Each path with and without a trailing slash, as the team's Ingress serves them
        # (`endpoint`): Starlette's own answer to the other spelling is a redirect.
        routes = [Route(spelling, handler, methods=[method])
                  for (method, path), handler in self.routes.items()
                  for spelling in (path, path + "/")]
        app = Starlette(routes=routes, middleware=[Middleware(_Guard, digest=self.digest)],
                        exception_handlers={HTTPException: _refused, Exception: _failed})
        app.router.redirect_slashes = False
        self.app: ASGIApp = app

    def endpoint(self, method: str, path: str) -> Callable[[Request], Any] | None:
        """The handler of `method path`, or None."""
        return self.routes.get((method, path.rstrip("/") or "/"))

    # -- endpoints ------------------------------------------------------------------------

    async def models(self, request: Request) -> Response:
        hello = await self.backend.hello()
        return JSONResponse({"object": "list", "data": [
            {"id": hello["name"], "object": "model", "created": hello["started"],
             "owned_by": "dg-engine"}]})

    async def completions(self, request: Request) -> Response:
        try:
            body = Field(await _json_body(request))
            if body.get("n", int, 1) != 1:
                raise ApiError(400, "n: only 1 completion per request", "n", "unsupported")
            prompt = body.get("prompt", (str, list), "")
            if isinstance(prompt, list):
                if len(prompt) != 1 or not isinstance(prompt[0], str):
                    raise ApiError(400, "prompt: one string (a batch of prompts is not "
                                   "supported)", "prompt", "unsupported")
                prompt = prompt[0]
            suffix = body.get("suffix", str, "")
            if not suffix:  # twinny, Continue's openai provider: a FIM template in the prompt
                prompt, suffix = split_fim(prompt) or (prompt, suffix)
            stops = body.stops()
            stream = body.get("stream", bool, False)
            hello = await self.backend.hello()
            name = hello["name"]
            drafts = await self._submit(prompt, suffix,
                                        body.get("max_tokens", int, OPENAI_MAX_TOKENS), body,
                                        COMPLETIONS)
        except ApiError as exc:
            return exc.response()
        ignored = body.ignored(OPENAI_IGNORED)
        ident, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())

        def chunk(text: str, final: Draft | None, stopped: bool) -> dict[str, Any]:
            reason = None if final is None else _openai_reason(final, stopped)
            answer = {"id": ident, "object": "text_completion", "created": created,
                      "model": name,
                      "choices": [{"text": text, "index": 0, "logprobs": None,
                                   "finish_reason": reason}]}
            if final is not None:
                answer["dg"] = _extension(final, ignored)
            return answer

        pieces = answer_pieces(drafts, stops, hello["family"])
        if stream:
            return self._stream(pieces, chunk, done_line=True)
        return await self._whole(request, pieces, chunk)

    async def infill(self, request: Request) -> Response:
        try:
            body = Field(await _json_body(request))
            extra = body.get("input_extra", list, [])
            if not all(isinstance(c, dict) and all(isinstance(c.get(k, ""), str)
                                                   for k in ("filename", "text"))
                       for c in extra):
                raise ApiError(400, "input_extra: expected [{filename, text}]", "input_extra",
                               "invalid_type")
            prefix, suffix = body.get("input_prefix", str, ""), body.get("input_suffix", str, "")
            prompt = body.get("prompt", str, "")
            if not prefix and not suffix:  # twinny's llamacpp provider: a template in prompt
                prompt, suffix = split_fim(prompt) or (prompt, suffix)
            prefix = snippets(extra) + prefix + prompt
            # llama.cpp's server takes max_tokens for n_predict too (twinny's llamacpp sends it)
            n_predict = body.get("n_predict", int, body.get("max_tokens", int, -1))
            stops = body.stops()
            stream = body.get("stream", bool, False)
            hello = await self.backend.hello()
            name = hello["name"]
            if n_predict == 0:  # llama.vim's cache warm-up: nothing to write
                return JSONResponse({"content": "", "stop": True, "model": name,
                                     "tokens_predicted": 0, "stop_type": "limit"})
            drafts = await self._submit(prefix, suffix,
                                        n_predict if n_predict > 0 else LLAMA_N_PREDICT, body,
                                        INFILL)
        except ApiError as exc:
            return exc.response()
        ignored = body.ignored(LLAMA_IGNORED)

        def chunk(text: str, final: Draft | None, stopped: bool) -> dict[str, Any]:
            if final is None:
                return {"content": text, "stop": False}
            return {"content": text, "stop": True, "model": name,
                    "tokens_predicted": self.backend.tokens(final),
                    "stop_type": "word" if stopped else _llama_stop_type(final),
                    "dg": _extension(final, ignored)}

        pieces = answer_pieces(drafts, stops, hello["family"])
        if stream:
            return self._stream(pieces, chunk, done_line=False)
        return await self._whole(request, pieces, chunk)

    # -- the engine -----------------------------------------------------------------------

    async def _submit(self, prefix: str, suffix: str, max_tokens: int, body: Field,
                      names: Names) -> AsyncIterator[Draft]:
        """The drafts of one request, typed and bounded as the socket's are
        (engine.serve.admit); an error names the field as this API's `names` write it."""
        raw = dict(body.get("dg_settings", dict, {}))
        # The same request gets the same answer, whole or streamed, whatever came before it:
        # keys/values an earlier request left were computed beside another hole
        # (SamplerSettings.share_prefix), so a client opts in to them by name.
        raw.setdefault("share_prefix", False)
        for name in ("temperature", "seed"):
            if body.body.get(name) is not None:
                raw[name] = body.body[name]
        max_canvas = (await self.backend.hello())["maxCanvas"]
        canvas = min(max(CANVAS_LENGTH, 2 * max_tokens), max_canvas)
        try:
            settings = admit.settings(raw, names)  # first, as a socket message's are checked
            request = InfillRequest(admit.text("prefix", prefix, names),
                                    admit.text("suffix", suffix, names), max_tokens, settings,
                                    canvas)
            return await self.backend.submit(request, names)
        except ProtocolError as exc:
            if exc.code == "busy":
                raise ApiError(503, str(exc), None, "busy", "server_error") from None
            raise ApiError(400, str(exc), exc.field, "invalid_value") from None

    async def _whole(self, request: Request,
                     pieces: AsyncIterator[tuple[str, Draft | None, bool]],
                     chunk: Callable[[str, Draft | None, bool], dict]) -> Response:
        """One answer once the hole is done; the client leaving first cancels it."""

        async def whole() -> tuple[str, Draft, bool]:
            texts = []
            async with contextlib.aclosing(pieces):  # a stop string ends the job here
                async for text, last, stopped in pieces:
                    texts.append(text)
                    if last is not None:
                        return "".join(texts), last, stopped
            raise AssertionError("answer_pieces ends with the last draft or raises")

        work = asyncio.ensure_future(whole())
        gone = asyncio.ensure_future(_disconnect(request))
        try:
            await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, gone):
                task.cancel()
        if not work.done() or work.cancelled():  # nobody reads it
            return ApiError(499, "the client closed the request", None, "client_closed").response()
        try:
            text, draft, stopped = work.result()
        except ApiError as exc:
            return exc.response()
        return JSONResponse(chunk(text, draft, stopped))

    def _stream(self, pieces: AsyncIterator[tuple[str, Draft | None, bool]],
                chunk: Callable[[str, Draft | None, bool], dict], done_line: bool) -> Response:
        """Server-sent events: the answer's pieces as they settle, then the final chunk."""

        async def events() -> AsyncIterator[str]:
            try:
                async with contextlib.aclosing(pieces):
                    async for text, last, stopped in pieces:
                        yield _event(chunk(text, last, stopped))
            except ApiError as exc:
                yield _event(exc.body())
            if done_line:
                yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})


class _Guard:
    """Every path wants a head within MAX_HEADER_BYTES and the token (when there is one)
    before a byte of body is read (the application's outermost middleware: its refusals
    come before routing)."""

    def __init__(self, app: ASGIApp, digest: bytes | None) -> None:
        self.app, self.digest = app, digest

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # h11 bounds a head that arrives in pieces; one that arrives whole is measured here.
        head = len(scope["raw_path"]) + len(scope["query_string"]) + sum(
            len(name) + len(value) + 4 for name, value in scope["headers"])
        if head > MAX_HEADER_BYTES:
            await ApiError(431, f"the request head is over {MAX_HEADER_BYTES} bytes", None,
                           "too_large").response()(scope, receive, send)
            return
        if self.digest is not None and not self._token_ok(scope):
            await ApiError(401, "this engine needs its token (Authorization: Bearer <token>)",
                           None, "invalid_api_key").response()(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _token_ok(self, scope: Scope) -> bool:
        return admit.bearer_authorised(dict(scope["headers"]).get(b"authorization"),
                                       self.digest)


async def _refused(request: Request, exc: HTTPException) -> Response:
    """Starlette's routing refusals (404, 405) as OpenAI's error object."""
    if exc.status_code in (404, 405):
        return no_endpoint(request.method, request.url.path).response()
    return ApiError(exc.status_code, exc.detail, None, None, headers=exc.headers).response()


async def _failed(request: Request, exc: Exception) -> Response:
    """An endpoint that raised as OpenAI's error object (Starlette raises the exception again
    after it, for uvicorn to log)."""
    return ApiError(500, f"the engine failed: {type(exc).__name__}", None, "internal_error",
                    "server_error").response()


async def _json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object: at most MAX_BODY_BYTES (413), within BODY_TIMEOUT (408)."""
    length = request.headers.get("content-length")
    if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
        raise ApiError(413, f"the body is over {MAX_BODY_BYTES} bytes", None, "too_large")

    async def read() -> bytes:
        data = bytearray()
        async for piece in request.stream():
            data += piece
            if len(data) > MAX_BODY_BYTES:
                raise ApiError(413, f"the body is over {MAX_BODY_BYTES} bytes", None,
                               "too_large")
        return bytes(data)

    try:
        raw = await asyncio.wait_for(read(), BODY_TIMEOUT)
    except TimeoutError:
        raise ApiError(408, "the body did not arrive in time", None, "timeout") from None
    try:
        body = protocol.decode(raw)
    except ProtocolError as exc:
        raise ApiError(400, f"the body is not a JSON object: {exc}", None,
                       "invalid_json") from None
    return body


async def _disconnect(request: Request) -> None:
    """Returns when the client has gone (its body already read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def _openai_reason(draft: Draft, stopped: bool) -> str:
    return "stop" if stopped or draft.finish_reason in ("stop", "unit") else "length"


def _llama_stop_type(draft: Draft) -> str:
    return "eos" if draft.finish_reason in ("stop", "unit") else "limit"


def _extension(draft: Draft, ignored: list[str]) -> dict[str, Any]:
    """The diffusion specifics, for clients that look: passes, tokens per pass, the least
    confident token's confidence, the engine's own finish reason."""
    extension: dict[str, Any] = {"passes": draft.step, "finishReason": draft.finish_reason}
    if draft.score is not None:
        extension["tokensPerForward"] = (round(draft.score.tokens / draft.step, 3)
                                         if draft.step else 0.0)
        extension["confidence"] = round(draft.score.lowest, 4)
    if ignored:
        extension["ignored"] = ignored
    return extension
