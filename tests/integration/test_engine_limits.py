"""Bad frames get an error reply and break nothing; no request holds the engine hostage.

Over the wire: a `dg-engine serve` of the tiny Dream checkpoint (512 positions) with a 6 MiB
per-request memory budget. Scheduling: the Scheduler in this process, on a copy of the tiny
model with 4096 positions, so that a huge canvas is cheap enough to test.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dg_lsp.measure.bench_lsp import peak_rss_mb
from engine.decode.sequence import Sequence
from engine.serve.scheduler import BATCH, INTERACTIVE, Scheduler
from engine.serve.socket import protocol
from engine.types import Draft, InfillRequest, SamplerSettings
from tests.support.engine_procs import rss_mb, serving
from tests.support.tiny_checkpoints import write_dream_checkpoint
from tests.support.wait import wait_for


@pytest.fixture(scope="module")
def wire(dream_ckpt: Path, tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("wire")
    log = folder / "engine.log"
    with serving(dream_ckpt, folder / "e.sock", "--max-request-mb", "6", stderr=log) as (
            process, endpoint):
        yield endpoint, process, log
    # Every bad frame was answered: none reached the log as an unhandled exception.
    assert "Traceback" not in log.read_text()


def ask(sock: socket.socket, body: bytes) -> dict:
    sock.sendall(struct.pack(">I", len(body)) + body)
    return protocol.receive(sock)


def bad(id_, message: str) -> dict:
    return {"type": "error", "id": id_, "code": "bad-request", "message": message}


ID_RULE = "id must be an integer or a string of at most 256 characters"
SLOW = {"sampler": "topk", "k": 1}  # one token per step


# Each frame the issue found breaking the engine, and the exact reply it now gets.
BAD_FRAMES = {
    "list id": (b'{"op": "ping", "id": [1, 2]}', bad(None, ID_RULE)),
    "object id": (b'{"op": "ping", "id": {"a": 1}}', bad(None, ID_RULE)),
    "NaN id": (b'{"op": "ping", "id": NaN}',
               bad(None, "not a JSON message: NaN is not a JSON number")),
    "float id": (b'{"op": "ping", "id": 1.5}', bad(None, ID_RULE)),
    "long id": (b'{"op": "ping", "id": "' + b"x" * 257 + b'"}', bad(None, ID_RULE)),
    "lone surrogate id": (b'{"op": "ping", "id": "\\ud800"}', bad(None, ID_RULE)),
    "Infinity temperature": (
        b'{"op": "infill", "id": 1, "settings": {"temperature": Infinity}}',
        bad(None, "not a JSON message: Infinity is not a JSON number")),
    "overflowing float": (b'{"op": "infill", "id": 1, "settings": {"temperature": 1e999}}',
                          bad(None, "not a JSON message: number 1e999 is out of range")),
    "negative threshold": (
        b'{"op": "infill", "id": 2, "settings": {"threshold": -1e300}}',
        bad(2, "settings.threshold: expected a finite number in 0..1, got -1e+300")),
    "huge seed": (b'{"op": "infill", "id": 3, "settings": {"seed": 18446744073709551616}}',
                  bad(3, "settings.seed: expected an integer in 0..9223372036854775807, got "
                         "18446744073709551616")),
    "unknown sampler": (b'{"op": "infill", "id": 4, "settings": {"sampler": "magic"}}',
                        bad(4, "settings.sampler: expected one of topk, threshold, entropy, "
                               "learned, got 'magic'")),
    "100k-deep JSON": (b"[" * 100_000 + b"]" * 100_000,
                       bad(None, "not a JSON message: nested too deeply")),
    "array body": (b"[1, 2]", bad(None, "a message must be a JSON object")),
    "string body": (b'"hello"', bad(None, "a message must be a JSON object")),
    "null body": (b"null", bad(None, "a message must be a JSON object")),
    "not UTF-8": (b'{"op": "\xff"}',
                  bad(None, "not UTF-8: 'utf-8' codec can't decode byte 0xff in position "
                            "8: invalid start byte")),
    "lone surrogate prefix": (b'{"op": "infill", "id": 5, "prefix": "x\\ud800"}',
                              bad(5, "prefix: not valid Unicode (a lone surrogate)")),
    "list cancel target": (b'{"op": "cancel", "id": 6, "target": [1]}', bad(6, (
        "target must be an integer or a string of at most 256 characters"))),
    "canvas over the model's positions": (
        b'{"op": "infill", "id": 7, "canvas_length": 8192, "max_tokens": 4096}',
        bad(7, "canvas_length must be in [64, 512] (this model's positions), not 8192")),
    "hole larger than the canvas": (
        b'{"op": "infill", "id": 8, "canvas_length": 64, "max_tokens": 64}',
        bad(8, "max_tokens must be in [1, canvas_length - 1 = 63], not 64")),
    "over the memory budget": (
        b'{"op": "infill", "id": 9, "canvas_length": 512, "max_tokens": 500}',
        bad(9, "canvas_length 512 with max_tokens 500 needs about 7 MiB, over this "
               "engine's 6 MiB per request (--max-request-mb)")),
    "unknown op": (b'{"op": [1, 2, 3], "id": 10}', {
        "type": "error", "id": 10, "code": "unknown-op", "message": "unknown op [1, 2, 3]"}),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
def test_a_bad_frame_gets_an_exact_error_and_the_connection_keeps_serving(wire, case):
    """(protocol.receive parses replies strictly: an echoed NaN would fail it.)"""
    endpoint, _, _ = wire
    body, expected = BAD_FRAMES[case]
    with endpoint.connect(timeout=60) as sock:
        assert ask(sock, body) == expected
        assert ask(sock, b'{"op": "ping", "id": "after"}') == {"type": "ok", "id": "after"}


def test_hello_tells_the_limits_and_a_request_within_them_is_served(wire):
    endpoint, process, _ = wire
    with endpoint.connect(timeout=60) as sock:
        hello = ask(sock, b'{"op": "hello", "id": 1}')
        assert (hello["pid"], hello["limits"]) == (process.pid, {"maxCanvas": 512,
                                                                 "requestTimeout": 60.0})
        request = {"op": "infill", "id": 2, "prefix": "x = ", "suffix": "\n",
                   "max_tokens": 32, "canvas_length": 512}
        reply = ask(sock, protocol.encode(request)[4:])
        assert reply["type"] == "result" and reply["draft"]["done"]


def test_context_beyond_the_canvas_costs_nothing(wire):
    """A 7 MB prefix is trimmed to what its canvas can hold before it is tokenized, and
    gets the completion any prefix longer than the canvas with the same end gets."""
    endpoint, _, _ = wire
    small = {"op": "infill", "id": 1, "prefix": "#" * 10_000 + "y = 1\nx = ", "suffix": "\n",
             "max_tokens": 8, "canvas_length": 64}
    huge = dict(small, id=2, prefix="#" * (7 << 20) + small["prefix"])
    with endpoint.connect(timeout=60) as sock:
        expected = ask(sock, protocol.encode(small)[4:])["draft"]["text"]
        started = time.monotonic()
        reply = ask(sock, protocol.encode(huge)[4:])
        assert reply["type"] == "result" and reply["draft"]["text"] == expected
        assert time.monotonic() - started < 5  # tokenizing 7 MB took minutes' worth of CPU


def test_a_request_past_its_deadline_ends_with_what_it_has(dream_ckpt, tmp_path):
    with serving(dream_ckpt, tmp_path / "e.sock", "--request-timeout", "0.5") as (_, endpoint):
        # Every step a pass of its own (cache_refresh 1: none reuses a pass's logits), so
        # what it has is one token a pass.
        slow = {"op": "infill", "id": 1, "prefix": "x = ", "max_tokens": 500,
                "canvas_length": 512, "stream": True, "settings": {**SLOW, "cache_refresh": 1}}
        with endpoint.connect(timeout=60) as sock:
            started = time.monotonic()
            protocol.send(sock, slow)
            while (reply := protocol.receive(sock))["type"] == "draft":
                pass
            took = time.monotonic() - started
            draft = reply["draft"]
            assert (reply["type"], draft["done"], draft["finish_reason"]) == (
                "result", True, "deadline")
            assert 1 <= draft["step"] < 500 and draft["committed"] == draft["step"]
            assert took < 3
            # A normal request on the same engine is untouched by the deadline.
            protocol.send(sock, dict(slow, id=2, max_tokens=4, stream=False))
            assert protocol.receive(sock)["draft"]["finish_reason"] in ("stop", "length")


# -- scheduling -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def long_engine(tmp_path_factory: pytest.TempPathFactory):
    from engine import Engine

    folder = write_dream_checkpoint(tmp_path_factory.mktemp("long"),
                                    extra_config={"max_position_embeddings": 4096})
    return Engine.load(str(folder), device="cpu", dtype="float32")


class Timeline:
    """Every draft of every job, in the order the scheduler produced them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Draft]] = []
        self.lock = threading.Lock()

    def job(self, name: str, canvas: int, tokens: int, priority: str = INTERACTIVE) -> Sequence:
        def on_draft(draft: Draft) -> None:
            with self.lock:
                self.events.append((name, draft))

        # One token per step and no stop token: exactly `tokens` steps.
        settings = SamplerSettings(sampler="topk", k=1, min_tokens=tokens)
        return Sequence(InfillRequest("x = ", "\n", tokens, settings, canvas), priority,
                        on_draft=on_draft)

    def done(self, name: str) -> bool:
        with self.lock:
            return any(n == name and d.done for n, d in self.events)

    def steps_of(self, name: str, during: str) -> int:
        """Steps `name` took between `during`'s first and last drafts."""
        with self.lock:
            names = [n for n, _ in self.events]
        first = names.index(during)
        last = len(names) - 1 - names[::-1].index(during)
        return names[first:last + 1].count(name)


