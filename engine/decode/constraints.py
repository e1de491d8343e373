"""Which tokens a hole may hold: the rules a decoding loop applies to its logits at every step.

Set up once per hole and applied by the masked family's step (engine.decode.denoise) and the
autoregressive baseline (engine.decode.ar) alike:

- the mask token is never written (it is what the hole is made of), nor, when the hole is
  filled to its length (`stop_early=False`, the oracle-length protocol), the stop tokens and
  DreamOn's expand token;
- a healed canvas's first token completes the text cut from the prefix (Canvas.heal_text),
  unless the hole follows choices, which hold the healed text themselves;
- every token is one of Canvas.allowed, where the request gives them; the first token of a
  healed canvas too, unless no allowed token completes the healed text (then the heal wins:
  that text was cut from the prefix and must come back).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from engine.decode.samplers import allowed_mask
from engine.models.config import ModelConfig
from engine.text.canvas import Canvas, VocabText


@dataclass(frozen=True)
class TokenConstraints:
    banned: list[int]  # never written
    forbidden: Tensor | None  # [V] bool: outside Canvas.allowed; None: every token is allowed
    first: Tensor | None  # [V] bool: what a healed hole's first token may be; None: no heal

    def apply(self, logits: Tensor, starts_hole: bool) -> None:
        """Set to -inf, in place, the logits [n, V] of the tokens their rows may not hold;
        `starts_hole`: the first row is the hole's first position."""
        healed = starts_hole and self.first is not None
        if self.banned:
            logits[:, self.banned] = float("-inf")
        if self.forbidden is not None:
            logits[int(healed):, self.forbidden] = float("-inf")
        if healed:
            logits[0, ~self.first] = float("-inf")  # type: ignore[operator]


def token_constraints(
    config: ModelConfig,
    canvas: Canvas,
    vocab_size: int,
    device: torch.device,
    stop_ids: set[int],
    *,
    stop_early: bool,
    vocab: VocabText | None,
    follows_choices: bool,
) -> TokenConstraints:
    """The constraints of `canvas`'s hole. `follows_choices`: the hole is written as one of
    `canvas.choices`, position by position (engine.text.choices)."""
    banned = [i for i in (config.mask_token_id,) if i is not None]
    if not stop_early:
        banned += sorted(stop_ids)
        if config.expand_token_id is not None:
            banned.append(config.expand_token_id)
    first = None
    if canvas.heal_text and not follows_choices:
        if vocab is None:
            raise ValueError("a healed canvas needs the vocabulary to constrain the hole")
        first = torch.zeros(vocab_size, dtype=torch.bool, device=device)
        first[vocab.ids_starting_with(canvas.heal_text)] = True
    allowed = allowed_mask(canvas.allowed, vocab_size, device)
    if allowed is not None and first is not None and bool((first & allowed).any()):
        first = first & allowed
    return TokenConstraints(banned, None if allowed is None else ~allowed, first)
