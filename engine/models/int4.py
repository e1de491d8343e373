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
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

log = logging.getLogger(__name__)

# Chosen by measurement on random and on the bundled model's layers (docs/models.md, "int4").
DEFAULT_GROUP_SIZE = 64
# The group sizes PyTorch's packed int4 ops take (a layer whose in-features are not a multiple
# of its group stays in float).
GROUP_SIZES = (32, 64, 128, 256)
# The CUDA op's packing parameter: 8 is what PyTorch's own int4 examples use for bf16; the op
# takes 2, 4 or 8 and needs in-features a multiple of 16 times it.
CUDA_INNER_K_TILES = (8, 4, 2)
# Weights quantized at a time: bounds the float temporaries of quantizing one large matrix.
QUANTIZE_BLOCK = 1 << 18
# The CPU op packs blocks of 64 rows independently, so a weight packs in row blocks too.
CPU_PACK_ROWS = 64 * 4


def quantize_weight(weight: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """(codes, scales_and_zeros) of a [out, in] weight: int32 codes in 0..15 of shape
    [out, in], and float32 (scale, zero) pairs of shape [in / group_size, out, 2]."""
    codes, scales_and_zeros = _quantize_block(weight, group_size)
    return codes.to(torch.int32), scales_and_zeros


def _quantize_block(weight: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """`quantize_weight` with uint8 codes, computed in place on one float32 copy."""
    out_features, in_features = weight.shape
    if in_features % group_size:
        raise ValueError(f"in-features {in_features} is not a multiple of the group size "
                         f"{group_size}")
    groups = weight.detach().to(torch.float32, copy=True).reshape(
        out_features, in_features // group_size, group_size)
    low, high = groups.amin(-1, keepdim=True), groups.amax(-1, keepdim=True)
    # A constant group gets a tiny scale rather than a division by zero.
    scale = ((high - low) / 15).clamp(min=torch.finfo(torch.float32).tiny)
    codes = groups.sub_(low).div_(scale).round_().clamp_(0, 15).to(torch.uint8)
    zero = low + 8 * scale
    scales_and_zeros = torch.cat([scale, zero], -1).transpose(0, 1).contiguous()
    return codes.reshape(out_features, in_features), scales_and_zeros


def quantize_nibbles(weight: Tensor, group_size: int, device: torch.device | None = None
                     ) -> tuple[Tensor, Tensor]:
    """(nibbles, scales_and_zeros) of a [out, in] weight on `device` (default: the weight's):
    two codes a byte, [out, in / 2] uint8, the layout a layer and a quantized checkpoint
    store. Quantized in row blocks, so the float temporaries stay a block's size whatever
    the weight's (a 7B model's head has half a billion weights)."""
    device = weight.device if device is None else device
    rows = max(1, QUANTIZE_BLOCK // max(1, weight.shape[1]))
    nibbles, scales = [], []
    for first in range(0, weight.shape[0], rows):
        codes, sz = _quantize_block(weight[first:first + rows].to(device), group_size)
        nibbles.append(_nibbles(codes))
        scales.append(sz)
    return torch.cat(nibbles), torch.cat(scales, 1)


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


def cuda_inner_k_tiles(in_features: int) -> int | None:
    """The CUDA op's inner k-tiles for a layer of `in_features`: the largest it takes that
    divides them (DiffusionGemma's expert down projections, 704 in, take 4), or None."""
    return next((t for t in CUDA_INNER_K_TILES if in_features % (16 * t) == 0), None)


def _pack_for_op(nibbles: Tensor, use_ops: bool) -> tuple[str, Tensor]:
    """(kernel, weight) for the packed op of the nibbles' device, or ("dequantize", nibbles)
    where no op takes this shape (the ops check their shapes when packing and when called)."""
    device = nibbles.device
    try:
        if use_ops and device.type == "cpu":
            op = torch.ops.aten._convert_weight_to_int4pack_for_cpu
            return "cpu", torch.cat([
                op(_unnibble(nibbles[first:first + CPU_PACK_ROWS]).to(torch.int32), 1)
                for first in range(0, nibbles.shape[0], CPU_PACK_ROWS)])
        tiles = cuda_inner_k_tiles(nibbles.shape[1] * 2)
        if (use_ops and device.type == "cuda" and tiles is not None
                and torch.cuda.get_device_capability(device)[0] >= 8):
            return "cuda", torch.ops.aten._convert_weight_to_int4pack(nibbles.contiguous(),
                                                                     tiles)
    except RuntimeError as e:
        log.debug("int4: no packed op for a %s weight on %s (%s)", tuple(nibbles.shape), device, e)
    return "dequantize", nibbles


class Int4Linear(nn.Module):
    """A linear layer with int4 weights in groups of `group_size` (module docstring).

    Built in the dequantizing layout (`weight`: the nibbles), where layers can still be
    concatenated (`concatenated`), then `pack`ed for the device's op."""

    def __init__(self, nibbles: Tensor, scales_and_zeros: Tensor, bias: Tensor | None,
                 group_size: int, dtype: torch.dtype) -> None:
        """`nibbles` and `scales_and_zeros` as `quantize_nibbles` returns them, on the layer's
        device; `dtype`: the model's (of the bias, and of the dequantizing path)."""
        super().__init__()
        self.out_features, self.in_features = nibbles.shape[0], nibbles.shape[1] * 2
        self.group_size = group_size
        self.kernel = "dequantize"
        self.register_buffer("weight", nibbles)
        self.register_buffer("scales_and_zeros", scales_and_zeros.to(nibbles.device, dtype))
        self.bias = None if bias is None else nn.Parameter(
            bias.detach().to(nibbles.device, dtype), requires_grad=False)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int, use_ops: bool = True
                    ) -> Int4Linear:
        """`use_ops`: False keeps the dequantizing path where an op would run (the
        reference of the tests)."""
        return cls.quantized(linear.weight, linear.bias, group_size, linear.weight.dtype,
                             use_ops=use_ops)

    @classmethod
    def quantized(cls, weight: Tensor, bias: Tensor | None, group_size: int,
                  dtype: torch.dtype, device: torch.device | None = None, use_ops: bool = True
                  ) -> Int4Linear:
        """The layer of a float [out, in] weight, quantized and packed on `device`."""
        layer = cls(*quantize_nibbles(weight, group_size, device), bias, group_size, dtype)
        return layer.pack(use_ops)

    @classmethod
    def concatenated(cls, *layers: Int4Linear) -> Int4Linear:
        """One layer computing `layers` side by side (outputs concatenated), as
        `transformer.fused_linear` does for float ones; layers not packed yet."""
        if any(layer.kernel != "dequantize" for layer in layers):
            raise ValueError("only layers in the dequantizing layout concatenate")
        first = layers[0]
        bias = None if first.bias is None else torch.cat([layer.bias for layer in layers])
        return cls(torch.cat([layer.weight for layer in layers]),
                   torch.cat([layer.scales_and_zeros for layer in layers], 1), bias,
                   first.group_size, first.scales_and_zeros.dtype)

    def pack(self, use_ops: bool = True) -> Int4Linear:
        """Self, moved to the packed layout of its device's op where one takes its shape."""
        if self.kernel != "dequantize":
            return self
        nibbles, dequantizing_scales = self.weight, self.scales_and_zeros
        self.kernel, self.weight = _pack_for_op(nibbles, use_ops)
        if self.kernel == "dequantize":
            return self
        self.scales_and_zeros = dequantizing_scales.to(torch.bfloat16)
        if not self._op_runs():
            self.kernel, self.weight = "dequantize", nibbles
            self.scales_and_zeros = dequantizing_scales
        return self

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


def is_expert_bank(module: nn.Module) -> bool:
    """Whether `module` holds its experts as 3-D parameters in transformers' concatenated
    layout: `gate_up_proj` [experts, 2 * inner, hidden], `down_proj` [experts, hidden, inner]
    (DiffusionGemma's and Gemma 4's experts; `use_experts_implementation`)."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    return (isinstance(gate_up, Tensor) and isinstance(down, Tensor)
            and gate_up.dim() == down.dim() == 3 and hasattr(module, "act_fn"))


class Int4Experts(nn.Module):
    """A bank of experts with int4 weights: per expert one `Int4Linear` for the concatenated
    gate and up projections and one for the down projection. Called as transformers' expert
    banks are: (hidden_states [tokens, hidden], top_k_index, top_k_weights [tokens, k])."""

    def __init__(self, gate_up: list[Int4Linear], down: list[Int4Linear], act_fn: nn.Module
                 ) -> None:
        super().__init__()
        self.num_experts = len(gate_up)
        self.gate_up = nn.ModuleList(gate_up)
        self.down = nn.ModuleList(down)
        self.act_fn = act_fn

    @classmethod
    def from_bank(cls, bank: nn.Module, group_size: int, dtype: torch.dtype,
                  device: torch.device | None = None, use_ops: bool = True,
                  release: Callable[[Tensor], None] | None = None) -> Int4Experts:
        """The int4 bank of `bank` (see `is_expert_bank`), an expert at a time; `release`
        is called with each expert's float weights once they are quantized."""
        gate_up, down = [], []
        for e in range(bank.gate_up_proj.shape[0]):
            for float_weights, layers in ((bank.gate_up_proj[e], gate_up),
                                          (bank.down_proj[e], down)):
                layers.append(Int4Linear.quantized(float_weights, None, group_size, dtype,
                                                   device, use_ops))
                if release is not None:
                    release(float_weights)
        return cls(gate_up, down, bank.act_fn)

    def forward(self, hidden_states: Tensor, top_k_index: Tensor, top_k_weights: Tensor
                ) -> Tensor:
        out = torch.zeros_like(hidden_states)
        for e in top_k_index.unique().tolist():
            token, slot = torch.where(top_k_index == e)
            gate, up = self.gate_up[e](hidden_states[token]).chunk(2, dim=-1)
            expert_out = self.down[e](self.act_fn(gate) * up) * top_k_weights[token, slot, None]
            out.index_add_(0, token, expert_out.to(out.dtype))
        return out

    def extra_repr(self) -> str:
        first = self.gate_up[0]
        return (f"num_experts={self.num_experts}, hidden={first.in_features}, "
                f"inner={first.out_features // 2}, group_size={first.group_size}")


def quantize_int4(model: nn.Module, group_size: int = DEFAULT_GROUP_SIZE,
                  device: torch.device | None = None, dtype: torch.dtype | None = None,
                  release: Callable[[Tensor], None] | None = None, use_ops: bool = True
                  ) -> list[str]:
    """Replace, in place, every `nn.Linear` of `model` by an `Int4Linear` and every expert
    bank (`is_expert_bank`) by an `Int4Experts`, quantized on `device` (default: where each
    weight is), for a model computing in `dtype` (default: each weight's). `release` is
    called with each float weight once it is quantized (the block family gives
    memory-mapped pages back). `use_ops`: False leaves the layers in the dequantizing layout
    (what a quantized checkpoint stores). The names of the layers kept in float, with why,
    are returned.

    Kept in float: a layer whose in-features are not a multiple of `group_size` (no whole
    groups), and a layer whose weight is an embedding's too (a tied output head: the
    embedding stays in float, being read a row per token, so a quantized copy would add
    memory rather than save it). Embeddings and norms are not linear layers and stay as they
    are."""
    targets, kept = int4_targets(model, group_size)
    # A weight two modules share (DiffusionGemma's encoder and decoder layers are one set of
    # weights) is quantized once and the int4 module shared the same way.
    done: dict[int, nn.Module] = {}
    for name, module in targets.items():
        key = id(module.weight if isinstance(module, nn.Linear) else module.gate_up_proj)
        if key in done:
            new: nn.Module = done[key]
        elif isinstance(module, nn.Linear):
            new = Int4Linear.quantized(module.weight, module.bias, group_size,
                                       dtype or module.weight.dtype, device, use_ops)
            if release is not None:
                release(module.weight)
        else:
            new = Int4Experts.from_bank(module, group_size, dtype or module.gate_up_proj.dtype,
                                        device, use_ops, release)
        done[key] = new
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    return kept


def int4_targets(model: nn.Module, group_size: int) -> tuple[dict[str, nn.Module], list[str]]:
    """(name -> module) of the linear layers and expert banks `quantize_int4` quantizes, and
    the names of those it keeps in float, with why (see `quantize_int4`). Every int4 path
    starts here, so a group size the ops do not take is refused here by name, not met as a
    division by zero below."""
    if type(group_size) is not int or group_size not in GROUP_SIZES:
        raise ValueError(f"int4 group size {group_size!r}: the packed int4 ops take "
                         f"{', '.join(map(str, GROUP_SIZES))}")
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    targets: dict[str, nn.Module] = {}
    kept: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if id(module.weight) in embeddings:
                kept.append(f"{name} (shares its weight with an embedding)")
            elif module.in_features % group_size:
                kept.append(f"{name} (in-features {module.in_features} not a multiple of "
                            f"{group_size})")
            else:
                targets[name] = module
        elif is_expert_bank(module):
            hidden, inner = module.gate_up_proj.shape[2], module.down_proj.shape[2]
            if hidden % group_size or inner % group_size:
                kept.append(f"{name} (hidden {hidden} or inner {inner} not a multiple of "
                            f"{group_size})")
            else:
                targets[name] = module
    return targets, kept


def install_int4(model: nn.Module, layers: dict[str, tuple[Tensor, Tensor]],
                 state: dict[str, Tensor], group_size: int, dtype: torch.dtype) -> None:
    """Put an unpacked `Int4Linear` at each name of `layers` ((nibbles, scales_and_zeros))
    into `model`, built on the meta device, its bias taken out of `state`; the layers' tensors
    go into `state`, ready for `model.load_state_dict(state, assign=True)`."""
    for name, (nibbles, scales_and_zeros) in layers.items():
        layer = Int4Linear(nibbles, scales_and_zeros, state.pop(f"{name}.bias", None),
                           group_size, dtype)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, layer)
        state.update({f"{name}.{key}": t for key, t in layer.state_dict().items()})


def pack_int4(model: nn.Module) -> nn.Module:
    """`model` with every int4 layer in its device op's layout (`Int4Linear.pack`)."""
    for module in model.modules():
        if isinstance(module, Int4Linear):
            module.pack()
    return model
