"""The held-out check of `dg-engine distill` (engine.train.distill): how the student (or the
teacher, before training) does on the validation holes.

Masked loss on validation code; trajectory loss and the share of next-window tokens the
model would commit at the default threshold; and tokens per forward, exact match and edit
similarity on the validation holes decoded with the engine's default settings.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from engine.data.stats import edit_similarity
from engine.text.canvas import Canvas
from engine.text.stops import completion_ids
from engine.train.distill_step import Objective, logits_at, losses, make_batch
from engine.train.examples import ExampleMaker
from engine.train.trajectories import (
    CANVAS,
    Decoding,
    Trajectory,
    record_trajectory,
    trajectory_example,
)
from engine.types import SamplerSettings

# A commit at this confidence or more is what the default threshold sampler takes.
COMMIT_CONFIDENCE = SamplerSettings().threshold


@torch.no_grad()
def check(model: torch.nn.Module, objective: Objective, decoding: Decoding,
          val: list[Trajectory], val_maker: ExampleMaker, batch: int) -> dict:
    """Held-out numbers: masked loss on validation code, trajectory loss and the share of
    next-window targets committed at the default threshold, and decoding quality."""
    model.eval()
    rng = np.random.default_rng(1234)
    real = [losses(objective, model, make_batch(objective, rng, val, batch, batch, val_maker)
                   )["real"].item() for _ in range(4)]
    traj_loss, hits, total = [], 0, 0
    device, window = objective.device, objective.window
    for t in val:
        for s in range(0, t.states, max(1, window)):
            ids, sel = trajectory_example(t, s, window, objective.mask_id)
            if not any(sel):
                continue
            x = torch.tensor([ids], device=device)
            sel_t = torch.tensor([sel], device=device)
            logits = logits_at(model, x, sel_t).float()
            target = torch.tensor([t.ids], device=device)[sel_t]
            traj_loss.append(F.cross_entropy(logits, target).item())
            probs = logits.softmax(-1)
            conf, top = probs.max(-1)
            hits += int(((top == target) & (conf >= COMMIT_CONFIDENCE)).sum())
            total += int(sel_t.sum())
    decoded = decode_quality(model, decoding, val)
    model.train()
    return {"heldout_masked_loss": round(float(np.mean(real)), 4),
            "heldout_trajectory_loss": round(float(np.mean(traj_loss)), 4),
            "window_committed": round(hits / max(total, 1), 4), **decoded}


def decode_quality(model: torch.nn.Module, decoding: Decoding, val: list[Trajectory]) -> dict:
    """Tokens per forward, exact match and edit similarity against the corpus's own
    text, on the validation holes decoded with the default sampler settings."""
    tokens = passes = exact = 0
    similarity = []
    tok, stop_ids = decoding.tokenizer, decoding.stop_ids
    for t in val:
        n = len(t.commit_step)
        canvas = Canvas(ids=t.ids[:t.hole_start] + [decoding.mask_id] * n
                        + t.ids[t.hole_start + n:], hole_start=t.hole_start, hole_len=n,
                        max_length=CANVAS)
        hole, steps = record_trajectory(model, decoding.config, tok, canvas, decoding.settings,
                                        stop_ids)
        out = completion_ids(hole, stop_ids)
        text, ref = tok.decode(out), tok.decode(t.middle)
        tokens, passes = tokens + len(out), passes + max(steps)
        exact += " ".join(text.split()) == " ".join(ref.split())
        similarity.append(edit_similarity(text, ref))
    count = max(1, len(val))
    return {"tokens_per_forward": round(tokens / max(passes, 1), 3),
            "passes_per_hole": round(passes / count, 2),
            "exact_match": round(exact / count, 4),
            "edit_similarity": round(float(np.mean(similarity)) if similarity else 0.0, 4)}
