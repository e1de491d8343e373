"""int4 weights through the resident engine: a process of its own (tests/unit/test_int4.py has
the layer and the in-process engine)."""

from __future__ import annotations

from pathlib import Path

from engine.serve.client import EngineClient
from engine.types import InfillRequest, last_draft


def test_the_resident_engine_fills_a_hole_at_int4(dream_ckpt: Path) -> None:
    # The endpoint is keyed by the dtype too: this engine is not the float32 one.
    client = EngineClient.connect_or_start(str(dream_ckpt), "cpu", dtype="int4")
    try:
        request = InfillRequest("def add(a, b):\n    return ", "\n", 8)
        remote = last_draft(client.infill_stream(request))
        # Not compared token for token with the in-process engine: the resident one picks
        # its own thread count, and bfloat16 sums in another order may flip a near tie.
        assert remote is not None and remote.done and remote.finish_reason
    finally:
        client.shutdown()
