"""Where the file or the repository holds texts at the cursor's place (Context.candidates),
the engine scores them with its first pass and the judge picks one or none
(dg_lsp.completion.judge); when it picks none, the model's writing of that same request is
what is shown (dg_lsp.completion.pipeline)."""

from __future__ import annotations

import json

import pytest

from dg_lsp.completion import pipeline as pipeline_module
from dg_lsp.completion.judge import FEATURES, MODEL_FEATURES, Judge, all_model_inputs, judge
from dg_lsp.completion.pipeline import CompletionRequest, Pipeline
from dg_lsp.document.gate import Calibrator
from dg_lsp.repository.candidates import FILE, LINE, TOKENS, Candidate
from dg_lsp.settings import Settings
from dg_lsp.syntax.languages import language_for
from engine.types import Draft, InfillRequest, Score, last_draft
from tests.support.scripted import Scripted

SOURCE = ("def pairs(iterable):\n    it = iter(iterable)\n    return zip(it, it)\n\n"
          "def firsts(iterable):\n    it = \n    return next(it)\n")
CURSOR = SOURCE.index("it = \n") + len("it = ")
FREE = Score(0.2, 0.5, 4, 5)
SURE, UNSURE = (0.0, 0.0, 0.0, 0.0), (-20.0, -20.0, -20.0, -20.0)


def mean_logprob_judge() -> Judge:
    """A judge of one input: p = sigmoid(mean log-probability + 3), picking at 0.5."""
    count = len(FEATURES)
    weight = [1.0 if name == "mean_logprob" else 0.0 for name in FEATURES]
    return Judge(Calibrator((0.0,) * count, (1.0,) * count, tuple(weight), 3.0), 0.5, 0.5)


@pytest.fixture(autouse=True)
def simple_judge(monkeypatch):
    monkeypatch.setattr(pipeline_module, "judge", mean_logprob_judge)


def engine(first: tuple[float, ...] | None, free: str = "next(it)") -> Scripted:
    """A backend whose first draft scores the one candidate `first` (None: no scores, as a
    family that cannot score answers), then writes `free` in 5 passes."""
    scores = () if first is None else (first,)
    return Scripted([Draft(step=1, token_ids=[], committed=0, text="", choice_logprobs=scores),
                     Draft(step=5, token_ids=[], committed=3, text=free, done=True,
                           finish_reason="unit", score=FREE)])


def complete(backend, offset: int = CURSOR, source: str = SOURCE):
    request = CompletionRequest(source, offset, language_for("python"))
    pipeline = Pipeline(backend, Settings(min_confidence=0.0))
    ctx, drafts = pipeline.start(request)
    last = last_draft(drafts)
    return pipeline.finish(request, ctx, last), last


def test_a_candidate_the_judge_picks_is_shown_and_the_engine_stops_after_one_pass():
    backend = engine(SURE)
    completion, last = complete(backend)
    (asked,) = backend.requests
    assert (asked.choices, asked.judge) == (("iter(iterable)",), True)
    assert (completion.text, completion.steps, last.finish_reason) == ("iter(iterable)", 1,
                                                                       "judged")
    assert completion.confidence == pytest.approx(1 / (1 + 2.718281828459045 ** -3))
    assert backend.taken == 1 and backend.closed == [asked]  # the second pass never read


def test_where_the_judge_picks_none_the_same_request_writes_the_hole():
    backend = engine(UNSURE)
    completion, last = complete(backend)
    assert len(backend.requests) == 1
    assert (completion.text, completion.steps, last.score) == ("next(it)", 5, FREE)


def test_a_family_that_scores_none_is_judged_on_the_evidence_alone():
    # the model's inputs at their means (0 here): p = sigmoid(3), picked
    completion, _ = complete(engine(None))
    assert completion.text == "iter(iterable)"


def test_where_no_line_holds_a_text_one_request_without_choices():
    source = SOURCE.replace("    it = iter(iterable)\n", "    xs = iter(iterable)\n")
    backend = Scripted(("next(it)", None))
    completion, _ = complete(backend, source.index("it = \n") + 5, source)
    assert completion.text == "next(it)"
    assert [(r.choices, r.judge) for r in backend.requests] == [(None, False)]


def test_a_cancelled_request_shows_nothing():
    backend = Scripted([Draft(step=1, token_ids=[], committed=0, text="", done=True,
                              finish_reason="cancelled")])
    assert complete(backend)[0] is None and len(backend.requests) == 1


def test_a_request_closed_while_the_model_writes_closes_the_engines_stream():
    backend = engine(UNSURE)
    pipeline = Pipeline(backend, Settings(min_confidence=0.0))
    _, drafts = pipeline.start(CompletionRequest(SOURCE, CURSOR, language_for("python")))
    assert next(drafts).step == 1
    assert backend.closed == []
    drafts.close()  # the editor moved on
    assert len(backend.closed) == 1


def test_a_pick_the_user_asks_fewer_of_is_hidden_in_proportion():
    judge_ = mean_logprob_judge()
    # at the default minConfidence the pick's threshold is the judge's own (0.5)
    assert not judge_.hides(0.5, False, 0.15) and judge_.hides(0.49, False, 0.15)
    assert judge_.hides(0.9, False, 0.3) and not judge_.hides(1.0, False, 0.3)
    assert not judge_.hides(0.0, False, 0.0)  # the gate off


