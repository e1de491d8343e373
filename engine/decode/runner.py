"""The runner: every forward pass a request takes runs here, alone or in a batch.

A request being decoded is a `Sequence` (engine.decode.sequence): the masked family's canvas
and rules, or another family's draft generator, the unit its client shows (`until`,
engine.text.units) and what stops it early (a cancel, a deadline). `Runner.step` advances a
set of them by one forward pass each: the full passes of masked holes run as one padded batch
(right padding, padded keys masked out, so each row computes what it would alone), every
other step alone, one after another (`step_alone`).

The in-process `Engine` streams one request as a batch of one (`Runner.drafts`); the resident
engine's scheduler (engine.serve.scheduler) chooses which requests step in each round and
hands them to `Runner.step`. Both stop a request with `Sequence.stop_reason` and `end`, so a
cancelled or late request ends the same way wherever it runs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace

import torch
from torch import nn

from engine.decode import denoise
from engine.decode.kv_cache import batch_row
from engine.decode.sequence import Sequence, empty_draft
from engine.threads import ThreadPolicy
from engine.types import Draft


def step_alone(model: nn.Module, seq: Sequence) -> Draft:
    """Run `seq`'s next forward pass alone; the Draft after it (the last has done=True)."""
    if seq.rules is not None:
        return denoise.step_alone(model, seq)
    draft = next(seq.drafts, None)
    seq.drafted = draft if draft is not None else final(seq, "stop")
    return seq.drafted


def final(seq: Sequence, reason: str) -> Draft:
    """The last Draft of a request ended from outside: what it has, done, `reason`."""
    if seq.rules is not None:
        return denoise.final(seq, reason)
    if seq.drafted is None:
        return empty_draft(reason)
    return replace(seq.drafted, done=True, finish_reason=reason)


def end(seq: Sequence, reason: str) -> Draft:
    """Its last Draft, ended from outside ("cancelled", "deadline")."""
    seq.last = final(seq, reason)
    return seq.last


def batchable(seq: Sequence) -> bool:
    """Whether its next pass may share a batch: a masked hole's plain full pass."""
    return not seq.alone and seq.rules is not None and denoise.batchable(seq)

@dataclass
class Stepped:
    """One Sequence's step: its Draft, or the error its step raised; when its pass ran."""

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

    def step(self, seqs: list[Sequence]) -> list[Stepped]:
        """Advance every one of `seqs` by one forward pass; what each gave, in order. A step
        that raises costs its own request, not the others'."""
        if self.threads is not None:
            self.threads.before_pass()
        batch = ([seq for seq in seqs if batchable(seq)]
                 if self.batch and len(seqs) > 1 else [])
        done: dict[int, Stepped] = {}
        if len(batch) > 1:
            started = time.monotonic()
            failed: Exception | None = None
            try:
                logits = self._batched_forward(batch)
            except Exception as exc:  # every row of the pass fails with it
                logits, failed = [], exc
            results = []
            for i, seq in enumerate(batch):
                draft, error = None, failed
                if failed is None:
                    try:
                        draft = seq.record(denoise.advance(self.model, seq, logits[i]))
                    except Exception as exc:
                        error = exc
                results.append((seq, draft, error))
            ended = time.monotonic()
            for seq, draft, error in results:
                done[id(seq)] = Stepped(draft, error, started, ended, True)
        for seq in seqs:
            if id(seq) in done:
                continue
            started = time.monotonic()
            try:
                done[id(seq)] = Stepped(seq.record(step_alone(self.model, seq)), None, started,
                                        time.monotonic(), False)
            except Exception as exc:
                done[id(seq)] = Stepped(None, exc, started, time.monotonic(), False)
        return [done[id(seq)] for seq in seqs]

    def drafts(self, seq: Sequence) -> Iterator[Draft]:
        """`seq`'s Drafts, stepped alone (a batch of one) until it ends or is stopped; the
        last has done=True."""
        try:
            while True:
                reason = seq.stop_reason()
                if reason is not None:
                    yield end(seq, reason)
                    return
                (stepped,) = self.step([seq])
                if stepped.error is not None:
                    raise stepped.error
                assert stepped.draft is not None
                yield stepped.draft
                if stepped.draft.done:
                    return
        finally:
            seq.close()

    def _batched_forward(self, holes: list[Sequence]) -> list[torch.Tensor]:
        """One forward pass over every hole's canvas; each hole's logits."""
        inputs = [denoise.full_pass_input(self.model, hole) for hole in holes]
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
            return [denoise.hole_from_full(self.model, hole, raw[i : i + 1], batch_row(kv, i, n),
                                           offset=first)
                    for i, (hole, n) in enumerate(zip(holes, lengths, strict=True))]
