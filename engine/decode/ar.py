"""The autoregressive baseline: fill the hole one token per forward pass.

A causal model trained with fill-in-the-middle reads the PSM prompt

    <|fim_prefix|> prefix <|fim_suffix|> suffix <|fim_middle|>

and writes the middle until EOS. The prompt runs once; every later step runs only the newest
token against the keys/values cached so far. It yields the same Drafts as the diffusion loop
(one committed token per step), so benchmarks compare both families through one API.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import torch

from engine.decode.constraints import token_constraints
from engine.decode.kv_cache import joined
from engine.decode.samplers import allowed_mask
from engine.models.config import ModelConfig
from engine.models.transformer import LayerKV, Transformer
from engine.text.canvas import Canvas, VocabText, completion_text
from engine.text.tokenizer import FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, Tokenizer
from engine.types import Draft, score_of

FIM_TOKENS = 3  # prompt tokens the PSM template adds around prefix and suffix


def fim_prompt(tokenizer: Tokenizer, canvas: Canvas) -> list[int]:
    """PSM prompt ids for the context of `canvas` (its hole is not part of the prompt)."""
    ids = [tokenizer.token_id(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE)]
    if any(i is None for i in ids):
        raise ValueError("the tokenizer has no fill-in-the-middle tokens "
                         f"({FIM_PREFIX}, {FIM_SUFFIX}, {FIM_MIDDLE})")
    prefix, suffix = canvas.context_ids
    return [ids[0], *prefix, ids[1], *suffix, ids[2]]


def decode_ar(
    model: Transformer,
    config: ModelConfig,
    tokenizer: Tokenizer,
    canvas: Canvas,
    max_tokens: int,
    stop_ids: set[int],
    *,
    stop_early: bool = True,
    vocab: VocabText | None = None,
    timings: dict[str, float] | None = None,
) -> Iterator[Draft]:
    """Greedy KV-cached decoding of the middle; a Draft per token, the last with done=True.

    `stop_ids`: the tokens that end the middle (`Decoder.stop_ids`). With `stop_early=False`
    they are forbidden and exactly `max_tokens` are written. The runner (engine.decode.runner)
    takes one draft per step and stops taking them when the request is cancelled.
    """
    device = next(model.parameters()).device
    timings = {} if timings is None else timings
    timings.setdefault("forward", 0.0)
    constraints = token_constraints(
        config, canvas, model.cfg.vocab_size, device, stop_ids, stop_early=stop_early,
        vocab=vocab, follows_choices=canvas.choices is not None)

    prompt = torch.tensor(fim_prompt(tokenizer, canvas), device=device)
    out: list[int] = []
    confidence: list[float] = []  # the probability of each token of `out` when it was picked
    steps = 0
    past: list[LayerKV] | None = None
    next_input, positions = prompt[None], torch.arange(len(prompt), device=device)[None]

    def draft(done: bool, reason: str = "") -> Draft:
        text = completion_text(canvas, tokenizer.decode(out))
        return Draft(step=steps, token_ids=list(out), committed=len(out), text=text,
                     done=done, finish_reason=reason, score=score_of(confidence, steps))

    while True:
        t0 = time.perf_counter()
        with torch.inference_mode():
            past_positions = None if past is None else torch.arange(
                positions[0, 0].item(), device=device)[None]
            logits, kv = model(next_input, positions, past, past_positions)
            past = kv if past is None else joined(past, kv)
            last = logits[0, -1].float()
            constraints.apply(last[None], starts_hole=not out)
            if canvas.choices is not None:  # the next token keeps a choice possible
                live = canvas.choices.live(dict(enumerate(out)))
                kept = allowed_mask(canvas.choices.allowed_at(live, len(out)),
                                    model.cfg.vocab_size, device)
                last[~kept] = float("-inf")  # type: ignore[operator]
            token = int(last.argmax())
            # The greedy pick's probability: the same confidence the masked family scores.
            picked = float(last.softmax(-1)[token])
        timings["forward"] += time.perf_counter() - t0
        steps += 1
        if token in stop_ids:
            yield draft(True, "stop")
            return
        out.append(token)
        confidence.append(picked)
        if len(out) >= max_tokens:
            yield draft(True, "length")
            return
        yield draft(False)
        next_input = torch.tensor([[token]], device=device)
        positions = torch.tensor([[len(prompt) + len(out) - 1]], device=device)
