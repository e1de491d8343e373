"""The resident engine's scheduler: live requests advance one step per round.

One thread owns the model. Requests wait in three lanes: interactive (an editor waiting on
it), batch (`dg-lsp batch` and other background work) and large (any request whose canvas is
over `large_canvas` tokens). Each lane admits up to its own number of live requests, so a
typed completion never queues behind batch work or a huge canvas. Each round drops the
cancelled and expired requests and advances the live ones by one forward pass:

- interactive requests step every round; background ones (batch and large) every round only
  while no interactive request is live, else once they have waited four times as long as
  their last step took: while someone types, background work gets about a fifth of the
  engine, and it still finishes;
- masked-family holes that need a full pass run together as one padded batch (right padding,
  padded keys masked out, so each row computes what it would alone), but a large canvas runs
  alone: in a batch it would make every row as wide, and as slow, as itself;
- the rest (masked steps on a cached context, the AR baseline, the block family, rewrites)
  run one after another in the same round.

Every request has a deadline (`Request.deadline`): past it, it ends with the text it has and
finish_reason "deadline", queued or live. After a large request the allocator's free memory
is given back to the system.

A cancelled or disconnected job leaves at the next step boundary and frees its slot. The
queue is bounded: `submit` answers False ("busy") rather than let latency grow without limit.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from engine.config import ModelConfig
from engine.denoise import MaskedDenoiser
from engine.engine import Engine
from engine.models.transformer import LayerKV
from engine.types import CANVAS_LENGTH, SUFFIX_FRACTION, Draft, SamplerSettings
from engine.units import UnitEnd, settled

INTERACTIVE, BATCH, LARGE = "interactive", "batch", "large"
PRIORITIES = (INTERACTIVE, BATCH)
LANES = (INTERACTIVE, BATCH, LARGE)
LARGE_CANVAS = 1024  # tokens: a canvas over this is stepped alone, as background work
LARGE_LIVE = 1  # large requests denoised at once: each may hold hundreds of MB
BACKGROUND_SHARE = 4  # background work waits this many times its last step's duration


@dataclass
class Request:
    """One infill or rewrite request, as the scheduler sees it."""

    prefix: str
    suffix: str
    max_tokens: int
    settings: SamplerSettings
    canvas_length: int = CANVAS_LENGTH
    priority: str = INTERACTIVE
    original: str | None = None  # set for a rewrite
    strength: float = 1.0
    suffix_fraction: float = SUFFIX_FRACTION  # the suffix's share of the context's tokens
    until: UnitEnd | None = None  # the unit the client shows: ends the request (engine.units)
    # Called on the scheduler thread with every Draft (the last has done=True), or with an
    # error (code, message) instead.
    on_draft: Callable[[Draft], None] = lambda draft: None
    on_error: Callable[[str, str], None] = lambda code, message: None
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)
    deadline: float | None = None  # time.monotonic() past which it ends ("deadline")

    def cancel(self) -> None:
        self.cancelled.set()


def request_bytes(config: ModelConfig, canvas_length: int, hole: int) -> int:
    """An upper estimate of the memory one request's forward pass takes beyond the weights:
    float32 activations of `canvas_length` positions, one layer's attention weights (when
    attention runs without a fused kernel), every layer's keys/values (kept between steps),
    and logits for `hole` rows with the sampler's copies of them."""
    f = 4
    n = canvas_length
    kv = config.num_layers * 2 * config.num_kv_heads * config.head_dim * n * f
    scores = config.num_heads * n * n * f
    activations = n * (4 * config.hidden_size + 3 * config.intermediate_size) * f
    logits = hole * config.vocab_size * f * 4
    return kv + scores + activations + logits


