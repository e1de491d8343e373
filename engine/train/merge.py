"""`dg-engine merge`: a fine-tuned checkpoint's weights moved part of the way back to its base.

    dg-engine merge --base default --tuned runs/edits/v4 --weight 0.8 --out runs/edits/v4-mix

Each tensor becomes (1 - weight) * base + weight * tuned. Fine-tuning on one task (next-edit
questions) drifts the weights away from what the base learned on code; the straight line
between the two keeps most of the new task while giving back some of the old (the weight-space
ensembles of "robust fine-tuning", Wortsman et al. 2022). It only makes sense between a
checkpoint and one fine-tuned from it: same family, tensor names, shapes and vocabulary, which
is checked.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from engine.models.checkpoint import read_checkpoint, resolve
from engine.train.state import check_output_folder, replacing, write_text

COPIED = ("tokenizer.json", "tokenizer_config.json", "generation_config.json",
          "model.safetensors.index.json")


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        found.update(load_file(shard))
    return found


def merge(base: str, tuned: str, weight: float, out: Path) -> dict[str, Any]:
    """Write the merged checkpoint to `out`; returns its training record."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"--weight {weight}: must be between 0 and 1")
    base_ckpt = read_checkpoint(resolve(None if base == "default" else base))
    tuned_ckpt = read_checkpoint(resolve(tuned))
    if base_ckpt.config.family != tuned_ckpt.config.family:
        raise ValueError(f"{tuned} is a '{tuned_ckpt.config.family}' checkpoint, {base} a "
                         f"'{base_ckpt.config.family}' one")
    if base_ckpt.tokenizer.hf.get_vocab() != tuned_ckpt.tokenizer.hf.get_vocab():
        raise ValueError(f"{tuned} and {base} do not share a vocabulary")
    old = _tensors(base_ckpt.path)
    shards = {}
    for shard in sorted(tuned_ckpt.path.glob("*.safetensors")):
        new = load_file(shard)
        for name, tensor in new.items():
            if name not in old or old[name].shape != tensor.shape:
                raise ValueError(f"{name}: {tuned} was not fine-tuned from {base}")
            new[name] = torch.lerp(old[name].float(), tensor.float(), weight).to(tensor.dtype)
        shards[shard.name] = new
    # Only once everything else is checked, so a refused merge leaves no folder behind; an
    # --out that is --base or --tuned would be overwritten while it is the input.
    check_output_folder(out, [base_ckpt.path, tuned_ckpt.path])
    # Each file whole or not at all, config.json last: a merge cut short (Ctrl-C, a full disk)
    # leaves no half-written shard, and no folder that reads as a checkpoint.
    (out / "config.json").unlink(missing_ok=True)
    for name, tensors in shards.items():
        with replacing(out / name) as tmp:
            save_file(tensors, tmp, metadata={"format": "pt"})
    for name in COPIED:
        if (tuned_ckpt.path / name).is_file():
            with replacing(out / name) as tmp:
                shutil.copyfile(tuned_ckpt.path / name, tmp)
    record = {"merged": {"weight": weight,
                         "base": base_ckpt.raw_config.get("dg_lsp_training"),
                         "tuned": tuned_ckpt.raw_config.get("dg_lsp_training")}}
    config = dict(tuned_ckpt.raw_config, dg_lsp_training=record)
    write_text(out / "config.json", json.dumps(config, indent=2) + "\n")
    return record


def run(args: argparse.Namespace) -> int:
    merge(args.base, args.tuned, args.weight, Path(args.out))
    print(f"wrote {args.out}: {1 - args.weight:g} x {args.base} + {args.weight:g} x {args.tuned}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("merge", help="move a fine-tuned checkpoint part way back to its base")
    p.add_argument("--base", required=True, help="the checkpoint it was fine-tuned from "
                   "('default': the bundled model)")
    p.add_argument("--tuned", required=True, help="the fine-tuned checkpoint")
    p.add_argument("--weight", type=float, required=True,
                   help="the fine-tuned checkpoint's share of each weight (0..1)")
    p.add_argument("--out", required=True, help="folder to write the merged checkpoint to")
    p.set_defaults(func=run)
