"""A tiny random DiffusionGemma (the block family) written with transformers' `save_pretrained`
next to the tiny BPE tokenizer: the block family's tests and the infill tests load it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.text.tokenizer import BOS, EOS, PAD, save_tokenizer
from tests.support.tiny_checkpoints import tiny_tokenizer

transformers = pytest.importorskip("transformers")

CANVAS = 8
STEPS = 12


def write_diffusion_gemma(folder: Path, width: int = 32, dtype: torch.dtype = torch.float32,
                          shard_size: str = "50GB") -> Path:
    """`width`: the hidden size; 64 or more makes every matrix's input features whole int4
    groups of 64 (heads x head_dim, MLP and expert inner sizes follow it); `dtype`: the
    stored one; `shard_size`: the largest safetensors file (save_pretrained's)."""
    hf_tok = tiny_tokenizer()
    save_tokenizer(hf_tok, folder)
    vocab = hf_tok.get_vocab_size(with_added_tokens=True)
    eos, pad, bos = (hf_tok.token_to_id(t) for t in (EOS, PAD, BOS))
    text = transformers.DiffusionGemmaTextConfig(
        vocab_size=vocab, hidden_size=width, intermediate_size=48 if width == 32 else width,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=width // 2,
        global_head_dim=width // 2, num_experts=4, top_k_experts=2,
        moe_intermediate_size=16 if width == 32 else width,
        # A window shorter than the prompt, so the sliding layer's cache is cut.
        sliding_window=8, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256, eos_token_id=eos, pad_token_id=pad, bos_token_id=bos,
    )
    # The encoder always builds its vision tower; keep it tiny (text-only use never runs it).
    vision = {"model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
              "head_dim": 8, "position_embedding_size": 64}
    config = transformers.DiffusionGemmaConfig(text_config=text, vision_config=vision,
                                               canvas_length=CANVAS)
    torch.manual_seed(1234)
    model = transformers.DiffusionGemmaForBlockDiffusion(config)
    model.generation_config = transformers.DiffusionGemmaGenerationConfig(
        max_denoising_steps=STEPS, t_min=0.4, t_max=0.8, stability_threshold=1,
        confidence_threshold=0.005, eos_token_id=[eos], pad_token_id=pad, bos_token_id=bos,
        sampler_config=transformers.EntropyBoundSamplerConfig(entropy_bound=0.1),
    )
    model.to(dtype).save_pretrained(folder, max_shard_size=shard_size)
    return folder
