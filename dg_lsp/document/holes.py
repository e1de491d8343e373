"""Several holes of one document filled in one request (engine.types.HolesRequest): the texts
the model reads around them, and the engine's last draft, checked. The stub fills
(dg_lsp.actions.holes) and the completions at every cursor (dg_lsp.completion.cursors) both
lay out their holes here."""

from __future__ import annotations

from collections.abc import Callable

from dg_lsp.context import CHARS_PER_TOKEN, windows
from dg_lsp.document.edit import RewriteError
from engine.backend import Backend
from engine.bounds import HOLE_COUNT_RANGE, MASKED_TOKENS_RANGE
from engine.types import Draft, HolesRequest, last_draft

MAX_HOLES = int(HOLE_COUNT_RANGE.high)
MAX_HOLE_TOKENS = int(MASKED_TOKENS_RANGE.high)


def canvas_texts(text: str, spans: list[tuple[int, int, str]], canvas_length: int,
                 hole_tokens: int, suffix_fraction: float) -> tuple[str, ...]:
    """The texts around holes at `spans` (start, end, text the model reads just before the
    hole), in document order: the prefix and suffix cut to whole-line windows of what the
    canvas has left after the holes and the code between them; RewriteError when that is
    nothing."""
    middles = [text[spans[i - 1][1] : start] + lead
               for i, (start, _, lead) in enumerate(spans) if i]
    left = (canvas_length - hole_tokens) * CHARS_PER_TOKEN - sum(len(m) for m in middles)
    if left <= 0:
        raise RewriteError(f"the holes ({hole_tokens} tokens) and the code between them do "
                           f"not fit the model's canvas ({canvas_length} tokens)")
    prefix, suffix = windows(text[: spans[0][0]] + spans[0][2], text[spans[-1][1] :], left,
                             suffix_fraction)
    return (prefix, *middles, suffix)


def filled(backend: Backend, request: HolesRequest, cancel: Callable[[], bool] | None,
           uri: str, what: str) -> Draft:
    """The last draft of `request`'s holes (`what` they are to the user: the holes, the
    cursors); RewriteError when it was cancelled or the engine refused it."""
    try:
        last = last_draft(backend.holes_stream(request, cancel, document=uri or None))
    except ValueError as exc:
        raise RewriteError(f"the engine refused the {what}: {exc}") from exc
    if last is None or last.finish_reason == "cancelled":
        raise RewriteError("cancelled")
    if len(last.holes) != len(request.max_tokens):
        raise RewriteError(f"the engine answered {len(last.holes)} holes for "
                           f"{len(request.max_tokens)}")
    return last
