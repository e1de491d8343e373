"""The resident engine's scheduler: live requests advance one step per round.

One thread owns the model. The scheduler decides which requests step in each round; the
engine's runner (engine.decode.runner) runs their passes: the scheduler never calls the model.
Requests wait in three lanes: interactive (an editor waiting on
it), batch (`dg-lsp batch` and other background work) and large (any request whose canvas is
over `large_canvas` tokens). Each lane admits up to its own number of live requests, so a
typed completion never queues behind batch work or a huge canvas. Each round drops the
cancelled and expired requests and advances the live ones by one forward pass:

- interactive requests step every round; background ones (batch and large) every round only
  while no interactive request is live, else once they have waited four times as long as
  their last step took: while someone types, background work gets about a fifth of the
  engine, and it still finishes;
- the runner runs masked-family holes that need a full pass together as one padded batch,
  but a large canvas runs alone: in a batch it would make every row as wide, and as slow,
  as itself; the rest (masked steps on a cached context, the AR baseline, the block family)
  run one after another in the same round.

Every request is a `Sequence` (engine.decode.sequence): the request in flight, with the
scheduler's bookkeeping (lane, priority, callbacks, step times) beside its decoding state.
Every request has a deadline (`Sequence.deadline`): past it, it ends with the text it has and
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
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import torch

from engine.decode.runner import end
from engine.decode.sequence import INTERACTIVE, Sequence, empty_draft, stop_reason
from engine.engine import Engine
from engine.models.config import ModelConfig

BATCH, LARGE = "batch", "large"
PRIORITIES = (INTERACTIVE, BATCH)
LANES = (INTERACTIVE, BATCH, LARGE)
LARGE_CANVAS = 1024  # tokens: a canvas over this is stepped alone, as background work
LARGE_LIVE = 1  # large requests denoised at once: each may hold hundreds of MB
BACKGROUND_SHARE = 4  # background work waits this many times its last step's duration


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


class Scheduler:
    def __init__(self, engine: Engine, max_batch: int = 8, max_queue: int = 64,
                 large_canvas: int = LARGE_CANVAS) -> None:
        self.engine = engine
        self.max_batch = max_batch
        self.max_queue = max_queue
        self.large_canvas = large_canvas
        self._queues: dict[str, deque[Sequence]] = {lane: deque() for lane in LANES}
        self._live: list[Sequence] = []
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
        to wake (docs/performance.md).
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

    def submit(self, job: Sequence) -> bool:
        """Queue `job`; False when the queue is full (the caller answers "busy")."""
        if job.priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {PRIORITIES}")
        with self._wake:
            if sum(len(q) for q in self._queues.values()) >= self.max_queue:
                self.counters["busy"] += 1
                return False
            job.lane = self.lane(job)
            self._queues[job.lane].append(job)
            self.counters["submitted"] += 1
            self._wake.notify()
        return True

    def lane(self, job: Sequence) -> str:
        return LARGE if job.request.canvas_length > self.large_canvas else job.priority

    def cancel(self, job: Sequence) -> None:
        job.cancel()
        with self._wake:
            self._wake.notify()

    def stats(self) -> dict[str, Any]:
        with self._wake:
            queued = {p: len(q) for p, q in self._queues.items()}
            live = len(self._live)
        cache = self.engine.decoder.prefix_cache
        threads = self.engine.runner.threads
        return {**self.counters,
                "busySeconds": round(self.counters["busySeconds"], 3),
                "cpuThreads": threads.describe() if threads is not None else None,
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
            try:
                for job in expired:
                    job.on_draft(empty_draft("deadline"))
                for job in admitted:
                    self._start(job)
                self._drop_cancelled_and_expired()
                if self._live:
                    started = time.perf_counter()
                    self._round()
                    self.counters["busySeconds"] += time.perf_counter() - started
            except Exception as exc:  # noqa: BLE001 - a bug outside one request's step
                # The thread must go on: were it to end, every client would wait on drafts
                # that never come. The requests in flight end with the error instead.
                self._fail_live(f"engine error: {type(exc).__name__}: {exc}")
        for job in self._live:
            job.close()

    def _fail_live(self, message: str) -> None:
        with self._wake:
            failed, self._live = self._live, []
        for job in failed:
            self.counters["failed"] += 1
            with contextlib.suppress(Exception):
                job.close()
            with contextlib.suppress(Exception):
                job.on_error("failed", message)

    def _expire_queued(self) -> list[Sequence]:
        now = time.monotonic()
        expired = []
        for queue in self._queues.values():
            for job in [j for j in queue if stop_reason(None, j.deadline, now) == "deadline"]:
                queue.remove(job)
                expired.append(job)
        self.counters["expired"] += len(expired)
        return expired

    def _admit(self) -> list[Sequence]:
        jobs = []
        for lane, queue in self._queues.items():
            cap = LARGE_LIVE if lane == LARGE else self.max_batch
            live = sum(1 for job in self._live if job.lane == lane)
            while queue and live < cap:
                jobs.append(queue.popleft())
                live += 1
        return jobs

    def _start(self, job: Sequence) -> None:
        if job.cancelled.is_set():
            self.counters["cancelled"] += 1
            return
        try:
            job.alone = job.lane == LARGE
            self.engine.start(job)
        except Exception as exc:  # a bad request must not stop the others
            self.counters["failed"] += 1
            job.on_error("failed", str(exc))
            return
        with self._wake:
            self._live.append(job)

    def _drop_cancelled_and_expired(self) -> None:
        now = time.monotonic()
        for job in list(self._live):
            reason = job.stop_reason(now)
            if reason is None:
                continue
            self._finish(job)
            self.counters["cancelled" if reason == "cancelled" else "expired"] += 1
            job.on_draft(end(job, reason))

    def _finish(self, job: Sequence) -> None:
        job.close()
        with self._wake:
            self._live.remove(job)
        if job.lane == LARGE:
            release_memory(self.engine.device)

    def _due(self) -> list[Sequence]:
        """The live jobs that step this round: interactive ones always, background ones when
        nothing interactive is live or they have waited their turn."""
        if not any(job.lane == INTERACTIVE for job in self._live):
            return list(self._live)
        now = time.monotonic()
        return [job for job in self._live if job.lane == INTERACTIVE
                or now - job.stepped_at >= BACKGROUND_SHARE * job.step_seconds]

    def _round(self) -> None:
        self.counters["rounds"] += 1
        due = self._due()
        stepped = self.engine.runner.step(due)
        batched = sum(1 for result in stepped if result.batched)
        if batched:
            self.counters["forwardPasses"] += 1
            self.counters["batchedPasses"] += 1
            self.counters["batchedRows"] += batched
        for job, result in zip(due, stepped, strict=True):
            job.step_seconds, job.stepped_at = result.ended - result.started, result.ended
            if result.error is not None:
                self._finish(job)
                self.counters["failed"] += 1
                job.on_error("failed", str(result.error))
                continue
            if not result.batched:
                self.counters["forwardPasses"] += 1
            draft = result.draft
            if draft.done:
                self._finish(job)
                self.counters["completed"] += 1
                self.counters["positionsCommitted"] += draft.committed
            job.on_draft(draft)
