"""The real-shape part of `dg-lsp bench`: a real checkpoint's shape timed through the editor's
path, beside llama.cpp serving its autoregressive twin.

Speed does not depend on the weights' values, so the shapes are written with random weights
(tests/support/published_configs.py: the published config, the real tokenizer of the Dream
family, Qwen2.5's), once, under the bench's cache folder. The writers are the tests' own, so
the section runs from a source checkout. Random weights have no meaningful
confidence, so what a completion costs is fixed instead of left to chance:

- the line is LINE_TOKENS tokens: the output rows of every token that would end it early (a
  line break, a closing bracket, a stop or special token) are scaled down in the written
  checkpoint (with tied embeddings, their input rows too), so the random argmax never picks
  one and no stop cuts the line short; that changes no arithmetic, only which token wins;
- the diffusion side commits K tokens per pass: the top-k sampler with k=K through the
  server's settings (initializationOptions), every hole size LINE_TOKENS; the engine's own
  counters (forward passes, positions committed) are read around every request, so the table
  says how many passes each completion took.

Three columns, the same held-out cursors (one cold request on a document just opened, then
KEYSTROKES typed characters, a warm request after each; a keystroke the suggestion predicted
is answered from the server's cache and counted apart):

- dg: the masked (diffusion) shape through `dg-lsp serve` and its resident engine
  (dg_lsp/measure/bench_lsp.py's client), at K = 1, 2 and 4 tokens per pass;
- ar_ours: the project's autoregressive family at the twin's shape, through the same path;
- ar_peer: llama.cpp's own `llama-server` (built once from the pinned llama-cpp-python sdist,
  which vendors the whole llama.cpp tree: `build_llama_server`) serving the twin's very
  weights as a GGUF at Q8_0 and F16, through `/infill` with `cache_prompt`, the same prefix and
  suffix the engine's canvas holds, `n_predict` LINE_TOKENS with the end of text ignored.

The two columns of `ratio_p50` (dg at the asked K, llama.cpp at the quantization of the asked
dtype) run first and back to back, so that the machine's other work weighs on both alike.
`--shape dream-coder-7b` times the masked side alone, at the asked K (each K is a load of the
model).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from dg_lsp.measure.llama_peer import LlamaServer, build_llama_server, llama_version, write_gguf

LINE_TOKENS = 16
TOKENS_PER_PASS = (1, 2, 4)
KEYSTROKES = 3
# Request classes: a fixed-length line written at a cursor (cold) or after a keystroke (warm);
# the same where the request ended before the line (choice: the judge took a text the file
# holds after the first pass); a keystroke the suggestion predicted (answered from the
# server's cache). llama.cpp writes every line: its requests are cold or warm.
REQUESTS = ("cold", "warm", "cold-choice", "warm-choice", "typed-through")
QUANTS = ("Q8_0", "F16")
# Scaled output rows: a logit a thousandth of the others' never wins the argmax over a vocabulary.
DAMPING = 1e-3

# A shape: the masked checkpoint, its autoregressive twin, and overrides on both configs.
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
        "num_key_value_heads": 2}
SHAPES: dict[str, tuple[str, str | None, dict[str, Any], int | None]] = {
    "open-dcoder-0.5b": ("open-dcoder-0.5b", "qwen2.5-coder-0.5b", {}, None),
    # No twin: a second 7B checkpoint would double a 15 GB write, and a 7B GGUF written by the
    # gguf package's quantizer in Python costs more again; the masked side alone, one row.
    "dream-coder-7b": ("dream-coder-7b", None, {}, None),
    # For the tests: the same vocabulary and tokenizer, two narrow layers.
    "tiny": ("open-dcoder-0.5b", "qwen2.5-coder-0.5b", TINY, 2),
}
# Shapes timed at the asked --tokens-per-pass only: each K is a load of the model (minutes).
ONE_K_SHAPES = ("dream-coder-7b",)
NO_TWIN = ("no autoregressive twin is written at this shape (a second 7B checkpoint and its "
           "GGUF cost more disk and time than this section's one row)")
SHAPE_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "vocab_size", "tie_word_embeddings")


def add_arguments(parser: Any) -> None:
    """The section's options on `dg-lsp bench`."""
    parser.add_argument("--shape", choices=list(SHAPES), default="open-dcoder-0.5b",
                        help="real-shape section: the published shape to time")
    from engine.bounds import ENGINE_THREADS_RANGE, bounded_argument
    from engine.options import DTYPE_HELP, DTYPES

    parser.add_argument("--dtype", default="auto", choices=DTYPES, metavar="DTYPE",
                        help=f"real-shape section: the engines' dtype: {DTYPE_HELP}")
    parser.add_argument("--tokens-per-pass", type=int, default=2, choices=(1, 2, 4, 8, 16),
                        help="real-shape section: positions committed per pass (1, 2 and 4 "
                        "are always reported, but at dream-coder-7b: a load each)")
    parser.add_argument("--threads", type=bounded_argument(ENGINE_THREADS_RANGE),
                        default=os.cpu_count() or 1,
                        help="real-shape section: CPU threads of every engine and of "
                        "llama-server")
    parser.add_argument("--llama-server", default="build", metavar="build|none|PATH",
                        help="real-shape section: llama.cpp's server (build: the one built "
                        "once under the cache folder, building it if missing)")