def test_the_model_inputs_compare_each_candidate_with_the_best_and_the_models_pick():
    top = (-0.25, -0.5, -0.1)
    inputs = all_model_inputs([(-1.0, -3.0, -0.5), (), (-0.5, -0.5, -0.1)], top)
    assert len(inputs[0]) == len(MODEL_FEATURES) and inputs[1] == []
    # mean, first, lowest, end, log(tokens), mean - best mean, first - best first,
    # mean and first of (token - the model's pick there)
    assert inputs[0][:4] == [-2.0, -1.0, -3.0, -0.5]
    assert inputs[0][5:] == [-1.5, -0.5, -1.625, -0.75] and inputs[2][5:] == [0.0, 0.0, -0.125,
                                                                              -0.25]
    assert all_model_inputs([(-1.0, -0.5)])[0][7:] == [0.0, 0.0]  # no top: no gap


def test_the_shipped_judge_prefers_what_the_model_is_sure_of_and_the_longer_match():
    shipped = judge()
    strong = Candidate("iter(iterable)", (LINE, TOKENS), FILE, 6, 3, 40)
    weak = Candidate("iter(xs)", (TOKENS,), FILE, 2, 1, 4000)
    sure, unsure = shipped.probabilities([strong, weak], [SURE, UNSURE], False)
    assert sure > unsure
    assert 0 < shipped.threshold < 1 and 0 < shipped.line_start_threshold < 1
    picked = shipped.pick([strong, weak], [SURE, UNSURE], False)
    assert picked is not None and picked[0] is strong


def test_a_judged_request_scores_each_choice_and_writes_as_an_unjudged_one(bundled_engine):
    """Through the real engine: the first draft holds each choice's log-probabilities
    (one per token, then the end's); the drafts are those of the same request unjudged (the
    judging reads the first pass and commits nothing of its own)."""
    prefix = SOURCE[:CURSOR]
    plain = InfillRequest(prefix, SOURCE[CURSOR:], 16)
    judged = InfillRequest(prefix, SOURCE[CURSOR:], 16, choices=("iter(iterable)", "x" * 400),
                           judge=True)
    plain_drafts = list(bundled_engine.infill_stream(plain))
    judged_drafts = list(bundled_engine.infill_stream(judged))
    first, top = judged_drafts[0].choice_logprobs, judged_drafts[0].top_logprobs
    tokens = bundled_engine.decoder.tokenize_choices(["iter(iterable)"], "")[0]
    assert len(first) == 2 and len(first[0]) == len(tokens) + 1 and first[1] == ()
    assert len(top) == 16 and all(v <= best <= 0 for v, best
                                  in zip(first[0][:-1], top[:len(tokens)], strict=True))
    assert [(d.token_ids, d.text) for d in judged_drafts] == [
        (d.token_ids, d.text) for d in plain_drafts]
    assert all(d.choice_logprobs == () for d in judged_drafts[1:])


def test_a_fit_on_cursors_whose_right_candidate_the_model_is_sure_of_picks_it(tmp_path):
    from dg_lsp.measure import judge_fit

    def row(number: int) -> dict:
        right = {"text": "a", "sources": ["line"], "where": "file", "match": 2, "count": 1,
                 "distance": 10, "logprobs": [-0.1, -0.2], "right": True}
        wrong = {**right, "text": "b", "logprobs": [-6.0, -0.2], "right": False}
        pair = [right, wrong] if number % 2 else [wrong, right]
        if number % 5 == 0:  # the model unsure of both, and neither right
            pair = [{**c, "logprobs": [-6.0, -0.2], "right": False} for c in pair]
        return {"id": f"p/m.py:{number}", "kind": "after =", "line_start": False,
                "free_shown": False, "free_right": False, "candidates": pair}

    data = judge_fit.fit([row(n) for n in range(60)])
    path = tmp_path / "judge.json"
    path.write_text(json.dumps(data))
    fitted = judge(path)
    a = Candidate("a", (LINE,), FILE, 2, 1, 10)
    b = Candidate("b", (LINE,), FILE, 2, 1, 10)
    picked = fitted.pick([b, a], [(-6.0, -0.2), (-0.1, -0.2)], False)
    assert picked is not None and picked[0] is a
    assert fitted.pick([a, b], [(-6.0, -0.2), (-6.0, -0.2)], False) is None


def unsure_judge() -> Judge:
    """mean_logprob_judge, sure of nothing: every pick waits for the model's writing."""
    return Judge(mean_logprob_judge().calibrator, 0.5, 0.5, 1.0, 1.0)


def test_a_pick_the_judge_is_not_sure_of_yields_to_the_models_writing_the_gate_shows(
        monkeypatch):
    monkeypatch.setattr(pipeline_module, "judge", unsure_judge)
    backend = engine(SURE)
    completion, last = complete(backend)
    assert (completion.text, completion.steps) == ("next(it)", 5)
    assert last.text == "iter(iterable)" and last.written.text == "next(it)"
    assert backend.taken == 2  # the whole of the model's writing was read


def test_where_the_gate_hides_the_models_writing_the_unsure_pick_is_shown(monkeypatch):
    monkeypatch.setattr(pipeline_module, "judge", unsure_judge)
    request = CompletionRequest(SOURCE, CURSOR, language_for("python"))
    # the gate's calibrator gives the writing (FREE) 0.09: hidden at 0.15, the default
    pipeline = Pipeline(engine(SURE), Settings())
    ctx, drafts = pipeline.start(request)
    decided = pipeline.decide(request, ctx, last_draft(drafts))
    assert (decided.text, decided.confidence) == ("iter(iterable)",
                                                  pytest.approx(0.9525741268224334))
    assert decided.below_gate is False
