"""The confidence gate (issue #32) across processes: the score is the same from a resident
engine as in process, and over LSP a completion or an edit the model is not sure of is not
shown. The rest of the gate: tests/unit/test_gate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.types import InfillRequest, SamplerSettings
from tests.support.lsp_wire import WireServer


@pytest.fixture(scope="module")
def dream(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


def test_the_score_is_the_same_in_process_and_resident(dream, dream_ckpt: Path, tmp_path):
    from engine.serve.socket.client import EngineClient
    from tests.support.engine_procs import serving

    request = InfillRequest("def add(a, b):\n    return ", "\n", 8,
                            SamplerSettings(cache_refresh=1))
    local = list(dream.infill_stream(request))[-1]
    with serving(dream_ckpt, tmp_path / "engine.sock") as (_, endpoint):
        remote = list(EngineClient(endpoint).infill_stream(request))[-1]
    assert local.score is not None and local.score.tokens > 0
    assert remote.score == local.score
    assert remote.token_ids == local.token_ids


# the unit tests' texts: a hole to complete, a file and the rewrite of it the model is unsure of
SOURCE = "def f(x):\n    return \n"
WORDS = "def word_count(text):\n    return len(text.split())\n"
NEW = "def word_count(text):\n    return len(text.split(' '))"


# -- over LSP ---------------------------------------------------------------------------------

# `dg-lsp serve` whose engine writes the given (text, lowest confidence) pairs (argv[1]).
SCORED_SERVER = """
import json, sys
from dg_lsp.lsp.server import create_server
from tests.support.scripted import Scripted
create_server(Scripted(*[tuple(w) for w in json.loads(sys.argv[1])])).start_io()
"""


def scored_server(written: list[tuple[str, float | None]], min_confidence: float,
                  capabilities: dict | None = None, key: str = "minConfidence") -> WireServer:
    return WireServer(None, options={key: min_confidence},
                      capabilities=capabilities,
                      python_args=("-c", SCORED_SERVER, json.dumps(written)))


def inline_texts(wire: WireServer, uri: str, text: str) -> list[str]:
    wire.open(uri, text)
    result = wire.inline(uri, 1, 11)["result"]
    items = result["items"] if isinstance(result, dict) else (result or [])
    return [item["insertText"] for item in items]


def list_texts(wire: WireServer, uri: str, text: str) -> list[str]:
    wire.open(uri, text)
    result = wire.call("textDocument/completion", {
        "textDocument": {"uri": uri}, "position": {"line": 1, "character": 11}})["result"]
    return [item["textEdit"]["newText"] for item in result["items"]]


def test_over_lsp_the_gate_hides_a_low_score_and_shows_a_high_one():
    # The shipped calibrator: "x + 1" with lowest = mean = 0.05 is far under 0.3, with 0.9 far
    # over it (the test above).
    wire = scored_server([("x + 1", 0.05), ("x + 2", 0.9), ("x + 3", 0.05), ("x + 4", 0.9)],
                         0.3)
    try:
        assert inline_texts(wire, "file:///tmp/low.py", SOURCE) == []
        assert inline_texts(wire, "file:///tmp/high.py", SOURCE) == ["x + 2"]
        assert list_texts(wire, "file:///tmp/low2.py", SOURCE) == []
        assert list_texts(wire, "file:///tmp/high2.py", SOURCE) == ["x + 4"]
    finally:
        wire.close()
    wire = scored_server([("x + 1", 0.05)], 0.0)
    try:
        assert inline_texts(wire, "file:///tmp/any.py", SOURCE) == ["x + 1"]
    finally:
        wire.close()


def test_over_lsp_a_code_action_the_model_is_unsure_of_is_refused_with_its_message():
    resolves = {"textDocument": {"codeAction": {"resolveSupport": {"properties": ["edit"]}}}}
    wire = scored_server([(NEW, 0.31)] * 4, 0.45, resolves, key="minEditConfidence")
    try:
        uri = "file:///tmp/words.py"
        wire.open(uri, WORDS)
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 2, "character": 0}}
        listed = wire.call("textDocument/codeAction", {
            "textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": []}})
        (action,) = [a for a in listed["result"] if a["title"] == "Rewrite selection"]
        refused = wire.call("codeAction/resolve", action)
        assert refused["error"]["message"] == (
            "dg-lsp: the model is not confident in this edit (0.31 < 0.45)")
    finally:
        wire.close()
