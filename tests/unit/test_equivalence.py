"""The native transformer against transformers' reference models, on tiny random checkpoints.

The masked family is a bidirectional transformer: Dream is Qwen2 and LLaDA is Llama with
every position attending to every other. The references are run with an explicit 4-D
attention mask. In transformers 5.x a 4-D mask is used as given (`masking_utils.
_preprocess_mask_arguments` returns it untouched), and the attention functions only turn
causal when no mask was passed (`sdpa_attention_forward`: `is_causal = ... and attention_mask
is None`), so an all-zeros additive mask means full, non-causal attention.

Weights reach our model through `engine.models.checkpoint.load_model`, and reach the reference
through a renaming written out here independently of the loader's, so a loader that swaps two
tensors fails the comparison. The engine's fused projections (`fuse_projections`: q/k/v and
gate/up in one matmul each) are held to the same references.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from engine.models.checkpoint import load_model, read_checkpoint
from engine.models.config import ModelConfig
from engine.models.transformer import shift_logits
from tests.support.tiny_checkpoints import (
    llama_name,
    reference_config,
    write_dream_checkpoint,
    write_llada_checkpoint,
)

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4
BATCH, SEQ = 2, 24


def stored_tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update(load_file(str(file)))
    return out


def random_ids(vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


def full_mask(valid: torch.Tensor | None = None) -> torch.Tensor:
    """Additive float mask [B, 1, S, S]: 0 where a query may attend a key, -inf elsewhere."""
    if valid is None:
        valid = torch.ones(BATCH, SEQ, dtype=torch.bool)
    mask = torch.zeros(BATCH, 1, SEQ, SEQ)
    return mask.masked_fill(~valid[:, None, None, :], torch.finfo(torch.float32).min)


def reference_qwen2(cfg: ModelConfig, tensors: dict[str, torch.Tensor]):
    ref_cfg = transformers.Qwen2Config(**reference_config(cfg), use_sliding_window=False)
    model = transformers.Qwen2ForCausalLM(ref_cfg).eval()
    assert model.config.rope_parameters["rope_theta"] == cfg.rope_theta
    if cfg.tie_word_embeddings:
        tensors = {**tensors, "lm_head.weight": tensors["model.embed_tokens.weight"]}
    model.load_state_dict(tensors, strict=True)
    return model


def reference_llama(cfg: ModelConfig, llada_tensors: dict[str, torch.Tensor]):
    ref_cfg = transformers.LlamaConfig(**reference_config(cfg), attention_bias=cfg.qkv_bias,
                                       mlp_bias=False)
    model = transformers.LlamaForCausalLM(ref_cfg).eval()
    assert model.config.rope_parameters["rope_theta"] == cfg.rope_theta
    tensors = {llama_name(k): v for k, v in llada_tensors.items()}
    if cfg.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    if cfg.qkv_bias:
        # Llama's attention_bias also gives o_proj a bias; LLaDA's include_qkv_bias does not.
        for i in range(cfg.num_layers):
            tensors[f"model.layers.{i}.self_attn.o_proj.bias"] = torch.zeros(cfg.hidden_size)
    model.load_state_dict(tensors, strict=True)
    return model


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


@torch.no_grad()
@pytest.mark.parametrize(("tie", "fused"), [(False, False), (True, False), (False, True)])
def test_dream_layout_matches_bidirectional_qwen2(tmp_path: Path, tie: bool, fused: bool) -> None:
    folder = write_dream_checkpoint(tmp_path, tie=tie, seed=1)
    ckpt = read_checkpoint(folder)
    ours = load_model(ckpt, device="cpu", dtype="float32")
    if fused:
        ours.fuse_projections()
    ref = reference_qwen2(ckpt.config, stored_tensors(folder))
    ids = random_ids(ckpt.config.vocab_size)

    got = shift_logits(ours(ids)[0])
    want = shift_logits(ref(input_ids=ids, attention_mask=full_mask()).logits)
    assert got.shape == (BATCH, SEQ, ckpt.config.vocab_size)
    assert max_diff(got, want) <= TOLERANCE
    # The mask must matter: the same reference run causally is far from ours.
    assert max_diff(got, shift_logits(ref(input_ids=ids).logits)) > 1e-2


@torch.no_grad()
@pytest.mark.parametrize(("tie", "qkv_bias", "fused"),
                         [(False, False, False), (True, True, False), (True, True, True)])
def test_llada_layout_matches_bidirectional_llama(
    tmp_path: Path, tie: bool, qkv_bias: bool, fused: bool
) -> None:
    folder = write_llada_checkpoint(tmp_path, tie=tie, qkv_bias=qkv_bias, seed=2)
    ckpt = read_checkpoint(folder)
    assert not ckpt.config.shift_logits
    ours = load_model(ckpt, device="cpu", dtype="float32")
    if fused:
        ours.fuse_projections()
    ref = reference_llama(ckpt.config, stored_tensors(folder))
    ids = random_ids(ckpt.config.vocab_size, seed=1)

    got = ours(ids)[0]
    want = ref(input_ids=ids, attention_mask=full_mask()).logits
    assert max_diff(got, want) <= TOLERANCE
    assert max_diff(got, ref(input_ids=ids).logits) > 1e-2


@torch.no_grad()
def test_padding_keys_are_ignored_like_the_reference(dream_ckpt: Path) -> None:
    # A batch mixing lengths: row 1's last 5 tokens are padding no real token may attend to.
    ckpt = read_checkpoint(dream_ckpt)
    ours = load_model(ckpt, device="cpu", dtype="float32")
    ref = reference_qwen2(ckpt.config, stored_tensors(dream_ckpt))
    ids = random_ids(ckpt.config.vocab_size, seed=2)
    valid = torch.ones(BATCH, SEQ, dtype=torch.bool)
    valid[1, -5:] = False

    got = ours(ids, key_valid=valid)[0]
    want = ref(input_ids=ids, attention_mask=full_mask(valid)).logits
    assert max_diff(got[valid], want[valid]) <= TOLERANCE
    assert max_diff(got[1, :-5], ours(ids)[0][1, :-5]) > 1e-3


@torch.no_grad()
@pytest.mark.parametrize("fused", [False, True])
def test_ar_layout_matches_causal_qwen2(ar_ckpt: Path, fused: bool) -> None:
    ckpt = read_checkpoint(ar_ckpt)
    assert ckpt.config.causal and not ckpt.config.shift_logits
    ours = load_model(ckpt, device="cpu", dtype="float32")
    if fused:
        ours.fuse_projections()
    ref = reference_qwen2(ckpt.config, stored_tensors(ar_ckpt))
    ids = random_ids(ckpt.config.vocab_size, seed=3)
    # The reference's own default: no mask given means causal.
    assert max_diff(ours(ids)[0], ref(input_ids=ids).logits) <= TOLERANCE
