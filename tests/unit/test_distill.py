"""`dg-engine distill` on a tiny Dream-layout checkpoint and a toy corpus, on the CPU."""

from __future__ import annotations

import json
import math
import sysconfig
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from engine import Engine
from engine.cli import main as engine_main
from engine.models.checkpoint import load_model, read_checkpoint
from engine.text.canvas import Canvas
from engine.train.corpus import build_corpus
from engine.train.distill import CHECKS_FILE, DistillConfig, Distiller
from engine.train.distill_step import distill_losses, logits_at
from engine.train.trajectories import (
    Trajectory,
    hole_canvas,
    record_trajectory,
    trajectory_example,
)
from engine.types import SamplerSettings
from tests.support.tiny_checkpoints import write_dream_checkpoint

TOY_SOURCE = Path(sysconfig.get_paths()["stdlib"]) / "json"
M = 99  # the mask id in hand-made trajectories


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_dream_checkpoint(tmp_path_factory.mktemp("teacher"), tie=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, teacher: Path) -> Path:
    out = tmp_path_factory.mktemp("corpus")
    build_corpus(out, [TOY_SOURCE], tokenizer_from=teacher)
    return out


def toy(teacher: Path, corpus: Path, out: Path, steps: int) -> DistillConfig:
    return DistillConfig(checkpoint=str(teacher), data=str(corpus), out=str(out), minutes=60,
                         max_steps=steps, holes=6, val_holes=2, window=3, batch=4,
                         lr=1e-3, warmup_steps=2, check_minutes=60, save_every_minutes=60,
                         device="cpu", threads=1)


def test_the_targets_are_the_teachers_commits_over_the_next_window() -> None:
    # Canvas: BOS, two prefix tokens, a hole of five, one suffix token. The teacher committed
    # hole position 1 in pass 1, 0 in pass 2, 2 and 3 in pass 3, 4 in pass 5.
    traj = Trajectory(ids=[3, 10, 11, 20, 21, 22, 23, 24, 12], hole_start=3,
                      commit_step=[2, 1, 3, 3, 5])
    ids, targets = trajectory_example(traj, state=1, window=2, mask_id=M)
    assert ids == [3, 10, 11, M, 21, M, M, M, 12]
    assert targets == [False, False, False, True, False, True, True, False, False]
    # From the start, a window of one pass: only what pass 1 committed is a target.
    ids, targets = trajectory_example(traj, state=0, window=1, mask_id=M)
    assert ids == [3, 10, 11, M, M, M, M, M, 12]
    assert [i for i, t in enumerate(targets) if t] == [4]
    # The last state: the one position still masked is the only target.
    ids, targets = trajectory_example(traj, state=4, window=4, mask_id=M)
    assert ids == [3, 10, 11, 20, 21, 22, 23, M, 12]
    assert [i for i, t in enumerate(targets) if t] == [7]
    # Positions after the first stop token (end=3: the stop is hole position 2) are padding
    # the denoiser commits with the stop: masked until then, never targets.
    traj.end = 3
    ids, targets = trajectory_example(traj, state=1, window=4, mask_id=M)
    assert ids == [3, 10, 11, M, 21, M, M, M, 12]
    assert [i for i, t in enumerate(targets) if t] == [3, 5]
    # Training states are drawn where there is a target: up to the pass before the last
    # target's (pass 3 commits hole position 2, the stop): states 0, 1 and 2.
    assert traj.states == 3
    assert all(any(trajectory_example(traj, s, 1, M)[1]) for s in range(traj.states))


def test_certainty_counts_only_positions_the_student_gets_right() -> None:
    logits = torch.tensor([[2.0, 0.0, 0.0, 0.0],  # greedy 0, target 0: right
                           [3.0, 0.0, 0.0, 0.0],  # greedy 0, target 2: wrong
                           [0.0, 1.0, 0.0, 0.0]])  # real code, target 1
    targets = torch.tensor([0, 2, 1])
    traj = torch.tensor([True, True, False])
    real = ~traj
    parts = distill_losses(logits, targets, traj, real)
    p = torch.softmax(logits[0], -1)
    assert parts["certainty"].item() == pytest.approx(float(-(p * p.log()).sum()), rel=1e-6)
    ce = [-torch.log_softmax(logits[i], -1)[t].item() for i, t in ((0, 0), (1, 2))]
    assert parts["trajectory"].item() == pytest.approx(sum(ce) / 2, rel=1e-6)
    assert parts["real"].item() == pytest.approx(
        -torch.log_softmax(logits[2], -1)[1].item(), rel=1e-6)
    # Nothing right, nothing to make certain.
    none_right = distill_losses(logits, torch.tensor([1, 2, 1]), traj, real)
    assert none_right["certainty"].item() == 0.0


