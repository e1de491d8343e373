"""A keystroke and a completion cost what the context window costs, not what the file costs.

In-process, with a scripted engine (no model time): what is measured is the server's own
work per keystroke: applying the change, converting the cursor, cutting the context.
Bounds are generous for a busy 2-core machine; the costs they replace were 1.2 s per
keystroke in a 10 MB file and 3-7 s in a 1 MB single-line file.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from lsprotocol import types

from dg_lsp.lsp.actions import code_actions, rewrite
from dg_lsp.lsp.completion import complete
from dg_lsp.lsp.server import create_server
from dg_lsp.positions import UTF16, position_at
from engine.types import RewriteRequest
from tests.support.scripted import Scripted, steps_of
from tests.support.wait import wait_for_async


class Steps(Scripted):
    """Answers "1" to a completion after 2 denoising steps of `step_seconds` each, 40 where the
    prefix holds "slow"; "return b" to a rewrite, after 40."""

    def __init__(self, step_seconds: float = 0.0) -> None:
        super().__init__(resident=True, step_seconds=step_seconds)

    def _drafts(self):
        request = self.requests[-1]
        if isinstance(request, RewriteRequest):
            self.texts.append(steps_of("return b", 40))
        else:
            self.texts.append(steps_of("1", 40 if "slow" in request.prefix else 2))
        return super()._drafts()


def open_doc(server, uri: str, text: str) -> None:
    server.did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=1, text=text)))


def keystroke_then_completion(server, uri: str, version: int) -> float:
    """Seconds for typing one space at the end of the document and asking there."""
    text = server.documents.get(uri).text
    end = position_at(text, len(text), UTF16)
    started = time.perf_counter()
    server.did_change(types.DidChangeTextDocumentParams(
        types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        [types.TextDocumentContentChangePartial(range=types.Range(end, end), text=" ")]))
    server.documents.get(uri).completions.clear()
    cursor = types.Position(end.line, end.character + 1)
    found = asyncio.run(complete(server, uri, cursor))
    assert found is not None and found[0].text == "1"
    return time.perf_counter() - started


def median_cost(server, uri: str) -> float:
    return statistics.median(keystroke_then_completion(server, uri, v) for v in range(2, 5))


def test_a_keystroke_in_a_ten_megabyte_file_costs_what_a_small_one_does():
    server = create_server(Steps())
    open_doc(server, "file:///tmp/big.py", "def f(x):\n    return x\n\n" * 440_000 + "y = ")
    open_doc(server, "file:///tmp/small.py", "def f(x):\n    return x\n\ny = ")
    assert median_cost(server, "file:///tmp/big.py") < 0.3
    assert median_cost(server, "file:///tmp/small.py") < 0.3
    assert server.trees.full_parses == 0  # nothing asked for a tree: nothing was parsed


def test_a_keystroke_in_a_one_megabyte_line_costs_what_a_short_one_does():
    server = create_server(Steps())
    open_doc(server, "file:///tmp/data.py", "x = [" + "1, " * 350_000)
    assert median_cost(server, "file:///tmp/data.py") < 0.3


def test_large_other_documents_are_scanned_once_not_per_keystroke():
    server = create_server(Steps())
    other = "def total(values):\n    return sum(values)\n" * 10_000  # 420 kB
    for i in range(15):
        open_doc(server, f"file:///tmp/other{i}.py", other + f"# {i}\n")
    open_doc(server, "file:///tmp/here.py", "def total(values):\n    return ")
    keystroke_then_completion(server, "file:///tmp/here.py", 2)  # the first reads them all
    assert median_cost(server, "file:///tmp/here.py") < 0.1


def test_a_long_request_in_one_document_does_not_hold_up_another():
    backend = Steps(step_seconds=0.02)
    server = create_server(backend)
    open_doc(server, "file:///tmp/slow.py", "slow = ")
    open_doc(server, "file:///tmp/quick.py", "quick = ")
    finished: dict[str, float] = {}

    async def ask(uri: str) -> None:
        text = server.documents.get(uri).text
        await complete(server, uri, position_at(text, len(text), UTF16))
        finished[uri] = time.perf_counter()

    async def both() -> float:
        started = time.perf_counter()
        slow = asyncio.ensure_future(ask("file:///tmp/slow.py"))
        await wait_for_async(lambda: backend.taken, 10, "the slow one to be denoising")
        await ask("file:///tmp/quick.py")
        await slow
        return started

    started = asyncio.run(both())
    # steps interleave on the engine's worker: the quick one (2 steps) is not queued behind
    # the slow one's 40
    assert finished["file:///tmp/quick.py"] < finished["file:///tmp/slow.py"]
    assert finished["file:///tmp/quick.py"] - started < 0.5


def test_code_actions_in_a_file_too_large_to_rewrite_parse_nothing():
    server = create_server(Steps())
    open_doc(server, "file:///tmp/big.py", "def f(x):\n    return x\n\n" * 440_000)
    started = time.perf_counter()
    actions = asyncio.run(code_actions(server, types.CodeActionParams(
        types.TextDocumentIdentifier("file:///tmp/big.py"),
        types.Range(types.Position(1, 4), types.Position(1, 12)),
        types.CodeActionContext(diagnostics=[]))))
    assert actions == []
    assert server.trees.full_parses == 0
    assert time.perf_counter() - started < 0.3


def test_a_long_rewrite_in_one_document_does_not_hold_up_a_completion_in_another():
    from dg_lsp.actions.targets import REWRITE

    backend = Steps(step_seconds=0.02)
    server = create_server(backend)
    text = "def f(a, b):\n    return a\n"
    open_doc(server, "file:///tmp/rewrite.py", text)
    open_doc(server, "file:///tmp/quick.py", "quick = ")
    finished: dict[str, float] = {}

    async def rewriting() -> None:
        await rewrite(server, "file:///tmp/rewrite.py", 1, types.Range(
            types.Position(1, 4), types.Position(1, 12)), REWRITE, strength=0.5)
        finished["rewrite"] = time.perf_counter()

    async def both() -> float:
        started = time.perf_counter()
        slow = asyncio.ensure_future(rewriting())
        await wait_for_async(lambda: backend.taken, 10, "the rewrite to be denoising")
        completion, _ = await complete(server, "file:///tmp/quick.py", types.Position(0, 8))
        assert completion.text == "1"
        finished["completion"] = time.perf_counter()
        await slow
        return started

    started = asyncio.run(both())
    assert finished["completion"] < finished["rewrite"]
    assert finished["completion"] - started < 0.5
