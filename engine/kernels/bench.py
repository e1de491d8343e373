"""Micro-benchmark: torch fallback vs fused triton kernel (sampler statistics, RMSNorm).

    python -m engine.kernels.bench [--device cuda] [--dtype bfloat16] [--repeat 20]

Times `torch_stats` and, where triton runs on the device, `triton_stats` on hole logits of
[n=32, V=8192] (a small model, a typical hole) and [n=256, V=262144] (DiffusionGemma's
canvas and vocabulary), and checks that they agree; then RMSNorm on [256, 4096]. On a CPU
only the fallbacks are timed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from torch import Tensor

from engine.bounds import (
    KERNEL_POSITIONS_RANGE,
    KERNEL_VOCAB_RANGE,
    RUNS_RANGE,
    bounded_argument,
    bounds_of,
)
from engine.kernels._dispatch import triton_available
from engine.kernels.norms import torch_rms_norm, triton_rms_norm
from engine.kernels.sampling import torch_stats, triton_stats, use_triton
from engine.types import SamplerSettings

SHAPES = ((32, 8192), (256, 262144))


def time_call(fn: Callable[[], object], device: torch.device, repeat: int) -> float:
    """Median seconds of `fn()` over `repeat` runs, after one warm-up (compilation)."""
    fn()
    times = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def bench(
    shapes: tuple[tuple[int, int], ...] = SHAPES,
    device: str | None = None,
    dtype: torch.dtype = torch.float32,
    temperature: float = 0.0,
    repeat: int = 20,
) -> list[dict[str, float | int | str]]:
    """One row per shape: median milliseconds of each path (fused: NaN where it cannot run)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    rows: list[dict[str, float | int | str]] = []
    for n, V in shapes:
        g = torch.Generator(device=dev).manual_seed(0)
        logits: Tensor = (torch.randn(n, V, generator=g, device=dev) * 4).to(dtype)
        fallback = time_call(lambda x=logits: torch_stats(x, temperature), dev, repeat)
        fused = float("nan")
        # Under TRITON_INTERPRET the kernel runs in numpy: correct, but no timing to report.
        if dev.type == "cuda" and triton_available() and use_triton(logits):
            fused = time_call(lambda x=logits: triton_stats(x, temperature), dev, repeat)
            a, b = triton_stats(logits, temperature), torch_stats(logits, temperature)
            if not torch.equal(a[0], b[0]):
                raise AssertionError(f"[{n}, {V}]: kernel and fallback disagree on tokens")
        rows.append({"n": n, "V": V, "device": str(dev), "dtype": str(dtype).split(".")[-1],
                     "torch_ms": fallback * 1e3, "fused_ms": fused * 1e3})
    return rows


def bench_norm(
    rows: int = 256, D: int = 4096, device: str | None = None,
    dtype: torch.dtype = torch.bfloat16, repeat: int = 20,
) -> dict[str, float | int | str]:
    """RMSNorm of [rows, D]: median milliseconds of each path (fused: NaN off CUDA)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    x = torch.randn(rows, D, device=dev).to(dtype)
    w = torch.rand(D, device=dev).to(dtype) + 0.5
    fallback = time_call(lambda: torch_rms_norm(x, w, 1e-6), dev, repeat)
    fused = float("nan")
    if dev.type == "cuda" and triton_available():
        fused = time_call(lambda: triton_rms_norm(x, w, 1e-6), dev, repeat)
    return {"n": rows, "V": D, "device": str(dev), "dtype": str(dtype).split(".")[-1],
            "torch_ms": fallback * 1e3, "fused_ms": fused * 1e3}


def parse_shape(text: str) -> tuple[int, int]:
    """An argparse `type` for a hole shape NxV, each number held to its range."""
    n, _, V = text.lower().partition("x")
    if not (n.isdecimal() and V.isdecimal()):
        raise argparse.ArgumentTypeError(f"expected NxV, got {text!r}")
    problem = (KERNEL_POSITIONS_RANGE.problem("N", int(n))
               or KERNEL_VOCAB_RANGE.problem("V", int(V)))
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return int(n), int(V)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda if present)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    temperature = bounds_of(SamplerSettings)["temperature"]
    p.add_argument("--temperature", type=bounded_argument(temperature), default=0.0)
    p.add_argument("--repeat", type=bounded_argument(RUNS_RANGE), default=20)
    p.add_argument("--shape", type=parse_shape, action="append", default=None, metavar="NxV",
                   help="a hole shape, e.g. 32x8192 (repeatable; default: the two above)")
    args = p.parse_args(argv)
    shapes = tuple(args.shape) if args.shape else SHAPES
    rows = bench(shapes, args.device, getattr(torch, args.dtype), args.temperature, args.repeat)
    norm = bench_norm(device=args.device, repeat=args.repeat)
    print(f"{'n':>5} {'V':>8} {'device':>7} {'dtype':>9} {'torch ms':>10} {'fused ms':>10} "
          f"{'speedup':>8}")
    for r in rows:
        speedup = r["torch_ms"] / r["fused_ms"] if r["fused_ms"] == r["fused_ms"] else float("nan")
        print(f"{r['n']:>5} {r['V']:>8} {r['device']:>7} {r['dtype']:>9} "
              f"{r['torch_ms']:>10.3f} {r['fused_ms']:>10.3f} {speedup:>8.2f}")
    speedup = norm["torch_ms"] / norm["fused_ms"] if norm["fused_ms"] == norm["fused_ms"] else 0
    print(f"RMSNorm [{norm['n']}, {norm['V']}] {norm['dtype']} on {norm['device']}: torch "
          f"{norm['torch_ms']:.3f} ms, fused {norm['fused_ms']:.3f} ms ({speedup:.2f}x)")


if __name__ == "__main__":
    main()
