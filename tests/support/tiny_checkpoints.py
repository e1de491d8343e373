"""Tiny random checkpoints in the real Hugging Face layouts the engine loads.

Each writer produces a folder the way the published checkpoints look: the real config keys,
the real tensor names, safetensors weights (optionally sharded with an index), a
`tokenizer.json` + `tokenizer_config.json` and a `generation_config.json`. The weights are
random, so these folders test loading and numerics, never output quality.

    write_dream_checkpoint(folder)      Dream family: model_type "Dream", Qwen2 tensor names
    write_llada_checkpoint(folder)      LLaDA: OLMo-style config keys and tensor names
    write_qwen2_ar_checkpoint(folder)   Qwen2ForCausalLM: the autoregressive baseline
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import AddedToken
from tokenizers import Tokenizer as HFTokenizer

from engine.text.tokenizer import BOS, EOS, MASK, PAD, save_tokenizer, train_bpe

EXPAND = "<|expand|>"  # DreamOn's expand token

# Enough code for ~40 BPE merges on top of the 256 byte tokens and the 8 specials.
SNIPPET = '''\
def add(a, b):
    return a + b


def fib(n):
    if n < 2:
        return n
    return fib(n - 1) + fib(n - 2)


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()


for i in range(10):
    print(i, fib(i), add(i, i))
'''

TOKENIZER_VOCAB = 300


@functools.cache
def _tokenizer_json() -> str:
    # Trained once per process; callers get a fresh copy so they can add tokens.
    return train_bpe([SNIPPET] * 4, vocab_size=TOKENIZER_VOCAB).to_str()


def tiny_tokenizer(expand_token: bool = False) -> HFTokenizer:
    """The byte-level BPE every tiny checkpoint ships (plus DreamOn's expand token if asked)."""
    tok = HFTokenizer.from_str(_tokenizer_json())
    if expand_token:
        tok.add_special_tokens([AddedToken(EXPAND, special=True)])
    return tok


def _random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    # Norm weights around 1 (not exactly 1) and visible biases, so a loader that drops or
    # swaps either one changes the logits.
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen)
        if "norm" in name or name.endswith("ln_f.weight"):
            out[name] = 1.0 + 0.1 * noise
        elif name.endswith(".bias"):
            out[name] = 0.1 * noise
        else:
            out[name] = 0.08 * noise
    return out


def _write_weights(
    folder: Path, tensors: dict[str, torch.Tensor], shards: int, dtype: torch.dtype
) -> None:
    tensors = {k: v.to(dtype).contiguous() for k, v in tensors.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        part = names[i::shards]
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({k: tensors[k] for k in part}, str(folder / file), metadata={"format": "pt"})
        weight_map.update({k: file for k in part})
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2))


def _merge(config: dict[str, Any], overrides: dict[str, Any] | None) -> dict[str, Any]:
    """Apply test overrides; a value of None removes the key."""
    for key, value in (overrides or {}).items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    return config


def _write_tokenizer(folder: Path, expand_token: bool) -> HFTokenizer:
    tok = tiny_tokenizer(expand_token)
    save_tokenizer(tok, folder)
    return tok


