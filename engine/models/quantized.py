"""`dg-engine quantize`: a checkpoint's int4 weights written once, loaded without requantizing.

    dg-engine quantize --model DIR --out DIR [--group-size 64]

The folder written holds the source's config, generation config and tokenizer files, a
`model.safetensors` and a `quantization.json` (scheme, group size, source). In the safetensors
file every int4 layer is two tensors under the engine's module names (engine.models.int4):
`NAME.weight`, the codes two a byte ([out, in / 2] uint8), and `NAME.scales_and_zeros`
([in / group, out, 2] float32); everything else is stored in the source's dtype. A tensor
several names share is stored under its first name only. The block family (DiffusionGemma)
is stored under transformers' module names, each expert bank's experts as
`NAME.gate_up.E` and `NAME.down.E` layers (engine.models.int4.Int4Experts).

A folder with a `quantization.json` loads at `--dtype int4` only; a scheme other than int4, a
group size or a tensor the model does not expect, or a damaged file is refused with the file
and the reason.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from engine.models.block import load_block_model, stored_dtype
from engine.models.checkpoint import (
    SAFETENSORS_FILE,
    Checkpoint,
    _unreadable,
    load_model,
    read_checkpoint,
    read_json,
    resolve,
    resolve_device,
    resolve_dtype,
    weight_files,
)
from engine.models.config import CheckpointError
from engine.models.int4 import (
    DEFAULT_GROUP_SIZE,
    GROUP_SIZES,
    Int4Experts,
    Int4Linear,
    install_int4,
    int4_targets,
    pack_int4,
)
from engine.models.transformer import Transformer

QUANTIZATION_FILE = "quantization.json"
SCHEME = "int4"
FORMAT = "dg-engine int4 v1"
# The fields of its quantization.json: `source` is where the weights came from; the others
# decide how they load.
FIELDS = ("scheme", "format", "group_size", "source")
# The source's files that travel with the weights (everything but its weights).
COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json")


def quantization_of(folder: Path) -> dict[str, Any] | None:
    """The folder's quantization.json, every field checked, or None where it has none; a
    field that is not what dg-engine quantize writes is refused by the file and its name
    (a group size of 0 divided by zero while loading)."""
    path = folder / QUANTIZATION_FILE
    if not path.is_file():
        return None
    info = read_json(path)
    if info.get("scheme") != SCHEME:
        raise CheckpointError(f"{path}: weights quantized with scheme {info.get('scheme')!r}; "
                              f"dg-engine loads its own {SCHEME!r} ones (dg-engine quantize)")
    if info.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format: expected {FORMAT!r} (written by dg-engine "
                              f"quantize), got {info.get('format')!r}")
    group_size = info.get("group_size")
    if type(group_size) is not int or group_size not in GROUP_SIZES:
        raise CheckpointError(f"{path}: group_size: expected one of "
                              f"{', '.join(map(str, GROUP_SIZES))}, got {group_size!r}")
    if not isinstance(info.get("source"), str):
        raise CheckpointError(f"{path}: source: expected the source checkpoint's path, got "
                              f"{info.get('source')!r}")
    if unknown := sorted(set(info) - set(FIELDS)):
        raise CheckpointError(f"{path}: unknown field {unknown[0]!r} (a {FORMAT!r} file "
                              f"holds {', '.join(FIELDS)})")
    return info


def write_quantized(source: Path, out: Path, group_size: int = DEFAULT_GROUP_SIZE) -> Path:
    """Quantize the checkpoint at `source` (quantized while loading, on the CPU) into `out`.

    Written into a hidden folder beside `out` and renamed to it once complete: a failure or
    an interruption (Ctrl-C) leaves no `out` that a rerun refuses and loading fails on."""
    if group_size not in GROUP_SIZES:
        raise ValueError(f"group size {group_size}: the packed int4 ops take {GROUP_SIZES}")
    ckpt = read_checkpoint(source)
    if quantization_of(source) is not None:
        raise CheckpointError(f"{source}: already quantized")
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: exists and is not a folder")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out}: exists and is not empty")
    # In float32, the scales as quantizing computed them; the other tensors are stored back in
    # the source's dtype, so a model loaded from either folder computes the same.
    if ckpt.config.family == "block":
        model = load_block_model(ckpt, "cpu", "float32", group_size, pack=False)
    else:
        model = load_model(ckpt, "cpu", "float32", group_size)
    stored = stored_dtype(weight_files(source)) or torch.float32
    int4_tensors = {id(t) for module in model.modules() if isinstance(module, Int4Linear)
                    for t in (module.weight, module.scales_and_zeros)}
    tensors = {name: (t if id(t) in int4_tensors else t.to(stored)).detach().contiguous()
               for name, t in first_names(model).items()}
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.parent / f".{out.name}.{secrets.token_hex(4)}.partial"
    partial.mkdir()
    try:
        save_file(tensors, str(partial / SAFETENSORS_FILE), metadata={"format": "pt"})
        for name in COPIED:
            if (source / name).is_file():
                shutil.copyfile(source / name, partial / name)
        info = {"scheme": SCHEME, "format": FORMAT, "group_size": group_size,
                "source": str(source)}
        (partial / QUANTIZATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
        partial.replace(out)  # over an empty `out` too
    except BaseException:  # KeyboardInterrupt included: nothing half-written stays
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return out


def first_names(model: nn.Module) -> dict[str, Tensor]:
    """The model's state, a tensor several names share (a tied head, DiffusionGemma's
    encoder and decoder layers) under its first name only: stored once, shared again when
    loaded."""
    seen: set[int] = set()
    out = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if t.numel() and t.data_ptr() in seen:
            continue
        seen.add(t.data_ptr())
        out[name] = t
    return out


def load_quantized(ckpt: Checkpoint, device: str, group_size: int) -> Transformer:
    """The masked- or AR-family model of a quantized folder: its int4 layers unpacked (as
    `load_model` with `int4_group` gives them), every tensor checked before one is read."""
    cfg = ckpt.config
    dev = resolve_device(device)
    dt = resolve_dtype("auto", dev)
    file = ckpt.path / SAFETENSORS_FILE
    with torch.device("meta"):
        model = Transformer(cfg)
    targets = int4_targets(model, group_size)[0]
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()
                if not (cfg.tie_word_embeddings and name == "lm_head.weight")}
    for name, module in targets.items():
        out_features, in_features = module.weight.shape
        expected[f"{name}.weight"] = (out_features, in_features // 2)
        expected[f"{name}.scales_and_zeros"] = (in_features // group_size, out_features, 2)
    state = {name: t.to(dev) for name, t in read_checked(file, expected, group_size).items()}
    layers = {name: (state.pop(f"{name}.weight"), state.pop(f"{name}.scales_and_zeros"))
              for name in targets}
    state = {name: t.to(dt) for name, t in state.items()}
    install_int4(model, layers, state, group_size, dt)
    if cfg.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def load_quantized_block(ckpt: Checkpoint, device: str, group_size: int) -> nn.Module:
    """The block family's model of a quantized folder (DiffusionGemma): built from its config
    with its weights allocated but never written, every int4 layer and expert bank put in
    from the file (shared where the encoder and decoder share it), the float rest loaded;
    packed for the device's op."""
    from engine.models.block import _transformers, block_skeleton

    tf = _transformers()
    dev = resolve_device(device)
    dt = resolve_dtype("auto", dev)
    config = tf.AutoConfig.from_pretrained(str(ckpt.path), local_files_only=True)
    model = block_skeleton(tf.DiffusionGemmaForBlockDiffusion, config, dt)
    model.tie_weights()
    targets = int4_targets(model, group_size)[0]
    first = first_names(model)

    def in_target(name: str) -> bool:
        return any(name.startswith(f"{target}.") for target in targets)

    # Each tied float tensor's other names, and the first name it takes its tensor from.
    ptrs = {t.data_ptr(): name for name, t in first.items()}
    aliases = {name: ptrs[t.data_ptr()] for name, t in model.state_dict(keep_vars=True).items()
               if name not in first and not in_target(name)}
    layers: dict[str, tuple[int, int]] = {}  # every int4 layer the file holds: (out, in)
    shared: set[int] = set()
    for name, module in targets.items():
        key = id(module.weight if isinstance(module, nn.Linear) else module.gate_up_proj)
        if key in shared:
            continue  # stored under the first name that has it
        shared.add(key)
        if isinstance(module, nn.Linear):
            layers[name] = tuple(module.weight.shape)
        else:
            for e in range(module.gate_up_proj.shape[0]):
                layers[f"{name}.gate_up.{e}"] = tuple(module.gate_up_proj.shape[1:])
                layers[f"{name}.down.{e}"] = tuple(module.down_proj.shape[1:])
    int4_names = {f"{name}.{key}" for name in layers for key in ("weight", "scales_and_zeros")}
    expected = {name: tuple(t.shape) for name, t in first.items() if not in_target(name)}
    for name, (out_features, in_features) in layers.items():
        expected[f"{name}.weight"] = (out_features, in_features // 2)
        expected[f"{name}.scales_and_zeros"] = (in_features // group_size, out_features, 2)
        bias = first.get(f"{name}.bias")
        if bias is not None:
            expected[f"{name}.bias"] = tuple(bias.shape)
    state = read_checked(ckpt.path / SAFETENSORS_FILE, expected, group_size,
                         lambda name, t: t if name in int4_names else t.to(dt))
    _install_block_int4(model, targets, state, group_size, dt)
    state.update({name: state[source] for name, source in aliases.items()})
    model.load_state_dict(state, strict=True, assign=True)
    return pack_int4(model.to(dev)).eval()


def _install_block_int4(model: nn.Module, targets: dict[str, nn.Module],
                        state: dict[str, Tensor], group_size: int, dtype: torch.dtype) -> None:
    """Put the int4 layers and banks of `state` into `model` at `targets`, a weight the
    encoder and decoder share as one module; their tensors go back into `state` under every
    name they have."""

    def layer(name: str) -> Int4Linear:
        return Int4Linear(state.pop(f"{name}.weight"), state.pop(f"{name}.scales_and_zeros"),
                          state.pop(f"{name}.bias", None), group_size, dtype)

    done: dict[int, nn.Module] = {}
    built: dict[str, nn.Module] = {}
    for name, module in targets.items():
        key = id(module.weight if isinstance(module, nn.Linear) else module.gate_up_proj)
        if key not in done:
            if isinstance(module, nn.Linear):
                done[key] = layer(name)
            else:
                experts = range(module.gate_up_proj.shape[0])
                done[key] = Int4Experts([layer(f"{name}.gate_up.{e}") for e in experts],
                                        [layer(f"{name}.down.{e}") for e in experts],
                                        module.act_fn)
        built[name] = done[key]
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent), child, done[key])
    for name, module in built.items():
        state.update({f"{name}.{key}": t for key, t in module.state_dict().items()})


