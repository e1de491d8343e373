"""Per-position statistics a sampler step needs, in one fused pass over the vocabulary.

`fused_stats(logits, temperature)` takes hole logits [n, V] (float32/16, bfloat16) and returns,
for every row,

    token       the greedy token: argmax of the logits, the lowest index on ties (int64)
    confidence  its probability under softmax(logits / temperature) (float32)
    entropy     the entropy of that distribution, in nats (float32)

with temperature 0 meaning no scaling. `torch_stats` is the reference: plain torch ops, as
engine.decode.samplers always computed them. `triton_stats` streams each row once (online softmax,
see engine/kernels/_triton_sampling.py) instead of materializing probabilities and logs of the
whole [n, V] block several times, which is most of a step's sampling time on a GPU at a
262k vocabulary.

The two agree exactly on tokens and to float32 rounding (about 1e-6 relative) on confidence
and entropy; only the order of the sums differs. Where a row's logits are all -inf, both give
token 0 and NaN; NaN logits are not supported.

`fused_stats` dispatches: triton for CUDA tensors when triton imports, and for CPU tensors
when TRITON_INTERPRET=1 (triton's interpreter, for tests); torch otherwise. DG_LSP_KERNELS=0
turns the kernels off.
"""

from __future__ import annotations

import importlib
import logging
import math
from functools import cache
from types import ModuleType

import torch
from torch import Tensor

from engine.kernels._dispatch import wanted

log = logging.getLogger(__name__)

BLOCK = 2048  # vocabulary tile streamed per loop iteration
MIN_CHUNK = 16384  # a row is split into chunks of at least this many logits


def torch_stats(logits: Tensor, temperature: float = 0.0, entropy: bool = True
                ) -> tuple[Tensor, Tensor, Tensor]:
    """(token, confidence, entropy), each [n], with torch ops; the reference semantics.
    `entropy=False`: the entropy is NaN, not computed (its log and two more reads of [n, V]
    are most of the cost on the CPU, and only two samplers read it)."""
    x = logits.float()
    tokens = x.argmax(dim=-1)
    if temperature > 0:
        x = x / temperature
    probs = torch.softmax(x, dim=-1)
    confidence = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if not entropy:
        return tokens, confidence, torch.full_like(confidence, math.nan)
    logp = torch.log(probs.clamp_min(torch.finfo(probs.dtype).tiny))
    return tokens, confidence, -(probs * logp).sum(-1)


def _kernels() -> ModuleType:
    """The triton kernels (engine/kernels/_triton_sampling.py), imported on first use.

    Like every triton kernel they are interpreted or compiled as TRITON_INTERPRET said when
    triton was first imported in this process.
    """
    return importlib.import_module("engine.kernels._triton_sampling")


@cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _splits(n: int, V: int, device: torch.device) -> int:
    """Chunks per row: enough programs (two per multiprocessor) to fill the GPU when the hole
    is short, each chunk at least MIN_CHUNK logits long."""
    if device.type != "cuda":
        return 1
    programs = 2 * _multiprocessors(device)
    return max(1, min(-(-programs // max(n, 1)), V // MIN_CHUNK))


def triton_stats(
    logits: Tensor,
    temperature: float = 0.0,
    *,
    splits: int | None = None,
    block: int = BLOCK,
) -> tuple[Tensor, Tensor, Tensor]:
    """`torch_stats` as triton kernels: one read of the logits.

    `splits`: chunks per row (default: by device); `block`: the tile width (a power of two).
    """
    if logits.dim() != 2:
        raise ValueError(f"expected logits [n, V], got shape {tuple(logits.shape)}")
    n, V = logits.shape
    device = logits.device
    tokens = torch.empty(n, dtype=torch.int64, device=device)
    confidence = torch.empty(n, dtype=torch.float32, device=device)
    entropy = torch.empty(n, dtype=torch.float32, device=device)
    if n == 0:
        return tokens, confidence, entropy
    if V == 0:
        raise ValueError("logits have an empty vocabulary")
    if logits.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        logits = logits.float()
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    k = _kernels()
    splits = _splits(n, V, device) if splits is None else splits
    chunk = -(-V // max(1, splits))
    splits = -(-V // chunk)  # no empty chunks
    block = min(block, max(16, 1 << (chunk - 1).bit_length()))
    inv_t = 1.0 / temperature if temperature > 0 else 1.0
    warps = 8 if block >= 2048 else 4
    if splits == 1:
        k._partials_kernel[(n, 1)](
            logits, logits.stride(0), V, chunk, inv_t,
            tokens, confidence, entropy,
            tokens, tokens, confidence, confidence, confidence,  # unused partials
            SCALE=temperature > 0, SPLIT=False, BLOCK=block, num_warps=warps,
        )
        return tokens, confidence, entropy
    best = torch.empty(n, splits, dtype=torch.float32, device=device)
    idx = torch.empty(n, splits, dtype=torch.int32, device=device)
    m, z, s = (torch.empty_like(best) for _ in range(3))
    k._partials_kernel[(n, splits)](
        logits, logits.stride(0), V, chunk, inv_t,
        tokens, confidence, entropy,
        best, idx, m, z, s,
        SCALE=temperature > 0, SPLIT=True, BLOCK=block, num_warps=warps,
    )
    block_s = max(16, 1 << (splits - 1).bit_length())
    k._combine_kernel[(n,)](
        best, idx, m, z, s, splits, tokens, confidence, entropy, BLOCK_S=block_s, num_warps=1
    )
    return tokens, confidence, entropy


_failed = False


def use_triton(logits: Tensor) -> bool:
    """Whether `fused_stats` would run the triton kernels on `logits`."""
    return not _failed and wanted(logits)


def fused_stats(logits: Tensor, temperature: float = 0.0, entropy: bool = True
                ) -> tuple[Tensor, Tensor, Tensor]:
    """(token, confidence, entropy) per row of `logits` [n, V]: triton where it runs, else torch
    (there, with `entropy=False`, the entropy is NaN: see `torch_stats`; triton's is free).

    If the kernels fail to build or launch (an unsupported GPU, a broken triton install), the
    error is logged once and torch takes over for the rest of the process.
    """
    global _failed
    if use_triton(logits):
        try:
            return triton_stats(logits, temperature)
        except Exception:  # any failure of an optional accelerator path
            _failed = True
            log.exception("triton sampling kernels failed; using the torch fallback from now on")
    return torch_stats(logits, temperature, entropy)
