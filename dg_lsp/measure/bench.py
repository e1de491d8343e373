"""`dg-lsp bench`: the speeds users feel, side by side in one run (table, or `--json`).

Sections (all but batch by default, `--section` to pick):

- lsp: `textDocument/inlineCompletion` through a real LSP client against `dg-lsp serve` as an
  editor starts it (the resident engine, default settings) and, on the same requests, with the
  model in the server (`--engine inproc`): latency of cold, warm and typed-through requests, and
  what was shown scored per cursor class (dg_lsp/measure/bench_lsp.py says how); with `--load`,
  again
  while other processes keep cores busy (dg_lsp/measure/bench_load.py), idle and loaded side by
  side;
- gate: the confidence gate's curve on the same cursors: the share shown against the exact
  match and edit similarity of what is shown, per cursor class and pooled, at a range of
  `minConfidence` thresholds on the calibrated probability, and the one the rule of
  docs/usage.md picks; beside it the pooled curve of the least confident token alone
  (dg_lsp/measure/bench_gate.py);
- samplers: per-completion latency, forward passes, tokens per forward and edit similarity for
  top-k k=1 (one token per step), confidence threshold and entropy bound, and the
  autoregressive baseline (KV cache) on single-line holes;
- cache: the context cache, from `dg-engine bench` (full pass every step vs refresh every R
  steps vs reuse across keystrokes);
- concurrency: 1 / 4 / 8 clients through the resident engine's scheduler, from
  `dg-engine bench`;
- memory: peak RSS of the `dg-lsp` servers (with the engine each used) and of this process
  (which holds the engine the other sections use);
- actions: `textDocument/codeAction` at a cursor in generated files of 2,000 and 10,000 stub
  functions and in a broken one, and `dg-lsp fill --check` on the largest, as a CI job runs it
  (dg_lsp/measure/bench_actions.py);
- repository: the workspace index's build time and memory on this repository and a generated
  5,000-file one, and one completion's reading of it, p50 / p95
  (dg_lsp/measure/bench_repository.py);
- batch (only when asked: it deploys a team's engine on a local Ray cluster, twice): batch
  mode's files per minute and tokens per second through the resident engine and through a
  team's engine of one and of two replicas, over `--limit` files (dg_lsp/measure/bench_batch.py);
- real-shape (only when asked: it writes a published shape with random weights and builds
  llama.cpp once, then runs minutes a cursor): a published checkpoint's shape through the
  language server beside llama.cpp's `llama-server` serving its autoregressive twin, over
  `--limit` cursors (default 8 for this section; dg_lsp/measure/bench_real_shape.py).

Cases come from `--cases-from`, by default held-out third-party code no model here trained on
(dg_lsp/measure/eval/heldout.py: a pinned PyPI package, fetched once).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from engine.bounds import CASES_RANGE, FUNCTIONS_RANGE, SEED_RANGE, bounded_argument
from engine.models import BUNDLED_MODELS
from engine.options import add_model_options

SECTIONS = ("lsp", "gate", "samplers", "cache", "concurrency", "memory", "actions",
            "repository", "batch", "real-shape")
# batch starts Ray clusters, real-shape runs a real shape on the CPU: only when asked
DEFAULT_SECTIONS = SECTIONS[:-2]
AR_BASELINE = BUNDLED_MODELS / "ar-baseline"
SINGLE_LINE_TOKENS = 24  # the server's rest-of-line hole


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="latency, throughput, quality and memory")
    parser.add_argument("--section", action="append", choices=SECTIONS,
                        help="sections to run (repeatable; default: all but batch)")
    parser.add_argument("--cases-from", type=Path, default=None,
                        help="folder of Python sources to cut cases from (default: the "
                        "held-out third-party package, see dg_lsp/measure/eval/heldout.py)")
    parser.add_argument("--limit", type=bounded_argument(CASES_RANGE), default=None,
                        help="cases per section (default 80; real-shape: 8; batch: files, "
                        "three functions each)")
    parser.add_argument("--functions", type=bounded_argument(FUNCTIONS_RANGE), default=2,
                        help="whole functions typed keystroke by keystroke (lsp section)")
    add_model_options(parser, dtype=False)
    parser.add_argument("--ar-model", default=str(AR_BASELINE),
                        help="autoregressive baseline to compare ('' to skip)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the engine of the samplers, cache and concurrency "
                        "sections (a GPU switch; see engine.decode.families.compile_model)")
    parser.add_argument("--seed", type=bounded_argument(SEED_RANGE), default=0)
    parser.add_argument("--settings", type=json.loads, default=None, metavar="JSON",
                        help="lsp section: the server's settings as an editor sends them, "
                        "e.g. '{\"sampler\": {\"threshold\": 0.5}}' (default: the defaults)")
    parser.add_argument("--load", default=None, metavar="busy:N|compile:N",
                        help="lsp section: measure again with a background load beside it (N "
                        "busy processes, or N loops compiling a C file), idle and loaded side "
                        "by side")
    parser.add_argument("--json", action="store_true")
    from dg_lsp.measure.bench_real_shape import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dg_lsp.measure.bench_load import describe, parse_load
    from dg_lsp.measure.bench_lsp import cut_functions, peak_rss_mb
    from dg_lsp.measure.eval.heldout import PACKAGE, VERSION, heldout_sources
    from engine.data.cases import cut_cases, cut_cursor_cases
    from engine.models.checkpoint import read_checkpoint, resolve
    from engine.models.config import CheckpointError

    sections = args.section or list(DEFAULT_SECTIONS)
    args.limit = args.limit or (8 if sections == ["real-shape"] else 80)  # a real shape: slow
    try:
        # Refused here, not by every server the sections start: those would answer each
        # request with nothing, and the tables would time a model that never ran.
        read_checkpoint(resolve(args.model))
        if "real-shape" in sections and (why := _real_shape_problem()) is not None:
            raise OSError(why)
        load = parse_load(args.load) if args.load else None
        folder = args.cases_from or heldout_sources()
        cases = cut_cases(folder, args.limit, seed=args.seed, kinds=("single-line",))
    except (OSError, ValueError, CheckpointError) as exc:
        print(f"dg-lsp bench: {exc}", file=sys.stderr)
        return 2
    source = str(folder) if args.cases_from else f"{PACKAGE} {VERSION} (held out)"
    report: dict[str, Any] = {"model": args.model or "bundled", "device": args.device,
                              "cases": len(cases), "source": source}
    if "lsp" in sections:
        cursors = cut_cursor_cases(folder, args.limit, seed=args.seed)
        functions = cut_functions(folder, args.functions)
        report["lsp"] = measure_loads(cursors, functions, args, load)
        report["lsp"]["cursorCases"] = len(cursors)
        report["lsp"]["typedFunctions"] = [f.id for f in functions]
        _show(args, f"end to end over LSP: request latency ({source})", report["lsp"]["latency"])
        _show(args, "what the cold request showed, by cursor class",
              report["lsp"]["cursorClasses"])
        if load:
            _show(args, f"idle and with {describe(*load)} beside it",
                  report["lsp"]["sideBySide"])
    if "gate" in sections:
        from dg_lsp.measure.bench_gate import gate_section

        cursors = cut_cursor_cases(folder, args.limit, seed=args.seed)
        report["gate"] = gate_section(cursors, args.model, args.device)
        _show(args, "confidence gate, all cursors (minConfidence on the calibrated "
              "probability: shown rate, quality of what is shown); the rule picks "
              f"{report['gate']['chosen']}", report["gate"]["pooled"])
        _show(args, "the least confident token alone (Score.lowest) on the same cursors; the "
              f"rule picks {report['gate']['lowestChosen']}", report["gate"]["lowest"])
        for kind, rows in report["gate"]["perClass"].items():
            _show(args, f"confidence gate, cursor class '{kind}'", rows)
        _show(args, "what the score and the calibrator add to a completion (score: 96-token "
              "hole, 24 passes)", [{"scoreCostMs": report["gate"]["scoreCostMs"],
                                    "calibratorCostMs": report["gate"]["calibratorCostMs"]}])
    engine = None
    if {"samplers", "cache", "concurrency"} & set(sections):
        from engine import Engine

        engine = Engine.load(args.model, device=args.device, compile=args.compile)
    if "samplers" in sections:
        report["samplers"] = sampler_section(engine, cases, args)
        _show(args, "samplers (single-line holes)", report["samplers"])
    if "cache" in sections:
        from engine.serve.bench import cache_levels

        report["cache"] = cache_levels(engine, args.limit, SINGLE_LINE_TOKENS)
        _show(args, "context cache", report["cache"])
    if "concurrency" in sections:
        report["concurrency"] = concurrency_section(engine, cases)
        _show(args, "concurrency (resident engine's scheduler)", report["concurrency"])
    if "memory" in sections:
        report["memory"] = {"benchPeakRssMb": peak_rss_mb(os.getpid()),
                            **report.get("lsp", {}).get("memory", {})}
        _show(args, "memory", [report["memory"]])
    if "actions" in sections:
        from dg_lsp.measure.bench_actions import actions_section

        report["actions"] = actions_section()
        _show(args, "code actions at a cursor over LSP (ms; the first request parses the file)",
              report["actions"]["codeActions"])
        _show(args, "dg-lsp fill --check, the whole command (s)", report["actions"]["fillCheck"])
    if "repository" in sections:
        from dg_lsp.measure.bench_repository import repository_section

        report["repository"] = repository_section()
        _show(args, "the workspace index: build time and memory held",
              report["repository"]["build"])
        _show(args, "one completion's reading of the index (ms)",
              report["repository"]["retrieval"])
    if "batch" in sections:
        from dg_lsp.measure.bench_batch import FUNCTIONS_PER_FILE, batch_section

        report["batch"] = batch_section(folder, args.limit, args.model, args.device, args.seed)
        _show(args, "batch mode: `dg-lsp batch --action docstrings --check`, the same files "
              f"(up to {args.limit}, {FUNCTIONS_PER_FILE} functions each, from {source})",
              report["batch"])
    if "real-shape" in sections:
        report["realShape"] = _real_shape(args, cut_cursor_cases(folder, args.limit,
                                                                 seed=args.seed))
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


# -- sections ---------------------------------------------------------------------------------


def _real_shape_problem() -> str | None:
    from dg_lsp.measure.bench_real_shape import missing_writers

    return missing_writers()


def _real_shape(args: argparse.Namespace, cursors: list) -> dict[str, Any]:
    from dg_lsp.measure.bench_real_shape import real_shape_section, table_rows

    section = real_shape_section(cursors, args)
    _show(args, f"{args.shape} with random weights, a {section['line_tokens']}-token line "
          f"through the language server beside llama.cpp ({len(cursors)} cursors, "
          f"{section['threads']['engine']} threads, load {section['machine']['load_average']}"
          f"); dg warm p50 / llama.cpp {section['ratio_quant']} warm p50: "
          f"{section['ratio_p50']}", table_rows(section))
    return section


def sampler_section(engine: Any, cases: list, args: argparse.Namespace) -> list[dict]:
    from dg_lsp.measure.eval.runner import Predictor, evaluate, load_predictor
    from dg_lsp.settings import Settings
    from engine.types import SamplerSettings

    refresh = Settings().sampler.cache_refresh  # as editors get them
    configs = [("top-k k=1", SamplerSettings(sampler="topk", k=1, cache_refresh=refresh)),
               ("threshold 0.9", SamplerSettings(sampler="threshold", threshold=0.9,
                                                 cache_refresh=refresh)),
               ("threshold 0.5", SamplerSettings(sampler="threshold", threshold=0.5,
                                                 cache_refresh=refresh)),
               ("entropy 0.1", SamplerSettings(sampler="entropy", gamma=0.1,
                                               cache_refresh=refresh))]
    holes = {"single-line": SINGLE_LINE_TOKENS}
    predictors = [Predictor.engine(name, engine, s, holes) for name, s in configs]
    if args.ar_model:
        predictors.append(load_predictor(args.ar_model, SamplerSettings(), holes, args.device))
        predictors[-1].name = "autoregressive (KV cache)"
    rows = []
    for summary in evaluate(predictors, cases, ["fixed"]):
        rows.append({"sampler": summary.model, "cases": summary.cases,
                     "p50Ms": round(summary.latency_ms_p50, 1),
                     "p95Ms": round(summary.latency_ms_p95, 1),
                     "passesPerCompletion": round(summary.forward_passes_per_case, 2),
                     "tokensPerForward": round(summary.tokens_per_forward or 0.0, 2),
                     "editSimilarity": round(summary.edit_similarity, 3),
                     "exactMatch": round(summary.exact_match, 3)})
    return rows


def concurrency_section(engine: Any, cases: list) -> list[dict]:
    from engine.serve.bench import run_level
    from engine.types import SamplerSettings

    pairs = [(c.prefix, c.suffix) for c in cases]
    return [run_level(engine, pairs, clients, 8, SINGLE_LINE_TOKENS, SamplerSettings())
            for clients in (1, 4, 8)]


# -- helpers ----------------------------------------------------------------------------------


def measure_loads(cursors: list, functions: list, args: argparse.Namespace,
                  load: tuple[str, int] | None) -> dict[str, Any]:
    """The lsp section on the idle machine and, given a `load`, again beside it: every row
    labelled with its load, and the two side by side."""
    from dg_lsp.measure.bench_load import BackgroundLoad, describe
    from dg_lsp.measure.bench_lsp import measure

    conditions = [("idle", None)] + ([(describe(*load), load)] if load else [])
    report: dict[str, Any] = {"latency": [], "cursorClasses": []}
    for label, spec in conditions:
        with BackgroundLoad(*spec) if spec else contextlib.nullcontext():
            measured = asyncio.run(measure(cursors, functions, args.model, args.device,
                                           args.settings))
        for key in ("latency", "cursorClasses"):
            report[key] += [{"load": label, **row} for row in measured[key]]
        report.setdefault("memory", measured["memory"])
    if load:
        report["sideBySide"] = side_by_side(report["latency"], conditions[1][0])
    return report


def side_by_side(latency: list[dict[str, Any]], loaded: str) -> list[dict[str, Any]]:
    """Per path and request class: idle and loaded p50 / p95, how many times slower the
    loaded p50 is, and the resident engine's loaded p50 against the in-process one's."""
    rows = {(r["load"], r["path"], r["requests"]): r for r in latency}
    resident, inproc = list(dict.fromkeys(r["path"] for r in latency))[:2]
    out = []
    for (load, path, requests), idle in rows.items():
        if load != "idle" or (loaded, path, requests) not in rows:
            continue
        busy = rows[loaded, path, requests]
        other = rows.get((loaded, inproc, requests))
        out.append({"path": path, "requests": requests, "idleP50Ms": idle["p50Ms"],
                    "idleP95Ms": idle["p95Ms"], "loadedP50Ms": busy["p50Ms"],
                    "loadedP95Ms": busy["p95Ms"], "p50LoadedOverIdle": _ratio(busy, idle),
                    "p50ResidentOverInproc": _ratio(busy, other) if path == resident else None})
    return out


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> float | None:
    if not a or not b or not a["p50Ms"] or not b["p50Ms"]:
        return None
    return round(a["p50Ms"] / b["p50Ms"], 2)


def _show(args: argparse.Namespace, title: str, rows: list[dict]) -> None:
    if args.json or not rows:
        return
    keys = list(rows[0])
    widths = [max(len(k), *(len(str(r.get(k))) for r in rows)) for k in keys]
    print(f"\n{title}")
    print("  ".join(k.ljust(w) for k, w in zip(keys, widths, strict=True)))
    for r in rows:
        print("  ".join(str(r.get(k)).ljust(w) for k, w in zip(keys, widths, strict=True)),
              flush=True)