def cache_folder() -> Path:
    from engine.data.releases import cache_root

    return cache_root() / "real-shape"


# -- checkpoints ------------------------------------------------------------------------------


def missing_writers() -> str | None:
    """Why the section cannot write its checkpoints here, or None. They are written with the
    test suite's writers of published shapes (tests/support/), which a source checkout holds
    beside the package and a wheel does not: in a checkout its root joins the import path
    (`dg-lsp` started from anywhere does not have it there)."""
    import sys

    root = Path(__file__).resolve().parents[2]
    if not (root / "tests" / "support" / "published_configs.py").is_file():
        return ("the real-shape section writes its checkpoints with the test suite's writers: "
                "run it from a source checkout (pip install -e '.[dev,bench]')")
    if str(root) not in sys.path:
        sys.path.append(str(root))
    return None


def write_shape(shape: str, cache: Path | None = None) -> tuple[Path, Path | None]:
    """(masked checkpoint, AR twin or None where the shape has none) of `shape`, written once
    with random weights."""
    masked, twin, overrides, layers = SHAPES[shape]
    folder = (cache or cache_folder()) / shape
    pair = folder / "masked", None if twin is None else folder / "ar"
    for out, name in zip(pair, (masked, twin), strict=True):
        if out is not None and name is not None and not (out / "done").exists():
            _write_checkpoint(out, name, overrides, layers)
    return pair


def _write_checkpoint(folder: Path, name: str, overrides: dict[str, Any],
                      layers: int | None) -> None:
    from tests.support.published_configs import PUBLISHED, write_real_shape
    from tests.support.real_tokenizer import write_dream_tokenizer

    shutil.rmtree(folder, ignore_errors=True)
    layers = layers or PUBLISHED[name]["num_hidden_layers"]
    write_real_shape(folder, name, layers, overrides={**overrides, "max_window_layers": layers})
    tokenizer = write_dream_tokenizer(folder)  # Qwen2.5's BPE, as the real checkpoints
    _damp_rows(folder / "model.safetensors", stop_ids(tokenizer))
    (folder / "done").write_text("")


def stop_ids(tokenizer: Any) -> list[int]:
    """Ids of the tokens that would end a single line early: special tokens, and those whose
    text holds a line break or a closing bracket."""
    specials = {t.content for t in tokenizer.get_added_tokens_decoder().values()}
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    out = []
    for token, i in vocab.items():
        text = tokenizer.decode([i], skip_special_tokens=False)
        if token in specials or any(c in text for c in "\n\r)]}"):
            out.append(i)
    return sorted(out)


def _damp_rows(file: Path, ids: list[int]) -> None:
    """Rows `ids` of the head scaled by DAMPING in place, in the file mapped (a 7B shape's
    file is larger than the memory left beside it): untied, the head alone decides and the
    embedding stays as drawn; tied, the one stored tensor is the embedding."""
    import struct

    import torch

    with file.open("rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
    name = "lm_head.weight" if "lm_head.weight" in header else "model.embed_tokens.weight"
    entry = header[name]
    dtype = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}[entry["dtype"]]
    begin, end = (8 + size + offset for offset in entry["data_offsets"])
    data = torch.from_file(str(file), shared=True, size=file.stat().st_size, dtype=torch.uint8)
    data[begin:end].view(dtype).view(entry["shape"])[ids] *= DAMPING


