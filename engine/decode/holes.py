"""Several holes of one request (engine.types.HolesRequest): jointly in one canvas, or one
after another where the family cannot do better.

Jointly (`HolesDenoiser`, the masked family). The canvas is `[BOS] prefix MASK*n0 kept1
MASK*n1 ... suffix` (engine.text.canvas.holes_layout); the denoiser's hole is the span from the
first hole's start to the last one's end, with the kept code's tokens committed from the start
(as a rewrite keeps its tokens), so every pass sees every hole as it forms and the sampler
commits across all of them at once. The rules that end a hole apply to each hole alone:

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

One after another (`SequentialHoles`: the AR baseline, the block family, and DreamOn, whose
growing and shrinking hole would move the kept code between holes): hole k is an InfillRequest
whose prefix holds the holes before it filled and whose suffix is the code after it with the
later holes left empty. The drafts count every hole's passes.

A draft's `holes` holds every hole's committed text up to its first gap or stop token (the
first hole's without the healed characters, CRLF restored as in engine.text.canvas); its
`text` the span as it stands, kept code and holes' texts in place; its `token_ids` every
hole's completion tokens, in order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from engine.decode.denoise import MaskedDenoiser
from engine.decode.hole import stop_early_in, stop_run
from engine.decode.runner import Steps
from engine.text.canvas import HolesCanvas, completion_text, to_lf
from engine.text.stops import completion_ids
from engine.text.units import LINE, settled, unit_ended
from engine.types import Draft, HolesRequest, InfillRequest, UnitEnd, score_of


def units_of(request: HolesRequest) -> tuple[UnitEnd | None, ...]:
    """Each hole's unit end (None: the hole's own end)."""
    if request.until is None:
        return (None,) * len(request.max_tokens)
    if len(request.until) != len(request.max_tokens):
        raise ValueError(f"until: expected one unit (or null) per hole ({len(request.max_tokens)}"
                         f"), got {len(request.until)}")
    return tuple(request.until)


def spliced(texts: Sequence[str], holes: Sequence[str]) -> str:
    """The code between the prefix and the suffix with `holes` in place (as many as given)."""
    parts = [holes[0]] if holes else []
    for kept, text in zip(texts[1:-1], holes[1:], strict=False):
        parts += [kept, text]
    return "".join(parts)


class HolesDenoiser(MaskedDenoiser):
    """Several holes of one canvas denoised jointly, each ended by its own rules."""

    def __init__(self, *args: Any, layout: HolesCanvas, texts: Sequence[str],
                 units: Sequence[UnitEnd | None], **kwargs: Any) -> None:
        """`args`, `kwargs`: as MaskedDenoiser's, the canvas `layout.canvas`; `texts`: the
        request's; `units`: each hole's unit end."""
        super().__init__(*args, start=(layout.tokens, layout.committed), **kwargs)
        self.holes = layout.holes
        self.heals = layout.heals
        # A later hole's first token completes the text healed from the code before it (the
        # first hole's is the canvas's, applied by MaskedDenoiser's constraints).
        self.firsts: dict[int, Tensor] = {}
        for k, heal in enumerate(layout.heals[1:], start=1):
            if heal:
                first = torch.zeros(self.model.cfg.vocab_size, dtype=torch.bool,
                                    device=self.device)
                first[kwargs["vocab"].ids_starting_with(heal)] = True
                self.firsts[k] = first
        self.texts = [to_lf(text) for text in texts]
        self.units = list(units)
        self.ended = [False] * len(self.holes)  # by a stop token or its unit end

    def _constrained(self, logits: Tensor, lo: int, steps_left: int | None) -> Tensor:
        logits = super()._constrained(logits, lo, steps_left)
        for k, first in self.firsts.items():
            row = self.holes[k][0] - lo
            if 0 <= row < logits.shape[0] and not bool(self.hole.committed[row + lo]):
                logits[row, ~first] = float("-inf")
        return logits

    def _at_least(self, commit: Tensor, confidence: Tensor) -> Tensor:
        # The sampler's one position a step is one per hole: each hole advances at least as
        # fast as it would alone, so the holes together take about the passes of the longest.
        masked = self.hole.masked()
        for a, b in self.holes:
            if bool(masked[a:b].any()) and not bool(commit[a:b].any()):
                scores = confidence[a:b].masked_fill(~masked[a:b], -1.0)
                commit[a + int(scores.argmax())] = True
        return commit

    def _stop_run(self, region: Tensor, commit: Tensor, proposed: Tensor) -> Tensor:
        extra = torch.zeros_like(commit)
        for a, b in self.holes:
            extra[a:b] = stop_run(region[a:b], self.hole.committed[a:b], commit[a:b],
                                  proposed[a:b], self.stop_tensor)
        return extra

    def _no_early_stop(self, logits: Tensor, lo: int) -> None:
        for a, b in self.holes:
            first, end = max(a, lo), min(b, a + self.settings.min_tokens)
            if end > first:
                logits[first - lo : end - lo, self.stop_list] = float("-inf")

    def _after_commit(self) -> None:
        hole = self.hole
        region = hole.x[hole.start : hole.end]
        pad = self.pad_id if self.pad_id is not None else self.stop_list[0]
        for k, (a, b) in enumerate(self.holes):
            if stop_early_in(region[a:b], hole.committed[a:b], self.stop_ids, self.pad_id):
                self.ended[k] = True
            if bool(hole.committed[a:b].all()) or self.units[k] is None:
                continue
            if unit_ended(self.hole_text(k), self.units[k]):
                # The rest of the hole is cut away by the client: pad it, spend no pass on it.
                rest = ~hole.committed[a:b]
            elif self.units[k].kind == LINE and (p := self._first_newline(k)) is not None:
                # A line ends at its first newline: whatever the positions before it become,
                # those after it are cut away.
                rest = ~hole.committed[a:b]
                rest[: p + 1] = False
                if not bool(rest.any()):
                    continue
            else:
                continue
            region[a:b][rest] = pad
            hole.committed[a:b] |= rest
            self.ended[k] = True
        self.stopped = all(self.ended)

    def _first_newline(self, k: int) -> int | None:
        """The first position of hole k committed to a token that holds a newline (the healed
        text of its first token aside: that newline is the line before the hole's)."""
        a, b = self.holes[k]
        tokens = self.hole.x[self.hole.start + a : self.hole.start + b].tolist()
        for p, (token, done) in enumerate(zip(tokens, self.hole.committed[a:b].tolist(),
                                              strict=True)):
            if not done or token in self.stop_ids:
                continue
            text = self.tokenizer.decode([token])
            if p == 0 and self.heals[k]:
                text = text[len(self.heals[k]) :]
            if "\n" in text:
                return p
        return None

    def _hole_ids(self, k: int) -> list[int]:
        a, b = self.holes[k]
        committed = self.hole.committed[a:b].tolist()
        settled_to = next((i for i, c in enumerate(committed) if not c), len(committed))
        return completion_ids(self.hole.x[self.hole.start + a : self.hole.start + a + settled_to]
                              .tolist(), self.stop_ids)

    def hole_text(self, k: int) -> str:
        """Hole k's committed text up to its first gap or stop token, as the user sees it."""
        text = self.tokenizer.decode(self._hole_ids(k))
        if k == 0:
            return completion_text(self.canvas, text)
        if self.heals[k] and text.startswith(self.heals[k]):
            text = text[len(self.heals[k]) :]
        return text.replace("\n", "\r\n") if self.canvas.crlf else text

    def draft(self, done: bool = False, reason: str = "") -> Draft:
        ids: list[int] = []
        confidences: list[float] = []
        committed = 0
        for k, (a, b) in enumerate(self.holes):
            hole_ids = self._hole_ids(k)
            ids += hole_ids
            confidences += [c for c in self.hole.confidence[a : a + len(hole_ids)].tolist()
                            if not math.isnan(c)]
            committed += int(self.hole.committed[a:b].sum())
        holes = tuple(self.hole_text(k) for k in range(len(self.holes)))
        texts = ([text.replace("\n", "\r\n") for text in self.texts] if self.canvas.crlf
                 else self.texts)
        passes = self.passes
        return Draft(step=passes, token_ids=ids, committed=committed,
                     text=spliced(texts, holes), done=done, finish_reason=reason,
                     score=score_of(confidences, passes), holes=holes)


class SequentialHoles:
    """A request's holes filled one after another, each an InfillRequest of `decoder`'s (the
    families that cannot fill them jointly); Steps."""

    def __init__(self, decoder: Any, request: HolesRequest) -> None:
        self.decoder = decoder
        self.request = request
        self.units = units_of(request)
        self.filled: list[str] = []
        self.ids: list[int] = []  # the filled holes' completion tokens
        self.passes = 0  # the filled holes' passes
        self.current: Steps | None = None
        self.last: Draft | None = None

    def _infill(self, k: int) -> InfillRequest:
        r = self.request
        prefix = "".join(t + f for t, f in zip(r.texts, self.filled, strict=False)) + r.texts[k]
        suffix = "".join(r.texts[k + 1 :])
        return InfillRequest(prefix, suffix, r.max_tokens[k], r.settings, r.canvas_length,
                             r.suffix_fraction, self.units[k])

    def step(self) -> Draft:
        k = len(self.filled)
        if self.current is None:
            self.current = self.decoder.start(self._infill(k))
        draft = settled(self.current.step(), self.units[k])
        holes = (*self.filled, draft.text)
        passes = self.passes + draft.step
        mask = self.decoder.config.mask_token_id
        ends = self.decoder.stop_ids() | ({mask} if mask is not None else set())
        ids = self.ids + completion_ids(draft.token_ids, ends)
        if draft.done:
            self.current.close()
            self.current = None
            self.filled.append(draft.text)
            self.ids, self.passes = ids, passes
        done = len(self.filled) == len(self.request.max_tokens)
        self.last = Draft(step=passes, token_ids=ids, committed=len(ids),
                          text=spliced(self.request.texts, holes), done=done,
                          finish_reason=draft.finish_reason if done else "", holes=holes)
        return self.last

    def final(self, reason: str) -> Draft:
        if self.last is None:
            return Draft(step=0, token_ids=[], committed=0, text="", done=True,
                         finish_reason=reason, holes=())
        return Draft(step=self.last.step, token_ids=self.last.token_ids,
                     committed=self.last.committed, text=self.last.text, done=True,
                     finish_reason=reason, holes=self.last.holes)

    def close(self) -> None:
        if self.current is not None:
            self.current.close()
            self.current = None
