"""The real-shape bench's checkpoint writing, without a server: the damped head rows and the
shapes without a twin (dg_lsp/measure/bench_real_shape.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from dg_lsp.measure.bench_real_shape import DAMPING, SHAPES, _damp_rows


@pytest.mark.parametrize(("tied", "dtype"), [(False, torch.bfloat16), (True, torch.float32)])
def test_damping_scales_the_head_rows_in_place_and_nothing_else(tmp_path: Path, tied: bool,
                                                                dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(10, 4, generator=gen).to(dtype),
               "model.norm.weight": torch.randn(4, generator=gen).to(dtype)}
    if not tied:
        tensors["lm_head.weight"] = torch.randn(10, 4, generator=gen).to(dtype)
    file = tmp_path / "model.safetensors"
    save_file(tensors, str(file), metadata={"format": "pt"})
    _damp_rows(file, [2, 7])
    got = load_file(str(file))
    head = "model.embed_tokens.weight" if tied else "lm_head.weight"
    want = tensors[head].clone()
    want[[2, 7]] *= DAMPING  # the op the bench applied to the whole file loaded before
    assert torch.equal(got[head], want)
    for name in set(tensors) - {head}:
        assert torch.equal(got[name], tensors[name])


def test_only_the_7b_shape_goes_without_its_autoregressive_twin() -> None:
    assert [name for name, (_, twin, _, _) in SHAPES.items() if twin is None] == [
        "dream-coder-7b"]