def real_shape_section(cursors: list, args: Any) -> dict[str, Any]:
    """The whole section: the shape, the machine, and the three columns."""
    masked, twin = write_shape(args.shape)
    raw = json.loads((masked / "config.json").read_text())
    tokens_per_pass = ([args.tokens_per_pass] if args.shape in ONE_K_SHAPES
                       else sorted({*TOKENS_PER_PASS, args.tokens_per_pass}))
    report: dict[str, Any] = {
        "shape_name": args.shape, "shape": {k: raw[k] for k in SHAPE_KEYS},
        "dtype": args.dtype, "line_tokens": LINE_TOKENS, "cursors": len(cursors),
        "keystrokes_per_cursor": KEYSTROKES, "machine": machine(),
        "threads": {"engine": args.threads, "llama_server": args.threads}}
    quant = "Q8_0" if args.dtype in ("auto", "int8") else "F16"
    # The ratio's two columns first and back to back, so the machine's other work weighs on
    # both alike; then the rest.
    k = args.tokens_per_pass
    dg = {"tokens_per_pass": k, **_dg_column(masked, cursors, args, k)}
    peers = _peers(twin, cursors, args, [quant])
    rows = [dg] + [{"tokens_per_pass": other, **_dg_column(masked, cursors, args, other)}
                   for other in tokens_per_pass if other != k]
    report["dg"] = sorted(rows, key=lambda row: row["tokens_per_pass"])
    report["ar_ours"] = ({"family": "ar", "missing": NO_TWIN} if twin is None else
                         {"family": "ar", **_dg_column(twin, cursors, args, None)})
    peers += _peers(twin, cursors, args, [q for q in QUANTS if q != quant])
    unique = [row for i, row in enumerate(peers) if row not in peers[:i]]  # one "missing"
    report["ar_peer"] = sorted(unique, key=lambda row: QUANTS.index(row.get("quant", quant)))
    peer = next((r for r in report["ar_peer"] if r.get("quant") == quant), None)
    report["ratio_p50"] = (round(dg["warm"]["p50_ms"] / peer["warm"]["p50_ms"], 2)
                           if peer and dg["warm"]["p50_ms"] and peer["warm"]["p50_ms"]
                           else None)
    report["ratio_quant"] = quant
    report["machine"]["load_average_after"] = list(os.getloadavg())
    return report


def machine() -> dict[str, Any]:
    model = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "load_average": list(os.getloadavg())}


def settings_for(dtype: str, k: int | None) -> dict[str, Any]:
    """The server's settings (initializationOptions): every hole LINE_TOKENS tokens, nothing
    hidden by the confidence gate, and for the masked family the top-k sampler committing `k`
    positions per step."""
    settings: dict[str, Any] = {
        "dtype": dtype, "minConfidence": 0, "extraContext": False, "repositoryContext": False,
        "holeSize": {key: LINE_TOKENS for key in ("restOfLine", "brackets", "comment", "block")}}
    if k is not None:
        settings["sampler"] = {"name": "topk", "k": k}
    return settings


def _dg_column(model: Path, cursors: list, args: Any, k: int | None) -> dict[str, Any]:
    """One column through the language server: its engine at `args.threads` threads."""
    import asyncio

    previous = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the engine the server starts
    try:
        return asyncio.run(_replay(model, cursors, args.dtype, k))
    finally:
        if previous is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = previous


def _peers(twin: Path | None, cursors: list, args: Any, quants: list[str]
           ) -> list[dict[str, Any]]:
    """llama.cpp's rows at `quants`; one that says why where the shape has no twin."""
    if not quants:
        return []
    if twin is None:
        return [{"engine": "llama.cpp", "missing": NO_TWIN}]
    return _peer(twin, cursors, args, quants)


