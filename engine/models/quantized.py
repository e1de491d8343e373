"""`dg-engine quantize`: a checkpoint's int4 weights written once, loaded without requantizing.

    dg-engine quantize --model DIR --out DIR [--group-size 64]

The folder written holds the source's config, generation config and tokenizer files, a
`model.safetensors` and a `quantization.json` (scheme, group size, source). In the safetensors
file every int4 layer is two tensors under the engine's module names (engine.models.int4):
`NAME.weight`, the codes two a byte ([out, in / 2] uint8), and `NAME.scales_and_zeros`
([in / group, out, 2] float32); everything else is stored under the engine's names in
bfloat16. The masked and AR families only: the block family quantizes while loading
(`--dtype int4`).

A folder with a `quantization.json` loads at `--dtype int4` only; a scheme other than int4, a
group size or a tensor the model does not expect, or a damaged file is refused with the file
and the reason.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from engine.models.block import stored_dtype
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
from engine.models.int4 import DEFAULT_GROUP_SIZE, Int4Linear, install_int4, int4_targets
from engine.models.transformer import Transformer

QUANTIZATION_FILE = "quantization.json"
SCHEME = "int4"
FORMAT = "dg-engine int4 v1"
# The source's files that travel with the weights (everything but its weights).
COPIED = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
          "special_tokens_map.json")


def quantization_of(folder: Path) -> dict[str, Any] | None:
    """The folder's quantization.json, checked, or None where it has none."""
    path = folder / QUANTIZATION_FILE
    if not path.is_file():
        return None
    info = read_json(path)
    if info.get("scheme") != SCHEME:
        raise CheckpointError(f"{path}: weights quantized with scheme {info.get('scheme')!r}; "
                              f"dg-engine loads its own {SCHEME!r} ones (dg-engine quantize)")
    if info.get("format") != FORMAT or not isinstance(info.get("group_size"), int):
        raise CheckpointError(f"{path}: not written by this dg-engine (format "
                              f"{info.get('format')!r}, group size {info.get('group_size')!r})")
    return info


def write_quantized(source: Path, out: Path, group_size: int = DEFAULT_GROUP_SIZE) -> Path:
    """Quantize the checkpoint at `source` (quantized while loading, on the CPU) into `out`."""
    ckpt = read_checkpoint(source)
    if ckpt.config.family not in ("masked", "ar"):
        raise CheckpointError(f"{source}: dg-engine quantize writes the masked and AR families; "
                              "the block family quantizes while loading (--dtype int4)")
    if quantization_of(source) is not None:
        raise CheckpointError(f"{source}: already quantized")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out}: exists and is not empty")
    # In float32, the scales as quantizing computed them; the other tensors are stored back in
    # the source's dtype, so a model loaded from either folder computes the same.
    model = load_model(ckpt, "cpu", "float32", group_size)
    stored = stored_dtype(weight_files(source)) or torch.float32
    int4_tensors = {f"{name}.{key}" for name, module in model.named_modules()
                    if isinstance(module, Int4Linear) for key in ("weight", "scales_and_zeros")}
    tensors = {name: (t if name in int4_tensors else t.to(stored)).contiguous()
               for name, t in model.state_dict().items()
               if not (ckpt.config.tie_word_embeddings and name == "lm_head.weight")}
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / SAFETENSORS_FILE), metadata={"format": "pt"})
    for name in COPIED:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    info = {"scheme": SCHEME, "format": FORMAT, "group_size": group_size,
            "source": str(source)}
    (out / QUANTIZATION_FILE).write_text(json.dumps(info, indent=2) + "\n")
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
            state = {name: f.get_tensor(name).to(dev) for name in shapes}
    except CheckpointError:
        raise
    except Exception as e:  # safetensors raises its own error types for damaged files
        raise _unreadable(file, e) from e
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
                        help=f"input features per scale (default {DEFAULT_GROUP_SIZE})")
    parser.set_defaults(func=run)