def _qwen2_shapes(
    hidden: int, layers: int, heads: int, kv_heads: int, inter: int, vocab: int, tie: bool,
    qkv_bias: bool = True,
) -> dict[str, tuple[int, ...]]:
    hd = hidden // heads
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes[p + "input_layernorm.weight"] = (hidden,)
        shapes[p + "self_attn.q_proj.weight"] = (heads * hd, hidden)
        shapes[p + "self_attn.k_proj.weight"] = (kv_heads * hd, hidden)
        shapes[p + "self_attn.v_proj.weight"] = (kv_heads * hd, hidden)
        if qkv_bias:
            shapes[p + "self_attn.q_proj.bias"] = (heads * hd,)
            shapes[p + "self_attn.k_proj.bias"] = (kv_heads * hd,)
            shapes[p + "self_attn.v_proj.bias"] = (kv_heads * hd,)
        shapes[p + "self_attn.o_proj.weight"] = (hidden, heads * hd)
        shapes[p + "post_attention_layernorm.weight"] = (hidden,)
        shapes[p + "mlp.gate_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.up_proj.weight"] = (inter, hidden)
        shapes[p + "mlp.down_proj.weight"] = (hidden, inter)
    shapes["model.norm.weight"] = (hidden,)
    if not tie:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def _write_qwen2_layout(
    folder: str | Path, *, arch: str, model_type: str, hidden: int, layers: int, heads: int,
    kv_heads: int, intermediate: int | None, vocab: int | None, tie: bool, seed: int,
    shards: int, dtype: torch.dtype, expand_token: bool, extra_config: dict[str, Any] | None,
    remote_code: bool,
) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _write_tokenizer(folder, expand_token)
    vocab = vocab or tok.get_vocab_size(with_added_tokens=True)
    inter = intermediate or 2 * hidden
    eos, mask = tok.token_to_id(EOS), tok.token_to_id(MASK)
    config: dict[str, Any] = {
        "architectures": [arch],
        "attention_dropout": 0.0,
        # Qwen2/Dream use <|endoftext|> as BOS, EOS and pad.
        "bos_token_id": eos,
        "eos_token_id": eos,
        "pad_token_id": eos,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 512,
        "max_window_layers": layers,
        "model_type": model_type,
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": tie,
        "torch_dtype": str(dtype).removeprefix("torch."),
        "transformers_version": "4.46.2",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": vocab,
    }
    generation: dict[str, Any] = {"bos_token_id": eos, "eos_token_id": eos, "pad_token_id": eos}
    if remote_code:
        # Dream's published config points at its own modeling code; the engine must ignore it.
        config["auto_map"] = {
            "AutoConfig": "configuration_dream.DreamConfig",
            "AutoModel": "modeling_dream.DreamModel",
        }
        config["mask_token_id"] = mask
        generation.update({"mask_token_id": mask, "alg": "entropy", "steps": 32})
    _write_json(folder / "config.json", _merge(config, extra_config))
    _write_json(folder / "generation_config.json", generation)
    shapes = _qwen2_shapes(hidden, layers, heads, kv_heads, inter, vocab, tie)
    _write_weights(folder, _random_tensors(shapes, seed), shards, dtype)
    return folder


