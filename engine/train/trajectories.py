"""The teacher's runs for `dg-engine distill` (engine.train.distill): holes cut from the corpus,
decoded by the engine's own masked step, and the states of those runs the student trains on.

A `Trajectory` is one hole the teacher filled: the canvas with its final tokens in the hole
and the pass that committed each hole position. `trajectory_example` turns a state of it
(positions committed by pass s shown, the rest masked) into an input and the targets of the
next `window` passes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from engine.decode.denoise import advance, begin, done, forward, passes
from engine.decode.sequence import Sequence
from engine.models.config import ModelConfig
from engine.text.canvas import Canvas
from engine.text.tokenizer import Tokenizer
from engine.train.examples import ExampleMaker
from engine.train.state import load_state, save_state, state_error
from engine.types import SamplerSettings

CANVAS = 256  # the engine's canvas length; the corpus holes are cut to it


@dataclass
class Trajectory:
    """One hole the teacher filled: the canvas with its final tokens in the hole, the pass
    (1-based) that committed each hole position, and the corpus's own tokens for the hole."""

    ids: list[int]
    hole_start: int
    commit_step: list[int]
    middle: list[int] = field(default_factory=list)
    # Hole positions up to and including the first stop token: the ones after it are padding
    # the masked step commits with the stop, never by the model's confidence, so never targets.
    end: int | None = None

    @property
    def passes(self) -> int:
        return max(self.commit_step)

    @property
    def states(self) -> int:
        """States with targets: 0 .. the pass before the last target was committed."""
        end = len(self.commit_step) if self.end is None else self.end
        return max(self.commit_step[:end], default=1)


@dataclass(frozen=True)
class Decoding:
    """How the teacher decodes a hole, as users get it: the checkpoint's config and tokenizer,
    the default sampler settings, its stop ids; and the canvas's mask and BOS ids."""

    config: ModelConfig
    tokenizer: Tokenizer
    settings: SamplerSettings
    stop_ids: set[int]
    mask_id: int
    bos_id: int | None


def hole_canvas(prefix: list[int], hole_len: int, suffix: list[int], mask_id: int,
                bos_id: int | None, length: int = CANVAS) -> Canvas:
    """The canvas the engine lays out for these token windows: [BOS] + prefix (its oldest
    tokens dropped to fit `length`) + masks + suffix."""
    head = [] if bos_id is None else [bos_id]
    room = max(0, length - len(head) - hole_len - len(suffix))
    head += prefix[len(prefix) - min(room, len(prefix)):]
    ids = head + [mask_id] * hole_len + suffix
    return Canvas(ids=ids, hole_start=len(head), hole_len=hole_len, max_length=length)


@torch.inference_mode()
def record_trajectory(model: torch.nn.Module, config: ModelConfig, tokenizer: Tokenizer,
                      canvas: Canvas, settings: SamplerSettings, stop_ids: set[int]
                      ) -> tuple[list[int], list[int]]:
    """Decode `canvas`'s hole with the engine's masked step: (final hole tokens, the forward
    pass that committed each position; steps that reuse a pass's logits count with it,
    engine.decode.denoise.advance)."""
    seq = begin(Sequence(None), model, config, tokenizer, canvas, settings, stop_ids)
    step_of = torch.zeros(canvas.hole_len, dtype=torch.long)
    while not done(seq):
        advance(model, seq, forward(model, seq))
        committed = seq.committed.cpu()
        step_of[committed & (step_of == 0)] = passes(seq)
    return seq.hole_tokens(), step_of.tolist()


def cut(model: torch.nn.Module, decoding: Decoding, maker: ExampleMaker,
        rng: np.random.Generator) -> Trajectory:
    """A hole cut from `maker`'s corpus as `dg-engine train` cuts them, filled by `model`."""
    prefix, middle, suffix, n = maker.split(rng)
    canvas = hole_canvas(prefix.tolist(), n, suffix.tolist(), decoding.mask_id, decoding.bos_id)
    tokens, steps = record_trajectory(model, decoding.config, decoding.tokenizer, canvas,
                                      decoding.settings, decoding.stop_ids)
    ids = canvas.ids[:canvas.hole_start] + tokens + canvas.ids[canvas.hole_end:]
    end = next((i + 1 for i, t in enumerate(tokens) if t in decoding.stop_ids), len(tokens))
    return Trajectory(ids, canvas.hole_start, steps, middle.tolist(), end)


def trajectory_example(traj: Trajectory, state: int, window: int, mask_id: int
                       ) -> tuple[list[int], list[bool]]:
    """(input ids, target positions) at the teacher's state after `state` passes: hole
    positions committed later are masks, and the targets are those committed in passes
    state+1 .. state+window (their target tokens are `traj.ids`), up to `traj.end`."""
    ids = list(traj.ids)
    targets = [False] * len(ids)
    end = len(traj.commit_step) if traj.end is None else traj.end
    for i, step in enumerate(traj.commit_step):
        p = traj.hole_start + i
        if step > state:
            ids[p] = mask_id
            targets[p] = step <= state + window and i < end
    return ids, targets


def save_trajectories(path: Path, train: list[Trajectory], val: list[Trajectory]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    save_state({"train": [asdict(t) for t in train], "val": [asdict(t) for t in val]}, path)


def load_trajectories(path: Path) -> tuple[list[Trajectory], list[Trajectory]] | None:
    """The (training, validation) trajectories saved at `path` by an earlier run, loaded as
    weights only (engine.train.state.load_state): a state file never runs code."""
    saved = load_state(path, ("train", "val"))
    if saved is None:
        return None
    try:
        return ([Trajectory(**t) for t in saved["train"]],
                [Trajectory(**t) for t in saved["val"]])
    except TypeError as exc:
        raise state_error(path, f"not trajectories this command saved ({exc})") from None
