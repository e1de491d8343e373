"""The resident engine's scheduler: every live request advances one step per round.

One thread owns the model. Each round it admits queued jobs (interactive before batch, then
first come first served) up to `max_batch` live ones, drops the cancelled ones, and advances
every live job by one forward pass:

- masked-family holes that need a full pass run together as one padded batch (right padding,
  padded keys masked out, so each row computes what it would alone);
- the rest (masked steps on a cached context, the AR baseline, the block family, rewrites)
  run one after another in the same round, so they too make progress at the same pace.

A cancelled or disconnected job leaves at the next step boundary and frees its slot. The
queue is bounded: `submit` answers False ("busy") rather than let latency grow without limit.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from engine.denoise import MaskedDenoiser
from engine.engine import Engine
from engine.models.transformer import LayerKV
from engine.types import Draft, SamplerSettings

INTERACTIVE, BATCH = "interactive", "batch"
PRIORITIES = (INTERACTIVE, BATCH)


@dataclass
class Job:
    """One infill or rewrite request, as the scheduler sees it."""

    prefix: str
    suffix: str
    max_tokens: int
    settings: SamplerSettings
    canvas_length: int = 256
    priority: str = INTERACTIVE
    original: str | None = None  # set for a rewrite
    strength: float = 1.0
    # Called on the scheduler thread with every Draft (the last has done=True), or with an
    # error (code, message) instead.
    on_draft: Callable[[Draft], None] = lambda draft: None
    on_error: Callable[[str, str], None] = lambda code, message: None
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)

    def cancel(self) -> None:
        self.cancelled.set()


class _Live:
    """A job being denoised: a MaskedDenoiser the scheduler batches, or a step generator."""

    def __init__(self, job: Job, engine: Engine) -> None:
        self.job = job
        self.denoiser: MaskedDenoiser | None = None
        self.steps: Iterator[Draft] | None = None
        if engine.config.family == "masked" and job.original is None:
            canvas = engine._canvas(job.prefix, job.suffix, job.max_tokens, job.canvas_length)
            self.denoiser = MaskedDenoiser(engine.model, engine.config, engine.tokenizer, canvas,
                                           job.settings, vocab=engine.vocab,
                                           prefix_cache=engine.prefix_cache)
        elif job.original is not None:
            self.steps = engine.rewrite_stream(
                job.prefix, job.suffix, job.original, strength=job.strength,
                max_tokens=job.max_tokens, settings=job.settings,
                canvas_length=job.canvas_length, cancel=job.cancelled.is_set)
        else:
            self.steps = engine.infill_stream(
                job.prefix, job.suffix, job.max_tokens, settings=job.settings,
                canvas_length=job.canvas_length, cancel=job.cancelled.is_set)

    def batchable(self) -> bool:
        d = self.denoiser
        return d is not None and not d.done and d.full_pass_next() and not d.reuses_prefix()

    def step_alone(self) -> Draft:
        if self.denoiser is not None:
            if self.denoiser.done:
                return self.denoiser.final()
            return self.denoiser.advance(self.denoiser.forward())
        assert self.steps is not None
        return next(self.steps)

    def close(self) -> None:
        if self.steps is not None:
            self.steps.close()


class Scheduler:
    def __init__(self, engine: Engine, max_batch: int = 8, max_queue: int = 64) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self._queues: dict[str, deque[Job]] = {p: deque() for p in PRIORITIES}
        self._live: list[_Live] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.started = time.time()
        self.counters = {"submitted": 0, "completed": 0, "cancelled": 0, "failed": 0,
                         "busy": 0, "rounds": 0, "forwardPasses": 0, "batchedPasses": 0,
                         "batchedRows": 0,
                         "positionsCommitted": 0}

    # -- called from any thread ----------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="dg-scheduler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()

    def submit(self, job: Job) -> bool:
        """Queue `job`; False when the queue is full (the caller answers "busy")."""
        if job.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}")
        with self._wake:
            if sum(len(q) for q in self._queues.values()) >= self.max_queue:
                self.counters["busy"] += 1
                return False
            self._queues[job.priority].append(job)
            self.counters["submitted"] += 1
            self._wake.notify()
        return True

    def cancel(self, job: Job) -> None:
        job.cancel()
        with self._wake:
            self._wake.notify()

    def stats(self) -> dict[str, Any]:
        with self._wake:
            queued = {p: len(q) for p, q in self._queues.items()}
            live = len(self._live)
        cache = self.engine.prefix_cache
        return {**self.counters, "live": live, "prefixCacheHits": cache.hits,
                "prefixCacheMisses": cache.misses, "prefixCacheBytes": cache.nbytes(),
                "queued": queued, "maxBatch": self.max_batch, "maxQueue": self.max_queue,
                "uptimeSeconds": round(time.time() - self.started)}

    # -- the scheduler thread --------------------------------------------------------------

    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._wake:
                while not self._stopping and not self._live and not any(self._queues.values()):
                    self._wake.wait()
                if self._stopping:
                    break
                admitted = self._admit()
            for job in admitted:
                self._start(job)
            self._drop_cancelled()
            if self._live:
                self._round()
        for live in self._live:
            live.close()

    def _admit(self) -> list[Job]:
        jobs = []
        while len(self._live) + len(jobs) < self.max_batch:
            queue = next((q for q in self._queues.values() if q), None)
            if queue is None:
                break
            jobs.append(queue.popleft())
        return jobs

    def _start(self, job: Job) -> None:
        if job.cancelled.is_set():
            self.counters["cancelled"] += 1
            return
        try:
            live = _Live(job, self.engine)
        except Exception as exc:  # a bad request must not stop the others
            self.counters["failed"] += 1
            job.on_error("failed", str(exc))
            return
        with self._wake:
            self._live.append(live)

    def _drop_cancelled(self) -> None:
        for live in [lv for lv in self._live if lv.job.cancelled.is_set()]:
            self._finish(live)
            self.counters["cancelled"] += 1
            if live.denoiser is not None:
                live.job.on_draft(live.denoiser.final("cancelled"))
            else:
                live.job.on_draft(Draft(step=0, token_ids=[], committed=0, text="", done=True,
                                        finish_reason="cancelled"))

    def _finish(self, live: _Live) -> None:
        live.close()
        with self._wake:
            self._live.remove(live)

    def _round(self) -> None:
        self.counters["rounds"] += 1
        # An int8 model's activations are quantized with one scale per pass: a canvas batched
        # with others would get another completion than alone. Its canvases run one by one
        # (on the CPU, where it runs, a batch costs what its rows cost alone anyway).
        batch = [] if self.engine.quantized else [lv for lv in self._live if lv.batchable()]
        drafts: dict[int, Draft] = {}
        if len(batch) > 1:
            for live, logits in zip(batch, self._batched_forward(batch), strict=True):
                drafts[id(live)] = live.denoiser.advance(logits)
            self.counters["forwardPasses"] += 1
            self.counters["batchedPasses"] += 1
            self.counters["batchedRows"] += len(batch)
        for live in list(self._live):
            try:
                if id(live) not in drafts:
                    drafts[id(live)] = live.step_alone()
                    self.counters["forwardPasses"] += 1
            except StopIteration:
                drafts[id(live)] = Draft(step=0, token_ids=[], committed=0, text="", done=True,
                                         finish_reason="stop")
            except Exception as exc:
                self._finish(live)
                self.counters["failed"] += 1
                live.job.on_error("failed", str(exc))
                continue
            draft = drafts[id(live)]
            if draft.done:
                self._finish(live)
                self.counters["completed"] += 1
                self.counters["positionsCommitted"] += draft.committed
            live.job.on_draft(draft)

    def _batched_forward(self, batch: list[_Live]) -> list[torch.Tensor]:
        """One forward pass over every canvas in `batch`; each row's hole logits."""
        holes = [live.denoiser.hole for live in batch]
        lengths = [h.x.shape[0] for h in holes]
        width = max(lengths)
        device = holes[0].x.device
        x = torch.zeros(len(batch), width, dtype=holes[0].x.dtype, device=device)
        valid = torch.zeros(len(batch), width, dtype=torch.bool, device=device)
        for i, (hole, n) in enumerate(zip(holes, lengths, strict=True)):
            x[i, :n] = hole.x
            valid[i, :n] = True
        # Logits only for the rows some hole reads (the vocabulary projection is costly).
        rows = [live.denoiser.logit_rows() for live in batch]
        first, last = min(r[0] for r in rows), max(r[1] for r in rows)
        with torch.inference_mode():
            raw, kv = self.engine.model(x, key_valid=valid, logit_rows=(first, last))
            out = []
            for i, (live, n) in enumerate(zip(batch, lengths, strict=True)):
                row_kv = [LayerKV(layer.k[i : i + 1, :, :n], layer.v[i : i + 1, :, :n])
                          for layer in kv]
                out.append(live.denoiser.hole_from_full(raw[i : i + 1], row_kv, offset=first))
        return out

