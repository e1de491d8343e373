"""int4 weights through the resident engine: a process of its own (tests/unit/test_int4.py has
the layer and the in-process engine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.serve.socket.client import EngineClient
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


def test_the_resident_engine_fills_a_hole_with_the_block_family_at_int4(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    from tests.support.diffusion_gemma import write_diffusion_gemma

    model = write_diffusion_gemma(tmp_path / "dg64", width=64)
    client = EngineClient.connect_or_start(str(model), "cpu", dtype="int4")
    try:
        request = InfillRequest("def add(a, b):\n    return ", "\n", 8)
        remote = last_draft(client.infill_stream(request))
        assert remote is not None and remote.done and len(remote.token_ids) == 8
    finally:
        client.shutdown()
