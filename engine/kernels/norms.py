"""RMSNorm in one kernel launch instead of torch's chain of elementwise ops and a reduction.

    rms_norm(x, weight, eps) = weight * (x32 * rsqrt(mean(x32 ** 2) + eps)).to(x.dtype)

with x32 = x in float32 and the product in the promoted dtype of weight and x: exactly the
expression of engine.models.transformer.RMSNorm (`torch_rms_norm`). The kernel agrees with it
to float32 rounding before the cast back (the sum's order and the reciprocal square root
differ), so a bfloat16 output can differ in its last bit.

The kernel has no backward: `rms_norm` runs it only where no gradient is being recorded
(inference), on CUDA tensors or under TRITON_INTERPRET=1, with rows up to MAX_D wide.
"""

from __future__ import annotations

import importlib
import logging

import torch
from torch import Tensor

from engine.kernels._dispatch import wanted

log = logging.getLogger(__name__)

MAX_D = 16384  # one row is one tile; wider rows stay in torch


def torch_rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """The reference: RMSNorm as torch ops."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def triton_rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """`torch_rms_norm` as one triton kernel over the rows of `x` [..., D]."""
    D = x.shape[-1]
    if weight.shape != (D,):
        raise ValueError(f"weight of shape {tuple(weight.shape)} for rows of {D}")
    if D > MAX_D:
        raise ValueError(f"rows of {D} > {MAX_D}")
    rows = x.reshape(-1, D)
    if rows.stride(-1) != 1:
        rows = rows.contiguous()
    out = torch.empty(rows.shape, dtype=torch.promote_types(x.dtype, weight.dtype),
                      device=x.device)
    if rows.shape[0]:
        k = importlib.import_module("engine.kernels._triton_norms")
        block = max(16, 1 << (D - 1).bit_length())
        warps = 8 if block >= 4096 else 4 if block >= 1024 else 1
        k._rms_norm_kernel[(rows.shape[0],)](
            rows, weight.contiguous(), out, rows.stride(0), out.stride(0), D, float(eps),
            BLOCK_D=block, num_warps=warps,
        )
    return out.view(x.shape)


_failed = False


def use_triton(x: Tensor) -> bool:
    """Whether `rms_norm` would run the triton kernel on `x`. Not inside torch.compile:
    inductor fuses the torch ops into a kernel of its own."""
    if torch.compiler.is_compiling():
        return False
    return (not _failed and not torch.is_grad_enabled() and x.shape[-1] <= MAX_D
            and wanted(x))


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm of `x` [..., D] by `weight` [D]: triton where it runs, else torch."""
    global _failed
    if use_triton(x):
        try:
            return triton_rms_norm(x, weight, eps)
        except Exception:  # any failure of an optional accelerator path
            _failed = True
            log.exception("triton RMSNorm kernel failed; using the torch fallback from now on")
    return torch_rms_norm(x, weight, eps)
