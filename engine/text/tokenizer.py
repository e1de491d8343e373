"""Tokenizers: loading a checkpoint's `tokenizer.json`, and training the bundled model's BPE.

The bundled vocabulary is byte-level BPE with one rule added for code: a newline and the
indentation after it form their own pre-token, so indentation runs become single tokens and
every line starts on a token boundary (training cuts rest-of-line holes on those boundaries).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

# Special tokens of the bundled vocabulary, in id order (ids 0..7).
EOS = "<|endoftext|>"
PAD = "<|pad|>"
MASK = "<|mask|>"
BOS = "<|bos|>"
FILE_SEP = "<|file_sep|>"
FIM_PREFIX = "<|fim_prefix|>"
FIM_SUFFIX = "<|fim_suffix|>"
FIM_MIDDLE = "<|fim_middle|>"
SPECIAL_TOKENS = [EOS, PAD, MASK, BOS, FILE_SEP, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE]

NEWLINE_INDENT = r"\n[ \t]*"


def code_pre_tokenizer() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(NEWLINE_INDENT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def train_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """Train the bundled byte-level BPE on `texts` (special tokens take ids 0..7)."""
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = code_pre_tokenizer()
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


class Tokenizer:
    """A checkpoint's tokenizer with the special ids the engine needs."""

    def __init__(self, hf: HFTokenizer) -> None:
        self.hf = hf
        self.vocab_size = hf.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        return cls(HFTokenizer.from_file(str(path)))

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=False)

    def token_id(self, token: str) -> int | None:
        return self.hf.token_to_id(token)

    def token_text(self, token_id: int) -> str:
        """The exact text one token stands for (bytes decoded, not the BPE surface form)."""
        return self.hf.decode([token_id], skip_special_tokens=False)


def save_tokenizer(tok: HFTokenizer, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    ids = {name: tok.token_to_id(t) for name, t in
           [("eos_token", EOS), ("pad_token", PAD), ("mask_token", MASK), ("bos_token", BOS)]}
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS, "pad_token": PAD,
         "mask_token": MASK, "bos_token": BOS, "model_max_length": 4096,
         "special_token_ids": ids}, indent=2))
