"""The one way in: every request, by whichever door it came (the socket's message, the tools'
HTTP body, a team's replica), is parsed, bounded, authorised and scheduled by this code.

A door translates its transport only, and calls, in order:

- `authorised` / `bearer_authorised`: the token, where the door has one, before the request is
  read (the socket's TCP listener in its first small frame; the HTTP port and the team's front
  and Ingress from the request head, before a byte of body);
- `parse` (a message of the engine's own fields: the socket, a team's /v1/stream) or the typed
  request built field by field with `text` and `settings` (the tools' APIs, whose bodies have
  fields of their own): the engine's typed request (engine.types), every field typed and in its
  range (engine.bounds);
- `admit`: the request within this engine's canvas and memory, its context cut to what a canvas
  holds, as the scheduler's Sequence (engine.decode.sequence) with its lane and deadline;
- `schedule`: the Sequence on the scheduler, its drafts and error to the door's callbacks.

Every refusal is a ProtocolError whose message names the field as the door's users write it:
each door says how in its `Names` (the socket's are the engine's own, `WIRE`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from engine.bounds import (
    CANVAS_LENGTH_RANGE,
    STRENGTH_RANGE,
    SUFFIX_FRACTION_RANGE,
    bounds_of,
    holes_problem,
)
from engine.text.units import UNIT_KINDS
from engine.types import (
    CANVAS_LENGTH,
    SAMPLERS,
    SUFFIX_FRACTION,
    Draft,
    HolesRequest,
    InfillRequest,
    RewriteRequest,
    SamplerSettings,
    UnitEnd,
)

if TYPE_CHECKING:  # they import torch: loaded only to serve
    from engine.decode.families import Decoder
    from engine.decode.sequence import Sequence
    from engine.serve.limits import Limits
    from engine.serve.scheduler import Scheduler

Request = InfillRequest | RewriteRequest | HolesRequest

MAX_DOCUMENT = 256  # characters of a request's "document" (document_key writes 32)
# characters of a unit's line_prefix / base_indent: the cursor's line before the cursor
MAX_UNIT_TEXT = 4096
MAX_CHOICES = 64  # texts of a request's "choices": the new words of a few edits
MAX_CHOICES_TEXT = 16_384  # characters of a request's "choices", all together
# Characters of context an engine keeps per canvas token: more than the densest code tokenizes
# to, so trimming never changes a canvas, and an 8 MB prefix costs what its canvas costs. (Not
# the language server's estimate of characters per token, dg_lsp.context.CHARS_PER_TOKEN.)
MAX_CHARS_PER_TOKEN = 32


class ProtocolError(Exception):
    """A refused request; `code` is the error code sent back, `field` the field at fault as the
    door's users write it (None where no one field is)."""

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.field = field

    def __reduce__(self) -> tuple[Any, ...]:  # whole across Ray, from a team's replica
        return (type(self), (self.code, str(self), self.field))


@dataclass(frozen=True)
class Names:
    """How a door's users write the request's fields, for the errors that name them."""

    fields: Mapping[str, str] = field(default_factory=dict)  # the engine's name: the door's
    settings: str = "settings."  # ahead of a sampler setting's name
    own_settings: tuple[str, ...] = ()  # sampler settings the door takes as fields of its own

    def of(self, name: str) -> str:
        return self.fields.get(name, name)

    def setting(self, name: str) -> str:
        return name if name in self.own_settings else self.settings + name


WIRE = Names()  # the socket's messages (and a team's) carry the engine's own names


def _refuse(names: Names, name: str, problem: str) -> ProtocolError:
    """A "bad-request" naming `name` (the engine's) as the door writes it; `problem` follows."""
    shown = names.of(name)
    return ProtocolError("bad-request", f"{shown}{problem}", shown)


# -- authorise --------------------------------------------------------------------------------


