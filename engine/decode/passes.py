"""Which canvas rows a masked-family pass runs, and which of its outputs are a hole's logits.

A model that shifts logits (`ModelConfig.shift_logits`) predicts position p from the output
at p - 1, so the rows a pass reads are one before the positions it fills. A cached pass runs
only the live span (the positions whose outputs change as the hole fills in) against the
context cache's keys/values (engine.decode.kv_cache); the denoiser (engine.decode.denoise)
plans its passes with these.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.decode.kv_cache import ContextCache
from engine.models.transformer import LayerKV, Transformer


def logit_rows(p0: int, p1: int, shifted: bool) -> tuple[int, int]:
    """Canvas rows [a, b) whose raw outputs give the logits of canvas positions [p0, p1)."""
    if not shifted:
        return p0, p1
    if p0 == 0:
        return 0, max(p1 - 1, 1)  # position 0 keeps its own logit (shift_logits)
    return p0 - 1, p1 - 1


def rows_to_logits(raw: Tensor, p0: int, p1: int, shifted: bool) -> Tensor:
    """Logits [p1 - p0, V] of positions [p0, p1) from raw outputs [r, V] of their
    `logit_rows`."""
    if shifted and p0 == 0:
        return torch.cat([raw[:1], raw])[:p1]
    return raw


def live_span(
    p0: int, p1: int, shifted: bool, window: int = 0, length: int = 0
) -> tuple[int, int]:
    """Canvas positions [a, b) a cached pass runs to get the logits of positions [p0, p1),
    widened by `window` positions on each side within a canvas of `length`."""
    a = p0 - 1 if shifted and p0 > 0 else p0
    if window:
        return max(0, a - window), min(length, p1 + window)
    return a, p1


def hole_logits(
    model: Transformer, x: Tensor, span: tuple[int, int], cache: ContextCache | None,
    live: tuple[int, int] | None = None,
) -> tuple[Tensor, list[LayerKV]]:
    """Logits [p1 - p0, V] of canvas positions span = [p0, p1) of canvas `x` [S], in the
    model's own convention, and the keys/values the pass computed.

    Without a cache the whole canvas runs; with one only the positions `live` do (default:
    the `live_span` of `span`).
    """
    shifted = model.cfg.shift_logits
    p0, p1 = span
    r0, r1 = logit_rows(p0, p1, shifted)
    if cache is None:
        raw, kv = model(x[None], logit_rows=(r0, r1))
    else:
        a, b = live if live is not None else live_span(p0, p1, shifted)
        past, past_positions = cache.outside((a, b))
        positions = torch.arange(a, b, device=x.device)[None]
        raw, kv = model(x[None, a:b], positions, past, past_positions,
                        logit_rows=(r0 - a, r1 - a))
    return rows_to_logits(raw[0], p0, p1, shifted), kv
