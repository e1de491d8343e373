"""`Sequence`: one request in flight, everything the engine keeps of it between passes.

A Sequence is made when a request arrives (by a server door's `engine.serve.admit.admit`, or by
`Engine` in process), its decoding state is laid in by its family's decoder
(engine.decode.families.Decoder.start), and the runner (engine.decode.runner) steps it one
forward pass at a time until it ends. It holds:

- the request, unchanged, and the unit its client shows (`until`, engine.text.units);
- what ends it early: a cancel (the scheduler's `cancelled` event, or a caller's
  `cancel_check`) and a deadline;
- the resident scheduler's bookkeeping (lane, priority, callbacks, when it last stepped);
- for the masked family: the canvas, which hole positions are committed and how sure the
  sampler was of each, the step and pass counts, the context cache, and the `Rules` its steps
  follow (engine.decode.denoise steps it: plain functions of a Sequence and its rules);
- for the other families (the AR baseline, the block family, holes filled one after another):
  the generator that yields one Draft per forward pass.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from engine.decode.constraints import TokenConstraints
from engine.decode.kv_cache import ContextCache, PrefixCache
from engine.text.canvas import Canvas
from engine.text.choices import Choices
from engine.text.tokenizer import Tokenizer
from engine.text.units import settled
from engine.types import (
    Draft,
    HolesRequest,
    InfillRequest,
    RewriteRequest,
    SamplerSettings,
    UnitEnd,
)

INTERACTIVE = "interactive"


@dataclass
class Rules:
    """What a masked Sequence's steps follow: fixed when it starts, data for the step's
    functions (engine.decode.denoise). One hole is `holes` of one span; a HolesRequest's holes
    are several spans of the one canvas hole, with the code kept between them committed."""

    tokenizer: Tokenizer
    canvas: Canvas
    settings: SamplerSettings
    stop_ids: set[int]
    # Built once: the stop-run rule and min_tokens index by them at every step.
    stop_list: list[int]
    stop_tensor: Tensor
    pad_id: int | None
    expand_id: int | None  # DreamOn's: the hole grows and shrinks
    mask_id: int
    constraints: TokenConstraints
    # A hole of fixed length follows its choices position by position (engine.text.choices);
    # DreamOn's hole changes length, so it keeps their tokens only.
    choices: Choices | None
    refresh: int  # a cache refresh every `refresh` steps (settings.cache_refresh, at least 1)
    prefix_cache: PrefixCache | None
    timings: dict[str, float]
    # Each hole's [start, end) in the canvas hole (one hole: the whole of it, kept in step with
    # DreamOn's edits).
    holes: list[tuple[int, int]]
    # Several holes only (engine.decode.holes): the request's texts (newlines LF), each hole's
    # unit end and healed text, and the first tokens a later hole's healed text allows.
    texts: list[str] | None = None
    units: list[UnitEnd | None] = field(default_factory=list)
    heals: list[str] = field(default_factory=list)
    firsts: dict[int, Tensor] = field(default_factory=dict)


@dataclass(eq=False)  # each is itself: the scheduler finds and removes it by identity
class Sequence:
    """One request in flight (see the module's docstring)."""

    # None: a canvas decoded outside any request (the distiller's teacher, engine.train).
    request: InfillRequest | RewriteRequest | HolesRequest | None
    priority: str = INTERACTIVE
    # Called on the scheduler thread with every Draft (the last has done=True), or with an
    # error (code, message) instead.
    on_draft: Callable[[Draft], None] = lambda draft: None
    on_error: Callable[[str, str], None] = lambda code, message: None
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)
    deadline: float | None = None  # time.monotonic() past which it ends ("deadline")
    lane: str = INTERACTIVE  # set by Scheduler.submit
    step_seconds: float = 0.0  # how long its last step took
    stepped_at: float = 0.0  # time.monotonic() when its last step ended
    until: UnitEnd | None = None  # the unit its client shows (default: an InfillRequest's)
    cancel_check: Callable[[], bool] | None = None  # asked before every pass, beside `cancelled`
    # Its passes never share a batch (a large canvas would make every row as wide as itself).
    alone: bool = False
    last: Draft | None = None  # the latest Draft it gave, settled by its unit

    # The masked family's state (engine.decode.denoise); `rules` is None for the others.
    rules: Rules | None = None
    x: Tensor | None = None  # the canvas ids
    start: int = 0  # where the hole starts in the canvas
    n: int = 0  # the hole's length
    committed: Tensor | None = None  # [n] which hole positions are committed
    # [n] each position's confidence when the sampler committed it; NaN where no sampler did
    # (masked still, or a rewrite's kept token).
    confidence: Tensor | None = None
    generator: torch.Generator | None = None
    steps: int = 0
    # Steps whose logits were a row slice of an earlier pass's, not a pass of their own
    # (engine.decode.denoise.advance): the drafts count forward passes, steps - reused.
    reused: int = 0
    passes_before: int = 0  # passes run for it before its first step (a rewrite's scoring)
    cache: ContextCache | None = None
    stale: bool = True  # the cache no longer matches the canvas layout
    stopped: bool = False
    ended: list[bool] = field(default_factory=list)  # each hole's, by a stop or its unit end
    # Whether the pass whose logits `advance` gets next wrote the cache it read (a full pass
    # or a refresh): then the passes after it may reuse its logits.
    wrote_cache: bool = False
    span: tuple[int, int] | None = None  # this step's masked range; a commit clears it
    # A judged request's choices, in order, as the hole's tokens (InfillRequest.judge): its
    # first pass scores them, then it is written as any other.
    judged: Choices | None = None

    # The other families: one Draft per forward pass, and the last one it yielded.
    drafts: Iterator[Draft] | None = None
    drafted: Draft | None = None

    def __post_init__(self) -> None:
        if self.until is None and isinstance(self.request, InfillRequest):
            self.until = self.request.until

    def cancel(self) -> None:
        self.cancelled.set()

    def stop_reason(self, now: float | None = None) -> str | None:
        """Why it ends before its next pass: "cancelled", "deadline", or None: it goes on."""
        cancel = self.cancelled.is_set if self.cancel_check is None else self.cancel_check
        return stop_reason(cancel, self.deadline, now)

    def set_hole(self, tokens: list[int], committed: list[bool],
                 confidence: list[float] | None = None) -> None:
        """Replace the hole's tokens (a rewrite's start, several holes' layout, DreamOn's edits
        that change its length)."""
        device = self.x.device
        hole = torch.tensor(tokens, dtype=self.x.dtype, device=device)
        self.x = torch.cat([self.x[: self.start], hole, self.x[self.start + self.n :]])
        self.n = len(tokens)
        self.committed = torch.tensor(committed, dtype=torch.bool, device=device)
        if confidence is None:
            confidence = [math.nan] * self.n
        self.confidence = torch.tensor(confidence, dtype=torch.float32, device=device)

    @property
    def hole_end(self) -> int:
        """Where the hole ends in the canvas."""
        return self.start + self.n

    def hole_tokens(self) -> list[int]:
        return self.x[self.start : self.hole_end].tolist()

    def masked(self) -> Tensor:
        return ~self.committed

    def committed_tokens(self) -> dict[int, int]:
        """The committed tokens by hole position."""
        tokens, committed = self.hole_tokens(), self.committed.tolist()
        return {i: t for i, (t, c) in enumerate(zip(tokens, committed, strict=True)) if c}

    def record(self, draft: Draft) -> Draft:
        """`draft`, done once its text holds the end of the unit (engine.text.units.settled)."""
        self.last = settled(draft, self.until)
        return self.last

    def close(self) -> None:
        """Release what it holds: a draft generator is closed; tensors go with it."""
        close = getattr(self.drafts, "close", None)
        if close is not None:
            close()


def stop_reason(cancel: Callable[[], bool] | None, deadline: float | None,
                now: float | None = None) -> str | None:
    """Why a request ends before its next pass: "cancelled", "deadline" (`time.monotonic()`
    is past `deadline`), or None: it goes on."""
    if cancel is not None and cancel():
        return "cancelled"
    if deadline is not None and (time.monotonic() if now is None else now) > deadline:
        return "deadline"
    return None


def empty_draft(reason: str) -> Draft:
    """The last Draft of a request that ran no pass."""
    return Draft(step=0, token_ids=[], committed=0, text="", done=True, finish_reason=reason)