def release_memory(device: torch.device) -> None:
    """Give memory a finished large request freed back to the system: torch's CUDA cache,
    and glibc's heap (which otherwise keeps what it once grew to). Tensors held in reference
    cycles are freed only by the collector: collect first, or trimming misses them."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class _Live:
    """A job being denoised: a MaskedDenoiser the scheduler batches, or a step generator."""

    def __init__(self, job: Request, engine: Engine, lane: str) -> None:
        self.job = job
        self.lane = lane
        self.last: Draft | None = None  # the latest Draft sent
        self.step_seconds = 0.0  # how long its last step took
        self.stepped_at = 0.0  # time.monotonic() when its last step ended
        self.denoiser: MaskedDenoiser | None = None
        self.steps: Iterator[Draft] | None = None
        if job.original is not None:
            self.steps = engine.rewrite_stream(
                job.prefix, job.suffix, job.original, strength=job.strength,
                max_tokens=job.max_tokens, settings=job.settings,
                canvas_length=job.canvas_length, cancel=job.cancelled.is_set,
                suffix_fraction=job.suffix_fraction)
            return
        # The masked family's holes are stepped here, so their full passes can be batched.
        self.denoiser = engine.decoder.denoiser(job.prefix, job.suffix, job.max_tokens,
                                                job.canvas_length, job.settings,
                                                job.suffix_fraction)
        if self.denoiser is None:
            self.steps = engine.infill_stream(
                job.prefix, job.suffix, job.max_tokens, settings=job.settings,
                canvas_length=job.canvas_length, cancel=job.cancelled.is_set,
                suffix_fraction=job.suffix_fraction)

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
    def __init__(self, engine: Engine, max_batch: int = 8, max_queue: int = 64,
                 large_canvas: int = LARGE_CANVAS) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.large_canvas = large_canvas
        self._queues: dict[str, deque[Request]] = {lane: deque() for lane in LANES}
        self._live: list[_Live] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.started = time.time()
        self.counters = {"submitted": 0, "completed": 0, "cancelled": 0, "failed": 0,
                         "busy": 0, "expired": 0, "rounds": 0, "forwardPasses": 0,
                         "batchedPasses": 0, "batchedRows": 0, "positionsCommitted": 0,
                         # Seconds spent in rounds: what a team's replica costs per request.
                         "busySeconds": 0.0}

    @classmethod
    def loading(cls, load: Callable[[], Engine], *args: Any, **kwargs: Any) -> Scheduler:
        """A started Scheduler of the engine `load()` returns, loaded on the scheduler's own
        thread; `load`'s exception when it raises. Every torch call of the engine then runs
        on that one thread: libgomp keeps a pool of worker threads for each thread that
        starts parallel work, and on a small CPU a second pool (the model loaded on the main
        thread) throttles the spinning of the first, so each operator waits for its workers
        to wake (README, "Performance").
        """
        ready: Future[Scheduler] = Future()

        def run() -> None:
            try:
                scheduler = cls(load(), *args, **kwargs)
            except BaseException as exc:  # handed to the caller
                ready.set_exception(exc)
                return
            scheduler._thread = threading.current_thread()
            ready.set_result(scheduler)
            scheduler._run()

        threading.Thread(target=run, name="dg-scheduler", daemon=True).start()
        return ready.result()

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

    def submit(self, job: Request) -> bool:
        """Queue `job`; False when the queue is full (the caller answers "busy")."""
        if job.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}")
        with self._wake:
            if sum(len(q) for q in self._queues.values()) >= self.max_queue:
                self.counters["busy"] += 1
                return False
            self._queues[self.lane(job)].append(job)
            self.counters["submitted"] += 1
            self._wake.notify()
        return True

    def lane(self, job: Request) -> str:
        return LARGE if job.canvas_length > self.large_canvas else job.priority

    def cancel(self, job: Request) -> None:
        job.cancel()
        with self._wake:
            self._wake.notify()

    def stats(self) -> dict[str, Any]:
        with self._wake:
            queued = {p: len(q) for p, q in self._queues.items()}
            live = len(self._live)
        cache = self.engine.decoder.prefix_cache
        return {**self.counters, "busySeconds": round(self.counters["busySeconds"], 3),
                "live": live, "prefixCacheHits": cache.hits,
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
                expired = self._expire_queued()
                admitted = self._admit()
            for job in expired:
                job.on_draft(_empty_draft("deadline"))
            for job in admitted:
                self._start(job)
            self._drop_cancelled_and_expired()
            if self._live:
                started = time.perf_counter()
                self._round()
                self.counters["busySeconds"] += time.perf_counter() - started
        for live in self._live:
            live.close()

    def _expire_queued(self) -> list[Request]:
        now = time.monotonic()
        expired = []
        for queue in self._queues.values():
            for job in [j for j in queue if j.deadline is not None and now > j.deadline]:
                queue.remove(job)
                expired.append(job)
        self.counters["expired"] += len(expired)
        return expired

    def _admit(self) -> list[Request]:
        jobs = []
        for lane, queue in self._queues.items():
            cap = LARGE_LIVE if lane == LARGE else self.max_batch
            live = sum(1 for lv in self._live if lv.lane == lane)
            while queue and live < cap:
                jobs.append(queue.popleft())
                live += 1
        return jobs

    def _start(self, job: Request) -> None:
        if job.cancelled.is_set():
            self.counters["cancelled"] += 1
            return
        try:
            live = _Live(job, self.engine, self.lane(job))
        except Exception as exc:  # a bad request must not stop the others
            self.counters["failed"] += 1
            job.on_error("failed", str(exc))
            return
        with self._wake:
            self._live.append(live)

    def _drop_cancelled_and_expired(self) -> None:
        now = time.monotonic()
        for live in list(self._live):
            job = live.job
            if job.cancelled.is_set():
                reason, counter = "cancelled", "cancelled"
            elif job.deadline is not None and now > job.deadline:
                reason, counter = "deadline", "expired"
            else:
                continue
            self._finish(live)
            self.counters[counter] += 1
            if live.denoiser is not None:
                job.on_draft(live.denoiser.final(reason))
            elif live.last is not None:
                job.on_draft(replace(live.last, done=True, finish_reason=reason))
            else:
                job.on_draft(_empty_draft(reason))

    def _finish(self, live: _Live) -> None:
        live.close()
        with self._wake:
            self._live.remove(live)
        if live.lane == LARGE:
            release_memory(self.engine.device)

    def _due(self) -> list[_Live]:
        """The live jobs that step this round: interactive ones always, background ones when
        nothing interactive is live or they have waited their turn."""
        if not any(lv.lane == INTERACTIVE for lv in self._live):
            return list(self._live)
        now = time.monotonic()
        return [lv for lv in self._live if lv.lane == INTERACTIVE
                or now - lv.stepped_at >= BACKGROUND_SHARE * lv.step_seconds]

    def _round(self) -> None:
        self.counters["rounds"] += 1
        due = self._due()
        # An int8 model's activations are quantized with one scale per pass: a canvas batched
        # with others would get another completion than alone. Its canvases run one by one
        # (on the CPU, where it runs, a batch costs what its rows cost alone anyway).
        batch = [] if self.engine.quantized else [
            lv for lv in due if lv.lane != LARGE and lv.batchable()]
        drafts: dict[int, Draft] = {}
        if len(batch) > 1:
            started = time.monotonic()
            for live, logits in zip(batch, self._batched_forward(batch), strict=True):
                drafts[id(live)] = live.denoiser.advance(logits)
            ended = time.monotonic()
            for live in batch:
                live.step_seconds, live.stepped_at = ended - started, ended
            self.counters["forwardPasses"] += 1
            self.counters["batchedPasses"] += 1
            self.counters["batchedRows"] += len(batch)
        for live in due:
            try:
                if id(live) not in drafts:
                    started = time.monotonic()
                    drafts[id(live)] = live.step_alone()
                    live.stepped_at = time.monotonic()
                    live.step_seconds = live.stepped_at - started
                    self.counters["forwardPasses"] += 1
            except StopIteration:
                drafts[id(live)] = _empty_draft("stop")
            except Exception as exc:
                self._finish(live)
                self.counters["failed"] += 1
                live.job.on_error("failed", str(exc))
                continue
            draft = settled(drafts[id(live)], live.job.until)
            live.last = draft
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



def _empty_draft(reason: str) -> Draft:
    return Draft(step=0, token_ids=[], committed=0, text="", done=True, finish_reason=reason)
