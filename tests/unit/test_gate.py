"""The confidence gate (issue #32): the engine scores what it commits, the score travels with
the draft (in process and over the wire alike), and a completion or edit the model is not
sure of is not shown: a completion by the calibrator's probability
(dg_lsp.document.gate.Calibrator,
fitted by dg_lsp.measure.gate_fit), an edit by its least confident token."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from dg_lsp.actions.rewrite import compute_edit
from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.document import gate
from dg_lsp.document.edit import RewriteError
from dg_lsp.settings import Settings, parse_settings
from dg_lsp.syntax.languages import language_for
from engine.decode.denoise import advance
from engine.serve.socket import protocol
from engine.types import Draft, InfillRequest, SamplerSettings, Score, score_of
from tests.support.scripted import Scripted
from tests.support.targets import doc, target_of


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
    denoiser = dream.sequence(InfillRequest("x=1\n", "\n", 3, settings))
    vocab = dream.decoder.model.cfg.vocab_size
    # Two tokens the first position may take (the cursor's token is healed: the first token
    # must start with its text).
    first = denoiser.rules.constraints.first
    allowed = first if first is not None else torch.ones(vocab)
    a, b = (int(i) for i in allowed.nonzero()[:2, 0])
    (stop,) = sorted(denoiser.rules.stop_ids)[:1]
    first = advance(dream.model, denoiser,
                    sure_of(vocab, 3, [{a: 0.8, b: 0.2}, {b: 0.6, a: 0.4}, {b: 0.5, a: 0.5}]))
    assert first.score == Score(0.800000011920929, 0.800000011920929, 1, 1)  # float32 0.8
    second = advance(dream.model, denoiser,
                     sure_of(vocab, 2, [{b: 0.7, a: 0.3}, {a: 0.6, b: 0.4}]))
    third = advance(dream.model, denoiser, sure_of(vocab, 1, [{stop: 0.9, a: 0.1}]))
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


# -- the wire ---------------------------------------------------------------------------------

OLD_FIELDS = {"step", "token_ids", "committed", "text", "done", "finish_reason"}


def test_the_score_travels_beside_the_draft_and_a_family_without_one_sends_none():
    draft = Draft(2, [5, 6], 2, "x", True, "stop", Score(0.25, 0.5, 2, 2))
    message = json.loads(protocol.encode(protocol.draft_message("result", 7, draft))[4:])
    assert set(message["draft"]) == OLD_FIELDS  # the score beside the draft, not in it
    assert message["score"] == {"lowest": 0.25, "mean": 0.5, "tokens": 2, "passes": 2}
    assert protocol.draft_from_wire(message["draft"], message["score"]) == draft
    old = protocol.draft_from_wire(message["draft"])  # a family that records no score
    assert old.score is None
    assert protocol.draft_from_wire(message["draft"], {"lowest": "high"}).score is None


# -- the gate ---------------------------------------------------------------------------------


SOURCE = "def f(x):\n    return \n"


def complete(lowest: float | None, min_confidence: float, text: str = "x + 1") -> str | None:
    request = CompletionRequest(SOURCE, SOURCE.index("\n", 10), language_for("python"))
    pipeline = Pipeline(Scripted((text, lowest)), Settings(min_confidence=min_confidence))
    completion = pipeline.complete(request)
    return None if completion is None else completion.text


# A calibrator made by hand: p = sigmoid(-1 + 4 (lowest - 0.5) - 2 lines + 2 repeated), the
# other inputs weighted 0 (dg_lsp.document.gate.FEATURES: lowest, mean, log_tokens, block,
# log_chars,
# lines, repeated).
HAND_MADE = gate.Calibrator(mean=(0.5, 0, 0, 0, 0, 0, 0), std=(0.25, 1, 1, 1, 1, 1, 1),
                            weight=(1.0, 0, 0, 0, 0, -2.0, 2.0), bias=-1.0)


@pytest.fixture
def hand_made(monkeypatch):
    monkeypatch.setattr(gate, "calibrator", lambda: HAND_MADE)


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


def test_the_gate_hides_what_the_calibrator_is_unsure_of_and_zero_shows_everything(hand_made):
    # "x + 1", one line: p = sigmoid(-1 + 4 (lowest - 0.5))
    assert gate.confidence(Score(0.75, 0.9, 3, 3), "rest_of_line", "x + 1", False) == sigmoid(0.0)
    assert gate.confidence(Score(0.5, 0.9, 3, 3), "rest_of_line", "x + 1", False) == sigmoid(-1.0)
    assert complete(0.5, 0.3) is None  # 0.269 < 0.3
    assert complete(0.75, 0.3) == "x + 1"  # 0.5
    assert complete(0.75, 0.5) == "x + 1"  # at the threshold: shown
    assert complete(0.75, 0.51) is None
    assert complete(0.5, 0.0) == "x + 1"
    assert complete(0.0, 0.0) == "x + 1"
    assert complete(None, 0.9) == "x + 1"  # an unscored draft (AR, block): shown
    assert not gate.hides(None, 0.9)  # unscored
    assert not gate.hides(gate.confidence(Score(0.0, 0.0, 1, 1), "block", "x", False), 0.0)


def test_the_gate_reads_the_suggestion_as_post_processed_not_the_raw_draft(hand_made):
    """The model writes two lines at a rest-of-line hole; the suggestion is the first (the
    unit): the calibrator sees 0 lines, p = 0.5, not sigmoid(-2) for the raw text's line."""
    assert complete(0.75, 0.4, text="x + 1\n    return y") == "x + 1"
    assert gate.hides(gate.confidence(Score(0.75, 0.9, 3, 3), "block", "x + 1\ny", False),
                      0.4)  # sigmoid(-2) = 0.12


