"""`dg-lsp bench`: the speeds users feel, side by side in one run (table, or `--json`).

Sections (all by default, `--section` to pick):

- lsp: `textDocument/inlineCompletion` through a real stdio LSP client (pygls) against
  `dg-lsp serve --engine inproc`, replaying typing on single-line holes cut from source files
  the model never trained on (no debounce): cold requests (a newly opened document), warm
  ones (the user typed a character the suggestion did not predict; same document) and cache
  hits (the user typed the suggestion's next character);
- samplers: per-completion latency, forward passes, tokens per forward and edit similarity for
  top-k k=1 (one token per step), confidence threshold and entropy bound, and the
  autoregressive baseline (KV cache) on the same cases;
- cache: the context cache, from `dg-engine bench` (full pass every step vs refresh every R
  steps vs reuse across keystrokes);
- concurrency: 1 / 4 / 8 clients through the resident engine's scheduler, from
  `dg-engine bench`;
- memory: peak RSS of the `dg-lsp` server (which holds the model in the lsp section) and of
  this process (which holds the engine the other sections use).

Cases come from `--cases-from` (default: this project's own `engine/` sources, which no
bundled model saw).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from engine import BUNDLED_MODELS
from engine.stats import percentile

SECTIONS = ("lsp", "samplers", "cache", "concurrency", "memory")
AR_BASELINE = BUNDLED_MODELS / "ar-baseline"
ENGINE_SOURCES = BUNDLED_MODELS.parent
SINGLE_LINE_TOKENS = 24  # the server's rest-of-line hole


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="latency, throughput, quality and memory")
    parser.add_argument("--section", action="append", choices=SECTIONS,
                        help="sections to run (repeatable; default: all)")
    parser.add_argument("--cases-from", type=Path, default=ENGINE_SOURCES,
                        help="folder of source files to cut single-line holes from")
    parser.add_argument("--limit", type=int, default=30, help="cases per section")
    parser.add_argument("--model", default=None, help="checkpoint (default: bundled)")
    parser.add_argument("--ar-model", default=str(AR_BASELINE),
                        help="autoregressive baseline to compare ('' to skip)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the engine of the samplers, cache and concurrency "
                        "sections (a GPU switch; see engine.decoders.compile_model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dg_lsp.eval.cases import cut_cases

    sections = args.section or list(SECTIONS)
    cases = cut_cases(args.cases_from, args.limit, seed=args.seed, kinds=("single-line",))
    if not cases:
        print(f"dg-lsp bench: no cases could be cut from {args.cases_from}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {"model": args.model or "bundled", "device": args.device,
                              "cases": len(cases)}
    if "lsp" in sections:
        report["lsp"] = asyncio.run(lsp_section(cases, args.model, args.device))
        _show(args, "end to end over LSP", report["lsp"]["latency"])
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
        report["memory"] = {"benchPeakRssMb": round(_self_peak_rss_mb(), 1),
                            **report.get("lsp", {}).get("memory", {})}
        _show(args, "memory", [report["memory"]])
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


# -- sections ---------------------------------------------------------------------------------


async def lsp_section(cases: list, model: str | None, device: str) -> dict[str, Any]:
    """Replay typing over LSP; latency per request class and the server's peak RSS."""
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--engine", "inproc",
               "--device", device] + (["--model", model] if model else [])
    client = LanguageClient("dg-lsp-bench", "1")
    for method in ("window/logMessage", "window/showMessage", "dg-lsp/engineState"):
        client.feature(method)(lambda *args: None)  # read, not printed
    await client.start_io(*command)
    caps = types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities()))
    await client.initialize_async(types.InitializeParams(capabilities=caps))
    client.initialized(types.InitializedParams())
    timings: dict[str, list[float]] = {"cold": [], "warm": [], "cache hit": []}

    async def ask(uri: str, line: int, character: int) -> tuple[str, float]:
        start = time.perf_counter()
        result = await client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri),
                position=types.Position(line, character),
                context=types.InlineCompletionContext(
                    types.InlineCompletionTriggerKind.Automatic)))
        seconds = time.perf_counter() - start
        items = result.items if result is not None else []
        return (items[0].insert_text if items else ""), seconds

    def type_char(uri: str, version: int, line: int, character: int, ch: str) -> None:
        client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            [types.TextDocumentContentChangePartial(
                range=types.Range(types.Position(line, character),
                                  types.Position(line, character)), text=ch)]))

    await ask_warmup(client, types)
    for i, case in enumerate(cases):
        uri = f"file:///bench/{i}.py"
        client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=case.prefix + case.suffix)))
        line = case.prefix.count("\n")
        col = len(case.prefix) - (case.prefix.rfind("\n") + 1)
        shown, seconds = await ask(uri, line, col)
        timings["cold"].append(seconds)
        version = 1
        if shown.strip():  # the user types what the suggestion shows: served from cache
            version += 1
            type_char(uri, version, line, col, shown[0])
            _, seconds = await ask(uri, line, col + 1)
            timings["cache hit"].append(seconds)
            col += 1
        # then a character the suggestion did not predict: the engine runs again
        other = "#" if not shown[1:2] or shown[1:2] != "#" else "@"
        version += 1
        type_char(uri, version, line, col, other)
        _, seconds = await ask(uri, line, col + 1)
        timings["warm"].append(seconds)
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            types.TextDocumentIdentifier(uri)))
    stats = await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command="dg-lsp.stats"))
    server_rss = _peak_rss_mb(client._server.pid) if client._server else None
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    latency = [{"requests": name, "count": len(values), **_percentiles(values)}
               for name, values in timings.items()]
    return {"latency": latency, "serverStats": stats,
            "memory": {"serverPeakRssMb": server_rss}}


async def ask_warmup(client: Any, types: Any) -> None:
    """One untimed request: the model loads on the first one."""
    uri = "file:///bench/warmup.py"
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text="def f(x):\n    return \n")))
    await client.text_document_inline_completion_async(types.InlineCompletionParams(
        text_document=types.TextDocumentIdentifier(uri), position=types.Position(1, 11),
        context=types.InlineCompletionContext(types.InlineCompletionTriggerKind.Invoked)))


def sampler_section(engine: Any, cases: list, args: argparse.Namespace) -> list[dict]:
    from dg_lsp.eval.runner import Predictor, evaluate, load_predictor
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


def _percentiles(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50Ms": None, "p95Ms": None, "p99Ms": None}
    return {"p50Ms": round(1000 * statistics.median(seconds), 1),
            "p95Ms": round(1000 * percentile(seconds, 95), 1),
            "p99Ms": round(1000 * percentile(seconds, 99), 1)}


def _peak_rss_mb(pid: int) -> float | None:
    """A live process's peak resident set (Linux /proc), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _self_peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kilobytes


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
