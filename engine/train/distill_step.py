"""One training step of `dg-engine distill` (engine.train.distill): the batch, the three loss
terms and the optimizer step.

A batch mixes the teacher's trajectories (engine.train.trajectories: predict at once the
tokens the teacher commits over the next `window` passes) with the original masked objective
on real code (engine.train.examples). The loss is the trajectory cross-entropy, the
certainty term (the entropy where the student's greedy token is already the teacher's) and
the real code's cross-entropy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from engine.models.transformer import Transformer, rope_tables
from engine.train.examples import ExampleMaker
from engine.train.trajectories import CANVAS, Trajectory, trajectory_example

Batch = tuple[Tensor, Tensor, Tensor, Tensor]


@dataclass(frozen=True)
class Objective:
    """What a batch and its loss are made of: the canvas's pad and mask ids, the passes ahead
    a trajectory example targets, the certainty term's weight, where the tensors live and
    whether the forward runs in bfloat16 autocast (on a GPU)."""

    pad_id: int
    mask_id: int
    window: int
    certainty: float
    device: torch.device
    bf16: bool


def logits_at(model: Transformer, inputs: Tensor, where: Tensor) -> Tensor:
    """Logits [N, V] predicting the positions `where` [B, S] marks, in row-major order.

    The model's own forward, but the vocabulary projection runs only on the rows read: a
    fifth of a training step's work is that projection, and a hole is a few of 256 rows."""
    b, s = inputs.shape
    positions = torch.arange(s, device=inputs.device).expand(b, s)
    x = model.model.embed_tokens(inputs)
    cos, sin = rope_tables(model.cfg, positions, x.dtype)
    for layer in model.model.layers:
        x, _ = layer(x, cos, sin, None, None)
    rows = where
    if model.cfg.shift_logits:  # Dream: the output at p-1 predicts p
        if where[:, 0].any():
            raise ValueError("position 0 has no output before it to predict it")
        rows = torch.cat([where[:, 1:], torch.zeros_like(where[:, :1])], 1)
    return model.lm_head(model.model.norm(x[rows]))


def distill_losses(logits: Tensor, targets: Tensor, trajectory: Tensor, real: Tensor
                   ) -> dict[str, Tensor]:
    """The three terms from logits [N, V] of N positions, their targets [N] and which are
    trajectory targets and which real code's masked positions (bool [N] each): cross-entropy
    on the trajectory targets, entropy where the student's greedy token already is the
    target (certainty), cross-entropy on real code. An empty selection gives 0."""
    zero = logits.new_zeros(())
    out = {"trajectory": zero, "certainty": zero, "real": zero}
    if trajectory.any():
        lg = logits[trajectory].float()
        tgt = targets[trajectory]
        out["trajectory"] = F.cross_entropy(lg, tgt)
        right = lg.argmax(-1) == tgt
        if right.any():
            logp = F.log_softmax(lg[right], -1)
            out["certainty"] = -(logp.exp() * logp).sum(-1).mean()
    if real.any():
        out["real"] = F.cross_entropy(logits[real].float(), targets[real])
    return out


def make_batch(objective: Objective, rng: np.random.Generator, pool: list[Trajectory],
               rows: int, real_rows: int, maker: ExampleMaker) -> Batch:
    """(inputs, targets, trajectory positions, real-code positions), each [rows, CANVAS]: the
    first `real_rows` rows masked real code, the rest states of trajectories from `pool`."""
    inputs = np.full((rows, CANVAS), objective.pad_id, dtype=np.int64)
    targets = np.full((rows, CANVAS), objective.pad_id, dtype=np.int64)
    traj = np.zeros((rows, CANVAS), dtype=bool)
    real = np.zeros((rows, CANVAS), dtype=bool)
    if real_rows:
        code, masked = maker.masked_batch(rng, real_rows)
        inputs[:real_rows] = np.where(masked, objective.mask_id, code)
        targets[:real_rows], real[:real_rows] = code, masked
    for r in range(real_rows, rows):
        t = pool[int(rng.integers(len(pool)))]
        ids, sel = trajectory_example(t, int(rng.integers(t.states)), objective.window,
                                      objective.mask_id)
        inputs[r, :len(ids)], targets[r, :len(ids)] = ids, t.ids
        traj[r, :len(ids)] = sel
    return tuple(torch.from_numpy(a).to(objective.device)  # type: ignore[return-value]
                 for a in (inputs, targets, traj, real))


def losses(objective: Objective, model: torch.nn.Module, batch: Batch) -> dict[str, Tensor]:
    """The three terms of `model` on `batch`."""
    inputs, targets, traj, real = batch
    read = traj | real
    with torch.autocast(objective.device.type, dtype=torch.bfloat16, enabled=objective.bf16):
        logits = logits_at(model, inputs, read)
    return distill_losses(logits, targets[read], traj[read], real[read])


def total(objective: Objective, parts: dict[str, Tensor]) -> Tensor:
    return parts["trajectory"] + objective.certainty * parts["certainty"] + parts["real"]


def train_step(objective: Objective, model: torch.nn.Module, opt: torch.optim.Optimizer,
               batch: Batch) -> dict[str, float]:
    """One optimizer step of `model` on `batch` (gradients clipped to norm 1); its terms."""
    parts = losses(objective, model, batch)
    total(objective, parts).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return {k: v.item() for k, v in parts.items()}
