"""One normalized description of a checkpoint's architecture.

Checkpoints arrive in several config dialects (Dream/Qwen2 keys, LLaDA's OLMo keys, plain
Qwen2 for the autoregressive baseline). Everything past the loader reads only `ModelConfig`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


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


def _first_int(value: Any) -> int | None:
    if isinstance(value, list):
        return int(value[0]) if value else None
    return None if value is None else int(value)


def _get(raw: dict[str, Any], key: str, source: str) -> Any:
    if key not in raw:
        raise CheckpointError(f"{source}: config key '{key}' is missing")
    return raw[key]


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
    hidden = int(_get(raw, "hidden_size", source))
    heads = int(_get(raw, "num_attention_heads", source))
    return ModelConfig(
        family=family,
        layout=layout,
        vocab_size=int(_get(raw, "vocab_size", source)),
        hidden_size=hidden,
        intermediate_size=int(_get(raw, "intermediate_size", source)),
        num_layers=int(_get(raw, "num_hidden_layers", source)),
        num_heads=heads,
        num_kv_heads=int(raw.get("num_key_value_heads", heads)),
        head_dim=int(raw.get("head_dim") or hidden // heads),
        rope_theta=float(raw.get("rope_theta", (raw.get("rope_parameters") or {}).get(
            "rope_theta", 10000.0))),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
        max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        # Qwen2 always carries q/k/v biases; our own checkpoints may leave them out.
        qkv_bias=bool(raw.get("qkv_bias", True)),
        shift_logits=family == "masked",
        causal=family == "ar",
        mask_token_id=_first_int(raw.get("mask_token_id")),
        eos_token_id=_first_int(raw.get("eos_token_id")),
        pad_token_id=_first_int(raw.get("pad_token_id")),
        bos_token_id=_first_int(raw.get("bos_token_id")),
        expand_token_id=_first_int(raw.get("expand_token_id")),
    )


def _llada_config(raw: dict[str, Any], source: str) -> ModelConfig:
    hidden = int(_get(raw, "d_model", source))
    heads = int(_get(raw, "n_heads", source))
    if raw.get("block_type", "llama") != "llama":
        raise CheckpointError(f"{source}: LLaDA block_type '{raw['block_type']}' is not supported")
    vocab = int(raw.get("embedding_size") or _get(raw, "vocab_size", source))
    return ModelConfig(
        family="masked",
        layout="llada",
        vocab_size=vocab,
        hidden_size=hidden,
        # LLaDA's mlp_hidden_size is the width of ff_proj and up_proj each.
        intermediate_size=int(_get(raw, "mlp_hidden_size", source)),
        num_layers=int(_get(raw, "n_layers", source)),
        num_heads=heads,
        num_kv_heads=int(raw.get("n_kv_heads") or heads),
        head_dim=hidden // heads,
        rope_theta=float(raw.get("rope_theta", 10000.0)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-5)),
        max_position_embeddings=int(raw.get("max_sequence_length", 4096)),
        tie_word_embeddings=bool(raw.get("weight_tying", False)),
        qkv_bias=bool(raw.get("include_bias", False) or raw.get("include_qkv_bias", False)),
        shift_logits=False,
        causal=False,
        mask_token_id=_first_int(raw.get("mask_token_id", 126336)),
        eos_token_id=_first_int(raw.get("eos_token_id", 126081)),
        pad_token_id=_first_int(raw.get("pad_token_id")),
        bos_token_id=_first_int(raw.get("bos_token_id")),
    )
