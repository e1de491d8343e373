"""torch.compile's engine: the same tokens and passes as the eager one. In its own file of
the integration tests: inductor builds C++ kernels, a minute or more on 2 cores, so it is no
part of the unit loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import Engine

PREFIX, SUFFIX = "def fib(n):", "\n\nprint(fib(3))\n"  # as tests/unit/test_infill.py's


@pytest.mark.slow  # torch.compile's inductor builds C++ kernels: a minute or more on 2 cores
def test_compiled_engine_fills_like_the_eager_one(dream_ckpt: Path) -> None:
    from torch._dynamo.utils import counters

    eager = Engine.load(str(dream_ckpt), device="cpu", dtype="float32")
    graphs = counters["stats"]["unique_graphs"]
    compiled = Engine.load(str(dream_ckpt), device="cpu", compile=True)
    kwargs = dict(max_tokens=6, sampler="topk", k=1, stop_early=False, cache_refresh=2)
    got = compiled.infill(PREFIX, SUFFIX, **kwargs)
    assert counters["stats"]["unique_graphs"] > graphs  # compiled, not silently eager
    want = eager.infill(PREFIX, SUFFIX, **kwargs)
    assert (got.token_ids, got.steps) == (want.token_ids, want.steps)
    with pytest.raises(ValueError, match="int8 layers do not compile"):
        Engine.load(str(dream_ckpt), device="cpu", dtype="int8", compile=True)
