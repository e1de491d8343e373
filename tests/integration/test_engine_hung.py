"""A hung engine is a dead engine: a stopped `dg-engine serve` (SIGSTOP) makes the client
raise EngineUnavailable within its deadlines, and connect_or_start kills and replaces it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import threading
import time

import pytest

from engine.serve.socket.client import EngineClient, EngineUnavailable
from engine.serve.socket.endpoint import PING_TIMEOUT
from engine.types import InfillRequest, SamplerSettings
from tests.support.engine_procs import gone, serving

# 500 steps of one token each: still denoising when the engine is stopped.
SLOW = SamplerSettings(sampler="topk", k=1, min_tokens=500)


@pytest.mark.slow  # waits out a stopped engine's timeouts and a restart: ~25 s on 2 cores
def test_a_stopped_engine_is_unavailable_promptly_and_replaced(dream_ckpt, tmp_path):
    # Its own engine: a copy of the model is another endpoint.
    model = str(shutil.copytree(dream_ckpt, tmp_path / "model"))
    client = EngineClient.connect_or_start(model, "cpu", dtype="float32", read_timeout=3)
    first = client.info["pid"]
    replacement = None
    # Bounded even if the client waits forever: the stopped engine is then killed, the wait
    # ends, and the timing assertions fail.
    watchdog = threading.Timer(60, lambda: gone(first) or os.kill(first, signal.SIGKILL))
    watchdog.start()
    try:
        stream = client.infill_stream(InfillRequest("x = ", "", 500, SLOW, canvas_length=512))
        assert not next(stream).done
        os.kill(first, signal.SIGSTOP)
        stopped = time.monotonic()
        with pytest.raises(EngineUnavailable) as mid_stream:
            for _ in stream:  # what was sent before the stop, then nothing
                pass
        assert str(mid_stream.value) == "the engine sent nothing for 3 s and answers no ping"
        assert time.monotonic() - stopped < 3 + PING_TIMEOUT + 2

        started = time.monotonic()
        with pytest.raises(EngineUnavailable) as new_request:
            list(client.infill_stream(InfillRequest("y = ", "\n", 4)))
        assert str(new_request.value) == (f"the engine at {client.endpoint.socket} did not "
                                          f"answer a ping in {PING_TIMEOUT:g} s")
        assert time.monotonic() - started < PING_TIMEOUT + 2

        # What the language server does with a lost engine: connect_or_start. Two pings
        # unanswered, it kills the stopped engine and starts another.
        replacement = EngineClient.connect_or_start(model, "cpu", dtype="float32")
        assert replacement.info["pid"] != first
        assert gone(first)
        final = list(replacement.infill_stream(InfillRequest("x = ", "\n", 8)))[-1]
        assert final.done and final.finish_reason in ("stop", "length")
    finally:
        watchdog.cancel()
        if not gone(first):
            with contextlib.suppress(ProcessLookupError):
                os.kill(first, signal.SIGKILL)
        if replacement is not None:
            replacement.shutdown()


def test_a_busy_engine_is_not_taken_for_a_hung_one(dream_ckpt, tmp_path):
    """Queued behind a long request (one slot), a stream hears nothing for many read
    timeouts; the engine answers pings meanwhile, so the stream waits and gets its result."""
    with serving(dream_ckpt, tmp_path / "e.sock", "--max-batch", "1") as (_, endpoint):
        client = EngineClient(endpoint, read_timeout=0.2)
        long = client.infill_stream(InfillRequest("x = ", "", 500, SLOW, canvas_length=512))
        assert not next(long).done  # it holds the only slot
        started = time.monotonic()
        queued = client.infill_stream(InfillRequest("y = ", "\n", 4))
        first = next(queued)
        waited = time.monotonic() - started
        rest = list(long)  # it finished first: the queued request waited for it
        assert rest[-1].done and rest[-1].finish_reason == "length"
        final = [first, *queued][-1]
        assert final.done and final.finish_reason in ("stop", "length")
        assert waited > 3 * 0.2
