"""`dg-engine plan`: the memory a model needs, from its config alone, and where it fits; on
this machine's CPU, with it, what a line is expected to cost (engine.models.latency).

    dg-engine plan --model DIR_OR_CONFIG [--device cpu|cuda|auto] [--dtype bf16|fp32|int8|int4]
                   [--memory-gb 24 80 141]

Counted from the architecture, with no weights read (the model is built on the meta device):

- weights: every parameter once (tied ones once) in the dtype. int8 is weight-only: each
  matrix of a linear layer or of the experts takes one byte per weight plus a float32 scale
  per output row; embeddings (read a row per token) and vectors stay in the compute dtype.
  int4 (engine.models.int4) is weight-only too: half a byte per weight plus a bfloat16 scale
  and zero per group of input features, for every matrix whose input features make whole
  groups (experts included); the rest, embeddings and a head tied to them included, stays in
  the compute dtype.
- context KV: keys and values of 256 context tokens (a full canvas, the most the engine
  caches for one request) in every layer, at batch 1 and 8.
- step logits: one pass's float32 logits over the 256-position canvas (the samplers work in
  float32), at batch 1 and 8.
- self-conditioning (block family): the previous step's logits the decoder reads back, one
  canvas x vocabulary per sequence in the compute dtype; with DiffusionGemma's 262K vocabulary
  this is what limits the batch (vLLM caps it at 4 sequences for the same reason).

A total fits a memory when it takes at most 90% of it: the rest is for the runtime (a CUDA
context, the allocator's slack, activations of one pass).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from engine.bounds import MEMORY_GB_RANGE, bounded_argument
from engine.models.config import ModelConfig, config_from_hf
from engine.models.int4 import DEFAULT_GROUP_SIZE
from engine.types import CANVAS_LENGTH as CANVAS

BATCHES = (1, 8)
USABLE_SHARE = 0.9
GB = 1e9

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}
DTYPE_NAMES = {"fp32": "float32", "float32": "float32", "bf16": "bfloat16",
               "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16", "int8": "int8",
               "int4": "int4"}
QUANTIZED = ("int8", "int4")


@dataclass
class Plan:
    model: str
    family: str
    dtype: str
    parameters: int
    weights: int  # bytes
    kv: dict[int, int]  # batch -> bytes
    logits: dict[int, int]
    self_conditioning: dict[int, int]  # empty for families without it

    def total(self, batch: int) -> int:
        return (self.weights + self.kv[batch] + self.logits[batch]
                + self.self_conditioning.get(batch, 0))

    def fits(self, batch: int, memory: int) -> bool:
        return self.total(batch) <= USABLE_SHARE * memory


def read_config(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(a name for it, the config dict) from a checkpoint folder, a config.json or a hub id."""
    from engine.models.checkpoint import read_json, resolve

    p = Path(path).expanduser()
    file = p if p.is_file() else resolve(str(path)) / "config.json"
    raw = read_json(file)
    name = file.parent.name if file.name == "config.json" else file.stem
    return name, raw


def _meta_model(cfg: ModelConfig) -> nn.Module:
    with torch.device("meta"):
        if cfg.family == "block":
            from engine.models.block import _transformers

            tf = _transformers()
            raw = cfg.extra["raw"]
            config = tf.DiffusionGemmaConfig(**{k: v for k, v in raw.items()
                                                if k not in ("architectures", "model_type")})
            model = tf.DiffusionGemmaForBlockDiffusion(config)
            model.tie_weights()
            return model
        from engine.models.transformer import Transformer

        return Transformer(cfg)