def run_beside(engine, long: Sequence, short: Sequence, timeline: Timeline, **kwargs) -> None:
    scheduler = Scheduler(engine, **kwargs)
    scheduler.start()
    try:
        assert scheduler.submit(long)
        wait_for(lambda: len(timeline.events) >= 2, 120)  # the long one is denoising
        assert scheduler.submit(short)
        wait_for(lambda: timeline.done("short"), 120)
        assert not timeline.done("long")  # the short one did not wait for it
    finally:
        long.cancel()
        scheduler.stop()


def test_a_huge_canvas_does_not_slow_a_small_request(long_engine):
    """Stepped together (as before), the 4096-token canvas stepped once per step of the
    small request and padded it to its width; now it yields while the small one runs."""
    timeline = Timeline()
    huge = timeline.job("long", 4096, 4000)
    small = timeline.job("short", 256, 24)
    run_beside(long_engine, huge, small, timeline)
    short = [d for n, d in timeline.events if n == "short"]
    assert short[-1].committed == 24 and len(short) == short[-1].step  # a draft a pass
    assert timeline.steps_of("long", during="short") <= 2 + 24 // 4


def test_interactive_work_is_admitted_beside_a_full_batch_lane(long_engine):
    """max_batch 1: the batch job fills its lane, the typed request still starts at once."""
    timeline = Timeline()
    background = timeline.job("long", 512, 500, priority=BATCH)
    typed = timeline.job("short", 256, 24)
    run_beside(long_engine, background, typed, timeline, max_batch=1)
    assert timeline.steps_of("long", during="short") <= 2 + 24 // 4