def read_checked(file: Path, expected: dict[str, tuple[int, ...]], group_size: int,
                 convert: Callable[[str, Tensor], Tensor] | None = None) -> dict[str, Tensor]:
    """Every tensor of a quantized folder's file, each name and shape checked against
    `expected` before one is read; `convert(name, tensor)` applied to each as it is read."""
    try:
        with safe_open(str(file), framework="pt") as f:
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
            for name in sorted(set(shapes) | set(expected)):
                if name not in expected:
                    raise CheckpointError(f"{file}: unexpected tensor '{name}'")
                if shapes.get(name) != expected[name]:
                    raise CheckpointError(f"{file}: tensor '{name}' has shape "
                                          f"{list(shapes.get(name) or [])}, the config and group "
                                          f"size {group_size} imply {list(expected[name])}")
            if convert is None:
                return {name: f.get_tensor(name) for name in shapes}
            return {name: convert(name, f.get_tensor(name)) for name in shapes}
    except CheckpointError:
        raise
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise _unreadable(file, e) from e


def run(args: argparse.Namespace) -> int:
    out = write_quantized(resolve(args.model), Path(args.out).expanduser(), args.group_size)
    print(f"wrote {out} ({SCHEME}, group size {args.group_size}); load it with --dtype int4")
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser("quantize", help="write a checkpoint's int4 weights once",
                            description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True,
                        help="checkpoint folder or a hub id in the local cache")
    parser.add_argument("--out", required=True, help="the folder to write (new or empty)")
    parser.add_argument("--group-size", type=int, default=DEFAULT_GROUP_SIZE,
                        choices=GROUP_SIZES,
                        help=f"input features per scale (default {DEFAULT_GROUP_SIZE})")
    parser.set_defaults(func=run)
