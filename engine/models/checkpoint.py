"""Finding, reading, validating and loading checkpoints.

A checkpoint is a Hugging Face-layout folder. Three steps, each usable alone:

    path = resolve("org/name" | "/some/folder" | None)   # never downloads
    ckpt = read_checkpoint(path)                          # config, ids, tokenizer; no weights
    model = load_model(ckpt, device="auto", dtype="auto")  # masked and AR families

Weights come from safetensors only: unpickling a `.bin` can run arbitrary code, and the engine
never runs code shipped inside a checkpoint (an `auto_map` is ignored by `config_from_hf`).
Every tensor is checked against the config before the model is built, so a bad checkpoint
fails with the file and tensor named and never yields a half-loaded model.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import torch
from safetensors import safe_open

from engine.models import BUNDLED_MODELS
from engine.models.config import CheckpointError, ModelConfig, config_from_hf, token_id
from engine.models.int4 import install_int4, int4_targets, quantize_nibbles
from engine.models.transformer import Transformer
from engine.text.tokenizer import Tokenizer

log = logging.getLogger(__name__)

BUNDLED_MODEL_DIR = BUNDLED_MODELS / "default"

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


# ---------------------------------------------------------------------------------------------
# Where a checkpoint lives


def hub_cache_dir() -> Path:
    """The local Hugging Face hub cache, found the way huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


