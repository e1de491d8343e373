"""Partial rewrites: which of the original's tokens stay, and which are generated again.

Strength is the share of the original's tokens that is generated again; 1.0 is a fresh
infill of the hole (every family), lower values keep the rest of the original in place
(the family's decoder, engine.decode.families, runs the rewrite):

- masked family: one forward pass with the whole selection masked scores every original
  token (the probability the model gives it there); the least likely `strength` share is
  masked again and denoised, the rest is committed. Positions after the original (room for
  a longer rewrite) start masked, so the model may also end early with EOS.
- block family (DiffusionGemma): the canvas starts from the original tokens and a seeded
  `strength` share of them is renoised (the block model has no cheap per-token score).
- ar baseline: it cannot keep tokens inside what it generates, so it always infills afresh.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


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


def least_likely_kept(
    logits: Tensor, hole_start: int, original_ids: list[int], strength: float, hole_len: int,
    mask_id: int,
) -> tuple[list[int], list[bool]]:
    """The masked family's starting hole (tokens, committed flags): the original's tokens
    the model finds likeliest in `logits` (one pass over the canvas with the hole masked)
    are kept, the rest and the room after the original are masked."""
    n = len(original_ids)
    probs = logits[hole_start : hole_start + n].float().softmax(-1)
    scores = probs[torch.arange(n), torch.tensor(original_ids, device=probs.device)].tolist()
    keep = kept_flags(scores, strength)
    tokens = [t if k else mask_id for t, k in zip(original_ids, keep, strict=True)]
    tokens += [mask_id] * (hole_len - n)
    return tokens, keep + [False] * (hole_len - n)


def seeded_kept(n: int, strength: float, seed: int) -> list[bool]:
    """The block family's pinned flags: a seeded random `strength` share is renoised."""
    generator = torch.Generator().manual_seed(seed)
    return kept_flags(torch.rand(n, generator=generator).tolist(), strength)
