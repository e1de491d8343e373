"""`dg-engine distill`: make a masked-diffusion checkpoint commit more tokens per pass.

A masked model commits as many tokens per pass as it is confident about (docs/models.md,
Distillation). This command fine-tunes a checkpoint (the student) on its own decoding
trajectories, recorded by a frozen copy of it (the teacher):

1. Holes are cut from the training corpus (`dg-engine corpus` output tokenized with the
   checkpoint's own vocabulary: `--tokenizer-from`) the way `dg-engine train` cuts them: rest
   of line, next line, a few lines, random spans, in hole sizes the engine uses. The teacher
   fills each with the engine's own denoiser and default sampler settings (what users get) and
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
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

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
from engine.data.stats import edit_similarity
from engine.decode.denoise import advance, begin, done, forward, passes
from engine.decode.sequence import Sequence
from engine.models.checkpoint import checkpoint_name, load_model, read_checkpoint, resolve
from engine.models.transformer import Transformer, rope_tables
from engine.text.canvas import Canvas, expects_bos
from engine.text.stops import completion_ids
from engine.text.tokenizer import Tokenizer
from engine.threads import ThreadPolicy
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
from engine.types import SamplerSettings

STATE_FILE = "distill_state.pt"
TRAJECTORY_FILE = "trajectories.pt"
CHECKS_FILE = "checks.jsonl"
CANVAS = 256  # the engine's canvas length; the corpus holes are cut to it
# A commit at this confidence or more is what the default threshold sampler takes.
COMMIT_CONFIDENCE = SamplerSettings().threshold


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


@dataclass
class Trajectory:
    """One hole the teacher filled: the canvas with its final tokens in the hole, the pass
    (1-based) that committed each hole position, and the corpus's own tokens for the hole."""

    ids: list[int]
    hole_start: int
    commit_step: list[int]
    middle: list[int] = field(default_factory=list)
    # Hole positions up to and including the first stop token: the ones after it are padding
    # the denoiser commits with the stop, never by the model's confidence, so never targets.
    end: int | None = None

    @property
    def passes(self) -> int:
        return max(self.commit_step)

    @property
    def states(self) -> int:
        """States with targets: 0 .. the pass before the last target was committed."""
        end = len(self.commit_step) if self.end is None else self.end
        return max(self.commit_step[:end], default=1)


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
def record_trajectory(model: torch.nn.Module, config, tokenizer: Tokenizer, canvas: Canvas,
                      settings: SamplerSettings, stop_ids: set[int]) -> tuple[list[int], list[int]]:
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