def test_memory_of_a_large_request_is_given_back(tmp_path):
    """Freed tensors stay in glibc's heap unless collected and trimmed."""
    folder = write_dream_checkpoint(tmp_path / "long", hidden=256, intermediate=1024,
                                    extra_config={"max_position_embeddings": 4096})
    with serving(folder, tmp_path / "e.sock", "--max-request-mb", "4096") as (
            process, endpoint), endpoint.connect(timeout=120) as sock:
        small = {"op": "infill", "id": 1, "prefix": "x = ", "max_tokens": 8,
                 "canvas_length": 256, "settings": SLOW}
        protocol.send(sock, small)
        protocol.receive(sock)
        before = rss_mb(process.pid)
        # Exact passes (cache_refresh 1): after cached ones, of many shapes, 14-73 MB more
        # stays in use that trimming cannot return, which would blur what this measures.
        protocol.send(sock, dict(small, id=2, max_tokens=4000, canvas_length=4096,
                                 prefix="x = 1\n" * 2000,
                                 settings={"max_steps": 4, "cache_refresh": 1}))
        assert protocol.receive(sock)["type"] == "result"
        after, peak = rss_mb(process.pid), peak_rss_mb(process.pid)
        # The request grows RSS by ~140 MB. Measured: collected and trimmed it keeps 1-33 MB
        # of that; untrimmed 61-143 MB. A share of the growth, not a fixed figure, so that
        # the allocator's noise cannot decide it (release_memory's own test is exact).
        assert after - before < 0.4 * (peak - before), (before, peak, after)


