"""Triton RMSNorm behind `engine.kernels.norms` (imported only when triton is)."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _round(x, dtype: tl.constexpr):
    """float32 `x` rounded to `dtype` (to nearest, ties to even), still as float32.

    bfloat16 is rounded by hand: triton's interpreter truncates on a cast to it, while a GPU
    rounds to nearest; this way both give torch's result.
    """
    if dtype == tl.bfloat16:
        u = x.to(tl.uint32, bitcast=True)
        u = u + 0x7FFF + ((u >> 16) & 1)
        return ((u >> 16) << 16).to(tl.float32, bitcast=True)
    elif dtype == tl.float32:
        return x
    else:
        return x.to(dtype).to(tl.float32)


@triton.jit
def _rms_norm_kernel(
    x_ptr, w_ptr, out_ptr, stride_x, stride_out, D, eps,
    BLOCK_D: tl.constexpr,
):
    """One row per program: out = w * (x * rsqrt(mean(x^2) + eps)).to(x.dtype)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    valid = cols < D
    x = tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0)
    xf = x.to(tl.float32)
    # Correctly rounded division and square root, as torch computes mean and rsqrt on a CPU
    # (triton's `/` and rsqrt are approximate on a GPU).
    mean_sq = tl.math.div_rn(tl.sum(xf * xf, axis=0), D * 1.0)
    r = tl.math.div_rn(1.0, tl.math.sqrt_rn(mean_sq + eps))
    # Normalized in float32, rounded to the input's dtype, then scaled in float32 and
    # rounded to the output's dtype: the torch module's two roundings.
    y = _round(xf * r, x.dtype)
    w = tl.load(w_ptr + cols, mask=valid, other=0.0).to(tl.float32)
    out_dtype = out_ptr.dtype.element_ty
    out = _round(w * y, out_dtype).to(out_dtype)
    tl.store(out_ptr + row * stride_out + cols, out, mask=valid)
