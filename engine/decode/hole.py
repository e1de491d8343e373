"""A masked hole's state, and the rules that decide what a step commits besides the sampler.

The sampler (engine.decode.samplers) proposes a token for every masked position and picks the ones
to commit; these rules add to or replace its picks, and edit the hole after it:

- the stop run: the trailing run of stop tokens is committed at once, but for its first
  STOP_RUN_MARGIN positions, once any of it is committed;
- early stop: everything after the first committed stop token becomes pad;
- DreamOn's edits: a committed expand token becomes two masks, a committed stop is deleted;
- a hole of choices (engine.text.choices) commits where the choices still possible agree.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from engine.decode.samplers import allowed_mask
from engine.text.canvas import Canvas
from engine.text.choices import Choices

# The model's first guess at where a hole ends is often a token or two short: the positions
# just before the stop run stay masked and are denoised as usual (without the margin the
# stop run cut completions short; docs/performance.md).
STOP_RUN_MARGIN = 2


class Hole:
    """The canvas and which hole positions are committed; the loop's mutable state."""

    def __init__(self, canvas: Canvas, device: torch.device) -> None:
        self.x = torch.tensor(canvas.ids, device=device)
        self.start = canvas.hole_start
        self.n = canvas.hole_len
        self.committed = torch.zeros(self.n, dtype=torch.bool, device=device)
        # Each position's confidence when the sampler committed it; NaN where no sampler did
        # (masked still, or a rewrite's kept token).
        self.confidence = torch.full((self.n,), math.nan, device=device)

    @property
    def end(self) -> int:
        return self.start + self.n

    def tokens(self) -> list[int]:
        return self.x[self.start : self.end].tolist()

    def masked(self) -> Tensor:
        return ~self.committed

    def committed_tokens(self) -> dict[int, int]:
        """The committed tokens by position."""
        tokens, committed = self.tokens(), self.committed.tolist()
        return {i: t for i, (t, c) in enumerate(zip(tokens, committed, strict=True)) if c}

    def rebuild(self, tokens: list[int], committed: list[bool],
                confidence: list[float] | None = None) -> None:
        """Replace the hole (DreamOn edits change its length)."""
        device = self.x.device
        hole = torch.tensor(tokens, dtype=self.x.dtype, device=device)
        self.x = torch.cat([self.x[: self.start], hole, self.x[self.end :]])
        self.n = len(tokens)
        self.committed = torch.tensor(committed, dtype=torch.bool, device=device)
        if confidence is None:
            confidence = [math.nan] * self.n
        self.confidence = torch.tensor(confidence, dtype=torch.float32, device=device)


def follow_choices(choices: Choices, hole: Hole, logits: Tensor, lo: int) -> None:
    """Forbid at the first masked position lo (the logits' first row) the tokens no choice
    that agrees with the committed ones holds there."""
    live = choices.live(hole.committed_tokens())
    kept = allowed_mask(choices.allowed_at(live, lo), logits.shape[1], logits.device)
    logits[0, ~kept] = float("-inf")  # type: ignore[operator]


def choose(choices: Choices, hole: Hole, pad_id: int | None, lo: int, proposed: Tensor,
           confidence: Tensor) -> Tensor:
    """What a step commits in a hole of choices: the first masked position lo, as the
    sampler proposes it, then every position on which the choices still possible agree,
    as they hold it (with no confidence of the model's: it did not choose them). The
    model decides where the choices part, left to right; a choice once begun is written
    to its end at once. Committing the surest positions first instead let a stop token
    the model guessed at the second position (a one-token word) rule out a longer word
    it had begun."""
    committed = hole.committed_tokens()
    committed[lo] = int(proposed[lo])
    live = choices.live(committed)
    commit = torch.zeros_like(hole.committed)
    commit[lo] = True
    for position in hole.masked().nonzero().flatten().tolist():
        held = {s[position] if position < len(s) else pad_id for s in live}
        if position != lo and len(held) == 1:
            proposed[position] = held.pop()
            confidence[position] = math.nan
            commit[position] = True
    return commit


def stop_run(region: Tensor, committed: Tensor, commit: Tensor, proposed: Tensor,
              stop_ids: Tensor) -> Tensor:
    """Positions to commit with this step's: the trailing run of stop tokens (committed or
    proposed) when any of it is committed now or before, but for its first STOP_RUN_MARGIN
    positions; else none."""
    tokens = torch.where(committed, region, proposed)
    is_stop = torch.isin(tokens, stop_ids)
    run = int(torch.cumprod(is_stop.flip(0).int(), 0).sum())
    extra = torch.zeros_like(commit)
    if run and bool((commit | committed)[-run:].any()):
        settled = run - STOP_RUN_MARGIN
        if settled > 0:
            extra[-settled:] = ~committed[-settled:]
    return extra


def stop_early(hole: Hole, stop_ids: set[int], pad_id: int | None) -> bool:
    """Pad everything after the first committed stop token; whether there is one."""
    return stop_early_in(hole.x[hole.start : hole.end], hole.committed, stop_ids, pad_id)


def stop_early_in(region: Tensor, committed: Tensor, stop_ids: set[int], pad_id: int | None
                  ) -> bool:
    """`stop_early` on the positions `region` of a hole (views, edited in place), with their
    `committed` flags: one hole of several in a canvas (engine.decode.holes)."""
    is_stop = torch.zeros_like(committed)
    for t in stop_ids:
        is_stop |= region == t
    is_stop &= committed
    if not bool(is_stop.any()):
        return False
    first = int(is_stop.nonzero()[0])
    if pad_id is not None:
        region[first + 1 :] = pad_id
    committed[first + 1 :] = True
    return True


def edit_dreamon(
    hole: Hole, expand_id: int, stop_ids: set[int], max_length: int, mask_id: int
) -> tuple[bool, bool]:
    """DreamOn: committed expand → two masks (while there is room), committed stop → deleted.

    Returns (whether the hole changed length, whether a slot was deleted).
    """
    tokens, committed = hole.tokens(), hole.committed.tolist()
    confidence = hole.confidence.tolist()
    room = max_length - hole.x.shape[0]
    new_tokens: list[int] = []
    new_committed: list[bool] = []
    new_confidence: list[float] = []
    deleted = False
    for tok, done, conf in zip(tokens, committed, confidence, strict=True):
        if done and tok == expand_id and room > 0:
            new_tokens += [mask_id, mask_id]
            new_committed += [False, False]
            new_confidence += [math.nan, math.nan]
            room -= 1
        elif done and tok == expand_id:
            new_tokens.append(mask_id)  # no room left: the slot stays a single mask
            new_committed.append(False)
            new_confidence.append(math.nan)
        elif done and tok in stop_ids:
            deleted = True
        else:
            new_tokens.append(tok)
            new_committed.append(done)
            new_confidence.append(conf)
    if new_tokens == tokens and new_committed == committed:
        return False, deleted
    hole.rebuild(new_tokens, new_committed, new_confidence)
    return len(new_tokens) != len(tokens), deleted