def write_dream_checkpoint(
    folder: str | Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    vocab: int | None = None,
    tie: bool = False,
    seed: int = 0,
    shards: int = 1,
    dtype: torch.dtype = torch.float32,
    expand_token: bool = False,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """A Dream-family checkpoint (`DreamModel`, Qwen2 tensor names, `auto_map` to remote code).

    `vocab` defaults to the tokenizer's size; `expand_token` adds DreamOn's `<|expand|>`;
    `extra_config` overrides config.json keys (None removes a key).
    """
    return _write_qwen2_layout(
        folder, arch="DreamModel", model_type="Dream", hidden=hidden, layers=layers,
        heads=heads, kv_heads=kv_heads, intermediate=intermediate, vocab=vocab, tie=tie,
        seed=seed, shards=shards, dtype=dtype, expand_token=expand_token,
        extra_config=extra_config, remote_code=True,
    )


def write_qwen2_ar_checkpoint(
    folder: str | Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    vocab: int | None = None,
    tie: bool = False,
    seed: int = 0,
    shards: int = 1,
    dtype: torch.dtype = torch.float32,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """A `Qwen2ForCausalLM` checkpoint: the autoregressive baseline's layout."""
    return _write_qwen2_layout(
        folder, arch="Qwen2ForCausalLM", model_type="qwen2", hidden=hidden, layers=layers,
        heads=heads, kv_heads=kv_heads, intermediate=intermediate, vocab=vocab, tie=tie,
        seed=seed, shards=shards, dtype=dtype, expand_token=False,
        extra_config=extra_config, remote_code=False,
    )


def llada_shapes(
    hidden: int, layers: int, heads: int, kv_heads: int, inter: int, vocab: int, tie: bool,
    qkv_bias: bool,
) -> dict[str, tuple[int, ...]]:
    """LLaDA's tensor names and shapes (modeling_llada.py, LLaDALlamaBlock)."""
    hd = hidden // heads
    t = "model.transformer."
    shapes: dict[str, tuple[int, ...]] = {t + "wte.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"{t}blocks.{i}."
        shapes[p + "attn_norm.weight"] = (hidden,)
        shapes[p + "q_proj.weight"] = (heads * hd, hidden)
        shapes[p + "k_proj.weight"] = (kv_heads * hd, hidden)
        shapes[p + "v_proj.weight"] = (kv_heads * hd, hidden)
        if qkv_bias:
            shapes[p + "q_proj.bias"] = (heads * hd,)
            shapes[p + "k_proj.bias"] = (kv_heads * hd,)
            shapes[p + "v_proj.bias"] = (kv_heads * hd,)
        shapes[p + "attn_out.weight"] = (hidden, heads * hd)
        shapes[p + "ff_norm.weight"] = (hidden,)
        shapes[p + "ff_proj.weight"] = (inter, hidden)
        shapes[p + "up_proj.weight"] = (inter, hidden)
        shapes[p + "ff_out.weight"] = (hidden, inter)
    shapes[t + "ln_f.weight"] = (hidden,)
    if not tie:
        shapes[t + "ff_out.weight"] = (vocab, hidden)
    return shapes


def write_llada_checkpoint(
    folder: str | Path,
    *,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int | None = None,
    vocab: int | None = None,
    tie: bool = False,
    qkv_bias: bool = False,
    seed: int = 0,
    shards: int = 1,
    dtype: torch.dtype = torch.float32,
    extra_config: dict[str, Any] | None = None,
) -> Path:
    """A LLaDA checkpoint (`LLaDAModelLM`, OLMo-style keys, `model.transformer.*` tensors)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = _write_tokenizer(folder, expand_token=False)
    vocab = vocab or tok.get_vocab_size(with_added_tokens=True)
    inter = intermediate or 2 * hidden
    eos, mask, bos = tok.token_to_id(EOS), tok.token_to_id(MASK), tok.token_to_id(BOS)
    config: dict[str, Any] = {
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
        "d_model": hidden,
        "embedding_dropout": 0.0,
        "embedding_size": vocab,
        "eos_token_id": eos,
        "flash_attention": False,
        "include_bias": False,
        "include_qkv_bias": qkv_bias,
        "init_device": "meta",
        "init_fn": "mitchell",
        "init_std": 0.02,
        "input_emb_norm": False,
        "layer_norm_type": "rms",
        "layer_norm_with_affine": True,
        "mask_token_id": mask,
        "max_sequence_length": 512,
        "mlp_hidden_size": inter,
        "mlp_ratio": 4,
        "model_type": "llada",
        "multi_query_attention": None,
        "n_heads": heads,
        "n_kv_heads": kv_heads,
        "n_layers": layers,
        "pad_token_id": eos,
        "precision": "amp_bf16",
        "residual_dropout": 0.0,
        "rms_norm_eps": 1e-5,
        "rope": True,
        "rope_full_precision": True,
        "rope_theta": 500000.0,
        "scale_logits": False,
        "transformers_version": "4.46.3",
        "use_cache": False,
        "vocab_size": vocab,
        "weight_tying": tie,
    }
    _write_json(folder / "config.json", _merge(config, extra_config))
    _write_json(folder / "generation_config.json",
                {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": eos})
    shapes = llada_shapes(hidden, layers, heads, kv_heads, inter, vocab, tie, qkv_bias)
    _write_weights(folder, _random_tensors(shapes, seed), shards, dtype)
    return folder


__all__ = [
    "EXPAND", "MASK", "PAD", "SNIPPET", "llada_shapes", "tiny_tokenizer", "write_dream_checkpoint",
    "write_llada_checkpoint", "write_qwen2_ar_checkpoint",
]


# LLaDA (modeling_llada.py, LLaDALlamaBlock) -> Llama, the names transformers' reference
# reads. ff_proj is the SiLU-gated branch: ff_out(act(ff_proj(x)) * up_proj(x)), as Llama's
# down_proj(act(gate_proj(x)) * up_proj(x)).
LLADA_TO_LLAMA = [
    ("model.transformer.wte.", "model.embed_tokens."),
    ("model.transformer.ln_f.", "model.norm."),
    ("model.transformer.ff_out.", "lm_head."),
    ("model.transformer.blocks.", "model.layers."),
    (".attn_norm.", ".input_layernorm."),
    (".ff_norm.", ".post_attention_layernorm."),
    (".q_proj.", ".self_attn.q_proj."),
    (".k_proj.", ".self_attn.k_proj."),
    (".v_proj.", ".self_attn.v_proj."),
    (".attn_out.", ".self_attn.o_proj."),
    (".ff_proj.", ".mlp.gate_proj."),
    (".up_proj.", ".mlp.up_proj."),
    (".ff_out.", ".mlp.down_proj."),
]


def llama_name(llada_name: str) -> str:
    for old, new in LLADA_TO_LLAMA:
        if old in llada_name:
            llada_name = llada_name.replace(old, new, 1)
            if new in ("model.embed_tokens.", "model.norm.", "lm_head."):
                break
    return llada_name


def reference_config(cfg: Any) -> dict[str, Any]:
    """The keyword arguments a transformers Qwen2Config or LlamaConfig shares with the engine's
    ModelConfig `cfg`, for a reference model of the same weights (sdpa attention)."""
    return dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        rms_norm_eps=cfg.rms_norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta},
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, attn_implementation="sdpa",
    )
