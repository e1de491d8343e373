"""Weight-only int4 linear layers with per-group scales: `Int4Linear` and `quantize_int4`.

Each row of a weight is cut into groups of `group_size` input features; a group keeps its
minimum and a scale, and every weight becomes a 4-bit code q in 0..15:

    w ~= q * scale + min  ==  (q - 8) * scale + zero,   zero = min + 8 * scale

The second form is the one PyTorch's packed int4 matmuls read (`scales_and_zeros`, shape
[in / group, out, 2]). The matmul runs through

- on the CPU: `aten._weight_int4pack_mm_for_cpu` (out-features a multiple of 16),
- on CUDA: `aten._weight_int4pack_mm` (Ampere or newer),
- elsewhere, or where the op refuses the shape: the weight dequantized to the model's dtype
  and `F.linear` (same codes, same scales: the reference the ops are tested against).

Both ops compute in bfloat16, whatever the model's dtype: the layer casts its input to
bfloat16 and its output back. On the CPU the op has a fast kernel for bfloat16 activations
only; with float32 ones it is many times slower than a float matmul (docs/models.md, "int4"),
and bfloat16's rounding is small beside int4's. Activations are never quantized, so a batch
of any size computes what a batch of one does.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger(__name__)

# Chosen by measurement on random and on the bundled model's layers (docs/models.md, "int4").
DEFAULT_GROUP_SIZE = 64
# The CUDA op's packing parameter; 8 is what PyTorch's own int4 examples use for bf16.
CUDA_INNER_K_TILES = 8


def quantize_weight(weight: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """(codes, scales_and_zeros) of a [out, in] weight: int32 codes in 0..15 of shape
    [out, in], and float32 (scale, zero) pairs of shape [in / group_size, out, 2]."""
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"in-features {in_features} is not a multiple of the group size "
                         f"{group_size}")
    groups = weight.detach().float().reshape(out_features, in_features // group_size, group_size)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    # A constant group gets a tiny scale rather than a division by zero.
    scale = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    codes = ((groups - low) / scale).round().clamp(0, 15).to(torch.int32)
    zero = low + 8 * scale
    scales_and_zeros = torch.cat([scale, zero], -1).transpose(0, 1).contiguous()
    return codes.reshape(out_features, in_features), scales_and_zeros


def dequantize_weight(codes: Tensor, scales_and_zeros: Tensor, group_size: int) -> Tensor:
    """The [out, in] weight the codes stand for, in the dtype of `scales_and_zeros`."""
    out_features, in_features = codes.shape
    scale, zero = scales_and_zeros.transpose(0, 1).unbind(-1)  # [out, groups] each
    groups = codes.reshape(out_features, in_features // group_size, group_size)
    weight = (groups.to(scale.dtype) - 8) * scale.unsqueeze(-1) + zero.unsqueeze(-1)
    return weight.reshape(out_features, in_features)


def _nibbles(codes: Tensor) -> Tensor:
    """Two 4-bit codes per byte, [out, in / 2]: the storage of the dequantizing path."""
    return (codes[:, ::2] << 4 | codes[:, 1::2]).to(torch.uint8)


def _unnibble(packed: Tensor) -> Tensor:
    return torch.stack([packed >> 4, packed & 15], -1).reshape(packed.shape[0], -1)


def _pack_for_op(codes: Tensor, device: torch.device, use_ops: bool) -> tuple[str, Tensor]:
    """(kernel, weight) for the packed op of `device`, or ("dequantize", nibbles) where no op
    takes this shape (the ops check their shapes when packing and when called)."""
    try:
        if use_ops and device.type == "cpu":
            return "cpu", torch.ops.aten._convert_weight_to_int4pack_for_cpu(codes, 1)
        if use_ops and device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 8:
            packed = _nibbles(codes.to(device))
            return "cuda", torch.ops.aten._convert_weight_to_int4pack(packed, CUDA_INNER_K_TILES)
    except RuntimeError as e:
        log.debug("int4: no packed op for a %s weight on %s (%s)", tuple(codes.shape), device, e)
    return "dequantize", _nibbles(codes).to(device)


class Int4Linear(nn.Module):
    """A linear layer with int4 weights in groups of `group_size` (module docstring)."""

    def __init__(self, codes: Tensor, scales_and_zeros: Tensor, bias: Tensor | None,
                 group_size: int, device: torch.device, dtype: torch.dtype,
                 use_ops: bool = True) -> None:
        """`dtype`: the model's (of the bias, and of the dequantizing path); `use_ops`: False
        keeps the dequantizing path where an op would run (the reference of the tests)."""
        super().__init__()
        self.out_features, self.in_features = codes.shape
        self.group_size = group_size
        self.kernel, weight = _pack_for_op(codes, device, use_ops)
        self.register_buffer("weight", weight)
        compute = dtype if self.kernel == "dequantize" else torch.bfloat16
        self.register_buffer("scales_and_zeros", scales_and_zeros.to(device, compute))
        self.bias = None if bias is None else nn.Parameter(bias.detach().to(device, dtype),
                                                           requires_grad=False)
        if self.kernel != "dequantize" and not self._op_runs():
            self.kernel, self.weight = "dequantize", _nibbles(codes).to(device)
            self.scales_and_zeros = scales_and_zeros.to(device, dtype)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int, use_ops: bool = True
                    ) -> Int4Linear:
        codes, scales_and_zeros = quantize_weight(linear.weight, group_size)
        return cls(codes, scales_and_zeros, linear.bias, group_size,
                   linear.weight.device, linear.weight.dtype, use_ops)

    def _op_runs(self) -> bool:
        # Some shape limits are checked only by the matmul: try it once on one row.
        try:
            self._matmul(torch.zeros(1, self.in_features, dtype=self.scales_and_zeros.dtype,
                                     device=self.scales_and_zeros.device))
            return True
        except RuntimeError as e:
            log.debug("int4: the %s op refuses [%d, %d] (%s)", self.kernel, self.out_features,
                      self.in_features, e)
            return False

    def dequantized(self, dtype: torch.dtype | None = None) -> Tensor:
        """The float weight this layer computes with on its dequantizing path."""
        if self.kernel != "dequantize":
            raise ValueError("the weight is packed for a matmul op; only the dequantizing "
                             "layout unpacks")
        weight = dequantize_weight(_unnibble(self.weight), self.scales_and_zeros,
                                   self.group_size)
        return weight.to(dtype or self.scales_and_zeros.dtype)

    def _matmul(self, x: Tensor) -> Tensor:
        if self.kernel == "cpu":
            return torch.ops.aten._weight_int4pack_mm_for_cpu(
                x, self.weight, self.group_size, self.scales_and_zeros)
        if self.kernel == "cuda":
            return torch.ops.aten._weight_int4pack_mm(
                x, self.weight, self.group_size, self.scales_and_zeros)
        return F.linear(x, self.dequantized(x.dtype))

    def forward(self, x: Tensor) -> Tensor:
        # The ops take 2-D activations in the dtype of the scales.
        rows = x.reshape(-1, self.in_features).to(self.scales_and_zeros.dtype)
        out = self._matmul(rows).reshape(*x.shape[:-1], self.out_features).to(x.dtype)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"group_size={self.group_size}, kernel={self.kernel}")


def quantize_int4(model: nn.Module, group_size: int = DEFAULT_GROUP_SIZE) -> list[str]:
    """Replace, in place, every `nn.Linear` of `model` by an `Int4Linear`; the names of the
    linear layers kept in float, with why, are returned.

    Kept in float: a layer whose in-features are not a multiple of `group_size` (no whole
    groups), and a layer whose weight is an embedding's too (a tied output head: the
    embedding stays in float, being read a row per token, so a quantized copy would add
    memory rather than save it). Embeddings and norms are not linear layers and stay as they
    are."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    kept: list[str] = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        if id(module.weight) in embeddings:
            kept.append(f"{name} (shares its weight with an embedding)")
            continue
        if module.in_features % group_size:
            kept.append(f"{name} (in-features {module.in_features} not a multiple of "
                        f"{group_size})")
            continue
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, Int4Linear.from_linear(module, group_size))
    return kept
