"""`dg-engine train`: train the bundled masked-diffusion model or its autoregressive baseline.

One script for the CPU placeholder, the toy run the tests use and the GPU run: the time budget
(`--minutes`) drives the learning-rate schedule, so the same command works whatever the
throughput. The result is a Hugging Face-layout checkpoint the engine loads like any other:
Dream layout (Qwen2 tensor names, shifted logits) for `--objective masked`, Qwen2 causal-LM
layout for `--objective ar`.
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from engine.bounds import (
    BATCH_RANGE,
    EDITS_RANGE,
    FFN_RANGE,
    HEADS_RANGE,
    HIDDEN_RANGE,
    LAYERS_RANGE,
    LEARNING_RATE_RANGE,
    PERIOD_MINUTES_RANGE,
    RUN_MINUTES_RANGE,
    RUN_STEPS_RANGE,
    SEQ_LEN_RANGE,
    SHARD_MB_RANGE,
    SHARE_RANGE,
    THREADS_RANGE,
    TRAIN_SEED_RANGE,
    WARMUP_STEPS_RANGE,
    WEIGHT_DECAY_RANGE,
    bounded,
    check_bounds,
)
from engine.models.checkpoint import load_model, read_checkpoint, resolve, resolve_device
from engine.models.config import ModelConfig
from engine.models.transformer import Transformer
from engine.text.tokenizer import EOS, FIM_MIDDLE, FIM_PREFIX, FIM_SUFFIX, MASK, PAD, Tokenizer
from engine.threads import ThreadPolicy
from engine.train.edit_examples import load_or_build
from engine.train.examples import ExampleMaker, SpecialIds
from engine.train.state import (
    check_corpus,
    check_output_folder,
    load_state,
    replacing,
    save_state,
    state_error,
    write_text,
)

STATE_FILE = "trainer_state.pt"


@dataclass
class TrainConfig:
    data: str
    out: str
    objective: str = "masked"  # "masked" or "ar"
    minutes: float = bounded(10.0, RUN_MINUTES_RANGE)
    max_steps: int | None = bounded(None, RUN_STEPS_RANGE)
    hidden: int = bounded(256, HIDDEN_RANGE)
    layers: int = bounded(6, LAYERS_RANGE)
    heads: int = bounded(4, HEADS_RANGE)
    kv_heads: int = bounded(2, HEADS_RANGE)
    ffn: int = bounded(768, FFN_RANGE)
    seq_len: int = bounded(256, SEQ_LEN_RANGE)
    batch: int = bounded(32, BATCH_RANGE)
    lr: float = bounded(2e-3, LEARNING_RATE_RANGE)
    weight_decay: float = bounded(0.1, WEIGHT_DECAY_RANGE)
    warmup_steps: int = bounded(100, WARMUP_STEPS_RANGE)
    device: str = "auto"
    precision: str = "auto"  # "bf16" autocast on CUDA, "fp32" on CPU
    compile: bool = False
    seed: int = bounded(0, TRAIN_SEED_RANGE)
    shard_mb: float = bounded(15.0, SHARD_MB_RANGE)
    save_dtype: str = "float16"
    save_every_minutes: float = bounded(5.0, PERIOD_MINUTES_RANGE)
    threads: int = bounded(0, THREADS_RANGE)
    # Fine-tune this checkpoint (a folder, a hub id, "default" for the bundled model) instead
    # of training from scratch; its architecture replaces hidden/layers/heads/ffn.
    init: str | None = None
    # Synthetic edits (engine.train.edit_examples) cut from the corpus, and their share of rows.
    edits: int = bounded(0, EDITS_RANGE)
    edit_share: float = bounded(0.5, SHARE_RANGE)
    # Real edits (a file of `dg-engine version-edits`) added to the synthetic ones.
    real_edits: str | None = None
    # The share of the infill rows with 2-3 holes (engine.train.examples.multi_split).
    multi_hole_share: float = bounded(0.0, SHARE_RANGE)

    def check(self) -> None:
        """ValueError naming the first option out of its range (engine.bounds) or a model
        shape that cannot be built; the options may have been changed since construction."""
        check_bounds(self)
        if self.init is None:  # a fine-tuned model's shape is its checkpoint's
            if self.hidden % self.heads or (self.hidden // self.heads) % 2:
                raise ValueError(f"--hidden {self.hidden} must be --heads {self.heads} times "
                                 "an even head size")
            if self.heads % self.kv_heads:
                raise ValueError(f"--heads {self.heads} must be a multiple of --kv-heads "
                                 f"{self.kv_heads}")


def special_ids(tok: Tokenizer) -> SpecialIds:
    def tid(t: str) -> int:
        i = tok.token_id(t)
        if i is None:
            raise ValueError(f"tokenizer has no {t} token")
        return i

    return SpecialIds(tid(EOS), tid(PAD), tid(MASK), tid(FIM_PREFIX), tid(FIM_SUFFIX),
                      tid(FIM_MIDDLE))


def newline_table(tok: Tokenizer) -> np.ndarray:
    """True for tokens whose text starts a new line (a newline plus its indentation)."""
    return np.array([tok.token_text(i).startswith("\n") for i in range(tok.vocab_size)])


def model_config(cfg: TrainConfig, tok: Tokenizer, ids: SpecialIds) -> ModelConfig:
    masked = cfg.objective == "masked"
    return ModelConfig(
        family="masked" if masked else "ar",
        layout="dream" if masked else "qwen2",
        vocab_size=tok.vocab_size,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.ffn,
        num_layers=cfg.layers,
        num_heads=cfg.heads,
        num_kv_heads=cfg.kv_heads,
        head_dim=cfg.hidden // cfg.heads,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        max_position_embeddings=max(1024, cfg.seq_len),
        tie_word_embeddings=True,
        qkv_bias=True,
        shift_logits=masked,
        causal=not masked,
        mask_token_id=ids.mask,
        eos_token_id=ids.eos,
        pad_token_id=ids.pad,
    )


def init_weights(model: Transformer, layers: int) -> None:
    for name, p in model.named_parameters():
        if p.dim() < 2:
            torch.nn.init.zeros_(p) if name.endswith("bias") else torch.nn.init.ones_(p)
            continue
        std = 0.02
        # Residual-branch outputs start small so deep stacks train stably (GPT-2's rule).
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            std /= math.sqrt(2 * layers)
        torch.nn.init.normal_(p, std=std)


def hf_config_dict(mc: ModelConfig, train_info: dict) -> dict:
    common = {
        "vocab_size": mc.vocab_size,
        "hidden_size": mc.hidden_size,
        "intermediate_size": mc.intermediate_size,
        "num_hidden_layers": mc.num_layers,
        "num_attention_heads": mc.num_heads,
        "num_key_value_heads": mc.num_kv_heads,
        "head_dim": mc.head_dim,
        "hidden_act": "silu",
        "rope_theta": mc.rope_theta,
        "rms_norm_eps": mc.rms_norm_eps,
        "max_position_embeddings": mc.max_position_embeddings,
        "tie_word_embeddings": mc.tie_word_embeddings,
        "use_sliding_window": False,
        "eos_token_id": mc.eos_token_id,
        "pad_token_id": mc.pad_token_id,
        "bos_token_id": None,
        "dg_lsp_training": train_info,
    }
    if mc.family == "masked":
        return {"architectures": ["DreamModel"], "model_type": "Dream",
                "mask_token_id": mc.mask_token_id, **common}
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **common}


def save_checkpoint(model: Transformer, mc: ModelConfig, out: Path, tokenizer_dir: Path,
                    train_info: dict, shard_mb: float, dtype: torch.dtype) -> list[Path]:
    """Write an HF-layout folder; weights in safetensors shards of at most `shard_mb` MB.
    Each file is replaced whole (engine.train.state.replacing): a save cut short leaves the
    previous checkpoint's file, not half of the new one."""
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items()}
    if mc.tie_word_embeddings:
        state.pop("lm_head.weight")  # tied: stored once, as HF does
    written = write_weights(state, out, shard_mb)
    write_text(out / "config.json", json.dumps(hf_config_dict(mc, train_info), indent=2))
    gen = {"eos_token_id": mc.eos_token_id, "pad_token_id": mc.pad_token_id}
    if mc.family == "masked":
        gen["mask_token_id"] = mc.mask_token_id
    write_text(out / "generation_config.json", json.dumps(gen, indent=2))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (tokenizer_dir / name).exists() and tokenizer_dir.resolve() != out.resolve():
            with replacing(out / name) as tmp:
                tmp.write_bytes((tokenizer_dir / name).read_bytes())
    return written


