"""The runner: every forward pass a request takes runs here, alone or in a batch.

A request being decoded is a `Live`: its family's `Steps` (engine.decode.families.Decoder.start),
the unit its client shows (`until`, engine.text.units) and what stops it early (a cancel, a
deadline). `Runner.step` advances a set of them by one forward pass each: the full passes of
masked holes run as one padded batch (right padding, padded keys masked out, so each row
computes what it would alone), every other step alone, one after another.

The in-process `Engine` streams one request as a batch of one (`Runner.drafts`); the resident
engine's scheduler (engine.serve.scheduler) chooses which requests step in each round and
hands them to `Runner.step`. Both stop a request with `Live.stop_reason` and `Live.end`, so a
cancelled or late request ends the same way wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

import torch
from torch import nn

from engine.decode.denoise import MaskedDenoiser
from engine.decode.kv_cache import batch_row
from engine.text.units import settled
from engine.threads import ThreadPolicy
from engine.types import Draft, UnitEnd


class Steps(Protocol):
    """One request being decoded, one forward pass at a time: a `MaskedDenoiser`, or a
    family's draft generator as `DraftSteps`."""

    def step(self) -> Draft:
        """Run the next forward pass alone; the Draft after it (the last has done=True)."""
        ...

    def final(self, reason: str) -> Draft:
        """The last Draft of a request ended from outside: what it has, done, `reason`."""
        ...

    def close(self) -> None: ...


class DraftSteps:
    """A draft generator that yields one Draft per forward pass (the AR baseline, the block
    family) as Steps."""

    def __init__(self, drafts: Iterator[Draft]) -> None:
        self.drafts = drafts
        self.last: Draft | None = None

    def step(self) -> Draft:
        draft = next(self.drafts, None)
        self.last = draft if draft is not None else self.final("stop")
        return self.last

    def final(self, reason: str) -> Draft:
        if self.last is None:
            return empty_draft(reason)
        return replace(self.last, done=True, finish_reason=reason)

    def close(self) -> None:
        close = getattr(self.drafts, "close", None)
        if close is not None:
            close()


def empty_draft(reason: str) -> Draft:
    """The last Draft of a request that ran no pass."""
    return Draft(step=0, token_ids=[], committed=0, text="", done=True, finish_reason=reason)


def stop_reason(cancel: Callable[[], bool] | None, deadline: float | None,
                now: float | None = None) -> str | None:
    """Why a request ends before its next pass: "cancelled", "deadline" (`time.monotonic()`
    is past `deadline`), or None: it goes on."""
    if cancel is not None and cancel():
        return "cancelled"
    if deadline is not None and (time.monotonic() if now is None else now) > deadline:
        return "deadline"
    return None


class Live:
    """A request being decoded: its Steps, the unit its client shows, and what ends it early."""

    def __init__(self, steps: Steps, until: UnitEnd | None = None,
                 cancel: Callable[[], bool] | None = None, deadline: float | None = None,
                 alone: bool = False) -> None:
        """`deadline`: a `time.monotonic()` past which it ends ("deadline"). `alone`: its
        passes never share a batch (a large canvas would make every row as wide as itself)."""
        self.steps = steps
        self.until = until
        self.cancel = cancel
        self.deadline = deadline
        self.alone = alone
        self.last: Draft | None = None  # the latest Draft it gave

    def stop_reason(self, now: float | None = None) -> str | None:
        return stop_reason(self.cancel, self.deadline, now)

    def end(self, reason: str) -> Draft:
        """Its last Draft, ended from outside ("cancelled", "deadline")."""
        self.last = self.steps.final(reason)
        return self.last

    def record(self, draft: Draft) -> Draft:
        """`draft`, done once its text holds the end of the unit (engine.text.units.settled)."""
        self.last = settled(draft, self.until)
        return self.last

    def batchable(self) -> bool:
        return (not self.alone and isinstance(self.steps, MaskedDenoiser)
                and self.steps.batchable())

    def close(self) -> None:
        self.steps.close()


