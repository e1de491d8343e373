"""int4 at real layer shapes: each layer's relative output error against bfloat16.

DiffuCoder-7B's (Qwen2.5-7B's) linear layers and one DiffusionGemma-26B-A4B expert, shapes
from tests/support/published_configs.py, weights drawn N(0, initializer_range²) as the
configs' initializer_range says (0.02 for both; the trained weights' spread is not
published), 64 input rows N(0, 1). The error is ||int4 - bf16|| / ||bf16|| over the outputs
(Frobenius), the bf16 reference computed in float32 from the bf16 weights, the int4 layer on
this CPU's packed op (the bf16 op; engine.models.int4).

    python scripts/experiments/int4_layers.py [--group-size 64] [--rows 64]
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from engine.models.int4 import Int4Linear
from tests.support.published_configs import PUBLISHED


def shapes() -> list[tuple[str, int, int, float]]:
    """(layer, out, in, init std) at real scale."""
    dream = PUBLISHED["dream-coder-7b"]
    h, inter = dream["hidden_size"], dream["intermediate_size"]
    kv = h // dream["num_attention_heads"] * dream["num_key_value_heads"]
    std = dream["initializer_range"]
    text = PUBLISHED["diffusiongemma-26b-a4b"]["text_config"]
    gh, gi = text["hidden_size"], text["moe_intermediate_size"]
    gstd = text["initializer_range"]
    return [
        ("DiffuCoder-7B q_proj / o_proj", h, h, std),
        ("DiffuCoder-7B k_proj / v_proj", kv, h, std),
        ("DiffuCoder-7B gate_proj / up_proj", inter, h, std),
        ("DiffuCoder-7B down_proj", h, inter, std),
        ("DiffusionGemma expert gate_up_proj", 2 * gi, gh, gstd),
        ("DiffusionGemma expert down_proj", gh, gi, gstd),
    ]


def relative_error(out_features: int, in_features: int, std: float, group: int, rows: int
                   ) -> tuple[float, str]:
    gen = torch.Generator().manual_seed(0)
    weight = (torch.randn(out_features, in_features, generator=gen) * std).bfloat16()
    x = torch.randn(rows, in_features, generator=gen).bfloat16()
    layer = Int4Linear.quantized(weight, None, group, torch.float32)
    with torch.no_grad():
        want = F.linear(x.float(), weight.float())
        got = layer(x.float())
    return ((got - want).norm() / want.norm()).item(), layer.kernel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--group-size", type=int, default=64)
    parser.add_argument("--rows", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"| layer | out x in | int4 g{args.group_size} relative error | kernel |")
    print("| --- | ---: | ---: | --- |")
    for name, out_features, in_features, std in shapes():
        error, kernel = relative_error(out_features, in_features, std, args.group_size,
                                       args.rows)
        print(f"| {name} | {out_features} x {in_features} | {error:.4f} | {kernel} |")


if __name__ == "__main__":
    main()
