"""Where a completion ends.

Which token ids end a completion depends on the model's family and is decided in one place,
`Decoder.stop_ids` (engine.decode.families): the masked family stops at its config's EOS and
pad, the AR baseline also at its tokenizer's EOS (the FIM template ends the middle with it),
the block family at its generation config's EOS and pad. Every loop and result cuts the hole's
tokens with `completion_ids`, so a draft's text and a result's token ids end at the same token.

The hole's text is decoded with special tokens shown, so a special token that is not a stop
id (a FIM marker, another checkpoint's end-of-turn) arrives as text; `cut_at_special` ends
the suggestion there (dg_lsp's post-processing applies it to text from either backend).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

# Special tokens of the common checkpoints as text (`<|endoftext|>`, `<|dlm_pad|>`, `<eos>`,
# `</s>` ...).
SPECIAL_TEXT = re.compile(r"<\|[A-Za-z0-9_]+\|>|</s>|<eos>|<pad>|<mask>")


def completion_ids(token_ids: Sequence[int], ends: Collection[int]) -> list[int]:
    """The hole's tokens before the first one in `ends` (stop ids, and the mask id where
    uncommitted positions hold it)."""
    for i, t in enumerate(token_ids):
        if t in ends:
            return list(token_ids[:i])
    return list(token_ids)


def cut_at_special(text: str) -> str:
    """`text` up to the first special token written in it."""
    match = SPECIAL_TEXT.search(text)
    return text if match is None else text[: match.start()]