async def _replay(model: Path, cursors: list, dtype: str, k: int | None) -> dict[str, Any]:
    from dg_lsp.measure.bench_lsp import Session

    times: dict[str, list[float]] = {name: [] for name in REQUESTS}
    counts: dict[str, list[tuple[int, int, float]]] = {name: [] for name in REQUESTS}
    with tempfile.TemporaryDirectory() as runtime:
        session = Session(str(model), "cpu", [], runtime, settings_for(dtype, k))
        started = time.perf_counter()
        await session.start()  # the engine loads the model on its first, untimed, request
        load_s = round(time.perf_counter() - started, 1)
        try:
            engine = _engine_client(runtime)
            for case in cursors:
                text, offset = case.document()
                uri = session.open(text)
                before = engine.stats()
                shown, seconds = await session.ask(uri, text, offset)
                delta = _delta(before, engine.stats())
                times[_kind("cold", delta)].append(seconds)
                counts[_kind("cold", delta)].append(delta)
                for char in case.middle[:KEYSTROKES]:
                    predicted = shown[:1] == char
                    session.type_char(uri, text, offset, char)
                    text, offset = text[:offset] + char + text[offset:], offset + 1
                    before = engine.stats()
                    shown, seconds = await session.ask(uri, text, offset)
                    delta = _delta(before, engine.stats())
                    kind = "typed-through" if predicted else _kind("warm", delta)
                    times[kind].append(seconds)
                    counts[kind].append(delta)
                session.close(uri)
            threads = engine.stats().get("cpuThreads")
            peak = session.peak_rss_mb()
        finally:
            await session.stop()
    out: dict[str, Any] = {name: {**_percentiles(times[name]), **_passes(counts[name])}
                           for name in times}
    return {**out, "engine_threads": threads, "peak_rss_mb": peak, "load_s": load_s}


def _kind(request: str, delta: tuple[int, int, float]) -> str:
    """`request` ("cold", "warm") where the engine wrote the line (LINE_TOKENS positions
    committed: `delta` is the request's `_delta`), or "<request>-choice" where it ended
    before: the judge took one of the texts the file holds at the cursor after the first
    pass (dg_lsp/completion/judge.py), or the server's cache answered."""
    return request if delta[1] >= LINE_TOKENS else f"{request}-choice"


def _engine_client(runtime: str) -> Any:
    from engine.serve.socket.client import EngineClient
    from engine.serve.socket.endpoint import Endpoint

    socks = list((Path(runtime) / "dg-engine").glob("*.sock"))
    if len(socks) != 1:
        raise RuntimeError(f"expected one resident engine in {runtime}, found {len(socks)}")
    return EngineClient(Endpoint(socks[0]))


def _delta(before: dict[str, Any], after: dict[str, Any]) -> tuple[int, int, float]:
    """(forward passes, positions committed, seconds the engine's scheduler was busy) between
    two readings of the engine's stats."""
    return (after["forwardPasses"] - before["forwardPasses"],
            after["positionsCommitted"] - before["positionsCommitted"],
            after["busySeconds"] - before["busySeconds"])


def _passes(counts: list[tuple[int, int, float]]) -> dict[str, Any]:
    """Per request class: the passes and positions each request took, and the engine's busy
    time (the rest of a request's latency is the language server, the socket and the queue)."""
    if not counts:
        return {}
    passes = [p for p, _, _ in counts]
    committed = [c for _, c, _ in counts]
    return {"passes": statistics.median(passes), "passes_min": min(passes),
            "passes_max": max(passes), "committed": statistics.median(committed),
            "committed_min": min(committed),
            "tokens_per_pass": round(sum(committed) / max(1, sum(passes)), 2),
            "engine_busy_p50_ms": round(1000 * statistics.median(b for _, _, b in counts), 1)}


def _percentiles(seconds: list[float]) -> dict[str, Any]:
    from engine.data.stats import percentile

    if not seconds:
        return {"count": 0, "p50_ms": None, "p95_ms": None}
    return {"count": len(seconds), "p50_ms": round(1000 * statistics.median(seconds), 1),
            "p95_ms": round(1000 * percentile(seconds, 95), 1)}


# -- the peer ---------------------------------------------------------------------------------