def _snapshot_in_cache(hub_id: str, cache: Path) -> Path | None:
    repo = cache / ("models--" + hub_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / "main"
    if ref.is_file():
        pinned = snapshots / ref.read_text().strip()
        if pinned.is_dir():
            return pinned
    # No usable refs/main (a download pinned to another revision): take the newest snapshot.
    candidates = sorted((p for p in snapshots.iterdir() if p.is_dir()),
                        key=lambda p: p.stat().st_mtime)
    return candidates[-1] if candidates else None


def resolve(path_or_hub_id: str | os.PathLike[str] | None) -> Path:
    """A local checkpoint folder for a path, a hub id (`org/name`) or None (the bundled model)."""
    if path_or_hub_id is None:
        if not (BUNDLED_MODEL_DIR / "config.json").is_file():
            raise CheckpointError(
                f"the bundled model is not installed (no config.json in {BUNDLED_MODEL_DIR}); "
                "pass a checkpoint folder or a hub id instead"
            )
        return BUNDLED_MODEL_DIR
    text = str(path_or_hub_id)
    path = Path(text).expanduser()
    if path.is_dir():
        return path
    if path.exists():
        raise CheckpointError(f"{path}: a checkpoint is a folder, not a file")
    is_hub_id = re.fullmatch(r"[\w.\-]+/[\w.\-]+", text) is not None
    if not is_hub_id:
        raise CheckpointError(f"{text}: no such checkpoint folder")
    cache = hub_cache_dir()
    snapshot = _snapshot_in_cache(text, cache)
    if snapshot is None:
        raise CheckpointError(
            f"{text}: not a local folder and not in the Hugging Face cache (looked in "
            f"{cache / ('models--' + text.replace('/', '--'))}); dg-engine never downloads "
            f"at run time: fetch it first with `hf download {text}`"
        )
    return snapshot


# ---------------------------------------------------------------------------------------------
# Device and dtype


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """"auto" is the GPU when there is one, else the CPU."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device '{device}' was asked for but CUDA is not available")
    return dev


DTYPES = {
    "float32": torch.float32, "fp32": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    # Not fast anywhere; it makes outputs the same on every CPU whatever its kernels (the
    # golden test's outputs: float32 sums in another order can flip a near-tied token).
    "float64": torch.float64,
}


# Weight-only quantization schemes `Engine.load` takes as a dtype; the model computes in a float
# dtype around them.
QUANTIZED_DTYPES = ("int8", "int4")


def resolve_dtype(dtype: str | torch.dtype, device: torch.device | str) -> torch.dtype:
    """"auto" is bfloat16 on CUDA (float16 where bf16 is missing) and float32 elsewhere.

    Half-precision weights are upcast on the CPU, where half-precision matmuls are slow.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        if torch.device(device).type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype '{dtype}' is not one of auto, {', '.join(DTYPES)} (the "
                         f"quantized {' and '.join(QUANTIZED_DTYPES)} are taken by Engine.load)")
    return DTYPES[dtype]


def quantized_on(dtype: str | torch.dtype, device: torch.device | str, family: str
                 ) -> str | None:
    """The scheme `Engine.load` quantizes the linear layers to ("int8", "int4"), or None:
    asked for, or int8 by default ("auto") for the masked family on the CPU, where a pass
    mostly streams weights.

    Not the AR family by default: in int8 the AR baseline loses much of its edit similarity
    at no gain in speed, its passes being one token each (docs/models.md, "The bundled model").
    int8 (dynamic quantization) runs on the CPU only; int4 (engine.models.int4) on the CPU and
    on CUDA."""
    if dtype == "int8" and torch.device(device).type != "cpu":
        raise ValueError("dtype 'int8' (dynamic quantization) runs on the CPU only")
    if dtype == "auto":
        default = torch.device(device).type == "cpu" and family == "masked"
        return "int8" if default else None
    return dtype if dtype in QUANTIZED_DTYPES else None


# ---------------------------------------------------------------------------------------------
# Reading a checkpoint (everything but the weights)


@dataclass
class Checkpoint:
    path: Path
    config: ModelConfig
    raw_config: dict[str, Any]
    generation_config: dict[str, Any]
    tokenizer: Tokenizer


def read_json(path: Path, required: bool = True) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{path}: file is missing")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


# Where each special id may come from when config.json lacks it: generation_config.json, the
# token named in tokenizer_config.json, then well-known token strings in the vocabulary.
SPECIAL_TOKENS = {
    "mask_token_id": ("mask_token", ["<|mask|>", "<|mdm_mask|>", "<mask>", "[MASK]"]),
    "eos_token_id": ("eos_token", ["<|endoftext|>", "</s>", "<eos>", "<|eos|>"]),
    "pad_token_id": ("pad_token", ["<|dlm_pad|>", "<|pad|>", "<pad>", "[PAD]"]),
    "bos_token_id": ("bos_token", ["<|bos|>", "<|startoftext|>", "<s>", "<bos>"]),
    "expand_token_id": (None, ["<|expand|>"]),
}


def _token_name(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens as strings or as AddedToken dicts.
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _fill_special_ids(
    cfg: ModelConfig, raw: dict[str, Any], generation: dict[str, Any],
    tok_config: dict[str, Any], tokenizer: Tokenizer, generation_source: Path,
) -> ModelConfig:
    updates: dict[str, int] = {}
    for field, (config_key, known) in SPECIAL_TOKENS.items():
        # `raw` decides, not `cfg`: config_from_hf fills LLaDA's published ids as defaults,
        # which a small checkpoint in LLaDA's layout must not inherit.
        if raw.get(field) is not None:
            continue
        found = token_id(generation.get(field), field, str(generation_source))
        named = _token_name(tok_config.get(config_key)) if config_key else None
        for token in ([named] if named else []) + known:
            if found is not None:
                break
            found = tokenizer.token_id(token)
        updates[field] = found if found is not None else getattr(cfg, field)
    return dataclasses.replace(cfg, **updates)


def _check_llada_options(raw: dict[str, Any], source: Path) -> None:
    # LLaDA's modeling code has switches our transformer does not implement; refuse them
    # rather than compute something else.
    unsupported = {
        "input_emb_norm": False, "alibi": False, "rope": True, "include_bias": False,
        "scale_logits": False, "attention_layer_norm": False,
    }
    for key, supported in unsupported.items():
        if key in raw and bool(raw[key]) != supported:
            raise CheckpointError(f"{source}: LLaDA option {key}={raw[key]!r} is not supported")
    if raw.get("layer_norm_type", "rms") != "rms":
        raise CheckpointError(f"{source}: LLaDA layer_norm_type {raw['layer_norm_type']!r} "
                              "is not supported (only 'rms')")
    if raw.get("activation_type", "silu") not in ("silu", "swiglu"):
        raise CheckpointError(f"{source}: LLaDA activation_type {raw['activation_type']!r} "
                              "is not supported")


def read_checkpoint(path: str | os.PathLike[str]) -> Checkpoint:
    """Read config, generation config and tokenizer of a checkpoint folder; no weights yet."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such checkpoint folder")
    raw = read_json(path / "config.json")
    cfg = config_from_hf(raw, source=str(path / "config.json"))
    if cfg.layout == "llada":
        _check_llada_options(raw, path / "config.json")
    generation = read_json(path / "generation_config.json", required=False)
    tok_config = read_json(path / "tokenizer_config.json", required=False)
    tok_file = path / "tokenizer.json"
    if not tok_file.is_file():
        raise CheckpointError(f"{tok_file}: file is missing (dg-engine reads the fast-tokenizer "
                              "tokenizer.json)")
    try:
        tokenizer = Tokenizer.from_file(tok_file)
    except Exception as e:  # tokenizers raises a bare Exception on malformed files
        raise CheckpointError(f"{tok_file}: cannot be read ({e})") from e
    cfg = _fill_special_ids(cfg, raw, generation, tok_config, tokenizer,
                            path / "generation_config.json")
    if cfg.family != "block":
        _check_token_ids(cfg, tokenizer, path / "config.json")
    return Checkpoint(path, cfg, raw, generation, tokenizer)


def _check_token_ids(cfg: ModelConfig, tokenizer: Tokenizer, source: Path) -> None:
    if tokenizer.vocab_size > cfg.vocab_size:
        raise CheckpointError(f"{source}: the tokenizer has {tokenizer.vocab_size} tokens but "
                              f"the model's vocab_size is {cfg.vocab_size}")
    for field in SPECIAL_TOKENS:
        value = getattr(cfg, field)
        if value is not None and not 0 <= value < cfg.vocab_size:
            raise CheckpointError(f"{source}: {field}={value} is outside the vocabulary "
                                  f"(vocab_size {cfg.vocab_size})")
    if cfg.family == "masked" and cfg.mask_token_id is None:
        raise CheckpointError(f"{source}: no mask_token_id in the config, the generation "
                              "config or the tokenizer; a masked diffusion model needs one")


# ---------------------------------------------------------------------------------------------
# Weights


def weight_files(folder: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file that holds it, as the folder's index says."""
    single, index = folder / SAFETENSORS_FILE, folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = read_json(index).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index}: no weight_map")
        files = {name: folder / _shard_name(index, name, file)
                 for name, file in weight_map.items()}
        for file in sorted(set(files.values())):
            if not file.is_file():
                raise CheckpointError(f"{index}: lists {file.name}, which is missing")
        return files
    if single.is_file():
        return {name: single for name in _tensor_names(single)}
    pickles = sorted(p.name for p in folder.iterdir() if p.name.endswith(PICKLE_SUFFIXES))
    if pickles:
        raise CheckpointError(
            f"{folder}: only pickle weights ({', '.join(pickles)}); dg-engine loads safetensors "
            "only, because unpickling a file can run arbitrary code. Convert the weights once, "
            "with a tool you trust, to model.safetensors"
        )
    raise CheckpointError(f"{folder}: no {SAFETENSORS_FILE} and no {SAFETENSORS_INDEX}")


def _shard_name(index: Path, tensor: str, file: Any) -> str:
    """A weight_map entry, refused unless it names a file inside the checkpoint folder.

    Checked on the name, not on the resolved path: the Hugging Face cache's snapshot files
    are symlinks into its blobs folder, and must stay loadable."""
    if not isinstance(file, str) or not file:
        raise CheckpointError(f"{index}: weight_map entry for '{tensor}' must be a file name, "
                              f"got {file!r}")
    parts = PurePosixPath(file.replace("\\", "/")).parts
    if PurePosixPath(file).is_absolute() or Path(file).is_absolute() or ".." in parts:
        raise CheckpointError(f"{index}: weight_map entry for '{tensor}' ({file!r}) points "
                              "outside the checkpoint folder")
    return file


def _layers_in(names: Iterable[str], layout: str) -> int:
    """How many transformer layers the tensor names hold (highest layer index + 1)."""
    pattern = re.compile(r"model\.transformer\.blocks\.(\d+)\." if layout == "llada"
                         else r"model\.layers\.(\d+)\.")
    indices = [int(m.group(1)) for name in names if (m := pattern.match(name))]
    return max(indices) + 1 if indices else 0


def _tensor_names(file: Path) -> list[str]:
    try:
        with safe_open(str(file), framework="pt") as f:
            return list(f.keys())
    except Exception as e:  # safetensors raises SafetensorError and OSError subclasses
        raise _unreadable(file, e) from e


def _unreadable(file: Path, error: Exception) -> CheckpointError:
    """The error for a file safetensors refuses, naming the first cut-off tensor if truncated."""
    # Layout: 8-byte little-endian header size, a JSON header with each tensor's byte range
    # in the data section, then the data section.
    try:
        size = file.stat().st_size
        with file.open("rb") as f:
            header_size = int.from_bytes(f.read(8), "little")
            if 8 + header_size <= size:
                header = json.loads(f.read(header_size))
                data_size = size - 8 - header_size
                cut = sorted((info["data_offsets"][1], name) for name, info in header.items()
                             if name != "__metadata__" and info["data_offsets"][1] > data_size)
                if cut:
                    end, name = cut[0]
                    return CheckpointError(
                        f"{file}: truncated: tensor '{name}' ends at byte {end} of the data "
                        f"section, which holds only {data_size} bytes")
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        pass
    return CheckpointError(f"{file}: not a readable safetensors file ({error})")


# (LLaDA's name, ours) prefixes, from modeling_llada.py's LLaDALlamaBlock; {i} is the layer
# and {x} one of q/k/v.
LLADA_NAMES = [
    ("model.transformer.wte.", "model.embed_tokens."),
    ("model.transformer.ln_f.", "model.norm."),
    ("model.transformer.ff_out.", "lm_head."),
    ("model.transformer.blocks.{i}.attn_norm.", "model.layers.{i}.input_layernorm."),
    ("model.transformer.blocks.{i}.ff_norm.", "model.layers.{i}.post_attention_layernorm."),
    ("model.transformer.blocks.{i}.{x}_proj.", "model.layers.{i}.self_attn.{x}_proj."),
    ("model.transformer.blocks.{i}.attn_out.", "model.layers.{i}.self_attn.o_proj."),
    ("model.transformer.blocks.{i}.ff_proj.", "model.layers.{i}.mlp.gate_proj."),
    ("model.transformer.blocks.{i}.up_proj.", "model.layers.{i}.mlp.up_proj."),
    ("model.transformer.blocks.{i}.ff_out.", "model.layers.{i}.mlp.down_proj."),
]


def _rename(name: str, src: int, dst: int) -> str:
    for rule in LLADA_NAMES:
        pattern = re.escape(rule[src]).replace(r"\{i\}", r"(?P<i>\d+)")
        match = re.match(pattern.replace(r"\{x\}", "(?P<x>[qkv])"), name)
        if match:
            return rule[dst].format(**match.groupdict()) + name[match.end():]
    return name  # unknown: reported under its own name


def our_name(checkpoint_name: str, layout: str) -> str:
    """The module path of a checkpoint tensor (LLaDA's names are mapped, Qwen2's kept)."""
    return _rename(checkpoint_name, 0, 1) if layout == "llada" else checkpoint_name


def checkpoint_name(ours: str, layout: str) -> str:
    """Inverse of `our_name`: how the checkpoint names one of our tensors."""
    return _rename(ours, 1, 0) if layout == "llada" else ours


def load_model(ckpt: Checkpoint, device: str = "auto", dtype: str = "auto",
               int4_group: int | None = None) -> Transformer:
    """The masked- or AR-family transformer of `ckpt`, on `device` in `dtype`, in eval mode.

    Tensors are memory-mapped and read one at a time straight to the target device. All names
    and shapes are checked before the first tensor is read.

    With `int4_group`, the linear layers `int4_targets` names are quantized while loading, a
    row block at a time on the device: neither host nor device holds a weight in 16 bits.
    They come unpacked (`fuse_projections` concatenates them): `pack_int4` the model after.
    """
    cfg = ckpt.config
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    model, plan = meta_model(ckpt)
    targets = int4_targets(model, int4_group)[0] if int4_group else {}
    quantized: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    state: dict[str, torch.Tensor] = {}
    for ours, (ckpt_name, file) in plan.items():
        module, _, kind = ours.rpartition(".")
        if int4_group and module in targets and kind == "weight":
            quantized[module] = _read_int4(file, ckpt_name, dev, int4_group)
        else:
            state[ours] = read_tensor(file, ckpt_name, dev, dt)
    install_int4(model, quantized, state, int4_group or 0, dt)
    if cfg.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_word_embeddings:
        # assign=True replaced both parameters; share one tensor again.
        model.lm_head.weight = model.model.embed_tokens.weight
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_meta:
            raise CheckpointError(f"{ckpt.path}: '{name}' was not initialized by the checkpoint")
    return model.eval()


def meta_model(ckpt: Checkpoint) -> tuple[Transformer, dict[str, tuple[str, Path]]]:
    """`ckpt`'s transformer on the meta device, and where each of its tensors is stored
    (`_plan`: every name and shape checked before the first tensor is read)."""
    cfg = ckpt.config
    if cfg.family not in ("masked", "ar"):
        raise CheckpointError(f"{ckpt.path}: family '{cfg.family}' is not loaded by load_model")
    files = weight_files(ckpt.path)
    # Before building anything: a config with far more layers than the weights hold would
    # spend minutes constructing modules only to fail on the first missing tensor.
    stored = _layers_in(files, cfg.layout)
    if cfg.num_layers > stored:
        key = "n_layers" if cfg.layout == "llada" else "num_hidden_layers"
        raise CheckpointError(f"{ckpt.path / 'config.json'}: {key}={cfg.num_layers} but the "
                              f"weights hold {stored} layers")
    with torch.device("meta"):
        model = Transformer(cfg)
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    return model, _plan(files, expected, cfg, ckpt.path)


def _plan(
    files: dict[str, Path], expected: dict[str, tuple[int, ...]], cfg: ModelConfig, folder: Path
) -> dict[str, tuple[str, Path]]:
    """Our name -> (checkpoint name, file), after checking every name and shape."""
    plan: dict[str, tuple[str, Path]] = {}
    shapes_by_file: dict[Path, dict[str, tuple[int, ...]]] = {}
    for ckpt_name, file in files.items():
        ours = our_name(ckpt_name, cfg.layout)
        if cfg.tie_word_embeddings and ours == "lm_head.weight":
            continue  # some tied checkpoints store the head anyway; the embedding wins
        if ours not in expected:
            raise CheckpointError(f"{file}: unexpected tensor '{ckpt_name}' (not part of a "
                                  f"{cfg.layout} model with this config)")
        if file not in shapes_by_file:
            shapes_by_file[file] = _tensor_shapes(file)
        shape = shapes_by_file[file].get(ckpt_name)
        if shape is None:
            raise CheckpointError(f"{file}: tensor '{ckpt_name}' is listed in the index but "
                                  "not stored in this file")
        if shape != expected[ours]:
            raise CheckpointError(f"{file}: tensor '{ckpt_name}' has shape {list(shape)}, the "
                                  f"config implies {list(expected[ours])}")
        plan[ours] = (ckpt_name, file)
    for ours, shape in expected.items():
        if ours in plan or (cfg.tie_word_embeddings and ours == "lm_head.weight"):
            continue
        name = checkpoint_name(ours, cfg.layout)
        raise CheckpointError(f"{folder}: tensor '{name}' (shape {list(shape)}) is missing "
                              f"from the weights")
    return plan


def _tensor_shapes(file: Path) -> dict[str, tuple[int, ...]]:
    try:
        with safe_open(str(file), framework="pt") as f:
            return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except Exception as e:
        raise _unreadable(file, e) from e


# safetensors' dtype names of the floating-point tensors a checkpoint may hold.
FLOAT_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16,
                "BF16": torch.bfloat16}
