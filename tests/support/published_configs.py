"""The real models' published configs, and random checkpoints at their real width.

Each entry of PUBLISHED is a checkpoint's `config.json` as published; where it came from is
written beside it (the weights themselves are never downloaded: tests must run offline and the
weights are tens of GB). `write_real_shape` writes a checkpoint folder with that config, cut
to `layers` transformer layers (and `experts` routed experts for the MoE), and random weights
of the real shapes: full width, full vocabulary, real head counts.

`reference_logits` runs the transformers model of the same weights, built on the meta device
and filled from the safetensors file by names written out here independently of the engine's
loader, so the comparison catches a loader that swaps or mis-casts a tensor.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.models.config import config_from_hf
from tests.support.tiny_checkpoints import (
    _qwen2_shapes,
    llada_shapes,
    llama_name,
    reference_config,
    tiny_tokenizer,
)

# Qwen2.5-Coder's Dream-family configs share these keys (Dream's configuration_dream.py writes
# them; transformers 4.46 era).
_DREAM_COMMON: dict[str, Any] = {
    "architectures": ["DreamModel"],
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_dream.DreamConfig",
        "AutoModel": "modeling_dream.DreamModel",
    },
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "model_type": "Dream",
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.46.2",
    "use_cache": False,
    "use_sliding_window": False,
}

PUBLISHED: dict[str, dict[str, Any]] = {
    # NOT FOUND as a file: no copy of fredzzp/open-dcoder-0.5B's config.json was found in the
    # stored public repositories. Values are Qwen2.5-Coder-0.5B's (its base: hidden 896, 24
    # layers, 14/2 heads, intermediate 4864, vocab 151936, tied embeddings), in the Dream
    # layout docs/models.md describes (Model families), with Dream's mask id.
    # Public scripts load it with veomni's Qwen2ForCausalLM, so the published file may say
    # "qwen2" instead: see docs/models.md, "Real models at real scale".
    "open-dcoder-0.5b": {
        **_DREAM_COMMON,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "hidden_size": 896,
        "intermediate_size": 4864,
        "mask_token_id": 151666,
        "max_position_embeddings": 32768,
        "max_window_layers": 24,
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "pad_token_id": 151643,
        "tie_word_embeddings": True,
        "vocab_size": 151936,
    },
    # NOT FOUND as a file: no stored copy of Qwen/Qwen2.5-Coder-0.5B's config.json. Its
    # published values (Open-dCoder-0.5B's autoregressive base, the AR twin that
    # dg_lsp/measure/bench_real_shape.py times beside it); the special ids match a public
    # probe of its tokenizer (<|endoftext|> 151643 as BOS, EOS and pad).
    "qwen2.5-coder-0.5b": {
        "architectures": ["Qwen2ForCausalLM"],
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "hidden_act": "silu",
        "hidden_size": 896,
        "initializer_range": 0.02,
        "intermediate_size": 4864,
        "max_position_embeddings": 32768,
        "max_window_layers": 24,
        "model_type": "qwen2",
        "num_attention_heads": 14,
        "num_hidden_layers": 24,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": 32768,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.45.0.dev0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    },
    # NOT FOUND as a file. Shape values: Qwen2.5-Coder-7B / Dream-7B (hidden 3584, 28 layers,
    # 28/4 heads, intermediate 18944, vocab 152064, rope 1e6; quoted as Dream-7B's config in
    # a public Rust test, stored copy id 69519966472). Special ids: bos 151665, eos/pad 151643
    # from d3LLM/d3LLM_Dream_Coder's generation_config.json (a Dream-Coder fine-tune on the
    # Hub), mask 151666 (docs/models.md, Model families). DiffuCoder-7B and DreamOn-7B have the
    # same shapes (Qwen2.5-Coder-7B) and differ in tokens, tested with the real tokenizer.
    "dream-coder-7b": {
        **_DREAM_COMMON,
        "bos_token_id": 151665,
        "eos_token_id": 151643,
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "mask_token_id": 151666,
        "max_position_embeddings": 131072,
        "max_window_layers": 28,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 4,
        "pad_token_id": 151643,
        "tie_word_embeddings": False,
        "vocab_size": 152064,
    },
    # GSAI-ML/LLaDA-8B-Instruct config.json, verbatim, from the copy of the Hub folder in
    # github.com/yinj66/support_basis, path "LLaDA-8B-Instruct-B&S-light/config.json"
    # (commit 66e6761a); its values agree with several public config checks of LLaDA-8B.
    "llada-8b": {
        "activation_type": "silu",
        "alibi": False,
        "alibi_bias_max": 8.0,
        "architectures": ["LLaDAModelLM"],
        "attention_dropout": 0.0,
        "attention_layer_norm": False,
        "attention_layer_norm_with_affine": True,
        "auto_map": {
            "AutoConfig": "configuration_llada.LLaDAConfig",
            "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
            "AutoModel": "modeling_llada.LLaDAModelLM",
        },
        "bias_for_layer_norm": False,
        "block_group_size": 1,
        "block_type": "llama",
        "d_model": 4096,
        "embedding_dropout": 0.0,
        "embedding_size": 126464,
        "eos_token_id": 126081,
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": False,
        "init_cutoff_factor": None,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": 126336,
        "max_sequence_length": 4096,
        "mlp_hidden_size": 12288,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": 32,
        "n_kv_heads": 32,
        "n_layers": 32,
        "pad_token_id": 126081,
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": 1e-05,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": 126464,
        "weight_tying": False,
    },
    # google/diffusiongemma-26B-A4B-it config.json as quoted ("literal snippet of the real
    # checkpoint config.json") in a public Rust test of an MLX port, stored copy id
    # 54494507217. Left out: that port's own additions, "quantization" (its 4-bit export) and
    # an inlined "generation_config" (written to generation_config.json here, see
    # PUBLISHED_GENERATION).
    "diffusiongemma-26b-a4b": {
        "architectures": ["DiffusionGemmaForBlockDiffusion"],
        "model_type": "diffusion_gemma",
        "canvas_length": 256,
        "eos_token_id": [1, 106, 50],
        "boi_token_id": 255999,
        "eoi_token_id": 258882,
        "image_token_id": 258880,
        "tie_word_embeddings": True,
        "vision_soft_tokens_per_image": 280,
        "vision_config": {
            "model_type": "gemma4_vision",
            "hidden_size": 1152,
            "intermediate_size": 4304,
            "num_hidden_layers": 27,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "head_dim": 72,
            "global_head_dim": 72,
            "patch_size": 16,
            "pooling_kernel_size": 3,
            "rms_norm_eps": 1e-06,
            "standardize": True,
            "use_clipped_linears": False,
            "rope_parameters": {"rope_theta": 100.0, "rope_type": "default"},
        },
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": 2,
            "dtype": "bfloat16",
            "eos_token_id": 1,
            "final_logit_softcapping": 30.0,
            "global_head_dim": 512,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 2816,
            "initializer_range": 0.02,
            "intermediate_size": 2112,
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 5,
            "max_position_embeddings": 262144,
            "model_type": "diffusion_gemma_text",
            "moe_intermediate_size": 704,
            "num_attention_heads": 16,
            "num_experts": 128,
            "num_global_key_value_heads": 2,
            "num_hidden_layers": 30,
            "num_key_value_heads": 8,
            "pad_token_id": 0,
            "rms_norm_eps": 1e-06,
            "rope_parameters": {
                "full_attention": {"partial_rotary_factor": 0.25, "rope_theta": 1000000.0,
                                   "rope_type": "proportional"},
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
            },
            "sliding_window": 1024,
            "tie_word_embeddings": True,
            "top_k_experts": 8,
            "use_bidirectional_attention": "vision",
            "vocab_size": 262144,
        },
    },
}

# The same source's inlined generation config (the checkpoint's generation_config.json).
PUBLISHED_GENERATION: dict[str, dict[str, Any]] = {
    "diffusiongemma-26b-a4b": {
        "confidence_threshold": 0.005,
        "eos_token_id": [1, 106, 50],
        "max_denoising_steps": 48,
        "max_new_tokens": 256,
        "pad_token_id": 0,
        "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
        "stability_threshold": 1,
        "t_max": 0.8,
        "t_min": 0.4,
    },
}

# What this machine (24 GB shared by four people, 12 GB each) can hold of each model in
# float32 plus one forward pass: layers kept, and routed experts kept for the MoE.
CPU_CUT: dict[str, dict[str, int]] = {
    "open-dcoder-0.5b": {"layers": 24},
    "dream-coder-7b": {"layers": 2},
    "llada-8b": {"layers": 2},
    "diffusiongemma-26b-a4b": {"layers": 2, "experts": 32},
}


# A small Dream-layout config whose memory figures tests/unit/test_plan.py works out by hand.
SMALL_DREAM = {
    "architectures": ["DreamModel"], "model_type": "Dream", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 300, "tie_word_embeddings": False,
    "mask_token_id": 3,
}


def truncated_config(name: str, layers: int, experts: int | None = None) -> dict[str, Any]:
    """PUBLISHED[name] cut to `layers` layers (and `experts` routed experts), all else kept."""
    raw = copy.deepcopy(PUBLISHED[name])
    if "n_layers" in raw:
        raw["n_layers"] = layers
    elif "text_config" in raw:
        text = raw["text_config"]
        text["num_hidden_layers"] = layers
        # Keep the published pattern's head, ending on a full-attention layer as the model
        # requires (transformers forces the last layer to full attention).
        text["layer_types"] = text["layer_types"][:layers - 1] + ["full_attention"]
        if experts is not None:
            text["num_experts"] = experts
            text["top_k_experts"] = min(text["top_k_experts"], experts)
        # The vision tower is not used for text; one layer keeps its real width.
        raw["vision_config"]["num_hidden_layers"] = 1
    else:
        raw["num_hidden_layers"] = layers
        raw["max_window_layers"] = layers
    return raw


def _random_like(name: str, shape: tuple[int, ...], gen: torch.Generator,
                 dtype: torch.dtype) -> torch.Tensor:
    # Drawn in the stored dtype, one tensor at a time: a float32 detour of a 7B shape would
    # double the writer's memory. Norms near 1 and visible biases, so a dropped or swapped
    # tensor changes the logits. On the generator's device (a GPU draws 7B in a second).
    noise = torch.randn(shape, generator=gen, dtype=dtype, device=gen.device)
    if "norm" in name or name.endswith("ln_f.weight"):
        return noise.mul_(0.1).add_(1.0)
    return noise.mul_(0.1 if name.endswith(".bias") else 0.02)


def _write_masked(folder: Path, raw: dict[str, Any], seed: int, dtype: torch.dtype,
                  device: str) -> None:
    cfg = config_from_hf(raw)
    args = (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads,
            cfg.intermediate_size, cfg.vocab_size, cfg.tie_word_embeddings)
    shapes = (llada_shapes(*args, qkv_bias=cfg.qkv_bias) if cfg.layout == "llada"
              else _qwen2_shapes(*args))
    gen = torch.Generator(device=device).manual_seed(seed)
    tensors = {name: _random_like(name, shape, gen, dtype).cpu()
               for name, shape in shapes.items()}
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})


def _write_block(folder: Path, raw: dict[str, Any], generation: dict[str, Any], seed: int,
                 dtype: torch.dtype) -> None:
    import transformers

    config = transformers.DiffusionGemmaConfig(**{k: v for k, v in raw.items()
                                                  if k not in ("architectures", "model_type")})
    # transformers' own initialization takes half a minute for one real-width layer; every
    # tensor is drawn here instead (norms then are not all 1).
    model, _ = _empty_then_assign(transformers.DiffusionGemmaForBlockDiffusion, config, {},
                                  dtype)
    model.tie_weights()  # before drawing: a tied weight is one tensor, drawn once
    with torch.no_grad():
        gen = torch.Generator().manual_seed(seed)
        for name, p in model.named_parameters():
            p.copy_(_random_like(name, tuple(p.shape), gen, dtype))
    model.save_pretrained(folder)
    del model
    # save_pretrained writes transformers' own config; the published one is what users have.
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2))


def write_real_shape(folder: str | Path, name: str, layers: int, experts: int | None = None,
                     seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                     device: str = "cpu", overrides: dict[str, Any] | None = None) -> Path:
    """A checkpoint folder: PUBLISHED[name] cut to `layers` (and `experts`), with `overrides`
    on its config (a narrower copy of the shape), random weights stored in `dtype` (the
    published checkpoints are bfloat16) and drawn on `device` (masked and AR families), the
    tiny BPE tokenizer (its ids are a subset of every real vocabulary; the real tokenizer is
    tested on its own)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    raw = {**truncated_config(name, layers, experts), **(overrides or {})}
    tiny_tokenizer().save(str(folder / "tokenizer.json"))
    if name in PUBLISHED_GENERATION:
        _write_block(folder, raw, PUBLISHED_GENERATION[name], seed, dtype)
    else:
        (folder / "config.json").write_text(json.dumps(raw, indent=2))
        _write_masked(folder, raw, seed, dtype, device)
    return folder


