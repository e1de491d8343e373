"""Batch mode's targets on a shared engine: the resident engine, or a team's (`--engine URL`).

The caller sends targets `--workers` at a time, each its own stream (the engine batches them),
each request naming its file (a team's router keeps a file on one replica: its prefix cache).
`TargetRunner.run` is one target, sent again when its request failed for the engine's state
rather than its own, within bounds:

- "busy" (the engine's queue is full): after each of BUSY_RETRIES;
- "lost" (a replica or the engine lost: EngineUnavailable with the code "unavailable", which
  the team's ingress sends for a replica lost mid-request, its front for a proxy that does not
  answer, the client for any 5xx not the engine's own; or with no code: the connection reset,
  closed before the result, silent past the read timeout): after each of LOST_RETRIES, with
  jitter, about 30 s in all. Ray Serve drops a dead replica from its router when a request to
  it fails, so on two replicas the first retry lands on the other; a single replica's
  replacement has that long to load (a small model's does).

On the resident engine (one process: no other replica to go to) a lost engine is not waited
for (`lost_waits=()`). Anything else (the model raised: "failed"; a request the engine
refuses; a token no longer accepted) fails the target at once. A target whose retries run out
fails with its last error; when they ran out on a lost engine, the engine is taken to be down
and targets not sent yet fail at once ("not sent: ...") instead of each waiting out its own
retries. Every retry is computed from the file as read, so a target's edit does not depend on
how often it was sent. Nothing is written here: the caller writes a file whole once all its
targets are in, and not at all when one of them failed.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable

from dg_lsp.actions.targets import Target
from dg_lsp.batch.job import BatchJob, Record, run_target, target_record
from dg_lsp.document.edit import Edit
from dg_lsp.document.parsed import ParsedText
from engine.backend import Backend
from engine.serve.socket.client import EngineBusy, EngineUnavailable

RESIDENT_WORKERS = 8  # concurrent targets on the resident engine (its default batch size)
TEAM_WORKERS = 4  # on a team's engine: its replicas serve the team's editors too
BUSY_RETRIES = (1.0, 2.0, 4.0, 8.0)  # seconds to wait after "busy" before each retry
LOST_RETRIES = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # after a lost replica or engine (times jitter)
LOST_CODES = ("", "unavailable")  # EngineUnavailable codes that say the engine was lost


def retry_kind(error: BaseException | None) -> str | None:
    """"busy", "lost", or None: whether a target that failed with `error` is sent again."""
    if isinstance(error, EngineBusy):
        return "busy"
    if isinstance(error, EngineUnavailable) and error.code in LOST_CODES:
        return "lost"
    return None


class TargetRunner:
    """Runs targets on `client` from any number of threads, with the retries above. `stop`
    set (Ctrl-C) ends a running target at its next step and every wait at once."""

    def __init__(self, client: Backend, job: BatchJob, stop: threading.Event | None = None,
                 busy_waits: tuple[float, ...] | None = None,
                 lost_waits: tuple[float, ...] | None = None,
                 jitter: Callable[[], float] = lambda: random.uniform(0.75, 1.25)) -> None:
        self.client, self.job = client, job
        self.stop = stop or threading.Event()
        self.waits = {"busy": BUSY_RETRIES if busy_waits is None else busy_waits,
                      "lost": LOST_RETRIES if lost_waits is None else lost_waits}
        self.jitter = jitter
        self.down: str | None = None  # why the engine is taken to be down, once it is
        self.retried = 0  # requests sent again, in all
        self._lock = threading.Lock()

    def run(self, doc: ParsedText, label: str, target: Target) -> tuple[Record, Edit | None]:
        """The target's record (with its attempts and the replica that served it, where the
        answer says) and its edit, or None; failures are recorded, never raised."""
        started = time.perf_counter()
        tries: Counter[str] = Counter()
        attempts = 0
        while True:
            if self.down is not None:
                record = target_record(doc, label, target, f"error: not sent: {self.down}")
                record.error, edit = EngineUnavailable(self.down), None
                break
            attempts += 1
            record, edit = run_target(self.client, doc, label, target, self.job,
                                      cancel=self.stop.is_set)
            record.replica = str(getattr(self.client, "last_replica", "") or "")
            kind = retry_kind(record.error)
            if kind is None or self.stop.is_set():
                break
            waits = self.waits[kind]
            if tries[kind] >= len(waits):
                if kind == "lost":
                    self._engine_down(record, attempts)
                break
            delay = waits[tries[kind]] * self.jitter()
            tries[kind] += 1
            with self._lock:
                self.retried += 1
            if self.stop.wait(delay):
                break
        record.attempts = attempts
        record.seconds = time.perf_counter() - started
        return record, edit

    def _engine_down(self, record: Record, attempts: int) -> None:
        with self._lock:
            if self.down is None:
                reason = record.result.removeprefix("error: ")
                self.down = f"the engine was lost ({attempts} tries, the last: {reason})"