# A tensor converted to another dtype is read in row blocks of about this size: reading it
# whole would hold both copies at once (an embedding is most of a small model's weights).
CONVERT_CHUNK_BYTES = 64 << 20
# Quantized while loading, a tensor is read in smaller blocks: each is quantized in float32,
# whose temporaries are several times the block's size.
QUANTIZE_READ_BYTES = 1 << 20


def read_tensor(file: Path, name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    try:
        with safe_open(str(file), framework="pt", device=str(device)) as f:
            stored = f.get_slice(name)
            stored_dtype = FLOAT_DTYPES.get(stored.get_dtype())
            if stored_dtype is None:
                raise CheckpointError(f"{file}: tensor '{name}' has dtype "
                                      f"{stored.get_dtype()}, expected floating point")
            shape = stored.get_shape()
            if stored_dtype == dtype or len(shape) < 2:
                # Memory-mapped as stored: the pages load as the model first reads them.
                return f.get_tensor(name).to(dtype)
        return _read_converted(file, name, shape, stored_dtype, device, dtype)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{file}: tensor '{name}' cannot be read ({e})") from e


def _read_converted(file: Path, name: str, shape: list[int], stored_dtype: torch.dtype,
                    device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Tensor `name` in `dtype`, read from the file in row blocks with plain reads.

    Not through the memory map: the mapped pages of the stored copy would count in the
    process's memory (RSS) until the file is closed, so a load to another dtype would peak at
    both copies of the largest tensor."""
    out = torch.empty(shape, dtype=dtype, device=device)
    for first, block in _row_blocks(file, name, shape, stored_dtype):
        out[first:first + block.shape[0]].copy_(block)
    return out


def _read_int4(file: Path, name: str, device: torch.device, group_size: int
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """(nibbles, scales_and_zeros) of the 2-D float tensor `name`, quantized on `device` a row
    block at a time (`_read_converted`'s reads: no 16-bit copy of the whole tensor)."""
    try:
        with safe_open(str(file), framework="pt") as f:
            shape, kind = f.get_slice(name).get_shape(), f.get_slice(name).get_dtype()
        if kind not in FLOAT_DTYPES:
            raise CheckpointError(f"{file}: tensor '{name}' has dtype {kind}, expected "
                                  "floating point")
        parts = [quantize_nibbles(block, group_size, device) for _, block
                 in _row_blocks(file, name, shape, FLOAT_DTYPES[kind], QUANTIZE_READ_BYTES)]
        return torch.cat([n for n, _ in parts]), torch.cat([sz for _, sz in parts], 1)
    except CheckpointError:
        raise
    except Exception as e:
        raise CheckpointError(f"{file}: tensor '{name}' cannot be read ({e})") from e


def _row_blocks(file: Path, name: str, shape: list[int], stored_dtype: torch.dtype,
                block_bytes: int = CONVERT_CHUNK_BYTES) -> Iterator[tuple[int, torch.Tensor]]:
    """(first row, rows) of tensor `name` as stored, about `block_bytes` at a time, read with
    plain reads into one buffer (each block is valid until the next is read)."""
    with file.open("rb") as fh:
        header_size = int.from_bytes(fh.read(8), "little")
        start = 8 + header_size + json.loads(fh.read(header_size))[name]["data_offsets"][0]
        row_bytes = max(1, math.prod(shape[1:]) * stored_dtype.itemsize)
        rows = max(1, block_bytes // row_bytes)
        buf = torch.empty(min(rows, shape[0]) * row_bytes, dtype=torch.uint8)
        fh.seek(start)
        for first in range(0, shape[0], rows):
            n = min(rows, shape[0] - first)
            view = buf[:n * row_bytes]
            if fh.readinto(view.numpy()) != n * row_bytes:
                raise CheckpointError(f"{file}: tensor '{name}' is cut short")
            yield first, view.view(stored_dtype).view(n, *shape[1:])