class Distiller:
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
        data = Path(cfg.data)
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
        self.mask_id = self.config.mask_token_id
        self.bos_id = self.config.bos_token_id if expects_bos(self.config) else None
        self.settings = SamplerSettings(share_prefix=False)  # the defaults, reproducible
        self.teacher = Engine.load(str(self.source), device=cfg.device, dtype=cfg.teacher_dtype)
        self.stop_ids = self.teacher.decoder.stop_ids()
        self.device = self.teacher.device
        self.student: Transformer = load_model(ckpt, str(self.device), "float32")
        self.student.requires_grad_(True)
        decay = [p for p in self.student.parameters() if p.dim() >= 2]
        no_decay = [p for p in self.student.parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=(0.9, 0.95))
        self.bf16 = self.device.type == "cuda"
        self.step, self.elapsed, self.tokens_seen = 0, 0.0, 0
        self.rng = np.random.default_rng(cfg.seed)
        self.trajectories: list[Trajectory] = []
        self.val: list[Trajectory] = []
        self._resume()

    # -- teacher ---------------------------------------------------------------------------

    def _cut(self, maker: ExampleMaker, rng: np.random.Generator) -> Trajectory:
        prefix, middle, suffix, n = maker.split(rng)
        canvas = hole_canvas(prefix.tolist(), n, suffix.tolist(), self.mask_id, self.bos_id)
        tokens, steps = record_trajectory(self.teacher.model, self.config, self.tok, canvas,
                                          self.settings, self.stop_ids)
        ids = canvas.ids[:canvas.hole_start] + tokens + canvas.ids[canvas.hole_end:]
        end = next((i + 1 for i, t in enumerate(tokens) if t in self.stop_ids), len(tokens))
        return Trajectory(ids, canvas.hole_start, steps, middle.tolist(), end)

    def collect(self) -> None:
        """Record the validation and training trajectories not recorded yet (resumable)."""
        cfg = self.cfg
        val_rng = np.random.default_rng(10_000 + cfg.seed)
        if len(self.val) < cfg.val_holes:
            self.val = [self._cut(self.val_maker, val_rng) for _ in range(cfg.val_holes)]
            self._save_trajectories()
        # One generator per hole index: a resumed collection cuts the same holes.
        t0, start = time.time(), len(self.trajectories)
        last_save = t0
        while len(self.trajectories) < cfg.holes:
            index = len(self.trajectories)
            self.trajectories.append(self._cut(self.maker, np.random.default_rng(
                [cfg.seed, index])))
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
        self.out.mkdir(parents=True, exist_ok=True)
        save_state({"train": [asdict(t) for t in self.trajectories],
                    "val": [asdict(t) for t in self.val]}, self.out / TRAJECTORY_FILE)

    # -- state -----------------------------------------------------------------------------

    def _resume(self) -> None:
        """Trajectories and trainer state saved by an earlier run in `--out`, loaded as
        weights only (engine.train.state.load_state): a state file never runs code."""
        path = self.out / TRAJECTORY_FILE
        saved = load_state(path, ("train", "val"))
        if saved is not None:
            try:
                self.trajectories = [Trajectory(**t) for t in saved["train"]]
                self.val = [Trajectory(**t) for t in saved["val"]]
            except TypeError as exc:
                raise state_error(path, f"not trajectories this command saved ({exc})") from None
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

    def batch(self, rng: np.random.Generator, pool: list[Trajectory], rows: int,
              real_rows: int, maker: ExampleMaker) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(inputs, targets, trajectory positions, real-code positions), each [rows, CANVAS]."""
        inputs = np.full((rows, CANVAS), self.ids.pad, dtype=np.int64)
        targets = np.full((rows, CANVAS), self.ids.pad, dtype=np.int64)
        traj = np.zeros((rows, CANVAS), dtype=bool)
        real = np.zeros((rows, CANVAS), dtype=bool)
        if real_rows:
            code, masked = maker.masked_batch(rng, real_rows)
            inputs[:real_rows] = np.where(masked, self.mask_id, code)
            targets[:real_rows], real[:real_rows] = code, masked
        for r in range(real_rows, rows):
            t = pool[int(rng.integers(len(pool)))]
            ids, sel = trajectory_example(t, int(rng.integers(t.states)), self.cfg.window,
                                          self.mask_id)
            inputs[r, :len(ids)], targets[r, :len(ids)] = ids, t.ids
            traj[r, :len(ids)] = sel
        return tuple(torch.from_numpy(a).to(self.device) for a in (inputs, targets, traj, real))

    def losses(self, batch: tuple[Tensor, ...], model: torch.nn.Module | None = None
               ) -> dict[str, Tensor]:
        inputs, targets, traj, real = batch
        read = traj | real
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = logits_at(model or self.student, inputs, read)
        return distill_losses(logits, targets[read], traj[read], real[read])

    def total(self, parts: dict[str, Tensor]) -> Tensor:
        return parts["trajectory"] + self.cfg.certainty * parts["certainty"] + parts["real"]

    @torch.no_grad()
    def check(self, model: torch.nn.Module) -> dict:
        """Held-out numbers: masked loss on validation code, trajectory loss and the share of
        next-window targets committed at the default threshold, and decoding quality."""
        model.eval()
        rng = np.random.default_rng(1234)
        real = [self.losses(self.batch(rng, self.val, self.cfg.batch, self.cfg.batch,
                                       self.val_maker), model)["real"].item() for _ in range(4)]
        traj_loss, hits, total = [], 0, 0
        for t in self.val:
            for s in range(0, t.states, max(1, self.cfg.window)):
                ids, sel = trajectory_example(t, s, self.cfg.window, self.mask_id)
                if not any(sel):
                    continue
                x = torch.tensor([ids], device=self.device)
                sel_t = torch.tensor([sel], device=self.device)
                logits = logits_at(model, x, sel_t).float()
                target = torch.tensor([t.ids], device=self.device)[sel_t]
                traj_loss.append(F.cross_entropy(logits, target).item())
                probs = logits.softmax(-1)
                conf, top = probs.max(-1)
                hits += int(((top == target) & (conf >= COMMIT_CONFIDENCE)).sum())
                total += int(sel_t.sum())
        decoded = self.decode_quality(model)
        model.train()
        return {"heldout_masked_loss": round(float(np.mean(real)), 4),
                "heldout_trajectory_loss": round(float(np.mean(traj_loss)), 4),
                "window_committed": round(hits / max(total, 1), 4), **decoded}

    def decode_quality(self, model: torch.nn.Module) -> dict:
        """Tokens per forward, exact match and edit similarity against the corpus's own
        text, on the validation holes decoded with the default sampler settings."""
        tokens = passes = exact = 0
        similarity = []
        for t in self.val:
            n = len(t.commit_step)
            canvas = Canvas(ids=t.ids[:t.hole_start] + [self.mask_id] * n
                            + t.ids[t.hole_start + n:], hole_start=t.hole_start, hole_len=n,
                            max_length=CANVAS)
            hole, steps = record_trajectory(model, self.config, self.tok, canvas,
                                            self.settings, self.stop_ids)
            out = completion_ids(hole, self.stop_ids)
            text, ref = self.tok.decode(out), self.tok.decode(t.middle)
            tokens, passes = tokens + len(out), passes + max(steps)
            exact += " ".join(text.split()) == " ".join(ref.split())
            similarity.append(edit_similarity(text, ref))
        count = max(1, len(self.val))
        return {"tokens_per_forward": round(tokens / max(passes, 1), 3),
                "passes_per_hole": round(passes / count, 2),
                "exact_match": round(exact / count, 4),
                "edit_similarity": round(float(np.mean(similarity)) if similarity else 0.0, 4)}

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
            parts = self.losses(self.batch(self.rng, self.trajectories, cfg.batch, real_rows,
                                           self.maker))
            loss = self.total(parts)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.student.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.step += 1
            self.tokens_seen += cfg.batch * CANVAS
            window_tokens += cfg.batch * CANVAS
            window.append({k: v.item() for k, v in parts.items()})
            now = time.time()
            self.elapsed = now - t0
            if self.step % 10 == 0 or self.progress() >= 1.0:
                means = {k: np.mean([w[k] for w in window]) for k in window[0]}
                tps = window_tokens / max(now - window_t, 1e-9)
                eta = max(0.0, cfg.minutes * 60 - self.elapsed)
                if cfg.max_steps:
                    eta = min(eta, (cfg.max_steps - self.step) * (now - window_t) / len(window))
                print(f"step {self.step} traj {means['trajectory']:.3f} "
                      f"cert {means['certainty']:.3f} real {means['real']:.3f} "
                      f"lr {self.lr_now():.2e} {tps:,.0f} tok/s "
                      f"{100 * self.progress():.0f}% eta {eta / 60:.1f} min",
                      file=sys.stderr, flush=True)
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
