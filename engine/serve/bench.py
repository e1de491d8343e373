"""`dg-engine bench`: the resident engine's scheduler under 1, 4 and 8 concurrent clients.

Each client is a thread that sends its next request as soon as the last one finished (closed
loop), like editors whose users keep typing. Every concurrency level runs twice on the same
loaded model: batched (all live requests share each forward pass) and one at a time
(max_batch=1: requests queue and run alone). Requests are single-line holes cut at line ends
of the project's own source files, so every run sees the same work.

The scheduler is driven in this process, without the socket: what is measured is scheduling
and batching; the protocol adds one small JSON message per step.

`--section dtypes` instead loads the model once per dtype (`--dtypes`, each in its own
process) and measures a full pass, a completion, load time and memory side by side
(engine/serve/bench_dtypes.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from engine.bounds import (
    CASES_RANGE,
    CLIENTS_RANGE,
    HOLE_SIZE_RANGE,
    bounded_argument,
    bounded_list_argument,
)
from engine.data.stats import percentile
from engine.options import add_model_options
from engine.serve.bench_dtypes import add_arguments as add_dtype_arguments
from engine.serve.bench_dtypes import dtype_rows
from engine.serve.bench_dtypes import print_rows as print_dtype_rows
from engine.types import InfillRequest, SamplerSettings

SOURCES = Path(__file__).resolve().parent


def cursor_cases(count: int, min_prefix: int = 200) -> list[tuple[str, str]]:
    """(prefix, suffix) pairs: the cursor after a line's indentation, the line itself removed."""
    return [(prefix, suffix) for prefix, suffix, _ in cursor_cases_with_lines(count, min_prefix)]


