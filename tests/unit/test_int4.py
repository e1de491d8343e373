"""Weight-only int4 layers (engine.models.int4): the packed ops against their dequantized
reference, the error against float, and `Engine.load(dtype="int4")` for every family."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from engine import Engine
from engine.models.int4 import (
    Int4Linear,
    cuda_inner_k_tiles,
    dequantize_weight,
    quantize_int4,
    quantize_weight,
)


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _linear(out_features: int, in_features: int, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(in_features, out_features, bias=True)
    nn.init.normal_(layer.weight, std=0.02)
    return layer


def test_codes_stand_for_the_weight_within_half_a_step() -> None:
    weight = _linear(48, 256).weight.detach()
    codes, scales_and_zeros = quantize_weight(weight, 64)
    assert codes.dtype == torch.int32 and int(codes.min()) >= 0 and int(codes.max()) <= 15
    assert scales_and_zeros.shape == (256 // 64, 48, 2)
    # Rounding to the nearest of 16 evenly spaced levels moves a weight by at most half a
    # step (plus float32 rounding of the affine map).
    step = scales_and_zeros[..., 0].transpose(0, 1).repeat_interleave(64, dim=1)
    error = (dequantize_weight(codes, scales_and_zeros, 64) - weight).abs()
    assert bool((error <= step / 2 + 1e-6).all())


# The bundled model's fused qkv, o, fused gate/up and down projections (384 hidden, 896 MLP).
BUNDLED_SHAPES = [(640, 384), (384, 384), (1792, 384), (384, 896)]


@pytest.mark.parametrize("out_features, in_features", BUNDLED_SHAPES)
def test_packed_cpu_op_matches_its_dequantized_reference(out_features: int,
                                                         in_features: int) -> None:
    layer = _linear(out_features, in_features)
    packed = Int4Linear.from_linear(layer, 64)
    reference = Int4Linear.from_linear(layer, 64, use_ops=False)
    assert (packed.kernel, reference.kernel) == ("cpu", "dequantize")
    x = torch.randn(3, 5, in_features)
    with torch.no_grad():
        got, want = packed(x), reference(x)
    assert got.shape == want.shape == (3, 5, out_features) and got.dtype == torch.float32
    # Same codes and scales; the op rounds activations, scales and zeros to bfloat16 (a
    # relative step of 2^-8 per element, partly averaging out over a dot product).
    assert _relative(got, want) < 1e-2


def test_a_shape_the_op_refuses_takes_the_dequantizing_path_exactly() -> None:
    layer = _linear(100, 128)  # the CPU op wants out-features a multiple of 16
    q = Int4Linear.from_linear(layer, 32)
    assert q.kernel == "dequantize"
    codes, scales_and_zeros = quantize_weight(layer.weight, 32)
    x = torch.randn(7, 128)
    with torch.no_grad():
        want = F.linear(x, dequantize_weight(codes, scales_and_zeros, 32), layer.bias)
        assert torch.equal(q(x), want)  # the same computation, step for step


@pytest.mark.parametrize(("in_features", "tiles"), [
    (2816, 8), (3584, 8), (18944, 8),  # DiffusionGemma's hidden, DiffuCoder-7B's widths
    (704, 4),  # DiffusionGemma's expert down projection: 8 tiles would leave it unpacked
    (96, 2), (80, None)])
def test_the_cuda_op_packs_with_inner_k_tiles_that_divide_the_in_features(
    in_features: int, tiles: int | None
) -> None:
    # The op itself runs on CUDA only; what it is given is chosen here, on any machine.
    assert cuda_inner_k_tiles(in_features) == tiles


def test_int4_output_is_close_to_float() -> None:
    layer = _linear(512, 1024)
    x = torch.randn(16, 1024)
    with torch.no_grad():
        error = _relative(Int4Linear.from_linear(layer, 64)(x) - layer.bias,
                          layer(x) - layer.bias)
    # Gaussian weights: 64 of them span about 5 standard deviations, so a step is about a
    # third of one, and rounding error (uniform over a step) has a standard deviation of
    # about step / sqrt(12), near a tenth of the weights': the output error is near 0.1.
    assert 0.03 < error < 0.13


def test_quantize_int4_keeps_tied_heads_and_partial_groups_in_float() -> None:
    model = nn.ModuleDict({"embed": nn.Embedding(32, 64), "a": nn.Linear(64, 32),
                           "odd": nn.Linear(48, 32), "head": nn.Linear(64, 32, bias=False)})
    model["head"].weight = model["embed"].weight
    kept = quantize_int4(model, 64)
    assert isinstance(model["a"], Int4Linear)
    assert isinstance(model["odd"], nn.Linear) and isinstance(model["head"], nn.Linear)
    assert kept == ["odd (in-features 48 not a multiple of 64)",
                    "head (shares its weight with an embedding)"]


@pytest.mark.parametrize("fixture", ["dream_ckpt", "llada_ckpt", "ar_ckpt"])
def test_engine_loads_every_transformer_family_at_int4_and_fills_a_hole(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(fixture)
    engine = Engine.load(str(path), device="cpu", dtype="int4")
    layers = [m for m in engine.model.modules() if isinstance(m, Int4Linear)]
    # The CPU op packs every layer but one whose out-features are not a multiple of 16 (the
    # tiny untied head over a 300-token vocabulary).
    assert layers and all(m.kernel == ("cpu" if m.out_features % 16 == 0 else "dequantize")
                          for m in layers)
    assert not engine.quantized  # int4 activations stay float: its requests batch
    result = engine.infill("def add(a, b):\n    return ", "\n", max_tokens=8, seed=0)
    assert result.steps >= 1 and result.finish_reason


def test_int4_is_refused_where_it_cannot_run(dream_ckpt: Path) -> None:
    with pytest.raises(ValueError, match="int4 layers do not compile"):
        Engine.load(str(dream_ckpt), device="cpu", dtype="int4", compile=True)
    with pytest.raises(ValueError, match="dtype 'int3' is not one of auto"):
        Engine.load(str(dream_ckpt), device="cpu", dtype="int3")