def token_digest(token: str) -> bytes:
    """The SHA-256 a door keeps of its token (never the token itself)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


def authorised(presented: Any, digest: bytes | None) -> bool:
    """Whether `presented` (a message's token) is the token whose digest is `digest`, compared
    in constant time. surrogatepass: JSON can carry lone surrogates, and a bad token is just
    wrong."""
    return isinstance(presented, str) and digest is not None and hmac.compare_digest(
        token_digest(presented), digest)


def bearer_authorised(header: str | bytes | None, digest: bytes) -> bool:
    """Whether an `Authorization: Bearer <token>` header carries the token whose SHA-256 is
    `digest`, compared in constant time. A str header is HTTP's latin-1 reading of its bytes:
    the bytes the client sent are hashed (a token file's UTF-8 text is those bytes)."""
    raw = header.encode("latin-1", "replace") if isinstance(header, str) else header or b""
    scheme, _, token = raw.partition(b" ")
    given = hashlib.sha256(token.strip()).digest()
    return scheme.lower() == b"bearer" and hmac.compare_digest(given, digest)


# -- parse ------------------------------------------------------------------------------------

_SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(SamplerSettings)}
_SETTINGS_BOUNDS = bounds_of(SamplerSettings)
_UNIT_FIELDS = {f.name for f in dataclasses.fields(UnitEnd)}


def unicode(value: str) -> bool:
    """Whether `value` is valid Unicode (JSON can carry lone surrogates)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def text(name: str, value: str, names: Names = WIRE) -> str:
    """`value`, the request's text field `name`; ProtocolError unless it is valid Unicode."""
    if not unicode(value):
        raise _refuse(names, name, ": not valid Unicode (a lone surrogate)")
    return value


def settings(raw: Any, names: Names = WIRE) -> SamplerSettings:
    """SamplerSettings from a request's settings object (None: the defaults); ProtocolError
    naming the first field of the wrong type or out of its range (engine.bounds)."""
    if raw is None:
        return SamplerSettings()
    if not isinstance(raw, dict):
        raise _refuse(names, "settings", " must be an object")
    unknown = set(raw) - set(_SETTINGS_FIELDS)
    if unknown:
        raise ProtocolError("bad-request", f"unknown sampler settings: {sorted(unknown)[:8]}")
    defaults = SamplerSettings()
    for name, value in raw.items():
        shown = names.setting(name)
        if name in _SETTINGS_BOUNDS:
            problem = _SETTINGS_BOUNDS[name].problem(shown, value)
        elif name == "sampler":
            problem = None if value in SAMPLERS else f"{shown}: expected one of " \
                f"{', '.join(SAMPLERS)}, got {value!r:.60}"
        else:
            kind = type(getattr(defaults, name))
            problem = None if type(value) is kind else \
                f"{shown}: expected {kind.__name__}, got {value!r:.60}"
        if problem:
            raise ProtocolError("bad-request", problem[:200], shown)
    return SamplerSettings(**raw)


def unit(raw: Any, names: Names = WIRE) -> UnitEnd | None:
    """A request's "until" (absent: None); ProtocolError when it is not a unit."""
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - _UNIT_FIELDS or "kind" not in raw:
        raise _refuse(names, "until", f": expected an object with kind and optionally "
                      f"line_prefix and base_indent, got {raw!r:.60}")
    if raw["kind"] not in UNIT_KINDS:
        raise _refuse(names, "until", f".kind must be one of {UNIT_KINDS}")
    for name in ("line_prefix", "base_indent"):
        value = raw.get(name, "")
        if not isinstance(value, str) or len(value) > MAX_UNIT_TEXT:
            raise _refuse(names, "until", f".{name}: expected a string of at most "
                          f"{MAX_UNIT_TEXT} characters")
        text(f"until.{name}", value, names)
    return UnitEnd(**raw)


def parse(message: Mapping[str, Any], op: str, names: Names = WIRE) -> Request:
    """The request an "infill", "rewrite" or "holes" message holds (the engine's own fields,
    as the socket and a team's /v1/stream carry them), every field typed and in its range;
    ProtocolError naming the first that is not. What this engine can serve (its canvas, its
    memory) is `admit`'s to check."""
    read = _reader(message, names)
    document = text("document", read("document", str, ""), names)  # a team's router's
    if len(document) > MAX_DOCUMENT:
        raise _refuse(names, "document", f": at most {MAX_DOCUMENT} characters")
    canvas_length = read("canvas_length", int, CANVAS_LENGTH)
    suffix_fraction = read("suffix_fraction", (int, float), SUFFIX_FRACTION)
    if problem := SUFFIX_FRACTION_RANGE.problem(names.of("suffix_fraction"), suffix_fraction):
        raise ProtocolError("bad-request", problem, names.of("suffix_fraction"))
    sampler = settings(message.get("settings"), names)
    if op == "holes":
        return _holes(message, names, sampler, canvas_length, float(suffix_fraction))
    return _infill(message, op, names, sampler, canvas_length, float(suffix_fraction))


def _reader(message: Mapping[str, Any], names: Names) -> Callable[..., Any]:
    def read(name: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
        value = message.get(name, default)
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            raise _refuse(names, name, f": expected {kind}, got {value!r:.60}")
        return value

    return read


def _holes(message: Mapping[str, Any], names: Names, sampler: SamplerSettings,
           canvas_length: int, suffix_fraction: float) -> HolesRequest:
    read = _reader(message, names)
    texts, max_tokens = read("texts", list), read("max_tokens", list)
    for i, piece in enumerate(texts):
        if not isinstance(piece, str):
            raise _refuse(names, "texts", f"[{i}]: expected a string, got {piece!r:.60}")
        text(f"texts[{i}]", piece, names)
    if problem := holes_problem(len(texts), max_tokens):
        raise ProtocolError("bad-request", problem, names.of("max_tokens"))
    until = read("until", (list, type(None)))
    if until is not None:
        if len(until) != len(max_tokens):
            raise _refuse(names, "until", f": expected one unit (or null) per hole "
                          f"({len(max_tokens)}), got {len(until)}")
        until = tuple(unit(each, names) for each in until)
    return HolesRequest(tuple(texts), tuple(max_tokens), sampler, canvas_length,
                        suffix_fraction, until)


def _infill(message: Mapping[str, Any], op: str, names: Names, sampler: SamplerSettings,
            canvas_length: int, suffix_fraction: float) -> InfillRequest | RewriteRequest:
    read = _reader(message, names)
    prefix = text("prefix", read("prefix", str, ""), names)
    suffix = text("suffix", read("suffix", str, ""), names)
    if op == "rewrite":
        max_tokens = read("max_tokens", (int, type(None)))
        original = text("original", read("original", str, None), names)
        strength = read("strength", (int, float), 1.0)
        if problem := STRENGTH_RANGE.problem(names.of("strength"), strength):
            raise ProtocolError("bad-request", problem, names.of("strength"))
        return RewriteRequest(prefix, suffix, original, float(strength), max_tokens, sampler,
                              canvas_length, suffix_fraction)
    max_tokens = read("max_tokens", int, 32)
    until = unit(message.get("until"), names)
    choices = _choices(read("choices", (list, type(None))), names)
    judge = read("judge", bool, False)
    if judge and choices is None:
        raise _refuse(names, "judge", ": a judged request needs choices")
    return InfillRequest(prefix, suffix, max_tokens, sampler, canvas_length, suffix_fraction,
                         until, choices, judge)


def _choices(choices: list[Any] | None, names: Names) -> tuple[str, ...] | None:
    if choices is None:
        return None
    if len(choices) > MAX_CHOICES:
        raise _refuse(names, "choices", f": at most {MAX_CHOICES} texts")
    for choice in choices:
        if not isinstance(choice, str):
            raise _refuse(names, "choices", f": expected texts, got {choice!r:.60}")
        text("choices", choice, names)
    if sum(map(len, choices)) > MAX_CHOICES_TEXT:
        raise _refuse(names, "choices", f": at most {MAX_CHOICES_TEXT} characters in all")
    return tuple(choices)


# -- bound ------------------------------------------------------------------------------------


def admit(request: Request, priority: Any, limits: Limits, decoder: Decoder,
          names: Names = WIRE) -> Sequence:
    """The scheduler's Sequence for `request` in the `priority` lane, its deadline set;
    ProtocolError when it is over this engine's limits (the model's positions, the memory per
    request)."""
    from engine.decode.sequence import Sequence
    from engine.serve.scheduler import PRIORITIES, request_bytes

    canvas_length = request.canvas_length
    if isinstance(request, HolesRequest):
        max_tokens = sum(request.max_tokens)  # the masks in all
    else:
        # A rewrite without max_tokens is sized from its original: it is held to the default.
        max_tokens = request.max_tokens if request.max_tokens is not None else 32
    canvas, hole = names.of("canvas_length"), names.of("max_tokens")
    low = int(CANVAS_LENGTH_RANGE.low)
    high = min(int(CANVAS_LENGTH_RANGE.high), limits.max_canvas)
    if not low <= canvas_length <= high:
        raise ProtocolError("bad-request", f"{canvas} must be in [{low}, {high}] (this model's "
                            f"positions), not {canvas_length}", canvas)
    if not 1 <= max_tokens < canvas_length:
        raise ProtocolError("bad-request", f"{hole} must be in [1, canvas_length - 1 = "
                            f"{canvas_length - 1}], not {max_tokens}", hole)
    need = request_bytes(decoder.config, decoder.positions(canvas_length, max_tokens),
                         max_tokens)
    if need > limits.max_request_bytes:
        raise ProtocolError("bad-request", f"{canvas} {canvas_length} with {hole} {max_tokens} "
                            f"needs about {need >> 20} MiB, over this engine's "
                            f"{limits.max_request_bytes >> 20} MiB per request "
                            f"(--max-request-mb)", canvas)
    if not isinstance(priority, str):
        raise _refuse(names, "priority", f": expected {str}, got {priority!r:.60}")
    if priority not in PRIORITIES:
        raise _refuse(names, "priority", f" must be one of {PRIORITIES}")
    return Sequence(_fit(request, names, decoder), priority,
                    deadline=time.monotonic() + limits.request_timeout)


def _fit(request: Request, names: Names, decoder: Decoder) -> Request:
    """`request` with the context a canvas cannot hold cut off; ProtocolError when what must
    be kept whole (a rewrite's original, the code between holes) does not fit."""
    canvas_length = request.canvas_length
    keep = canvas_length * MAX_CHARS_PER_TOKEN
    if isinstance(request, RewriteRequest) and len(request.original) > keep:
        raise _refuse(names, "original", f": {len(request.original)} characters do not fit a "
                      f"canvas of {canvas_length} tokens")
    if not isinstance(request, HolesRequest):
        return replace(request, prefix=request.prefix[-keep:], suffix=request.suffix[:keep])
    kept = sum(map(len, request.texts[1:-1]))
    if kept > keep:
        raise _refuse(names, "texts", f": the {kept} characters kept between the holes do "
                      f"not fit a canvas of {canvas_length} tokens")
    texts = (request.texts[0][-keep:], *request.texts[1:-1], request.texts[-1][:keep])
    request = replace(request, texts=texts)
    try:
        decoder.check_holes(request)
    except ValueError as exc:
        raise ProtocolError("bad-request", str(exc)) from None
    return request


# -- schedule ---------------------------------------------------------------------------------


def schedule(scheduler: Scheduler, job: Sequence, on_draft: Callable[[Draft], None],
             on_error: Callable[[str, str], None], who: str = "engine") -> None:
    """`job` on `scheduler`, its drafts and its failure (code, text) to the callbacks (called
    on the scheduler's thread); ProtocolError ("busy") when the queue is full."""
    job.on_draft, job.on_error = on_draft, on_error
    if not scheduler.submit(job):
        raise ProtocolError("busy", f"the {who}'s queue is full; try again")