def cursor_cases_with_lines(count: int, min_prefix: int = 200) -> list[tuple[str, str, str]]:
    """As `cursor_cases`, with the removed line's text (what the user goes on to type)."""
    cases = []
    for path in sorted(SOURCES.glob("*.py")):
        lines = path.read_text(encoding="utf-8").split("\n")
        for i, line in enumerate(lines):
            stripped = line.strip()
            if len(stripped) < 20 or stripped.startswith(("#", '"""')):
                continue
            indent = line[: len(line) - len(line.lstrip())]
            prefix = "\n".join(lines[:i]) + "\n" + indent
            if len(prefix) < min_prefix:
                continue
            cases.append((prefix, "\n" + "\n".join(lines[i + 1 :]), stripped))
    step = max(1, len(cases) // count)
    return cases[::step][:count]


def run_level(engine: Any, cases: list[tuple[str, str]], clients: int, max_batch: int,
              max_tokens: int, settings: SamplerSettings) -> dict[str, Any]:
    from engine.decode.sequence import Sequence
    from engine.serve.scheduler import Scheduler

    scheduler = Scheduler(engine, max_batch=max_batch, max_queue=max(64, clients))
    scheduler.start()
    latencies: list[float] = []
    tokens = 0
    lock = threading.Lock()
    work = list(cases)

    def client() -> None:
        nonlocal tokens
        while True:
            with lock:
                if not work:
                    return
                prefix, suffix = work.pop()
            done = threading.Event()
            final = {}

            def on_draft(draft, final=final, done=done) -> None:
                if draft.done:
                    final["draft"] = draft
                    done.set()

            start = time.perf_counter()
            job = Sequence(InfillRequest(prefix, suffix, max_tokens, settings),
                           on_draft=on_draft, on_error=lambda code, msg, done=done: done.set())
            while not scheduler.submit(job):
                time.sleep(0.001)
            done.wait()
            elapsed = time.perf_counter() - start
            with lock:
                latencies.append(elapsed)
                if "draft" in final:
                    tokens += len(engine.completion_ids(final["draft"]))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    stats = scheduler.stats()
    scheduler.stop()
    return {"clients": clients, "mode": "batched" if max_batch > 1 else "one-at-a-time",
            "requests": len(latencies), "tokens": tokens, "seconds": round(wall, 3),
            "tokensPerSecond": round(tokens / wall, 1),
            "p50Ms": round(1000 * statistics.median(latencies), 1),
            "p95Ms": round(1000 * percentile(latencies, 95), 1),
            "forwardPasses": stats["forwardPasses"],
            "rowsPerPass": round(rows_per_pass(stats), 2)}


def rows_per_pass(stats: dict[str, Any]) -> float:
    """Requests advanced per forward pass (1.0: no batching)."""
    alone = stats["forwardPasses"] - stats["batchedPasses"]
    return (stats["batchedRows"] + alone) / max(1, stats["forwardPasses"])


def cache_levels(engine: Any, count: int, max_tokens: int) -> list[dict[str, Any]]:
    """Context cache: full pass every step (R=1) vs refresh every R steps (of a window around
    the hole, and at R=4 also of the whole canvas) vs, at R=4, keys reused from the previous
    keystroke's request. Agreement = same completion as R=1."""
    from engine.decode.kv_cache import PrefixCache
    from engine.types import SamplerSettings

    window = SamplerSettings().refresh_window

    cases = cursor_cases_with_lines(count)
    # The keystroke scenario: the user typed the line's first 3 characters since the last
    # request, which had the same prefix up to the cursor.
    typed = [(p + line[:3], s) for p, s, line in cases]
    plain = [(p, s) for p, s, _ in cases]
    rows = []
    levels = (("R=1 (exact)", 1, None, False), ("R=2", 2, window, False),
              ("R=4, whole-canvas refresh", 4, None, False), ("R=4", 4, window, False),
              ("R=8", 8, window, False), ("R=4 + keystroke reuse", 4, window, True))
    for label, refresh, refresh_window, reuse in levels:
        latencies, same, steps = [], 0, 0
        kwargs = dict(cache_refresh=refresh, refresh_window=refresh_window)
        for (p, s), (tp, ts) in zip(plain, typed, strict=True):
            engine.decoder.prefix_cache = PrefixCache(max_entries=32 if reuse else 0)
            engine.infill(p, s, max_tokens, **kwargs)  # the previous keystroke
            start = time.perf_counter()
            res = engine.infill(tp, ts, max_tokens, **kwargs)
            latencies.append(time.perf_counter() - start)
            exact = engine.infill(tp, ts, max_tokens).text if refresh > 1 else res.text
            same += res.text == exact
            steps += res.steps
        rows.append({"cache": label, "cases": len(plain),
                     "p50Ms": round(1000 * statistics.median(latencies), 1),
                     "meanMs": round(1000 * statistics.fmean(latencies), 1),
                     "stepsPerCompletion": round(steps / len(plain), 2),
                     "sameAsExact": round(same / len(plain), 3)})
    engine.decoder.prefix_cache = PrefixCache()
    return rows


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="throughput and latency at 1/4/8 clients, "
                                   "batched vs one at a time")
    add_model_options(parser, dtype=False)
    parser.add_argument("--requests", type=bounded_argument(CASES_RANGE), default=16,
                        help="requests per level")
    parser.add_argument("--max-tokens", type=bounded_argument(HOLE_SIZE_RANGE), default=24,
                        help="hole size")
    parser.add_argument("--clients", type=bounded_list_argument(CLIENTS_RANGE),
                        default="1,4,8", help="concurrency levels (default: %(default)s)")
    parser.add_argument("--section", choices=("all", "concurrency", "cache", "dtypes"),
                        default="all", help="all: concurrency and cache; dtypes (only when "
                        "asked: a load per dtype): the model at several dtypes side by side")
    parser.add_argument("--json", action="store_true")
    add_dtype_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from engine import Engine

    if args.section == "dtypes":
        return run_dtypes(args)
    engine = Engine.load(args.model, device=args.device)
    cases = cursor_cases(args.requests)
    settings = SamplerSettings()
    engine.infill(*cases[0], args.max_tokens)  # warm up: first-call allocations
    rows: list[dict[str, Any]] = []
    cache_rows: list[dict[str, Any]] = []
    if args.section in ("all", "concurrency"):
        for clients in args.clients:
            for max_batch in (8, 1):
                rows.append(run_level(engine, cases, clients, max_batch, args.max_tokens,
                                      settings))
                if not args.json:
                    _print_row(rows[-1], header=len(rows) == 1)
    if args.section in ("all", "cache"):
        cache_rows = cache_levels(engine, args.requests, args.max_tokens)
        if not args.json:
            print(f"\n{'context cache':<24} {'cases':>5} {'p50 ms':>8} {'mean ms':>8} "
                  f"{'steps':>6} {'same as R=1':>11}")
            for r in cache_rows:
                print(f"{r['cache']:<24} {r['cases']:>5} {r['p50Ms']:>8} {r['meanMs']:>8} "
                      f"{r['stepsPerCompletion']:>6} {r['sameAsExact']:>11}")
    if args.json:
        print(json.dumps({"model": args.model or "bundled", "device": str(engine.device),
                          "concurrency": rows, "cache": cache_rows}))
    return 0


def run_dtypes(args: argparse.Namespace) -> int:
    rows = dtype_rows(args.model, args.dtypes.split(","), cursor_cases(args.requests + 1),
                      args.device, args.passes, args.max_tokens, args.threads)
    if args.json:
        print(json.dumps({"model": args.model or "bundled", "dtypes": rows}))
    else:
        print_dtype_rows(rows)
    return 1 if any("error" in row for row in rows) else 0


def _print_row(row: dict[str, Any], header: bool) -> None:
    if header:
        print(f"{'clients':>7} {'mode':<14} {'req':>4} {'tok/s':>8} {'p50 ms':>8} "
              f"{'p95 ms':>8} {'passes':>7} {'rows/pass':>9}")
    print(f"{row['clients']:>7} {row['mode']:<14} {row['requests']:>4} "
          f"{row['tokensPerSecond']:>8} {row['p50Ms']:>8} {row['p95Ms']:>8} "
          f"{row['forwardPasses']:>7} {row['rowsPerPass']:>9}", flush=True)