def weight_bytes(model: nn.Module, dtype: str, compute_bytes: int,
                 group_size: int = DEFAULT_GROUP_SIZE) -> tuple[int, int]:
    """(parameters, bytes) of `model`'s weights in `dtype` (see the module docstring)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    params, total = 0, 0
    for p in model.parameters():  # each shared parameter once
        params += p.numel()
        matrix = p.dim() >= 2 and id(p) not in embeddings
        if dtype == "int8" and matrix:
            rows = p.numel() // p.shape[-1]
            total += p.numel() + 4 * rows
        elif dtype == "int4" and matrix and p.shape[-1] % group_size == 0:
            total += p.numel() // 2 + 2 * 2 * (p.numel() // group_size)
        else:
            total += p.numel() * compute_bytes
    return params, total


def _kv_per_token(cfg: ModelConfig, act_bytes: int) -> int:
    """Bytes of keys and values one context token adds across all layers."""
    if cfg.family != "block":
        return cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * act_bytes
    text = cfg.extra["raw"]["text_config"]
    total = 0
    for kind in text.get("layer_types") or ["full_attention"] * text["num_hidden_layers"]:
        if kind == "full_attention":
            heads = text.get("num_global_key_value_heads") or text["num_key_value_heads"]
            dim = text.get("global_head_dim") or text["head_dim"]
        else:
            heads, dim = text["num_key_value_heads"], text["head_dim"]
        total += 2 * heads * dim * act_bytes
    return total


def _int8_embedding_on_cpu(cfg: ModelConfig, raw: dict[str, Any]) -> int:
    """What the CPU's int8 load (engine.models.int8.load_int8) holds beside `weight_bytes`'
    float32 embedding: a 16-bit embedding as stored (the config's `torch_dtype`) stays 16-bit,
    and a head tied to it is quantized into an int8 copy of its own."""
    embedding = cfg.vocab_size * cfg.hidden_size
    stored = DTYPE_BYTES.get(raw.get("torch_dtype", "float32"), 4)
    extra = (min(stored, 4) - 4) * embedding
    if cfg.tie_word_embeddings:
        extra += embedding + 4 * cfg.vocab_size
    return extra


def plan(raw: dict[str, Any], dtype: str = "bfloat16", device: str = "cuda",
         name: str = "model") -> Plan:
    """The memory `raw` (a config.json dict) needs in `dtype` on a `device` of that type."""
    dtype = DTYPE_NAMES.get(dtype, dtype)
    if dtype not in DTYPE_BYTES and dtype not in QUANTIZED:
        raise ValueError(f"dtype '{dtype}' is not one of {', '.join(DTYPE_NAMES)}")
    cfg = config_from_hf(raw)
    # Around quantized layers the model is float32 on the CPU (what it loads in there) and
    # bf16 on a GPU.
    compute = DTYPE_BYTES[dtype] if dtype not in QUANTIZED else (4 if device == "cpu" else 2)
    params, weights = weight_bytes(_meta_model(cfg), dtype, compute)
    if dtype == "int8" and device == "cpu" and cfg.family != "block":
        weights += _int8_embedding_on_cpu(cfg, raw)
    vocab = raw["text_config"]["vocab_size"] if cfg.family == "block" else cfg.vocab_size
    canvas = raw.get("canvas_length", CANVAS) if cfg.family == "block" else CANVAS
    per_token = _kv_per_token(cfg, compute)
    return Plan(
        model=name, family=cfg.family, dtype=dtype, parameters=params, weights=weights,
        kv={b: b * CANVAS * per_token for b in BATCHES},
        logits={b: b * canvas * vocab * 4 for b in BATCHES},
        self_conditioning=({b: b * canvas * vocab * compute for b in BATCHES}
                           if cfg.family == "block" else {}),
    )


def device_memory(device: str) -> tuple[str, int]:
    """(what it is, bytes) of the device's memory: the GPU's, or this machine's RAM."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device '{device}' was asked for but CUDA is not available; "
                             "give --memory-gb to plan for a GPU that is not here")
        props = torch.cuda.get_device_properties(torch.device(device))
        return f"{props.name}", props.total_memory
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return "this machine's RAM", int(line.split()[1]) * 1024
    raise ValueError("cannot read this machine's memory size")


def format_plan(p: Plan, memories: list[tuple[str, int]]) -> str:
    lines = [f"{p.model}: {p.family} family, {p.dtype}, {p.parameters / 1e9:.2f} B parameters"]

    def row(label: str, values: dict[int, int] | int) -> None:
        if isinstance(values, int):
            lines.append(f"  {label:34} {values / GB:8.2f} GB")
        else:
            lines.append(f"  {label:34} " + "  ".join(
                f"{values[b] / GB:8.2f} GB (batch {b})" for b in BATCHES))

    row("weights", p.weights)
    row(f"context KV, {CANVAS} tokens", p.kv)
    row("step logits (float32)", p.logits)
    if p.self_conditioning:
        row("self-conditioning logits", p.self_conditioning)
    row("total", {b: p.total(b) for b in BATCHES})
    for label, memory in memories:
        verdict = ", ".join(f"batch {b}: {'fits' if p.fits(b, memory) else 'does not fit'}"
                            for b in BATCHES)
        lines.append(f"  on {label}: {verdict}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    name, raw = read_config(args.model)
    device = args.device
    if args.memory_gb:
        memories = [(f"{gb:g} GB", int(gb * GB)) for gb in args.memory_gb]
        device = "cpu" if device == "cpu" else "cuda"
    else:
        label, memory = device_memory(device)
        memories = [(f"{label} ({memory / GB:.0f} GB)", memory)]
        device = "cpu" if label == "this machine's RAM" else "cuda"
    result = plan(raw, args.dtype, device, name)
    line = None
    if device == "cpu" and not args.memory_gb and not args.no_latency:
        from engine.models.latency import estimate_line

        line = estimate_line(config_from_hf(raw), result.dtype)
    if args.json:
        print(json.dumps({**asdict(result), "memories": memories,
                          "fits": {label: {b: result.fits(b, m) for b in BATCHES}
                                   for label, m in memories},
                          "line": None if line is None else asdict(line)}))
    else:
        print(format_plan(result, memories))
        if line is not None:
            print(format_line(line))
    return 0


def format_line(line: Any) -> str:
    """The expected latency of a line on this CPU (engine.models.latency), and its basis."""
    from engine.models.latency import LINE_TOKENS, TOKENS_PER_PASS

    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"  a warm {LINE_TOKENS}-token line at {TOKENS_PER_PASS} tokens a pass, "
            f"{line.threads} thread{'s' if line.threads > 1 else ''}: about {line.ms:,.0f} ms "
            f"on this CPU (an estimate: {line.basis}; load average {load})")


def register(sub: Any) -> None:
    parser = sub.add_parser("plan", help="the memory a model needs, from its config alone",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="checkpoint folder, its config.json, or a hub id in the local cache")
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda[:N] or auto: whose memory to compare with")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPE_NAMES))
    parser.add_argument("--memory-gb", type=bounded_argument(MEMORY_GB_RANGE), nargs="+",
                        help="compare with devices of these sizes instead of this machine's")
    parser.add_argument("--no-latency", action="store_true",
                        help="skip the expected latency of a line on this CPU (it times one "
                        "layer at the model's shape: seconds for a 7B model)")
    parser.add_argument("--json", action="store_true", help="the figures as JSON")
    parser.set_defaults(func=run)
