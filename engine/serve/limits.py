"""What one request may ask of an engine, and the check that admits it.

A wire message becomes the scheduler's Sequence (engine.decode.sequence) here, once, for the
resident engine (engine.serve.socket.daemon) and a team's replicas (engine.serve.team.app)
alike: typed and in range (protocol.from_wire, the bounds table), within this engine's canvas and memory per
request, with its deadline set.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from engine.bounds import CANVAS_LENGTH_RANGE
from engine.serve.socket import protocol
from engine.serve.socket.protocol import ProtocolError
from engine.types import HolesRequest, RewriteRequest

if TYPE_CHECKING:  # they import torch: loaded only to serve
    from engine.decode.families import Decoder
    from engine.decode.sequence import Sequence

DEFAULT_REQUEST_TIMEOUT = 60.0  # seconds: an interactive completion takes well under one
# Characters of context an engine keeps per canvas token: more than the densest code tokenizes
# to, so trimming never changes a canvas, and an 8 MB prefix costs what its canvas costs. (Not
# the language server's estimate of characters per token, dg_lsp.context.CHARS_PER_TOKEN.)
MAX_CHARS_PER_TOKEN = 32


@dataclass(frozen=True)
class Limits:
    """What one request may ask of this engine."""

    max_canvas: int  # the model's positions
    max_request_bytes: int  # engine.serve.scheduler.request_bytes of one request
    request_timeout: float  # seconds from arrival to the last draft


def parse_request(message: dict[str, Any], op: str, limits: Limits, decoder: Decoder) -> Sequence:
    """The scheduler's Sequence for an infill, rewrite or holes message; ProtocolError when the
    message is malformed (protocol.from_wire) or over this engine's limits."""
    from engine.decode.sequence import Sequence
    from engine.serve.scheduler import PRIORITIES, request_bytes

    request = protocol.from_wire(dict(message, op=op))
    canvas_length = request.canvas_length
    if isinstance(request, HolesRequest):
        max_tokens = sum(request.max_tokens)  # the masks in all
    else:
        # A rewrite without max_tokens is sized from its original: it is held to the default.
        max_tokens = request.max_tokens if request.max_tokens is not None else 32
    low = int(CANVAS_LENGTH_RANGE.low)
    high = min(int(CANVAS_LENGTH_RANGE.high), limits.max_canvas)
    if not low <= canvas_length <= high:
        raise ProtocolError("bad-request", f"canvas_length must be in [{low}, {high}] "
                            f"(this model's positions), not {canvas_length}")
    if not 1 <= max_tokens < canvas_length:
        raise ProtocolError("bad-request", f"max_tokens must be in [1, canvas_length - 1 = "
                            f"{canvas_length - 1}], not {max_tokens}")
    need = request_bytes(decoder.config, decoder.positions(canvas_length, max_tokens),
                         max_tokens)
    if need > limits.max_request_bytes:
        raise ProtocolError("bad-request", f"canvas_length {canvas_length} with max_tokens "
                            f"{max_tokens} needs about {need >> 20} MiB, over this engine's "
                            f"{limits.max_request_bytes >> 20} MiB per request "
                            f"(--max-request-mb)")
    priority = message.get("priority", "interactive")
    if not isinstance(priority, str):
        raise ProtocolError("bad-request", f"priority: expected {str}, got {priority!r:.60}")
    if priority not in PRIORITIES:
        raise ProtocolError("bad-request", f"priority must be one of {PRIORITIES}")
    keep = canvas_length * MAX_CHARS_PER_TOKEN
    if isinstance(request, RewriteRequest) and len(request.original) > keep:
        raise ProtocolError("bad-request", f"original: {len(request.original)} characters do "
                            f"not fit a canvas of {canvas_length} tokens")
    if isinstance(request, HolesRequest):
        request = _holes_fit(request, keep, decoder)
    else:
        request = replace(request, prefix=request.prefix[-keep:], suffix=request.suffix[:keep])
    return Sequence(request, priority, deadline=time.monotonic() + limits.request_timeout)


def free_memory(device: Any) -> int:
    """Bytes free on `device` now: the GPU's, or the machine's available RAM."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _holes_fit(request: HolesRequest, keep: int, decoder: Decoder) -> HolesRequest:
    """`request` with its prefix and suffix trimmed as an infill's are; ProtocolError when the
    code kept between its holes does not fit its canvas whole (laid out here, no pass run)."""
    kept = sum(map(len, request.texts[1:-1]))
    if kept > keep:
        raise ProtocolError("bad-request", f"texts: the {kept} characters kept between the "
                            f"holes do not fit a canvas of {request.canvas_length} tokens")
    texts = (request.texts[0][-keep:], *request.texts[1:-1], request.texts[-1][:keep])
    request = replace(request, texts=texts)
    try:
        decoder.check_holes(request)
    except ValueError as exc:
        raise ProtocolError("bad-request", str(exc)) from None
    return request
