"""The canvas: prefix tokens, a hole of n masks, suffix tokens, in one sequence of at most L.

    [BOS] prefix ... | [MASK] * n | suffix ...
                     ^ hole_start

Budget. The hole takes n of the L positions (plus BOS where the model expects one). Of what
remains the suffix gets `suffix_fraction` (the request's; default `SUFFIX_FRACTION`, 25%) and
the prefix the rest; budget one side does not use flows to the other. This cut decides what
the model reads; a caller's own windows (dg_lsp cuts its text at syntax boundaries, within a
character budget split by the same fraction) only bound the text it sends and choose where
that text starts and ends.
Each side keeps the tokens nearest the cursor and, where a line boundary lies in the half of
its window farthest from the cursor, cuts there rather than mid-line.

Token healing. The cursor often splits what will be one token (`sel|f`). A prefix that ends in
the token `sel` asks the model to continue after a token it rarely saw mid-word, so the canvas
drops that last token, remembers its text (`heal_text`), and the sampler only lets the hole's
first token be one whose text starts with it; `completion_text` strips it again. Healing takes
one token, and only when some longer vocabulary token starts with that token's text (so there
is something to heal towards) and the token is whole text (not part of a multi-byte character).

Line endings. Models are trained on `\\n`; a document with CRLF endings is laid out with `\\n`
and the completion gets its `\\r\\n` back in `completion_text`.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from engine.models.config import ModelConfig
from engine.text.choices import Choices
from engine.text.tokenizer import Tokenizer
from engine.types import CANVAS_LENGTH, SUFFIX_FRACTION


class VocabText:
    """Every token's text, sorted, to find the tokens that start with a given string."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        hf = tokenizer.hf
        special = {i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        ids = [i for i in range(tokenizer.vocab_size) if i not in special]
        texts = hf.decode_batch([[i] for i in ids], skip_special_tokens=False)
        pairs = sorted((t, i) for t, i in zip(texts, ids, strict=True) if t)
        self.sorted_texts = [t for t, _ in pairs]
        self.sorted_ids = [i for _, i in pairs]
        self.special_ids = special

    def ids_starting_with(self, text: str) -> list[int]:
        """Ids of the (non-special) tokens whose text starts with `text`."""
        lo = bisect.bisect_left(self.sorted_texts, text)
        hi = lo
        while hi < len(self.sorted_texts) and self.sorted_texts[hi].startswith(text):
            hi += 1
        return self.sorted_ids[lo:hi]

    def extendable(self, text: str) -> bool:
        """Whether some token's text is `text` followed by more characters."""
        lo = bisect.bisect_right(self.sorted_texts, text)
        return lo < len(self.sorted_texts) and self.sorted_texts[lo].startswith(text)


@dataclass
class Canvas:
    ids: list[int]  # [BOS] + prefix + [MASK] * hole_len + suffix
    hole_start: int
    hole_len: int
    heal_text: str = ""  # cut from the prefix; the hole's text must start with it
    crlf: bool = False  # the document uses CRLF: the completion gets "\r\n" back
    max_length: int = CANVAS_LENGTH  # L: room an expanding hole (DreamOn) may grow into
    # The token ids the hole may hold (InfillRequest.choices' tokens, with the stop tokens);
    # None: any.
    allowed: frozenset[int] | None = None
    # The token sequences the hole may hold, where the family can follow them position by
    # position (engine.text.choices); None: `allowed` alone.
    choices: Choices | None = None

    @property
    def hole_end(self) -> int:
        return self.hole_start + self.hole_len

    @property
    def positions(self) -> list[int]:
        return list(range(len(self.ids)))

    @property
    def context_ids(self) -> tuple[list[int], list[int]]:
        """(prefix ids including BOS, suffix ids)."""
        return self.ids[: self.hole_start], self.ids[self.hole_end :]


def expects_bos(config: ModelConfig) -> bool:
    """Whether to start the canvas with BOS.

    Qwen2-based checkpoints (Dream family, the AR baseline) name `<|endoftext|>` as BOS but
    are never given it; a model with a BOS distinct from EOS (LLaDA, the bundled model) is.
    `config.extra["add_bos"]` overrides the rule.
    """
    if "add_bos" in config.extra:
        return bool(config.extra["add_bos"])
    return config.bos_token_id is not None and config.bos_token_id != config.eos_token_id


def _line_boundary(texts: Sequence[str], i: int) -> bool:
    """Whether cutting between token i-1 and token i falls at a line boundary."""
    if i <= 0 or i >= len(texts):
        return True
    return texts[i - 1].endswith("\n") or texts[i].startswith(("\n", "\r\n"))


def keep_tail(tokenizer: Tokenizer, ids: list[int], budget: int) -> list[int]:
    """The last `budget` tokens of `ids`, starting at a line boundary if one is near the cut."""
    if len(ids) <= budget:
        return ids
    if budget == 0:
        return []
    start = len(ids) - budget
    # texts[0] is the token just before the window: it says whether the window starts a line.
    texts = [tokenizer.token_text(t) for t in ids[start - 1 : start + budget // 2 + 1]]
    for j in range(1, len(texts)):
        if _line_boundary(texts, j):
            return ids[start - 1 + j :]
    return ids[start:]


def keep_head(tokenizer: Tokenizer, ids: list[int], budget: int) -> list[int]:
    """The first `budget` tokens of `ids`, ending at a line boundary if one is near the cut."""
    if len(ids) <= budget:
        return ids
    if budget == 0:
        return []
    texts = [tokenizer.token_text(t) for t in ids[: budget + 1]]
    for end in range(budget, (budget + 1) // 2 - 1, -1):
        if _line_boundary(texts, end):
            return ids[:end]
    return ids[:budget]


def split_budget(
    prefix_len: int, suffix_len: int, budget: int, suffix_fraction: float = SUFFIX_FRACTION
) -> tuple[int, int]:
    """Tokens for (prefix, suffix), the suffix's share `suffix_fraction` of `budget`; what one
    side leaves unused goes to the other."""
    want_prefix = int(budget * (1.0 - suffix_fraction))
    want_suffix = budget - want_prefix
    if prefix_len < want_prefix:
        want_suffix += want_prefix - prefix_len
        want_prefix = prefix_len
    if suffix_len < want_suffix:
        want_prefix += want_suffix - suffix_len
        want_suffix = suffix_len
    return min(prefix_len, want_prefix), min(suffix_len, want_suffix)


def heal(
    tokenizer: Tokenizer, vocab: VocabText, prefix_ids: list[int]
) -> tuple[list[int], str]:
    """Drop the prefix's last token when the cursor may split it; return (ids, removed text)."""
    if not prefix_ids:
        return prefix_ids, ""
    last = prefix_ids[-1]
    text = tokenizer.token_text(last)
    if last in vocab.special_ids or not text or "\ufffd" in text or not vocab.extendable(text):
        return prefix_ids, ""
    return prefix_ids[:-1], text


def layout(
    tokenizer: Tokenizer,
    config: ModelConfig,
    prefix: str,
    suffix: str,
    hole_len: int,
    canvas_length: int = CANVAS_LENGTH,
    suffix_fraction: float = SUFFIX_FRACTION,
    vocab: VocabText | None = None,
    bos: bool | None = None,
) -> Canvas:
    """Lay out prefix, hole and suffix in at most `canvas_length` tokens.

    `vocab` enables token healing. `bos` overrides `expects_bos(config)`.
    """
    # A family without a mask token (the AR baseline) only reads the context around the hole.
    hole_id = config.mask_token_id if config.mask_token_id is not None else -1
    use_bos = expects_bos(config) if bos is None else bos
    budget = canvas_length - hole_len - (1 if use_bos else 0)
    if hole_len < 1 or budget < 0:
        raise ValueError(f"a hole of {hole_len} tokens does not fit a canvas of {canvas_length}")
    crlf = "\r\n" in prefix or "\r\n" in suffix
    prefix, suffix = to_lf(prefix), to_lf(suffix)
    prefix_ids, suffix_ids = tokenizer.encode(prefix), tokenizer.encode(suffix)
    heal_text = ""
    if vocab is not None:
        prefix_ids, heal_text = heal(tokenizer, vocab, prefix_ids)
    n_prefix, n_suffix = split_budget(len(prefix_ids), len(suffix_ids), budget,
                                    suffix_fraction)
    prefix_ids = keep_tail(tokenizer, prefix_ids, n_prefix)
    suffix_ids = keep_head(tokenizer, suffix_ids, n_suffix)
    head = ([config.bos_token_id] if use_bos else []) + prefix_ids
    ids = head + [hole_id] * hole_len + suffix_ids
    return Canvas(ids=ids, hole_start=len(head), hole_len=hole_len, heal_text=heal_text,
                  crlf=crlf, max_length=canvas_length)


@dataclass
class HolesCanvas:
    """Several holes in one canvas: `canvas`'s hole is the span from the first hole's start to
    the last one's end, holding the code kept between the holes (`tokens`, `committed`: the
    span's tokens, masks in the holes, and which are kept); `holes`: each hole's [start, end)
    in the span."""

    canvas: Canvas
    tokens: list[int]
    committed: list[bool]
    holes: list[tuple[int, int]]
    heals: list[str]  # the text each hole's first token must start with (canvas.heal_text first)


def holes_layout(
    tokenizer: Tokenizer,
    config: ModelConfig,
    texts: Sequence[str],
    hole_lens: Sequence[int],
    canvas_length: int = CANVAS_LENGTH,
    suffix_fraction: float = SUFFIX_FRACTION,
    vocab: VocabText | None = None,
) -> HolesCanvas:
    """`[BOS] texts[0] MASK*n0 texts[1] MASK*n1 ... texts[-1]` in at most `canvas_length`
    tokens: the holes and the code between them whole (ValueError when they do not fit), the
    prefix and the suffix cut as `layout` cuts them. Every hole is healed as `layout` heals
    its one (`vocab`): the text before a later hole is kept code that usually ends in a newline,
    and unhealed, the model starts that hole with a newline of its own rather than the
    indentation the newline token would have carried."""
    mask = config.mask_token_id if config.mask_token_id is not None else -1
    use_bos = expects_bos(config)
    crlf = any("\r\n" in text for text in texts)
    texts = [to_lf(text) for text in texts]
    kept = [tokenizer.encode(text) for text in texts[1:-1]]
    heals = [""] * len(hole_lens)
    if vocab is not None:
        for i, ids in enumerate(kept):
            kept[i], heals[i + 1] = heal(tokenizer, vocab, ids)
    fixed = sum(hole_lens) + sum(map(len, kept)) + (1 if use_bos else 0)
    if fixed > canvas_length or min(hole_lens, default=0) < 1:
        raise ValueError(f"{len(hole_lens)} holes of {sum(hole_lens)} tokens and the "
                         f"{sum(map(len, kept))} tokens of code kept between them do not fit "
                         f"a canvas of {canvas_length} tokens")
    prefix_ids, suffix_ids = tokenizer.encode(texts[0]), tokenizer.encode(texts[-1])
    if vocab is not None:
        prefix_ids, heals[0] = heal(tokenizer, vocab, prefix_ids)
    n_prefix, n_suffix = split_budget(len(prefix_ids), len(suffix_ids), canvas_length - fixed,
                                      suffix_fraction)
    prefix_ids = keep_tail(tokenizer, prefix_ids, n_prefix)
    suffix_ids = keep_head(tokenizer, suffix_ids, n_suffix)
    tokens: list[int] = []
    committed: list[bool] = []
    holes: list[tuple[int, int]] = []
    for i, n in enumerate(hole_lens):
        if i:
            tokens += kept[i - 1]
            committed += [True] * len(kept[i - 1])
        holes.append((len(tokens), len(tokens) + n))
        tokens += [mask] * n
        committed += [False] * n
    head = ([config.bos_token_id] if use_bos else []) + prefix_ids
    canvas = Canvas(ids=head + tokens + suffix_ids, hole_start=len(head), hole_len=len(tokens),
                    heal_text=heals[0], crlf=crlf, max_length=canvas_length)
    return HolesCanvas(canvas, tokens, committed, holes, heals)


def to_lf(text: str) -> str:
    """`text` with CRLF line ends as LF: the model reads LF (`completion_text` restores CRLF)."""
    return text.replace("\r\n", "\n")


def completion_text(canvas: Canvas, text: str) -> str:
    """The hole's decoded text as the user sees it: healed characters removed, CRLF restored."""
    if canvas.heal_text and text.startswith(canvas.heal_text):
        text = text[len(canvas.heal_text) :]
    return text.replace("\n", "\r\n") if canvas.crlf else text


def other_file_snippet(path: str, text: str, comment: str) -> str:
    """Another file's text as the model reads it ahead of the prefix: commented out line by
    line under the file's name, as code models have seen related files quoted (the language
    server's other documents, llama.cpp's input_extra)."""
    body = "\n".join(f"{comment} {line}".rstrip() for line in text.strip("\n").split("\n"))
    return f"{comment} Compare this snippet from {path}:\n{body}\n"
