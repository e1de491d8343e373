"""`dg-engine bench --section dtypes`: one checkpoint at several dtypes, side by side.

Each dtype is loaded in a fresh process, so its load time and peak memory are its own and
one model's memory never adds to the next's. Per dtype:

- load: seconds of `Engine.load`, and the process's resident memory before it;
- a full pass: `forward_logits` over `PASS_POSITIONS` positions of random token ids, the
  mean of `passes` after one unmeasured (the masked and AR families; the block family's
  passes run inside its own loop);
- a completion: a `max_tokens` hole at each of the cases `dg-engine bench` cuts from the
  project's sources, default sampler settings, the median after one unmeasured, with its
  forward passes (a random model commits about one token a pass, a trained one more);
- memory: the weights as held (`held_bytes`) and the
  process's peak resident set (VmHWM) at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

from engine.bounds import ENGINE_THREADS_RANGE, RUNS_RANGE, bounded_argument

PASS_POSITIONS = 256
MB = 1 << 20


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM where Linux has it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def held_bytes(model: Any) -> int:
    """Bytes of the model's state: parameters, buffers and int8's packed weights (a tuple in
    the state dict), a tensor shared by several names counted once."""
    import torch

    tensors: dict[int, int] = {}
    for value in model.state_dict(keep_vars=True).values():
        for t in value if isinstance(value, tuple) else (value,):
            if isinstance(t, torch.Tensor):
                tensors[t.data_ptr()] = t.numel() * t.element_size()
    return sum(tensors.values())


def measure_dtype(model: str | None, dtype: str, device: str, passes: int,
                  cases: list[list[str]], max_tokens: int, threads: int | None
                  ) -> dict[str, Any]:
    """One row, measured in this process (`dtype_rows` runs each in its own); `cases`:
    (prefix, suffix) pairs, the first one unmeasured."""
    import torch

    from engine import Engine
    from engine.types import SamplerSettings

    before = rss_mb()
    start = time.perf_counter()
    engine = Engine.load(model, device=device, dtype=dtype, threads=threads)
    load_s = time.perf_counter() - start
    row: dict[str, Any] = {"dtype": dtype, "loadS": round(load_s, 2),
                           "weightsMb": round(held_bytes(engine.model) / MB, 1)}
    if engine.config.family != "block":
        ids = torch.randint(0, engine.config.vocab_size, (1, PASS_POSITIONS),
                            generator=torch.Generator().manual_seed(0))
        seconds = []
        for i in range(passes + 1):
            t0 = time.perf_counter()
            engine.forward_logits(ids)
            if i:  # the first pass allocates: unmeasured
                seconds.append(time.perf_counter() - t0)
        row["passMs"] = round(1000 * statistics.fmean(seconds), 1)
    else:
        row["passMs"] = None
    settings = SamplerSettings()
    latencies, steps = [], []
    for i, (prefix, suffix) in enumerate(cases):
        t0 = time.perf_counter()
        result = engine.infill(prefix, suffix, max_tokens, settings=settings)
        if i:
            latencies.append(time.perf_counter() - t0)
            steps.append(result.steps)
    row["completionP50Ms"] = round(1000 * statistics.median(latencies), 1)
    row["passesPerCompletion"] = round(statistics.fmean(steps), 1)
    row["baseRssMb"] = round(before, 1)
    row["peakRssMb"] = round(peak_rss_mb(), 1)
    return row


def dtype_rows(model: str | None, dtypes: list[str], cases: list[tuple[str, str]],
               device: str = "cpu", passes: int = 3, max_tokens: int = 16,
               threads: int | None = None) -> list[dict[str, Any]]:
    """A row per dtype, each measured in a fresh process on `cases` ((prefix, suffix) pairs,
    the first one a warm-up); a dtype that fails to load or run gets a row with its error
    instead of numbers."""
    rows = []
    for dtype in dtypes:
        spec = json.dumps([model, dtype, device, passes, cases, max_tokens, threads])
        done = subprocess.run([sys.executable, "-m", "engine.serve.bench_dtypes"], input=spec,
                              capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        if done.returncode or not lines:
            rows.append({"dtype": dtype, "error": (done.stderr.strip().splitlines()
                                                   or [f"exit status {done.returncode}"])[-1]})
        else:
            rows.append(json.loads(lines[-1]))
    return rows


def print_rows(rows: list[dict[str, Any]]) -> None:
    keys = ("dtype", "loadS", "weightsMb", "passMs", "completionP50Ms", "passesPerCompletion",
            "baseRssMb", "peakRssMb")
    print(f"\n{'dtype':<8} {'load s':>7} {'weights MB':>10} {'pass ms':>8} {'compl. ms':>9} "
          f"{'passes':>6} {'RSS before MB':>13} {'peak RSS MB':>11}")
    for r in rows:
        if "error" in r:
            print(f"{r['dtype']:<8} error: {r['error']}")
            continue
        print(f"{r[keys[0]]:<8} {r[keys[1]]:>7} {r[keys[2]]:>10} {str(r[keys[3]]):>8} "
              f"{r[keys[4]]:>9} {r[keys[5]]:>6} {r[keys[6]]:>13} {r[keys[7]]:>11}", flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dtypes", default="float32,int8,int4",
                        help="dtypes section: the dtypes to compare (default: %(default)s)")
    parser.add_argument("--passes", type=bounded_argument(RUNS_RANGE), default=3,
                        help=f"dtypes section: full {PASS_POSITIONS}-position passes per dtype")
    parser.add_argument("--threads", type=bounded_argument(ENGINE_THREADS_RANGE), default=None,
                        help="dtypes section: CPU threads (default: the engine's choice)")


if __name__ == "__main__":
    print(json.dumps(measure_dtype(*json.loads(sys.stdin.read()))))
