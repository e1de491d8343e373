"""A checkpoint's masked loss on one-hole rows and on rows with 2-3 holes, on a corpus's
validation files: whether masks in the code after a hole leave the model less sure of it.

    PYTHONPATH=. python scripts/experiments/multi_hole_loss.py --data runs/corpus \
        --model bundled --model /tmp/mh/multi --batches 16

Both kinds of rows are cut by engine.train.examples.ExampleMaker from the same seeded stream
(no uniform-noise rows, 256 tokens, the noise level drawn per row as in training); the loss
is the trainer's (engine.train.trainer.masked_loss) over every hidden position. One JSON line
per model: `one_hole`, `multi_hole` and their difference.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from engine.models.checkpoint import load_model, read_checkpoint, resolve
from engine.text.tokenizer import Tokenizer
from engine.train.examples import ExampleMaker
from engine.train.trainer import masked_loss, newline_table, special_ids


@torch.no_grad()
def loss_of(model: torch.nn.Module, maker: ExampleMaker, batches: int, mask_id: int) -> float:
    rng = np.random.default_rng(1234)
    losses = []
    for _ in range(batches):
        targets, masked = (torch.from_numpy(x) for x in maker.masked_batch(rng, 16))
        losses.append(masked_loss(model, targets, masked, mask_id).item())
    return float(np.mean(losses))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, required=True, help="folder of `dg-engine corpus`")
    p.add_argument("--model", action="append", required=True, help="checkpoint ('bundled')")
    p.add_argument("--batches", type=int, default=16, help="batches of 16 rows per kind")
    args = p.parse_args()
    tok = Tokenizer.from_file(args.data / "tokenizer.json")
    ids = special_ids(tok)
    val = np.fromfile(args.data / "val.bin", dtype=np.uint16)
    newline = newline_table(tok)
    makers = {kind: ExampleMaker(val, newline, ids, 256, uniform_fraction=0.0,
                                 multi_hole_share=share)
              for kind, share in (("one_hole", 0.0), ("multi_hole", 1.0))}
    for name in args.model:
        model = load_model(read_checkpoint(resolve(None if name == "bundled" else name)),
                           "cpu", "float32").eval()
        row = {kind: round(loss_of(model, m, args.batches, ids.mask), 4)
               for kind, m in makers.items()}
        print(json.dumps({"model": name, **row,
                          "difference": round(row["multi_hole"] - row["one_hole"], 4)}),
              flush=True)


if __name__ == "__main__":
    main()
