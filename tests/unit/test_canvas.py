"""Canvas layout: budget split, cuts at line boundaries, token healing, line endings."""

from __future__ import annotations

import pytest

from engine.models.config import ModelConfig
from engine.text.canvas import VocabText, completion_text, layout, split_budget
from engine.text.tokenizer import BOS, EOS, MASK, Tokenizer
from tests.support.tiny_checkpoints import SNIPPET, tiny_tokenizer


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return Tokenizer(tiny_tokenizer())


@pytest.fixture(scope="module")
def vocab(tok: Tokenizer) -> VocabText:
    return VocabText(tok)


def config(tok: Tokenizer, bos: bool = False) -> ModelConfig:
    eos = tok.token_id(EOS)
    return ModelConfig(
        family="masked", layout="dream", vocab_size=tok.vocab_size, hidden_size=32,
        intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=2, head_dim=16,
        mask_token_id=tok.token_id(MASK), eos_token_id=eos, pad_token_id=eos,
        # Qwen-style configs name EOS as BOS and never use it; a distinct BOS is prepended.
        bos_token_id=tok.token_id(BOS) if bos else eos,
    )


def test_empty_prefix_and_suffix(tok: Tokenizer, vocab: VocabText) -> None:
    m = tok.token_id(MASK)
    c = layout(tok, config(tok), "", "", 4, vocab=vocab)
    assert (c.ids, c.hole_start, c.hole_len, c.heal_text) == ([m] * 4, 0, 4, "")
    c = layout(tok, config(tok, bos=True), "", "", 4, vocab=vocab)
    assert (c.ids, c.hole_start) == ([tok.token_id(BOS), m, m, m, m], 1)
    assert c.positions == [0, 1, 2, 3, 4]


def test_short_context_is_kept_whole(tok: Tokenizer, vocab: VocabText) -> None:
    m = tok.token_id(MASK)
    prefix, suffix = "def fib(n):", "\n    return n\n"
    c = layout(tok, config(tok), prefix, suffix, 3, vocab=vocab)
    # '):' starts no longer token, so nothing is healed.
    assert c.heal_text == ""
    assert c.ids == tok.encode(prefix) + [m] * 3 + tok.encode(suffix)
    assert (c.hole_start, c.hole_end) == (len(tok.encode(prefix)), len(tok.encode(prefix)) + 3)
    assert c.context_ids == (tok.encode(prefix), tok.encode(suffix))


def test_cursor_mid_identifier_heals_the_last_token(tok: Tokenizer, vocab: VocabText) -> None:
    m = tok.token_id(MASK)
    c = layout(tok, config(tok), "x = sel", "f.items", 4, vocab=vocab)
    assert tok.encode("x = sel")[-1] == tok.token_id("sel")
    assert c.heal_text == "sel"
    assert c.ids == tok.encode("x = ") + [m] * 4 + tok.encode("f.items")
    assert completion_text(c, "self") == "f"
    assert sorted(vocab.ids_starting_with("sel")) == sorted([tok.token_id("sel"),
                                                              tok.token_id("self")])


def test_healing_needs_a_longer_token_to_heal_towards(tok: Tokenizer, vocab: VocabText) -> None:
    # "\t" begins no longer token in this vocabulary; "\n" does ("\n    ").
    c = layout(tok, config(tok), "\tif x:\n\t\t", "", 4, vocab=vocab)
    assert c.heal_text == ""
    assert c.ids[: c.hole_start] == tok.encode("\tif x:\n\t\t")
    c = layout(tok, config(tok), "if x:\n", "", 4, vocab=vocab)
    assert c.heal_text == "\n"
    assert c.ids[: c.hole_start] == tok.encode("if x:")
    # Without the vocabulary there is no healing at all.
    assert layout(tok, config(tok), "x = sel", "", 4).heal_text == ""


def test_crlf_is_laid_out_as_lf_and_restored_in_the_completion(
    tok: Tokenizer, vocab: VocabText
) -> None:
    m = tok.token_id(MASK)
    c = layout(tok, config(tok), "x = 1\r\ny = 2\r\n", "\r\nz = 3\r\n", 2, vocab=vocab)
    assert c.crlf
    assert c.heal_text == "\n"
    assert c.ids == tok.encode("x = 1\ny = 2") + [m] * 2 + tok.encode("\nz = 3\n")
    assert completion_text(c, "\n    w = 4\nv") == "    w = 4\r\nv"


def test_multibyte_and_emoji_around_the_cursor(tok: Tokenizer, vocab: VocabText) -> None:
    m = tok.token_id(MASK)
    # The prefix ends in the last byte of an emoji: a part of a character is never healed.
    prefix, suffix = "s = 'ü😀", "😀é'"
    c = layout(tok, config(tok), prefix, suffix, 2, vocab=vocab)
    assert c.heal_text == ""
    assert c.ids == tok.encode(prefix) + [m, m] + tok.encode(suffix)
    assert tok.decode(c.context_ids[0]) == prefix
    assert tok.decode(c.context_ids[1]) == suffix
    # An identifier after multi-byte text still heals.
    c = layout(tok, config(tok), "é = sel", "", 2, vocab=vocab)
    assert c.heal_text == "sel"
    assert tok.decode(c.context_ids[0]) == "é = "


def test_split_budget_gives_unused_budget_to_the_other_side() -> None:
    assert split_budget(100, 100, 40, 0.25) == (30, 10)
    assert split_budget(5, 100, 40, 0.25) == (5, 35)
    assert split_budget(100, 3, 40, 0.25) == (37, 3)
    assert split_budget(2, 3, 40, 0.25) == (2, 3)
    assert split_budget(100, 100, 0, 0.25) == (0, 0)


def test_long_prefix_keeps_the_lines_nearest_the_cursor(tok: Tokenizer, vocab: VocabText) -> None:
    prefix = SNIPPET * 20 + "x = 1"
    c = layout(tok, config(tok), prefix, "", 8, canvas_length=40, vocab=vocab)
    # 32 tokens of budget (the empty suffix leaves all of it to the prefix); the window's
    # first line is partial, so the cut moves forward to the next newline token.
    assert c.context_ids == (tok.encode("\n    print(i, fib(i), add(i, i))\nx = 1"), [])
    assert len(c.ids) == 26 + 8


def test_long_context_on_both_sides_splits_75_25_at_line_boundaries(
    tok: Tokenizer, vocab: VocabText
) -> None:
    prefix, suffix = SNIPPET * 5 + "x = 1", "\n" + SNIPPET * 5
    c = layout(tok, config(tok, bos=True), prefix, suffix, 7, canvas_length=64, vocab=vocab)
    before, after = c.context_ids
    # Budget 64 - 7 - 1 (BOS) = 56: prefix up to 42 tokens, suffix up to 14, each cut back
    # to a line boundary.
    assert before == [tok.token_id(BOS)] + tok.encode(
        "for i in range(10):\n    print(i, fib(i), add(i, i))\nx = 1")
    assert len(before) - 1 <= 42
    assert after == tok.encode("\ndef add(a, b):\n    return a + b\n")
    assert len(after) == 14


def test_hole_larger_than_the_canvas_is_refused(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        layout(tok, config(tok), "a", "b", 300)
