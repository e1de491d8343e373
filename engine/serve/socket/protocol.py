"""The resident engine's wire protocol, version 2.

Transport: a Unix socket (default) or TCP. Every message is a 4-byte big-endian length, then
that many bytes of UTF-8 JSON holding one object. Messages over `MAX_MESSAGE` bytes are
refused (the connection is closed after the error reply, as the stream cannot be resynced).

Frames are checked before anything else reads them: strict JSON (no NaN or Infinity, no
number that overflows a float, nesting bounded by the parser), one object, an "id" that is
an integer or a string of at most 256 characters, text fields valid Unicode (no lone
surrogates), every field typed and in range. A frame that fails gets an error reply (id null
when its id is the problem) and the connection goes on. Replies are strict JSON too.

Client → engine. Every request has "op" and an "id" (an integer or a short string, unique per
connection):

    {"op": "hello", "id": 1, "version": 2, "token": "..."}   # first message; token over TCP
    {"op": "infill", "id": 2, "prefix": str, "suffix": str, "max_tokens": int,
     "canvas_length": int, "suffix_fraction": float, "settings": {SamplerSettings fields},
     "priority": "interactive"|"batch", "stream": bool}
    {"op": "rewrite", "id": 3, ...infill fields..., "original": str, "strength": float}
    {"op": "holes", "id": 8, "texts": [str], "max_tokens": [int], "canvas_length": int,
     "suffix_fraction": float, "settings": {...}, "until": [unit or null] (optional),
     "priority": ..., "stream": bool}

A "holes" message is one engine.types.HolesRequest: the prefix, the code kept between the
holes and the suffix (`texts`, one more than the holes), each hole's size, and each hole's unit
end (one "until" object, below, or null per hole). Its drafts carry "holes" (each hole's
committed text, in order); other drafts leave it out. The number of holes and their tokens in
all are bounded (engine.bounds.holes_problem).

An infill or rewrite message is one engine.types.InfillRequest or RewriteRequest, field for
field (`to_wire`, `from_wire`); "id", "stream" and "priority" are the connection's, and
"document" (optional) names the document the request is about: transport metadata beside the
request, never part of it (the model's answer does not depend on it). A client sends
`document_key` of the editor's URI or the file's path, a digest, so the engine learns no file
names; a team's engine routes one document's requests to one replica by it
(engine.serve.team.routing), and a request without it is routed by its prefix's start.
    {"op": "cancel", "id": 4, "target": 2}
    {"op": "stats", "id": 5}   {"op": "ping", "id": 6}   {"op": "shutdown", "id": 7}

Engine → client. Replies carry the request's "id" and a "type":

    {"type": "hello", "id": 1, "version": 2, "model": str, "device": str, "family": str,
     "pid": int, "completion_ends": [int], "limits": {"maxCanvas": int,
     "requestTimeout": float}}
    {"type": "draft", "id": 2, "draft": {Draft fields}, "score": {Score fields}}  # each step
    {"type": "result", "id": 2, "draft": {Draft fields}, "score": {...}}  # the last (done)
    {"type": "ok", "id": 6, ...}                            # ping, cancel, stats, shutdown
    {"type": "error", "id": 2, "code": str, "message": str}

"score" (optional: {"lowest": float, "mean": float, "tokens": int, "passes": int},
engine.types.Score) is how sure the model was of the draft's completion; a reply without it
(a family that records none) means "no score": the client shows the completion ungated.

"completion_ends" are the token ids a completion ends before (the model's stop ids and its
mask id): with them a client counts a draft's completion tokens as the engine does
(engine.text.stops.completion_ids).

"suffix_fraction" (in [0, 1]; absent: engine.types.SUFFIX_FRACTION) is the suffix's share of
the canvas's context tokens; the engine's token cut is the one place that applies it.

"until" (optional: {"kind": "line" | "brackets" | "block", "line_prefix": str,
"base_indent": str}) names the unit the client shows (engine.text.units.UnitEnd): the engine ends
the request once the committed text holds its end, with finish_reason "unit", and runs no
pass the client would throw away.

"choices" (optional: a list of at most MAX_CHOICES strings, MAX_CHOICES_TEXT characters in
all) restricts the hole to one of those texts or nothing (engine.types.InfillRequest,
engine.text.choices): a next-edit suggestion's word, one of the new words of the edits it
continues. With "judge": true as well, the choices are scored, not imposed: the first pass
scores every choice and the first draft carries "choice_logprobs", per choice the
log-probability of each of its tokens and then of the hole's end, and "top_logprobs", the
highest at each hole position (engine.types.Draft); the hole is written freely from that
pass on.

A Draft's finish_reason is "stop", "length", "unit", "judged", "cancelled", or "deadline":
the request ran past the engine's --request-timeout (queued or denoising) and ends with the
text it has.

Error codes: "bad-request" (malformed or missing fields, or over the engine's limits: canvas
over the model's positions or the per-request memory budget), "unknown-op", "too-large",
"busy" (the queue or the connection limit is full: try later), "unauthorized", "version",
"failed" (the model raised).

Both ends speak one version, VERSION: an engine refuses a hello that names another with code
"version" and its own "version" beside the message (a hello that names none is taken as this
one's); a client refuses an engine of another version. Either says, in one message, which
versions met and what to do (`other_version`): the two are from different installs of dg-lsp.
No side guesses what an older peer understands.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import socket
import struct
from typing import Any

from engine.serve import admit
from engine.serve.admit import ProtocolError
from engine.types import Draft, HolesRequest, InfillRequest, RewriteRequest, SamplerSettings, Score

# 2: every door's requests admitted by engine.serve.admit; no older peer served.
# 3: judged requests ("judge", "choice_logprobs", "top_logprobs").
VERSION = 3
MAX_MESSAGE = 8 * 1024 * 1024  # a 256-token canvas's text is a few KB; this is generous
MAX_UNAUTHENTICATED = 4096  # a TCP peer's first frame: a hello with its token
MAX_ID = 256  # characters of a string id
HEADER = struct.Struct(">I")


def encode(message: dict[str, Any]) -> bytes:
    """A frame of `message` as strict JSON; ProtocolError when it cannot be one (NaN, lone
    surrogates, too large)."""
    try:
        body = json.dumps(message, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":")).encode("utf-8")
    except (ValueError, TypeError) as exc:  # UnicodeEncodeError is a ValueError
        raise ProtocolError("failed", f"the reply is not strict JSON: {exc}") from None
    if len(body) > MAX_MESSAGE:
        raise ProtocolError("too-large", f"message of {len(body)} bytes exceeds {MAX_MESSAGE}")
    return HEADER.pack(len(body)) + body


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:40]} is out of range")
    return value


def decode(body: bytes) -> dict[str, Any]:
    """The object a frame's body holds; ProtocolError ("bad-request") when it is not strict
    JSON holding one object."""
    try:
        message = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant,
                             parse_float=_finite_float)
    except UnicodeDecodeError as exc:
        raise ProtocolError("bad-request", f"not UTF-8: {exc}") from None
    except RecursionError:
        raise ProtocolError("bad-request", "not a JSON message: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, ints over 4300 digits
        raise ProtocolError("bad-request", f"not a JSON message: {str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError("bad-request", "a message must be a JSON object")
    return message


def request_id(message: dict[str, Any], key: str = "id") -> int | str | None:
    """`message[key]` when it is a valid request id (absent: None); else ProtocolError."""
    value = message.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53:
        return value
    if isinstance(value, str) and len(value) <= MAX_ID and admit.unicode(value):
        return value
    raise ProtocolError("bad-request", f"{key} must be an integer or a string of at most "
                        f"{MAX_ID} characters")


def check_length(length: int, limit: int = MAX_MESSAGE) -> None:
    if length > limit:
        raise ProtocolError("too-large", f"message of {length} bytes exceeds {limit}")


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(encode(message))


def ask(sock: socket.socket, message: dict[str, Any]) -> dict[str, Any]:
    """Send `message` and return the next message received. A peer that hung up without
    reading it may have said why first ("busy"): that is returned, not a broken pipe."""
    try:
        send(sock, message)
    except (BrokenPipeError, ConnectionResetError):
        pass
    return receive(sock)


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

def settings_to_wire(settings: SamplerSettings | None) -> dict[str, Any]:
    return dataclasses.asdict(settings or SamplerSettings())


def document_key(document: str) -> str:
    """What a request's "document" carries for a document's identity (an editor's URI, a
    file's path): 32 hex digits of its digest, the same for every client that names it alike."""
    return hashlib.blake2b(document.encode("utf-8", "surrogatepass"),
                           digest_size=16).hexdigest()


def to_wire(request: InfillRequest | RewriteRequest | HolesRequest, document: str | None = None
            ) -> dict[str, Any]:
    """An "infill", "rewrite" or "holes" message of `request` (every client builds it here; the id,
    "stream" and "priority" are the client's), with `document_key(document)` beside it."""
    message = _request_to_wire(request)
    if document:
        message["document"] = document_key(document)
    return message


def _request_to_wire(request: InfillRequest | RewriteRequest | HolesRequest) -> dict[str, Any]:
    if isinstance(request, HolesRequest):
        message = {"op": "holes", "texts": list(request.texts),
                   "max_tokens": list(request.max_tokens),
                   "canvas_length": request.canvas_length,
                   "suffix_fraction": request.suffix_fraction,
                   "settings": settings_to_wire(request.settings)}
        if request.until is not None:
            message["until"] = [None if unit is None else dataclasses.asdict(unit)
                                for unit in request.until]
        return message
    if isinstance(request, RewriteRequest):
        message = {"op": "rewrite", "prefix": request.prefix, "suffix": request.suffix,
                   "original": request.original, "strength": request.strength,
                   "canvas_length": request.canvas_length,
                   "suffix_fraction": request.suffix_fraction,
                   "settings": settings_to_wire(request.settings)}
        if request.max_tokens is not None:  # else the engine sizes the hole from original
            message["max_tokens"] = request.max_tokens
        return message
    message = {"op": "infill", "prefix": request.prefix, "suffix": request.suffix,
               "max_tokens": request.max_tokens, "canvas_length": request.canvas_length,
               "suffix_fraction": request.suffix_fraction,
               "settings": settings_to_wire(request.settings)}
    if request.until is not None:
        message["until"] = dataclasses.asdict(request.until)
    if request.choices is not None:
        message["choices"] = list(request.choices)
    if request.judge:
        message["judge"] = True
    return message


def from_wire(message: dict[str, Any]) -> InfillRequest | RewriteRequest | HolesRequest:
    """The request an "infill", "rewrite" or "holes" message holds: engine.serve.admit.parse,
    which every door's requests go through."""
    return admit.parse(message, str(message.get("op")))


def completion_ends(hello: dict[str, Any]) -> set[int]:
    """The ids a completion ends before, from an engine's hello."""
    return set(hello["completion_ends"])


def other_version(engine: Any, client: Any, remedy: str) -> str:
    """The one message for an engine and a client of different protocol versions, and what
    to do about it (`remedy`)."""
    return (f"the engine speaks protocol {engine!r:.20}, the client {client!r:.20}: they are "
            f"from different installs of dg-lsp; {remedy}")


def draft_message(kind: str, request_id: Any, draft: Draft) -> dict[str, Any]:
    """A "draft" or "result" reply: the Draft's fields, and its Score beside them (where the
    family records one)."""
    message = {"type": kind, "id": request_id, "draft": draft_to_wire(draft)}
    if draft.score is not None:
        message["score"] = dataclasses.asdict(draft.score)
    return message


def draft_to_wire(draft: Draft) -> dict[str, Any]:
    raw = dataclasses.asdict(draft)
    del raw["score"]
    if not draft.holes:  # only a "holes" request's drafts carry them
        del raw["holes"]
    if not draft.choice_logprobs:  # only a judged request's draft carries them
        del raw["choice_logprobs"], raw["top_logprobs"]
    return raw


def draft_from_wire(raw: dict[str, Any], score: Any = None) -> Draft:
    """The Draft of a reply's "draft" and "score" fields; a score that is missing (a family
    that records none) or malformed is None: the completion is shown ungated."""
    return Draft(**dict(raw, holes=tuple(raw.get("holes", ())),
                        choice_logprobs=tuple(tuple(c) for c in raw.get("choice_logprobs", ())),
                        top_logprobs=tuple(raw.get("top_logprobs", ()))),
                 score=score_from_wire(score))


def score_from_wire(raw: Any) -> Score | None:
    names = [f.name for f in dataclasses.fields(Score)]
    if not isinstance(raw, dict) or sorted(raw) != sorted(names):
        return None
    values = [raw[name] for name in names]
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    return Score(float(raw["lowest"]), float(raw["mean"]), int(raw["tokens"]),
                 int(raw["passes"]))
