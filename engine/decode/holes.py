"""Several holes of one request (engine.types.HolesRequest): jointly in one canvas, or one
after another where the family cannot do better.

Jointly (the masked family, engine.decode.denoise.begin_holes). The canvas is `[BOS] prefix
MASK*n0 kept1 MASK*n1 ... suffix` (engine.text.canvas.holes_layout); the Sequence's hole is the
span from the first hole's start to the last one's end, with the kept code's tokens committed
from the start (as a rewrite keeps its tokens), so every pass sees every hole as it forms and
the sampler commits across all of them at once. The step is the one hole's: its rules take the
holes' spans as data (`Rules.holes`, engine.decode.hole) and apply to each hole alone:

- a stop token committed in hole k pads the rest of hole k, not the kept code or later holes;
- the stop run (engine.decode.hole.stop_run) is each hole's trailing run of stop tokens;
- min_tokens forbids a stop in each hole's first positions;
- the sampler's minimum of one position a step is one per hole still masked (its most
  confident), so each hole advances as it would alone;
- once hole k's committed text holds its unit end (`HolesRequest.until[k]`), the rest of the
  hole is padded: no pass is spent on text the client cuts away; a line's rest is padded as
  soon as any of its positions holds a newline (the positions after it are cut away whatever
  those before it become), where one InfillRequest waits for the text before it;
- every hole is healed (engine.text.canvas.holes_layout): its first token completes the last
  token of the text before it, dropped from the canvas, and its text is shown without it.

A request with one hole decodes exactly as the InfillRequest with the same text and size (and
unit, but a line's, which ends the hole earlier here).

One after another (`sequential_holes`: the AR baseline, the block family, and DreamOn, whose
growing and shrinking hole would move the kept code between holes): hole k is an InfillRequest
whose prefix holds the holes before it filled and whose suffix is the code after it with the
later holes left empty. The drafts count every hole's passes.

A draft's `holes` holds every hole's committed text up to its first gap or stop token (the
first hole's without the healed characters, CRLF restored as in engine.text.canvas); its
`text` the span as it stands, kept code and holes' texts in place; its `token_ids` every
hole's completion tokens, in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from engine.decode.hole import spliced
from engine.decode.runner import step_alone
from engine.decode.sequence import Sequence
from engine.text.stops import completion_ids
from engine.text.units import settled
from engine.types import Draft, HolesRequest, InfillRequest, UnitEnd


def units_of(request: HolesRequest) -> tuple[UnitEnd | None, ...]:
    """Each hole's unit end (None: the hole's own end)."""
    if request.until is None:
        return (None,) * len(request.max_tokens)
    if len(request.until) != len(request.max_tokens):
        raise ValueError(f"until: expected one unit (or null) per hole ({len(request.max_tokens)}"
                         f"), got {len(request.until)}")
    return tuple(request.until)


def _infill(request: HolesRequest, filled: list[str], unit: UnitEnd | None) -> InfillRequest:
    """Hole k (the first not `filled`) as an InfillRequest: the holes before it filled in its
    prefix, the code after it with the later holes left empty as its suffix."""
    k = len(filled)
    r = request
    prefix = "".join(t + f for t, f in zip(r.texts, filled, strict=False)) + r.texts[k]
    suffix = "".join(r.texts[k + 1 :])
    return InfillRequest(prefix, suffix, r.max_tokens[k], r.settings, r.canvas_length,
                         r.suffix_fraction, unit)


def sequential_holes(decoder: Any, request: HolesRequest) -> Iterator[Draft]:
    """A request's holes filled one after another, each an InfillRequest of `decoder`'s (the
    families that cannot fill them jointly): one Draft per forward pass."""
    units = units_of(request)
    filled: list[str] = []
    ids: list[int] = []  # the filled holes' completion tokens
    passes = 0  # the filled holes' passes
    current: Sequence | None = None
    try:
        while True:
            k = len(filled)
            if current is None:
                current = decoder.start(Sequence(_infill(request, filled, units[k])))
            draft = settled(step_alone(decoder.model, current), units[k])
            holes = (*filled, draft.text)
            mask = decoder.config.mask_token_id
            ends = decoder.stop_ids() | ({mask} if mask is not None else set())
            step_ids = ids + completion_ids(draft.token_ids, ends)
            step_passes = passes + draft.step
            if draft.done:
                current.close()
                current = None
                filled.append(draft.text)
                ids, passes = step_ids, step_passes
            done = len(filled) == len(request.max_tokens)
            yield Draft(step=step_passes, token_ids=step_ids, committed=len(step_ids),
                        text=spliced(request.texts, holes), done=done,
                        finish_reason=draft.finish_reason if done else "", holes=holes)
            if done:
                return
    finally:
        if current is not None:
            current.close()
