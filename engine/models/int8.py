"""int8 weights on the CPU: every `nn.Linear` dynamically quantized (int8 weights, a scale per
output channel, activations quantized per call). On the CPU a pass mostly streams weights, so
it is faster at the same held-out edit similarity (docs/performance.md).

`load_int8` builds the quantized model a layer at a time, so loading never holds the whole
model in float32; `quantize_int8` quantizes a model already loaded.
"""

from __future__ import annotations

import logging
import warnings

import torch
from torch import nn

from engine.models.checkpoint import Checkpoint, load_model, meta_model, read_tensor
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
    copy of the float weights): `load_int8`, one layer at a time."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if isinstance(module, nn.Linear):  # quantize_dynamic swaps children, not the root
            return quantize_dynamic(nn.Sequential(module), {nn.Linear:
                                    per_channel_dynamic_qconfig}, inplace=True)[0]
        return quantize_dynamic(module, {nn.Linear: per_channel_dynamic_qconfig}, inplace=True)


def load_int8(ckpt: Checkpoint) -> tuple[nn.Module, bool]:
    """What `quantize_int8(load_model(ckpt, "cpu", "float32").fuse_projections())` gives, the
    same modules and the same int8 weights, built a layer at a time on the CPU: each layer is
    read in float32, fused and quantized before the next is read. The process then never
    holds more float32 weights than the embedding, the norms and one layer, where loading the
    whole model first held all of them (and quantize_dynamic's deep copy, a second time).
    With it, whether it is quantized: a torch without int8 layers gets the float32 model."""
    try:
        import torch.ao.quantization  # noqa: F401
    except ImportError:  # as quantize_int8: float32 where this torch has no int8 layers
        return load_model(ckpt, "cpu", "float32").fuse_projections(), False
    model, plan = meta_model(ckpt)
    cpu, f32 = torch.device("cpu"), torch.float32
    layers: dict[int, dict[str, torch.Tensor]] = {}
    rest: dict[str, torch.Tensor] = {}
    for ours, (ckpt_name, file) in plan.items():
        if ours.startswith("model.layers."):
            _, _, index, name = ours.split(".", 3)
            layers.setdefault(int(index), {})[name] = (ckpt_name, file)
        else:
            rest[ours] = read_tensor(file, ckpt_name, cpu, f32)
    for index, block in enumerate(model.model.layers):
        block.load_state_dict({name: read_tensor(file, ckpt_name, cpu, f32)
                               for name, (ckpt_name, file) in layers[index].items()},
                              strict=True, assign=True)
        block.self_attn.fuse()
        block.mlp.fuse()
        model.model.layers[index] = _quantize_in_place(block)
    # Module by module: the quantized layers' state has other names than the checkpoint's.
    for module in {name.rpartition(".")[0] for name in rest}:
        model.get_submodule(module).load_state_dict(
            {name.removeprefix(module + "."): t for name, t in rest.items()
             if name.rpartition(".")[0] == module}, strict=True, assign=True)
    if model.cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight  # one tensor, as load_model
    # The head last, as quantize_dynamic reaches it: the embedding stays float32.
    model.lm_head = _quantize_in_place(model.lm_head)
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if t.is_meta:
            raise CheckpointError(f"{ckpt.path}: '{name}' was not initialized by the checkpoint")
    return model.eval(), True