def _peer(twin: Path, cursors: list, args: Any, quants: list[str]) -> list[dict[str, Any]]:
    """llama.cpp at each of `quants`, or one row that says why it is missing."""
    try:
        import gguf  # noqa: F401
    except ImportError:
        return [{"engine": "llama.cpp", "missing": "the gguf package is not installed (pip "
                 "install 'dg-lsp[bench]')"}]
    try:
        binary = (None if args.llama_server == "none" else
                  build_llama_server() if args.llama_server == "build" else
                  Path(args.llama_server))
        if binary is None:
            return [{"engine": "llama.cpp", "missing": "--llama-server none"}]
        if not binary.exists():
            raise OSError(f"no {binary}")
        version = llama_version(binary)
    except OSError as exc:
        return [{"engine": "llama.cpp", "missing": str(exc)}]
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(twin / "tokenizer.json"))
    rows = []
    for quant in quants:
        model = write_gguf(twin, quant)
        try:
            server = LlamaServer(binary, model, args.threads)
        except OSError as exc:
            rows.append({"engine": "llama.cpp", "quant": quant, "missing": str(exc)})
            continue
        try:
            rows.append({"engine": "llama.cpp", "version": version, "quant": quant,
                         **_replay_peer(server, tokenizer, cursors),
                         "peak_rss_mb": server.peak_rss_mb()})
        finally:
            server.stop()
    return rows


def _replay_peer(server: LlamaServer, tokenizer: Any, cursors: list) -> dict[str, Any]:
    """The same cursors and keystrokes as the engine: its canvas's context (the engine's cut:
    the canvas less the hole, the suffix's share of it), fixed per cursor as an editor plugin
    keeps its window, so a keystroke reuses the cached prompt."""
    from dg_lsp.settings import Settings

    settings = Settings()
    context = settings.canvas_length - LINE_TOKENS
    after = int(context * settings.suffix_fraction)
    times: dict[str, list[float]] = {name: [] for name in REQUESTS[:4]}
    predicted: list[int] = []
    for case in cursors:
        text, offset = case.document()
        prefix = _tail(tokenizer, text[:offset], context - after)
        suffix = _head(tokenizer, text[offset:], after)
        answer, seconds = server.infill(prefix, suffix, LINE_TOKENS)
        times["cold"].append(seconds)
        predicted.append(answer.get("tokens_predicted", 0))
        for char in case.middle[:KEYSTROKES]:
            # Each keystroke is timed as the engine's are (all count: llama.cpp has no cache
            # of its own suggestion).
            text, offset = text[:offset] + char + text[offset:], offset + 1
            prefix += char
            answer, seconds = server.infill(prefix, suffix, LINE_TOKENS)
            times["warm"].append(seconds)
            predicted.append(answer.get("tokens_predicted", 0))
    return {**{name: _percentiles(times[name]) for name in times},
            "tokens_predicted_min": min(predicted, default=0),
            "tokens_predicted_max": max(predicted, default=0)}


def _tail(tokenizer: Any, text: str, tokens: int) -> str:
    enc = tokenizer.encode(text, add_special_tokens=False)
    if len(enc.ids) <= tokens:
        return text
    return text[enc.offsets[len(enc.ids) - tokens][0]:]


def _head(tokenizer: Any, text: str, tokens: int) -> str:
    enc = tokenizer.encode(text, add_special_tokens=False)
    if len(enc.ids) <= tokens:
        return text
    return text[:enc.offsets[tokens][0]]


# -- the table --------------------------------------------------------------------------------


def table_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per column and request class, for `dg-lsp bench`'s table."""
    rows = []
    columns = [(f"dg k={r['tokens_per_pass']} ({report['dtype']})", r) for r in report["dg"]]
    columns.append((f"ar ours ({report['dtype']})", report["ar_ours"]))
    columns += [(f"llama.cpp {r.get('quant', '')}".strip(), r) for r in report["ar_peer"]]
    for name, r in columns:
        if "missing" in r:
            rows.append({"column": name, "requests": "-", "count": 0, "p50Ms": None,
                         "p95Ms": None, "passes": None, "tokensPerPass": None,
                         "peakRssMb": None, "loadS": None, "note": f"missing: {r['missing']}"})
            continue
        for request in ("cold", "warm"):
            m = r[request]
            rows.append({"column": name, "requests": request, "count": m["count"],
                         "p50Ms": m["p50_ms"], "p95Ms": m["p95_ms"],
                         "passes": m.get("passes"), "tokensPerPass": m.get("tokens_per_pass"),
                         "peakRssMb": r.get("peak_rss_mb"), "loadS": r.get("load_s"),
                         "note": ""})
    return rows
