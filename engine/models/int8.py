"""int8 weights on the CPU: every `nn.Linear` dynamically quantized (int8 weights, a scale per
output channel, activations quantized per call). On the CPU a pass mostly streams weights, so
it is faster at the same held-out edit similarity (docs/performance.md).

`load_int8` builds the quantized model a layer at a time, so loading never holds the whole
model in float32; `quantize_int8` quantizes a model already loaded.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import warnings

import torch
from safetensors import safe_open
from torch import nn

from engine.models.checkpoint import (
    FLOAT_DTYPES,
    Checkpoint,
    load_model,
    meta_model,
    read_tensor,
)
from engine.models.config import CheckpointError

log = logging.getLogger(__name__)


def quantize_int8(model: nn.Module) -> nn.Module:
    """The model with every `nn.Linear` dynamically quantized: int8 weights (a scale per
    output channel), activations quantized per call: on the CPU a pass mostly streams
    weights, so it is faster at the same held-out edit similarity (docs/performance.md).

    torch marks these quantized tensors deprecated; where a torch no longer has them the
    model stays in float32 (slower, otherwise the same)."""
    try:
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    except ImportError:
        log.warning("int8 dynamic quantization is not in this torch: running in float32")
        return model
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation notice, on every load
        return quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig})


def _quantize_in_place(module: nn.Module) -> nn.Module:
    """`module` with its `nn.Linear` layers quantized as `quantize_int8` does, in place (no
    copy of the float weights): `load_int8`, one layer at a time. Each float layer lets go of
    its weights at once (quantize_dynamic left the layers it replaced in reference cycles,
    which held their float32 weights until the collector ran)."""
    if type(module) is nn.Linear:
        quantized = _int8_linear(module)
        module.weight = module.bias = None
        return quantized
    for name, child in module.named_children():
        setattr(module, name, _quantize_in_place(child))
    return module


def _int8_linear(linear: nn.Linear) -> nn.Module:
    """`linear` as quantize_dynamic converts it (torch's dynamic int8 Linear: the same weight
    observer, the same int8 weights), packed once: the module quantize_dynamic builds first
    packs an empty weight of the full size, which took as long as packing the real one."""
    from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear
    from torch.ao.nn.quantized.modules.utils import _quantize_weight
    from torch.ao.quantization import per_channel_dynamic_qconfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation notices, on every layer
        observer = per_channel_dynamic_qconfig.weight()
        observer(linear.weight)
        weight = _quantize_weight(linear.weight.float(), observer)
        quantized = DynamicLinear(1, 1, bias_=False)  # packs a 1 x 1 weight
        quantized.in_features, quantized.out_features = linear.in_features, linear.out_features
        quantized.set_weight_bias(weight, linear.bias)
    return quantized


class WidenedEmbedding(nn.Embedding):
    """An embedding kept in its checkpoint's 16-bit dtype, its rows widened to float32 as they
    are read: the very values a float32 copy holds (widening is exact), in half the memory."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return super().forward(input).float()


def _stored_dtype(file: object, name: str) -> torch.dtype | None:
    with safe_open(str(file), framework="pt") as f:
        return FLOAT_DTYPES.get(f.get_slice(name).get_dtype())


def _embedding(model: nn.Module, ckpt_name: str, file: object) -> None:
    """The embedding read as `load_int8` keeps it: in its stored dtype where that is 16-bit
    (a float32 copy would hold the same values in twice the memory), else in float32."""
    stored = _stored_dtype(file, ckpt_name)
    dtype = stored if stored in (torch.bfloat16, torch.float16) else torch.float32
    weight = read_tensor(file, ckpt_name, torch.device("cpu"), dtype)
    if dtype != torch.float32:
        model.model.embed_tokens = WidenedEmbedding(*weight.shape, _weight=weight)
    else:
        model.model.embed_tokens.load_state_dict({"weight": weight}, assign=True)


def _head(model: nn.Module, ckpt_name: str, file: object) -> None:
    """The head read in float32 and quantized at once (its float32 copy then goes): tied, from
    the embedding's tensor, as quantize_dynamic reaches it."""
    head = model.lm_head
    with torch.device("meta"):
        head = nn.Linear(head.in_features, head.out_features, bias=False)
    head.weight = nn.Parameter(read_tensor(file, ckpt_name, torch.device("cpu"),
                                           torch.float32), requires_grad=False)
    model.lm_head = _quantize_in_place(head)


def _trim_heap() -> None:
    """What a layer's float32 copies took given back to the system: glibc's heap otherwise
    keeps the pages between the int8 layers."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def load_int8(ckpt: Checkpoint) -> tuple[nn.Module, bool]:
    """What `quantize_int8(load_model(ckpt, "cpu", "float32").fuse_projections())` gives, the
    same modules and the same int8 weights, built a layer at a time on the CPU: each layer is
    read in float32, fused and quantized before the next is read. The process then never
    holds more float32 weights than the embedding, the norms and one layer, where loading the
    whole model first held all of them (and quantize_dynamic's deep copy, a second time). The
    head is quantized first, and a 16-bit embedding stays 16-bit (`WidenedEmbedding`).
    With it, whether it is quantized: a torch without int8 layers gets the float32 model."""
    try:
        import torch.ao.quantization  # noqa: F401
    except ImportError:  # as quantize_int8: float32 where this torch has no int8 layers
        return load_model(ckpt, "cpu", "float32").fuse_projections(), False
    model, plan = meta_model(ckpt)
    cpu, f32 = torch.device("cpu"), torch.float32
    layers: dict[int, dict[str, tuple[str, object]]] = {}
    rest: dict[str, torch.Tensor] = {}
    tied = model.cfg.tie_word_embeddings
    _head(model, *plan["model.embed_tokens.weight" if tied else "lm_head.weight"])
    _trim_heap()
    _embedding(model, *plan["model.embed_tokens.weight"])
    for ours, (ckpt_name, file) in plan.items():
        if ours.startswith("model.layers."):
            _, _, index, name = ours.split(".", 3)
            layers.setdefault(int(index), {})[name] = (ckpt_name, file)
        elif ours not in ("model.embed_tokens.weight", "lm_head.weight"):
            rest[ours] = read_tensor(file, ckpt_name, cpu, f32)
    for index, block in enumerate(model.model.layers):
        block.load_state_dict({name: read_tensor(file, ckpt_name, cpu, f32)
                               for name, (ckpt_name, file) in layers[index].items()},
                              strict=True, assign=True)
        block.self_attn.fuse()
        block.mlp.fuse()
        model.model.layers[index] = _quantize_in_place(block)
        _trim_heap()
    # Module by module: the quantized layers' state has other names than the checkpoint's.
    for module in {name.rpartition(".")[0] for name in rest}:
        model.get_submodule(module).load_state_dict(
            {name.removeprefix(module + "."): t for name, t in rest.items()
             if name.rpartition(".")[0] == module}, strict=True, assign=True)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_meta:
            raise CheckpointError(f"{ckpt.path}: '{name}' was not initialized by the checkpoint")
    return model.eval(), True
