"""`dg-engine distill`: make a masked-diffusion checkpoint commit more tokens per pass.

A masked model commits as many tokens per pass as it is confident about (docs/models.md,
Distillation). This command fine-tunes a checkpoint (the student) on its own decoding
trajectories, recorded by a frozen copy of it (the teacher):

1. Holes are cut from the training corpus (`dg-engine corpus` output tokenized with the
   checkpoint's own vocabulary: `--tokenizer-from`) the way `dg-engine train` cuts them: rest
   of line, next line, a few lines, random spans, in hole sizes the engine uses. The teacher
   fills each with the engine's own masked step and default sampler settings (what users get) and
   records its trajectory: the token that ends up at every hole position and the pass that
   committed it.
2. The student trains on three terms:
   - trajectory (d3LLM's pseudo-trajectory): at a state of the teacher's run (positions
     committed by pass s shown, the rest masked), predict at once the tokens the teacher
     commits over the next `window` passes;
   - certainty (dParallel's certainty forcing): the entropy of the student's distribution on
     those positions where its greedy token is already the teacher's, so it becomes confident
     where it is right and is not pushed to be confident where it is wrong;
   - the original masked objective on real code (`engine.train.examples`), mixed into every
     batch to hold quality.
3. Warmup then cosine over the time budget; a held-out check every `check_minutes`: masked
   loss on validation files, trajectory loss and the share of next-window tokens the student
   would commit at the default threshold, and tokens per forward, exact match and edit
   similarity on validation holes decoded with the default settings, beside the teacher's.

Resumable (teacher trajectories and trainer state are saved as they are made); each check
also leaves a Hugging Face-layout snapshot, and the end leaves the final one in `--out`, with
the source checkpoint's config, tokenizer and tensor names and the weights in float16: the
engine loads it like any other. The student is full fine-tuned (the 14.6M bundled model on a
CPU; a real checkpoint on a GPU, where bf16 autocast is used).

The teacher's runs are engine.train.trajectories, a training step engine.train.distill_step,
the held-out check engine.train.distill_check; this module is the command and its loop.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from engine.bounds import (
    BATCH_RANGE,
    CERTAINTY_RANGE,
    HOLES_RANGE,
    LEARNING_RATE_RANGE,
    PERIOD_MINUTES_RANGE,
    RUN_MINUTES_RANGE,
    RUN_STEPS_RANGE,
    SHARD_MB_RANGE,
    SHARE_RANGE,
    THREADS_RANGE,
    TRAIN_SEED_RANGE,
    WARMUP_STEPS_RANGE,
    WEIGHT_DECAY_RANGE,
    WINDOW_RANGE,
    bounded,
    check_bounds,
)
from engine.models.checkpoint import checkpoint_name, load_model, read_checkpoint, resolve
from engine.models.transformer import Transformer
from engine.text.canvas import expects_bos
from engine.text.tokenizer import Tokenizer
from engine.threads import ThreadPolicy
from engine.train import distill_check
from engine.train.distill_step import Objective, make_batch, train_step
from engine.train.examples import ExampleMaker
from engine.train.state import (
    check_corpus,
    check_output_folder,
    load_state,
    replacing,
    save_state,
    state_error,
    write_text,
)
from engine.train.trainer import (
    budget_used,
    newline_table,
    special_ids,
    warmup_cosine,
    write_weights,
)
from engine.train.trajectories import (
    CANVAS,
    Decoding,
    Trajectory,
    cut,
    load_trajectories,
    save_trajectories,
)
from engine.types import SamplerSettings

STATE_FILE = "distill_state.pt"
TRAJECTORY_FILE = "trajectories.pt"
CHECKS_FILE = "checks.jsonl"


@dataclass
class DistillConfig:
    checkpoint: str | None  # None: the bundled model
    data: str
    out: str
    minutes: float = bounded(60.0, RUN_MINUTES_RANGE)
    max_steps: int | None = bounded(None, RUN_STEPS_RANGE)
    holes: int = bounded(2000, HOLES_RANGE)  # teacher trajectories to record
    # Validation holes: decoded at each check, and their trajectories.
    val_holes: int = bounded(32, HOLES_RANGE)
    window: int = bounded(4, WINDOW_RANGE)  # passes ahead whose commits the student predicts
    certainty: float = bounded(0.5, CERTAINTY_RANGE)  # weight of the certainty (entropy) term
    # Share of each batch that is the masked objective on real code.
    real_share: float = bounded(0.5, SHARE_RANGE)
    batch: int = bounded(16, BATCH_RANGE)
    lr: float = bounded(5e-5, LEARNING_RATE_RANGE)
    weight_decay: float = bounded(0.0, WEIGHT_DECAY_RANGE)
    warmup_steps: int = bounded(20, WARMUP_STEPS_RANGE)
    check_minutes: float = bounded(10.0, PERIOD_MINUTES_RANGE)
    save_every_minutes: float = bounded(5.0, PERIOD_MINUTES_RANGE)
    device: str = "auto"
    teacher_dtype: str = "auto"  # as users get it: int8 linear layers on a CPU
    threads: int = bounded(0, THREADS_RANGE)
    seed: int = bounded(0, TRAIN_SEED_RANGE)
    shard_mb: float = bounded(15.0, SHARD_MB_RANGE)
    save_dtype: str = "float16"


class Distiller:
    """One distillation run: set up and checked when made, resumed from `--out`'s state."""

    def __init__(self, cfg: DistillConfig) -> None:
        from engine import Engine

        # Everything that can be checked is, before any work (train does the same).
        check_bounds(cfg)
        self.cfg = cfg
        self.source = resolve(cfg.checkpoint)
        check_corpus(Path(cfg.data), tokenizer_from=str(self.source))
        self.out = Path(cfg.out)
        check_output_folder(self.out, [self.source])
        # The threads of each step: the user's --threads, else as many as the machine's
        # load leaves cores (an editor's engine beside it; engine.threads).
        self.threads = ThreadPolicy.standard(cfg.threads or None)
        self.threads.before_pass()
        torch.manual_seed(cfg.seed)
        ckpt = read_checkpoint(self.source)
        if ckpt.config.family != "masked":
            raise ValueError(f"{self.source}: distillation is for masked-diffusion checkpoints "
                             f"(this one is '{ckpt.config.family}')")
        self.config = ckpt.config
        self.tok = ckpt.tokenizer
        self._corpus(Path(cfg.data))
        self.teacher = Engine.load(str(self.source), device=cfg.device, dtype=cfg.teacher_dtype)
        self.device = self.teacher.device
        # The defaults, reproducible: what users get.
        self.decoding = Decoding(
            self.config, self.tok, SamplerSettings(share_prefix=False),
            self.teacher.decoder.stop_ids(), self.config.mask_token_id,
            self.config.bos_token_id if expects_bos(self.config) else None)
        self.objective = Objective(self.ids.pad, self.config.mask_token_id, cfg.window,
                                   cfg.certainty, self.device, self.device.type == "cuda")
        self.student: Transformer = load_model(ckpt, str(self.device), "float32")
        self.student.requires_grad_(True)
        decay = [p for p in self.student.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.student.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=(0.9, 0.95))
        self.step, self.elapsed, self.tokens_seen = 0, 0.0, 0
        self.rng = np.random.default_rng(cfg.seed)
        self.trajectories: list[Trajectory] = []
        self.val: list[Trajectory] = []
        self._resume()

    def _corpus(self, data: Path) -> None:
        """The corpus's training and validation example makers, once its vocabulary is the
        checkpoint's."""
        corpus_tok = Tokenizer.from_file(data / "tokenizer.json")
        if corpus_tok.hf.get_vocab() != self.tok.hf.get_vocab():
            raise ValueError(f"{data}: the corpus was tokenized with another vocabulary than "
                             f"{self.source}'s; build it with `dg-engine corpus "
                             f"--tokenizer-from {self.source}`")
        self.ids = special_ids(self.tok)
        newline = newline_table(self.tok)
        train = np.fromfile(data / "train.bin", dtype=np.uint16)
        val = np.fromfile(data / "val.bin", dtype=np.uint16)
        if val.size < 3 * CANVAS + 1:
            val = train[-(8 * CANVAS):]  # toy corpora: borrow the tail for the checks
        self.maker = ExampleMaker(train, newline, self.ids, CANVAS)
        self.val_maker = ExampleMaker(val, newline, self.ids, CANVAS)

    # -- teacher ---------------------------------------------------------------------------

    def collect(self) -> None:
        """Record the validation and training trajectories not recorded yet (resumable)."""
        cfg, model = self.cfg, self.teacher.model
        val_rng = np.random.default_rng(10_000 + cfg.seed)
        if len(self.val) < cfg.val_holes:
            self.val = [cut(model, self.decoding, self.val_maker, val_rng)
                        for _ in range(cfg.val_holes)]
            self._save_trajectories()
        # One generator per hole index: a resumed collection cuts the same holes.
        t0, start = time.time(), len(self.trajectories)
        last_save = t0
        while len(self.trajectories) < cfg.holes:
            index = len(self.trajectories)
            self.trajectories.append(cut(model, self.decoding, self.maker,
                                         np.random.default_rng([cfg.seed, index])))
            done = len(self.trajectories) - start
            if done % 25 == 0 or len(self.trajectories) == cfg.holes:
                rate = done / max(time.time() - t0, 1e-9)
                eta = (cfg.holes - len(self.trajectories)) / max(rate, 1e-9)
                passes = np.mean([t.passes for t in self.trajectories[-25:]])
                print(f"teacher {len(self.trajectories)}/{cfg.holes} holes, {rate:.2f} holes/s, "
                      f"{passes:.1f} passes/hole, eta {eta / 60:.1f} min", file=sys.stderr,
                      flush=True)
            if time.time() - last_save > 60:
                self._save_trajectories()
                last_save = time.time()
        self._save_trajectories()

    def _save_trajectories(self) -> None:
        save_trajectories(self.out / TRAJECTORY_FILE, self.trajectories, self.val)

    # -- state -----------------------------------------------------------------------------

    def _resume(self) -> None:
        """Trajectories and trainer state saved by an earlier run in `--out`, loaded as
        weights only (engine.train.state.load_state): a state file never runs code."""
        saved = load_trajectories(self.out / TRAJECTORY_FILE)
        if saved is not None:
            self.trajectories, self.val = saved
        path = self.out / STATE_FILE
        state = load_state(path, ("model", "opt", "step", "elapsed", "tokens_seen", "rng"),
                           map_location=self.device)
        if state is None:
            return
        try:
            self.student.load_state_dict(state["model"])
            self.opt.load_state_dict(state["opt"])
            self.rng.bit_generator.state = state["rng"]
        except (RuntimeError, ValueError, KeyError, TypeError) as exc:
            why = str(exc).strip().split("\n", 1)[0][:200]
            raise state_error(path, f"the state of another model ({why})") from None
        self.step, self.elapsed, self.tokens_seen = (state["step"], state["elapsed"],
                                                     state["tokens_seen"])
        print(f"resumed at step {self.step} ({self.elapsed / 60:.1f} min)", file=sys.stderr)

    def _save_state(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        save_state({"model": self.student.state_dict(), "opt": self.opt.state_dict(),
                    "step": self.step, "elapsed": self.elapsed, "tokens_seen": self.tokens_seen,
                    "rng": self.rng.bit_generator.state, "config": asdict(self.cfg)},
                   self.out / STATE_FILE)

    def save_checkpoint(self, folder: Path, info: dict) -> None:
        """The student as a checkpoint like its source: same config (plus `dg_lsp_distill`),
        tokenizer and tensor names, weights in `save_dtype`."""
        folder.mkdir(parents=True, exist_ok=True)
        dtype = getattr(torch, self.cfg.save_dtype)
        state = {checkpoint_name(k, self.config.layout): v.detach().to("cpu", dtype).contiguous()
                 for k, v in self.student.state_dict().items()}
        if self.config.tie_word_embeddings:
            state.pop(checkpoint_name("lm_head.weight", self.config.layout), None)
        write_weights(state, folder, self.cfg.shard_mb)
        for f in self.source.iterdir():
            if f.is_file() and not f.name.startswith("model") and f.name != "config.json":
                with replacing(folder / f.name) as tmp:
                    shutil.copyfile(f, tmp)
        raw = json.loads((self.source / "config.json").read_text(encoding="utf-8"))
        raw["dg_lsp_distill"] = info
        write_text(folder / "config.json", json.dumps(raw, indent=2))

    # -- training --------------------------------------------------------------------------

    def progress(self) -> float:
        return budget_used(self.elapsed, self.step, self.cfg.minutes, self.cfg.max_steps)

    def lr_now(self) -> float:
        return warmup_cosine(self.cfg.lr, self.step, self.cfg.warmup_steps, self.progress())

    def check(self, model: torch.nn.Module) -> dict:
        """Held-out numbers of `model` (engine.train.distill_check)."""
        return distill_check.check(model, self.objective, self.decoding, self.val,
                                   self.val_maker, self.cfg.batch)

    def _log_check(self, numbers: dict) -> None:
        with open(self.out / CHECKS_FILE, "a", encoding="utf-8") as f:
            f.write(json.dumps(numbers) + "\n")
        print("check " + json.dumps(numbers), file=sys.stderr, flush=True)

    def info(self) -> dict:
        cfg = self.cfg
        return {"source": str(self.source), "steps": self.step, "tokens_seen": self.tokens_seen,
                "minutes": round(self.elapsed / 60, 2), "trajectories": len(self.trajectories),
                "config": {k: v for k, v in asdict(cfg).items()
                           if k not in ("checkpoint", "data", "out")}}

    def train(self) -> dict:
        """Record the teacher's runs, check the teacher, train the student to the budget
        (saving state and checking as it goes); the final checkpoint's info."""
        cfg = self.cfg
        self.collect()
        if not (self.out / CHECKS_FILE).exists():
            teacher = self.check(load_model(read_checkpoint(self.source), str(self.device),
                                            "float32"))
            self._log_check({"model": "teacher", "step": 0, "minutes": 0.0, **teacher})
        real_rows = round(cfg.batch * cfg.real_share)
        self.student.train()
        t0 = time.time() - self.elapsed
        last_save = last_check = time.time()
        window: list[dict[str, float]] = []
        window_t, window_tokens = time.time(), 0
        while self.progress() < 1.0:
            if self.device.type == "cpu":
                self.threads.before_pass()
            for g in self.opt.param_groups:
                g["lr"] = self.lr_now()
            batch = make_batch(self.objective, self.rng, self.trajectories, cfg.batch,
                               real_rows, self.maker)
            window.append(train_step(self.objective, self.student, self.opt, batch))
            self.step += 1
            self.tokens_seen += cfg.batch * CANVAS
            window_tokens += cfg.batch * CANVAS
            now = time.time()
            self.elapsed = now - t0
            if self.step % 10 == 0 or self.progress() >= 1.0:
                self._log_progress(window, now - window_t, window_tokens)
                window, window_t, window_tokens = [], now, 0
            if now - last_save > cfg.save_every_minutes * 60:
                self._save_state()
                last_save = now
            if now - last_check > cfg.check_minutes * 60 and self.progress() < 1.0:
                self._snapshot()
                last_check = time.time()
                t0 = time.time() - self.elapsed  # checks are not training time
        self._save_state()
        numbers = self._snapshot(final=True)
        info = {**self.info(), "check": numbers}
        self.save_checkpoint(self.out, info)
        print(json.dumps(info), flush=True)
        return info

    def _log_progress(self, window: list[dict[str, float]], seconds: float, tokens: int
                      ) -> None:
        """The mean terms of the steps in `window` (they took `seconds` over `tokens`)."""
        cfg = self.cfg
        means = {k: np.mean([w[k] for w in window]) for k in window[0]}
        tps = tokens / max(seconds, 1e-9)
        eta = max(0.0, cfg.minutes * 60 - self.elapsed)
        if cfg.max_steps:
            eta = min(eta, (cfg.max_steps - self.step) * seconds / len(window))
        print(f"step {self.step} traj {means['trajectory']:.3f} "
              f"cert {means['certainty']:.3f} real {means['real']:.3f} "
              f"lr {self.lr_now():.2e} {tps:,.0f} tok/s "
              f"{100 * self.progress():.0f}% eta {eta / 60:.1f} min",
              file=sys.stderr, flush=True)

    def _snapshot(self, final: bool = False) -> dict:
        numbers = {"model": "student", "step": self.step,
                   "minutes": round(self.elapsed / 60, 2), **self.check(self.student)}
        self._log_check(numbers)
        if not final:
            self._save_state()
            self.save_checkpoint(self.out / "snapshots" / f"step-{self.step:05d}",
                                 {**self.info(), "check": numbers})
        return numbers


def run(args: argparse.Namespace) -> int:
    fields = {k: v for k, v in vars(args).items() if k in DistillConfig.__dataclass_fields__}
    Distiller(DistillConfig(**fields)).train()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("distill", help="distill a masked-diffusion checkpoint for parallel "
                       "decoding (more tokens per pass)")
    d = DistillConfig(None, "", "")
    p.add_argument("--checkpoint", default=None,
                   help="masked-diffusion checkpoint folder or hub id, the teacher and the "
                        "student's start (default: the bundled model)")
    p.add_argument("--data", required=True,
                   help="`dg-engine corpus --tokenizer-from CHECKPOINT` output folder")
    p.add_argument("--out", required=True, help="output folder (resumes if it has state)")
    for name in ("minutes", "certainty", "real_share", "lr", "weight_decay", "check_minutes",
                 "save_every_minutes", "shard_mb"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(d, name))
    for name in ("max_steps", "holes", "val_holes", "window", "batch", "warmup_steps",
                 "threads", "seed"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--device", default=d.device)
    p.add_argument("--teacher-dtype", default=d.teacher_dtype)
    p.add_argument("--save-dtype", choices=["float16", "bfloat16", "float32"],
                   default=d.save_dtype)
    p.set_defaults(func=run)