def test_the_calibrators_features_of_hand_made_completions():
    assert gate.FEATURES == ("lowest", "mean", "log_tokens", "block", "log_chars", "lines",
                             "repeated")
    assert gate.features(Score(0.25, 0.5, 3, 4), "rest_of_line", "x + 1", False) == [
        0.25, 0.5, math.log(4), 0.0, math.log(6), 0.0, 0.0]
    assert gate.features(Score(0.5, 0.75, 0, 2), "block", "if x:\n    y\n", False) == [
        0.5, 0.75, 0.0, 1.0, math.log(13), 2.0, 0.0]
    assert gate.features(Score(1.0, 1.0, 0, 1), "brackets", "", True) == [
        1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]


def test_the_shipped_calibrator_loads_and_reads_more_confidence_as_more_likely_right():
    data = json.loads(gate.CALIBRATOR_FILE.read_text())
    model = gate.calibrator()
    assert data["features"] == list(gate.FEATURES)
    assert len(model.weight) == len(model.mean) == len(model.std) == len(gate.FEATURES)
    assert all(s > 0 for s in model.std)
    assert data["label"] == "similar"
    assert data["refit"].startswith("python -m dg_lsp.measure.gate_fit")
    assert gate.Calibrator.from_json(model.to_json()) == model
    lowest, mean = (model.weight[gate.FEATURES.index(f)] for f in ("lowest", "mean"))
    assert lowest > 0 and mean > 0
    sure = gate.confidence(Score(0.9, 0.95, 4, 4), "rest_of_line", "x + 1", False)
    unsure = gate.confidence(Score(0.05, 0.3, 4, 4), "rest_of_line", "x + 1", False)
    assert 0 < unsure < Settings().min_confidence < sure < 1
    with pytest.raises(ValueError, match="features"):
        gate.Calibrator.from_json({**data, "features": ["lowest"]})


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
        compute_edit(Scripted((NEW, 0.31)), d, target, Settings(min_edit_confidence=0.45), None,
                     1.0)
    assert str(refused.value) == "the model is not confident in this edit (0.31 < 0.45)"
    edit = compute_edit(Scripted((NEW, 0.31)), d, target, Settings(min_edit_confidence=0.0),
                        None, 1.0)
    assert edit.text == NEW
    assert gate.refusal(Score(0.31, 0.5, 1, 1), 0.45) == str(refused.value)


# -- the bench's curve and rule ---------------------------------------------------------------


def test_the_curve_and_the_rule_that_picks_the_default():
    from dg_lsp.measure.bench_gate import Shown, choose, curve

    rows = [Shown("c", "after =", 0.9, True, 1.0), Shown("c", "after =", 0.6, False, 0.5),
            Shown("c", "new line", 0.5, True, 1.0), Shown("c", "new line", 0.2, False, 0.0),
            Shown("c", "new line", 0.1, False, 0.2), Shown("c", "new line", None, False, 0.0)]
    points = curve(rows, (0.0, 0.3, 0.55, 0.8))
    assert [(p["shown"], p["exactMatch"], p["editSimilarity"], p["rightPerWrong"])
            for p in points] == [(5, 0.4, 0.54, 0.667), (3, 0.667, 0.833, 2.0),
                                 (2, 0.5, 0.75, 1.0), (1, 1.0, 1.0, None)]
    # 0.8 is the most precise but shows 1 of 6 cursors (under a third): 0.3 shows half
    assert choose(points) == 0.3


def test_the_bench_scores_each_cursor_as_the_gate_does(hand_made):
    from dg_lsp.measure.bench_gate import Shown, calibrated, choose, curve

    def row(lowest: float | None, exact: bool, text: str = "x") -> Shown:
        return Shown("c", "after =", lowest, exact, 1.0 if exact else 0.5, lowest, text,
                     tokens=2, passes=2, hole="rest_of_line", line_prefix="y = ", text=text)

    rows = [row(0.75, True), row(0.75, False, "a\nb"), row(0.5, False), row(None, False)]
    assert rows[0].features() == gate.features(Score(0.75, 0.75, 2, 2), "rest_of_line", "x", False)
    assert rows[3].features() is None and calibrated(rows[3]) is None
    # p: 0.5, sigmoid(-2) = 0.119, sigmoid(-1) = 0.269
    points = curve(rows, (0.0, 0.2, 0.4), calibrated)
    assert [(p["shown"], p["exactMatch"]) for p in points] == [(3, 0.333), (2, 0.5), (1, 1.0)]
    assert choose(points) == 0.2  # 0.4 shows 1 of 4 cursors, under a third
    # A line start is held to half the threshold: the bench counts it as the gate decides.
    start = dataclasses.replace(rows[2], kind="new line", line_prefix="    ")
    assert calibrated(start) == 2 * calibrated(rows[2])
    assert [p["shown"] for p in curve([start], (0.2, 0.4, 0.6), calibrated)] == [1, 1, 0]


