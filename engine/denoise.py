"""The masked family's denoising loop: fill a canvas's hole in a few parallel steps.

Each step runs the model, proposes a token for every hole position and commits the ones the
sampler picks (engine.samplers); committed tokens never change. The loop yields a `Draft`
after every step; the last one has `done=True` and a `finish_reason`.

Variable length. A stop token (EOS/pad) committed inside the hole ends the completion there:
every position after it becomes pad at once, so it costs no further steps. With
`stop_early=False` (the oracle-length protocol) stop tokens are forbidden and the hole is
filled completely. A DreamOn checkpoint (`config.expand_token_id`) edits the hole instead: a
position committed as expand becomes two masks while the canvas has room, and a position
committed as a stop token is deleted.

Context cache. Step 0 runs the whole canvas and keeps every layer's keys/values of the
context. Later steps run only the live span, the hole plus, for models that shift logits,
the token just before it (its output fills the first hole position, and that output changes
as the hole fills in, so it must be a query again; its key/value is left out of the cache so
it is not attended twice). The live span attends to the cached context, which went stale
when the hole changed; every `cache_refresh` steps (R) a full pass refreshes it. R=1 is a
full pass every step: exactly the uncached computation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

import torch
from torch import Tensor

from engine.canvas import Canvas, VocabText, completion_text
from engine.config import ModelConfig
from engine.models.transformer import LayerKV, Transformer, shift_logits
from engine.samplers import adjust_logits, step
from engine.tokenizer import Tokenizer
from engine.types import Draft, SamplerSettings


class ContextCache:
    """Keys/values of every canvas position outside the live span, from the last full pass."""

    def __init__(self, kv: list[LayerKV], span: tuple[int, int], length: int) -> None:
        a, b = span
        device = kv[0].k.device
        ctx = torch.cat([torch.arange(0, a, device=device), torch.arange(b, length, device=device)])
        self.past = [LayerKV(layer.k[:, :, ctx], layer.v[:, :, ctx]) for layer in kv]
        self.positions = ctx[None]


def live_span(hole_start: int, hole_end: int, shifted: bool) -> tuple[int, int]:
    """Canvas positions [a, b) whose outputs produce the hole's logits."""
    if shifted and hole_start > 0:
        return hole_start - 1, hole_end
    return hole_start, hole_end


def hole_logits(
    model: Transformer, x: Tensor, hole: tuple[int, int], cache: ContextCache | None
) -> tuple[Tensor, list[LayerKV]]:
    """Logits [n, V] of the hole positions of canvas `x` [S], in the model's own convention.

    Without a cache the whole canvas runs; with one only the live span does.
    """
    shifted = model.cfg.shift_logits
    a, b = live_span(*hole, shifted) if cache is not None else (0, x.shape[0])
    if cache is None:
        raw, kv = model(x[None])
    else:
        positions = torch.arange(a, b, device=x.device)[None]
        raw, kv = model(x[None, a:b], positions, cache.past, cache.positions)
    logits = shift_logits(raw)[0] if shifted else raw[0]
    return logits[hole[0] - a : hole[1] - a], kv


def completion_ids(token_ids: list[int], stop_ids: set[int]) -> list[int]:
    """The hole's tokens up to the first stop token."""
    for i, t in enumerate(token_ids):
        if t in stop_ids:
            return token_ids[:i]
    return token_ids


def _sync(device: torch.device) -> None:
    # Timings of asynchronous devices mean nothing without a sync.
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class _Hole:
    """The canvas and which hole positions are committed; the loop's mutable state."""

    def __init__(self, canvas: Canvas, device: torch.device) -> None:
        self.x = torch.tensor(canvas.ids, device=device)
        self.start = canvas.hole_start
        self.n = canvas.hole_len
        self.committed = torch.zeros(self.n, dtype=torch.bool, device=device)

    @property
    def end(self) -> int:
        return self.start + self.n

    def tokens(self) -> list[int]:
        return self.x[self.start : self.end].tolist()

    def masked(self) -> Tensor:
        return ~self.committed

    def rebuild(self, tokens: list[int], committed: list[bool]) -> None:
        """Replace the hole (DreamOn edits change its length)."""
        device = self.x.device
        hole = torch.tensor(tokens, dtype=self.x.dtype, device=device)
        self.x = torch.cat([self.x[: self.start], hole, self.x[self.end :]])
        self.n = len(tokens)
        self.committed = torch.tensor(committed, dtype=torch.bool, device=device)


