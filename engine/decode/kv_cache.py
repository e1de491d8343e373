"""The key/value caches a masked hole's passes reuse, the helpers that cut and join a
model's per-layer keys/values (`LayerKV`, positions on dimension 2), and which canvas rows a
pass runs.

- `ContextCache`: one request's keys/values of every canvas position from its last full
  pass; a cached pass runs only the live span and attends to the rest (engine.decode.denoise).
- `PrefixCache`: recent canvases' prefix keys/values by token ids, shared by successive
  requests (a keystroke's prefix is mostly the previous one's).
- The rows of a pass (`logit_rows`, `live_span`, `hole_logits`): a model that shifts logits
  (`ModelConfig.shift_logits`) predicts position p from the output at p - 1, so the rows a
  pass reads are one before the positions it fills. A cached pass runs only the live span
  (the positions whose outputs change as the hole fills in) against the context cache; the
  masked step (engine.decode.denoise) plans its passes with these.
"""

from __future__ import annotations

import torch
from torch import Tensor

from engine.models.transformer import LayerKV, Transformer


def joined(past: list[LayerKV], new: list[LayerKV]) -> list[LayerKV]:
    """Every layer's `past` positions followed by its `new` ones."""
    return [LayerKV(torch.cat([p.k, n.k], 2), torch.cat([p.v, n.v], 2))
            for p, n in zip(past, new, strict=True)]


def first_positions(kv: list[LayerKV], n: int, copy: bool = False) -> list[LayerKV]:
    """Every layer's first `n` positions (views, or copies that outlive `kv`'s storage)."""
    if copy:
        return [LayerKV(layer.k[:, :, :n].clone(), layer.v[:, :, :n].clone()) for layer in kv]
    return [LayerKV(layer.k[:, :, :n], layer.v[:, :, :n]) for layer in kv]


def batch_row(kv: list[LayerKV], i: int, n: int) -> list[LayerKV]:
    """Row `i` of a batched pass's keys/values, its first `n` positions (its own canvas)."""
    return [LayerKV(layer.k[i : i + 1, :, :n], layer.v[i : i + 1, :, :n]) for layer in kv]


class ContextCache:
    """Every canvas position's keys/values from the last full pass; a cached pass attends to
    those outside its live span."""

    def __init__(self, kv: list[LayerKV], length: int) -> None:
        self.kv, self.length = kv, length
        self._span: tuple[int, int] | None = None
        self.past: list[LayerKV] = []
        self.positions = torch.empty(0)

    def refreshed(self, span: tuple[int, int], kv: list[LayerKV]) -> ContextCache:
        """This cache with positions [a, b) replaced by `kv` (a window's new keys/values)."""
        a, b = span
        layers = []
        for old, new in zip(self.kv, kv, strict=True):
            k, v = old.k.clone(), old.v.clone()
            k[:, :, a:b], v[:, :, a:b] = new.k, new.v
            layers.append(LayerKV(k, v))
        return ContextCache(layers, self.length)

    def outside(self, span: tuple[int, int]) -> tuple[list[LayerKV], Tensor]:
        """Keys/values and positions of the positions outside `span` (kept while it stays)."""
        if span != self._span:
            a, b = span
            device = self.kv[0].k.device
            ctx = torch.cat([torch.arange(0, a, device=device),
                             torch.arange(b, self.length, device=device)])
            self.past = [LayerKV(layer.k[:, :, ctx], layer.v[:, :, ctx]) for layer in self.kv]
            self.positions, self._span = ctx[None], span
        return self.past, self.positions


class PrefixCache:
    """Recent canvases' prefix keys/values by token ids: least recently used go first."""

    MIN_REUSE = 16  # shorter shared prefixes are not worth a separate pass

    def __init__(self, max_entries: int = 32, max_bytes: int = 256 << 20) -> None:
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self.entries: list[tuple[list[int], list[LayerKV]]] = []  # most recent last
        self.hits = self.misses = 0

    def lookup(self, ids: list[int]) -> tuple[int, list[LayerKV] | None]:
        """The longest cached prefix shared with `ids`: its length and its keys/values."""
        best, best_i = 0, -1
        for i, (cached, _) in enumerate(self.entries):
            n = _common_prefix(cached, ids)
            if n > best:
                best, best_i = n, i
        if best < self.MIN_REUSE:
            self.misses += 1
            return 0, None
        self.hits += 1
        entry = self.entries.pop(best_i)
        self.entries.append(entry)
        return best, first_positions(entry[1], best)

    def store(self, ids: list[int], kv: list[LayerKV]) -> None:
        self.entries = [e for e in self.entries if e[0] != ids]
        self.entries.append((ids, kv))
        while self.entries and (len(self.entries) > self.max_entries
                                or self.nbytes() > self.max_bytes):
            self.entries.pop(0)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for _, kv in self.entries for layer in kv
                   for t in (layer.k, layer.v))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


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