def stored_tensors(folder: Path, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Every tensor of the folder's safetensors files, cast to `dtype` one at a time.

    The file is opened again for each tensor: its memory map, and the pages a conversion
    read through it, then go when the tensor is done instead of adding up to the file's
    size."""
    out: dict[str, torch.Tensor] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            keys = list(f.keys())
        for key in keys:
            with safe_open(str(file), framework="pt") as f:
                out[key] = f.get_tensor(key).to(dtype)
    return out


# LLaDA (modeling_llada.py, LLaDALlamaBlock) -> Llama, written independently of the loader's
# table; ff_proj is the gated branch: ff_out(act(ff_proj(x)) * up_proj(x)).


def _empty_then_assign(model_cls: Any, config: Any, tensors: dict[str, torch.Tensor],
                       dtype: torch.dtype) -> tuple[Any, list[str]]:
    """`model_cls(config)` holding `tensors`, and the keys the tensors lacked.

    Built with transformers' initialization switched off: the parameters are allocated but
    never written, so their pages never become resident before `tensors` replace them (a
    random init would double the memory of a multi-GB model). Not on the meta device, because
    non-persistent buffers (rotary frequencies, embedding scales) are computed in __init__."""
    from transformers.initialization import no_init_weights

    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with no_init_weights():
            model = model_cls(config)
    finally:
        torch.set_default_dtype(default)
    result = model.load_state_dict(tensors, strict=False, assign=True)
    if result.unexpected_keys:
        raise AssertionError(f"reference has no {result.unexpected_keys[:3]}")
    return model.eval(), list(result.missing_keys)


def reference_masked(folder: Path, dtype: torch.dtype) -> Any:
    """transformers' Qwen2 (Dream) or Llama (LLaDA) with the folder's weights in `dtype`."""
    import transformers

    raw = json.loads((folder / "config.json").read_text())
    cfg = config_from_hf(raw)
    common = dict(reference_config(cfg), dtype=dtype)
    tensors = stored_tensors(folder, dtype)
    if cfg.layout == "llada":
        ref_cfg = transformers.LlamaConfig(**common, attention_bias=False, mlp_bias=False)
        tensors = {llama_name(k): v for k, v in tensors.items()}
        model_cls = transformers.LlamaForCausalLM
    else:
        ref_cfg = transformers.Qwen2Config(**common, use_sliding_window=False)
        model_cls = transformers.Qwen2ForCausalLM
    if cfg.tie_word_embeddings:
        tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"]
    model, missing = _empty_then_assign(model_cls, ref_cfg, tensors, dtype)
    if missing:
        raise AssertionError(f"reference is missing {missing[:3]}")
    return model


def masked_logits(model: Any, ids: torch.Tensor, shift: bool,
                  causal: bool = False) -> torch.Tensor:
    """A reference's logits with full (non-causal) attention, shifted as Dream shifts them;
    `causal`: with the reference's default causal attention instead.

    transformers 5 uses a 4-D mask as given, and an all-zeros additive mask is full attention
    (see tests/unit/test_equivalence.py)."""
    b, s = ids.shape
    mask = None if causal else torch.zeros(b, 1, s, s, dtype=next(model.parameters()).dtype)
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits
    if shift:
        logits = torch.cat([logits[:, :1], logits[:, :-1]], dim=1)
    return logits.float()


def reference_block(folder: Path, dtype: torch.dtype) -> Any:
    """transformers' DiffusionGemmaForBlockDiffusion filled from the folder's tensors by name
    (not through from_pretrained, which is the engine's own loading path)."""
    import transformers

    raw = json.loads((folder / "config.json").read_text())
    config = transformers.DiffusionGemmaConfig(**{k: v for k, v in raw.items()
                                                  if k not in ("architectures", "model_type")})
    tensors = stored_tensors(folder, dtype)
    model, missing = _empty_then_assign(transformers.DiffusionGemmaForBlockDiffusion, config,
                                        tensors, dtype)
    # The file stores each tied weight once; tying must fill every key it lacked with a
    # tensor that was read.
    model.tie_weights()
    read = {t.data_ptr() for t in tensors.values()}
    params = dict(model.named_parameters(remove_duplicate=False))
    untied = [k for k in missing if k not in params or params[k].data_ptr() not in read]
    if untied:
        raise AssertionError(f"reference is missing {untied[:3]}")
    return model


def block_logits(model: Any, prompt: torch.Tensor, canvas: torch.Tensor) -> torch.Tensor:
    """One denoising pass: the prompt encoded, the canvas's logits (float32, softcapped)."""
    with torch.inference_mode():
        return model(input_ids=prompt, decoder_input_ids=canvas).logits.float()


def logit_tolerance(dtype: torch.dtype, scale: float, layers: int) -> float:
    """How far two correct implementations' logits may be apart in `dtype`.

    Both keep their activations in `dtype` and sum in different orders (fused projections,
    another attention kernel), so each rounding may differ by one unit in the last place,
    eps * |value| with eps = torch.finfo(dtype).eps. A layer rounds the residual stream twice
    (after attention and after the MLP) in each of the two implementations; the final norm and
    the head add one more stage. Relative differences of the hidden state reach the logits
    unchanged in size, and the largest logit (`scale`) bounds their magnitude:
    4 roundings per stage x (layers + 1) stages x eps x scale.
    """
    return 4 * (layers + 1) * torch.finfo(dtype).eps * scale
