"""Rewrites: regenerate existing text between a prefix and a suffix at an edit strength.

Strength is the share of the original's tokens that is generated again; 1.0 is a fresh
infill of the hole (every family), lower values keep the rest of the original in place:

- masked family: one forward pass with the whole selection masked scores every original
  token (the probability the model gives it there); the least likely `strength` share is
  masked again and denoised, the rest is committed. Positions after the original (room for
  a longer rewrite) start masked, so the model may also end early with EOS.
- block family (DiffusionGemma): the canvas starts from the original tokens and a seeded
  `strength` share of them is renoised (the block model has no cheap per-token score).
- ar baseline: it cannot keep tokens inside what it generates, so it always infills afresh.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch

from engine.canvas import layout
from engine.denoise import denoise
from engine.types import Draft, SamplerSettings

if TYPE_CHECKING:
    from engine.engine import Engine


def default_max_tokens(original_tokens: int) -> int:
    """Room for a rewrite of an `original_tokens`-token selection: half again, at least 8."""
    return original_tokens + max(8, original_tokens // 2)


def kept_flags(scores: list[float], strength: float) -> list[bool]:
    """Which tokens stay: all but the `strength` share with the lowest scores (ties: later)."""
    n = len(scores)
    redo = min(n, math.ceil(round(strength * n, 6)))
    order = sorted(range(n), key=lambda i: (scores[i], -i))
    flags = [True] * n
    for i in order[:redo]:
        flags[i] = False
    return flags


def rewrite_stream(
    engine: Engine,
    prefix: str,
    suffix: str,
    original: str,
    *,
    strength: float,
    max_tokens: int | None,
    settings: SamplerSettings,
    canvas_length: int,
    cancel: Callable[[], bool] | None,
) -> Iterator[Draft]:
    """Drafts of the rewritten text (the last has done=True); see the module docstring."""
    if not 0.0 <= strength <= 1.0:
        raise ValueError(f"strength must be in [0, 1], got {strength}")
    original_ids = engine.tokenizer.encode(original.replace("\r\n", "\n"))
    n = len(original_ids)
    hole_len = max(max_tokens or default_max_tokens(n), n)
    family = engine.config.family
    if strength >= 1.0 or n == 0 or family == "ar":
        yield from engine.infill_stream(prefix, suffix, hole_len, settings=settings,
                                        canvas_length=canvas_length, cancel=cancel)
        return
    if family == "block":
        yield from _block(engine, prefix, suffix, original_ids, strength, hole_len, settings,
                          canvas_length, cancel)
        return
    # No token healing: the hole starts exactly where the original does.
    canvas = layout(engine.tokenizer, engine.config, prefix, suffix, hole_len, canvas_length)
    logits = engine.forward_logits(torch.tensor([canvas.ids]))[0]
    probs = logits[canvas.hole_start : canvas.hole_start + n].float().softmax(-1)
    scores = probs[torch.arange(n), torch.tensor(original_ids, device=probs.device)].tolist()
    keep = kept_flags(scores, strength)
    mask = engine.config.mask_token_id
    tokens = [t if k else mask for t, k in zip(original_ids, keep, strict=True)]
    tokens += [mask] * (hole_len - n)
    committed = keep + [False] * (hole_len - n)
    # The scoring pass is a forward pass too: drafts count it.
    for draft in denoise(engine.model, engine.config, engine.tokenizer, canvas, settings,
                         vocab=engine.vocab, cancel=cancel, start=(tokens, committed)):
        yield dataclasses.replace(draft, step=draft.step + 1)


def _block(
    engine: Engine,
    prefix: str,
    suffix: str,
    original_ids: list[int],
    strength: float,
    hole_len: int,
    settings: SamplerSettings,
    canvas_length: int,
    cancel: Callable[[], bool] | None,
) -> Iterator[Draft]:
    from engine.models.block import denoise_block

    canvas = engine._canvas(prefix, suffix, hole_len, canvas_length)
    prefix_ids, suffix_ids = canvas.context_ids
    generator = torch.Generator().manual_seed(settings.seed)
    scores = torch.rand(len(original_ids), generator=generator).tolist()
    pinned = kept_flags(scores, strength)
    for draft in denoise_block(engine.model, engine.checkpoint, prefix_ids, suffix_ids,
                               hole_len, settings, cancel, start_ids=original_ids,
                               pinned=pinned):
        if canvas.crlf:
            draft = dataclasses.replace(draft, text=draft.text.replace("\n", "\r\n"))
        yield draft