def test_logits_at_are_the_models_own_for_the_positions_asked(teacher: Path) -> None:
    model = load_model(read_checkpoint(teacher), "cpu", "float32")
    inputs = torch.tensor([[5, 6, 7, 8, 9, 10], [11, 12, 13, 14, 15, 16]])
    where = torch.tensor([[False, True, False, False, True, False],
                          [False, False, False, True, False, True]])
    with torch.no_grad():
        full, _ = model(inputs)
        got = logits_at(model, inputs, where)
    # Dream's shift: the output at p-1 predicts p.
    expected = torch.stack([full[0, 0], full[0, 3], full[1, 2], full[1, 4]])
    assert torch.allclose(got, expected, atol=1e-5)


def test_hole_canvas_keeps_the_nearest_prefix_tokens() -> None:
    canvas = hole_canvas(list(range(10, 20)), 3, [30, 31], mask_id=M, bos_id=3, length=10)
    assert canvas.ids == [3, 16, 17, 18, 19, M, M, M, 30, 31]
    assert (canvas.hole_start, canvas.hole_len) == (5, 3)


def test_the_recorded_trajectory_is_the_engines_decoding(teacher: Path) -> None:
    engine = Engine.load(str(teacher), device="cpu", dtype="float32")
    tok, cfg = engine.tokenizer, engine.config
    prefix = tok.encode("def fib(n):\n    if n < 2:\n        return n\n    return ")
    canvas = hole_canvas(prefix, 8, tok.encode("\n"), cfg.mask_token_id, None, length=64)
    settings = SamplerSettings(share_prefix=False)
    tokens, steps = record_trajectory(engine.model, cfg, tok, canvas, settings,
                                      engine.decoder.stop_ids())
    from engine.decode.denoise import begin
    from engine.decode.sequence import Sequence

    # The engine's own route: the runner steps the same masked step, a batch of one.
    seq = begin(Sequence(None), engine.model, cfg, tok, Canvas(**vars(canvas)), settings,
                engine.decoder.stop_ids())
    drafts = list(engine.runner.drafts(seq))
    assert tokens == drafts[-1].token_ids
    # Every pass commits something, every position is committed by one of them.
    assert sorted(set(steps)) == list(range(1, drafts[-1].step + 1))
    for i, draft in enumerate(drafts, 1):
        assert draft.committed == sum(s <= i for s in steps)


def test_a_corpus_in_another_vocabulary_is_refused(teacher: Path, tmp_path: Path) -> None:
    other = tmp_path / "corpus"
    build_corpus(other, [TOY_SOURCE], vocab_size=400)
    with pytest.raises(ValueError, match="--tokenizer-from"):
        Distiller(toy(teacher, other, tmp_path / "out", 2))


def test_distill_runs_resumes_and_writes_a_loadable_checkpoint(
        teacher: Path, corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "distilled"
    args = ["distill", "--checkpoint", str(teacher), "--data", str(corpus), "--out", str(out),
            "--max-steps", "4", "--holes", "6", "--val-holes", "2", "--window", "3",
            "--batch", "4", "--lr", "1e-3", "--warmup-steps", "2", "--device", "cpu",
            "--threads", "1"]
    assert engine_main(args) == 0
    checks = [json.loads(line) for line in (out / CHECKS_FILE).read_text().splitlines()]
    assert [c["model"] for c in checks] == ["teacher", "student"]
    assert all(0 <= c["edit_similarity"] <= 1 and c["passes_per_hole"] >= 1 for c in checks)
    assert all(math.isfinite(c["heldout_trajectory_loss"]) for c in checks)

    # Resumed: the same trajectories, training goes on from step 4 to 7.
    resumed = Distiller(toy(teacher, corpus, out, 7))
    assert resumed.step == 4 and len(resumed.trajectories) == 6
    assert resumed.train()["steps"] == 7

    # A checkpoint like its source: same config keys and tensor names, float16 weights,
    # loaded by the engine like any other, and the weights are the student's.
    source = json.loads((teacher / "config.json").read_text())
    written = json.loads((out / "config.json").read_text())
    assert {k: v for k, v in written.items() if k != "dg_lsp_distill"} == source
    assert written["dg_lsp_distill"]["steps"] == 7
    with safe_open(str(teacher / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert set(f.keys()) == names
        assert all(f.get_tensor(k).dtype == torch.float16 for k in f.keys())
        embed = f.get_tensor("model.embed_tokens.weight").float()
    assert (out / "tokenizer.json").read_bytes() == (teacher / "tokenizer.json").read_bytes()
    state = torch.load(out / "distill_state.pt", weights_only=True)
    assert torch.allclose(embed, state["model"]["model.embed_tokens.weight"], atol=1e-2)
    engine = Engine.load(str(out), device="cpu")
    result = engine.infill("def add(a, b):\n    ", "\n", max_tokens=8, seed=0)
    assert 1 <= result.steps <= 8
    assert read_checkpoint(out).config.family == "masked"