def write_weights(state: dict[str, torch.Tensor], out: Path, shard_mb: float) -> list[Path]:
    """`state` as model.safetensors, or as shards of at most `shard_mb` MB with their index;
    weight files already in `out` are replaced, each whole, and those of another layout
    removed once the new ones are all written (the index first: it names the shards)."""
    limit = int(shard_mb * 1e6)
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    written = []
    if len(shards) == 1:
        with replacing(out / "model.safetensors") as tmp:
            save_file(shards[0], tmp, metadata={"format": "pt"})
        written.append(out / "model.safetensors")
    else:
        weight_map = {}
        for i, shard in enumerate(shards, 1):
            name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
            with replacing(out / name) as tmp:
                save_file(shard, tmp, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, name))
            written.append(out / name)
        total = sum(t.numel() * t.element_size() for t in state.values())
        write_text(out / "model.safetensors.index.json", json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    index = out / "model.safetensors.index.json"
    stale = sorted(set(out.glob("model*.safetensors")) - set(written))
    for old in ([index] if len(shards) == 1 and index.exists() else []) + stale:
        old.unlink()
    return written


class BatchStream:
    """Cuts batches on a background thread so the accelerator never waits on numpy.

    An error on that thread is queued like a batch and raised by `next` in the trainer: a
    thread that died silently left the trainer waiting on an empty queue forever."""

    def __init__(self, maker: ExampleMaker, objective: str, batch: int, seed: int) -> None:
        self.q: queue.Queue = queue.Queue(maxsize=8)
        self.maker, self.objective, self.batch = maker, objective, batch
        self.rng = np.random.default_rng(seed)
        threading.Thread(target=self._fill, daemon=True).start()

    def _fill(self) -> None:
        try:
            while True:
                if self.objective == "masked":
                    self.q.put(self.maker.masked_batch(self.rng, self.batch))
                else:
                    self.q.put(self.maker.ar_batch(self.rng, self.batch))
        except BaseException as exc:  # handed to the consumer, which raises it
            self.q.put(exc)

    def next(self) -> tuple[np.ndarray, np.ndarray]:
        item = self.q.get()
        if isinstance(item, BaseException):
            self.q.put(item)  # every later call fails the same way, none waits
            raise item
        return item


def masked_loss(model: torch.nn.Module, targets: torch.Tensor, masked: torch.Tensor,
                mask_id: int) -> torch.Tensor:
    """Cross-entropy on hidden positions; Dream's shift: the logit at p-1 predicts p."""
    inputs = torch.where(masked, torch.full_like(targets, mask_id), targets)
    logits, _ = model(inputs)
    sel = masked[:, 1:]
    return F.cross_entropy(logits[:, :-1][sel].float(), targets[:, 1:][sel])


def ar_loss(model: torch.nn.Module, tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    logits, _ = model(tokens[:, :-1])
    sel = keep[:, 1:]
    return F.cross_entropy(logits[sel].float(), tokens[:, 1:][sel])



def budget_used(elapsed: float, step: int, minutes: float, max_steps: int | None) -> float:
    """The share of a run's budget spent: of its minutes, or of its steps if that is more.
    Both limits are above 0 (engine.bounds: RUN_MINUTES_RANGE, RUN_STEPS_RANGE), so the share
    reaches 1 and the run ends."""
    frac = elapsed / (minutes * 60)
    if max_steps is not None:
        frac = max(frac, step / max_steps)
    return min(frac, 1.0)


def warmup_cosine(lr: float, step: int, warmup_steps: int, progress: float) -> float:
    """Linear warmup, then cosine from the peak to a tenth of it over the budget."""
    warm = min(1.0, (step + 1) / warmup_steps)
    return lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

class Trainer:
    def __init__(self, cfg: TrainConfig) -> None:
        # Everything that can be checked is, before any work: a bad option or folder used to
        # fail at the end of the budget (or never), after the work was done.
        cfg.check()
        self.cfg = cfg
        data = Path(cfg.data)
        init = resolve(None if cfg.init == "default" else cfg.init) if cfg.init else None
        check_corpus(data, tokenizer_from=str(init) if init else None)
        check_output_folder(Path(cfg.out), [init] if init else [])
        self.tok = Tokenizer.from_file(data / "tokenizer.json")
        self.ids = special_ids(self.tok)
        newline = newline_table(self.tok)
        train = np.fromfile(data / "train.bin", dtype=np.uint16)
        val = np.fromfile(data / "val.bin", dtype=np.uint16)
        if val.size < 3 * cfg.seq_len + 1:
            val = train[-(8 * cfg.seq_len):]  # toy corpora: borrow the tail for a loss reading
        self.out = Path(cfg.out)
        real = Path(cfg.real_edits) if cfg.real_edits else None
        edits = (load_or_build(self.out, data, self.tok, cfg.edits, cfg.seed, real)
                 if cfg.edits or real else None)
        self.maker = ExampleMaker(train, newline, self.ids, cfg.seq_len, edits=edits,
                                  edit_share=cfg.edit_share,
                                  multi_hole_share=cfg.multi_hole_share)
        # One hole per row, whatever the training rows: held-out losses compare across runs.
        self.val_maker = ExampleMaker(val, newline, self.ids, cfg.seq_len)
        self.device = resolve_device(cfg.device)
        # The threads of each step: the user's --threads, else as many as the machine's
        # load leaves cores (an editor's engine beside it; engine.threads).
        self.threads = ThreadPolicy.standard(cfg.threads or None)
        self.threads.before_pass()
        torch.manual_seed(cfg.seed)
        self.init_training: dict[str, Any] | None = None
        if cfg.init:
            self.model, self.mc = self._initial_model(cfg.init)
        else:
            self.mc = model_config(cfg, self.tok, self.ids)
            self.model = Transformer(self.mc).to(self.device)
            init_weights(self.model, cfg.layers)
        decay = [p for n, p in self.model.named_parameters() if p.dim() >= 2]
        no_decay = [p for n, p in self.model.named_parameters() if p.dim() < 2]
        self.opt = torch.optim.AdamW(
            [{"params": decay, "weight_decay": cfg.weight_decay},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=cfg.lr, betas=(0.9, 0.95), fused=self.device.type == "cuda")
        self.bf16 = cfg.precision == "bf16" or (cfg.precision == "auto"
                                                and self.device.type == "cuda")
        self.forward = self.model
        self.step, self.elapsed, self.tokens_seen = 0, 0.0, 0
        self._resume()

    def _initial_model(self, init: str) -> tuple[Transformer, ModelConfig]:
        """The checkpoint to fine-tune, unfused and in float32 (Engine.load's fused q/k/v
        cannot be trained or saved), checked to read the corpus's token ids."""
        ckpt = read_checkpoint(resolve(None if init == "default" else init))
        if (ckpt.config.family == "masked") != (self.cfg.objective == "masked"):
            raise ValueError(f"{init}: a '{ckpt.config.family}' checkpoint cannot be "
                             f"trained with the '{self.cfg.objective}' objective")
        if ckpt.tokenizer.hf.get_vocab() != self.tok.hf.get_vocab():
            raise ValueError(f"{self.cfg.data}: the corpus was tokenized with another "
                             f"vocabulary than {init}'s; build it with `dg-engine corpus "
                             "--tokenizer-from` that checkpoint")
        model = load_model(ckpt, str(self.device), "float32")
        model.requires_grad_(True)
        self.init_training = ckpt.raw_config.get("dg_lsp_training")
        return model, ckpt.config

    def _resume(self) -> None:
        path = self.out / STATE_FILE
        state = load_state(path, ("model", "opt", "step", "elapsed", "tokens_seen"),
                           map_location=self.device)
        if state is None:
            return
        try:
            self.model.load_state_dict(state["model"])
            self.opt.load_state_dict(state["opt"])
        except (RuntimeError, ValueError, KeyError) as exc:
            why = str(exc).strip().split("\n", 1)[0][:200]
            raise state_error(path, f"the state of another model ({why})") from None
        self.step, self.elapsed, self.tokens_seen = (state["step"], state["elapsed"],
                                                     state["tokens_seen"])
        print(f"resumed at step {self.step} ({self.elapsed / 60:.1f} min)", file=sys.stderr)

    def _save_state(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        save_state({"model": self.model.state_dict(), "opt": self.opt.state_dict(),
                    "step": self.step, "elapsed": self.elapsed, "tokens_seen": self.tokens_seen,
                    "config": asdict(self.cfg)}, self.out / STATE_FILE)

    def progress(self) -> float:
        return budget_used(self.elapsed, self.step, self.cfg.minutes, self.cfg.max_steps)

    def lr_now(self) -> float:
        return warmup_cosine(self.cfg.lr, self.step, self.cfg.warmup_steps, self.progress())

    def loss_on(self, batch: tuple[np.ndarray, np.ndarray],
                model: torch.nn.Module | None = None) -> torch.Tensor:
        model = model or self.forward
        a, b = (torch.from_numpy(x).to(self.device, non_blocking=True) for x in batch)
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if self.cfg.objective == "masked":
                return masked_loss(model, a, b, self.ids.mask)
            return ar_loss(model, a, b)

    @torch.no_grad()
    def heldout_loss(self, batches: int = 8) -> float:
        """Loss on validation files with a fixed seed, comparable between runs."""
        rng = np.random.default_rng(1234)
        self.model.eval()
        losses = []
        for _ in range(batches):
            if self.cfg.objective == "masked":
                batch = self.val_maker.masked_batch(rng, self.cfg.batch)
            else:
                batch = self.val_maker.ar_batch(rng, self.cfg.batch)
            # Eager: a compiled forward would recompile for inference mode.
            losses.append(self.loss_on(batch, self.model).item())
        self.model.train()
        return float(np.mean(losses))

    def _maybe_compile(self) -> None:
        if not self.cfg.compile:
            return
        try:
            compiled = torch.compile(self.model)
            probe = self.maker.masked_batch(np.random.default_rng(0), 2) \
                if self.cfg.objective == "masked" else self.maker.ar_batch(
                    np.random.default_rng(0), 2)
            self.forward = compiled
            self.loss_on(probe).backward()
            self.opt.zero_grad(set_to_none=True)
        except Exception as exc:  # compilation is an optimization; eager always works
            print(f"torch.compile failed, training eagerly: {exc!r:.300}", file=sys.stderr)
            self.forward = self.model

    def train(self) -> dict:
        cfg = self.cfg
        self._maybe_compile()
        stream = BatchStream(self.maker, cfg.objective, cfg.batch, cfg.seed + self.step)
        self.model.train()
        tty = sys.stderr.isatty()
        last_save = time.time()
        t0 = time.time() - self.elapsed
        window_loss, window_tokens, window_t = [], 0, time.time()
        while self.progress() < 1.0:
            if self.device.type == "cpu":
                self.threads.before_pass()
            for g in self.opt.param_groups:
                g["lr"] = self.lr_now()
            loss = self.loss_on(stream.next())
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            self.step += 1
            self.tokens_seen += cfg.batch * cfg.seq_len
            window_tokens += cfg.batch * cfg.seq_len
            window_loss.append(loss.detach())
            if self.step % 25 == 0 or self.progress() >= 1.0:
                now = time.time()
                self.elapsed = now - t0
                mean = torch.stack(window_loss).mean().item()
                tps = window_tokens / max(now - window_t, 1e-9)
                eta = max(0.0, cfg.minutes * 60 - self.elapsed)
                line = (f"step {self.step} loss {mean:.3f} lr {self.lr_now():.2e} "
                        f"{tps:,.0f} tok/s seen {self.tokens_seen / 1e6:.1f}M "
                        f"{100 * self.progress():.0f}% eta {eta / 60:.1f} min")
                print(("\r" + line) if tty else line, end="" if tty else "\n",
                      file=sys.stderr, flush=True)
                window_loss, window_tokens, window_t = [], 0, now
                if now - last_save > cfg.save_every_minutes * 60:
                    self._save_state()
                    last_save = now
            else:
                self.elapsed = time.time() - t0
        if tty:
            print(file=sys.stderr)
        heldout = self.heldout_loss()
        info = {
            "objective": cfg.objective, "steps": self.step, "tokens_seen": self.tokens_seen,
            "minutes": round(self.elapsed / 60, 2), "heldout_loss": round(heldout, 4),
            "device": torch.cuda.get_device_name() if self.device.type == "cuda" else "cpu",
            "params": sum(p.numel() for p in self.model.parameters()),
            "config": {k: v for k, v in asdict(cfg).items() if k not in ("data", "out")},
        }
        if cfg.init:  # the shape is the initial checkpoint's, not the flags'; its own training
            info["config"].update(hidden=self.mc.hidden_size, layers=self.mc.num_layers,
                                  heads=self.mc.num_heads, kv_heads=self.mc.num_kv_heads,
                                  ffn=self.mc.intermediate_size)
            info["init_training"] = self.init_training
        self._save_state()
        save_checkpoint(self.model, self.mc, self.out, Path(cfg.data), info, cfg.shard_mb,
                        getattr(torch, cfg.save_dtype))
        print(json.dumps(info), flush=True)
        return info


def run(args: argparse.Namespace) -> int:
    fields = {k: v for k, v in vars(args).items() if k in TrainConfig.__dataclass_fields__}
    Trainer(TrainConfig(**fields)).train()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the bundled model or the AR baseline")
    d = TrainConfig("", "")
    p.add_argument("--data", required=True, help="folder written by `dg-engine corpus`")
    p.add_argument("--out", required=True, help="checkpoint folder (resumes if it has state)")
    p.add_argument("--objective", choices=["masked", "ar"], default=d.objective)
    for name in ("minutes", "lr", "weight_decay", "shard_mb", "save_every_minutes"):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=getattr(d, name))
    for name in ("max_steps", "hidden", "layers", "heads", "kv_heads", "ffn", "seq_len",
                 "batch", "warmup_steps", "seed", "threads"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(d, name))
    p.add_argument("--device", default=d.device)
    p.add_argument("--precision", choices=["auto", "bf16", "fp32"], default=d.precision)
    p.add_argument("--save-dtype", choices=["float16", "bfloat16", "float32"],
                   default=d.save_dtype)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--init", default=None, metavar="CHECKPOINT",
                   help="fine-tune this checkpoint ('default': the bundled model)")
    p.add_argument("--edits", type=int, default=d.edits, metavar="N",
                   help="mix N synthetic edits cut from the corpus into the rows (next-edit)")
    p.add_argument("--edit-share", type=float, default=d.edit_share,
                   help="share of rows that are edits when --edits is given")
    p.add_argument("--real-edits", default=d.real_edits, metavar="FILE",
                   help="also mix in the real edits of FILE (written by `dg-engine "
                   "version-edits`), each once beside the N synthetic ones")
    p.add_argument("--multi-hole-share", type=float, default=d.multi_hole_share,
                   help="share of the infill rows with 2-3 holes of whole lines, kept code "
                   "between them (what a multi-hole request decodes jointly; default 0)")
    p.set_defaults(func=run)
