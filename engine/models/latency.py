"""What `dg-engine plan` expects a line to cost on this machine's CPU, from a timed layer.

A pass of the masked family over a few rows is the model's layers and its head, one after
another; on the CPU each costs about what one layer of the same shape and dtype costs here.
So one layer is built at the model's shape with random weights (the values do not change the
arithmetic), in the dtype the engine would run, and timed over the rows of each pass of a warm
line against the rest of a canvas held as cached keys/values; the layers are that times their
count, and the head is the layer's matrix time scaled by its weights. The passes are those of a
warm LINE_TOKENS-token line at TOKENS_PER_PASS tokens a pass with the default settings: the
keystroke's first pass (the hole and the suffix after it: the prefix comes from the prefix
cache), one windowed refresh, and the cached passes over the hole's masked range.

An estimate of the model's passes only, each layer timed at its fastest of a few runs (with a
core to itself): the sampler, the language server, the socket and the machine's other work are
not in it. The measured figures are the real-shape bench's (docs/performance.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from engine.models.config import ModelConfig
from engine.types import CANVAS_LENGTH

LINE_TOKENS = 16
TOKENS_PER_PASS = 2
# (rows through the layers, rows through the head) of each pass of a warm line (see the
# module docstring): the first pass, a refresh of the hole and its window, then the cached
# passes over a shrinking masked range; the head reads the masked range only.
WARM_PASSES = ((64, 16), (48, 12)) + ((12, 12),) * 6
REPEATS = 10
DTYPES = ("int8", "float32", "bfloat16")


@dataclass(frozen=True)
class LineEstimate:
    ms: float  # a warm line's passes
    layer_ms: dict[int, float]  # one layer over that many rows
    threads: int
    basis: str  # how it was derived, in words


def _layer(cfg: ModelConfig, dtype: str) -> nn.Module:
    from engine.models.int8 import _quantize_in_place
    from engine.models.transformer import Block

    block = Block(cfg).eval()
    block.self_attn.fuse()
    block.mlp.fuse()
    if dtype == "int8":
        return _quantize_in_place(block)
    return block.to(torch.bfloat16 if dtype == "bfloat16" else torch.float32)


def _time_rows(block: nn.Module, cfg: ModelConfig, rows: int, dtype: torch.dtype) -> float:
    """Seconds of one layer over `rows` rows against the rest of a canvas, cached: the
    fastest of REPEATS calls, what it costs with a core to itself."""
    from engine.models.transformer import LayerKV, rope_tables

    past = CANVAS_LENGTH - rows
    x = torch.randn(1, rows, cfg.hidden_size, dtype=dtype)
    cos, sin = rope_tables(cfg, torch.arange(past, CANVAS_LENGTH)[None], dtype)
    kv = LayerKV(*(torch.randn(1, cfg.num_kv_heads, past, cfg.head_dim, dtype=dtype)
                   for _ in range(2)))
    times = []
    with torch.inference_mode():
        for _ in range(REPEATS + 2):
            start = time.perf_counter()
            block(x, cos, sin, None, kv)
            times.append(time.perf_counter() - start)
    return min(times[2:])  # the first calls warm the caches


def estimate_line(cfg: ModelConfig, dtype: str, threads: int = 1) -> LineEstimate | None:
    """A warm line's passes on this CPU at `threads` threads, or None where no estimate is
    made (a family other than the masked one, a dtype this does not time)."""
    if cfg.family != "masked" or dtype not in DTYPES:
        return None
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        block = _layer(cfg, dtype)
        compute = torch.bfloat16 if dtype == "bfloat16" else torch.float32
        per_layer = {rows: _time_rows(block, cfg, rows, compute)
                     for rows in sorted({r for pass_rows in WARM_PASSES for r in pass_rows})}
    finally:
        torch.set_num_threads(previous)
    d, hd = cfg.hidden_size, cfg.head_dim
    layer_weights = (d * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) * hd
                     + 3 * d * cfg.intermediate_size)
    head_share = cfg.hidden_size * cfg.vocab_size / max(1, layer_weights)
    seconds = sum(per_layer[rows] * cfg.num_layers + per_layer[head] * head_share
                  for rows, head in WARM_PASSES)
    basis = (f"one {dtype} layer at this shape timed here over "
             f"{', '.join(map(str, sorted(per_layer)))} rows against a {CANVAS_LENGTH}-token "
             f"canvas, times {cfg.num_layers} layers, and the head as the layer scaled by its "
             f"weights; a warm line's passes run "
             f"{' + '.join(str(rows) for rows, _ in WARM_PASSES)} rows; the sampler and the "
             "server not counted")
    return LineEstimate(ms=round(1000 * seconds), threads=threads, basis=basis,
                        layer_ms={r: round(1000 * s, 2) for r, s in per_layer.items()})
