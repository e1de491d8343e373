"""Real model shapes on this machine: load, memory and logits against transformers.

For each model of tests/real_shapes.PUBLISHED (the published config.json, cut in layers, and
in experts for the MoE, as tests/real_shapes.CPU_CUT says) and each dtype: write a checkpoint
of random bfloat16 weights, `Engine.load` it on the CPU, and print a table row:

    model, dtype, layers kept, weights GB, load s, peak RSS GB during load (and its ratio to
    the weights' bytes), max |logit diff| against transformers on the same weights, the
    tolerance for that dtype, argmax agreement.

Every load and every reference runs in a fresh subprocess: peak RSS (ru_maxrss) is then the
load's own, and one model's memory never adds to the next's. The engine's logits are computed
and its model freed before the reference is built, so a worker holds one model at a time.

    python scripts/experiments/real_shapes.py             # all models, float32 and bfloat16
    python scripts/experiments/real_shapes.py --models llada-8b --dtypes bfloat16
    python scripts/experiments/real_shapes.py --layers 1 --experts 4  # a quick rehearsal

Exit status 1 when a row misses its tolerance or the memory bound.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

RSS_BOUND = 1.2  # peak RSS added by a load, as a multiple of the weights' bytes
GB = 1e9


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> None:
    """Start the peak (VmHWM) over from the current RSS, where Linux allows (since 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass  # the peak then covers the process's whole life: a bound from above


def peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def checkpoint_dir(out: Path, name: str, layers: int, experts: int | None) -> Path:
    return out / f"{name}-L{layers}" if experts is None else out / f"{name}-L{layers}-E{experts}"


def write_worker(name: str, folder: Path, layers: int, experts: int | None) -> dict[str, Any]:
    from tests.support.published_configs import write_real_shape

    if not (folder / "config.json").is_file():
        write_real_shape(folder, name, layers, experts)
    size = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    return {"file_bytes": size}


def run_worker(name: str, folder: Path, dtype_name: str, tokens: int = 64) -> dict[str, Any]:
    """One row: load `folder` in `dtype_name`, compare `tokens` positions' logits (the block
    family: a `tokens`-long prompt and a 256-token canvas cut to `tokens` positions)."""
    import torch

    from engine import Engine
    from tests.support.published_configs import (
        block_logits,
        logit_tolerance,
        masked_logits,
        reference_block,
        reference_masked,
    )

    torch.manual_seed(0)
    dtype = getattr(torch, dtype_name)
    reset_peak_rss()
    before = rss_bytes()
    start = time.perf_counter()
    engine = Engine.load(str(folder), device="cpu", dtype=dtype_name)
    load_s = time.perf_counter() - start
    peak = peak_rss_bytes() - before
    # Each tensor once (tied ones share storage), and no reference kept past this line: the
    # engine's model must be gone before the reference is built.
    weights = sum({t.data_ptr(): t.numel() * t.element_size()
                   for t in [*engine.model.parameters(), *engine.model.buffers()]}.values())
    cfg = engine.config
    gen = torch.Generator().manual_seed(1)
    extra: dict[str, float] = {}
    if cfg.family == "block":
        text = engine.checkpoint.raw_config["text_config"]
        vocab, layers = text["vocab_size"], text["num_hidden_layers"]
        prompt = torch.randint(0, vocab, (1, tokens), generator=gen)
        canvas = torch.randint(0, vocab, (1, min(tokens * 4, 256)), generator=gen)
        ours = block_logits(engine.model, prompt, canvas)
        del engine
        gc.collect()
        ref = block_logits(reference_block(folder, dtype), prompt, canvas)
    else:
        vocab, layers = cfg.vocab_size, cfg.num_layers
        ids = torch.randint(0, vocab, (1, tokens), generator=gen)
        ours = engine.forward_logits(ids).float()
        shift = cfg.shift_logits
        del engine
        gc.collect()
        reference = reference_masked(folder, dtype)
        ref = masked_logits(reference, ids, shift)
        # The attention mask must matter: the same reference run causally is far from ours.
        causal = masked_logits(reference, ids, shift, causal=True)
        extra["causal_diff"] = (ours - causal).abs().max().item()
    diff = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    return {
        "layers": layers, "weights_bytes": weights, "load_s": load_s, "peak_rss_bytes": peak,
        "max_diff": diff, "scale": scale, "tolerance": logit_tolerance(dtype, scale, layers),
        "argmax": (ours.argmax(-1) == ref.argmax(-1)).float().mean().item(), **extra,
    }


def in_subprocess(args: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    from tests.support.published_configs import CPU_CUT, PUBLISHED

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(PUBLISHED), choices=list(PUBLISHED))
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                        choices=["float32", "bfloat16"])
    parser.add_argument("--out", type=Path, default=Path("/tmp/dg-real-shapes"),
                        help="where checkpoints are written (kept for the next run)")
    parser.add_argument("--layers", type=int, help="override the layers kept (rehearsals)")
    parser.add_argument("--experts", type=int, help="override the experts kept (rehearsals)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--write-configs", type=Path, metavar="DIR",
                        help="only write each published config.json to DIR/<model>/ (for "
                             "`dg-engine plan --model DIR/<model>`) and stop")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.write_configs:
        for name in args.models:
            (args.write_configs / name).mkdir(parents=True, exist_ok=True)
            (args.write_configs / name / "config.json").write_text(
                json.dumps(PUBLISHED[name], indent=2))
        return 0

    if args.worker:
        kind, name, folder, *rest = args.worker
        if kind == "write":
            layers, experts = int(rest[0]), (int(rest[1]) if len(rest) > 1 else None)
            print(json.dumps(write_worker(name, Path(folder), layers, experts)))
        else:  # one row per dtype, each load measured on its own
            tokens = int(os.environ.get("REAL_SHAPES_TOKENS", "64"))
            print(json.dumps([run_worker(name, Path(folder), dtype, tokens) for dtype in rest]))
        return 0

    header = (f"{'model':24} {'dtype':9} {'layers':>6} {'weights GB':>10} {'load s':>7} "
              f"{'peak RSS GB':>11} {'x weights':>9} {'max|diff|':>10} {'tolerance':>10} "
              f"{'argmax':>7}")
    print(header)
    rows, ok = [], True
    for name in args.models:
        cut = CPU_CUT[name]
        layers = args.layers or cut["layers"]
        experts = args.experts or cut.get("experts") if "experts" in cut else None
        folder = checkpoint_dir(args.out, name, layers, experts)
        in_subprocess(["--worker", "write", name, str(folder), str(layers)]
                      + ([str(experts)] if experts else []))
        for dtype in args.dtypes:
            row = {"model": name, "dtype": dtype, "experts": experts,
                   **in_subprocess(["--worker", "run", name, str(folder), dtype])[0]}
            ratio = row["peak_rss_bytes"] / row["weights_bytes"]
            row["passed"] = row["max_diff"] <= row["tolerance"] and ratio <= RSS_BOUND
            ok &= row["passed"]
            rows.append(row)
            kept = f"{row['layers']}" + (f"/E{experts}" if experts else "")
            print(f"{name:24} {dtype:9} {kept:>6} {row['weights_bytes'] / GB:10.2f} "
                  f"{row['load_s']:7.1f} {row['peak_rss_bytes'] / GB:11.2f} {ratio:9.2f} "
                  f"{row['max_diff']:10.2e} {row['tolerance']:10.2e} {row['argmax']:7.1%}"
                  + ("" if row["passed"] else "  FAIL"), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