def denoise(
    model: Transformer,
    config: ModelConfig,
    tokenizer: Tokenizer,
    canvas: Canvas,
    settings: SamplerSettings,
    *,
    stop_early: bool = True,
    vocab: VocabText | None = None,
    cancel: Callable[[], bool] | None = None,
    timings: dict[str, float] | None = None,
) -> Iterator[Draft]:
    """Denoise `canvas`'s hole, yielding a Draft after every forward pass.

    `vocab` is needed when the canvas was healed (`canvas.heal_text`); `timings` collects
    seconds spent in "forward" and "sample".
    """
    if config.mask_token_id is None:
        raise ValueError("the model has no mask token")
    device = next(model.parameters()).device
    timings = {} if timings is None else timings
    timings.setdefault("forward", 0.0)
    timings.setdefault("sample", 0.0)
    mask_id = config.mask_token_id
    stop_ids = config.stop_token_ids
    pad_id = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    expand_id = config.expand_token_id
    banned = [mask_id] + ([] if stop_early else sorted(stop_ids))
    if expand_id is not None and not stop_early:
        banned.append(expand_id)
    heal_allowed = None
    if canvas.heal_text:
        if vocab is None:
            raise ValueError("a healed canvas needs the vocabulary to constrain the hole")
        heal_allowed = torch.zeros(model.cfg.vocab_size, dtype=torch.bool, device=device)
        heal_allowed[vocab.ids_starting_with(canvas.heal_text)] = True
    generator = torch.Generator(device=device).manual_seed(settings.seed)
    max_steps = settings.max_steps
    refresh = max(1, settings.cache_refresh)

    hole = _Hole(canvas, device)
    cache: ContextCache | None = None
    stale = True  # the cache no longer matches the canvas layout
    stopped = False
    steps = 0

    def draft(done: bool, reason: str = "") -> Draft:
        tokens = hole.tokens()
        committed = hole.committed.tolist()
        upto = 0
        while upto < len(tokens) and committed[upto] and tokens[upto] not in stop_ids:
            upto += 1
        text = completion_text(canvas, tokenizer.decode(tokens[:upto]))
        return Draft(step=steps, token_ids=tokens, committed=sum(committed), text=text,
                     done=done, finish_reason=reason)

    while True:
        if hole.n == 0 or not bool(hole.masked().any()):
            yield draft(True, "stop" if stopped else "length")
            return
        if cancel is not None and cancel():
            yield draft(True, "cancelled")
            return

        t0 = time.perf_counter()
        full = refresh == 1 or stale or steps % refresh == 0
        with torch.inference_mode():
            logits, kv = hole_logits(model, hole.x, (hole.start, hole.end), None if full else cache)
            if full and refresh > 1:
                span = live_span(hole.start, hole.end, model.cfg.shift_logits)
                cache, stale = ContextCache(kv, span, hole.x.shape[0]), False
        _sync(device)
        t1 = time.perf_counter()
        steps += 1

        masked = hole.masked()
        steps_left = None if max_steps is None else max(1, max_steps - steps + 1)
        no_room = hole.x.shape[0] >= canvas.max_length or steps_left == 1
        step_banned = banned + ([expand_id] if expand_id is not None and no_room else [])
        logits = adjust_logits(logits.float(), stop_ids, settings.eos_penalty, step_banned)
        if heal_allowed is not None and bool(masked[0]):
            logits[0, ~heal_allowed] = float("-inf")
        min_commit = 1
        if steps_left is not None:
            min_commit = math.ceil(int(masked.sum()) / steps_left)
        commit, proposed = step(logits, masked, settings, generator, min_commit)
        commit &= masked
        region = hole.x[hole.start : hole.end]
        region[commit] = proposed[commit]
        hole.committed |= commit

        if expand_id is not None:
            resized, deleted = _edit_dreamon(hole, config, canvas.max_length, mask_id)
            stale, stopped = stale or resized, stopped or deleted
        else:
            stopped |= _stop_early(hole, stop_ids, pad_id)
        _sync(device)
        timings["forward"] += t1 - t0
        timings["sample"] += time.perf_counter() - t1

        done = hole.n == 0 or not bool(hole.masked().any())
        yield draft(done, ("stop" if stopped else "length") if done else "")
        if done:
            return


def _stop_early(hole: _Hole, stop_ids: set[int], pad_id: int | None) -> bool:
    """Pad everything after the first committed stop token; whether there is one."""
    region = hole.x[hole.start : hole.end]
    is_stop = torch.zeros_like(hole.committed)
    for t in stop_ids:
        is_stop |= region == t
    is_stop &= hole.committed
    if not bool(is_stop.any()):
        return False
    first = int(is_stop.nonzero()[0])
    if pad_id is not None:
        region[first + 1 :] = pad_id
    hole.committed[first + 1 :] = True
    return True


def _edit_dreamon(
    hole: _Hole, config: ModelConfig, max_length: int, mask_id: int
) -> tuple[bool, bool]:
    """DreamOn: committed expand → two masks (while there is room), committed stop → deleted.

    Returns (whether the hole changed length, whether a slot was deleted).
    """
    tokens, committed = hole.tokens(), hole.committed.tolist()
    room = max_length - hole.x.shape[0]
    new_tokens: list[int] = []
    new_committed: list[bool] = []
    deleted = False
    for tok, done in zip(tokens, committed, strict=True):
        if done and tok == config.expand_token_id and room > 0:
            new_tokens += [mask_id, mask_id]
            new_committed += [False, False]
            room -= 1
        elif done and tok == config.expand_token_id:
            new_tokens.append(mask_id)  # no room left: the slot stays a single mask
            new_committed.append(False)
        elif done and tok in config.stop_token_ids:
            deleted = True
        else:
            new_tokens.append(tok)
            new_committed.append(done)
    if new_tokens == tokens and new_committed == committed:
        return False, deleted
    hole.rebuild(new_tokens, new_committed)
    return len(new_tokens) != len(tokens), deleted