@dataclass
class Stepped:
    """One Live's step: its Draft, or the error its step raised; when its pass ran."""

    draft: Draft | None
    error: Exception | None
    started: float  # time.monotonic()
    ended: float
    batched: bool  # its pass ran in a batch with others'


class Runner:
    def __init__(self, model: nn.Module, batch: bool = True,
                 threads: ThreadPolicy | None = None) -> None:
        """`batch`: whether several holes' full passes may run as one. Not for an int8
        model: its activations are quantized with one scale per pass, so a canvas batched
        with others would get another completion than alone (on the CPU, where it runs, a
        batch costs what its rows cost alone anyway). `threads`: the CPU thread policy
        (engine.threads), applied before each round of passes; None on a GPU."""
        self.model = model
        self.batch = batch
        self.threads = threads

    def step(self, lives: list[Live]) -> list[Stepped]:
        """Advance every one of `lives` by one forward pass; what each gave, in order. A step
        that raises costs its own request, not the others'."""
        if self.threads is not None:
            self.threads.before_pass()
        batch = ([live for live in lives if live.batchable()]
                 if self.batch and len(lives) > 1 else [])
        done: dict[int, Stepped] = {}
        if len(batch) > 1:
            started = time.monotonic()
            failed: Exception | None = None
            try:
                logits = self._batched_forward([live.steps for live in batch])
            except Exception as exc:  # every row of the pass fails with it
                logits, failed = [], exc
            results = []
            for i, live in enumerate(batch):
                draft, error = None, failed
                if failed is None:
                    try:
                        draft = live.record(live.steps.advance(logits[i]))
                    except Exception as exc:
                        error = exc
                results.append((live, draft, error))
            ended = time.monotonic()
            for live, draft, error in results:
                done[id(live)] = Stepped(draft, error, started, ended, True)
        for live in lives:
            if id(live) in done:
                continue
            started = time.monotonic()
            try:
                done[id(live)] = Stepped(live.record(live.steps.step()), None, started,
                                         time.monotonic(), False)
            except Exception as exc:
                done[id(live)] = Stepped(None, exc, started, time.monotonic(), False)
        return [done[id(live)] for live in lives]

    def drafts(self, live: Live) -> Iterator[Draft]:
        """`live`'s Drafts, stepped alone (a batch of one) until it ends or is stopped; the
        last has done=True."""
        try:
            while True:
                reason = live.stop_reason()
                if reason is not None:
                    yield live.end(reason)
                    return
                (stepped,) = self.step([live])
                if stepped.error is not None:
                    raise stepped.error
                assert stepped.draft is not None
                yield stepped.draft
                if stepped.draft.done:
                    return
        finally:
            live.close()

    def _batched_forward(self, holes: list[MaskedDenoiser]) -> list[torch.Tensor]:
        """One forward pass over every hole's canvas; each hole's logits."""
        inputs = [hole.full_pass_input() for hole in holes]
        lengths = [x.shape[0] for x, _ in inputs]
        width = max(lengths)
        first_x = inputs[0][0]
        x = torch.zeros(len(holes), width, dtype=first_x.dtype, device=first_x.device)
        valid = torch.zeros(len(holes), width, dtype=torch.bool, device=first_x.device)
        for i, ((ids, _), n) in enumerate(zip(inputs, lengths, strict=True)):
            x[i, :n] = ids
            valid[i, :n] = True
        # Logits only for the rows some hole reads (the vocabulary projection is costly).
        first = min(rows[0] for _, rows in inputs)
        last = max(rows[1] for _, rows in inputs)
        with torch.inference_mode():
            raw, kv = self.model(x, key_valid=valid, logit_rows=(first, last))
            return [hole.hole_from_full(raw[i : i + 1], batch_row(kv, i, n), offset=first)
                    for i, (hole, n) in enumerate(zip(holes, lengths, strict=True))]
