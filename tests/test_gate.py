"""The confidence gate (issue #32 items 1-3): the engine scores what it commits, the score
travels with the draft (in process and over the wire alike), and a completion or edit the
model is not sure of is not shown."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from dg_lsp import gate
from dg_lsp.languages import language_for
from dg_lsp.pipeline import CompletionRequest, Pipeline
from dg_lsp.rewrite import RewriteError, compute_edit
from dg_lsp.settings import Settings, parse_settings
from engine.backend import EngineInfo
from engine.serve import protocol
from engine.types import Draft, InfillRequest, SamplerSettings, Score, score_of
from tests.lsp_wire import WireServer
from tests.test_actions import doc, target_of


@pytest.fixture(scope="module")
def dream(dream_ckpt: Path):
    from engine import Engine

    return Engine.load(str(dream_ckpt), device="cpu", dtype="float32")


# -- the score, in the engine -----------------------------------------------------------------


def sure_of(vocab: int, n: int, picks: list[dict[int, float]]) -> torch.Tensor:
    """Logits [n, vocab] whose softmax gives position i exactly the probabilities picks[i]
    (the rest of the vocabulary gets none)."""
    logits = torch.full((n, vocab), -math.inf)
    for i, probs in enumerate(picks):
        for token, p in probs.items():
            logits[i, token] = math.log(p)
    return logits


def test_the_score_of_a_hand_made_step_sequence(dream):
    """topk k=1 commits one position a pass: 0.8 at the first, then 0.7, then a stop token
    at 0.9. The completion is the first two tokens: lowest 0.7, mean 0.75, 3 passes (the
    stop token is not part of the completion and is not scored)."""
    settings = SamplerSettings(sampler="topk", k=1, cache_refresh=1, stop_run=False)
    denoiser = dream.live(InfillRequest("x=1\n", "\n", 3, settings)).steps
    vocab = dream.decoder.model.cfg.vocab_size
    # Two tokens the first position may take (the cursor's token is healed: the first token
    # must start with its text).
    allowed = denoiser.heal_allowed if denoiser.heal_allowed is not None else torch.ones(vocab)
    a, b = (int(i) for i in allowed.nonzero()[:2, 0])
    (stop,) = sorted(denoiser.stop_ids)[:1]
    first = denoiser.advance(sure_of(vocab, 3, [{a: 0.8, b: 0.2}, {b: 0.6, a: 0.4},
                                                {b: 0.5, a: 0.5}]))
    assert first.score == Score(0.800000011920929, 0.800000011920929, 1, 1)  # float32 0.8
    second = denoiser.advance(sure_of(vocab, 2, [{b: 0.7, a: 0.3}, {a: 0.6, b: 0.4}]))
    third = denoiser.advance(sure_of(vocab, 1, [{stop: 0.9, a: 0.1}]))
    assert second.token_ids[:2] == third.token_ids[:2] == [a, b]
    assert (third.done, third.finish_reason, third.token_ids[2]) == (True, "stop", stop)
    score = third.score
    assert (score.tokens, score.passes) == (2, 3)
    # float32 softmax of log(0.7): exact to a few ulps, not bit for bit
    assert score.lowest == pytest.approx(0.7, abs=1e-6)
    assert score.mean == pytest.approx(0.75, abs=1e-6)


def test_score_of_no_generated_token_is_certain():
    assert score_of([], 4) == Score(1.0, 1.0, 0, 4)
    assert score_of([0.5, 0.25], 2) == Score(0.25, 0.375, 2, 2)


def test_the_score_is_the_same_in_process_and_resident(dream, dream_ckpt: Path, tmp_path):
    from engine.serve.client import EngineClient
    from tests.engine_procs import serving

    request = InfillRequest("def add(a, b):\n    return ", "\n", 8,
                            SamplerSettings(cache_refresh=1))
    local = list(dream.infill_stream(request))[-1]
    with serving(dream_ckpt, tmp_path / "engine.sock") as (_, endpoint):
        remote = list(EngineClient(endpoint).infill_stream(request))[-1]
    assert local.score is not None and local.score.tokens > 0
    assert remote.score == local.score
    assert remote.token_ids == local.token_ids


# -- the wire ---------------------------------------------------------------------------------

OLD_FIELDS = {"step", "token_ids", "committed", "text", "done", "finish_reason"}


def test_the_score_travels_beside_the_draft_and_an_old_engine_sends_none():
    draft = Draft(2, [5, 6], 2, "x", True, "stop", Score(0.25, 0.5, 2, 2))
    message = json.loads(protocol.encode(protocol.draft_message("result", 7, draft))[4:])
    assert set(message["draft"]) == OLD_FIELDS  # what a client that predates it reads
    assert message["score"] == {"lowest": 0.25, "mean": 0.5, "tokens": 2, "passes": 2}
    assert protocol.draft_from_wire(message["draft"], message["score"]) == draft
    old = protocol.draft_from_wire(message["draft"])  # an engine that predates the score
    assert old.score is None
    assert protocol.draft_from_wire(message["draft"], {"lowest": "high"}).score is None


# -- the gate ---------------------------------------------------------------------------------


class Scored:
    """A backend that writes given texts with given scores (None: no score, an old engine)."""

    engine_info = EngineInfo(model="scripted", family="masked", device="cpu", resident=False,
                             counts_tokens=False)

    def __init__(self, *written: tuple[str, float | None]) -> None:
        self.written = list(written)

    def _drafts(self):
        text, lowest = self.written.pop(0)
        score = None if lowest is None else Score(lowest, lowest, 3, 3)
        yield Draft(step=3, token_ids=[], committed=3, text=text, done=True,
                    finish_reason="stop", score=score)

    def infill_stream(self, request, cancel=None, document=None):
        return self._drafts()

    def rewrite_stream(self, request, cancel=None, document=None):
        return self._drafts()


SOURCE = "def f(x):\n    return \n"


def complete(lowest: float | None, min_confidence: float) -> str | None:
    request = CompletionRequest(SOURCE, SOURCE.index("\n", 10), language_for("python"))
    pipeline = Pipeline(Scored(("x + 1", lowest)), Settings(min_confidence=min_confidence))
    completion = pipeline.complete(request)
    return None if completion is None else completion.text


def test_the_gate_hides_what_the_model_is_unsure_of_and_zero_shows_everything():
    assert complete(0.3, 0.45) is None
    assert complete(0.45, 0.45) == "x + 1"
    assert complete(0.3, 0.0) == "x + 1"
    assert complete(0.0, 0.0) == "x + 1"
    assert complete(None, 0.9) == "x + 1"  # an old engine's draft has no score: shown


def test_min_confidence_is_a_setting_in_the_bounds_table():
    settings, errors = parse_settings({"minConfidence": 0.45})
    assert (settings.min_confidence, errors) == (0.45, [])
    settings, errors = parse_settings({"minConfidence": 1.5})
    assert errors == ["minConfidence: expected a finite number in 0..1, got 1.5"]
    assert settings.min_confidence == Settings().min_confidence


WORDS = "def word_count(text):\n    return len(text.split())\n"
NEW = "def word_count(text):\n    return len(text.split(' '))"


def test_an_edit_the_model_is_unsure_of_is_refused_with_the_scores():
    d = doc(WORDS)
    target = target_of(d, 0, len(WORDS))
    with pytest.raises(RewriteError) as refused:
        compute_edit(Scored((NEW, 0.31)), d, target, Settings(min_edit_confidence=0.45), None,
                     1.0)
    assert str(refused.value) == "the model is not confident in this edit (0.31 < 0.45)"
    edit = compute_edit(Scored((NEW, 0.31)), d, target, Settings(min_edit_confidence=0.0),
                        None, 1.0)
    assert edit.text == NEW
    assert gate.refusal(Score(0.31, 0.5, 1, 1), 0.45) == str(refused.value)


# -- over LSP ---------------------------------------------------------------------------------

# `dg-lsp serve` whose engine writes the given (text, lowest confidence) pairs (argv[1]).
SCORED_SERVER = """
import json, sys
from dg_lsp.server import create_server
from tests.test_gate import Scored
create_server(Scored(*[tuple(w) for w in json.loads(sys.argv[1])])).start_io()
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
    wire = scored_server([("x + 1", 0.3), ("x + 2", 0.6), ("x + 3", 0.3), ("x + 4", 0.6)],
                         0.45)
    try:
        assert inline_texts(wire, "file:///tmp/low.py", SOURCE) == []
        assert inline_texts(wire, "file:///tmp/high.py", SOURCE) == ["x + 2"]
        assert list_texts(wire, "file:///tmp/low2.py", SOURCE) == []
        assert list_texts(wire, "file:///tmp/high2.py", SOURCE) == ["x + 4"]
    finally:
        wire.close()
    wire = scored_server([("x + 1", 0.3)], 0.0)
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


# -- the bench's curve and rule ---------------------------------------------------------------


def test_the_curve_and_the_rule_that_picks_the_default():
    from dg_lsp.bench_gate import Shown, choose, curve

    rows = [Shown("c", "after =", 0.9, True, 1.0), Shown("c", "after =", 0.6, False, 0.5),
            Shown("c", "new line", 0.5, True, 1.0), Shown("c", "new line", 0.2, False, 0.0),
            Shown("c", "new line", 0.1, False, 0.2), Shown("c", "new line", None, False, 0.0)]
    points = curve(rows, (0.0, 0.3, 0.55, 0.8))
    assert [(p["shown"], p["exactMatch"], p["editSimilarity"], p["rightPerWrong"])
            for p in points] == [(5, 0.4, 0.54, 0.667), (3, 0.667, 0.833, 2.0),
                                 (2, 0.5, 0.75, 1.0), (1, 1.0, 1.0, None)]
    # 0.8 is the most precise but shows 1 of 6 cursors (under a third): 0.3 shows half
    assert choose(points) == 0.3
