"""One normalized description of a checkpoint's architecture.

Checkpoints arrive in several config dialects (Dream/Qwen2 keys, LLaDA's OLMo keys, plain
Qwen2 for the autoregressive baseline). Everything past the loader reads only `ModelConfig`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from engine.bounds import MODEL_CANVAS_RANGE


class CheckpointError(Exception):
    """A checkpoint that cannot be loaded; the message says which file and why."""


@dataclass
class ModelConfig:
    family: str  # "masked" (bidirectional denoiser), "ar" (causal baseline) or "block"
    layout: str  # tensor naming: "dream" / "qwen2" (Qwen2 names) or "llada"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    qkv_bias: bool = False
    # Dream-style models predict token p from the hidden state at p-1, like an AR model.
    shift_logits: bool = True
    causal: bool = False
    mask_token_id: int | None = None
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    bos_token_id: int | None = None
    expand_token_id: int | None = None  # DreamOn: a mask predicted as expand becomes two
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stop_token_ids(self) -> set[int]:
        """Tokens that end a completion when committed inside the hole."""
        return {t for t in (self.eos_token_id, self.pad_token_id) if t is not None}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# Sanity ranges for config values. A config is data from anyone: a value outside these is
# refused with its name before anything is allocated (num_hidden_layers 100000 used to spin
# for minutes building modules before the weights disagreed).
MAX_LAYERS = 1000
MAX_WIDTH = 1 << 20  # hidden and intermediate sizes
MAX_VOCAB = 10_000_000
MAX_HEADS = 1024
MAX_POSITIONS = 1 << 24
_MISSING = object()


def _int(raw: dict[str, Any], key: str, source: str, high: int, default: Any = _MISSING,
         low: int = 1) -> int:
    """`raw[key]` as an integer in low..high (`default` when absent or null, if given)."""
    value = raw.get(key)
    if value is None:
        if default is _MISSING:
            raise CheckpointError(f"{source}: config key '{key}' is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise CheckpointError(f"{source}: {key} must be an integer in {low}..{high}, "
                              f"got {value!r}")
    return value


def _float(raw: dict[str, Any], key: str, source: str, default: float, high: float) -> float:
    """`raw[key]` as a finite number in (0, high]."""
    value = raw.get(key, default)
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not math.isfinite(value) or not 0 < value <= high):
        raise CheckpointError(f"{source}: {key} must be a number in (0, {high:g}], "
                              f"got {value!r}")
    return float(value)


def _bool(raw: dict[str, Any], key: str, source: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):  # "false" is a non-empty string: bool() would say True
        raise CheckpointError(f"{source}: {key} must be true or false, got {value!r}")
    return value


def token_id(value: Any, key: str, source: str) -> int | None:
    """A special token id as configs write it: an integer, a list of them (the first counts),
    or null. The vocabulary range is checked once the tokenizer is known."""
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{source}: {key} must be a non-negative integer, got {value!r}")
    return value


def _heads(raw: dict[str, Any], source: str, hidden: int, heads_key: str, kv_key: str,
           head_dim_key: str | None) -> tuple[int, int, int]:
    """(heads, key/value heads, head dim), checked against each other."""
    heads = _int(raw, heads_key, source, MAX_HEADS)
    kv_heads = _int(raw, kv_key, source, heads, default=heads)
    if heads % kv_heads:
        raise CheckpointError(f"{source}: {heads_key}={heads} is not a multiple of "
                              f"{kv_key}={kv_heads}")
    head_dim = _int(raw, head_dim_key, source, 4096, default=0, low=0) if head_dim_key else 0
    if not head_dim:
        if hidden % heads:
            raise CheckpointError(f"{source}: hidden size {hidden} is not a multiple of "
                                  f"{heads_key}={heads}")
        head_dim = hidden // heads
    return heads, kv_heads, head_dim


# Architectures we implement natively. Anything else is refused by name: the engine never
# runs code shipped inside a checkpoint (`auto_map` is ignored).
MASKED_ARCHITECTURES = {"DreamModel", "DreamForMaskedLM"}
LLADA_ARCHITECTURES = {"LLaDAModelLM", "LLaDAModel"}
AR_ARCHITECTURES = {"Qwen2ForCausalLM"}
BLOCK_ARCHITECTURES = {"DiffusionGemmaForBlockDiffusion"}


def config_from_hf(raw: dict[str, Any], source: str = "config.json") -> ModelConfig:
    """Normalize a Hugging Face `config.json` dict, refusing architectures we do not implement."""
    archs = raw.get("architectures") or []
    model_type = str(raw.get("model_type", "")).lower()
    arch = archs[0] if archs else model_type
    if arch in BLOCK_ARCHITECTURES or model_type == "diffusion_gemma":
        # Absent, it is transformers' default; null reached the decoder as None.
        if "canvas_length" in raw and (
                problem := MODEL_CANVAS_RANGE.problem("canvas_length", raw["canvas_length"])):
            raise CheckpointError(f"{source}: {problem}")
        return ModelConfig(
            family="block", layout="diffusion_gemma", vocab_size=0, hidden_size=0,
            intermediate_size=0, num_layers=0, num_heads=0, num_kv_heads=0, head_dim=0,
            extra={"raw": raw},
        )
    if arch in LLADA_ARCHITECTURES or model_type == "llada":
        return _llada_config(raw, source)
    if arch in MASKED_ARCHITECTURES or model_type == "dream":
        return _qwen2_config(raw, source, family="masked", layout="dream")
    if arch in AR_ARCHITECTURES or model_type == "qwen2":
        return _qwen2_config(raw, source, family="ar", layout="qwen2")
    raise CheckpointError(
        f"{source}: architecture '{arch or 'unknown'}' is not implemented by dg-engine "
        f"(supported: Dream family, LLaDA, Qwen2 AR baseline, DiffusionGemma); "
        "code shipped inside checkpoints is never run"
    )


def _qwen2_config(raw: dict[str, Any], source: str, family: str, layout: str) -> ModelConfig:
    hidden = _int(raw, "hidden_size", source, MAX_WIDTH)
    heads, kv_heads, head_dim = _heads(raw, source, hidden, "num_attention_heads",
                                       "num_key_value_heads", "head_dim")
    rope = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else {}
    return ModelConfig(
        family=family,
        layout=layout,
        vocab_size=_int(raw, "vocab_size", source, MAX_VOCAB),
        hidden_size=hidden,
        intermediate_size=_int(raw, "intermediate_size", source, MAX_WIDTH),
        num_layers=_int(raw, "num_hidden_layers", source, MAX_LAYERS),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=_float(raw, "rope_theta", source, rope.get("rope_theta", 10000.0), 1e12),
        rms_norm_eps=_float(raw, "rms_norm_eps", source, 1e-6, 1.0),
        max_position_embeddings=_int(raw, "max_position_embeddings", source, MAX_POSITIONS,
                                     default=4096),
        tie_word_embeddings=_bool(raw, "tie_word_embeddings", source, False),
        # Qwen2 always carries q/k/v biases; our own checkpoints may leave them out.
        qkv_bias=_bool(raw, "qkv_bias", source, True),
        shift_logits=family == "masked",
        causal=family == "ar",
        **{key: token_id(raw.get(key), key, source) for key in (
            "mask_token_id", "eos_token_id", "pad_token_id", "bos_token_id", "expand_token_id")},
    )


def _llada_config(raw: dict[str, Any], source: str) -> ModelConfig:
    hidden = _int(raw, "d_model", source, MAX_WIDTH)
    heads, kv_heads, head_dim = _heads(raw, source, hidden, "n_heads", "n_kv_heads", None)
    if raw.get("block_type", "llama") != "llama":
        raise CheckpointError(f"{source}: LLaDA block_type '{raw['block_type']}' is not supported")
    vocab_key = "embedding_size" if raw.get("embedding_size") else "vocab_size"
    return ModelConfig(
        family="masked",
        layout="llada",
        vocab_size=_int(raw, vocab_key, source, MAX_VOCAB),
        hidden_size=hidden,
        # LLaDA's mlp_hidden_size is the width of ff_proj and up_proj each.
        intermediate_size=_int(raw, "mlp_hidden_size", source, MAX_WIDTH),
        num_layers=_int(raw, "n_layers", source, MAX_LAYERS),
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        rope_theta=_float(raw, "rope_theta", source, 10000.0, 1e12),
        rms_norm_eps=_float(raw, "rms_norm_eps", source, 1e-5, 1.0),
        max_position_embeddings=_int(raw, "max_sequence_length", source, MAX_POSITIONS,
                                     default=4096),
        tie_word_embeddings=_bool(raw, "weight_tying", source, False),
        qkv_bias=(_bool(raw, "include_bias", source, False)
                  or _bool(raw, "include_qkv_bias", source, False)),
        shift_logits=False,
        causal=False,
        mask_token_id=token_id(raw.get("mask_token_id", 126336), "mask_token_id", source),
        eos_token_id=token_id(raw.get("eos_token_id", 126081), "eos_token_id", source),
        pad_token_id=token_id(raw.get("pad_token_id"), "pad_token_id", source),
        bos_token_id=token_id(raw.get("bos_token_id"), "bos_token_id", source),
    )