def test_a_line_start_is_gated_at_half_the_threshold(hand_made):
    assert gate.is_line_start("    ", "rest_of_line") and gate.is_line_start("", "rest_of_line")
    assert gate.is_line_start("def f():", "block")
    assert not gate.is_line_start("    x = ", "rest_of_line")
    assert gate.threshold(0.15, True) == 0.075 and gate.threshold(0.15, False) == 0.15
    unsure = Score(0.5, 0.9, 3, 3)  # "x + 1": p = sigmoid(-1) = 0.269
    p = gate.confidence(unsure, "rest_of_line", "x + 1", False)
    assert gate.hides(p, 0.3)
    assert not gate.hides(p, 0.3, line_start=True)
    assert gate.hides(p, 0.6, line_start=True)
    # Through the pipeline: the cursor after a new line's indentation, then mid-line.
    for source, shown in (("def f(x):\n    \n", "x + 1"), (SOURCE, None)):
        request = CompletionRequest(source, source.index("\n", 10), language_for("python"))
        pipeline = Pipeline(Scripted(("x + 1", 0.5)), Settings(min_confidence=0.3))
        completion = pipeline.complete(request)
        assert (completion.text if completion else None) == shown


def test_the_rule_keeps_every_cursor_group_above_its_floor():
    from dg_lsp.measure.bench_gate import choose

    def point(threshold: float, shown_rate: float, exact: float) -> dict:
        return {"minConfidence": threshold, "shownRate": shown_rate, "exactMatch": exact}

    pooled = [point(0.1, 0.6, 0.2), point(0.2, 0.4, 0.3), point(0.3, 0.35, 0.4)]
    assert choose(pooled) == 0.3
    # a group shown at under a fifth at 0.3 rules it out; at 0.2 it keeps a fifth
    group = [point(0.1, 0.5, 0.0), point(0.2, 0.2, 0.0), point(0.3, 0.1, 0.0)]
    assert choose(pooled, [group]) == 0.2


# -- the calibrator's fit (dg_lsp.measure.gate_fit) ------------------------------------------------


def test_the_fit_recovers_a_logistic_rule_and_writes_what_the_gate_loads(tmp_path):
    import numpy as np

    from dg_lsp.measure import gate_fit

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2))
    y = (rng.random(400) < 1 / (1 + np.exp(-(0.5 + 2 * x[:, 0] - x[:, 1])))).astype(float)
    w = gate_fit.logistic(x, y, penalty=0.0)
    assert np.allclose(w, [0.5, 2.0, -1.0], atol=0.4)
    assert gate_fit.auc(np.array([0.9, 0.1, 0.8, 0.8]), np.array([1, 0, 0, 1])) == 0.875

    rows = []
    for i in range(200):
        lowest = (i % 20) / 20
        rows.append({"id": f"after =/a.py:{i}:{i}", "kind": "after =", "lowest": lowest,
                     "exact": lowest > 0.8, "similarity": 1.0 if lowest > 0.6 else 0.2,
                     "mean": min(1.0, lowest + 0.2), "shown": "x", "tokens": 2 + i % 5,
                     "passes": 3, "hole": "block" if i % 7 == 0 else "rest_of_line",
                     "line_prefix": "y = ", "text": "x" * (1 + i % 9),
                     "finish_reason": "stop"})
    rows.append({**rows[0], "id": "new line/a.py:9:200", "lowest": None})  # no suggestion
    model, meta = gate_fit.fit(rows, report=lambda line: None)
    assert (meta["suggestions"], meta["label"], meta["positive_share"]) == (200, "similar", 0.35)
    assert meta["cv_auc"] > 0.95 and model.weight[0] > 0
    path = tmp_path / "calibrator.json"
    path.write_text(json.dumps(model.to_json(**meta)))
    assert gate.calibrator.__wrapped__(path) == model


def test_the_fit_reads_only_the_training_split_of_the_standard_library(tmp_path):
    from dg_lsp.measure import gate_fit
    from engine.train.corpus import FORBIDDEN, split_of

    folder = gate_fit.training_folder(tmp_path)
    linked = [p for p in folder.rglob("*.py")]
    assert len(linked) > 100
    for path in linked:
        rel = path.relative_to(folder).as_posix()
        assert split_of(rel) == "train" and not FORBIDDEN.search(str(path.resolve()))
        assert "site-packages" not in path.resolve().parts


def test_the_bench_times_the_shipped_calibrator_on_a_suggestion():
    from dg_lsp.measure.bench_gate import calibrator_cost_ms

    assert calibrator_cost_ms(repeats=5) > 0  # it runs the calibrator as the server calls it

