"""The LSP part of `dg-lsp bench`: what a user typing in an editor waits for, and what they see.

A real stdio LSP client (pygls) starts `dg-lsp serve` the way an editor does. The default path
comes first: the resident engine with default settings, started by the server (in a private
runtime folder, so the bench starts a fresh one and stops it after); then the same requests
against `dg-lsp serve --engine inproc` (the model inside the server) for comparison.

Two replays, every request `textDocument/inlineCompletion`, timed from request to answer (the
debounce an editor waits before asking is the editor's, not in these numbers):

- cursor cases (engine/data/cases.py `CURSOR_CLASSES`): the document opened with the rest of
  the unit cut at the cursor; the first request is "cold" and what it shows is scored against
  what was cut (exact match, edit similarity; cut to as many lines as the reference). Then the
  user types the first TYPED_CHARS characters of what was cut, asking after each: a keystroke
  the suggestion predicted is "typed-through" (the server should answer from its cache), any
  other is "warm" (the model runs again, on a document it has seen);
- typing sessions: whole functions from the same files typed one keystroke at a time into the
  file they were cut from, a request after every keystroke (typed-through or warm as above).
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dg_lsp.measure.eval.scoring import edit_similarity, exact_match
from dg_lsp.positions import UTF16, position_at
from engine.data.cases import Case, source_files

TYPED_CHARS = 6  # keystrokes replayed after each cursor case's cold request
PATHS = {"default (resident engine)": [], "in-process (--engine inproc)": ["--engine", "inproc"]}
REQUEST_CLASSES = ("cold", "warm", "typed-through")


@dataclass
class Function:
    """A function to type: the file without it (`before` + `after`) and its text."""

    id: str
    before: str
    text: str
    after: str


@dataclass
class Measurements:
    latency: dict[str, list[float]] = field(
        default_factory=lambda: {name: [] for name in REQUEST_CLASSES})
    # cursor class -> (cold seconds, exact, edit similarity) per case
    cases: dict[str, list[tuple[float, bool, float]]] = field(default_factory=dict)


def cut_functions(folder: Path, count: int, max_chars: int = 400) -> list[Function]:
    """`count` functions of 80..max_chars characters, in file order, from the Python files."""
    found = []
    for path in source_files(folder):
        if path.suffix != ".py":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in re.finditer(r"^( *)def \w+\(.*?(?=^\1?\S|\Z)", text, re.M | re.S):
            body = match.group(0).rstrip("\n") + "\n"
            if 80 <= len(body) <= max_chars and '"""' not in body:
                start = match.start()
                found.append(Function(f"{path.name}:{text.count(chr(10), 0, start) + 1}",
                                      text[:start], body, text[start + len(body):]))
    step = max(1, len(found) // max(count, 1))
    return found[::step][:count]


async def measure(cases: list[Case], functions: list[Function], model: str | None,
                  device: str, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Both paths, the same requests: latency per request class, quality per cursor class.
    `settings`: the server's settings as an editor sends them (None: the defaults)."""
    latency_rows, class_rows, memory = [], [], {}
    for path_name, extra in PATHS.items():
        with tempfile.TemporaryDirectory() as runtime:
            session = Session(model, device, extra, runtime, settings)
            await session.start()
            try:
                measured = await session.replay(cases, functions)
                memory[path_name] = session.peak_rss_mb()
            finally:
                await session.stop()
        for request_class, seconds in measured.latency.items():
            latency_rows.append({"path": path_name, "requests": request_class,
                                 "count": len(seconds), **percentiles(seconds)})
        pooled = [row for rows in measured.cases.values() for row in rows]
        for cursor_class, rows in [*measured.cases.items(), ("pooled", pooled)]:
            class_rows.append({"path": path_name, "cursor": cursor_class, "count": len(rows),
                               **percentiles([r[0] for r in rows]),
                               "exactMatch": _mean([r[1] for r in rows]),
                               "editSimilarity": _mean([r[2] for r in rows])})
    return {"latency": latency_rows, "cursorClasses": class_rows,
            "memory": {"serverPeakRssMb": memory}}


class Session:
    """One `dg-lsp serve` and the documents typed into it."""

    def __init__(self, model: str | None, device: str, extra: list[str], runtime: str,
                 settings: dict[str, Any] | None = None) -> None:
        self.command = [sys.executable, "-m", "dg_lsp.cli", "serve", "--device", device, *extra]
        self.settings = settings
        if model:
            self.command += ["--model", model]
        self.runtime = runtime
        self.client: Any = None
        self.versions: dict[str, int] = {}

    async def start(self, load_model: bool = True) -> None:
        """Start the server as an editor does; with `load_model`, ask one untimed completion
        (the model, or the engine, loads on the first)."""
        from lsprotocol import types
        from pygls.lsp.client import LanguageClient

        self.types = types
        self.client = LanguageClient("dg-lsp-bench", "1")
        for method in ("window/logMessage", "window/showMessage", "dg-lsp/engineState",
                       "dg-lsp/suggestion", "window/workDoneProgress/create", "$/progress"):
            self.client.feature(method)(lambda *args: None)  # read, not printed
        # The resident engine the server starts lives in this run's own runtime folder.
        await self.client.start_io(*self.command, env={**os.environ,
                                                       "XDG_RUNTIME_DIR": self.runtime})
        caps = types.ClientCapabilities(text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities(),
            # as VS Code: actions are listed, their edits computed when one is chosen
            code_action=types.CodeActionClientCapabilities(
                resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"]))))
        await self.client.initialize_async(types.InitializeParams(
            capabilities=caps, initialization_options=self.settings))
        self.client.initialized(types.InitializedParams())
        if load_model:
            uri = self.open("def f(x):\n    return \n")
            await self.ask(uri, "def f(x):\n    return \n", 24)

    async def stop(self) -> None:
        from engine.serve.socket.client import EngineClient, EngineUnavailable
        from engine.serve.socket.endpoint import Endpoint

        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()
        for sock in (Path(self.runtime) / "dg-engine").glob("*.sock"):
            try:
                EngineClient(Endpoint(sock)).shutdown()
            except (EngineUnavailable, OSError):
                pass

    def peak_rss_mb(self) -> float | None:
        """Peak RSS of the server, plus the engine's where the server started one."""
        from engine.serve.socket.client import EngineClient, EngineUnavailable
        from engine.serve.socket.endpoint import Endpoint

        pids = [self.client._server.pid] if self.client._server else []
        for sock in (Path(self.runtime) / "dg-engine").glob("*.sock"):
            try:
                pids.append(EngineClient(Endpoint(sock)).hello()["pid"])
            except (EngineUnavailable, OSError):
                pass
        values = [v for v in (peak_rss_mb(pid) for pid in pids) if v is not None]
        return round(sum(values), 1) if values else None

    # -- documents -----------------------------------------------------------------------

    def open(self, text: str) -> str:
        uri = f"file:///bench/doc{len(self.versions) + 1}.py"
        self.client.text_document_did_open(self.types.DidOpenTextDocumentParams(
            self.types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        self.versions[uri] = 1
        return uri

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(self.types.DidCloseTextDocumentParams(
            self.types.TextDocumentIdentifier(uri)))

    def type_char(self, uri: str, text: str, offset: int, char: str) -> None:
        self.replace(uri, text, offset, offset, char)

    def replace(self, uri: str, text: str, start: int, end: int, new: str) -> None:
        """Tell the server that text[start:end] became `new`, as an editor does."""
        types = self.types
        self.versions[uri] += 1
        where = types.Range(position_at(text, start, UTF16), position_at(text, end, UTF16))
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]),
            [types.TextDocumentContentChangePartial(range=where, text=new)]))

    async def ask(self, uri: str, text: str, offset: int) -> tuple[str, float]:
        types = self.types
        start = time.perf_counter()
        result = await self.client.text_document_inline_completion_async(
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri),
                position=position_at(text, offset, UTF16),
                context=types.InlineCompletionContext(
                    types.InlineCompletionTriggerKind.Automatic)))
        seconds = time.perf_counter() - start
        items = result.items if result is not None else []
        return (items[0].insert_text if items else ""), seconds

    async def code_actions(self, uri: str, line: int, character: int) -> list[Any]:
        """textDocument/codeAction at a cursor: the actions listed."""
        types = self.types
        cursor = types.Position(line, character)
        result = await self.client.text_document_code_action_async(types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri), range=types.Range(cursor, cursor),
            context=types.CodeActionContext(diagnostics=[])))
        return list(result or [])

    async def ask_next_edit(self, uri: str, text: str, offset: int
                            ) -> tuple[list[dict[str, Any]], float]:
        """textDocument/copilotInlineEdit at `offset`: the edits and the seconds it took."""
        from dg_lsp.lsp.messages import INLINE_EDIT

        position = position_at(text, offset, UTF16)
        start = time.perf_counter()
        result = await self.client.protocol.send_request_async(INLINE_EDIT, {
            "textDocument": {"uri": uri, "version": self.versions[uri]},
            "position": {"line": position.line, "character": position.character}})
        seconds = time.perf_counter() - start
        edits = result.get("edits", []) if isinstance(result, dict) else \
            list(getattr(result, "edits", []) or [])
        return edits, seconds

    # -- the replays ---------------------------------------------------------------------

    async def replay(self, cases: list[Case], functions: list[Function]) -> Measurements:
        measured = Measurements()
        for case in cases:
            text, offset = case.document()
            uri = self.open(text)
            shown, seconds = await self.ask(uri, text, offset)
            measured.latency["cold"].append(seconds)
            lines = case.middle.count("\n") + 1
            seen = "\n".join(shown.split("\n")[:lines])
            measured.cases.setdefault(case.kind, []).append(
                (seconds, exact_match(seen, case.middle), edit_similarity(seen, case.middle)))
            await self._type(uri, text, offset, case.middle[:TYPED_CHARS], shown, measured)
            self.close(uri)
        for function in functions:
            text, offset = function.before + function.after, len(function.before)
            uri = self.open(text)
            shown, _ = await self.ask(uri, text, offset)
            await self._type(uri, text, offset, function.text, shown, measured)
            self.close(uri)
        return measured

    async def _type(self, uri: str, text: str, offset: int, typed: str, shown: str,
                    measured: Measurements) -> None:
        for char in typed:
            predicted = shown[:1] == char
            self.type_char(uri, text, offset, char)
            text, offset = text[:offset] + char + text[offset:], offset + 1
            shown, seconds = await self.ask(uri, text, offset)
            measured.latency["typed-through" if predicted else "warm"].append(seconds)


def percentiles(seconds: list[float]) -> dict[str, float | None]:
    from engine.data.stats import percentile

    if not seconds:
        return {"p50Ms": None, "p95Ms": None, "p99Ms": None}
    return {"p50Ms": round(1000 * statistics.median(seconds), 1),
            "p95Ms": round(1000 * percentile(seconds, 95), 1),
            "p99Ms": round(1000 * percentile(seconds, 99), 1)}


def peak_rss_mb(pid: int) -> float | None:
    """A live process's peak resident set (Linux /proc), in MB."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 3) if values else None