def test_release_memory_returns_freed_heap_to_the_system():
    script = """
import threading, torch
from engine.serve.scheduler import release_memory

def rss_mb():
    line = next(l for l in open("/proc/self/status") if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024

base, kept = rss_mb(), []

def work():  # 3000 tensors of 64 KB, below glibc's mmap threshold: they live in its heap
    tensors = [torch.ones(16 * 1024) for _ in range(3000)]
    kept.extend(tensors[::10])  # every tenth stays: the freed ones are holes, not the top

thread = threading.Thread(target=work)  # the scheduler's tensors come from its own thread
thread.start()
thread.join()
grown = rss_mb() - base
release_memory(torch.device("cpu"))
print(round(grown), round(rss_mb() - base))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])
    grown, left = map(int, done.stdout.split())
    # 190 MB grown; 19 MB of it still in use (the tensors kept): 22 left after release,
    # 190 without it.
    assert grown > 150 and left < 60, (grown, left)


def test_a_request_whose_deadline_passes_in_the_queue_never_runs(long_engine):
    scheduler = Scheduler(long_engine)
    timeline = Timeline()
    late = timeline.job("late", 256, 8)
    late.deadline = time.monotonic() - 1  # it waited past its deadline before admission
    assert scheduler.submit(late)
    scheduler.start()
    try:
        wait_for(lambda: timeline.done("late"), 120)
    finally:
        scheduler.stop()
    assert timeline.events == [("late", Draft(step=0, token_ids=[], committed=0, text="",
                                              done=True, finish_reason="deadline"))]
    assert (scheduler.counters["expired"], scheduler.counters["forwardPasses"]) == (1, 0)


def test_the_model_is_loaded_on_the_thread_that_runs_its_passes(long_engine):
    threads = {}

    def load():
        threads["load"] = threading.current_thread()
        return long_engine

    scheduler = Scheduler.loading(load)
    try:
        timeline = Timeline()
        job = timeline.job("one", 64, 3)
        job.on_draft = lambda draft, record=job.on_draft: (
            threads.setdefault("pass", threading.current_thread()), record(draft))
        assert scheduler.submit(job)
        wait_for(lambda: timeline.done("one"), 120)
    finally:
        scheduler.stop()
    assert threads["pass"] is threads["load"] is not threading.main_thread()
    assert [d.step for _, d in timeline.events] == [1, 2, 3]


def test_a_model_that_fails_to_load_raises_to_the_caller():
    def load():
        raise ValueError("no such checkpoint")

    with pytest.raises(ValueError, match="no such checkpoint"):
        Scheduler.loading(load)


def test_an_error_outside_a_requests_step_fails_the_live_requests_and_the_engine_goes_on(
        long_engine, monkeypatch: pytest.MonkeyPatch):
    """A bug in a round (here the runner itself raising) once ended the scheduler's thread:
    every client then waited for drafts that never came."""
    scheduler = Scheduler(long_engine)
    errors: list[tuple[str, str]] = []
    timeline = Timeline()
    broken = timeline.job("broken", 256, 4)
    broken.on_error = lambda code, message: errors.append((code, message))
    real_step = long_engine.runner.step

    def step_once_broken(lives):
        monkeypatch.setattr(long_engine.runner, "step", real_step)
        raise RuntimeError("boom")

    monkeypatch.setattr(long_engine.runner, "step", step_once_broken)
    scheduler.start()
    try:
        assert scheduler.submit(broken)
        wait_for(lambda: errors, 120)
        assert errors == [("failed", "engine error: RuntimeError: boom")]
        assert scheduler.submit(timeline.job("after", 256, 4))
        wait_for(lambda: timeline.done("after"), 120)
    finally:
        scheduler.stop()
    assert [d.committed for n, d in timeline.events if n == "after"][-1] == 4
    assert scheduler.stats()["live"] == 0 and scheduler.counters["failed"] == 1
